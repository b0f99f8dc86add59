import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.engine.flow import EngineError, run_flow
from icefabric.engine.problem import LinkFailure, build_problem, csr_from_lists


def test_single_flow_time_is_size_over_capacity_plus_latency():
    p = build_problem(link_capacity_bps=[100e9], link_delay_ns=[0], flow_size_bytes=[1e6],
                      routes=[[0]], route_flow=[0], flow_latency_ns=[2000])
    r = run_flow(p)
    assert r.flow_finish_ns[0] == 80_000 + 2000  # 8e6 bit / 100 Gb/s = 80 us


def test_dependencies_and_fair_sharing():
    # f0 and f1 share link 0; f2 starts when f0 completes
    p = build_problem(link_capacity_bps=[10e9, 10e9], link_delay_ns=[0, 0],
                      flow_size_bytes=[1e6, 2e6, 1e6], routes=[[0], [0], [1]],
                      route_flow=[0, 1, 2], deps=[[], [], [0]])
    r = run_flow(p)
    assert r.flow_finish_ns[0] == 1_600_000  # 5 Gb/s each
    assert r.flow_finish_ns[1] == 2_400_000  # then 10 Gb/s for the last 1e6 B
    assert r.flow_start_ns[2] == 1_600_000 and r.flow_finish_ns[2] == 2_400_000


@pytest.mark.parametrize("shared", [False, True])
def test_peak_utilisation_follows_a_refill(shared):
    # f0 (links 0, 1) and f1 (links 0, 2): f1 runs at 6 Gb/s beside f0 (held to 4 Gb/s by
    # link 1), then at 10 Gb/s once f0 is done, so link 2's peak is reached only after the
    # re-fill; with ``shared`` f1 reaches link 2 over a group's shared route (grouped index)
    from dataclasses import replace

    from icefabric.engine.problem import SharedRoutes

    routes, flows = [[0, 1], [0] if shared else [0, 2]], [0, 1]
    p = build_problem(link_capacity_bps=[10e9, 4e9, 100e9], link_delay_ns=[0, 0, 0],
                      flow_size_bytes=[1e6, 1e7], routes=routes, route_flow=flows)
    if shared:
        p = replace(p, shared=SharedRoutes(np.array([0, 1]), np.array([1]), np.array([0]),
                                           np.array([1.0]), np.array([0, 1]), np.array([2])))
    r = run_flow(p)
    assert r.flow_finish_ns[0] == 2_000_000  # 8e6 bit at 4 Gb/s
    np.testing.assert_allclose(r.link_peak_util, [1.0, 1.0, 0.1], rtol=1e-12)
    np.testing.assert_allclose(r.link_bytes, [1.1e7, 1e6, 1e7], rtol=1e-12)


def test_coupled_ring_runs_at_its_slowest_hop():
    # a 3-hop ring over links of 100/100/25 Gb/s moves 1 MB per hop at 25 Gb/s
    p = build_problem(link_capacity_bps=[100e9, 100e9, 25e9], link_delay_ns=[0, 0, 0],
                      flow_size_bytes=[1e6], routes=[[0], [1], [2]], route_flow=[0, 0, 0])
    r = run_flow(p)
    assert r.flow_finish_ns[0] == 320_000
    np.testing.assert_allclose(r.link_bytes, [1e6, 1e6, 1e6])


def test_failure_blocks_then_reroutes():
    # flow on link 0 fails at 40 us and is moved to link 1 after 10 us
    ptr, links = csr_from_lists([[1]])
    fail = LinkFailure(t_ns=40_000, links=np.array([0]), reroute_route=np.array([0]),
                       reroute_indptr=ptr, reroute_links=links, reroute_delay_ns=10_000)
    p = build_problem(link_capacity_bps=[100e9, 100e9], link_delay_ns=[0, 0],
                      flow_size_bytes=[1e6], routes=[[0]], route_flow=[0], failures=[fail])
    r = run_flow(p)
    assert r.flow_finish_ns[0] == 80_000 + 10_000
    np.testing.assert_allclose(r.link_bytes, [0.5e6, 0.5e6])


def test_unrecoverable_failure_is_a_loud_error():
    ptr, links = csr_from_lists([])
    fail = LinkFailure(t_ns=10, links=np.array([0]), reroute_route=np.zeros(0, np.int64),
                       reroute_indptr=ptr, reroute_links=links)
    p = build_problem(link_capacity_bps=[1e9], link_delay_ns=[0], flow_size_bytes=[1e6],
                      routes=[[0]], route_flow=[0], failures=[fail])
    with pytest.raises(EngineError, match="cannot progress"):
        run_flow(p)


def test_dependency_cycle_is_reported():
    p = build_problem(link_capacity_bps=[1e9], link_delay_ns=[0], flow_size_bytes=[1, 1],
                      routes=[[0], [0]], route_flow=[0, 1], deps=[[1], [0]])
    with pytest.raises(EngineError, match="deadlock"):
        run_flow(p)


def _with_shared_link(shared: bool, failures=()):
    """Flows 0 and 1 (own links 1 and 2) also cross link 0 at 1/2 of their rates: as a
    shared route of the group {0, 1} or as a route of each."""
    from dataclasses import replace

    from icefabric.engine.problem import SharedRoutes

    own = [[1], [2]] if shared else [[1], [2], [0], [0]]
    p = build_problem(link_capacity_bps=[10e9, 8e9, 20e9], link_delay_ns=[0, 0, 0],
                      flow_size_bytes=[1e6, 3e6], routes=own,
                      route_flow=[0, 1] if shared else [0, 1, 0, 1],
                      route_weight=[1, 1] if shared else [1, 1, 0.5, 0.5], failures=failures)
    if not shared:
        return p
    grp = SharedRoutes(group_indptr=np.array([0, 2]), group_flows=np.array([0, 1]),
                       group=np.array([0]), weight=np.array([0.5]), indptr=np.array([0, 1]),
                       links=np.array([0]))
    return replace(p, shared=grp)


def test_shared_routes_load_every_flow_of_their_group():
    """A shared route is the route of each flow of its group: same incidence, same run;
    a failure of its link blocks the group's flows; engines that read routes refuse it."""
    from icefabric.engine.fluid import run as run_fluid

    a, b = run_flow(_with_shared_link(True)), run_flow(_with_shared_link(False))
    # link 1 holds flow 0 at 8G, flow 1 takes the rest of link 0 (2 x 10G - 8G), then 20G
    assert a.flow_finish_ns.tolist() == [1_000_000, 1_600_000]
    np.testing.assert_array_equal(a.flow_finish_ns, b.flow_finish_ns)
    np.testing.assert_array_equal(a.link_bytes, b.link_bytes)
    assert a.link_bytes[0] == 2e6
    fail = LinkFailure(t_ns=10, links=np.array([0]), reroute_route=np.zeros(0, np.int64),
                       reroute_indptr=np.zeros(1, np.int64), reroute_links=np.zeros(0, np.int64))
    with pytest.raises(EngineError, match="cannot progress"):
        run_flow(_with_shared_link(True, [fail]))
    with pytest.raises(EngineError, match="needs a route per flow"):
        run_fluid(_with_shared_link(True))


@st.composite
def problems(draw):
    L = draw(st.integers(1, 5))
    F = draw(st.integers(1, 10))
    routes, rflow = [], []
    for f in range(F):
        for _ in range(draw(st.integers(1, 2))):
            routes.append(draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=3)))
            rflow.append(f)
    deps = [draw(st.lists(st.integers(0, f - 1), max_size=2, unique=True)) if f else []
            for f in range(F)]
    return build_problem(
        link_capacity_bps=draw(st.lists(st.floats(1e9, 1e11), min_size=L, max_size=L)),
        link_delay_ns=[0] * L,
        flow_size_bytes=draw(st.lists(st.floats(0, 1e6), min_size=F, max_size=F)),
        routes=routes, route_flow=rflow, deps=deps,
        flow_start_ns=draw(st.lists(st.integers(0, 10_000), min_size=F, max_size=F)),
        flow_latency_ns=draw(st.lists(st.integers(0, 5000), min_size=F, max_size=F)))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_engine_invariants(p):
    r = run_flow(p)
    # every flow finished, after its start, after its dependencies
    assert np.all(r.flow_finish_ns >= r.flow_start_ns) and np.all(r.flow_start_ns >= 0)
    assert np.all(r.flow_start_ns >= p.flow_start_ns)
    for f in range(p.n_flows):
        for d in p.deps(f):
            assert r.flow_start_ns[f] >= r.flow_finish_ns[d]
    # bytes are conserved: each link carried exactly what the routes put on it
    expect = np.zeros(p.n_links)
    for k in range(p.n_routes):
        np.add.at(expect, p.route(k), p.flow_size_bytes[p.route_flow[k]] * p.route_weight[k])
    np.testing.assert_allclose(r.link_bytes, expect, rtol=1e-6, atol=1e-3)
    # no link was ever above capacity
    assert np.all(r.link_peak_util <= 1 + 1e-6)
    # the flow engine is deterministic
    r2 = run_flow(p)
    assert np.array_equal(r.flow_finish_ns, r2.flow_finish_ns)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.booleans())
def test_rates_after_finish_equal_a_full_recomputation(data, grouped):
    # the engine re-fills only the flows above the lowest level the finished flows freed;
    # that must give exactly the max-min rates of the flows that are left — with the
    # incidence as one matrix, or (``grouped``) with a shared route of a group of flows
    # kept apart (GroupedIndex: water-filling)
    from dataclasses import replace

    import scipy.sparse as sp

    from icefabric.engine.flow import _Classes, _index, _rates_after_finish
    from icefabric.engine.maxmin import maxmin_rates
    from icefabric.engine.problem import SharedRoutes

    L, F = data.draw(st.integers(1, 6)), data.draw(st.integers(2, 12))
    A = np.zeros((L, F))
    for f in range(F):
        for l in data.draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=3,
                                    unique=True)):
            A[l, f] = data.draw(st.sampled_from([0.5, 1.0, 2.0]))
    cap = np.array(data.draw(st.lists(st.sampled_from([10.0, 25.0, 40.0, 100.0]),
                                      min_size=L, max_size=L)))
    fcap = np.array(data.draw(st.lists(st.sampled_from([np.inf, np.inf, 7.0, 30.0]),
                                       min_size=F, max_size=F)))
    fin = np.array(sorted(data.draw(st.sets(st.integers(0, F - 1), min_size=1,
                                            max_size=F - 1))))
    ls, fs = np.nonzero(A)
    p = build_problem(link_capacity_bps=cap, link_delay_ns=np.zeros(L),
                      flow_size_bytes=np.ones(F), routes=[[x] for x in ls], route_flow=fs,
                      route_weight=A[ls, fs], flow_rate_cap_bps=fcap)
    if grouped:  # a group of flows shares a route over two links
        members = np.array(sorted(data.draw(st.sets(st.integers(0, F - 1), min_size=1))))
        links = data.draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=2))
        w = data.draw(st.sampled_from([0.25, 0.5]))
        p = replace(p, shared=SharedRoutes(np.array([0, len(members)]), members,
                                           np.array([0]), np.array([w]),
                                           np.array([0, len(links)]), np.array(links)))
        for x in links:
            A[x, members] += w
    rate = maxmin_rates(sp.csr_matrix(A), cap, fcap)
    load = A @ rate
    run = np.ones(F, bool)
    run[fin] = False
    left = _Classes(np.ones(F))  # the flows left, in classes by rate as the engine has them
    left.regroup(np.flatnonzero(run), rate)
    left.freeze_running()
    _rates_after_finish(_index(p, p.route_indptr, p.route_links), p, rate, load, left, fin)
    expect = np.zeros(F)
    expect[run] = maxmin_rates(sp.csr_matrix(A[:, run]), cap, fcap[run])
    np.testing.assert_allclose(rate, expect, rtol=1e-7)
    np.testing.assert_allclose(load, A @ expect, rtol=1e-7, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_waterfill_gives_the_max_min_rates(data):
    """Water-filling over own entries and groups' entries gives the rates of progressive
    filling on the expanded incidence (within 1e-9), caps and flows on no link included."""
    from dataclasses import replace

    import scipy.sparse as sp

    from icefabric.engine.grouped import GroupedIndex
    from icefabric.engine.maxmin import maxmin_rates
    from icefabric.engine.problem import SharedRoutes

    L, F, G = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 12)), 2
    A = np.zeros((L, F))
    ls, fs, ws = [], [], []
    for f in range(F):
        for l in data.draw(st.lists(st.integers(0, L - 1), max_size=3, unique=True)):
            ls.append(l), fs.append(f), ws.append(data.draw(st.sampled_from([0.5, 1.0, 3.0])))
            A[l, f] += ws[-1]
    cap = np.array(data.draw(st.lists(st.floats(1.0, 100.0), min_size=L, max_size=L)))
    fcap = np.array(data.draw(st.lists(st.sampled_from([np.inf, 5.0, 30.0]), min_size=F,
                                       max_size=F)))
    gflows = [data.draw(st.lists(st.integers(0, F - 1), max_size=F)) for _ in range(G)]
    glinks = [data.draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=2))
              for _ in range(G)]
    gw = [data.draw(st.sampled_from([0.125, 0.875, 1 / 3])) for _ in range(G)]
    for g in range(G):
        for f in gflows[g]:  # a flow listed twice counts twice
            for x in glinks[g]:
                A[x, f] += gw[g]
    p = build_problem(link_capacity_bps=cap, link_delay_ns=np.zeros(L),
                      flow_size_bytes=np.zeros(F), routes=[[x] for x in ls] or [[0]],
                      route_flow=fs or [0], route_weight=ws or [0.0], flow_rate_cap_bps=fcap)
    p = replace(p, shared=SharedRoutes(
        np.cumsum([0] + [len(x) for x in gflows]), np.array(sum(gflows, []), dtype=np.int64),
        np.arange(G), np.array(gw), np.cumsum([0] + [len(x) for x in glinks]),
        np.array(sum(glinks, []))))
    ix = GroupedIndex(p, p.route_indptr, p.route_links)
    rate, load = np.zeros(F), np.zeros(L)
    ix.fill(np.arange(F), rate, load, cap, fcap)
    want = maxmin_rates(sp.csr_matrix(A), cap, fcap)
    np.testing.assert_allclose(rate, want, rtol=1e-9)
    # the index keeps its scratch between fills: a fill of other flows after this one
    # gives what it gives on a fresh index
    sub = np.arange(0, F, 2)
    again, fresh = np.zeros(F), np.zeros(F)
    ix.fill(sub, again, np.zeros(L), cap, fcap)
    GroupedIndex(p, p.route_indptr, p.route_links).fill(sub, fresh, np.zeros(L), cap, fcap)
    np.testing.assert_array_equal(again, fresh)
    np.testing.assert_allclose(load, A @ np.where(np.isfinite(want), want, 0.0), rtol=1e-9,
                               atol=1e-9)


def test_delay_flows_are_dependency_delays():
    # compute (delay) -> transfer -> compute, beside a transfer that overlaps the first delay
    from icefabric.ccl.workload import CollectiveCall, WorkloadBuilder

    wb = WorkloadBuilder()
    c = wb.collective(CollectiveCall("x", "j", "sendrecv", 1, 2, "p2p", "nccl"))
    d1 = wb.delay(30_000)
    f = wb.flow(1e6, coll=c, deps=[d1], latency_ns=500)
    d2 = wb.delay(20_000, deps=[f])
    g = wb.flow(1e6, coll=c)  # starts at 0 on the same link
    assert wb.flow_coll[d1] == -1 and wb.flow_size[d2] == 0
    p = build_problem(link_capacity_bps=[100e9], link_delay_ns=[0],
                      flow_size_bytes=wb.flow_size, routes=[[0], [0]], route_flow=[f, g],
                      flow_latency_ns=wb.flow_latency, deps=wb.flow_deps)
    r = run_flow(p)
    # g alone for 30 us (375 kB), then both at 50 Gb/s: g's other 625 kB take 100 us
    assert r.flow_finish_ns[d1] == 30_000 and r.flow_start_ns[f] == 30_000
    assert r.flow_finish_ns[g] == 130_000
    # f: 625 kB by 130 us, its last 375 kB alone in 30 us, then its 500 ns latency
    assert r.flow_finish_ns[f] == 160_500
    assert r.flow_start_ns[d2] == 160_500 and r.makespan_ns == r.flow_finish_ns[d2] == 180_500


def test_equal_flows_advanced_as_classes_keep_the_flow_by_flow_times():
    """An AllToAll's equal flows advance as classes (flows whose rates change move to new
    ones); start and finish times equal the compiled kernel's, which advances every flow
    on its own with the same arithmetic (test_batch.py)."""
    from icefabric.ccl.collectives import add_collective
    from icefabric.ccl.communicator import Communicator
    from icefabric.ccl.workload import WorkloadBuilder
    from icefabric.engine.batch import RouteSets, run_flow_batch
    from icefabric.pipeline.problem import to_problem
    from icefabric.policies.base import PlanContext, get_policy
    from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
    from icefabric.topology.catalog import server_profile
    from icefabric.topology.model import ACCEL

    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 6, "h")],
                   LeafSpineSpec(servers_per_leaf=2, n_spines=2))
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("j", f, f.nodes_of_kind(ACCEL)), "alltoall", 1 << 26)
    w = wb.build(node_ip=f.node_ip)
    prob, _ = to_problem(f, w, get_policy("ecmp").plan(PlanContext.create(f, w)))
    r = run_flow(prob)
    start, finish = run_flow_batch(prob, RouteSets.stacked([(prob.route_indptr,
                                                             prob.route_links)]))
    assert np.array_equal(r.flow_start_ns, start[0])
    assert np.array_equal(r.flow_finish_ns, finish[0])
    assert len(np.unique(r.flow_finish_ns)) < prob.n_flows / 4  # flows finish in groups


def test_a_flow_that_changes_class_twice_is_counted_once():
    """Flow 3 shares a class with flow 1, speeds up alone (a class of its own), then slows
    down again when flow 4 starts (another one): its old entries must not count it twice
    (found by test_batch's hypothesis run: flow 3 finished 620 ns late)."""
    from icefabric.engine.batch import RouteSets, run_flow_batch

    routes = [[3, 1], [5, 1, 4], [2], [2, 3, 1], [2, 0, 4], [5, 0], [0, 1, 3], [1], [0]]
    p = build_problem(
        link_capacity_bps=[1e10, 1e11, 1e10, 2.5e10, 2.5e10, 1e10], link_delay_ns=[0] * 6,
        flow_size_bytes=[1e5, 3e5, 1e5, 3e5, 1e6, 3e5], routes=routes,
        route_flow=[0, 1, 1, 2, 2, 3, 4, 4, 5],
        route_weight=[1, .5, .5, .5, .5, 1, .5, .5, .5], deps=[[], [], [], [], [0], []],
        flow_latency_ns=[700, 0, 0, 0, 700, 0], flow_start_ns=[5000] * 5 + [0],
        flow_rate_cap_bps=[5e9, 5e9, 5e9, np.inf, 5e9, 5e9])
    _, finish = run_flow_batch(p, RouteSets.stacked([(p.route_indptr, p.route_links)]))
    assert run_flow(p).flow_finish_ns.tolist() == finish[0].tolist()
    assert finish[0][3] == 483100


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.data())
def test_column_fill_gives_maxmin_entries_rates_and_loads_exactly(links, flows, data):
    """The engine's compiled fill (the batched kernel's steps) on what other flows leave:
    maxmin_entries' rates and the loads ``np.bincount`` sums, the same floats, not just
    close (same entries, same arithmetic in the same order)."""
    import scipy.sparse as sp

    from icefabric.dataplane.fairness import maxmin_entries
    from icefabric.engine.flow import _ColumnIndex

    dense = np.array(data.draw(st.lists(
        st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.0, 2.0]), min_size=flows,
                 max_size=flows), min_size=links, max_size=links)))
    cap = np.array(data.draw(st.lists(st.sampled_from([1e9, 25e9, 100e9, 3.3e9]),
                                      min_size=links, max_size=links)))
    fcap = np.array(data.draw(st.lists(st.sampled_from([np.inf, 7e9, 50e9]),
                                       min_size=flows, max_size=flows)))
    busy = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.3e9, 2e9, 200e9]),
                                       min_size=links, max_size=links)))  # others' load
    sub = np.array(sorted(data.draw(st.sets(st.integers(0, flows - 1), min_size=1))))
    ci = _ColumnIndex(sp.csr_matrix(dense))
    rate, load = np.zeros(flows), busy.copy()
    ci.fill(sub, rate, load, cap, fcap)
    A = sp.csc_matrix(dense[:, sub])
    A.sum_duplicates()
    who = np.repeat(np.arange(len(sub)), np.diff(A.indptr))
    want = maxmin_entries(A.indices, who, A.data, np.maximum(cap - busy, 0.0), fcap[sub])
    assert rate[sub].tobytes() == want.tobytes()
    r = np.where(np.isfinite(want), want, 0.0)
    assert load.tobytes() == (busy + np.bincount(A.indices, A.data * r[who],
                                                 minlength=links)).tobytes()
    ci.release(load, sub, np.zeros(0, dtype=np.int64), rate)  # back to the others' load
    assert np.allclose(load, busy, rtol=1e-12, atol=1e-3)
