import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.control.demand import demand_from_pairs
from icefabric.control.failover import (
    PlanBefore,
    _changed_pairs,
    _ends,
    affected_qps,
    replan_after_failure,
)
from icefabric.control.hashing import fabric_hash_configs
from icefabric.control.planning import load_state, paths_to_csr, plan_paths
from icefabric.control.realize import QpPaths, realize_paths
from icefabric.csr import CsrRows
from icefabric.topology.model import LINK_FABRIC, NIC

from .conftest import nics_of


def test_failover_moves_only_affected_paths(small_fabric, routing_of):
    f = small_fabric
    rt = routing_of(f)
    cfg = fabric_hash_configs(f)
    src, dst = nics_of(f, [0, 1]), nics_of(f, [2, 3])
    d = demand_from_pairs(f, np.r_[src, dst], np.r_[dst, src], rate_bps=200e9)
    a = plan_paths(f, rt, d)
    r = realize_paths(f, rt, cfg, QpPaths(d.src_nic, d.dst_nic, a.paths))
    assert r.ok.all()
    # Fail one leaf0 uplink (both directions of that cable).
    up = int(a.paths[0][0])
    back = f.link_id(int(f.link_dst[up]), int(f.link_src[up]))
    down = [up, back] if f.link_dst[back] == f.link_src[up] else [up]
    rt2 = routing_of(f, tuple(sorted(down)))
    res = replan_after_failure(f, rt2, cfg, PlanBefore(d, a.paths, r.sport))
    hit = affected_qps(a.paths, rt2.down)
    assert set(res.affected.tolist()) == set(hit.tolist()) and len(hit) >= 1
    # Paths of unaffected QPs are unchanged; the new plan avoids the failed link.
    for q in range(d.n_qps):
        if q not in set(hit.tolist()):
            assert np.array_equal(res.assignment.paths[q], a.paths[q])
        assert not np.any(rt2.down[res.paths[q]])
    assert res.ok.all()  # every re-hashed path follows the new plan
    # Ports of QPs that neither lost their path nor were remapped are kept.
    same = np.setdiff1d(np.arange(d.n_qps), np.r_[res.affected, res.remapped])
    assert np.array_equal(res.sport[same], r.sport[same])
    assert res.assignment.max_util <= 1.0 + 1e-9  # 200G QPs fit the 15 remaining uplinks


def _one_uplink_down(f, routing_of):
    """Four servers' QPs planned and ported at 100G, then the first uplink of QP 3's path
    fails: (routing before, hash configs, demand, paths, realization, routing after)."""
    rt = routing_of(f)
    cfg = fabric_hash_configs(f)
    src, dst = nics_of(f, [0, 1]), nics_of(f, [2, 3])
    d = demand_from_pairs(f, np.r_[src, dst], np.r_[dst, src], rate_bps=100e9)
    a = plan_paths(f, rt, d)
    r = realize_paths(f, rt, cfg, QpPaths(d.src_nic, d.dst_nic, a.paths))
    up = int(a.paths[3][0])
    down = [up, f.link_id(int(f.link_dst[up]), int(f.link_src[up]))]
    return rt, cfg, d, a, r, routing_of(f, tuple(sorted(down)))


def test_fast_path_matches_full_rehash(small_fabric, routing_of):
    f = small_fabric
    rt, cfg, d, a, r, rt2 = _one_uplink_down(f, routing_of)
    slow = replan_after_failure(f, rt2, cfg, PlanBefore(d, a.paths, r.sport))
    fast = replan_after_failure(f, rt2, cfg, PlanBefore(d, a.paths, r.sport, routing=rt,
                                                        full_paths=r.paths))
    assert np.array_equal(slow.affected, fast.affected)
    assert np.array_equal(slow.remapped, fast.remapped)
    assert fast.ok.all() and slow.ok.all()
    # mod-N groups: losing one of 8 uplinks remaps other QPs of that leaf too
    assert len(fast.remapped) > 0


def test_a_qp_without_a_planned_port_is_not_rehashed_nor_verified(small_fabric, routing_of):
    """realize_paths gives -1 where no port realises a path; a re-plan keeps such a QP
    unverified instead of hashing port -1 (which the hash model rejects)."""
    f = small_fabric
    rt, cfg, d, a, r, rt2 = _one_uplink_down(f, routing_of)
    first = replan_after_failure(f, rt2, cfg, PlanBefore(d, a.paths, r.sport, routing=rt,
                                                         full_paths=r.paths))
    kept = np.setdiff1d(np.arange(d.n_qps), np.r_[first.affected, first.remapped])
    sport = r.sport.copy()
    sport[kept[0]] = -1
    sport[first.affected[0]] = -1  # re-ported: its fallback (-1) is no port either
    res = replan_after_failure(f, rt2, cfg, PlanBefore(d, a.paths, sport, routing=rt,
                                                       full_paths=r.paths))
    assert not res.ok[kept[0]] and res.sport[kept[0]] == -1
    assert res.ok.sum() == d.n_qps - 1 and res.sport[first.affected[0]] >= 0


def test_changed_pairs_are_every_group_whose_members_changed(ft_fabric, routing_of):
    """After a leaf->aggregation cable fails (distances to that leaf change) and after an
    aggregation->core cable fails, the candidate pairs hold every (switch, leaf) group
    that differs, compared pair by pair over the whole fabric."""
    f = ft_fabric
    rt = routing_of(f)
    up = rt.group(int(rt.leaves[0]), int(rt.leaves[-1]))
    core_up = rt.group(int(f.link_dst[up[0]]), int(rt.leaves[-1]))
    for link in (int(up[0]), int(core_up[0])):
        down = tuple(sorted([link, f.link_id(int(f.link_dst[link]), int(f.link_src[link]))]))
        rt2 = routing_of(f, down)
        NL = len(rt.leaves)
        truth = [s * NL + i for s, sw in enumerate(rt.switches.tolist())
                 for i, leaf in enumerate(rt.leaves.tolist())
                 if not np.array_equal(rt.group(sw, leaf), rt2.group(sw, leaf))]
        assert _changed_pairs(rt, rt2, _ends(rt, rt2)).tolist() == truth
        assert len(truth) > 0


def test_fast_path_matches_full_rehash_on_a_fat_tree(ft_fabric, routing_of):
    f = ft_fabric
    rt = routing_of(f)
    cfg = fabric_hash_configs(f)
    nics = f.nodes_of_kind(NIC)
    d = demand_from_pairs(f, nics, np.roll(nics, len(nics) // 2), rate_bps=100e9)
    a = plan_paths(f, rt, d)
    r = realize_paths(f, rt, cfg, QpPaths(d.src_nic, d.dst_nic, a.paths))
    link = int(next(p for p in a.paths if len(p) > 1)[1])  # an aggregation uplink
    rt2 = routing_of(f, tuple(sorted([link, f.link_id(int(f.link_dst[link]),
                                                       int(f.link_src[link]))])))
    slow = replan_after_failure(f, rt2, cfg, PlanBefore(d, a.paths, r.sport))
    fast = replan_after_failure(f, rt2, cfg, PlanBefore(
        d, CsrRows(*paths_to_csr(a.paths)), r.sport, routing=rt,
        full_paths=CsrRows(*paths_to_csr(r.paths))))
    assert len(fast.affected) > 0
    assert np.array_equal(slow.affected, fast.affected)
    assert np.array_equal(slow.remapped, fast.remapped)
    assert np.array_equal(slow.sport, fast.sport)
    assert all(np.array_equal(x, y) for x, y in zip(slow.paths, fast.paths, strict=True))
    assert all(np.array_equal(x, y) for x, y in
               zip(slow.assignment.paths, fast.assignment.paths, strict=True))


_FT_CASE = {}


def _ft_plan(f, routing_of):
    """A NIC permutation planned and ported on the fat-tree, once per session."""
    if id(f) not in _FT_CASE:
        rt = routing_of(f)
        cfg = fabric_hash_configs(f)
        nics = f.nodes_of_kind(NIC)
        d = demand_from_pairs(f, nics, np.roll(nics, len(nics) // 2 + 3), rate_bps=100e9)
        a = plan_paths(f, rt, d)
        r = realize_paths(f, rt, cfg, QpPaths(d.src_nic, d.dst_nic, a.paths))
        _FT_CASE[id(f)] = rt, cfg, d, a, r
    return _FT_CASE[id(f)]


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=2), st.booleans())
def test_incremental_replan_is_the_full_replan(ft_fabric, routing_of, picks, both_ways):
    """Random fabric links fail (one way or both): the incremental re-plan (old link
    state, plan CSR and load state kept by the controller) moves the same QPs to the same
    paths and ports, with the same link utilisation, as the re-plan that re-hashes every
    QP and recomputes every load."""
    f = ft_fabric
    rt, cfg, d, a, r = _ft_plan(f, routing_of)
    fab = np.flatnonzero(f.link_kind == LINK_FABRIC)
    k = fab[np.asarray(picks) % len(fab)]
    back = [f.link_id(int(f.link_dst[x]), int(f.link_src[x])) for x in k]
    rt2 = routing_of(f, tuple(sorted(set(k.tolist()) | (set(back) if both_ways else set()))))
    csr = paths_to_csr(a.paths)
    slow = replan_after_failure(f, rt2, cfg, PlanBefore(d, a.paths, r.sport))
    fast = replan_after_failure(f, rt2, cfg, PlanBefore(
        d, CsrRows(*csr), r.sport, routing=rt, full_paths=r.paths, paths_csr=csr,
        load=load_state(f, d, csr)))
    assert np.array_equal(slow.affected, fast.affected)
    assert np.array_equal(slow.remapped, fast.remapped)
    assert np.array_equal(slow.sport, fast.sport) and np.array_equal(slow.ok, fast.ok)
    assert np.array_equal(slow.assignment.link_util, fast.assignment.link_util)
    assert all(np.array_equal(x, y) for x, y in zip(slow.paths, fast.paths, strict=True))
    assert all(np.array_equal(x, y) for x, y in
               zip(slow.assignment.paths, fast.assignment.paths, strict=True))
