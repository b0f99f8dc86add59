import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefabric.control.demand import demand_from_pairs
from icefabric.control.hashing import fabric_hash_configs
from icefabric.control.planning import plan_paths
from icefabric.control.realize import (
    QpPaths,
    RealizeOptions,
    _member_of,
    decision_chain,
    realize_paths,
    same_paths,
)
from icefabric.topology.routing import Routing

from .conftest import nics_of


@pytest.mark.parametrize("mode", ["model", "probe"])
def test_ports_follow_plan_100pct(small_fabric, routing_of, mode):
    f = small_fabric
    rt = routing_of(f)
    cfg = fabric_hash_configs(f)
    src, dst = nics_of(f, [0, 1]), nics_of(f, [2, 3])
    d = demand_from_pairs(f, np.r_[src, dst], np.r_[dst, src])
    a = plan_paths(f, rt, d)
    r = realize_paths(f, rt, cfg, QpPaths(d.src_nic, d.dst_nic, a.paths),
                      RealizeOptions(mode=mode, seed=3))
    assert r.ok.all()
    assert np.all((r.sport >= 0xC000) & (r.sport <= 0xFFFF))
    for q, p in enumerate(r.paths):
        assert np.array_equal(p[1:-1], a.paths[q])
    assert r.mode == mode and r.solved == r.verified == d.n_qps
    assert (r.probes > 0) if mode == "probe" else r.probes is None


def test_probe_mode_with_loss(small_fabric, routing_of):
    f = small_fabric
    rt = routing_of(f)
    cfg = fabric_hash_configs(f)
    d = demand_from_pairs(f, nics_of(f, [0]), nics_of(f, [3]))
    a = plan_paths(f, rt, d)
    r = realize_paths(f, rt, cfg, QpPaths(d.src_nic, d.dst_nic, a.paths),
                      RealizeOptions(mode="probe", loss_prob=0.2, seed=1))
    assert r.ok.all()


def test_decision_chain_rejects_foreign_links(small_fabric, routing_of):
    f = small_fabric
    rt = routing_of(f)
    d = demand_from_pairs(f, nics_of(f, [0])[:1], nics_of(f, [2])[:1])
    a = plan_paths(f, rt, d)
    sw, n, want = decision_chain(f, rt, d.dst_nic, a.paths)
    assert sw.shape == (1, 2) and n[0].tolist() == [8, 2]
    with pytest.raises(ValueError):
        decision_chain(f, rt, d.dst_nic, [a.paths[0][::-1]])


def test_member_index_from_a_few_groups_or_all_of_them(ft_fabric):
    """The index of a switch's link in one of its ECMP groups read from the bit masks is
    its position among the group's members (-1 where it is no member), whether the masks
    are built for the few groups asked about (a fresh routing, few hops: a re-plan's new
    ports) or once for every group of the routing."""
    f = ft_fabric
    rt = Routing(f)
    NL = len(rt.leaves)
    rows = []
    for si, s in enumerate(rt.switches.tolist()):
        for li in range(NL):
            gid = int(rt.grp_id[si * NL + li])
            members = rt.grp_links[rt.grp_indptr[gid]:rt.grp_indptr[gid + 1]].tolist()
            rows += [(gid, x, members.index(x) if x in members else -1)
                     for x in f.links_from(s).tolist()]
    g, links, want = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    assert 16 < len(rt.grp_indptr) and np.any(want == -1) and np.any(want > 0)
    one_by_one = [_member_of(rt, g[i:i + 1], links[i:i + 1])[0] for i in range(len(g))]
    assert getattr(rt, "_ice_member_masks", None) is None  # the few-groups path each time
    assert one_by_one == want.tolist()
    assert np.array_equal(_member_of(rt, g, links), want)  # every group's masks
    assert getattr(rt, "_ice_member_masks", None) is not None


@given(st.lists(st.lists(st.integers(0, 3), max_size=4), max_size=6), st.data())
def test_same_paths_compares_row_by_row(a, data):
    # b: a with some rows changed (a link, or the length); same lengths take the one-pass
    # comparison, others the gathered one
    b = [data.draw(st.sampled_from([r, r[:-1], r[::-1], [x + 1 for x in r]])) for r in a]
    for x, y in ((a, b), (a, a)):
        got = same_paths([np.array(r, dtype=np.int64) for r in x],
                         [np.array(r, dtype=np.int64) for r in y])
        assert got.tolist() == [list(r) == list(s) for r, s in zip(x, y, strict=True)]
