import numpy as np
import pytest

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.hccl import Hierarchical
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL


def build(n_servers, kind, algo=None, size=1 << 24):
    f = leaf_spine([ServerGroup(server_profile("atlas-800t-a2"), n_servers, "a")],
                   LeafSpineSpec(servers_per_leaf=2, n_spines=2))
    c = Communicator("j", f, f.nodes_of_kind(ACCEL), library="hccl")
    wb = WorkloadBuilder()
    add_collective(wb, c, kind, size, algorithm=algo)
    return f, wb.build(node_ip=f.node_ip)


def network_bytes_per_rank(f, w):
    net = w.hop_conn >= 0
    sent = np.zeros(f.n_nodes)
    np.add.at(sent, w.hop_src[net], w.flow_size_bytes[w.hop_flow[net]])
    return sent[f.nodes_of_kind(ACCEL)]


@pytest.mark.parametrize("algo", ["ring", "hd"])
def test_allreduce_sends_the_textbook_bytes_over_the_network(algo):
    # level1 AllReduce of a shard S/8 among M servers moves 2(M-1)/M * S/8 per NPU
    size, M = 1 << 24, 4
    f, w = build(M, "all_reduce", algo, size)
    sent = network_bytes_per_rank(f, w)
    np.testing.assert_allclose(sent, 2 * (M - 1) / M * size / 8)


def test_hd_with_non_power_of_two_folds():
    size = 1 << 24
    f, w = build(3, "all_reduce", "hd", size)
    sent = network_bytes_per_rank(f, w)
    assert sent.max() > sent.min()  # the folded rank pays extra, as HCCL documents
    assert w.n_flows > 0


def test_pairwise_alltoall_steps_are_sequential():
    f, w = build(2, "alltoall")
    n = 16
    assert w.n_flows == n * (n - 1)
    # step k depends on all flows of step k-1
    assert len(w.flow_deps[0]) == 0
    assert len(w.flow_deps[n]) == n


def test_hierarchical_names_what_it_does_not_implement():
    with pytest.raises(ValueError, match="does not implement 'alltoall'"):
        Hierarchical("alltoall")
    with pytest.raises(ValueError, match="unknown HCCL level1 algorithm 'tree'; use ring or hd"):
        Hierarchical("all_reduce", "tree")
