"""``icefab calibrate``: public measurements rebuilt as scenarios, beside our distribution."""

from __future__ import annotations

from pathlib import Path

import typer

from icefabric.cli.common import console, fail, progress_bar

POINTS = Path("benchmarks/calibration/points.yaml")
DOC = Path("docs/calibration.md")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)


def calibrate(
    points: Path = typer.Option(POINTS, "--points", help="Calibration points (YAML); each "
                                "reproducible point lists its cases under `reproduce`."),
    draws: int = typer.Option(None, "--draws", "-n", min=2, help="Draws per case (default: "
                              "icefabric.experiment.draws.DEFAULT_DRAWS)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
    write: Path = typer.Option(None, "--write", help="Also put the table into this markdown "
                               f"file between its markers (the repository's: {DOC}) and keep "
                               "the run with the package for the trust lines of every "
                               "output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
):
    """Rebuild every reproducible calibration point as a scenario, run its draws and show
    the measured busbw beside our p10 / p50 / p90 and whether it falls inside p10-p90."""
    import json

    from icefabric.experiment.calibration import calibrate as run
    from icefabric.experiment.calibration import (
        render_table,
        save_outcomes,
        trust_line,
        write_table,
    )
    from icefabric.experiment.draws import DEFAULT_DRAWS

    if not points.exists():
        fail(f"no such points file: {points} (run from the repository root or give --points)")
    with progress_bar(not quiet, "calibrating") as update:
        outcomes = run(points, draws or DEFAULT_DRAWS, progress=update)
    if write is not None:
        write_table(write, outcomes)
        save_outcomes(outcomes)
    if json_out:
        typer.echo(json.dumps({"points": str(points), "cases": [o.to_dict() for o in outcomes]},
                              indent=1))
        return
    from rich.markdown import Markdown

    console.print(Markdown(render_table(outcomes)))
    console.print(trust_line(outcomes), highlight=False, markup=False)
