import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.topology.builders import (
    FatTreeSpec,
    LeafSpineSpec,
    ServerGroup,
    fat_tree,
    leaf_spine,
)
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import LEAF, LINK_FABRIC
from icefabric.topology.routing import Routing, RoutingError, ServerPaths

H100 = server_profile("hgx-h100")


def test_leaf_spine_paths_equal_spines_times_links():
    f = leaf_spine([ServerGroup(H100, 2, "h")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=4, links_per_spine=2))
    r = Routing(f)
    a, b = f.nodes_of_kind(LEAF)
    # 8 uplinks at the leaf, then 2 parallel downlinks at every spine
    assert r.n_paths(a, b) == 16
    assert len(r.group(a, b)) == 8
    assert np.all(np.diff(r.group(a, b)) > 0)  # members ordered by link id


def test_fat_tree_paths_cross_pod():
    f = fat_tree([ServerGroup(H100, 8, "h")], FatTreeSpec(pods=2, leaves_per_pod=2,
                 aggs_per_pod=2, n_cores=4, servers_per_leaf=2))
    r = Routing(f)
    leaves = f.nodes_of_kind(LEAF)
    # same pod: via 2 aggs; other pod: 2 aggs x 2 cores each
    assert r.n_paths(leaves[0], leaves[1]) == 2
    assert r.n_paths(leaves[0], leaves[2]) == 4
    for p in r.all_paths(leaves[0], leaves[3]):
        assert f.link_src[p[0]] == leaves[0] and f.link_dst[p[-1]] == leaves[3]
        assert np.all(f.link_dst[p[:-1]] == f.link_src[p[1:]])


def test_walk_follows_chooser_and_failures_shrink_groups():
    f = leaf_spine([ServerGroup(H100, 2, "h")], LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    nics = f.nodes_of_kind(1)
    src, dst = nics[:1], nics[8:9]
    r = Routing(f)
    p0 = r.walk(src, dst, lambda s, i, sw, dl, n: np.zeros(len(i), int))[0]
    p1 = r.walk(src, dst, lambda s, i, sw, dl, n: np.minimum(1, n - 1))[0]
    assert len(p0) == 4 and p0[1] != p1[1]
    down = [p0[1], f.link_id(int(f.link_dst[p0[1]]), int(f.link_src[p0[1]]))]
    r2 = Routing(f, down)
    leaf = int(f.nic_leaf[src[0]])
    assert len(r2.group(leaf, int(f.nic_leaf[dst[0]]))) == 1
    p = r2.walk(src, dst, lambda s, i, sw, dl, n: np.zeros(len(i), int))[0]
    assert p[1] == p1[1]


def test_walk_reports_unroutable_pairs():
    f = leaf_spine([ServerGroup(H100, 2, "h")], LeafSpineSpec(servers_per_leaf=1, n_spines=1))
    nics = f.nodes_of_kind(1)
    leaf = int(f.nic_leaf[nics[0]])
    up = [l for l in range(f.n_links) if f.link_src[l] == leaf and f.link_kind[l] == 2]
    with pytest.raises(RoutingError, match="no route"):
        Routing(f, up).walk(nics[:1], nics[8:9], lambda *a: np.zeros(len(a[1]), int))


def test_server_paths_direct_and_pxn():
    f = leaf_spine([ServerGroup(H100, 1, "h")], LeafSpineSpec(servers_per_leaf=1, n_spines=1))
    s = f.servers[0]
    sp = ServerPaths(f)
    assert len(sp.path(s.accels[0], s.nics[0])) == 1  # own NIC over PCIe
    assert len(sp.path(s.accels[0], s.nics[3])) == 3  # NVLink to the NIC owner, then PCIe
    assert len(sp.path(s.accels[0], s.accels[5])) == 2  # through the NVSwitch hub


def _reference_groups(f, r):
    """Every (switch, leaf) group from scipy's BFS and the next-hop rule, link by link."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    fab = (f.link_kind == LINK_FABRIC) & ~r.down
    links, S = np.flatnonzero(fab), len(r.switches)
    src, dst = r.sw_index[f.link_src[fab]], r.sw_index[f.link_dst[fab]]
    adj = coo_matrix((np.ones(len(src)), (src, dst)), shape=(S, S)).tocsr()
    d = shortest_path(adj.T.tocsr(), unweighted=True, indices=r.sw_index[r.leaves])
    return d, {(s, i): links[(src == s) & (d[i, dst] == d[i, s] - 1)]
               for s in range(S) for i in range(len(r.leaves))}


# two pods of 4 twin leaves (same aggregation switches), parallel core cables
_TWIN_SPEC = FatTreeSpec(pods=2, leaves_per_pod=4, aggs_per_pod=2, n_cores=2, links_per_core=2,
                         servers_per_leaf=2)


@pytest.mark.parametrize("cut", ["none", "both", "one way"])
def test_groups_toward_twin_leaves_equal_the_next_hop_rule(cut):
    f = fat_tree([ServerGroup(H100, 16, "h")], _TWIN_SPEC)
    fab = np.flatnonzero(f.link_kind == LINK_FABRIC)
    k = fab[[3, 17, len(fab) - 2]]
    back = [f.link_id(int(f.link_dst[x]), int(f.link_src[x])) for x in k]
    down = {"none": [], "both": list(k) + back, "one way": list(k)}[cut]
    r = Routing(f, down)
    d, want = _reference_groups(f, r)
    assert np.array_equal(r.dist, d)
    for (s, i), members in want.items():
        assert np.array_equal(r.group(r.switches[s], r.leaves[i]), members), (s, i)


_TWINS = fat_tree([ServerGroup(H100, 16, "h")], _TWIN_SPEC)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 10**6), max_size=4), st.lists(st.integers(0, 10**6),
                                                             max_size=4), st.booleans())
def test_dist_changes_are_every_hop_count_that_differs(a, b, both_ways):
    """Two random link states of a fat-tree with twin leaves (links cut one way or both):
    the changes read from the class hop tables are the entry-by-entry comparison."""
    f = _TWINS
    fab = np.flatnonzero(f.link_kind == LINK_FABRIC)

    def state(picks):
        k = fab[np.asarray(picks, dtype=np.int64) % len(fab)]
        back = [f.link_id(int(f.link_dst[x]), int(f.link_src[x])) for x in k]
        return Routing(f, list(k) + (back if both_ways else []))

    r1, r2 = state(a), state(b)
    want = np.nonzero(r1.dist != r2.dist)
    got = r1.dist_changes(r2)
    assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True)), (got, want)
