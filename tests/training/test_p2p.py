from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL
from icefabric.training.p2p import Transfer, transfer


def test_p2p_channels_alternate_over_a_gpus_two_ports():
    """A pipeline send between 16-port servers puts its two channels on the GPU's two
    ports (half the bytes each); on 8-port servers both use the GPU's one NIC."""
    for profile, ports in (("bm-gpu-h100-8", 2), ("hgx-h100", 1)):
        f = leaf_spine([ServerGroup(server_profile(profile), 2, "s")],
                       LeafSpineSpec(servers_per_leaf=1, n_spines=2))
        accels = f.nodes_of_kind(ACCEL)
        wb = WorkloadBuilder()
        x, y = f.servers[0].accels[3], f.servers[1].accels[3]
        transfer(wb, Communicator("j", f, accels), Transfer([(x, y)], 1 << 20, 2, "pp"), ())
        w = wb.build(node_ip=f.node_ip)
        own = list(f.servers[0].nics[6:8] if ports == 2 else f.servers[0].nics[3:4])
        assert sorted(set(w.hop_src_nic.tolist())) == own, profile
        assert w.hop_weight.tolist() == [0.5, 0.5]
