"""The vectorized engine-problem build against a per-hop reference, and by hand."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.control.plan import PathPlan
from icefabric.pipeline.plans import LinkEvent
from icefabric.pipeline.problem import (
    HopQps,
    changed_routes,
    failure_reroutes,
    plan_incidence,
    to_problem,
)
from icefabric.policies.base import PlanContext, get_policy
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.model import ACCEL
from icefabric.topology.routing import ServerPaths


def workload(fabric, kind="all_reduce", channels=2, qps=1, ranks=None):
    ranks = fabric.nodes_of_kind(ACCEL) if ranks is None else ranks
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("j", fabric, ranks, channels=channels,
                                    qps_per_connection=qps), kind, 1 << 20)
    return wb.build(node_ip=fabric.node_ip)


def reference_routes(fabric, wl, plan):
    """Hop by hop, (shared leg by shared leg,) QP by QP, route by route: (links, weight,
    qp, flow) of every route."""
    sp = ServerPaths(fabric)
    conn_ptr, _ = wl.conn_qps()
    qptr = plan.qp_route_ptr()
    group = dict(zip(wl.legs.hop.tolist(), wl.legs.group.tolist()))
    out = []
    for h in range(len(wl.hop_flow)):
        f, c, w = int(wl.hop_flow[h]), int(wl.hop_conn[h]), float(wl.hop_weight[h])
        if c < 0:
            out.append((sp.path(int(wl.hop_src[h]), int(wl.hop_dst[h])), w, -1, f))
            continue
        sources = [(int(wl.hop_src[h]), w)]
        if h in group:  # its data enters at every leg of its group instead
            legs = np.flatnonzero(wl.legs.leg_group == group[h])
            sources = [(int(wl.legs.leg_src[j]), float(wl.legs.leg_weight[j])) for j in legs]
        post = sp.path(int(wl.hop_dst_nic[h]), int(wl.hop_dst[h]))
        k = conn_ptr[c + 1] - conn_ptr[c]
        for src, w in sources:
            pre = sp.path(src, int(wl.hop_src_nic[h]))
            for q in range(conn_ptr[c], conn_ptr[c + 1]):
                for r in range(qptr[q], qptr[q + 1]):
                    out.append((pre + plan.route(r).tolist() + post,
                                w / k * plan.route_weight[r], q, f))
    return out


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the fabric is read-only
@given(kind=st.sampled_from(["all_reduce", "alltoall", "all_gather"]),
       policy=st.sampled_from(["ecmp", "spray", "ecmp-multiqp"]),
       qps=st.integers(1, 3), channels=st.integers(1, 3))
def test_routes_match_the_per_hop_reference(small_fabric, kind, policy, qps, channels):
    wl = workload(small_fabric, kind, channels, qps)
    plan = get_policy(policy).plan(PlanContext.create(small_fabric, wl))
    prob, pmap = to_problem(small_fabric, wl, plan)
    ref = reference_routes(small_fabric, wl, plan)
    assert prob.n_routes == len(ref)
    for k, (links, w, q, f) in enumerate(ref):
        assert prob.route(k).tolist() == links
        assert prob.route_weight[k] == w and prob.route_qp[k] == q and prob.route_flow[k] == f
    assert np.array_equal(pmap.plan_route >= 0, prob.route_qp >= 0)
    # the planner's link-by-flow incidence (pacing rates) comes from the same routes
    want = np.zeros((small_fabric.n_links, wl.n_flows))
    for links, w, _, f in ref:
        np.add.at(want[:, f], links, w)
    np.testing.assert_allclose(plan_incidence(small_fabric, wl, plan).toarray(), want,
                               rtol=1e-12)
    # with shared legs kept shared (the flow engine's problem): the same incidence
    shared, _ = to_problem(small_fabric, wl, plan, shared=True)
    assert (shared.shared is not None) == (len(wl.legs.hop) > 0)
    np.testing.assert_allclose(shared.incidence().toarray(), want, rtol=1e-12)


def test_two_qps_split_a_hop_and_pacers_cap_the_flow(tiny_profile):
    f = leaf_spine([ServerGroup(tiny_profile, 2, "t")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    wl = workload(f, channels=1, qps=2)
    plan = get_policy("ecmp").plan(PlanContext.create(f, wl))
    prob, _ = to_problem(f, wl, plan)
    net = prob.route_qp >= 0
    # a ring of 4 ranks on 2 servers: 2 network hops, each split over its 2 QPs
    assert net.sum() == 4 and np.all(prob.route_weight[net] == 0.5)
    assert np.all(prob.route_weight[~net] == 1.0)
    assert np.all(np.isinf(prob.flow_rate_cap_bps))
    # a QP paced at 30 Gb/s carries half of the hop: the flow cannot exceed 60 Gb/s
    paced = plan.with_rates(np.array([30e9, 80e9, 50e9, 40e9]))
    capped, _ = to_problem(f, wl, paced, paced=True)
    assert capped.flow_rate_cap_bps.tolist() == [60e9]
    hq = HopQps.of(wl)
    assert hq.share.tolist() == [0.5] * 4 and sorted(hq.qp.tolist()) == [0, 1, 2, 3]


def test_failure_moves_only_the_routes_whose_plan_route_changed(small_fabric):
    wl = workload(small_fabric)
    pol = get_policy("ecmp")
    ctx = PlanContext.create(small_fabric, wl)
    before = pol.plan(ctx)
    prob, pmap = to_problem(small_fabric, wl, before)
    # the first fabric link of QP 0's path fails; the switches re-hash
    link = int(before.path_of(0)[1])
    back = small_fabric.link_id(int(small_fabric.link_dst[link]),
                                int(small_fabric.link_src[link]))
    after = pol.plan(ctx.after_failure([link, back]))
    changed = changed_routes(before, after)
    assert changed[0] and not changed.all()
    fail = failure_reroutes(pmap, before, LinkEvent(5, np.array([link, back]), False, after), 7)
    # the moved routes, and only they, become the routes of the new plan's problem
    want, _ = to_problem(small_fabric, wl, after)
    moved = fail.reroute_route.tolist()
    assert moved == [k for k in range(prob.n_routes)
                     if pmap.plan_route[k] >= 0 and changed[pmap.plan_route[k]]]
    for i, k in enumerate(moved):
        assert fail.new_route(i).tolist() == want.route(k).tolist()
    kept = sorted(set(range(prob.n_routes)) - set(moved))
    assert all(prob.route(k).tolist() == want.route(k).tolist() for k in kept)
    assert fail.t_ns == 5 and fail.reroute_delay_ns == 7


def test_a_replan_must_keep_the_route_structure(small_fabric):
    wl = workload(small_fabric)
    plan = get_policy("ecmp").plan(PlanContext.create(small_fabric, wl))
    other = PathPlan(plan.sport, plan.route_qp[:-1], plan.route_weight[:-1],
                     plan.route_indptr[:-1], plan.route_links[:plan.route_indptr[-2]],
                     plan.rate_bps)
    with pytest.raises(ValueError, match="route structure"):
        changed_routes(plan, other)


def test_flow_names_name_each_flow_by_its_collective(small_fabric):
    wl = workload(small_fabric, "alltoall")
    prob, _ = to_problem(small_fabric, wl, get_policy("ecmp").plan(
        PlanContext.create(small_fabric, wl)))
    name = wl.collectives[0].name
    assert len(prob.flow_names) == wl.n_flows
    assert list(prob.flow_names) == [f"{name}#{f}" for f in range(wl.n_flows)]
    assert prob.flow_names[-1] == f"{name}#{wl.n_flows - 1}"
    assert prob.flow_names[1:3] == [f"{name}#1", f"{name}#2"]
