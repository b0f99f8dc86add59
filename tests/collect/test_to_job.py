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
