"""The sweep file reference (docs/sweeps.md), generated from :mod:`icefabric.sweeps.spec`:
its module docstring's format, its :data:`~icefabric.sweeps.spec.FIELDS` and the built-in
sweeps as shipped, so the page cannot drift from what the parser accepts."""

from __future__ import annotations

from icefabric.sweeps import spec


def sweep_docs() -> str:
    """The markdown page ``icefab scenario docs --sweeps`` prints."""
    intro, _, rest = (spec.__doc__ or "").partition("A sweep file is YAML::")
    example, _, after = rest.lstrip("\n").partition("\n\n")
    example = "\n".join(line[4:] for line in example.strip("\n").splitlines())
    lines = ["# Sweep file reference", "",
             "Generated from `src/icefabric/sweeps/spec.py` by `icefab scenario docs --sweeps "
             "--out docs/sweeps.md`; a test keeps it current.", "",
             " ".join(intro.split()), "", "```yaml", example, "```", "",
             "| field | what it holds |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in spec.FIELDS.items()]
    lines += ["", " ".join(after.replace("``", "`").split()), "",
              "`icefab sweep FILE|NAME --out DIR` runs it (`--jobs N` local processes, "
              "`--ray ADDRESS` on Ray); rerunning the same command runs only the missing "
              "points; `icefab report DIR -o sweep.html` draws the report.", ""]
    for name in spec.builtin_sweeps():
        text = spec.builtin_sweep_text(name)
        lines += [f"## Built-in sweep `{name}`", "", "```yaml", text.rstrip("\n"), "```", ""]
    return "\n".join(lines)
