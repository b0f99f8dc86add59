"""Actuators: HCCL MultiQpSrcPort.cfg writer, dry run, twin NICs; local rules."""

import io

import pytest

from icefabric.agent import autonomy
from icefabric.agent.actuators import get_actuator
from icefabric.agent.actuators.base import Actuator, ApplyResult
from icefabric.agent.actuators.hccl_cfg import (
    FILE_NAME,
    HigherSetting,
    parse_cfg,
    render_cfg,
)
from icefabric.dataplane.endside import EndSideParams
from icefabric.qpid import QpId
from icefabric.schemas_service import HostPlan, QpPlan


def qp(src, dst, lqpn, ordinal, sport, rate=None, routes=((1, 2, 3),), backup=None):
    return QpPlan(src_ip=src, dst_ip=dst, lqpn=lqpn, rqpn=lqpn + 1, job="j", ordinal=ordinal,
                  sport=sport, rate_bps=rate, routes=[list(r) for r in routes],
                  weights=[1.0] * len(routes), backup_sport=backup)


def plan(qps, version=1):
    return HostPlan(host="h", version=version, fabric_version=1, policy="ice", created_at=0.0,
                    qps=qps)


def test_hccl_cfg_lines_per_nic_pair_in_qp_order(tmp_path):
    qps = [qp("10.0.0.1", "10.0.1.1", 300, 1, 50001), qp("10.0.0.1", "10.0.1.1", 200, 0, 50000),
           qp("10.0.0.2", "10.0.1.2", 400, 0, 60000)]
    text, warnings = render_cfg(qps)
    assert text == "10.0.0.1,10.0.1.1=50000,50001\n10.0.0.2,10.0.1.2=60000\n"
    assert warnings == []
    act = get_actuator("hccl-cfg", directory=tmp_path)
    res = act.apply(plan(qps))
    assert res.applied == 3 and res.failed == set()
    assert parse_cfg((tmp_path / FILE_NAME).read_text()) == {
        ("10.0.0.1", "10.0.1.1"): [50000, 50001], ("10.0.0.2", "10.0.1.2"): [60000]}
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no temp files left
    assert (tmp_path / FILE_NAME).stat().st_mode & 0o777 == 0o644  # HCCL's users read it


def test_hccl_cfg_reports_qps_a_higher_hccl_setting_overrides(tmp_path):
    """hccn_tool's multi-QP or NSLB configuration wins over MultiQpSrcPort.cfg: the QPs of
    the pairs it sets are reported as not steered, the others acked."""
    script = tmp_path / "hccn_query"
    script.write_text("#!/bin/sh\necho '10.0.0.1,10.0.1.1=61000,61001'\n")
    script.chmod(0o755)
    higher = [HigherSetting("hccn_tool multi_qp", (str(script),)),
              HigherSetting("nslb", ("/nonexistent/hccn_tool",))]  # absent: sets nothing
    act = get_actuator("hccl-cfg", directory=tmp_path / "cfg", higher=higher)
    qps = [qp("10.0.0.1", "10.0.1.1", 200, 0, 50000), qp("10.0.0.1", "10.0.1.1", 300, 1, 50001),
           qp("10.0.0.2", "10.0.1.2", 400, 0, 60000)]
    res = act.apply(plan(qps))
    assert res.failed == {q.qp_id for q in qps[:2]} and res.applied == 1
    assert res.messages == ["2 QP(s) not steered: hccn_tool multi_qp sets their NIC pairs' "
                            "ports and HCCL reads it before MultiQpSrcPort.cfg"]
    script.write_text("#!/bin/sh\necho '0.0.0.0,10.0.1.2'\n")  # any source -> 10.0.1.2
    assert act.apply(plan(qps, version=2)).failed == {qps[2].qp_id}


def test_hccl_cfg_caps_ports_per_pair():
    qps = [qp("10.0.0.1", "10.0.1.1", 100 + i, i, 50000 + i) for i in range(40)]
    text, warnings = render_cfg(qps)
    assert len(parse_cfg(text)[("10.0.0.1", "10.0.1.1")]) == 32
    assert "at most 32" in warnings[0]


def test_dry_run_prints_verbs_calls_for_changes_only():
    out = io.StringIO()
    act = get_actuator("dry-run", stream=out)
    p1 = plan([qp("10.0.0.1", "10.0.1.1", 0x123, 0, 0xC123, rate=100e9),
               qp("10.0.0.1", "10.0.1.1", 0x124, 1, 0xD000)])
    act.apply(p1)
    text = out.getvalue()
    assert "mlx5dv_modify_qp_udp_sport(qp=0x000123" in text and "udp_sport=49443" in text
    assert ".rate_limit=100000000" in text and "unlimited: DCQCN only" in text
    n = len(act.calls)
    act.apply(plan(p1.qps, version=2))  # nothing changed -> header only
    assert len(act.calls) == n + 1


def test_a_failed_apply_is_retried_by_the_next_identical_plan():
    class Flaky(Actuator):
        """Fails QP 7 on its first attempt."""

        def __init__(self):
            super().__init__()
            self.seen: list[list[int]] = []

        def _apply(self, plan, changed):
            self.seen.append([q.lqpn for q in changed])
            bad = {q.qp_id for q in changed if q.lqpn == 7 and len(self.seen) == 1}
            return ApplyResult(0, bad, ["qp 7: device busy"] if bad else [])

    act = Flaky()
    p = plan([qp("10.0.0.1", "10.0.1.1", 5, 0, 50000), qp("10.0.0.1", "10.0.1.1", 7, 1, 50001)])
    first = act.apply(p)
    assert (first.applied, first.failed) == (1, {QpId.of("j", "10.0.0.1", "10.0.1.1", 1)})
    second = act.apply(plan(p.qps, version=2))  # the same settings again
    assert act.seen == [[5, 7], [7]] and (second.applied, second.failed) == (2, set())
    assert act.apply(plan(p.qps, version=3)).applied == 2 and act.seen[-1] == []


def test_a_qp_named_by_new_numbers_or_named_again_is_applied_again():
    """A job is planned before its QPs connect: the first plan names a QP by modelled
    numbers, the next by the reported ones (the same QpId, applied again on the QP those
    numbers name); a QP that leaves the plan and comes back is applied again."""
    act, twin = get_actuator("dry-run", stream=io.StringIO()), get_actuator("twin")
    a, b = qp("10.0.0.1", "10.0.1.1", 5, 0, 50000), qp("10.0.0.1", "10.0.1.1", 9, 0, 50000)
    c = qp("10.0.0.1", "10.0.1.1", 11, 1, 50001)
    for x in (act, twin):
        x.apply(plan([a]))
        assert x.apply(plan([b], version=2)).applied == 1
    assert a.qp_id == b.qp_id and list(twin.applied) == [b.qp_id]
    assert act.state[b.qp_id].lqpn == twin.applied[b.qp_id].lqpn == 9
    assert "mlx5dv_modify_qp_udp_sport(qp=0x000009" in act.calls[-2]
    act.apply(plan([c], version=3))
    assert list(act.state) == [c.qp_id]
    n = len(act.calls)
    assert act.apply(plan([b], version=4)).applied == 1 and list(act.state) == [b.qp_id]
    assert len(act.calls) == n + 3  # header, port, rate: b is applied again


def test_twin_actuator_records_applied_settings_and_backup_switch():
    act = get_actuator("twin")
    q = qp("10.0.0.1", "10.0.1.1", 7, 0, 50000, backup=50001)
    act.apply(plan([q]))
    key = QpId.of("j", "10.0.0.1", "10.0.1.1", 0)
    assert act.applied[key].sport == 50000 and act.version == 1
    acts = autonomy.on_links_down(plan([q]), {2})
    assert acts == [autonomy.SwitchPort(key, 50001, "planned path lost a link")]
    assert act.set_sport(key, 50001) and act.applied[key].sport == 50001
    assert autonomy.on_links_down(plan([q]), {9}) == []


def test_persistent_cnps_release_the_pacer_until_the_next_plan():
    p = plan([qp("10.0.0.1", "10.0.1.1", 1, 0, 50000, rate=50e9),
              qp("10.0.0.1", "10.0.1.1", 3, 1, 50001)])
    k1, k2 = (QpId.of("j", "10.0.0.1", "10.0.1.1", o) for o in (0, 1))
    rules = autonomy.LocalRules(EndSideParams(cnp_threshold=2, persist_windows=3))
    rules.on_plan(p)
    hot = {k1: 5, k2: 5}
    assert rules.step(cnps_in_window=hot) == ([], [])
    assert rules.step(cnps_in_window={k1: 1, k2: 5}) == ([], [])  # k1's streak resets
    assert rules.step(cnps_in_window=hot) == ([], [])
    assert rules.step(cnps_in_window=hot) == ([], [])
    _, unpace = rules.step(cnps_in_window=hot)  # k1: third hot window in a row
    assert [a.qp for a in unpace] == [k1]  # k2 has no pacer to release
    rules.on_plan(plan(p.qps, version=2))  # a new plan restarts planned mode
    assert rules.step(cnps_in_window=hot) == ([], [])


def test_unknown_actuator():
    with pytest.raises(ValueError, match="available"):
        get_actuator("verbs-magic")
