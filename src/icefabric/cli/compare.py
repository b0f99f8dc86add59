"""``icefab compare nccl-tests FILE [SCENARIO]``: a measured nccl-tests table beside the
simulation of the same collective, sizes and ranks on a scenario's fabric."""

from __future__ import annotations

from pathlib import Path

import typer

from icefabric.cli.common import command_line, console, fail


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Compare measurements with simulations.", no_args_is_help=True)
    group.command("nccl-tests")(nccl_tests)
    app.add_typer(group, name="compare")


def nccl_tests(
    file: Path = typer.Argument(..., help="nccl-tests output (optionally with NCCL INFO "
                                "lines)."),
    scenario: str = typer.Argument(None, help="Scenario whose fabric to simulate on "
                                   "(default: the built-in default)."),
    policies: str = typer.Option("ecmp,ideal", "--policies", "-p"),
    server: str = typer.Option("hgx-h100", "--server", help="Server profile of the hosts."),
    json_out: bool = typer.Option(False, "--json"),
    draws: int = typer.Option(None, "--draws", "-n", min=1, help="Draws of the randomised "
                              "policies (default: the scenario's, else DEFAULT_DRAWS)."),
):
    """Put measured busbw per size beside the simulated busbw of each policy: for the
    randomised ones (ECMP family) the median and p10-p90 over the draws, and whether the
    measurement falls inside that range."""
    import json

    from rich.table import Table

    from icefabric.collect.nccl_tests import measured_table, read_nccl_tests
    from icefabric.experiment.draws import effective_draws
    from icefabric.experiment.fromlog import scenario_from_log
    from icefabric.experiment.runner import run_scenario
    from icefabric.scenario.loader import DEFAULT_SCENARIO, ScenarioError, load
    from icefabric.units import format_size

    if not file.exists():
        fail(f"no such file: {file}")
    run = read_nccl_tests(file).first_with_rows()
    if run is None:
        fail(f"{file}: no nccl-tests result rows found")
    measured = measured_table(run)
    pols = [p.strip() for p in policies.split(",") if p.strip()]
    try:
        base = load(scenario or DEFAULT_SCENARIO)
        ls, job = scenario_from_log(base, [file], server=server,
                                    sizes=measured["sizes_bytes"])
        res = run_scenario(ls, policies=pols, draws=effective_draws(draws, ls.scenario))
    except (ScenarioError, ValueError) as e:
        fail(str(e))
    sim = {(r["policy"], r["size_bytes"]): r for r in res.rows}
    rows = []
    for size, t, bw in zip(measured["sizes_bytes"], measured["time_us"],
                           measured["busbw_GBps"]):
        row = {"size_bytes": size, "measured_time_us": t, "measured_busbw_GBps": bw}
        for p in pols:
            r = sim.get((p, size))
            row[f"{p}_busbw_GBps"] = r["busbw_GBps"] if r else None
            row[f"{p}_vs_measured"] = (round(r["busbw_GBps"] / bw, 4) if r and bw else None)
            if r and r.get("busbw_GBps_p10") is not None:
                lo, hi = r["busbw_GBps_p10"], r["busbw_GBps_p90"]
                row.update({f"{p}_busbw_GBps_p10": lo, f"{p}_busbw_GBps_p90": hi,
                            f"{p}_measured_inside": lo <= bw <= hi})
        rows.append(row)
    if json_out:
        typer.echo(json.dumps({"file": str(file), "collective": measured["collective"],
                               "nranks": measured["nranks"], "scenario": res.scenario,
                               "draws": res.draws, "rows": rows,
                               "scenario_text": res.scenario_text,
                               "provenance": {**res.provenance, "command": command_line()}},
                              indent=1))
        return
    t = Table(title=f"{file.name}: {measured['collective']} on {measured['nranks']} ranks — "
              f"measured vs simulated on {base.scenario.name}'s fabric (busbw GB/s; "
              f"ECMP family: median, p10-p90 over {res.draws} draws)",
              title_justify="left")
    t.add_column("size", justify="right")
    t.add_column("measured", justify="right")
    for p in pols:
        t.add_column(p, justify="right")
    for row in rows:
        cells = [format_size(row["size_bytes"]), f"{row['measured_busbw_GBps']:.2f}"]
        for p in pols:
            v, ratio = row[f"{p}_busbw_GBps"], row[f"{p}_vs_measured"]
            rng = (f" [{row[f'{p}_busbw_GBps_p10']:.1f}-{row[f'{p}_busbw_GBps_p90']:.1f}]"
                   if f"{p}_busbw_GBps_p10" in row else "")
            cells.append("-" if v is None else f"{v:.2f}{rng} (x{ratio:.2f})")
        t.add_row(*cells)
    console.print(t)
