"""The published plan: host documents made once, only changed hosts' QP plans stored."""

from __future__ import annotations

import numpy as np

from icefabric.control.plan import single_path_plan
from icefabric.controller.planner import PlanOutcome
from icefabric.controller.published import host_document, next_plan
from icefabric.schemas_service import QP_PLANS, HostPlan, QpPlan


def _qps(sport: int) -> bytes:
    q = QpPlan(src_ip="10.0.0.1", dst_ip="10.0.1.1", lqpn=17, rqpn=18, job="j", ordinal=0,
               sport=sport, rate_bps=1e9, routes=[[1, 2]], weights=[1.0])
    return QP_PLANS.dump_json([q])


def _outcome(hosts: dict[str, bytes]) -> PlanOutcome:
    paths = single_path_plan([], np.zeros(0, dtype=np.int64), "ecmp")
    return PlanOutcome("plan", paths, "k", ["j"], len(hosts), hosts, 1.0, "ecmp")


def test_host_document_is_the_models_json():
    plan, _ = next_plan(None, _outcome({"h1": _qps(5000)}), "test", [("leaf0", "spine0", 1)], 3)
    doc = host_document(plan.summary, "h1", _qps(5000))
    parsed = HostPlan.model_validate_json(doc)
    assert parsed.model_dump_json().encode() == doc
    assert parsed.qps[0].sport == 5000 and parsed.version == 1 and parsed.fabric_version == 3
    assert (parsed.down_links[0].a, parsed.down_links[0].cable) == ("leaf0", 1)


def test_next_plan_stores_only_changed_hosts():
    v1, changed1 = next_plan(None, _outcome({"h1": _qps(5000), "h2": _qps(6000)}), "a", [], 1)
    assert sorted(changed1) == ["h1", "h2"] and v1.version == 1
    v2, changed2 = next_plan(v1, _outcome({"h1": _qps(5000), "h3": _qps(7000)}), "b", [], 1)
    # h1 kept its QP plans, h2 has none any more, h3 is new
    assert changed2 == {"h2": b"[]", "h3": _qps(7000)} and v2.version == 2
    assert v2.summary.reason == "plan: b" and sorted(v2.hosts) == ["h1", "h3"]
    empty = HostPlan.model_validate_json(v2.document("h2"))
    assert empty.qps == [] and empty.version == 2
