"""Running a sweep: every point of the grid through :func:`run_scenario`, in parallel on local
processes or on a Ray cluster, resumable.

The output folder holds ``sweep.json`` (the resolved sweep), ``points/<key>.json`` (one
finished point each: its labels, scenario and full result) and ``results.csv`` (one row per
point, policy, job, collective and size). A point's file is written atomically as soon as it
finishes, so a run killed half-way loses only the points in flight; rerunning the same
command skips every point whose file exists and runs the rest.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from icefabric.experiment.cluster import ray_tasks
from icefabric.sweeps.spec import Point, SweepError, SweepSpec, points
from icefabric.sweeps.table import collect_rows, write_csv

SCHEMA_VERSION = 1

#: progress(done, total, label): called once at the start and after every finished point.
Progress = Callable[[int, int, str], None]


@dataclass
class SweepRun:
    """What one invocation did: the grid, what was already there, what ran and failed."""

    spec: SweepSpec
    out: Path
    points: list[Point]
    reused: list[Point] = field(default_factory=list)
    ran: list[Point] = field(default_factory=list)
    failed: list[tuple[Point, str]] = field(default_factory=list)
    table: Path | None = None
    wall_s: float = 0.0


def point_path(out: Path, p: Point) -> Path:
    return out / "points" / f"{p.key}.json"


def run_point(spec_name: str, index: int, labels: dict, scenario: dict, key: str) -> dict:
    """Run one point (in a worker process or a Ray task); returns the point record, or a
    record with ``error`` (the message) if the scenario could not be run."""
    import yaml

    from icefabric import __version__
    from icefabric.experiment.runner import run_scenario
    from icefabric.scenario.loader import loads

    rec = {"schema_version": SCHEMA_VERSION, "sweep": spec_name, "key": key, "index": index,
           "labels": labels, "scenario": scenario}
    t0 = time.perf_counter()
    try:
        ls = loads(yaml.safe_dump(scenario, sort_keys=False), f"<{spec_name} point {key}>")
        # a point draws ECMP only when its scenario asks (`draws`): seeds are the usual axis
        rec["result"] = run_scenario(ls, draws=ls.scenario.draws or 1).to_dict()
    except Exception as e:  # noqa: BLE001 — a point's failure is reported, the sweep goes on
        rec["error"] = f"{type(e).__name__}: {e}"
    rec["wall_s"] = round(time.perf_counter() - t0, 3)
    rec["host"] = platform.node()
    rec["version"] = __version__
    return rec


def _args(spec: SweepSpec, p: Point) -> tuple:
    return spec.name, p.index, p.labels, p.scenario, p.key


def _save(out: Path, rec: dict) -> None:
    path = out / "points" / f"{rec['key']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, path)  # atomic: a killed run never leaves half a point


def _local(spec: SweepSpec, todo: list[Point], jobs: int) -> Iterator[dict]:
    if jobs <= 1:
        for p in todo:
            yield run_point(*_args(spec, p))
        return
    # spawn: workers must not inherit the parent's threads (progress bar) or open files.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        pending = {pool.submit(run_point, *_args(spec, p)) for p in todo}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    yield f.result()
        finally:
            for f in pending:
                f.cancel()


def _ray(spec: SweepSpec, todo: list[Point], address: str) -> Iterator[dict]:
    yield from ray_tasks(run_point, [_args(spec, p) for p in todo], address)


def run_sweep(spec: SweepSpec, out: str | Path, *, jobs: int | None = None,
              ray_address: str | None = None, progress: Progress | None = None) -> SweepRun:
    """Run every point of ``spec`` that ``out`` does not hold yet, then write the table.

    Parameters
    ----------
    spec : SweepSpec
    out : folder for ``sweep.json``, ``points/`` and ``results.csv`` (created if needed).
    jobs : local worker processes (default: all cores); ignored with ``ray_address``.
    ray_address : run the points as Ray tasks on this cluster (``auto``, ``host:port``,
        ``ray://...``, or ``local`` to start a private one for this run).
    progress : optional ``progress(done, total, label)``.
    """
    t0 = time.perf_counter()
    out = Path(out)
    (out / "points").mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(spec.to_dict(), indent=1))
    grid = points(spec)
    run = SweepRun(spec, out, grid)
    run.reused = [p for p in grid if point_path(out, p).exists()]
    todo = [p for p in grid if not point_path(out, p).exists()]
    by_key = {p.key: p for p in todo}
    done = len(run.reused)
    if progress:
        progress(done, len(grid), f"{done} points already done" if done else "starting")
    stream = (_ray(spec, todo, ray_address) if ray_address
              else _local(spec, todo, jobs or os.cpu_count() or 1))
    for rec in stream:
        p = by_key[rec["key"]]
        if "error" in rec:
            run.failed.append((p, rec["error"]))
        else:
            _save(out, rec)
            run.ran.append(p)
        done += 1
        if progress:
            where = ", ".join(f"{k}={v}" for k, v in p.labels.items())
            status = "failed" if "error" in rec else f"{rec['wall_s']:.1f} s"
            progress(done, len(grid), f"{where} ({status})")
    run.table = write_csv(collect_rows(spec, load_points(out, grid)), out / "results.csv")
    run.wall_s = time.perf_counter() - t0
    return run


def load_points(out: Path, grid: list[Point]) -> list[dict]:
    """The finished points of ``grid`` stored in ``out`` (grid order)."""
    recs = []
    for p in grid:
        path = point_path(out, p)
        if path.exists():
            recs.append(json.loads(path.read_text()))
    return recs


def load_sweep_dir(out: str | Path) -> tuple[SweepSpec, list[Point], list[dict]]:
    """A sweep's output folder: its spec, grid and finished point records."""
    out = Path(out)
    try:
        spec = SweepSpec.from_dict(json.loads((out / "sweep.json").read_text()))
    except FileNotFoundError:
        raise SweepError(f"{out}: no sweep.json (not a sweep output folder)") from None
    grid = points(spec)
    return spec, grid, load_points(out, grid)
