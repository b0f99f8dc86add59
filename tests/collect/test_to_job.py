"""Reports -> neutral job descriptions, from real logs."""

from __future__ import annotations

import pytest

from icefabric.collect._text import read_text
from icefabric.collect.nccl_log import parse_reports
from icefabric.collect.to_job import JobInferenceError, job_from_log, job_from_report
from icefabric.schemas import CommunicatorReport

from .conftest import corpus_file


def test_efa_job_read_without_inference():
    job = job_from_log([corpus_file("efa-aws-efa-eks-16r-2.9.9.log")])
    assert job["library"] == "nccl" and job["nranks"] == 16 and job["gpus_per_host"] == 8
    assert job["hosts"] == ["nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"]
    assert job["rank_host"] == [0] * 8 + [1] * 8
    assert job["rank_device"] == list(range(8)) * 2
    assert len(job["rings"]) == 8 and sorted(job["rings"][0]) == list(range(16))
    assert job["warnings"] == [] and job["channels"] == 8
    assert job["collective"] is None and job["name"] == "efa-aws-efa-eks-16r-2.9.9"


def test_job_from_nccl_tests_output_names_the_collective():
    job = job_from_log([corpus_file("ncclt-oci-h100-roce-2.21.5.log")])
    assert job["collective"] == "all_reduce" and job["nranks"] == 16
    assert job["hosts"] == ["instance-20240722-0952", "instance-20240722-0955"]
    assert job["sizes_bytes"][0] == 1073741824 and job["inferred"][0].startswith("nranks")


def test_partial_log_marks_inferred_hosts():
    (rep,) = parse_reports(read_text(corpus_file("vllm-8447-ib-2r-2nodes-2.20.5.log")))
    job = job_from_report(rep)
    assert job["hosts"] == ["VM-160-69-tencentos", "node1"] and job["rank_host"] == [0, 1]
    assert job["rings"] == {0: [0, 1], 1: [0, 1]}
    assert any("node1" in s for s in job["inferred"])
    assert job["name"] == "comm-0xa015ae7e0a50005d"


def test_64_rank_excerpt_uses_a_host_size_that_divides_nranks():
    (rep,) = parse_reports(read_text(corpus_file("nccl-1814b-64r-initcomplete-nvls.log")))
    job = job_from_report(rep)
    assert job["gpus_per_host"] == 8 and len(job["hosts"]) == 8
    assert job["hosts"][4] == "hostname-test" and job["rank_host"][36] == 4


def test_empty_report_cannot_become_a_job():
    with pytest.raises(JobInferenceError):
        job_from_report(CommunicatorReport())
    with pytest.raises(JobInferenceError):
        job_from_log([corpus_file("ncclt-340-2.6.4-oldformat.log")])


def test_scenario_fragment_from_nccl_tests_log():
    from icefabric.collect.to_job import scenario_fragment

    job = job_from_log([corpus_file("ncclt-oci-h100-roce-2.21.5.log")])
    frag = scenario_fragment(job)
    assert frag["pools"] == [{"name": "fromlog", "server": "hgx-h100", "count": 2}]
    (spec,) = frag["jobs"]
    assert spec["ranks_per_server"] == 8 and spec["collectives"] == [{"kind": "all_reduce"}]
    assert frag["sizes"][0] == 1073741824 and spec["name"][0].isalpha()


def test_log_where_one_host_prints_becomes_a_two_host_job():
    from .conftest import project_file

    job = job_from_log([project_file("nccl-1412a-16r-onehost-ringdump.log"),
                        project_file("nccl-1412b-16r-onehost-initcomplete.log")])
    assert job["hosts"] == ["swat1-04", "node1"] and job["rank_host"] == [0] * 8 + [1] * 8
    assert job["rank_device"][:8] == list(range(8)) and len(job["rings"]) == 5
    assert any(s.startswith("report: node of ranks 8-15") for s in job["inferred"])


def _log_2_20(coll_channels: int) -> str:
    """A 2-server, 16-rank NCCL 2.20.5 log in NCCL's own line formats (domain-facts §5.2)."""
    lines = ["h0:100:100 [0] NCCL INFO NCCL version 2.20.5+cuda12.4",
             "h0:100:100 [0] NCCL INFO NCCL_IB_SPLIT_DATA_ON_QPS set by environment to 1."]
    for r in range(16):
        host, dev = f"h{r // 8}", r % 8
        lines.append(f"{host}:{100 + r}:{200 + r} [{dev}] NCCL INFO comm 0x{r + 1:x}0 rank {r} "
                     f"nRanks 16 nNodes 2 localRanks 8 localRank {dev} MNNVL 0")
        if r == 0:
            lines.append(f"{host}:100:200 [0] NCCL INFO Channel 00/{coll_channels // 2:02d} :"
                         + "".join(f" {x:4d}" for x in range(16)))
            lines.append(f"{host}:100:200 [0] NCCL INFO {coll_channels} coll channels, "
                         f"0 collnet channels, 0 nvls channels, {coll_channels} p2p channels, "
                         "2 p2p channels per peer")
        lines.append(f"{host}:{100 + r}:{200 + r} [{dev}] NCCL INFO ncclCommInitRank comm "
                     f"0x{r + 1:x}0 rank {r} nranks 16 cudaDev {dev} nvmlDev {dev} busId "
                     f"{dev + 1}b000 commId 0xfeed - Init COMPLETE")
    return "\n".join(lines) + "\n"


def test_coll_channels_line_wins_and_carries_into_the_scenario(tmp_path):
    from icefabric.collect.to_job import scenario_fragment

    path = tmp_path / "run.log"
    path.write_text(_log_2_20(32))
    job = job_from_log([path])
    assert job["channels"] == 32  # "32 coll channels", not the ring line's "/16"
    assert (job["nccl_version"], job["split_data_on_qps"]) == ("2.20.5+cuda12.4", 1)
    (spec,) = scenario_fragment(job)["jobs"]
    assert spec["channels"] == 32 and spec["nccl_version"] == "2.20.5+cuda12.4"
    assert spec["nccl_env"] == {"NCCL_IB_SPLIT_DATA_ON_QPS": 1}


def test_nccl_ib_hca_lists_the_nics_unless_it_excludes():
    from icefabric.collect.to_job import ib_hca_devices

    assert ib_hca_devices('"=mlx5_0,mlx5_1:1,mlx5_4"') == ["mlx5_0", "mlx5_1:1", "mlx5_4"]
    assert ib_hca_devices("mlx5") == ["mlx5"]
    assert ib_hca_devices("^mlx5_2") == [] and ib_hca_devices("") == []


@pytest.mark.parametrize("log, transport", [
    ("nccl-tests-185-roce-h100-2.19.3.log", "RoCE"),
    ("nccl-179-ib-2.3.7-oldformat.log", "InfiniBand"),
    ("nccl-707-ib-roce-mixed-2.7.6.log", "InfiniBand and RoCE"),
    ("efa-aws-efa-eks-16r-2.9.9.log", "EFA/Libfabric (efa)"),
    ("nccl-952b-socket-16r-connections.log", "sockets"),
    ("ncclt-oci-h100-roce-2.21.5.log", None),  # nccl-tests output and NCCL_IB_HCA only
])
def test_the_job_says_which_network_transport_its_log_shows(log, transport):
    assert job_from_log([corpus_file(log)])["transport"] == transport
