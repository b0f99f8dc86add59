import numpy as np

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL


def test_cross_vendor_allreduce_exchanges_shards_between_pools():
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 1, "h"),
                    ServerGroup(server_profile("atlas-800t-a2"), 2, "a")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    c = Communicator("j", f, f.nodes_of_kind(ACCEL), library="cross")
    wb = WorkloadBuilder()
    size = 48 << 20
    add_collective(wb, c, "all_reduce", size)
    w = wb.build(node_ip=f.node_ip)
    assert len(w.collectives) == 1 and w.collectives[0].algorithm == "cross-hier"
    assert sorted(w.collectives[0].flows) == list(range(w.n_flows))
    pools = np.array([f.servers[s].pool for s in f.node_server[w.hop_src]])
    pools_dst = np.array([f.servers[s].pool for s in f.node_server[w.hop_dst]])
    cross = pools != pools_dst
    # each direction moves the whole buffer once in total (shards of 8 vs 16 ranks overlap)
    for p in ("h", "a"):
        m = cross & (pools == p)
        assert w.flow_size_bytes[w.hop_flow[m]].sum() == size


def test_a_qps_rule_splits_each_pool_by_its_own_library():
    """A rule that sets NCCL's variable only (``ecmp-tuned``) splits the NCCL pool's
    connections, not the HCCL pool's, nor the exchange between pools."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h"),
                    ServerGroup(server_profile("atlas-800t-a2"), 2, "a")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    c = Communicator("j", f, f.nodes_of_kind(ACCEL), library="cross")
    c = c.under(lambda own, lib: 3 if lib == "nccl" else own)
    assert c.qps_per_connection == 1 and c.pool_qps == (("hccl", 1), ("nccl", 3))
    wb = WorkloadBuilder()
    add_collective(wb, c, "all_reduce", 48 << 20)
    w = wb.build(node_ip=f.node_ip)
    src, dst = w.conn_src_nic.tolist(), w.conn_dst_nic.tolist()
    pool = {n: f.servers[f.node_server[n]].pool for n in set(src + dst)}
    nqps = {(pool[s], pool[d]): q for s, d, q in
            zip(src, dst, np.bincount(w.qp_conn, minlength=w.n_conns).tolist())}
    assert nqps == {("h", "h"): 3, ("a", "a"): 1, ("h", "a"): 1, ("a", "h"): 1}
