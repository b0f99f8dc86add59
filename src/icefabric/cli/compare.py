"""``icefab compare nccl-tests FILE [SCENARIO]``: a measured nccl-tests table beside the
simulation of the same collective, sizes and ranks on a scenario's fabric."""

from __future__ import annotations

from pathlib import Path

import typer

from icefabric.cli.common import command_line, console, err_console, fail

#: Measured busbw above the best simulated figure by more than this is explained.
ABOVE_MODEL_TOLERANCE = 0.02
#: A measured figure more than this factor outside an ECMP policy's p10-p90 is "far" from
#: the model: a different fabric or algorithm, not an unlucky draw.
FAR_FACTOR = 1.5


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Compare measurements with simulations.", no_args_is_help=True)
    group.command("nccl-tests")(nccl_tests)
    app.add_typer(group, name="compare")


def nccl_tests(
    file: Path = typer.Argument(..., help="nccl-tests output (optionally with NCCL INFO "
                                "lines)."),
    scenario: str = typer.Argument(None, help="Scenario whose fabric to simulate on "
                                   "(default: the built-in default's fabric, 1:1)."),
    policies: str = typer.Option(None, "--policies", "-p", help="Comma-separated policies "
                                 "(default: the scenario's, all six built-in ones)."),
    server: str = typer.Option(None, "--server", help="Server profile of the hosts "
                               "(default: inferred from the log's accelerator and NIC count; "
                               "see `icefab catalog`)."),
    json_out: bool = typer.Option(False, "--json"),
    draws: int = typer.Option(None, "--draws", "-n", min=1, help="Draws of the randomised "
                              "policies (default: the scenario's, else DEFAULT_DRAWS)."),
):
    """Put measured busbw per size beside the simulated busbw of each policy.

    The hosts, ranks per host, NICs per host (NET/IB lines or NCCL_IB_HCA) and NIC speed
    come from the log; the hosts are spread over the fabric's leaves. When the measured
    figure exceeds every simulated one, a note says why the model can be below it. The
    randomised policies (ECMP family) show their median and p10-p90 over the draws, and
    whether the measurement falls inside that range.
    """
    import json

    from icefabric.collect.nccl_tests import measured_table, read_nccl_tests
    from icefabric.experiment.calibration import trust_line
    from icefabric.experiment.draws import effective_draws
    from icefabric.experiment.fromlog import scenario_from_log
    from icefabric.experiment.runner import run_scenario
    from icefabric.scenario.loader import DEFAULT_SCENARIO, ScenarioError, load

    if not file.exists():
        fail(f"no such file: {file}")
    run = read_nccl_tests(file).first_with_rows()
    if run is None:
        fail(f"{file}: no nccl-tests result rows found")
    measured = measured_table(run)
    try:
        base = load(scenario or DEFAULT_SCENARIO)
        ls, job = scenario_from_log(base, [file], server=server,
                                    sizes=measured["sizes_bytes"])
        pols = ([p.strip() for p in policies.split(",") if p.strip()] if policies
                else list(ls.scenario.policies))
        res = run_scenario(ls, policies=pols, draws=effective_draws(draws, ls.scenario))
    except (ScenarioError, ValueError) as e:
        fail(str(e))
    rows = _rows(measured, res.rows, pols)
    notes = ([job["transport_warning"]] if job.get("transport_warning") else []) + \
        above_model_notes(rows, pols, measured["collective"], job) + \
        far_from_range_notes(rows, pols)
    if json_out:
        typer.echo(json.dumps({"file": str(file), "collective": measured["collective"],
                               "nranks": measured["nranks"], "scenario": res.scenario,
                               "server": job["server"], "inferred": job["inferred"],
                               "draws": res.draws, "rows": rows, "notes": notes,
                               "transport": job.get("transport"), "trust": trust_line(),
                               "scenario_text": res.scenario_text,
                               "provenance": {**res.provenance, "command": command_line()}},
                              indent=1))
        return
    for note in job["inferred"]:
        err_console.print(f"inferred: {note}", highlight=False)
    _print_table(file, measured, rows, pols, base.scenario.name, job)
    for n in res.notes + notes:  # the runner's say how many draws the ranges are over
        console.print(f"note: {n}", highlight=False, markup=False)
    console.print(trust_line(), highlight=False, markup=False)


def _rows(measured: dict, sim_rows: list[dict], pols: list[str]) -> list[dict]:
    sim = {(r["policy"], r["size_bytes"]): r for r in sim_rows}
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
    return rows


def _size_span(sizes: list[int]) -> str:
    """``1GiB-16GiB`` for several sizes (in order), ``1GiB`` for one."""
    from icefabric.units import format_size

    return format_size(sizes[0]) + (f"-{format_size(sizes[-1])}" if len(sizes) > 1 else "")


def above_model_notes(rows: list[dict], pols: list[str], collective: str | None,
                      job: dict) -> list[str]:
    """Why measured busbw can exceed every simulated figure (one note, or none)."""
    over = []
    for row in rows:
        best = max((row[f"{p}_busbw_GBps"] or 0.0 for p in pols), default=0.0)
        if best and row["measured_busbw_GBps"] > best * (1 + ABOVE_MODEL_TOLERANCE):
            over.append((row["size_bytes"], row["measured_busbw_GBps"] / best))
    if not over:
        return []

    lo, hi = min(r for _, r in over), max(r for _, r in over)
    sizes = _size_span([s for s, _ in over])
    algo = job.get("env", {}).get("NCCL_ALGO")
    used = (f"the run forced NCCL_ALGO={algo}" if algo else
            "the log does not say which algorithm NCCL chose (no NCCL_ALGO, no tuning lines)")
    what = ("every simulated policy, including ideal (the best a ring can do over these "
            "NICs on a non-blocking fabric)" if "ideal" in pols else "every simulated policy")
    return [f"measured busbw is {100 * (lo - 1):.0f}-{100 * (hi - 1):.0f} % above {what} at "
            f"{sizes}. The model runs {collective or 'the collective'} as NCCL's ring over the "
            "network; NCCL may have used Tree, NVLS/NVLSTree (NVLink SHARP) or CollNet "
            "(in-network reduction), which send each byte over the NICs fewer times than a "
            "ring, or protocol effects (LL/LL128) that are not modelled; "
            f"{used}."]


def far_from_range_notes(rows: list[dict], pols: list[str]) -> list[str]:
    """A note when the measured busbw lies more than :data:`FAR_FACTOR` outside the p10-p90
    of the model's ECMP (the deployed one, else NCCL's default), saying what that means."""
    from icefabric.experiment.runner import DEPLOYED

    pol = next((p for p in (DEPLOYED, "ecmp") if p in pols), None)
    if pol is None:
        return []
    far = []
    for r in rows:
        lo, hi = r.get(f"{pol}_busbw_GBps_p10"), r.get(f"{pol}_busbw_GBps_p90")
        if lo is None:
            lo = hi = r[f"{pol}_busbw_GBps"]
        bw = r["measured_busbw_GBps"]
        if lo and hi and (bw > hi * FAR_FACTOR or bw * FAR_FACTOR < lo):
            far.append((r["size_bytes"], bw / hi if bw > hi else bw / lo, lo, hi))
    if not far:
        return []
    worst = max(far, key=lambda f: max(f[1], 1 / f[1]))
    where = "above" if worst[1] > 1 else "below"
    sizes = _size_span([f[0] for f in far])
    return [f"measured busbw is far {where} the model's {pol} range at {sizes} (up to "
            f"{max(worst[1], 1 / worst[1]):.1f}x {where} {worst[2]:.1f}-{worst[3]:.1f} GB/s): "
            "no draw of ECMP explains it, so the run's fabric, placement or algorithm differ "
            "from the scenario's (the log does not say how its hosts are cabled); give the "
            "real fabric as SCENARIO before reading the model's figures for this log"]


def _print_table(file: Path, measured: dict, rows: list[dict], pols: list[str],
                 fabric_of: str, job: dict) -> None:
    from icefabric.reports.tables import Column, Fitter
    from icefabric.units import format_size

    cols = [Column("size", [format_size(r["size_bytes"]) for r in rows], key=True),
            Column("measured", [f"{r['measured_busbw_GBps']:.2f}" for r in rows])]
    for p in pols:
        cells = []
        for r in rows:
            v, ratio = r[f"{p}_busbw_GBps"], r[f"{p}_vs_measured"]
            rng = (f" [{r[f'{p}_busbw_GBps_p10']:.1f}-{r[f'{p}_busbw_GBps_p90']:.1f}]"
                   if f"{p}_busbw_GBps_p10" in r else "")
            # no ratio where the measured busbw is 0.00 (8 B, where nccl-tests starts)
            x = "" if ratio is None else f" (x{ratio:.2f})"
            cells.append("-" if v is None else f"{v:.2f}{rng}{x}")
        cols.append(Column(p, cells, policy=p))
    fit = Fitter(console.width)
    title = (f"{file.name}: {measured['collective']} on {measured['nranks']} ranks "
             f"({len(job['hosts'])} x {job['server']}) — measured vs simulated on "
             f"{fabric_of}'s fabric (busbw GB/s; x = simulated / measured)")
    for r in fit.fit((title, cols)):
        console.print(r)
    if fit.legend() is not None:
        console.print(fit.legend())
