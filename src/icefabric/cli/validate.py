"""``icefab validate``: our engines against the packet-level reference set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

#: The public reference set, vendored in the repository (from shared/reference/validation).
_VENDORED_REL = Path("data") / "validation"


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def resolve_dir(folder: Path | None) -> tuple[Path, bool]:
    """(folder, is_default): DIR, else the repository's ``data/validation``."""
    if folder is not None:
        return folder, False
    return _repo_root() / _VENDORED_REL, True


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)


def validate(
    folder: Annotated[Path | None, typer.Argument(
        metavar="[DIR]", help="Folder of validation scenarios (*.json). Default: the "
        "repository's data/validation (the public reference set).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON row per scenario x "
                                           "reference x group on stdout.")] = False,
    engine: Annotated[list[str] | None, typer.Option(
        "--engine", "-e", help="Engine(s) to run (repeatable): fluid, flow. Default: both "
        "when available.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the markdown table here (default: VALIDATION.md at the "
        "repository root when run on the default set).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude", help="Scenario name to skip (repeatable).")] = None,
    seeds: Annotated[int, typer.Option(
        "--seeds", min=1, help="DCQCN runs per scenario (stochastic CNPs); the "
        "median is compared.")] = 3,
    before: Annotated[Path | None, typer.Option(
        "--before", help="An earlier run's --json output: the markdown table also "
        "shows each row's error then and how far it moved.")] = None,
) -> None:
    """Compare our engines with the ns-3 / htsim reference runs of each scenario."""
    from rich.console import Console

    from icefabric.engine.validation import (
        load_before,
        row_dict,
        rows_to_markdown,
        validate_dir,
    )

    err = Console(stderr=True)
    path, is_default = resolve_dir(folder)
    if not path.is_dir():
        where = (" (an installed package has no copy: clone the repository and run from "
                 "there, or pass the folder of the reference set's *.json files)"
                 if is_default else "")
        err.print(f"[bold red]error:[/] validation folder not found: {path}{where}",
                  soft_wrap=True)
        raise typer.Exit(2)
    engines = [e.strip() for item in (engine or []) for e in item.split(",") if e.strip()]
    try:
        earlier = load_before(before) if before is not None else None
        rows, errors = validate_dir(path, engines or None, tuple(exclude or ()), seeds)
    except FileNotFoundError as e:
        err.print(f"[bold red]error:[/] {e}")
        raise typer.Exit(2) from None
    except ValueError as e:  # one line, however long the file's path
        err.print(f"[bold red]error:[/] {e}", soft_wrap=True)
        raise typer.Exit(2) from None
    for e in errors:
        err.print(f"[yellow]skipped:[/] {e}")
    target = out if out is not None else (_repo_root() / "VALIDATION.md" if is_default
                                          else None)
    if target is not None:
        target.write_text(rows_to_markdown(rows, errors, earlier))
    if json_out:
        typer.echo(json.dumps([row_dict(r) for r in rows], indent=1))
        return
    _print_rows(rows, path, target)


def _print_rows(rows, path: Path, target: Path | None) -> None:
    """The validation rows as a table, and how many are within their band."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Validation ({path})", show_lines=False)
    for col, just in (("scenario", "left"), ("engine", "left"), ("reference", "left"),
                      ("group", "left"), ("ours µs", "right"), ("ref µs", "right"),
                      ("error", "right"), ("band", "right"), ("ok", "center"),
                      ("cont.", "center"), ("refs Δ%", "right"), ("ours s", "right"),
                      ("ref s", "right")):
        table.add_column(col, justify=just)
    for r in rows:
        table.add_row(r.scenario, r.engine, r.reference, r.group, f"{r.ours_us:.1f}",
                      f"{r.reference_us:.1f}", f"{100 * r.rel_error:+.2f}%",
                      f"{100 * r.band:.0f}%",
                      "[green]yes[/]" if r.within_band else "[red]no[/]",
                      "yes" if r.contended else "no",
                      "" if r.refs_disagree_pct is None else f"{r.refs_disagree_pct:.2f}",
                      f"{r.ours_wall_s:.3f}", f"{r.reference_wall_s:.2f}")
    con = Console() if Console().is_terminal else Console(width=200)
    con.print(table)
    ok = sum(r.within_band for r in rows)
    con.print(f"{ok}/{len(rows)} rows within band"
              + (f"; table written to {target}" if target else ""))
