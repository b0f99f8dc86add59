import numpy as np
import pytest

from icefabric.topology.builders import (
    ServerGroup,
    TopologyError,
    fat_tree,
    leaf_spine,
    rail_optimized,
    star,
)
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL, CORE, LEAF, LINK_FABRIC, LINK_HOST, NIC, SPINE
from icefabric.units import gbps

H100 = server_profile("hgx-h100")
ASC = server_profile("atlas-800t-a2")


def test_leaf_spine_counts_and_duplex_links():
    f = leaf_spine([ServerGroup(H100, 4, "h")], servers_per_leaf=2, n_spines=4)
    assert f.n_accels == 32
    assert len(f.nodes_of_kind(LEAF)) == 2 and len(f.nodes_of_kind(SPINE)) == 4
    # every link has its reverse
    pairs = set(zip(f.link_src.tolist(), f.link_dst.tolist()))
    assert all((d, s) in pairs for s, d in pairs)


@pytest.mark.parametrize("oversub", [1.0, 2.0, 3.0])
def test_oversubscription_is_exact_per_leaf(oversub):
    f = leaf_spine([ServerGroup(H100, 2, "h"), ServerGroup(ASC, 2, "a")], servers_per_leaf=2,
                   n_spines=4, links_per_spine=2, oversub=oversub)
    for leaf in f.nodes_of_kind(LEAF):
        down = f.link_capacity_bps[(f.link_dst == leaf) & (f.link_kind == LINK_HOST)].sum()
        up = f.link_capacity_bps[(f.link_src == leaf) & (f.link_kind == LINK_FABRIC)].sum()
        assert down / up == pytest.approx(oversub)


def test_pools_get_their_own_leaves_and_heterogeneous_nic_speeds():
    f = leaf_spine([ServerGroup(H100, 1, "h"), ServerGroup(ASC, 1, "a")], servers_per_leaf=4,
                   n_spines=2)
    leaves = {int(f.nic_leaf[n]) for n in f.servers[0].nics}
    leaves2 = {int(f.nic_leaf[n]) for n in f.servers[1].nics}
    assert len(leaves) == 1 and len(leaves2) == 1 and leaves != leaves2
    up = f.link_kind == LINK_HOST
    speeds = set(f.link_capacity_bps[up & (f.node_kind[f.link_src] == NIC)].tolist())
    assert speeds == {gbps(400), gbps(200)}


def test_radix_violation_is_a_clear_error():
    with pytest.raises(TopologyError, match="radix"):
        leaf_spine([ServerGroup(H100, 20, "h")], servers_per_leaf=20, n_spines=4)


def test_rail_optimized_puts_nic_i_on_rail_leaf_i():
    f = rail_optimized([ServerGroup(H100, 4, "h")], servers_per_leaf=4, n_spines=2)
    leaves = f.nodes_of_kind(LEAF)
    assert len(leaves) == 8
    for srv in f.servers:
        for i, nic in enumerate(srv.nics):
            assert f.nic_leaf[nic] == leaves[i]


def test_scattered_placement_alternates_leaves():
    f = leaf_spine([ServerGroup(H100, 4, "h")], servers_per_leaf=2, n_spines=2,
                   placement="scattered")
    leaf_of = [int(f.nic_leaf[s.nics[0]]) for s in f.servers]
    assert leaf_of[0] != leaf_of[1] and leaf_of[0] == leaf_of[2]


def test_fat_tree_shape():
    f = fat_tree([ServerGroup(H100, 8, "h")], pods=2, leaves_per_pod=2, aggs_per_pod=2,
                 n_cores=4, servers_per_leaf=2)
    assert len(f.nodes_of_kind(CORE)) == 4
    assert len(f.nodes_of_kind(SPINE)) == 4  # aggregation switches
    assert len(f.nodes_of_kind(LEAF)) == 4
    with pytest.raises(TopologyError, match="multiple"):
        fat_tree([ServerGroup(H100, 2, "h")], pods=2, leaves_per_pod=2, aggs_per_pod=3,
                 n_cores=4, servers_per_leaf=2)


def test_star_and_server_internals():
    f = star([ServerGroup(H100, 2, "h")])
    assert f.n_accels == 16
    # accelerator i owns NIC i (1:1 on HGX)
    s = f.servers[0]
    assert [int(f.accel_nic[a]) for a in s.accels] == list(s.nics)
    assert np.all(f.node_kind[list(s.accels)] == ACCEL)


def test_builds_are_deterministic():
    a = leaf_spine([ServerGroup(H100, 2, "h")], servers_per_leaf=1, n_spines=2,
                   hash_seeds="random", seed=3)
    b = leaf_spine([ServerGroup(H100, 2, "h")], servers_per_leaf=1, n_spines=2,
                   hash_seeds="random", seed=3)
    assert a.node_names == b.node_names
    assert np.array_equal(a.node_hash_seed, b.node_hash_seed)
    assert np.array_equal(a.link_capacity_bps, b.link_capacity_bps)


def test_a_gpu_owns_both_ports_of_a_16_port_server():
    p = server_profile("bm-gpu-h100-8")
    assert [list(p.nics_of_accel(i)) for i in (0, 7)] == [[0, 1], [14, 15]]
    assert list(H100.nics_of_accel(3)) == [3]
    assert list(server_profile("hgx-h100", n_nics=4).nics_of_accel(3)) == [1]
    f = leaf_spine([ServerGroup(p, 2, "oci")], servers_per_leaf=1, n_spines=8,
                   links_per_spine=2)
    srv = f.servers[0]
    assert [int(f.nic_accel[n]) for n in srv.nics] == [a for a in srv.accels for _ in (0, 1)]
    assert int(f.accel_nic[srv.accels[1]]) == srv.nics[2]  # the first of its two ports
