import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.experiment import draws as draws_mod
from icefabric.experiment.draws import DrawInputs, DrawSpread, draw_seeds, run_draws
from icefabric.experiment.runner import Execution, run_scenario
from icefabric.pipeline import RunSpec
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load

SIZES = [1 << 20, 16 << 20]


@pytest.fixture(scope="module")
def small():
    return load("homog-small")


@pytest.fixture(scope="module")
def drawn(small):
    return run_scenario(small, sizes=SIZES, policies=["ecmp", "ecmp-multiqp", "ice"], draws=8)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30))
def test_draw_seeds_start_with_the_seed_and_repeat(seed, n):
    s = draw_seeds(seed, n)
    assert s[0] == seed and len(s) == n
    assert len(set(s[1:])) == n - 1  # spawned seeds are distinct
    assert draw_seeds(seed, n) == s and draw_seeds(seed, n + 3)[:n] == s


def test_draws_are_reproducible_from_one_seed(small, drawn):
    again = run_scenario(small, sizes=SIZES, policies=["ecmp", "ecmp-multiqp", "ice"],
                         draws=8)
    assert again.rows == drawn.rows
    other = run_scenario(small.updated(seed=small.scenario.seed + 1), sizes=SIZES,
                         policies=["ecmp"], draws=8)
    key = lambda r: (r["job"], r["collective"], r["size_bytes"])  # noqa: E731
    a = {key(r): r["busbw_GBps_draws"] for r in drawn.rows if r["policy"] == "ecmp"}
    b = {key(r): r["busbw_GBps_draws"] for r in other.rows}
    assert a != b  # another base seed, other draws


def test_draw_zero_is_the_single_draw_run(small, drawn):
    one = run_scenario(small, sizes=SIZES, policies=["ecmp", "ecmp-multiqp", "ice"])
    single = {(r["policy"], r["size_bytes"]): r["busbw_GBps"] for r in one.rows}
    for r in drawn.rows:
        if r["policy"] != "ice":
            assert r["busbw_GBps_draws"][0] == single[(r["policy"], r["size_bytes"])]
    assert one.draws == 1 and "busbw_GBps_p10" not in one.rows[0]


def test_rows_carry_median_range_and_every_draw(drawn):
    for r in drawn.rows:
        if r["policy"] == "ice":
            assert "busbw_GBps_draws" not in r
            assert r["gain_vs_ecmp_p10"] <= r["gain_vs_ecmp"] <= r["gain_vs_ecmp_p90"]
            continue
        v = np.asarray(r["busbw_GBps_draws"])
        assert r["draws"] == len(v) == 8
        assert r["busbw_GBps"] == pytest.approx(np.median(v), abs=1e-3)
        assert r["busbw_GBps_p10"] == pytest.approx(np.percentile(v, 10), abs=1e-3)
        assert r["busbw_GBps_p10"] <= r["busbw_GBps"] <= r["busbw_GBps_p90"]
    ecmp = {(r["size_bytes"]): r for r in drawn.rows if r["policy"] == "ecmp"}
    for r in drawn.rows:
        if r["policy"] == "ice":
            e = ecmp[r["size_bytes"]]
            assert r["gain_vs_ecmp_lucky"] == pytest.approx(
                r["busbw_GBps"] / e["busbw_GBps_p90"] - 1, abs=1e-4)
            assert r["best_baseline"] == "ecmp-multiqp"  # the better baseline here


def test_workers_give_the_same_rows(small, drawn):
    par = run_scenario(small, sizes=SIZES, policies=["ecmp", "ecmp-multiqp", "ice"], draws=8,
                       how=Execution(spread=DrawSpread(workers=2)))
    assert par.rows == drawn.rows


@pytest.mark.slow
def test_draws_on_a_local_ray_give_the_same_rows(small, drawn, tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="the ray extra is installed by .ci/run")
    task = draws_mod._draws_task

    def where(*args):  # each task leaves its process id: proof that Ray ran it
        (tmp_path / str(os.getpid())).touch()
        return task(*args)

    monkeypatch.setattr(draws_mod, "_draws_task", where)
    on_ray = run_scenario(small, sizes=SIZES, policies=["ecmp", "ecmp-multiqp", "ice"],
                          draws=8, how=Execution(spread=DrawSpread(ray="local")))
    pids = {int(p.name) for p in tmp_path.iterdir()}
    assert pids and os.getpid() not in pids
    assert on_ray.rows == drawn.rows
    assert any(len(set(r.get("busbw_GBps_draws", []))) > 1 for r in on_ray.rows)


def test_ecmp_varies_over_draws_and_ice_does_not(small):
    """ECMP's busbw takes several values over QP-number draws (the reason for draws);
    ICE plans every path, so its result is the same in every draw."""
    fabric = build_fabric(small)
    seeds = draw_seeds(small.scenario.seed, 12)
    ecmp = run_draws(DrawInputs(small, fabric, seeds), "ecmp", [64 << 20])[0]
    ice = run_draws(DrawInputs(small, fabric, seeds), "ice", [64 << 20])[0]
    assert len(set(ecmp.busbw_GBps(0))) >= 3
    assert len(set(ice.busbw_GBps(0))) == 1


def test_batched_draws_match_draw_by_draw(small):
    """The batched engine gives every draw what its own run gives."""
    fabric = build_fabric(small)
    seeds = draw_seeds(small.scenario.seed, 4)
    batched = run_draws(DrawInputs(small, fabric, seeds), "ecmp", [16 << 20])[0]
    for d, s in enumerate(seeds):
        spec = RunSpec.of(small.updated(seed=s), fabric, "ecmp")
        one = spec.simulate(spec.size_plan(16 << 20)).collectives[0]
        assert batched.runs[d][0].time_ns == one.time_ns


def test_simulate_draws_json_and_table():
    r = CliRunner().invoke(app, ["simulate", "homog-small", "-q", "--draws", "3", "--sizes",
                                 "4M", "-p", "ecmp,ice", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    e = next(x for x in doc["rows"] if x["policy"] == "ecmp")
    assert doc["draws"] == 3 and len(e["busbw_GBps_draws"]) == 3
    r = CliRunner().invoke(app, ["simulate", "homog-small", "-q", "--draws", "3", "--sizes",
                                 "4M", "-p", "ecmp,ice", "--seed", "5"])
    assert r.exit_code == 0, r.output
    assert "over 3 draws" in r.output and "seed 5" in r.output


def test_compare_shows_the_measurement_beside_the_ecmp_distribution():
    from tests.cli.test_cli import OCI

    if not OCI.exists():
        pytest.skip("reference corpus not present")
    r = CliRunner().invoke(app, ["compare", "nccl-tests", str(OCI), "homog-small", "--json",
                                 "--draws", "4", "-p", "ecmp"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    row = doc["rows"][0]
    assert doc["draws"] == 4
    assert row["ecmp_busbw_GBps_p10"] <= row["ecmp_busbw_GBps"] <= row["ecmp_busbw_GBps_p90"]
    inside = row["ecmp_busbw_GBps_p10"] <= row["measured_busbw_GBps"] <= \
        row["ecmp_busbw_GBps_p90"]
    assert row["ecmp_measured_inside"] is inside
    r = CliRunner().invoke(app, ["compare", "nccl-tests", str(OCI), "homog-small",
                                 "--draws", "4", "-p", "ecmp"])
    assert r.exit_code == 0 and "over 4 draws" in r.output


def test_default_draws_are_one_on_fluid_and_on_large_fabrics():
    """A default run draws ECMP 100 times up to 128 servers (the 1,024-GPU ring benchmark
    included), once on the fluid engine, above 128 servers and for an AllToAll over more
    than 16; the command line and the scenario's ``draws`` win."""
    from pathlib import Path

    from icefabric.experiment.draws import DEFAULT_DRAWS, effective_draws
    from icefabric.scenario.loader import load

    bench = Path(__file__).parents[2] / "benchmarks"
    small = load("hetero-default").scenario
    ring = load(bench / "ring-1024.yaml").scenario
    alltoall = load(bench / "alltoall-384.yaml").scenario
    assert effective_draws(None, small) == DEFAULT_DRAWS == 100
    assert effective_draws(None, ring) == 100
    assert effective_draws(None, small, "fluid") == 1
    assert effective_draws(None, alltoall) == 1
    # the same 48 servers running ring collectives draw 100 times; 129 servers once
    job = alltoall.jobs[0].model_copy(update={"collectives": ring.jobs[0].collectives})
    assert effective_draws(None, alltoall.model_copy(update={"jobs": [job]})) == 100
    pool = ring.pools[0].model_copy(update={"count": 129})
    assert effective_draws(None, ring.model_copy(update={"pools": [pool]})) == 1
    assert effective_draws(7, alltoall) == 7
    assert effective_draws(None, alltoall.model_copy(update={"draws": 3})) == 3
