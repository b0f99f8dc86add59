"""``icefab report RESULT.json|DIR... -o report.html``: one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

import typer

from icefabric.cli.common import command_line, console, fail, progress_bar


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def report(
    paths: list[Path] = typer.Argument(..., help="Result JSON files (`icefab simulate --json`,"
                                       " `--out DIR/result.json`, a sweep's points/*.json), "
                                       "`simulate --out` folders, or one sweep folder."),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file to write."),
):
    """Write one HTML file that opens offline: scenario, fabric picture, busbw tables and
    plots, gains, link utilisation, plan summary, congestion and time series (fluid runs),
    and the command that reproduces it. Given a sweep folder, the sweep report: gain over
    the sweep's ECMP baseline against its axes with ranges over seeds."""
    from icefabric.reports.html import ReportError, render, render_sweep
    from icefabric.reports.inputs import load_inputs
    from icefabric.sweeps.spec import SweepError

    try:
        inputs, sweeps = load_inputs(paths)
        if sweeps and (inputs or len(sweeps) > 1):
            fail("give one sweep folder, or result files, not both")
        if sweeps:
            path = render_sweep(sweeps[0], out, command=command_line())
        else:
            with progress_bar(True, f"drawing the report {out}") as update:
                path = render(inputs, out, command=command_line(), progress=update)
    except (ReportError, SweepError) as e:
        fail(str(e))
    console.print(f"report written to {path} ({path.stat().st_size / 1e6:.1f} MB)",
                  highlight=False)
