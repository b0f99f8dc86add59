"""``icefab simulate``: the main job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from icefabric.cli.common import (
    command_line,
    console,
    err_console,
    fail,
    note_draws_compile,
    note_fluid_compile,
    parse_formats,
    progress_bar,
)

if TYPE_CHECKING:  # imported when run: the CLI starts without them
    from icefabric.experiment.runner import ExperimentResult
    from icefabric.scenario.loader import LoadedScenario


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def simulate(
    scenario: str = typer.Argument(
        None, help="Scenario YAML file or built-in name (default: the built-in "
        "heterogeneous scenario; see `icefab scenarios`)."),
    policies: str = typer.Option(None, "--policies", "-p",
                                 help="Comma-separated policies (default: the scenario's)."),
    engine: str = typer.Option(None, "--engine", "-e", help="flow or fluid (default: the "
                               "scenario's)."),
    sizes: str = typer.Option(None, "--sizes", help="Comma-separated message sizes, e.g. "
                              "1M,64M,1G (default: the scenario's)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document instead of "
                                  "tables."),
    out: Path = typer.Option(None, "--out", "-o", help="Directory for result.json and PNG "
                             "plots."),
    detail: bool = typer.Option(False, "--detail", help="One nccl-tests-style table per "
                                "policy (time, algbw, busbw, gain, share of ideal)."),
    fmt: str = typer.Option("png", "--format", help="With --out: figure formats, "
                            "comma-separated (png, svg, pdf)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    from_log: list[Path] = typer.Option(None, "--from-log", help="Replay the job found in "
                                        "these NCCL/RCCL logs (repeatable) on the scenario's "
                                        "fabric."),
    server: str = typer.Option(None, "--server", help="With --from-log: the server "
                               "profile of the log's hosts (default: inferred from the "
                               "log's accelerator and NIC count; see `icefab catalog`)."),
    report: Path = typer.Option(None, "--report", help="Also write a self-contained HTML "
                                "report to this file (see `icefab report`)."),
    draws: int = typer.Option(None, "--draws", "-n", min=1, help="Draws of QP numbers and "
                              "switch hash seeds per randomised policy (ECMP family); "
                              "default: the scenario's `draws`, else "
                              "icefabric.experiment.draws.DEFAULT_DRAWS (1 on the fluid engine, "
                              "above 128 servers and for an AllToAll over more than 16)."),
    seed: int = typer.Option(None, "--seed", min=0, max=2**63 - 1,
                             help="Base seed (default: the scenario's `seed`); draw 0 uses "
                             "it, the others are spawned from it."),
    workers: int = typer.Option(1, "--workers", min=0, help="Processes for the draws "
                                "(0 = one per core)."),
    ray: str = typer.Option(None, "--ray", help="Run the draws as Ray tasks instead, one "
                            "per policy and size: `auto` (the cluster this machine belongs "
                            "to), HOST:PORT, ray://..., or `local` (a private one for this "
                            "run). Needs `pip install 'ice-fabric[ray]'` here and ice-fabric "
                            "on every node; results equal a local run's."),
):
    """Run every policy on the scenario's workload and print nccl-tests-style results.

    The JSON document (``--json`` and ``OUT/result.json``) has ``rows``: one per policy, job,
    collective and size with ``policy, job, collective, algorithm, size_bytes, nranks,
    time_us, algbw_GBps, busbw_GBps, ideal_busbw_GBps, frac_of_ideal, gain_vs_ecmp``, plus
    ``link_stats``/``link_summary`` (per-policy utilization of switch-to-switch links).
    With the fluid engine, ``--out`` also plots queue and rate time series per policy
    (``timeseries_<policy>.png``) and the JSON carries PFC pause, ECN and CNP statistics.
    ``--out`` also keeps the scenario as run (``scenario.yaml``) and the traced runs
    (``runs/<policy>.json``), so ``icefab report OUT`` can rebuild the HTML report later.
    ECMP's outcome depends on the QP numbers and switch hash seeds, drawn anew at every
    communicator creation: the randomised policies (the ECMP family) run over ``--draws``
    draws, their rows show the median with the p10-p90 range (JSON:
    ``busbw_GBps_p10``/``_p90``, every draw in ``busbw_GBps_draws``), and the gains carry
    ``gain_vs_ecmp_p10``/``_p90``, ``gain_vs_ecmp_lucky`` (over ECMP's p90) and
    ``gain_vs_best`` (over the best baseline's median, ``best_baseline``).
    A scenario with a ``training:`` job also prints one iteration per policy (time, gain
    over ecmp, breakdown) and carries it as ``training`` in the JSON; ``--out`` draws its
    timeline (``training_timeline.png``) and breakdown (``training_breakdown.png``).
    """
    from icefabric.experiment.draws import DrawSpread
    from icefabric.experiment.runner import Execution, run_scenario
    from icefabric.scenario.schema import message_size

    ls = _scenario(scenario, from_log, server, seed)
    n_draws = _draws(ls, draws, engine, quiet)
    pol = [p.strip() for p in policies.split(",") if p.strip()] if policies else None
    sz = [message_size(s) for s in sizes.split(",")] if sizes else None
    if engine not in (None, "flow", "fluid"):
        fail(f"--engine must be flow or fluid, not {engine!r}")
    formats = parse_formats(fmt) if out is not None else ()
    if (engine or ls.scenario.engine) == "fluid":
        note_fluid_compile(quiet)
    elif n_draws > 1 and not ls.scenario.failures:  # the draws run in the batched kernel
        note_draws_compile(quiet)
    with progress_bar(not quiet, f"simulating {ls.scenario.name}") as update:
        how = Execution(progress=update, trace=out is not None or report is not None,
                        spread=DrawSpread(workers or (os.cpu_count() or 1), ray))
        res = run_scenario(ls, policies=pol, sizes=sz, engine=engine, draws=n_draws, how=how)
    res.provenance["command"] = command_line()
    if out is not None:
        _save_out(out, ls.text, res, formats, quiet)
    if report is not None:
        _save_report(report, ls.text, res, quiet)
    if json_out:
        typer.echo(res.to_json())
        return
    _print_results(res, detail, out, report)


def _scenario(scenario: str | None, from_log: list[Path] | None, server: str | None,
              seed: int | None) -> LoadedScenario:
    """The scenario to run: a file or built-in, with the job of ``from_log`` replayed on
    its fabric if given (its warnings and inferences on stderr), and ``seed`` if given."""
    from icefabric.scenario.loader import DEFAULT_SCENARIO, load

    ls = load(scenario or DEFAULT_SCENARIO)
    if from_log:
        from icefabric.experiment.fromlog import scenario_from_log

        missing = [str(p) for p in from_log if not p.exists()]
        if missing:
            fail(f"no such log file: {', '.join(missing)}")
        ls, job = scenario_from_log(ls, from_log, server=server)
        for w in job.get("warnings", [])[:5]:
            err_console.print(f"warning: {w}", highlight=False)
        for note in job.get("inferred", []):
            err_console.print(f"inferred: {note}", highlight=False)
    if seed is not None:
        ls = ls.updated(seed=seed)
    return ls


def _draws(ls: LoadedScenario, draws: int | None, engine: str | None, quiet: bool) -> int:
    """The draws the randomised policies run (a note on stderr when ECMP gets one draw by
    default)."""
    from icefabric.experiment.draws import effective_draws

    n_draws = effective_draws(draws, ls.scenario, engine)
    if n_draws == 1 and not (draws or ls.scenario.draws) and not quiet:
        err_console.print("note: ECMP runs one draw of QP numbers and hash seeds (the "
                          "default on the fluid engine, above 128 servers and for an "
                          "AllToAll over more than 16); --draws N "
                          "shows its distribution", highlight=False)
    return n_draws


def _save_out(out: Path, scenario_text: str, res: ExperimentResult, formats: tuple[str, ...],
              quiet: bool) -> None:
    """``--out``: result.json, the figures, and what `icefab report OUT` reads back."""
    from icefabric.reports.figures import save_figures

    out.mkdir(parents=True, exist_ok=True)
    res.to_json(out / "result.json")
    with progress_bar(not quiet, f"plotting into {out}") as update:
        save_figures(res, out, formats=formats, progress=update)
    _save_inputs(out, scenario_text, res)


def _save_report(report: Path, scenario_text: str, res: ExperimentResult, quiet: bool) -> None:
    """``--report``: the self-contained HTML report of this run."""
    from icefabric.reports.html import ReportError, ReportInput
    from icefabric.reports.html import render as render_html

    try:
        with progress_bar(not quiet, f"drawing the report {report}") as update:
            render_html([ReportInput(res, "this run", scenario_text, res.runs)], report,
                        command=command_line(), progress=update)
    except ReportError as e:
        fail(str(e))


def _print_results(res: ExperimentResult, detail: bool, out: Path | None,
                   report: Path | None) -> None:
    """The tables on stdout, with the run's notes and where its artefacts went."""
    from icefabric.experiment.calibration import trust_line
    from icefabric.reports.tables import fabric_summary, render

    console.print(f"[bold]{res.scenario}[/] — {res.description}", highlight=False)
    console.print(f"{fabric_summary(res.fabric)}; engine {res.engine}; seed {res.seed}",
                  highlight=False)
    for r in render(res, console.width, detail=detail):
        console.print(r)
    console.print(trust_line(), highlight=False, markup=False)
    for n in res.notes:
        console.print(f"note: {n}", highlight=False, markup=False)
    console.print(f"wall time {res.wall_s:.1f} s" + (f"; artefacts in {out}" if out else "")
                  + (f"; report {report}" if report else ""), highlight=False)


def _save_inputs(out: Path, scenario_text: str, res) -> None:
    """The scenario as run, and the traced runs' time series, so that `icefab report OUT`
    can rebuild the full report later."""
    (out / "scenario.yaml").write_text(scenario_text)
    traced = {p: r for p, r in res.runs.items() if r.timeseries.get("t_us")}
    if traced:
        (out / "runs").mkdir(exist_ok=True)
        for policy, run in traced.items():
            run.to_json(out / "runs" / f"{policy}.json")
