"""``--from-log`` replays the job a real log shows, on the rings the library built."""

import json
from pathlib import Path

import numpy as np
import yaml
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.experiment.fromlog import scenario_from_log
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load

from ..collect.test_to_job import _log_2_20

LOG = Path(__file__).parent / "data" / "efa-aws-efa-eks-16r-2.9.9.log"
# as printed by NCCL ("Channel 01/08 :    0   3  10 ..."): not in rank order
RING_1 = [0, 3, 10, 15, 14, 13, 12, 9, 8, 11, 2, 7, 6, 5, 4, 1]
RING_3 = [0, 5, 4, 7, 14, 11, 10, 9, 8, 13, 12, 15, 6, 3, 2, 1]


def test_the_logged_rings_drive_the_workload():
    ls, job = scenario_from_log(load("homog-small"), [LOG])
    spec = ls.scenario.jobs[0]
    assert len(spec.rings) == 8 and spec.rings[1] == RING_1 and spec.rings[3] == RING_3
    sw = scenario_workload(ls, build_fabric(ls), 1 << 20)
    comm, wl = sw.jobs[0].comm, sw.workload
    assert comm.n_channels == 8 and comm.nranks == 16
    for channel, ring in ((1, RING_1), (3, RING_3)):
        hops = np.flatnonzero(wl.hop_flow == channel)  # one coupled flow per channel
        assert wl.hop_src[hops].tolist() == comm.ranks[ring].tolist()
        assert wl.hop_dst[hops].tolist() == comm.ranks[np.roll(ring, -1)].tolist()
    # the model alone would have built other rings
    model = scenario_workload(ls.__class__(ls.scenario.model_copy(update={"jobs": [
        spec.model_copy(update={"rings": None})]}), "", {}, ""), build_fabric(ls), 1 << 20)
    hops = np.flatnonzero(model.workload.hop_flow == 1)
    assert model.workload.hop_src[hops].tolist() != comm.ranks[RING_1].tolist()


def test_simulate_from_log_writes_the_scenario_it_ran(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["simulate", "homog-small", "--from-log", str(LOG), "--sizes", "64M",
                            "-p", "ecmp,ideal", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {row["nranks"] for row in doc["rows"]} == {16}
    saved = tmp_path / "scenario.yaml"
    assert yaml.safe_load(saved.read_text())["jobs"][0]["rings"][1] == RING_1
    # the saved scenario reproduces the run
    again = runner.invoke(app, ["simulate", str(saved), "--sizes", "64M", "-p", "ecmp,ideal",
                                "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["rows"] == doc["rows"]


def test_a_logs_channel_count_overrides_the_release_default(tmp_path):
    path = tmp_path / "run.log"
    path.write_text(_log_2_20(24))
    ls, _ = scenario_from_log(load("homog-small"), [path])
    (job,) = scenario_workload(ls, build_fabric(ls), 1 << 20).jobs
    comm = job.comm
    assert comm.nccl.version == (2, 20, 5) and comm.nccl.split_data_on_qps
    assert comm.n_channels == 24  # NCCL 2.20.5 alone would open 16 on these H100 servers
