"""Running sweeps: parallel and Ray runs agree, a killed sweep resumes with only the
missing points, failures are reported per point."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.scenario.loader import builtin_text
from icefabric.sweeps.run import run_sweep
from icefabric.sweeps.spec import parse_sweep, points
from tests.optional import need_extra

BASE = yaml.safe_load(builtin_text("homog-small"))
SMALL = {"name": "small", "base": BASE,
         "set": {"sizes": ["16MiB"], "policies": ["ecmp", "spray", "ice"]},
         "axes": {"fabric.links_per_spine": [2, 4], "pools[0].count": [2, 4]}, "seeds": 2}


def _table(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_local_processes_and_in_process_runs_write_the_same_table(tmp_path):
    spec = parse_sweep(SMALL)
    a = run_sweep(spec, tmp_path / "a", jobs=1)
    b = run_sweep(spec, tmp_path / "b", jobs=2)
    assert len(a.ran) == len(b.ran) == 8 and not a.failed and not b.failed
    rows = _table(a.table)
    assert rows == _table(b.table)
    # one row per point, policy, job, collective and size; axis labels as columns
    assert len(rows) == 8 * 3
    assert list(rows[0])[:6] == ["point", "key", "fabric.links_per_spine", "pools[0].count",
                                 "seed", "policy"]
    assert {r["pools[0].count"] for r in rows} == {"2", "4"}


def test_rerun_reuses_finished_points(tmp_path):
    spec = parse_sweep(SMALL)
    first = run_sweep(spec, tmp_path, jobs=1)
    seen = []
    again = run_sweep(spec, tmp_path, jobs=1, progress=lambda *a: seen.append(a))
    assert (len(again.ran), len(again.reused)) == (0, 8)
    assert seen == [(8, 8, "8 points already done")]
    assert _table(first.table) == _table(again.table)


def test_a_failing_point_is_reported_and_retried_on_rerun(tmp_path):
    data = dict(SMALL, axes={"policies": [["ecmp"], ["ecmp", "no-such-policy"]]}, seeds=None)
    r = CliRunner().invoke(app, ["sweep", _write(tmp_path, data), "--out",
                                 str(tmp_path / "o"), "-j", "1"])
    assert r.exit_code == 1
    assert "1 points run, 0 reused, 1 failed" in r.output
    # the table of the finished point: its absolute busbw, median (p10-p90) over seeds
    rec = json.loads(next((tmp_path / "o" / "points").glob("*.json")).read_text())
    bw = next(r["busbw_GBps"] for r in rec["result"]["rows"] if r["policy"] == "ecmp")
    flat = " ".join(r.output.split())
    assert "busbw and gain over ecmp, median (p10-p90) over seeds" in flat
    assert f"{bw:.1f} ({bw:.1f} – {bw:.1f})" in flat
    assert "failed: policies=[\"ecmp\",\"no-such-policy\"]" in r.output
    assert "no-such-policy" in r.output.split("failed:")[-1]
    r = CliRunner().invoke(app, ["sweep", _write(tmp_path, data), "--out",
                                 str(tmp_path / "o"), "-j", "1"])
    assert "0 points run, 1 reused, 1 failed" in r.output


def _write(tmp_path, data) -> str:
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({k: v for k, v in data.items() if v is not None}))
    return str(p)


def test_killed_half_way_the_rerun_finishes_only_the_missing_points(tmp_path):
    file, out = _write(tmp_path, SMALL), tmp_path / "out"
    cmd = [sys.executable, "-m", "icefabric", "sweep", file, "--out", str(out), "-j", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list((out / "points").glob("*.json"))) < 3:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "sweep made no progress"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # as hard as a lost machine: no cleanup runs
    proc.wait()
    kept = {p.name: (p.stat().st_mtime_ns, p.read_text())
            for p in (out / "points").glob("*.json")}
    assert 3 <= len(kept) < 8
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"[{len(kept)}/8] {len(kept)} points already done" in done.stderr
    assert f"{8 - len(kept)} points run, {len(kept)} reused, 0 failed" in done.stdout
    assert {p.name: (p.stat().st_mtime_ns, p.read_text())
            for p in (out / "points").glob("*.json") if p.name in kept} == kept
    fresh = run_sweep(parse_sweep(SMALL), tmp_path / "fresh", jobs=1)
    assert _table(out / "results.csv") == _table(fresh.table)


@pytest.mark.slow
def test_ray_gives_the_same_results_as_local_processes(tmp_path):
    need_extra("ray", "ray")
    spec = parse_sweep(dict(SMALL, axes={"fabric.links_per_spine": [2, 4]}))
    local = run_sweep(spec, tmp_path / "local", jobs=2)
    ray = run_sweep(spec, tmp_path / "ray", ray_address="local")  # a private local instance
    assert len(ray.ran) == 4 and not ray.failed
    assert _table(ray.table) == _table(local.table)
    for p in points(spec):
        a = json.loads((tmp_path / "local" / "points" / f"{p.key}.json").read_text())
        b = json.loads((tmp_path / "ray" / "points" / f"{p.key}.json").read_text())
        assert a["result"]["rows"] == b["result"]["rows"]



def test_a_point_whose_scenario_sets_draws_carries_the_draw_quantiles(tmp_path):
    spec = parse_sweep({"name": "drawn", "base": BASE,
                        "set": {"sizes": ["16MiB"], "policies": ["ecmp", "ice"], "draws": 4},
                        "axes": {"fabric.links_per_spine": [2]}})
    res = run_sweep(spec, tmp_path / "d", jobs=1)
    rows = {r["policy"]: r for r in _table(res.table)}
    assert rows["ecmp"]["draws"] == "4" and rows["ecmp"]["busbw_GBps_p10"]
    assert float(rows["ecmp"]["busbw_GBps_p10"]) <= float(rows["ecmp"]["busbw_GBps_p90"])
    assert rows["ice"]["gain_vs_ecmp_p10"] and not rows["ice"].get("busbw_GBps_p10")
