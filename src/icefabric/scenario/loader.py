"""Loading scenarios with errors that name the field and the file position.

YAML is composed into nodes first so every mapping key and sequence item keeps its line;
pydantic errors (``loc`` tuples) and semantic errors from the builders are mapped back to
``file:line: field.path: message``. Never a traceback for bad input.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from icefabric.errors import IceFabricError
from icefabric.scenario.schema import Scenario


class ScenarioError(IceFabricError, ValueError):
    """Base of the scenario layer's errors: bad scenario input; ``str()`` names the file,
    line and field."""

    def __init__(self, message: str, source: str = "", line: int | None = None,
                 field: str = ""):
        self.source, self.line, self.field, self.reason = source, line, field, message
        where = f"{source}:{line}" if line else source
        loc = f"{field}: " if field else ""
        super().__init__(f"{where}: {loc}{message}" if where else f"{loc}{message}")


def _lines(node, path=(), out=None) -> dict[tuple, int]:
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value
            out[path + (key,)] = k.start_mark.line + 1
            _lines(v, path + (key,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _lines(v, path + (i,), out)
    return out


def _fmt(loc) -> str:
    s = ""
    for part in loc:
        s += f"[{part}]" if isinstance(part, int) else (f".{part}" if s else str(part))
    return s


class LoadedScenario:
    """A validated scenario plus where it came from (for error positions)."""

    def __init__(self, scenario: Scenario, source: str, lines: dict[tuple, int], text: str):
        self.scenario, self.source, self.lines, self.text = scenario, source, lines, text

    def updated(self, **fields) -> LoadedScenario:
        """The same scenario with ``fields`` replaced (error positions kept)."""
        return LoadedScenario(self.scenario.model_copy(update=fields), self.source,
                              self.lines, self.text)

    def error(self, field_path: tuple, message: str) -> ScenarioError:
        """A ScenarioError pointing at the deepest known line of ``field_path``."""
        p = tuple(field_path)
        while p and p not in self.lines:
            p = p[:-1]
        return ScenarioError(message, self.source, self.lines.get(p), _fmt(field_path))


_UNKNOWN_FIELD = ("extra_forbidden", "unexpected_keyword_argument")


def _first_error(e: ValidationError, source: str, lines: dict[tuple, int]) -> ScenarioError:
    """One error for the user: a misspelt field first (in a union of models every other
    branch fails too, so its other errors only add noise), with the branch names dropped
    from the field path."""
    errors = e.errors()
    err = min(errors, key=lambda x: x["type"] not in _UNKNOWN_FIELD)
    loc = _field_path(err["loc"])
    p = loc
    while p and p not in lines:
        p = p[:-1]
    msg = ("unknown field" if err["type"] in _UNKNOWN_FIELD
           else err["msg"].removeprefix("Value error, "))
    parent = loc[:-1]
    n = sum(1 for x in errors if _field_path(x["loc"])[:len(parent)] != parent)
    more = f" (and {n} more errors)" if n else ""
    return ScenarioError(msg + more, source, lines.get(p), _fmt(loc))


def _field_path(loc) -> tuple:
    """``loc`` without pydantic's union-branch names (``PfcParams``, ``literal[...]``)."""
    return tuple(x for x in loc if not (isinstance(x, str) and ("[" in x or x[:1].isupper())))


def loads(text: str, source: str = "<string>") -> LoadedScenario:
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ScenarioError(f"invalid YAML: {getattr(e, 'problem', e)}", source,
                            mark.line + 1 if mark else None) from None
    if not isinstance(data, dict):
        raise ScenarioError("a scenario must be a YAML mapping", source, 1)
    lines = _lines(node) if node is not None else {}
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as e:
        raise _first_error(e, source, lines) from None
    return LoadedScenario(scn, source, lines, text)


def load(path_or_name: str | Path) -> LoadedScenario:
    """Load a scenario file, or a built-in scenario by name."""
    p = Path(path_or_name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        try:
            text = p.read_text()
        except OSError as e:
            raise ScenarioError(f"cannot read scenario file: {e.strerror}", str(p)) from None
        return loads(text, str(p))
    name = str(path_or_name)
    if name in builtin_names():
        return loads(builtin_text(name), f"<builtin:{name}>")
    raise ScenarioError(f"no scenario file or built-in scenario named {name!r}; built-ins: "
                        f"{', '.join(builtin_names())}")


def builtin_names() -> list[str]:
    d = resources.files("icefabric.scenario") / "builtin"
    return sorted(f.name[:-5] for f in d.iterdir() if f.name.endswith(".yaml"))


def builtin_text(name: str) -> str:
    return (resources.files("icefabric.scenario") / "builtin" / f"{name}.yaml").read_text()


DEFAULT_SCENARIO = "hetero-default"
