"""Agent report sources: service reports, and the collectors' normalized reports."""

import json

import pytest

from icefabric.agent.collector import CollectorError, from_collector_report, load_reports
from icefabric.schemas import CommunicatorReport, RankInfo


def collector_report(**kw):
    ranks = [RankInfo(rank=i, host=f"h100-{i // 8}", device=i % 8) for i in range(16)]
    return CommunicatorReport(library="nccl", comm_id="0xabc", nranks=16, nchannels=4,
                              ranks=ranks, **kw)


def test_collector_report_becomes_a_service_report(tmp_path):
    rep = from_collector_report(collector_report(), job="gpt", size_bytes=1 << 30,
                                collectives=["all_reduce"])
    assert rep.library == "nccl" and rep.channels == 4 and len(rep.ranks) == 16
    assert {r.host for r in rep.ranks} == {"h100-0", "h100-1"}
    assert rep.collector.comm_id == "0xabc"
    p = tmp_path / "c.json"
    p.write_text(collector_report().model_dump_json())
    assert load_reports(p, job="gpt", size_bytes=1 << 20, collectives=["all_gather"])[0] \
        .collectives[0].kind == "all_gather"
    with pytest.raises(CollectorError, match="--job"):
        load_reports(p)
    p.write_text(json.dumps([rep.model_dump(mode="json")]))
    assert load_reports(p)[0] == rep


def test_ccl_errors_of_the_collector_report_reach_the_service_report():
    from icefabric.schemas import CclError

    err = CclError(kind="cann", code="EI0009", message="Transport init error.", rank=1)
    rep = from_collector_report(collector_report(errors=[err] * 300), job="gpt",
                                size_bytes=1 << 20, collectives=["all_reduce"])
    assert len(rep.errors) == 256 and rep.errors[0].code == "EI0009"  # MAX_REPORT_ERRORS


def test_missing_facts_are_errors_not_guesses():
    bad = collector_report()
    bad.ranks[3].device = None
    with pytest.raises(CollectorError, match="rank 3"):
        from_collector_report(bad, job="j", size_bytes=1, collectives=["all_reduce"])
    with pytest.raises(CollectorError, match="library"):
        from_collector_report(CommunicatorReport(), job="j", size_bytes=1,
                              collectives=["all_reduce"])


def test_nccl_tests_output_becomes_a_report(tmp_path):
    """`icefab collect nccl-tests --json` output: ranks from the '# Rank r ... on HOST device
    d' lines, collective and largest size from the run unless given."""
    devices = [{"rank": i, "pid": 100 + i, "host": f"n{i // 4}", "device": i % 4}
               for i in range(8)]
    run = {"collective": "all_gather_perf", "devices": devices,
           "rows": [{"size": 1 << 20}, {"size": 1 << 30}]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps([run]))
    rep = load_reports(p, job="bench")[0]
    assert (rep.job, rep.size_bytes, rep.collectives[0].kind) == ("bench", 1 << 30,
                                                                  "all_gather")
    assert [(r.host, r.device) for r in rep.ranks][3:5] == [("n0", 3), ("n1", 0)]
    assert load_reports(p, job="b", size_bytes=4096,
                        collectives=["all_reduce"])[0].collectives[0].kind == "all_reduce"
    with pytest.raises(CollectorError, match="needs --job"):
        load_reports(p)
    p.write_text(json.dumps([{**run, "devices": []}]))
    with pytest.raises(CollectorError, match="which host runs which rank"):
        load_reports(p, job="b")
