import numpy as np

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile


def test_ranks_given_as_a_tuple_or_list_work_as_an_array():
    """A server's ``accels`` is a tuple: it indexed the fabric's arrays as a multi-axis
    index (IndexError) before the communicator kept its ranks as an int64 array."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    ranks = f.servers[0].accels + f.servers[1].accels
    hops = []
    for given in (np.asarray(ranks), tuple(ranks), list(ranks)):
        c = Communicator("j", f, given)
        assert c.ranks.dtype == np.int64 and c.ranks.tolist() == list(ranks)
        wb = WorkloadBuilder()
        add_collective(wb, c, "all_reduce", 1 << 20)
        hops.append(wb.build(node_ip=f.node_ip).hop_src.tolist())
    assert hops[0] == hops[1] == hops[2]
