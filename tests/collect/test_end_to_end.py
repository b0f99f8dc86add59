"""A job read from a real log is simulated (and planned by each policy) end to end, and a real
nccl-tests table is set beside the simulation of the same collective."""

from __future__ import annotations

import pytest
import yaml

from icefabric.collect.nccl_tests import measured_table, read_nccl_tests
from icefabric.collect.to_job import job_from_log, scenario_fragment

from .conftest import corpus_file

loader = pytest.importorskip("icefabric.scenario.loader")
runner = pytest.importorskip("icefabric.experiment.runner")


def _scenario_from_log(path, sizes):
    job = job_from_log([path])
    scn = yaml.safe_load(loader.builtin_text("homog-small"))
    scn.update(scenario_fragment(job, server="hgx-h100"))
    scn["sizes"] = sizes
    return job, loader.loads(yaml.safe_dump(scn), f"from-log:{path.name}")


def test_efa_log_job_runs_on_the_simulator():
    job, ls = _scenario_from_log(corpus_file("efa-aws-efa-eks-16r-2.9.9.log"), [1 << 20])
    res = runner.run_scenario(ls, policies=["ecmp", "ecmp-multiqp", "ideal"])
    rows = [r for r in res.rows if r["job"] == job["name"]]
    assert {r["policy"] for r in rows} == {"ecmp", "ecmp-multiqp", "ideal"}
    assert all(r["nranks"] == 16 and r["busbw_GBps"] > 0 for r in rows)


def test_measured_nccl_tests_beside_simulation():
    f = corpus_file("ncclt-oci-h100-roce-2.21.5.log")
    measured = measured_table(read_nccl_tests(f).first_with_rows())
    job, ls = _scenario_from_log(f, measured["sizes_bytes"][:2])
    res = runner.run_scenario(ls, policies=["ecmp"])
    sim = {r["size_bytes"]: r["busbw_GBps"] for r in res.rows}
    assert set(measured["sizes_bytes"][:2]) <= set(sim)
    assert measured["collective"] == job["collective"] == "all_reduce"
