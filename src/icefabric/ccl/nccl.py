"""NCCL (and RCCL, which keeps NCCL's algorithms) collective models -> workload.

Sources (domain-facts §5): ring search ``src/graph/search.cc`` — an inter-node ring enters a
node on NIC n and leaves on the same NIC (rail-aligned, ``NCCL_CROSS_NIC`` 0/2); channels
(``MAXCHANNELS`` 64) are independent rings, each with its own network connections;
double binary trees ``src/graph/trees.cc`` (tree 0: parent of r is ``(r ^ bit) | (bit << 1)``,
or ``r ^ bit`` when out of range, ``bit`` = lowest set bit of r; tree 1 mirrored);
PXN (``NCCL_PXN_DISABLE`` 0): data for a remote GPU on another rail first crosses NVLink to
the local GPU on the destination's rail. nccl-tests byte counts (domain-facts §6).

Each ring channel is one *coupled* flow: every hop of a pipelined ring moves the same
bytes at the same rate, so the ring runs at its slowest hop (hardware behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icefabric.ccl.communicator import Communicator
from icefabric.ccl.nccl_defaults import NcclSettings
from icefabric.ccl.workload import CollectiveCall, SharedLegs, WorkloadBuilder
from icefabric.csr import gather, indptr_from_lengths

RING_STEPS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1,
              "reduce_scatter": lambda n: n - 1, "broadcast": lambda n: n - 1,
              "reduce": lambda n: n - 1}


def ring_order(comm: Communicator, channel: int) -> tuple[list[int], int | None]:
    """Rank order of ring ``channel`` and the rail (NIC index) it uses between servers.

    Inside a server the ring enters at the GPU that owns NIC ``rail``, visits the other local
    GPUs and leaves through NIC ``rail`` again (rail-aligned, NCCL_CROSS_NIC=0 behaviour).
    Single-server rings rotate their start GPU per channel. A ring the library reported
    (``comm.rings``) is used as it is, on the same rail.
    """
    if comm.rings:
        order = list(comm.rings[channel % len(comm.rings)])
        return order, (channel % comm.nics_per_server if comm.n_nodes > 1 else None)
    if comm.n_nodes == 1:
        local = comm.server_ranks[0].tolist()
        k = channel % len(local)
        return local[k:] + local[:k], None
    rail = comm.rails[channel % len(comm.rails)]
    order: list[int] = []
    f = comm.fabric
    for s, local in zip(comm.servers, comm.server_ranks):
        nic = f.servers[s].nics[rail % len(f.servers[s].nics)]
        owners = [r for r in local.tolist() if f.nic_accel[nic] == comm.ranks[r]]
        first = owners[0] if owners else int(local[0])
        order += [first] + [r for r in local.tolist() if r != first]
    return order, rail


@dataclass(frozen=True)
class RingChannel:
    """Ring channel ``index`` of ``comm``: its rank ``order`` and ``rail``
    (:func:`ring_order`). Its connections are keyed ``(job, "ring", index, a, b)`` by
    :func:`ring` and :func:`ring_dag` alike, so successive collectives of a job reuse them."""

    comm: Communicator
    index: int
    order: list[int]
    rail: int | None

    @classmethod
    def of(cls, comm: Communicator, index: int) -> RingChannel:
        return cls(comm, index, *ring_order(comm, index))

    @property
    def key(self) -> tuple:
        return (self.comm.job, "ring", self.index)


def _ring_hop(wb: WorkloadBuilder, channel: RingChannel, flow: int, a: int, b: int) -> int:
    """Add the hop rank ``a`` -> rank ``b`` of ``channel`` to ``flow`` (through the NICs of
    its rail when the ranks are on different servers); returns its one-way delay in ns."""
    comm = channel.comm
    src, dst = int(comm.ranks[a]), int(comm.ranks[b])
    if comm.rank_server[a] == comm.rank_server[b]:
        wb.hop(flow, src, dst)
        return comm.intra_delay_ns(a)
    sn, dn = comm.nic(a, channel.rail), comm.nic(b, channel.rail)
    c = wb.connection(channel.key + (a, b), sn, dn, comm.conn_spec)
    wb.hop(flow, src, dst, conn=c)
    return comm.hop_delay_ns(sn, dn)


def add_ring_hops(wb: WorkloadBuilder, channel: RingChannel, flow: int) -> int:
    """Add the hops of the cyclic ring ``channel`` to ``flow`` (:func:`_ring_hop` of every
    hop, as arrays); returns the mean one-way hop delay in ns."""
    comm, rail = channel.comm, channel.rail
    a = np.asarray(channel.order, dtype=np.int64)
    b = np.roll(a, -1)
    n = len(a)
    nic = np.full((2, n), -1, dtype=np.int64)
    conn = np.full(n, -1, dtype=np.int64)
    delays = comm.intra_delays_ns[a]
    inter = np.flatnonzero(comm.rank_server[a] != comm.rank_server[b])
    if len(inter):
        ends = (a[inter], b[inter])
        nic[:, inter] = [comm.fabric.accel_nic[comm.ranks[x]] if rail is None else
                         comm.nics(x, np.full(len(x), rail)) for x in ends]
        keys = [channel.key + ab for ab in zip(*(x.tolist() for x in ends))]
        conn[inter] = wb.connections(keys, nic[0, inter], nic[1, inter], comm.conn_spec)
        delays[inter] = comm.hop_delays_ns(nic[0, inter], nic[1, inter])
    wb.hops(np.full(n, flow), comm.ranks[a], comm.ranks[b], conn=conn)
    return int(np.mean(delays))


def ring(wb: WorkloadBuilder, comm: Communicator, kind: str, size_bytes: int, *,
         after=(), name: str = "") -> list[int]:
    """Ring AllReduce / AllGather / ReduceScatter / Broadcast / Reduce with ``n_channels``
    channels; ``size_bytes`` is nccl-tests' ``size``. Returns the flows to wait for."""
    if kind not in RING_STEPS:
        raise ValueError(f"ring algorithm does not implement {kind!r}")
    n, C = comm.nranks, comm.n_channels
    steps = RING_STEPS[kind](n)
    per_rank = (n - 1) / n if kind != "broadcast" and kind != "reduce" else 1.0
    factor = 2 * per_rank if kind == "all_reduce" else per_rank
    coll = wb.collective(CollectiveCall(name or f"{comm.job}:{kind}:{size_bytes}", comm.job,
                                        kind, size_bytes, n, "ring", comm.library))
    flows = []
    for c in range(C):
        channel = RingChannel.of(comm, c)
        f = wb.flow(size_bytes / C * factor, coll=coll, deps=after)
        mean_delay = add_ring_hops(wb, channel, f)
        wb.flow_latency[f] = steps * (mean_delay + comm.step_overhead_ns)
        flows.append(f)
    return flows


def ring_dag(wb: WorkloadBuilder, comm: Communicator, kind: str, size_bytes: int, *,
             after=(), name: str = "") -> list[int]:
    """The same ring as :func:`ring`, expanded into its explicit chunk/step DAG.

    Each channel splits its share into ``n`` chunks; chunk ``c`` travels ``steps`` hops
    (ring position ``c+k`` to ``c+k+1`` at step ``k``); a step waits for the previous step of
    its chunk (its data must have arrived) and for the previous send on the same ring edge
    (a rank sends its steps in order: at step ``k`` every rank sends one chunk) — the NCCL
    schedule as the validation references model it. Costs ``channels * n * steps`` flows,
    so it is for small cases: tests check that it agrees with the coupled representation.
    """
    if kind not in RING_STEPS:
        raise ValueError(f"ring algorithm does not implement {kind!r}")
    n, C = comm.nranks, comm.n_channels
    steps = RING_STEPS[kind](n)
    coll = wb.collective(CollectiveCall(name or f"{comm.job}:{kind}:{size_bytes}", comm.job,
                                        kind, size_bytes, n, "ring-dag", comm.library))
    chunk = size_bytes / C / n
    last: list[int] = []
    for c in range(C):
        channel = RingChannel.of(comm, c)
        order = channel.order
        edge_last: dict[int, int] = {}
        prev_of_chunk: list[int | None] = [None] * n
        for k in range(steps):  # step-major: at step k every rank sends one chunk
            for ch in range(n):
                prev = prev_of_chunk[ch]
                pos = (ch + k) % n
                a, b = order[pos], order[(pos + 1) % n]
                deps = list(after) if prev is None else [prev]
                if pos in edge_last:
                    deps.append(edge_last[pos])
                f = wb.flow(chunk, coll=coll, deps=deps)
                delay = _ring_hop(wb, channel, f, a, b)
                wb.flow_latency[f] = delay + comm.step_overhead_ns
                edge_last[pos] = f
                prev_of_chunk[ch] = f
        last += prev_of_chunk
    return last


def btree_parents(n: int, mirror: bool = False) -> list[int]:
    """Parent of each node in NCCL's binary tree (``-1`` for the root); the mirrored tree
    maps ``r -> n-1-r`` when ``n`` is even and shifts by one when odd (trees.cc)."""
    def parent0(r):
        if r == 0:
            return -1
        bit = r & -r
        p = (r ^ bit) | (bit << 1)
        return p if p < n else r ^ bit

    if not mirror:
        return [parent0(r) for r in range(n)]
    if n % 2 == 0:
        conv = [n - 1 - r for r in range(n)]
    else:
        conv = [(r + 1) % n for r in range(n)]
    inv = {v: k for k, v in enumerate(conv)}
    out = []
    for r in range(n):
        p0 = parent0(inv[r])
        out.append(-1 if p0 < 0 else conv[p0])
    return out


def tree_allreduce(wb: WorkloadBuilder, comm: Communicator, size_bytes: int, *, after=(),
                   name: str = "") -> list[int]:
    """Double-binary-tree AllReduce: inter-node binary trees over node leaders, a chain
    inside each node; reduce up and broadcast down are pipelined, so each channel is one
    coupled flow over all its edges in both directions, carrying ``size/C`` per edge."""
    n, C = comm.nranks, comm.n_channels
    coll = wb.collective(CollectiveCall(name or f"{comm.job}:all_reduce:{size_bytes}",
                                        comm.job, "all_reduce", size_bytes, n, "tree",
                                        comm.library))
    N = comm.n_nodes
    flows = []
    for c in range(C):
        parents = btree_parents(N, mirror=bool(c % 2))
        order, rail = ring_order(comm, c)  # per-node chain = ring order inside each node
        f = wb.flow(size_bytes / C, coll=coll, deps=after)
        delays = []
        per_node = [[r for r in order if comm.rank_server[r] == s] for s in comm.servers]
        for chain in per_node:  # intra-node chain, both directions
            for a, b in zip(chain, chain[1:]):
                for x, y in ((a, b), (b, a)):
                    wb.hop(f, int(comm.ranks[x]), int(comm.ranks[y]))
                    delays.append(comm.intra_delay_ns(x))
        for child, parent in enumerate(parents):
            if parent < 0:
                continue
            a, b = per_node[child][0], per_node[parent][0]  # node leaders
            for x, y in ((a, b), (b, a)):
                sn, dn = comm.nic(x, rail), comm.nic(y, rail)
                k = wb.connection((comm.job, "tree", c, x, y), sn, dn, comm.conn_spec)
                wb.hop(f, int(comm.ranks[x]), int(comm.ranks[y]), conn=k)
                delays.append(comm.hop_delay_ns(sn, dn))
        depth = max(1, int(np.ceil(np.log2(max(N, 2))))) + max(len(p) for p in per_node)
        wb.flow_latency[f] = 2 * depth * (int(np.mean(delays)) + comm.step_overhead_ns)
        flows.append(f)
    return flows


def alltoall(wb: WorkloadBuilder, comm: Communicator, size_bytes: int, *, after=(),
             pxn: bool = True, name: str = "") -> list[int]:
    """AllToAll as NCCL runs it: every rank sends ``size/n`` to every other rank at once.

    Inter-node messages use the destination's rail. With PXN (``NCCL_PXN_DISABLE`` 0,
    ``NCCL_P2P_PXN_LEVEL`` 2), ``ncclTopoGetNetDev`` (``src/graph/search.cc``) sends to a
    remote rank through the local NIC of the remote GPU's rail, with the local GPU attached
    to that NIC (``ncclTopoGetLocalGpu``) as proxy rank: the message first crosses NVLink
    into the proxy GPU's buffers, and the proxy's thread posts it on the network
    (domain-facts §5.1). Point-to-point connections (``connIndex`` 1, no graph) use shared
    buffers, and with ``NCCL_NET_SHARED_COMMS`` 1, the default (``NCCL_PARAM(NetSharedComms,
    "NET_SHARED_COMMS", 1)``), ``sendProxyConnect`` (``src/transport/net.cc``) opens one
    send comm per (NIC, remote rank, channel), ``netComms[netDev][tpRemoteRank]
    .sendComm[channelId]``: the first local rank to ask connects, the others reuse it
    (``sendRefCount``), and the receiver accepts once per (NIC, remote proxy rank,
    channel). So all GPUs of a server reach a remote rank over the same connections (one
    per channel) of the server's NIC on that rank's rail (``NCCL_IB_QPS_PER_CONNECTION``
    QPs each, one ECMP path per QP): the model makes that one flow per (source server,
    destination rank) carrying the ``m`` local GPUs' messages at one rate — each source
    holds at most ``NCCL_STEPS`` slots of the proxy's shared buffers, so the NVLink legs
    run at the network's pace: each local GPU's NVLink leg to the proxy carries ``1/m`` of
    it, and the network path all of it. The legs of every flow from one server on one
    rail are the same, so they are built once per (NIC, channel) as shared legs
    (:func:`_alltoall_merged`).

    A message to a remote peer is spread evenly over :func:`p2p_net_channels` channels
    (NCCL; other libraries: one per port), each with its own connection; a GPU with
    several ports (16-port servers) alternates them over its ports
    (:meth:`~icefabric.topology.model.Fabric.accel_port`).
    Without PXN or with ``NCCL_NET_SHARED_COMMS=0`` every rank pair has its own
    connections and flow (:func:`alltoall_per_pair`).
    """
    coll = _alltoall_call(wb, comm, size_bytes, pxn, name)
    if _shared_comms(comm, pxn):
        return _alltoall_merged(wb, comm, coll, size_bytes, after)
    return _alltoall_pairs(wb, comm, coll, size_bytes, after, pxn)


def alltoall_per_pair(wb: WorkloadBuilder, comm: Communicator, size_bytes: int, *,
                      after=(), pxn: bool = True, name: str = "") -> list[int]:
    """:func:`alltoall` with one flow per rank pair, on the same connections, also where
    a server's ranks share them (the reference the merged flows are tested against)."""
    coll = _alltoall_call(wb, comm, size_bytes, pxn, name)
    return _alltoall_pairs(wb, comm, coll, size_bytes, after, pxn)


def _alltoall_call(wb: WorkloadBuilder, comm: Communicator, size_bytes: int, pxn: bool,
                   name: str) -> int:
    """Register the AllToAll's :class:`~icefabric.ccl.workload.CollectiveCall` (``size``
    as nccl-tests counts it); its index."""
    return wb.collective(CollectiveCall(name or f"{comm.job}:alltoall:{size_bytes}", comm.job,
                                        "alltoall", size_bytes, comm.nranks,
                                        "pxn" if pxn else "direct", comm.library))


def _shared_comms(comm: Communicator, pxn: bool) -> bool:
    """Whether a server's ranks reach a remote rank over the same connections (PXN with
    ``NCCL_NET_SHARED_COMMS`` 1: :func:`alltoall`)."""
    return pxn and (comm.nccl is None or comm.nccl.net_shared_comms)


def _alltoall_pairs(wb: WorkloadBuilder, comm: Communicator, coll: int, size_bytes: int,
                    after, pxn: bool) -> list[int]:
    """The flows of :func:`alltoall`, one per rank pair (:class:`_A2aPairs`), each with a
    hop per channel; across servers the hop rides the connection of its source server
    (shared connections) or rank to the destination rank."""
    shared = _shared_comms(comm, pxn)
    p = _A2aPairs.of(comm, pxn)
    flows = wb.flows(np.full(len(p.a), size_bytes / comm.nranks), coll=coll, deps=after,
                     latency_ns=p.latency_ns(comm))
    owner = comm.rank_server[p.a] if shared else p.a
    for c in range(int(p.channels.max(initial=1))):
        sn, dn = _alltoall_nics(comm, p.a, p.b, p.net, c, pxn)
        on = p.channels > c
        conn = np.full(len(p.a), -1, dtype=np.int64)
        link = on & p.net
        conn[link] = wb.connection_table(_a2a_key(comm, c, shared), owner[link], p.b[link],
                                         sn[link], dn[link], comm.conn_spec)
        wb.hops(flows[on], p.src[on], p.dst[on], conn=conn[on], weight=1.0 / p.channels[on])
    return flows.tolist()


@dataclass(frozen=True)
class _A2aPairs:
    """Every ordered pair ``a != b`` of an AllToAll's ranks, in row-major order (``a``,
    then ``b``): accelerators ``src``/``dst``, whether the pair crosses the network and
    the channels (connections) it uses."""

    a: np.ndarray
    b: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    net: np.ndarray
    channels: np.ndarray
    pxn: bool

    @classmethod
    def of(cls, comm: Communicator, pxn: bool) -> _A2aPairs:
        a, b = np.nonzero(~np.eye(comm.nranks, dtype=bool))
        src, dst = comm.ranks[a].astype(np.int64), comm.ranks[b].astype(np.int64)
        net = comm.rank_server[a] != comm.rank_server[b]
        return cls(a, b, src, dst, net, np.where(net, _pair_channels(comm, src, dst, pxn), 1),
                   pxn)

    def latency_ns(self, comm: Communicator) -> np.ndarray:
        """Completion latency of every pair's message: its one-way delay (NVLink, or the
        network hop of channel 0) plus the step overhead."""
        sn, dn = _alltoall_nics(comm, self.a, self.b, self.net, 0, self.pxn)
        lat = comm.intra_delays_ns[self.a]
        lat[self.net] = comm.hop_delays_ns(sn[self.net], dn[self.net])
        return lat + comm.step_overhead_ns


def _pair_channels(comm: Communicator, src: np.ndarray, dst: np.ndarray,
                   pxn: bool) -> np.ndarray:
    """Channels (connections) a message from accelerator ``src`` to a remote ``dst``
    is spread over: :func:`p2p_net_channels` in NCCL, else one per port (RCCL's and
    cross-vendor exchanges' rule not read)."""
    if comm.library == "nccl":
        return np.full(len(src), p2p_net_channels(comm))
    f_ = comm.fabric
    return f_.accel_port_count(dst) if pxn else \
        np.maximum(f_.accel_port_count(src), f_.accel_port_count(dst))


def p2p_net_channels(comm: Communicator) -> int:
    """Channels NCCL spreads a point-to-point message to a remote rank over
    (``p2pnChannelsPerPeer``), each its own network connection.

    ``ncclTopoComputeP2pChannels`` (``src/graph/paths.cc``) takes ``p2pnChannels`` =
    ``nChannels`` and the fewest channels any peer needs, both rounded up to a power of
    two. For a remote peer ``ncclTopoGetNchannels`` gives ``NCCL_NCHANNELS_PER_NET_PEER``,
    default 2 up to 2.19 (v2.19.3 ``:669``); from 2.20 it is unset (-1) and computed
    (v2.27.7 ``:818-830``): ``max(NICs the GPU needs, nChannelsMax)`` with
    ``nChannelsMax`` starting at 2 and halved while ``nChannelsMax * nRanks >
    p2pnChannels * 4`` — so 2 channels per peer in small communicators and one per GPU
    port beyond ``2 * p2pnChannels`` ranks. A local (NVLink) peer needs at least 2, so
    only the network's count can be the fewest (one NIC per GPU: the GPU's ports)."""
    p2p = min(comm.n_channels, 64)
    settings = comm.nccl or NcclSettings.resolve()
    ports = int(comm.fabric.accel_port_count(comm.ranks).min())
    if settings.version < (2, 20, 0):
        per_peer = 2
    else:
        c_max = 2
        while c_max * comm.nranks > p2p * 4 and c_max > 1:
            c_max //= 2
        per_peer = max(ports, c_max)
    return min(_pow2_up(per_peer), _pow2_up(p2p))


def _pow2_up(x: int) -> int:
    return 1 << max(int(x) - 1, 0).bit_length()


def _a2a_key(comm: Communicator, channel: int, shared: bool) -> tuple:
    """The key prefix (:meth:`~icefabric.ccl.workload.WorkloadBuilder.connection_table`)
    of the AllToAll connections of ``channel`` from a source server (``shared``) or rank
    to a destination rank: the merged and the per-pair flows open the same ones."""
    return (comm.job, "pxn" if shared else "p2p", channel)


def _alltoall_merged(wb: WorkloadBuilder, comm: Communicator, coll: int, size_bytes: int,
                     after) -> list[int]:
    """The flows of :func:`alltoall` with shared connections: a flow per rank pair inside a
    server (NVLink), one per (source server, destination rank) across servers, in the
    order of the rank pairs (source rank, then destination) they start at.

    A merged flow has one network hop per channel, from the source NIC (weight ``1 /
    channels``); its ``m`` local GPUs' NVLink legs to that NIC (``1 / (m * channels)``
    each) are :class:`~icefabric.ccl.workload.SharedLegs` of the (NIC, channel) group
    every flow from the server on that rail shares, built once per group. Per flow that
    is the same load as a hop per local GPU at ``1 / (m * channels)`` over its leg and
    the shared network path: the ``m`` hops' shares of the network path sum to the one
    hop's (exactly where ``m * channels`` is a power of two: 8-GPU servers)."""
    n = comm.nranks
    rs = comm.rank_server
    ranks = comm.ranks.astype(np.int64)
    sv = _Servers.of(comm)
    servers, sidx, m, ptr, local = sv.ids, sv.of_rank, sv.m, sv.ptr, sv.by_server
    a = np.repeat(np.arange(n), m[sidx])  # inside a server: every pair, row-major
    b = local[gather(ptr[sidx], m[sidx])]
    a, b = a[a != b], b[a != b]
    own = wb.flows(np.full(len(a), size_bytes / n), coll=coll, deps=after,
                   latency_ns=comm.intra_delays_ns[a] + comm.step_overhead_ns)
    none = np.full(len(a), -1)
    wb.hops(own, ranks[a], ranks[b], conn=none)
    fs = np.repeat(np.arange(len(servers)), n - m)  # across: every (server, remote rank)
    b = np.concatenate([np.flatnonzero(rs != s) for s in servers.tolist()])
    a = local[ptr[fs]]  # the server's first rank: every local rank has the same NICs
    everywhere = np.ones(len(b), dtype=bool)
    sn, dn = _alltoall_nics(comm, a, b, everywhere, 0, True)
    merged = wb.flows(m[fs] * (size_bytes / n), coll=coll, deps=after,
                      latency_ns=comm.hop_delays_ns(sn, dn) + comm.step_overhead_ns)
    channels = _pair_channels(comm, ranks[a], ranks[b], True)
    for c in range(int(channels.max(initial=1))):
        if c:
            sn, dn = _alltoall_nics(comm, a, b, everywhere, c, True)
        fo = np.flatnonzero(channels > c)  # the flows with a channel c
        conn = wb.connection_table(_a2a_key(comm, c, True), servers[fs[fo]], b[fo], sn[fo],
                                   dn[fo], comm.conn_spec)
        hops = wb.hops(merged[fo], sn[fo], ranks[b[fo]], conn=conn, weight=1.0 / channels[fo])
        wb.shared_legs(_pxn_legs(hops, sn[fo], channels[fo], fs[fo], sv))
    return own.tolist() + merged.tolist()


@dataclass(frozen=True)
class _Servers:
    """The servers of a communicator's ranks: their ids (ascending), each rank's server
    (``of_rank``, an index into ``ids``), how many ranks each holds (``m``), and the ranks
    server by server (``by_server``, ascending within a server; server ``s``'s from
    ``ptr[s]``) with their accelerators (``accels``)."""

    ids: np.ndarray
    of_rank: np.ndarray
    m: np.ndarray
    ptr: np.ndarray
    by_server: np.ndarray
    accels: np.ndarray

    @classmethod
    def of(cls, comm: Communicator) -> _Servers:
        ids, of_rank, m = np.unique(comm.rank_server, return_inverse=True, return_counts=True)
        by_server = np.argsort(comm.rank_server, kind="stable")
        return cls(ids, of_rank.reshape(-1), m, indptr_from_lengths(m), by_server,
                   comm.ranks.astype(np.int64)[by_server])


def _pxn_legs(hops: np.ndarray, sn: np.ndarray, channels: np.ndarray, fs: np.ndarray,
              servers: _Servers) -> SharedLegs:
    """The NVLink legs of merged hops (source NIC ``sn``, ``channels`` per flow, source
    server ``fs``, an index into ``servers``): one group per (NIC, channel count), a leg
    from each of the server's ``m`` GPUs at ``1 / (m * channels)``."""
    key = sn * (int(channels.max(initial=1)) + 1) + channels
    uniq, first, group = np.unique(key, return_index=True, return_inverse=True)
    gs, gm = fs[first], servers.m[fs[first]]
    start = servers.ptr[gs]
    return SharedLegs(hop=hops, group=group.reshape(-1),
                      leg_group=np.repeat(np.arange(len(uniq)), gm),
                      leg_src=servers.accels[gather(start, gm)],
                      leg_nic=np.repeat(sn[first], gm),
                      leg_weight=np.repeat(1.0 / (gm * channels[first]), gm))


def _alltoall_nics(comm: Communicator, a: np.ndarray, b: np.ndarray, net: np.ndarray,
                   channel: int, pxn: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source and destination NICs of channel ``channel`` of every AllToAll pair of ranks
    ``a`` -> ``b`` (-1 within a server): the destination GPU's port for it, and with PXN
    the source server's NIC on the same rail, else the source GPU's own port for it."""
    f_ = comm.fabric
    dn = np.where(net, f_.accel_port(comm.ranks[b], channel), -1)
    sn = np.full(len(a), -1, dtype=np.int64)
    if pxn:
        sn[net] = comm.nics(a[net], f_.node_index[dn[net]])
    else:
        sn[net] = f_.accel_port(comm.ranks[a[net]], channel)
    return sn, dn


ALGORITHMS = {
    ("all_reduce", "ring"): lambda wb, c, s, **kw: ring(wb, c, "all_reduce", s, **kw),
    ("all_reduce", "tree"): tree_allreduce,
    ("all_reduce", "ring-dag"): lambda wb, c, s, **kw: ring_dag(wb, c, "all_reduce", s, **kw),
    ("all_gather", "ring-dag"): lambda wb, c, s, **kw: ring_dag(wb, c, "all_gather", s, **kw),
    ("all_gather", "ring"): lambda wb, c, s, **kw: ring(wb, c, "all_gather", s, **kw),
    ("reduce_scatter", "ring"): lambda wb, c, s, **kw: ring(wb, c, "reduce_scatter", s, **kw),
    ("broadcast", "ring"): lambda wb, c, s, **kw: ring(wb, c, "broadcast", s, **kw),
    ("alltoall", "pxn"): alltoall,
    ("alltoall", "direct"): lambda wb, c, s, **kw: alltoall(wb, c, s, pxn=False, **kw),
}
DEFAULT_ALGORITHM = {"all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "ring",
                     "broadcast": "ring", "alltoall": "pxn"}
