import numpy as np
import pytest

from icefabric.topology.builders import (
    BuildOptions,
    FatTreeSizing,
    FatTreeSpec,
    LeafSpineSpec,
    ServerGroup,
    TopologyError,
    fat_tree,
    fat_tree_for,
    leaf_spine,
    rail_optimized,
    size_fat_tree,
    star,
)
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL, CORE, LEAF, LINK_FABRIC, LINK_HOST, NIC, SPINE
from icefabric.units import gbps

H100 = server_profile("hgx-h100")
ASC = server_profile("atlas-800t-a2")


def test_leaf_spine_counts_and_duplex_links():
    f = leaf_spine([ServerGroup(H100, 4, "h")], LeafSpineSpec(servers_per_leaf=2, n_spines=4))
    assert f.n_accels == 32
    assert len(f.nodes_of_kind(LEAF)) == 2 and len(f.nodes_of_kind(SPINE)) == 4
    # every link has its reverse
    pairs = set(zip(f.link_src.tolist(), f.link_dst.tolist()))
    assert all((d, s) in pairs for s, d in pairs)


@pytest.mark.parametrize("oversub", [1.0, 2.0, 3.0])
def test_oversubscription_is_exact_per_leaf(oversub):
    f = leaf_spine([ServerGroup(H100, 2, "h"), ServerGroup(ASC, 2, "a")],
                   LeafSpineSpec(servers_per_leaf=2, n_spines=4, links_per_spine=2,
                                 oversub=oversub))
    for leaf in f.nodes_of_kind(LEAF):
        down = f.link_capacity_bps[(f.link_dst == leaf) & (f.link_kind == LINK_HOST)].sum()
        up = f.link_capacity_bps[(f.link_src == leaf) & (f.link_kind == LINK_FABRIC)].sum()
        assert down / up == pytest.approx(oversub)


def test_pools_get_their_own_leaves_and_heterogeneous_nic_speeds():
    f = leaf_spine([ServerGroup(H100, 1, "h"), ServerGroup(ASC, 1, "a")],
                   LeafSpineSpec(servers_per_leaf=4, n_spines=2))
    leaves = {int(f.nic_leaf[n]) for n in f.servers[0].nics}
    leaves2 = {int(f.nic_leaf[n]) for n in f.servers[1].nics}
    assert len(leaves) == 1 and len(leaves2) == 1 and leaves != leaves2
    up = f.link_kind == LINK_HOST
    speeds = set(f.link_capacity_bps[up & (f.node_kind[f.link_src] == NIC)].tolist())
    assert speeds == {gbps(400), gbps(200)}


def test_radix_violation_is_a_clear_error():
    with pytest.raises(TopologyError, match="radix"):
        leaf_spine([ServerGroup(H100, 20, "h")], LeafSpineSpec(servers_per_leaf=20, n_spines=4))


def test_rail_optimized_puts_nic_i_on_rail_leaf_i():
    f = rail_optimized([ServerGroup(H100, 4, "h")], LeafSpineSpec(servers_per_leaf=4, n_spines=2))
    leaves = f.nodes_of_kind(LEAF)
    assert len(leaves) == 8
    for srv in f.servers:
        for i, nic in enumerate(srv.nics):
            assert f.nic_leaf[nic] == leaves[i]


def test_scattered_placement_alternates_leaves():
    f = leaf_spine([ServerGroup(H100, 4, "h")], LeafSpineSpec(servers_per_leaf=2, n_spines=2),
                   BuildOptions(placement="scattered"))
    leaf_of = [int(f.nic_leaf[s.nics[0]]) for s in f.servers]
    assert leaf_of[0] != leaf_of[1] and leaf_of[0] == leaf_of[2]


def test_fat_tree_shape():
    f = fat_tree([ServerGroup(H100, 8, "h")], FatTreeSpec(pods=2, leaves_per_pod=2,
                 aggs_per_pod=2, n_cores=4, servers_per_leaf=2))
    assert len(f.nodes_of_kind(CORE)) == 4
    assert len(f.nodes_of_kind(SPINE)) == 4  # aggregation switches
    assert len(f.nodes_of_kind(LEAF)) == 4
    with pytest.raises(TopologyError, match="multiple"):
        fat_tree([ServerGroup(H100, 2, "h")], FatTreeSpec(pods=2, leaves_per_pod=2,
                 aggs_per_pod=3, n_cores=4, servers_per_leaf=2))


def test_star_and_server_internals():
    f = star([ServerGroup(H100, 2, "h")])
    assert f.n_accels == 16
    # accelerator i owns NIC i (1:1 on HGX)
    s = f.servers[0]
    assert [int(f.accel_nic[a]) for a in s.accels] == list(s.nics)
    assert np.all(f.node_kind[list(s.accels)] == ACCEL)


def test_builds_are_deterministic():
    a = leaf_spine([ServerGroup(H100, 2, "h")], LeafSpineSpec(servers_per_leaf=1, n_spines=2),
                   BuildOptions(hash_seeds="random", seed=3))
    b = leaf_spine([ServerGroup(H100, 2, "h")], LeafSpineSpec(servers_per_leaf=1, n_spines=2),
                   BuildOptions(hash_seeds="random", seed=3))
    assert a.node_names == b.node_names
    assert np.array_equal(a.node_hash_seed, b.node_hash_seed)
    assert np.array_equal(a.link_capacity_bps, b.link_capacity_bps)


def test_a_gpu_owns_both_ports_of_a_16_port_server():
    p = server_profile("bm-gpu-h100-8")
    assert [list(p.nics_of_accel(i)) for i in (0, 7)] == [[0, 1], [14, 15]]
    assert list(H100.nics_of_accel(3)) == [3]
    assert list(server_profile("hgx-h100", n_nics=4).nics_of_accel(3)) == [1]
    f = leaf_spine([ServerGroup(p, 2, "oci")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=8, links_per_spine=2))
    srv = f.servers[0]
    assert [int(f.nic_accel[n]) for n in srv.nics] == [a for a in srv.accels for _ in (0, 1)]
    assert int(f.accel_nic[srv.accels[1]]) == srv.nics[2]  # the first of its two ports


@pytest.mark.parametrize("radix,oversub,rail", [(64, 1.0, False), (128, 3.0, True),
                                                (256, 1.0, False), (128, 1.5, False)])
def test_sized_fat_tree_holds_131072_nic_ports_within_every_radix(radix, oversub, rail):
    sizing = FatTreeSizing(radix=radix, oversub=oversub, core_oversub=1.0, rail_optimized=rail)
    size = size_fat_tree(16384, 8, sizing) if radix > 64 else None
    if size is None:  # k^3/4 = 65,536 NIC ports: a radix-64 fat-tree cannot hold them
        with pytest.raises(TopologyError, match="radix-64 core reaches at most 64 pods"):
            size_fat_tree(16384, 8, sizing)
        return
    rails = 8 if rail else 1
    leaves = size.pods * size.leaves_per_pod
    assert leaves * size.servers_per_leaf * 8 // rails >= 131072
    up = size.n_cores // size.aggs_per_pod * size.links_per_core
    assert size.servers_per_leaf * 8 // rails + size.aggs_per_pod <= radix  # leaf ports
    assert size.leaves_per_pod + up <= radix  # aggregation ports
    assert size.pods * size.links_per_core <= radix  # core ports
    # whole servers per leaf: never more server ports per uplink than asked (the uplinks'
    # capacity makes the ratio exact, test_oversubscription_is_exact_per_leaf)
    assert 0.9 * oversub <= (size.servers_per_leaf * 8 // rails) / size.aggs_per_pod <= \
        oversub * 1.02


def test_fat_tree_for_builds_the_sized_counts_with_parallel_core_cables():
    f = fat_tree_for([ServerGroup(H100, 256, "h")], FatTreeSizing(radix=64, bundle_cores=True))
    size = size_fat_tree(256, 8, FatTreeSizing(radix=64, bundle_cores=True))
    single = size_fat_tree(256, 8, FatTreeSizing(radix=64))  # k-ary: one cable per core
    assert (single.links_per_core, single.n_cores) == (1, 32 * 32)
    # 4 servers (32 NICs) per leaf, 64 leaves in 2 pods of 32; each aggregation switch's
    # 32 core cables all go to one core, which takes them from both pods (64 ports)
    assert (size.pods, size.leaves_per_pod, size.aggs_per_pod) == (2, 32, 32)
    assert size.links_per_core == 32 and size.n_cores == 32
    assert len(f.nodes_of_kind(CORE)) == 32 and len(f.nodes_of_kind(LEAF)) == 64
    fab = f.link_kind == LINK_FABRIC
    for node in f.switches.tolist():  # no switch uses more ports than its radix
        ports = np.count_nonzero(f.link_src == node)
        assert ports <= 64, f.node_names[node]
    core = f.nodes_of_kind(CORE)[0]
    agg = f.link_src[fab & (f.link_dst == core)]
    assert len(agg) == 64 and len(set(agg.tolist())) == 2


def test_fat_tree_for_rejects_a_radix_it_does_not_know():
    with pytest.raises(TopologyError, match="radix must be one of"):
        fat_tree_for([ServerGroup(H100, 2, "h")], FatTreeSizing(radix=96))


def test_two_planes_split_every_server_and_never_meet():
    oci = server_profile("bm-gpu-h100-8")  # 16 ports of 200G, two per GPU
    f = fat_tree_for([ServerGroup(oci, 16, "o")],
                     FatTreeSizing(radix=64, rail_optimized=True, planes=2))
    assert f.meta["planes"] == 2
    plane_of = {}
    for name, node in f.node_id.items():
        if f.node_kind[node] in (LEAF, SPINE, CORE):
            plane_of[node] = int(name.split("-")[0][1:])
    for srv in f.servers:
        for j, nic in enumerate(srv.nics):
            assert plane_of[int(f.nic_leaf[nic])] == j % 2
    fab = np.flatnonzero(f.link_kind == LINK_FABRIC)
    assert all(plane_of[int(f.link_src[k])] == plane_of[int(f.link_dst[k])] for k in fab)
    # rails: port j of every server in a group shares one leaf per plane
    assert len({int(f.nic_leaf[s.nics[2]]) for s in f.servers}) == 1
    with pytest.raises(TopologyError, match=r"multiple of planes \(2\)"):
        fat_tree_for([ServerGroup(server_profile("hgx-h100", n_nics=3), 2, "h")],
                     FatTreeSizing(radix=64, planes=2))
