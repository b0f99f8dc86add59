import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.csr import csr_from_lists
from icefabric.engine.batch import RouteSets, redundant_links, run_flow_batch
from icefabric.engine.flow import run_flow
from icefabric.engine.problem import EngineError, LinkFailure, build_problem


@st.composite
def problems(draw):
    """A small problem (flows with dependencies, latencies, caps, multi-route flows) and
    several route sets of it: the same routes with links drawn anew."""
    L = draw(st.integers(2, 6))
    cap = draw(st.lists(st.sampled_from([10e9, 25e9, 100e9]), min_size=L, max_size=L))
    F = draw(st.integers(1, 7))
    size = draw(st.lists(st.sampled_from([0.0, 1e5, 3e5, 1e6]), min_size=F, max_size=F))
    deps = [sorted(draw(st.sets(st.integers(0, f - 1), max_size=2))) if f else []
            for f in range(F)]
    route_flow = [f for f in range(F) for _ in range(draw(st.integers(1, 2)))]
    n_sets = draw(st.integers(1, 5))
    sets = [[draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=3, unique=True))
             for _ in route_flow] for _ in range(n_sets)]
    prob = build_problem(
        link_capacity_bps=cap, link_delay_ns=[0] * L, flow_size_bytes=size,
        routes=sets[0], route_flow=route_flow,
        route_weight=[draw(st.sampled_from([0.5, 1.0])) for _ in route_flow], deps=deps,
        flow_latency_ns=draw(st.lists(st.sampled_from([0, 700]), min_size=F, max_size=F)),
        flow_start_ns=draw(st.lists(st.sampled_from([0, 5000]), min_size=F, max_size=F)),
        flow_rate_cap_bps=draw(st.lists(st.sampled_from([np.inf, 5e9]), min_size=F,
                                        max_size=F)))
    return prob, [csr_from_lists(s) for s in sets]


def _with_routes(prob, routes):
    from dataclasses import replace

    ptr, links = routes
    return replace(prob, route_indptr=ptr, route_links=links)


@settings(max_examples=150, deadline=None)
@given(problems())
def test_batch_equals_one_run_per_route_set(case):
    prob, routes = case
    start, finish = run_flow_batch(prob, RouteSets.stacked(routes))
    for n, r in enumerate(routes):
        one = run_flow(_with_routes(prob, r))
        np.testing.assert_array_equal(start[n], one.flow_start_ns)
        np.testing.assert_array_equal(finish[n], one.flow_finish_ns)


@settings(max_examples=100, deadline=None)
@given(problems(), st.data())
def test_fixed_segments_around_the_drawn_ones_are_the_same_routes(case, data):
    # route k = fixed row pre[k] + its drawn links + fixed row post[k] (as server paths
    # around a plan's fabric routes); every draw must equal run_flow on the whole routes
    prob, routes = case
    K, L = prob.n_routes, prob.n_links
    fixed = data.draw(st.lists(st.lists(st.integers(0, L - 1), max_size=2), min_size=1,
                               max_size=3))
    pre, post = (np.array(data.draw(st.lists(st.integers(-1, len(fixed) - 1), min_size=K,
                                             max_size=K))) for _ in range(2))
    f_ptr, f_links = csr_from_lists(fixed)
    rs = RouteSets.stacked(routes)
    rs = RouteSets(f_ptr, f_links, pre, rs.mid_row, post, rs.mid_indptr, rs.mid_links, rs.n)
    whole = [csr_from_lists([(fixed[pre[k]] if pre[k] >= 0 else [])
                             + links[ptr[k]:ptr[k + 1]].tolist()
                             + (fixed[post[k]] if post[k] >= 0 else []) for k in range(K)])
             for ptr, links in routes]
    prob = _with_routes(prob, whole[0])  # the problem's own routes are the first set's
    start, finish = run_flow_batch(prob, rs)
    for n, r in enumerate(whole):
        one = run_flow(_with_routes(prob, r))
        np.testing.assert_array_equal(start[n], one.flow_start_ns, err_msg=f"draw {n}")
        np.testing.assert_array_equal(finish[n], one.flow_finish_ns, err_msg=f"draw {n}")


def test_a_link_that_never_limits_is_left_out_and_rates_stay():
    # link 1 (fast) carries a subset of link 0's flows: it can never saturate first
    prob = build_problem(link_capacity_bps=[10e9, 100e9, 10e9], link_delay_ns=[0, 0, 0],
                         flow_size_bytes=[1e6, 1e6, 1e6], routes=[[0, 1], [0], [2, 1]],
                         route_flow=[0, 1, 2])
    routes = [(prob.route_indptr, prob.route_links)]
    # link 1 also carries flow 2
    assert redundant_links(prob, RouteSets.stacked(routes)).tolist() == []
    prob2 = build_problem(link_capacity_bps=[10e9, 100e9], link_delay_ns=[0, 0],
                          flow_size_bytes=[1e6, 2e6], routes=[[0, 1], [0]],
                          route_flow=[0, 1])
    routes2 = RouteSets.stacked([(prob2.route_indptr, prob2.route_links)])
    assert redundant_links(prob2, routes2).tolist() == [1]
    _, finish = run_flow_batch(prob2, routes2)
    np.testing.assert_array_equal(finish[0], run_flow(prob2).flow_finish_ns)


def test_failures_and_mismatched_routes_are_refused():
    prob = build_problem(link_capacity_bps=[10e9, 10e9], link_delay_ns=[0, 0],
                         flow_size_bytes=[1e6], routes=[[0]], route_flow=[0])
    with pytest.raises(EngineError, match="one link list per route"):
        run_flow_batch(prob, RouteSets.stacked([csr_from_lists([[0], [1]])]))
    ptr, links = csr_from_lists([[1]])
    from dataclasses import replace

    failing = replace(prob, failures=(LinkFailure(
        t_ns=10, links=np.array([0]), reroute_route=np.array([0]), reroute_indptr=ptr,
        reroute_links=links, reroute_delay_ns=0),))
    with pytest.raises(EngineError, match="without link failures"):
        run_flow_batch(failing, RouteSets.stacked([(prob.route_indptr, prob.route_links)]))


def test_twin_links_are_left_out_of_a_draw_and_results_stay():
    """Links 0-2 carry the same flows with the same weights in both draws (twins): only
    one of the least capacity (link 1, before its equal 2) stays in a draw's incidence;
    link 3 carries another set and stays. Every draw equals run_flow on its routes."""
    from icefabric.engine.batch import _routes
    from icefabric.engine.batch_kernel import _incidence, _merge_twins, _net_buffers, new_scratch

    cap = [10e9, 5e9, 5e9, 50e9]
    sets = [[[0, 1, 2, 3], [0, 1, 2]], [[0, 1, 2], [0, 1, 2, 3]]]
    prob = build_problem(link_capacity_bps=cap, link_delay_ns=[0] * 4,
                         flow_size_bytes=[1e6, 2e6], routes=sets[0], route_flow=[0, 1])
    routes = RouteSets.stacked([csr_from_lists(s) for s in sets])
    rt = _routes(prob, routes)
    assert rt.keep.all()  # every link changes between the draws: none left out before
    net = _net_buffers(rt, 2, 2)
    sc = new_scratch(len(rt.cap), 2, len(net.c_link))
    for n in range(2):
        _incidence(rt, n, net, sc)
        _merge_twins(net, np.full(16, -1), np.zeros(4, dtype=bool))
        kept = [sorted(net.c_link[net.c_ptr[f]:net.c_ptr[f + 1]].tolist()) for f in range(2)]
        assert kept == ([[1, 3], [1]] if n == 0 else [[1], [1, 3]]), f"draw {n}: {kept}"
    start, finish = run_flow_batch(prob, routes)
    for n, s in enumerate(sets):
        one = run_flow(_with_routes(prob, csr_from_lists(s)))
        np.testing.assert_array_equal(finish[n], one.flow_finish_ns, err_msg=f"draw {n}")
