import numpy as np

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.control.demand import _hop_entries, demand_from_pairs, flow_levels, workload_demand
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.topology.model import ACCEL, NIC


def test_hetero_default_demand_rates_and_phases():
    ls = load("hetero-default")
    fab = build_fabric(ls)
    wl = scenario_workload(ls, fab, 1 << 26).workload
    d = workload_demand(fab, wl)
    assert d.n_qps == wl.n_qps
    # Every QP is in at least one phase; phases belong to the two jobs.
    assert set(np.unique(d.ent_qp).tolist()) == set(range(d.n_qps))
    assert set(d.job_names) == {"mixed", "gpt"}
    # No QP asks for more than its slower NIC.
    assert np.all(d.peak_rate_bps() <= np.minimum(d.src_nic_bps, d.dst_nic_bps) + 1)
    # 2 ring channels per 400G NIC -> 200G each; the gpt AllToAll shares its PXN connections
    # (NCCL_NET_SHARED_COMMS): 1 remote rank per rail x 2 channels per NIC -> 200G too.
    gpt_rates = set(np.round(d.ent_rate_bps[d.job[d.ent_qp] == d.job_names.index("gpt")]
                             / 1e9).tolist())
    assert gpt_rates == {200.0}
    # Bytes are conserved: QP bytes sum to the network share of the flows.
    assert d.size_bytes.sum() > 0


def test_levels_follow_dependencies():
    ls = load("hetero-default")
    fab = build_fabric(ls)
    wl = scenario_workload(ls, fab, 1 << 20).workload
    lev = flow_levels(wl)
    for f, deps in enumerate(wl.flow_deps):
        for x in deps:
            assert lev[f] > lev[x]


def test_from_pairs_and_subset_concat(small_fabric):
    f = small_fabric
    a = [s.nics[0] for s in f.servers]
    d = demand_from_pairs(f, a[:2], a[2:], job=[0, 1])
    assert d.n_qps == 2 and d.n_phases == 2
    s = d.subset([1])
    assert s.n_qps == 1 and s.ent_qp.tolist() == [0]
    c = d.concat(d)
    assert c.n_qps == 4 and c.n_phases == 2
    assert d.is_uniform()


def test_peak_rates_of_some_qps_are_those_of_all(small_fabric):
    f = small_fabric
    nics = f.nodes_of_kind(NIC)
    d = demand_from_pairs(f, nics[:4], nics[4:8], rate_bps=[1e9, 2e9, 3e9, 4e9],
                          phase=[0, 1, 0, 1])
    d2 = d.concat(d)  # the same QPs again: entries stay sorted by QP
    full = d2.peak_rate_bps()
    assert full.tolist() == [1e9, 2e9, 3e9, 4e9] * 2
    some = d2.peak_rate_bps(np.array([6, 1]))
    assert some.tolist() == [0, 2e9, 0, 0, 0, 0, 3e9, 0]
    assert d2.peak_rates(np.array([6, 1, 6])).tolist() == [3e9, 2e9, 3e9]  # in their order


def _expanded(wl):
    """Every (network hop, QP) entry, expanded hop by hop (the reference)."""
    ptr, _ = wl.conn_qps()
    out = []
    for h in np.flatnonzero(wl.hop_conn >= 0).tolist():
        c = int(wl.hop_conn[h])
        k = int(ptr[c + 1] - ptr[c])
        out += [(int(ptr[c]) + i, float(wl.hop_weight[h]) / k, int(wl.hop_flow[h]), c)
                for i in range(k)]
    return out


def test_hop_entries_expand_every_hop_to_its_connections_qps(small_fabric):
    def ring(k):
        wb = WorkloadBuilder()
        add_collective(wb, Communicator("j", small_fabric, small_fabric.nodes_of_kind(ACCEL),
                                        qps_per_connection=k, channels=2),
                       "all_reduce", 1 << 20)
        return wb.build(node_ip=small_fabric.node_ip)

    for k in (1, 3):  # one QP per connection: the entries are the hops, not expanded
        wl = ring(k)
        assert np.all(np.diff(wl.conn_qps()[0]) == k)
        got = list(zip(*(a.tolist() for a in _hop_entries(wl)), strict=True))
        assert got == _expanded(wl)
