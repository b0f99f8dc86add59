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


OCI = Path(__file__).parents[1] / "collect" / "corpus" / "reference" / \
    "ncclt-oci-h100-roce-2.21.5.log"


def test_a_16_port_host_gets_the_16_port_profile_and_hosts_spread_over_leaves():
    """nccl-tests on 2 OCI BM.GPU.H100.8 hosts: 16 HCAs in NCCL_IB_HCA, 8 H100 each."""
    ls, job = scenario_from_log(load("hetero-default"), [OCI])
    assert ls.scenario.pools[0].server == "bm-gpu-h100-8" and job["server"] == "bm-gpu-h100-8"
    assert "nics_per_host=16 from NCCL_IB_HCA" in job["inferred"]
    assert any(n.startswith("servers_per_leaf=1: the 2 hosts spread over 2 leaves")
               for n in job["inferred"])
    fabric = build_fabric(ls)
    leaves = [{int(fabric.nic_leaf[n]) for n in s.nics} for s in fabric.servers]
    assert len(leaves[0] | leaves[1]) == 2  # one leaf each: the rings cross the spines
    (sj,) = scenario_workload(ls, fabric, 1 << 30).jobs
    assert sj.comm.rails == list(range(16))  # every port carries rings
    assert sj.comm.nccl.split_data_on_qps == 0  # from the test's command line


def test_the_server_follows_the_accelerator_and_nic_count():
    from icefabric.experiment.fromlog import infer_server

    assert infer_server({"accelerator": "NVIDIA H100 80GB HBM3", "nics_per_host": 8})[0] == (
        "hgx-h100")
    assert infer_server({"accelerator": "NVIDIA H100 80GB HBM3"})[0] == "hgx-h100"
    name, why = infer_server({"accelerator": "NVIDIA A100-SXM4-80GB", "nics_per_host": 4})
    assert name == "hgx-a100" and "none with that count" in why[0]
    name, why = infer_server({"accelerator": "NVIDIA GB10", "library": "nccl"})
    assert name == "hgx-h100" and "no catalog server has NVIDIA GB10" in why[0]
    assert infer_server({"library": "rccl"})[0] == "mi300x"


def test_compare_explains_a_measurement_above_the_model(tmp_path):
    r = CliRunner().invoke(app, ["compare", "nccl-tests", str(OCI), "-p", "ecmp,ideal"],
                           env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "(2 x bm-gpu-h100-8)" in r.stdout
    assert "inferred: server bm-gpu-h100-8: NVIDIA H100 80GB HBM3, 16 NICs per host" in r.stderr
    note = " ".join(r.stdout[r.stdout.index("note: "):].split())
    assert "% above every simulated policy, including ideal" in note
    assert "Tree, NVLS/NVLSTree" in note and "no NCCL_ALGO" in note
    # a run the model matches gets no note: NCCL_ALGO=Ring and measured figures below ideal
    low = tmp_path / "ring.log"
    low.write_text(OCI.read_text().replace("-x NCCL_CUMEM_ENABLE=0",
                                           "-x NCCL_ALGO=Ring -x NCCL_CUMEM_ENABLE=0")
                   .replace("  446.28  ", "  346.28  "))
    doc = json.loads(CliRunner().invoke(app, ["compare", "nccl-tests", str(low), "-p", "ideal",
                                              "--json"]).stdout)
    assert doc["rows"][0]["measured_busbw_GBps"] == 346.28 and doc["notes"]
    above = next(n for n in doc["notes"] if "above every simulated policy" in n)
    assert "NCCL_ALGO=Ring" in above and "at 2GiB-16GiB" in above


def _log_from_8_bytes(tmp_path: Path) -> Path:
    """The OCI run with the two first rows every nccl-tests log has (8 B and 1 KiB), whose
    busbw prints as 0.00 and 0.05 GB/s."""
    lines = OCI.read_text().splitlines()
    first = next(i for i, s in enumerate(lines) if s.strip().startswith("1073741824"))
    small = ["           8             2     float     sum      -1    40.12    0.00    0.00"
             "      0    39.87    0.00    0.00      0",
             "        1024           256     float     sum      -1    42.50    0.02    0.05"
             "      0    42.10    0.02    0.05      0"]
    path = tmp_path / "from-8B.log"
    path.write_text("\n".join(lines[:first] + small + lines[first:first + 1]
                              + lines[first + 5:]) + "\n")
    return path


def test_compare_and_from_log_on_a_log_starting_at_8_bytes(tmp_path):
    log = _log_from_8_bytes(tmp_path)
    r = CliRunner().invoke(app, ["compare", "nccl-tests", str(log), "homog-small", "-p",
                                 "ecmp,ideal", "-n", "3"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()
            if line.split()[:1] in (["8B"], ["1KiB"], ["1GiB"])}
    assert rows["8B"][0] == "0.00" and "(x" not in " ".join(rows["8B"])  # no ratio to 0
    assert rows["1KiB"][0] == "0.05" and "(x" in " ".join(rows["1KiB"])
    r = CliRunner().invoke(app, ["simulate", "homog-small", "--from-log", str(log), "-p",
                                 "ecmp,ideal", "-n", "3", "-q"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    table = r.stdout[r.stdout.index("16 ranks: busbw GB/s"):].splitlines()
    assert [line.split()[:2] for line in table[3:5]] == [["8B", "0.0"], ["1KiB", "0.0"]]
    assert table[5].split()[0] == "1GiB" and float(table[5].split()[1]) > 50
