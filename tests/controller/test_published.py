"""The published plan: each host's document has its own version; a new plan makes (and
stores) documents only for the hosts it changes."""

from __future__ import annotations

import numpy as np

from icefabric.control.plan import single_path_plan
from icefabric.controller.planner import PlanOutcome
from icefabric.controller.published import EMPTY_QPS, HostDoc, next_plan
from icefabric.schemas_service import QP_PLANS, HostPlan, QpPlan


def _qps(sport: int) -> bytes:
    q = QpPlan(src_ip="10.0.0.1", dst_ip="10.0.1.1", lqpn=17, rqpn=18, job="j", ordinal=0,
               sport=sport, rate_bps=1e9, routes=[[1, 2]], weights=[1.0])
    return QP_PLANS.dump_json([q])


def _outcome(hosts: dict[str, bytes], policy: str = "ecmp") -> PlanOutcome:
    paths = single_path_plan([], np.zeros(0, dtype=np.int64), policy)
    return PlanOutcome("plan", paths, "k", "s", None, ["j"], len(hosts), hosts, 1.0, policy)


def test_a_host_document_is_the_models_json():
    plan, _ = next_plan(None, _outcome({"h1": _qps(5000)}), "t", [("leaf0", "spine0", 1)], 3,
                        now=12.5)
    doc = HostDoc.make(plan.summary, "h1", _qps(5000)).doc
    parsed = HostPlan.model_validate_json(doc)
    assert parsed.model_dump_json().encode() == doc == plan.hosts["h1"].doc
    assert (parsed.qps[0].sport, parsed.version, parsed.fabric_version, parsed.created_at) \
        == (5000, 1, 3, 12.5)
    assert (plan.summary.down_links[0].a, plan.summary.down_links[0].cable) == ("leaf0", 1)


def test_a_plan_changes_only_the_hosts_whose_qps_changed():
    v1, ch1 = next_plan(None, _outcome({"h1": _qps(5000), "h2": _qps(6000)}), "a", [], 1, 1.0)
    assert ch1 == ["h1", "h2"] and v1.summary.hosts_changed == 2
    # h1 keeps its QP plans, h2 has none any more, h3 is new; a link went down meanwhile
    v2, ch2 = next_plan(v1, _outcome({"h1": _qps(5000), "h3": _qps(7000)}), "b",
                        [("leaf0", "spine0", 0)], 1, 2.0)
    assert ch2 == ["h2", "h3"] and v2.version == 2 and v2.summary.reason == "plan: b"
    assert v2.hosts["h1"] is v1.hosts["h1"] and v2.host_version("h1") == 1
    assert v2.hosts["h2"].qps == EMPTY_QPS and v2.host_version("h2") == 2
    assert HostPlan.model_validate_json(v2.hosts["h2"].doc).qps == []
    assert v2.host_version("h4") == 0  # never planned: no document
    # an unchanged empty document stays as it is; a new policy changes every document
    v3, ch3 = next_plan(v2, _outcome({"h1": _qps(5000), "h3": _qps(7000)}), "c", [], 1, 3.0)
    assert ch3 == [] and v3.host_version("h2") == 2
    v4, ch4 = next_plan(v3, _outcome({"h1": _qps(5000)}, policy="ice"), "d", [], 1, 4.0)
    assert ch4 == ["h1", "h2", "h3"]
