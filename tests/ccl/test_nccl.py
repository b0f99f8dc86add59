import numpy as np
import pytest

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.nccl import (
    alltoall,
    alltoall_per_pair,
    btree_parents,
    p2p_net_channels,
    ring_order,
)
from icefabric.ccl.nccl_defaults import NcclSettings
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL


@pytest.fixture
def fabric():
    return leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                      LeafSpineSpec(servers_per_leaf=2, n_spines=4))


def comm(fabric, **kw):
    return Communicator("j", fabric, fabric.nodes_of_kind(ACCEL), **kw)


def test_ring_is_rail_aligned_and_visits_every_rank_once(fabric):
    c = comm(fabric)
    for ch in range(c.n_channels):
        order, rail = ring_order(c, ch)
        assert sorted(order) == list(range(32))
        assert rail == ch % 8
        # the ring enters each server at the GPU that owns NIC `rail`
        for k in range(4):
            first = order[8 * k]
            assert fabric.node_index[fabric.accel_nic[c.ranks[first]]] == rail


def test_ring_allreduce_bytes_per_hop(fabric):
    wb = WorkloadBuilder()
    c = comm(fabric, channels=4)
    add_collective(wb, c, "all_reduce", 1 << 20)
    w = wb.build(node_ip=fabric.node_ip)
    assert w.n_flows == 4
    np.testing.assert_allclose(w.flow_size_bytes, (1 << 20) / 4 * 2 * 31 / 32)
    # 32 hops per channel, 4 of them cross servers (with a NIC pair and a QP)
    assert len(w.hop_flow) == 4 * 32
    assert np.count_nonzero(w.hop_conn >= 0) == 4 * 4
    assert w.n_qps == 16


def test_qps_per_connection_multiplies_qps(fabric):
    wb = WorkloadBuilder()
    add_collective(wb, comm(fabric, channels=2, qps_per_connection=4), "all_gather", 1 << 20)
    w = wb.build(node_ip=fabric.node_ip)
    assert w.n_qps == 2 * 4 * 4
    assert len(set(zip(w.qp_src_nic.tolist(), w.qp_lqpn.tolist()))) == w.n_qps


def test_btree_matches_nccl_trees():
    # NCCL trees.cc: parent of r is (r ^ bit) | (bit << 1), or r ^ bit when out of range
    assert btree_parents(4) == [-1, 2, 0, 2]
    assert btree_parents(8) == [-1, 2, 4, 2, 0, 6, 4, 6]
    for n in (2, 3, 5, 8, 13):
        for mirror in (False, True):
            par = btree_parents(n, mirror)
            assert par.count(-1) == 1
            for r in range(n):  # every node reaches the root
                seen = 0
                while par[r] >= 0 and seen <= n:
                    r, seen = par[r], seen + 1
                assert seen <= n


def test_alltoall_pxn_uses_destination_rail(fabric):
    """With PXN and shared connections (NCCL's defaults) a server's 8 GPUs reach a remote
    rank as one flow of their 8 messages on the connections (2 channels: 32 ranks, 16
    channels) of the NIC on that rank's rail; messages inside a server stay one flow per
    rank pair. A merged flow has a hop per channel from that NIC, and the 8 GPUs' NVLink
    legs to it are shared legs, one group per (NIC, channel)."""
    wb = WorkloadBuilder()
    c = comm(fabric)
    add_collective(wb, c, "alltoall", 32 << 20)
    w = wb.build(node_ip=fabric.node_ip)
    intra, merged = 4 * 8 * 7, 4 * 24
    assert w.n_flows == intra + merged and p2p_net_channels(c) == 2
    assert w.n_conns == 2 * merged and len(w.hop_flow) == intra + 2 * merged
    net = w.hop_conn >= 0
    rails_src = fabric.node_index[w.hop_src_nic[net]]
    rails_dst = fabric.node_index[w.hop_dst_nic[net]]
    assert np.array_equal(rails_src, rails_dst)
    np.testing.assert_allclose(w.flow_size_bytes[:intra], (32 << 20) / 32)
    np.testing.assert_allclose(w.flow_size_bytes[intra:], 8 * (32 << 20) / 32)
    # every merged flow: a hop per channel from its NIC, half its rate each
    assert np.array_equal(np.bincount(w.hop_flow[net]), [0] * intra + [2] * merged)
    np.testing.assert_allclose(w.hop_weight[net], 1 / 2)
    assert np.array_equal(w.hop_src[net], w.hop_src_nic[net])
    legs = w.legs
    assert np.array_equal(np.sort(legs.hop), np.flatnonzero(net))
    assert legs.n_groups == 4 * 8 * 2  # a group per NIC and channel
    assert np.array_equal(np.bincount(legs.leg_group), [8] * 64)
    np.testing.assert_allclose(legs.leg_weight, 1 / 16)
    for g in range(legs.n_groups):  # the legs of a group: every GPU of the NIC's server
        nic = legs.leg_nic[legs.leg_group == g]
        srcs = legs.leg_src[legs.leg_group == g]
        assert len(set(nic.tolist())) == 1
        assert set(fabric.node_server[srcs].tolist()) == {fabric.node_server[nic[0]]}
        assert len(set(srcs.tolist())) == 8
        assert np.all(w.hop_src_nic[legs.hop[legs.group == g]] == nic[0])


def test_alltoall_without_shared_comms_has_a_connection_per_rank_pair(fabric):
    """``NCCL_NET_SHARED_COMMS=0``: every local rank opens its own connection to each
    remote rank (through the proxy's NIC), one flow per rank pair."""
    wb = WorkloadBuilder()
    c = comm(fabric, nccl=NcclSettings.resolve(env={"NCCL_NET_SHARED_COMMS": 0}))
    add_collective(wb, c, "alltoall", 32 << 20)
    w = wb.build(node_ip=fabric.node_ip)
    assert w.n_flows == 32 * 31 and w.n_conns == 32 * 24 * 2


def test_unknown_algorithm_lists_the_known_ones(fabric):
    with pytest.raises(ValueError, match="available"):
        add_collective(WorkloadBuilder(), comm(fabric), "all_reduce", 1, algorithm="nvls")


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather"])
def test_coupled_ring_agrees_with_its_explicit_step_dag(fabric, kind):
    from icefabric.engine.flow import run_flow
    from icefabric.pipeline.problem import to_problem
    from icefabric.policies.base import PlanContext, get_policy

    times = {}
    for algo in ("ring", "ring-dag"):
        wb = WorkloadBuilder()
        c = Communicator("j", fabric, fabric.nodes_of_kind(ACCEL)[:16], channels=2)
        add_collective(wb, c, kind, 256 << 20, algorithm=algo)
        w = wb.build(node_ip=fabric.node_ip)
        ctx = PlanContext.create(fabric, w)
        prob, _ = to_problem(fabric, w, get_policy("spray").plan(ctx))
        times[algo] = run_flow(prob).collectives[0].time_ns
    # same bytes on the same bottlenecks, same per-step latency: the two agree closely
    assert times["ring-dag"] == pytest.approx(times["ring"], rel=0.01)


@pytest.mark.parametrize("pxn", [True, False])
def test_alltoall_pairs_match_the_per_pair_helpers(pxn):
    """The rank-pair arrays of AllToAll (one flow per rank pair) agree with the scalar
    helpers, pair by pair, on mixed servers (8 x 400G and 16 x 200G ports) across leaves:
    channel 0 of every pair first, then channel 1 of the pairs across servers (2 channels
    per remote peer), each carrying half, on alternate ports of two-port GPUs."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h"),
                    ServerGroup(server_profile("bm-gpu-h100-8"), 2, "o")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=4))
    c = comm(f)
    wb = WorkloadBuilder()
    alltoall_per_pair(wb, c, 64 << 20, pxn=pxn)
    w = wb.build(node_ip=f.node_ip)
    n = c.nranks
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    net = [c.rank_server[a] != c.rank_server[b] for a, b in pairs]
    assert p2p_net_channels(c) == 2
    ports = [2 if m else 1 for m in net]
    hops = [(i, ch) for ch in (0, 1) for i in range(len(pairs)) if ports[i] > ch]
    assert w.hop_src.tolist() == [int(c.ranks[pairs[i][0]]) for i, _ in hops]
    assert w.hop_flow.tolist() == [i for i, _ in hops]
    for h, (i, ch) in enumerate(hops):
        a, b = pairs[i]
        assert w.hop_weight[h] == 1.0 / ports[i]
        if not net[i]:
            assert (w.hop_conn[h], w.hop_src_nic[h]) == (-1, -1)
            assert w.flow_latency_ns[i] == c.intra_delay_ns(a) + c.step_overhead_ns
            continue
        dn = int(f.accel_port(c.ranks[b], ch))
        sn = c.nic(a, int(f.node_index[dn])) if pxn else int(f.accel_port(c.ranks[a], ch))
        assert (w.hop_src_nic[h], w.hop_dst_nic[h]) == (sn, dn)
        if ch == 0:
            assert w.flow_latency_ns[i] == c.hop_delay_ns(sn, dn) + c.step_overhead_ns
    # with PXN a server's ranks share their connections to a remote rank
    owner = [int(c.rank_server[a]) if pxn else a for a, _ in pairs]
    assert w.n_conns == len({(owner[i], pairs[i][1], ch) for i, ch in hops if net[i]})


def test_alltoall_uses_every_port_of_a_16_port_server():
    """On 16-port servers every port carries an equal share of AllToAll traffic (NCCL
    alternates a GPU's p2p channels over its two ports), with or without PXN."""
    f = leaf_spine([ServerGroup(server_profile("bm-gpu-h100-8"), 2, "o")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=4))
    for algo in ("pxn", "direct"):
        wb = WorkloadBuilder()
        add_collective(wb, comm(f), "alltoall", 64 << 20, algorithm=algo)
        w = wb.build(node_ip=f.node_ip)
        sent = np.zeros(f.n_nodes)
        on = w.hop_src_nic >= 0
        np.add.at(sent, w.hop_src_nic[on], w.flow_size_bytes[w.hop_flow[on]] * w.hop_weight[on])
        per_port = sent[list(f.servers[0].nics) + list(f.servers[1].nics)]
        assert per_port.min() == pytest.approx(per_port.max()) and per_port.min() > 0, algo


@pytest.mark.parametrize("groups,qps", [((("hgx-h100", 4),), 1),
                                        ((("hgx-h100", 2), ("bm-gpu-h100-8", 2)), 2)])
def test_merged_alltoall_equals_the_per_pair_model(groups, qps):
    """On shared connections (NCCL's default) the flow per (source server, destination
    rank) gives what one flow per rank pair gives: the same ECMP paths, the same link
    bytes, the same AllToAll time (the messages on one connection share its rate)."""
    from icefabric.engine.flow import run_flow
    from icefabric.pipeline.problem import to_problem
    from icefabric.policies.base import PlanContext, get_policy

    f = leaf_spine([ServerGroup(server_profile(p), k, p) for p, k in groups],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=4))
    out = {}
    for per_pair in (False, True):
        wb = WorkloadBuilder()
        build = alltoall_per_pair if per_pair else alltoall
        build(wb, comm(f, qps_per_connection=qps), 64 << 20)
        w = wb.build(node_ip=f.node_ip)
        prob, _ = to_problem(f, w, get_policy("ecmp").plan(PlanContext.create(f, w)))
        out[per_pair] = (w, run_flow(prob))
    (wm, merged), (wp, pairs) = out[False], out[True]
    assert wm.n_flows < wp.n_flows and wm.n_qps == wp.n_qps
    assert np.array_equal(wm.sports(), wp.sports())
    assert merged.collectives[0].time_ns == pairs.collectives[0].time_ns
    np.testing.assert_allclose(merged.link_bytes, pairs.link_bytes, rtol=1e-9)
    np.testing.assert_allclose(merged.link_peak_util, pairs.link_peak_util, rtol=1e-9)


def _per_message_alltoall(wb, c, size):
    """The PXN AllToAll as built before shared legs (the reference they are tested
    against): the same flows and connections, but a hop per message (local GPU) and
    channel at ``1 / (m * channels)``, from that GPU through the proxy's NIC."""
    from icefabric.ccl.nccl import _a2a_key, _A2aPairs, _alltoall_nics
    from icefabric.ccl.workload import CollectiveCall

    n = c.nranks
    coll = wb.collective(CollectiveCall(f"j:alltoall:{size}", "j", "alltoall", size, n, "pxn",
                                        c.library))
    p = _A2aPairs.of(c, True)
    intra, net = np.flatnonzero(~p.net), np.flatnonzero(p.net)
    own = wb.flows(np.full(len(intra), size / n), coll=coll,
                   latency_ns=c.intra_delays_ns[p.a[intra]] + c.step_overhead_ns)
    none = np.full(len(intra), -1)
    wb.hops(own, p.src[intra], p.dst[intra], conn=none)
    uniq, first, which = np.unique(c.rank_server[p.a[net]] * n + p.b[net], return_index=True,
                                   return_inverse=True)
    m = np.bincount(which)
    a, b = p.a[net[first]], uniq % n
    on_all = np.ones(len(uniq), dtype=bool)
    sn, dn = _alltoall_nics(c, a, b, on_all, 0, True)
    merged = wb.flows(m * (size / n), coll=coll,
                      latency_ns=c.hop_delays_ns(sn, dn) + c.step_overhead_ns)
    ch = p.channels[net[first]]
    for k in range(int(ch.max())):
        sn, dn = _alltoall_nics(c, a, b, on_all, k, True)
        fo = np.flatnonzero(ch > k)
        conn = np.full(len(uniq), -1, dtype=np.int64)
        conn[fo] = wb.connection_table(_a2a_key(c, k, True), uniq[fo] // n, b[fo], sn[fo],
                                       dn[fo], c.conn_spec)
        on = ch[which] > k
        w = which[on]
        wb.hops(merged[w], p.src[net[on]], p.dst[net[on]], conn=conn[w],
                weight=1.0 / (m[w] * ch[w]))


@pytest.mark.parametrize("groups,qps", [((("hgx-h100", 4),), 1),
                                        ((("hgx-h100", 2), ("bm-gpu-h100-8", 2)), 2)])
def test_shared_legs_equal_a_hop_per_message(groups, qps):
    """The merged flows' NVLink legs, shared per (NIC, channel), give the per-message
    model's incidence exactly — expanded into a route per leg (what every engine but the
    flow engine reads) and as shared routes (the flow engine's, with ~1/8 of the routes)
    — and so the same start and finish of every flow; the same link bytes and peaks
    expanded, and within 1e-12 shared (water-filling sums them in another order)."""
    from icefabric.engine.flow import run_flow
    from icefabric.pipeline.problem import to_problem
    from icefabric.policies.base import PlanContext, get_policy

    f = leaf_spine([ServerGroup(server_profile(p), k, p) for p, k in groups],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=4))
    probs = {}
    for name in ("messages", "legs"):
        wb = WorkloadBuilder()
        cm = comm(f, qps_per_connection=qps)
        if name == "messages":
            _per_message_alltoall(wb, cm, 64 << 20)
        else:
            alltoall(wb, cm, 64 << 20)
        w = wb.build(node_ip=f.node_ip)
        plan = get_policy("ecmp").plan(PlanContext.create(f, w))
        probs[name] = to_problem(f, w, plan)[0]
        if name == "legs":
            assert len(w.legs.hop) and len(w.hop_flow) < len(w.legs.leg_group)
            probs["shared"] = to_problem(f, w, plan, shared=True)[0]
    ref = probs["messages"]
    assert probs["shared"].shared is not None and ref.shared is None
    assert probs["shared"].n_routes * 4 < ref.n_routes == probs["legs"].n_routes
    out = {name: run_flow(pr) for name, pr in probs.items()}
    for name in ("legs", "shared"):
        assert (probs[name].incidence() != ref.incidence()).nnz == 0, name
        np.testing.assert_array_equal(probs[name].flow_size_bytes, ref.flow_size_bytes)
        for field in ("flow_start_ns", "flow_finish_ns", "link_bytes", "link_peak_util"):
            got, want = getattr(out[name], field), getattr(out["messages"], field)
            if name == "shared" and field.startswith("link"):
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=field)
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{name} {field}")


def test_p2p_net_channels_follow_nccl():
    """2 channels per remote peer in small communicators, one per GPU port beyond
    2 x p2pnChannels ranks (NCCL 2.20 on); always 2 up to 2.19."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 8, "h")],
                   LeafSpineSpec(servers_per_leaf=4, n_spines=4))
    ranks = f.nodes_of_kind(ACCEL)
    small = Communicator("j", f, ranks[:32], channels=16)
    large = Communicator("j", f, ranks, channels=16)  # 64 ranks: 2 * 64 > 16 * 4
    old = Communicator("j", f, ranks, channels=16, nccl=NcclSettings.resolve("2.19.3"))
    assert [p2p_net_channels(c) for c in (small, large, old)] == [2, 1, 2]
    two_ports = leaf_spine([ServerGroup(server_profile("bm-gpu-h100-8"), 8, "o")],
                           LeafSpineSpec(servers_per_leaf=4, n_spines=4))
    assert p2p_net_channels(Communicator("j", two_ports, two_ports.nodes_of_kind(ACCEL),
                                         channels=16)) == 2
