"""Scenarios from logs keep what the log says about the job."""

from __future__ import annotations

from icefabric.experiment.fromlog import scenario_from_log
from icefabric.scenario.build import build_fabric, job_communicators
from icefabric.scenario.loader import load

from ..collect.test_to_job import _log_2_20


def test_a_logs_channel_count_overrides_the_release_default(tmp_path):
    path = tmp_path / "run.log"
    path.write_text(_log_2_20(24))
    ls, _ = scenario_from_log(load("homog-small"), [path])
    ((_, comm),) = job_communicators(ls, build_fabric(ls))
    assert comm.nccl.version == (2, 20, 5) and comm.nccl.split_data_on_qps
    assert comm.n_channels == 24  # NCCL 2.20.5 alone would open 16 on these H100 servers
