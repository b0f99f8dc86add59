"""``icefab scenarios``, ``icefab scenario show|check|docs`` and ``icefab catalog``."""

from __future__ import annotations

from pathlib import Path

import typer

from icefabric.cli.common import console, fail


def register(app: typer.Typer) -> None:
    app.command("scenarios")(list_scenarios)
    group = typer.Typer(help="Inspect scenarios.", no_args_is_help=True)
    group.command("show")(show)
    group.command("check")(check)
    group.command("docs")(docs)
    app.add_typer(group, name="scenario")
    app.command("catalog")(catalog)


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
    """Validate a scenario (schema, references, topology, policy names and options)
    without running it, and say what it holds."""
    from icefabric.pipeline.plans import scenario_policy, scenario_workload
    from icefabric.policies.base import PolicyError
    from icefabric.scenario.build import build_fabric, build_training
    from icefabric.scenario.loader import ScenarioError, load

    try:
        ls = load(path)
        for i, name in enumerate(ls.scenario.policies):
            try:
                scenario_policy(ls, name)
            except PolicyError as e:
                raise ls.error(("policies", i), str(e)) from None
        fabric = build_fabric(ls)
        what = []
        if ls.scenario.jobs:
            wl = scenario_workload(ls, fabric, ls.scenario.size_list()[0]).workload
            what.append(f"workload {wl.summary()}")
        if ls.scenario.training is not None:
            from icefabric.reports.training import describe_plan

            tw = build_training(ls, fabric)
            what.append(f"training {ls.scenario.training.name}: "
                        f"{describe_plan(tw.summary)}, workload {tw.workload.summary()}")
    except ScenarioError as e:
        fail(str(e))
    console.print(f"ok: {ls.scenario.name}: {fabric.describe()['nodes']}, "
                  f"policies {', '.join(ls.scenario.policies)}; " + "; ".join(what),
                  highlight=False)


def docs(out: Path = typer.Option(None, "--out", "-o", help="Write to this file (the "
                                  "repository keeps it as docs/scenarios.md, and with "
                                  "--sweeps as docs/sweeps.md) instead of stdout."),
         sweeps: bool = typer.Option(False, "--sweeps", help="The sweep file reference "
                                     "instead.")):
    """Print the scenario file reference (every field, type, default, unit, example),
    generated from the schema; with --sweeps the sweep file reference."""
    if sweeps:
        from icefabric.sweeps.docs import sweep_docs as make
    else:
        from icefabric.scenario.docs import scenario_docs as make

    text = make()
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        console.print(f"wrote {out}", highlight=False)


def catalog(json_out: bool = typer.Option(False, "--json")):
    """List the server, NIC and switch profiles that scenarios name."""
    import json

    from rich.table import Table

    from icefabric.topology.catalog import SERVERS, SWITCHES

    servers = [{"name": p.name, "vendor": p.vendor, "accelerator": p.accelerator,
                "accelerators": p.n_accel, "nics": p.n_nics, "nic_gbps": p.nic_bps / 1e9,
                "nic": p.nic_vendor, "scale_up_gbps": p.intra_bps / 1e9,
                "library": p.library, "source": p.source} for p in SERVERS.values()]
    nics: dict[tuple[str, float], list[str]] = {}
    for s in servers:
        nics.setdefault((s["nic"], s["nic_gbps"]), []).append(s["name"])
    nic_rows = [{"nic": n, "gbps": g, "servers": names} for (n, g), names in nics.items()]
    switches = [{"name": p.name, "asic": p.asic, "ports": p.radix,
                 "port_gbps": p.port_bps / 1e9, "buffer_MiB": p.buffer_bytes / 2**20,
                 "hash": p.hash_algorithm, "source": p.source} for p in SWITCHES.values()]
    if json_out:
        typer.echo(json.dumps({"servers": servers, "nics": nic_rows, "switches": switches},
                              indent=1))
        return
    t = Table(title="Servers (pools: server: NAME)", title_justify="left")
    for c in ("name", "accelerators", "NICs", "scale-up / accel", "library"):
        t.add_column(c, overflow="fold")
    for s in servers:
        t.add_row(s["name"], f"{s['accelerators']} x {s['vendor']} {s['accelerator']}",
                  f"{s['nics']} x {s['nic_gbps']:g}G", f"{s['scale_up_gbps']:g} Gb/s",
                  s["library"])
    console.print(t)
    t = Table(title="NICs (per server profile; override the speed with a pool's nic_gbps)",
              title_justify="left")
    for c in ("NIC", "speed", "servers"):
        t.add_column(c, overflow="fold")
    for n in nic_rows:
        t.add_row(n["nic"], f"{n['gbps']:g}G", ", ".join(n["servers"]))
    console.print(t)
    t = Table(title="Switches (fabric: leaf_switch / spine_switch / core_switch)",
              title_justify="left")
    for c in ("name", "ASIC", "ports", "buffer", "ECMP hash"):
        t.add_column(c, overflow="fold")
    for s in switches:
        t.add_row(s["name"], s["asic"], f"{s['ports']} x {s['port_gbps']:g}G",
                  f"{s['buffer_MiB']:g} MiB", s["hash"])
    console.print(t)
