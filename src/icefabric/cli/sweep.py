"""``icefab sweep FILE|NAME --out DIR``: a grid of scenarios, locally or on Ray."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from icefabric.cli.common import command_line, console, err_console, fail, progress_bar


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)


def _plain_progress(done: int, total: int, label: str) -> None:
    err_console.print(f"[{done}/{total}] {label}", highlight=False, soft_wrap=True)


def sweep(
    file: str = typer.Argument(..., help="Sweep YAML file, or a built-in sweep name "
                               "(oversub-nicmix)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder; rerunning with the "
                             "same folder finishes only the missing points."),
    jobs: int = typer.Option(None, "--jobs", "-j", min=1, help="Local worker processes "
                             "(default: all cores)."),
    ray: str = typer.Option(None, "--ray", help="Run on Ray instead: `auto` (the cluster "
                            "this machine belongs to), HOST:PORT, ray://..., or `local` (a "
                            "private instance for this run). Needs `pip install "
                            "'ice-fabric[ray]'` here and ice-fabric on every node."),
    report: Path = typer.Option(None, "--report", help="Also write the sweep's HTML report."),
):
    """Run every point of a sweep (a base scenario plus axes) and collect one table.

    Writes OUT/points/<key>.json per finished point, OUT/results.csv (one row per point,
    policy, job, collective and size) and OUT/sweep.json. `icefab report OUT` draws gain
    vs axis with ranges over seeds.
    """
    from icefabric.sweeps.run import run_sweep
    from icefabric.sweeps.spec import SweepError, load_sweep, points

    try:
        spec = load_sweep(file)
        n = len(points(spec))
        where = f"Ray ({ray})" if ray else f"{jobs or 'all'} local processes"
        err_console.print(f"sweep {spec.name}: {n} points on {where} -> {out}",
                          highlight=False)
        tty = sys.stderr.isatty()
        with progress_bar(tty, f"sweep {spec.name}") as update:
            run = run_sweep(spec, out, jobs=jobs, ray_address=ray,
                            progress=update if tty else _plain_progress)
    except SweepError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write to {out}: {e.strerror}")
    except KeyboardInterrupt:
        fail(f"interrupted; finished points are kept in {out}/points — rerun the same "
             "command to run only the missing ones", code=130)
    _print_summary(out)
    console.print(f"{len(run.ran)} points run, {len(run.reused)} reused, "
                  f"{len(run.failed)} failed in {run.wall_s:.1f} s; table {run.table}",
                  highlight=False)
    for p, msg in run.failed:
        err_console.print(f"failed: {', '.join(f'{k}={v}' for k, v in p.labels.items())}: "
                          f"{msg}", highlight=False, soft_wrap=True)
    if report is not None:
        from icefabric.reports.html import ReportError, render_sweep

        try:
            path = render_sweep(out, report, command=command_line())
        except ReportError as e:
            fail(str(e))
        console.print(f"report written to {path}", highlight=False)
    if run.failed:
        raise typer.Exit(1)


def _print_summary(out: Path) -> None:
    """The sweep's table: busbw and gain over the sweep's ECMP baseline per point and
    policy (as the report)."""
    from icefabric.reports.html import sweep_rows
    from icefabric.reports.tables import Column, Fitter
    from icefabric.sweeps.run import load_sweep_dir
    from icefabric.sweeps.spec import SEED_AXIS
    from icefabric.sweeps.table import collect_rows, gain_baseline

    spec, _, recs = load_sweep_dir(out)
    if not recs:
        return
    table = collect_rows(spec, recs)
    base = gain_baseline(table)[0]
    rows = sweep_rows(spec, table)
    heads = [a for a in spec.axis_names if a != SEED_AXIS] + [
        "policy", "job", "collective", "size", "busbw GB/s\nmed (p10-p90)", f"vs {base}"]
    cols = [Column(h, [r[i] for r in rows], key=i < len(heads) - 2)
            for i, h in enumerate(heads)]
    fit = Fitter(console.width)
    for t in fit.fit((f"sweep {spec.name}: busbw and gain over {base}, median (p10-p90) "
                      "over seeds", cols), row_policies={r[len(heads) - 6] for r in rows}):
        console.print(t)
    if fit.legend() is not None:
        console.print(fit.legend())
