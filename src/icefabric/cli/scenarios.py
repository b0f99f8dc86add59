"""``icefab scenarios`` and ``icefab scenario show NAME``."""

from __future__ import annotations

import typer

from icefabric.cli.common import console, fail


def register(app: typer.Typer) -> None:
    app.command("scenarios")(list_scenarios)
    group = typer.Typer(help="Inspect scenarios.", no_args_is_help=True)
    group.command("show")(show)
    group.command("check")(check)
    app.add_typer(group, name="scenario")


def list_scenarios(json_out: bool = typer.Option(False, "--json")):
    """List the built-in scenarios."""
    import json

    from rich.table import Table

    from icefabric.scenario.loader import DEFAULT_SCENARIO, builtin_names, load

    rows = []
    for name in builtin_names():
        s = load(name).scenario
        rows.append({"name": name, "default": name == DEFAULT_SCENARIO,
                     "fabric": s.fabric.kind, "pools": [p.name for p in s.pools],
                     "jobs": [j.name for j in s.jobs], "description": s.description})
    if json_out:
        typer.echo(json.dumps(rows, indent=1))
        return
    t = Table(title="Built-in scenarios (icefab scenario show NAME)", title_justify="left")
    for c in ("name", "fabric", "jobs", "description"):
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(r["name"] + (" (default)" if r["default"] else ""), r["fabric"],
                  ", ".join(r["jobs"]), r["description"])
    console.print(t)


def show(name: str = typer.Argument(..., help="Built-in scenario name.")):
    """Print a built-in scenario as YAML, to copy and edit."""
    from icefabric.scenario.loader import builtin_names, builtin_text

    if name not in builtin_names():
        fail(f"no built-in scenario {name!r}; built-ins: {', '.join(builtin_names())}")
    typer.echo(builtin_text(name), nl=False)


def check(path: str = typer.Argument(..., help="Scenario file or built-in name.")):
    """Validate a scenario (schema, references, topology) without running it."""
    from icefabric.pipeline.plans import scenario_workload
    from icefabric.scenario.build import build_fabric
    from icefabric.scenario.loader import ScenarioError, load

    try:
        ls = load(path)
        fabric = build_fabric(ls)
        wl = scenario_workload(ls, fabric, ls.scenario.size_list()[0]).workload
    except ScenarioError as e:
        fail(str(e))
    console.print(f"ok: {ls.scenario.name}: {fabric.describe()['nodes']}, "
                  f"workload {wl.summary()}", highlight=False)
