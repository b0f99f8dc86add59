import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.control import planning
from icefabric.control.demand import demand_from_pairs
from icefabric.control.planning import (
    PLANNERS,
    Candidates,
    Constraints,
    PlanOptions,
    leaf_cut_bound,
    link_utilization,
    plan_incremental,
    plan_paths,
    qps_needed,
    reoptimize,
    split_needed,
)
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import LINK_FABRIC
from icefabric.topology.routing import Routing

from .conftest import nics_of

#: Documented bound (docs/ice-planning.md): greedy + local improvement stays within this
#: factor of the MILP optimum of the maximum link utilisation on small instances; ``auto``
#: is collision-free or within the same factor: ``max_util <= max(1, MILP_BOUND * opt)``.
MILP_BOUND = 1.5


def test_registry():
    assert {"edge_coloring", "fat_tree", "greedy", "milp"} <= set(PLANNERS)
    with pytest.raises(ValueError):
        plan_paths(None, None, None, method="nope")


def _check_paths(fabric, routing, d, a):
    cands = Candidates(routing, d)
    for q, p in enumerate(a.paths):
        assert cands.index_of(q, p) >= 0  # every path is a real shortest path


def test_edge_coloring_optimal_uniform(small_fabric, routing_of):
    f = small_fabric
    rt = routing_of(f)
    src, dst = nics_of(f, [0, 1]), nics_of(f, [2, 3])  # 16 QPs leaf0 -> leaf1, 16 paths
    d = demand_from_pairs(f, np.r_[src, dst], np.r_[dst, src])
    a = plan_paths(f, rt, d, method="edge_coloring")
    _check_paths(f, rt, d, a)
    assert a.max_util == pytest.approx(1.0)  # every uplink and downlink exactly one QP
    fab = f.link_kind == 2
    assert np.allclose(a.link_util[fab], 1.0)


def test_edge_coloring_uses_ceil_delta_over_u(small_fabric, routing_of):
    f = small_fabric
    rt = routing_of(f)
    src, dst = nics_of(f, [0, 1]), nics_of(f, [2, 3])
    # 3 QPs per NIC pair -> 48 QPs on 16 uplinks -> 3 per uplink, rates 1/3 of the NIC.
    s3, d3 = np.repeat(src, 3), np.repeat(dst, 3)
    d = demand_from_pairs(f, s3, d3, rate_bps=400e9 / 3)
    a = plan_paths(f, rt, d, method="edge_coloring")
    assert a.max_util == pytest.approx(1.0)
    assert a.meta["colors"] == 48


def test_fat_tree_coloring_balanced(ft_fabric, routing_of):
    f = ft_fabric
    rt = routing_of(f)
    # Servers 0,1 on pod-0 leaf 0; 4,5 on pod-1 leaf 0: cross-pod traffic, both directions.
    src, dst = nics_of(f, [0, 1]), nics_of(f, [4, 5])
    d = demand_from_pairs(f, np.r_[src, dst], np.r_[dst, src])
    a = plan_paths(f, rt, d, method="fat_tree")
    _check_paths(f, rt, d, a)
    assert a.collision_free
    g = plan_paths(f, rt, d, method="auto")
    assert g.method == "fat_tree" and g.max_util == pytest.approx(a.max_util)


def _random_instance(seed):
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h"),
                    ServerGroup(server_profile("atlas-800t-a2"), 2, "a")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=3, links_per_spine=1))
    rng = np.random.default_rng(seed)
    nics = nics_of(f, range(4))
    q = int(rng.integers(4, 16))
    src, dst = rng.choice(nics, q), rng.choice(nics, q)
    keep = f.nic_leaf[src] != f.nic_leaf[dst]
    src, dst = src[keep], dst[keep]
    n = len(src)
    d = demand_from_pairs(f, src, dst, rate_bps=rng.choice([50e9, 100e9, 200e9, 400e9], n),
                          job=rng.integers(0, 2, n), phase=rng.integers(0, 2, n))
    return f, d


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_no_plan_worse_than_milp_bound(seed):
    from icefabric.topology.routing import Routing

    f, d = _random_instance(seed)
    if d.n_qps == 0:
        return
    rt = Routing(f)
    m = plan_paths(f, rt, d, method="milp")
    assert m.meta["optimal"]
    for method in ("greedy", "auto"):
        a = plan_paths(f, rt, d, method=method)
        bound = MILP_BOUND * m.max_util if method == "greedy" else \
            max(1.0, MILP_BOUND * m.max_util)
        assert a.max_util <= bound + 1e-9
        # the reported utilisation is the objective of the paths
        assert np.allclose(a.link_util, link_utilization(f, d, a.paths))
    # MILP is a lower bound for every plan, and the leaf cut bound is below the optimum
    g = plan_paths(f, rt, d, method="greedy")
    assert m.max_util <= g.max_util + 1e-9
    assert leaf_cut_bound(f, d) <= m.max_util + 1e-9


def test_auto_keeps_a_colouring_at_the_cut_bound():
    # 2:1 oversubscribed: no plan is collision-free, but the colouring meets the leaf cut
    # bound, so auto returns it without the (slow) greedy searches
    from icefabric.topology.routing import Routing

    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                   LeafSpineSpec(servers_per_leaf=2, n_spines=4, oversub=2.0))
    src, dst = nics_of(f, [0, 1]), nics_of(f, [2, 3])
    d = demand_from_pairs(f, np.r_[src, dst], np.r_[dst, src])
    a = plan_paths(f, Routing(f), d, method="auto")
    assert leaf_cut_bound(f, d) == pytest.approx(2.0)
    assert a.method == "edge_coloring" and a.max_util == pytest.approx(2.0)
    assert "tried" not in a.meta


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_quantised_cut_bound_never_exceeds_the_optimum(seed):
    """With one rate for every QP the bound rounds up to whole multiples of rate/capacity;
    it stays a lower bound of the MILP optimum (several jobs and phases included)."""
    from icefabric.topology.routing import Routing

    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=3, links_per_spine=1))
    rng = np.random.default_rng(seed)
    nics = nics_of(f, range(4))
    src, dst = rng.choice(nics, 12), rng.choice(nics, 12)
    keep = f.nic_leaf[src] != f.nic_leaf[dst]
    n = int(keep.sum())
    if n == 0:
        return
    d = demand_from_pairs(f, src[keep], dst[keep], rate_bps=400e9,
                          job=rng.integers(0, 2, n), phase=rng.integers(0, 2, n))
    m = plan_paths(f, Routing(f), d, method="milp")
    assert m.meta["optimal"]
    assert leaf_cut_bound(f, d) <= m.max_util + 1e-9


def test_cut_bound_counts_whole_qps_per_link():
    """Five QPs at line rate leaving a leaf over three uplinks: the mean is 5/3 of a link,
    but some uplink carries two whole QPs, so the bound is 2 (and auto stops there)."""
    from icefabric.topology.routing import Routing

    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=3, links_per_spine=1))
    up = f.link_capacity_bps[(f.link_src == f.nic_leaf[f.servers[0].nics[0]])
                             & (f.link_kind == LINK_FABRIC)]
    src, dst = nics_of(f, [0])[:5], nics_of(f, [1])[:5]
    d = demand_from_pairs(f, src, dst, rate_bps=float(up[0]))
    assert len(up) == 3 and leaf_cut_bound(f, d) == pytest.approx(2.0)
    a = plan_paths(f, Routing(f), d, method="auto")
    assert a.max_util == pytest.approx(2.0) and "tried" not in a.meta


def test_weighted_hetero_greedy_respects_capacities(hetero_fabric, routing_of):
    f = hetero_fabric
    rt = routing_of(f)
    # 400G pool leaf 0 -> 200G pool leaf 2: 8 QPs at 200G over 3 spines with 200G downlinks
    src, dst = nics_of(f, [0]), nics_of(f, [2])
    d = demand_from_pairs(f, src, dst, rate_bps=200e9)
    a = plan_paths(f, rt, d, method="greedy")
    m = plan_paths(f, rt, d, method="milp")
    assert a.max_util == pytest.approx(m.max_util)


def test_incremental_keeps_existing_and_reoptimize(small_fabric, routing_of):
    f = small_fabric
    rt = routing_of(f)
    src, dst = nics_of(f, [0]), nics_of(f, [2])
    d1 = demand_from_pairs(f, src, dst)
    a1 = plan_paths(f, rt, d1, method="greedy")
    d2 = demand_from_pairs(f, nics_of(f, [1]), nics_of(f, [3]), job=np.ones(8, int))
    d, a = plan_incremental(f, rt, d1, a1.paths, d2)
    assert d.n_qps == 16
    for q in range(8):
        assert np.array_equal(a.paths[q], a1.paths[q])
    assert a.collision_free
    r = reoptimize(f, rt, d)
    assert r.max_util <= a.max_util + 1e-9


def test_pinned_incompatible_with_coloring(small_fabric, routing_of):
    f = small_fabric
    d = demand_from_pairs(f, nics_of(f, [0]), nics_of(f, [2]))
    with pytest.raises(ValueError):
        plan_paths(f, routing_of(f), d, method="edge_coloring",
                   constraints=Constraints(np.ones(8, bool), [np.zeros(0, np.int64)] * 8))


def test_split_needed_when_uplinks_slower_than_nic():
    # 2 servers x 8 x 400G under a leaf, 16 spines x 2 links -> 32 uplinks of 200G.
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                   LeafSpineSpec(servers_per_leaf=2, n_spines=16, links_per_spine=2))
    from icefabric.topology.routing import Routing

    rt = Routing(f)
    assert f.link_capacity_bps[f.link_kind == 2].max() == pytest.approx(200e9)
    d = demand_from_pairs(f, nics_of(f, [0]), nics_of(f, [2]))  # one 400G QP per NIC
    assert split_needed(f, rt, d).tolist() == [2] * 8
    assert qps_needed(400e9, 200e9) == 2
    # With the connection split into 2 QPs of 200G the plan is collision-free.
    s, t = np.repeat(nics_of(f, [0]), 2), np.repeat(nics_of(f, [2]), 2)
    a = plan_paths(f, rt, demand_from_pairs(f, s, t, rate_bps=200e9))
    assert a.collision_free
    one = plan_paths(f, rt, d)
    assert one.max_util == pytest.approx(2.0)
    assert math.isclose(a.max_util, 1.0)


def _plan_and_replan(f, rt, d, sub, seed):
    """A greedy plan, a re-plan of ``sub`` against its kept load, and every QP's scores."""
    a = plan_paths(f, rt, d, method="greedy", options=PlanOptions(seed=seed))
    csr = planning.paths_to_csr(a.paths)
    load = planning.load_state(f, d, csr)
    paths, util = planning.replan_subset(f, rt, d, planning.Subset(sub, csr, load),
                                         options=PlanOptions(seed=seed))
    cands = planning.Candidates(rt, d)
    return a, paths, util, [load.score(q, cands.of(q)) for q in range(d.n_qps)], load


def _assert_same_plans(x, y):
    assert np.array_equal(x[0].link_util, y[0].link_util)
    assert all(np.array_equal(p, q) for p, q in zip(x[0].paths, y[0].paths, strict=True))
    assert all(np.array_equal(p, q) for p, q in zip(x[1], y[1], strict=True))
    assert np.array_equal(x[2], y[2])
    assert all(np.array_equal(p, q) for a, b in zip(x[3], y[3], strict=True)
               for p, q in zip(a, b, strict=True))
    assert np.array_equal(x[4].rate_sums(), y[4].rate_sums())


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 3))
def test_one_phase_loads_plan_as_the_general_tables(seed, jobs):
    """With one phase per job the load tables alias the rate sums (LoadState's fast path);
    the greedy plan and a re-plan of a subset against the kept load are the ones the
    general job x phase tables give, to the bit."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=3))
    rt = Routing(f)
    rng = np.random.default_rng(seed)
    nics = f.servers[0].nics + f.servers[1].nics
    dst = rng.choice(f.servers[2].nics + f.servers[3].nics, size=len(nics))
    d = demand_from_pairs(f, np.array(nics), dst, rate_bps=rng.uniform(50e9, 400e9, len(nics)),
                          job=rng.integers(0, jobs, len(nics)))
    assert planning._one_phase_per_job(d)
    sub = rng.choice(d.n_qps, size=3, replace=False)
    fast = _plan_and_replan(f, rt, d, sub, seed)
    one_phase = planning._one_phase_per_job
    try:
        planning._one_phase_per_job = lambda demand: False
        slow = _plan_and_replan(f, rt, d, sub, seed)
    finally:
        planning._one_phase_per_job = one_phase
    _assert_same_plans(fast, slow)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16), st.integers(2, 14), st.integers(1, 3))
def test_slot_tables_plan_as_the_dense_tables(seed, jobs, phases):
    """Past ``_DENSE_ENTRIES`` the load keeps a row per (link, job) that carries load: the
    greedy plan, its utilisation, a re-plan against the kept load, every score and the
    rate sums are those of the link-sized tables, to the bit (links of three jobs or more
    included)."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=3))
    rt = Routing(f)
    rng = np.random.default_rng(seed)
    src = np.array(f.servers[0].nics + f.servers[1].nics)
    dst = rng.choice(f.servers[2].nics + f.servers[3].nics, size=len(src))
    n = 2 * len(src)
    d = demand_from_pairs(f, np.r_[src, dst], np.r_[dst, src],
                          rate_bps=rng.uniform(50e9, 400e9, n),
                          job=rng.integers(0, jobs, n), phase=rng.integers(0, phases, n))
    sub = rng.choice(d.n_qps, size=4, replace=False)
    dense = _plan_and_replan(f, rt, d, sub, seed)
    budget = planning._DENSE_ENTRIES
    try:
        planning._DENSE_ENTRIES = 0
        slots = _plan_and_replan(f, rt, d, sub, seed)
    finally:
        planning._DENSE_ENTRIES = budget
    assert dense[4].dense and not slots[4].dense
    _assert_same_plans(dense, slots)


def test_load_of_many_jobs_takes_memory_for_the_links_they_use():
    """5,000 one-QP jobs on 3,328 links: the link x phase and link x job tables would be
    266 MB; the load keeps a row per (link, job) with load instead (a few MB), and the
    utilisation is each link's rate sum over its capacity."""
    import tracemalloc

    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 64, "h")],
                   LeafSpineSpec(servers_per_leaf=4, n_spines=8))
    rt = Routing(f)
    rng = np.random.default_rng(0)
    nics = np.array([x for s in f.servers for x in s.nics])
    n = 5000
    d = demand_from_pairs(f, rng.choice(nics, n), rng.choice(nics, n),
                          rate_bps=rng.uniform(1e9, 50e9, n), job=np.arange(n))
    paths = [rt.walk(d.src_nic[i:i + 1], d.dst_nic[i:i + 1],
                     lambda step, idx, sw, dl, size: np.zeros(len(idx), dtype=np.int64)
                     )[0][1:-1] for i in range(n)]
    assert f.n_links * (d.n_phases + n) * 8 > 250e6  # the dense tables' size
    tracemalloc.start()
    try:
        util = link_utilization(f, d, paths)
        load = planning.load_state(f, d, planning.paths_to_csr(paths))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not load.dense
    assert peak < 8e6, f"{peak / 1e6:.1f} MB"
    ptr, flat = planning.paths_to_csr(paths)
    want = np.bincount(flat, weights=np.repeat(d.ent_rate_bps, np.diff(ptr)),
                       minlength=f.n_links) / f.link_capacity_bps
    want[f.link_kind != LINK_FABRIC] = 0.0
    assert np.allclose(util, want, rtol=1e-12, atol=0)
    assert np.array_equal(load.util(), util)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 12), st.integers(1, 3))
def test_leaf_need_is_the_node_phase_tables(seed, jobs, phases):
    """Each leaf's need (sum over jobs of the peak phase's rate) from the (leaf, phase)
    pairs that occur is the node x phase table's, to the bit."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=3))
    rng = np.random.default_rng(seed)
    nics = np.array([x for s in f.servers for x in s.nics])
    n = 40
    d = demand_from_pairs(f, rng.choice(nics, n), rng.choice(nics, n),
                          rate_bps=rng.uniform(1e9, 400e9, n), job=rng.integers(0, jobs, n),
                          phase=rng.integers(0, phases, n))
    q, ph, rate = d.ent_qp, d.ent_phase, d.ent_rate_bps
    P = d.n_phases
    per = np.bincount(d.src_leaf[q] * P + ph, rate, minlength=f.n_nodes * P)
    per = per.reshape(f.n_nodes, P)
    want = np.zeros(f.n_nodes)
    for j in range(len(d.job_names)):
        jp = np.flatnonzero(d.phase_job == j)
        if len(jp):
            want += per[:, jp].max(axis=1)
    assert np.array_equal(planning._leaf_need(f.n_nodes, d, d.src_leaf[q], ph, rate), want)
