"""Communicators: which accelerators take part in a job, in rank order, and how the
library sets up its connections."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from icefabric.ccl.nccl_defaults import OLDEST_MODELLED, NcclSettings, ring_channels, server_view
from icefabric.ccl.workload import ConnSpec
from icefabric.topology.model import ACCEL, Fabric

#: QPs per connection a policy sets: ``rule(own, library)`` for a communicator of
#: ``library`` whose own setting is ``own`` (:meth:`Policy.qps_per_connection`).
QpsRule = Callable[[int, str], int]


@dataclass(frozen=True, eq=False)
class Communicator:
    """A job's communicator on a fabric.

    Attributes
    ----------
    job : str — job name (reports group by it).
    fabric : Fabric
    ranks : np.ndarray — accelerator node id of every rank, in rank order (server by server,
        local index inside a server, as launchers assign ranks).
    library : str — ``nccl``, ``rccl`` or ``hccl`` (chooses the algorithm models).
    qps_per_connection : int — QPs per network connection (NCCL_IB_QPS_PER_CONNECTION,
        HCCL_RDMA_QPS_PER_CONNECTION; default 1 in both, domain-facts §4.3, §7.2).
    channels : int | None — NCCL channels (rings), e.g. a log's ``N coll channels``; None =
        what ``nccl`` opens on these servers (:func:`~icefabric.ccl.nccl_defaults.ring_channels`)
        for NCCL (2.17 on) jobs of several servers whose accelerators NCCL's search model
        covers, else 2 per NIC (RCCL, older NCCL, uncovered hardware [UNCONFIRMED]; 16 on
        one server).
    step_overhead_ns : int — per pipeline step software/NIC latency added to propagation.
    nccl : NcclSettings | None — the job's NCCL version and ``NCCL_*`` settings (None = the
        default version, no variables set).
    rings : tuple of rank orders, optional — the ring of every channel as the library
        reported it (NCCL ``Channel cc/NN : r0 r1 ...``); channel ``c`` uses
        ``rings[c % len(rings)]``, and without ``channels`` there are ``len(rings)``
        channels. Empty: the library model builds the rings.
    pool_qps : tuple of (library, QPs per connection) — in a cross-vendor job, the setting of
        the pools of each library (each library reads its own variable, e.g. NCCL pools
        ``NCCL_IB_QPS_PER_CONNECTION``, HCCL pools ``HCCL_RDMA_QPS_PER_CONNECTION``); a
        library not named uses ``qps_per_connection``, as the exchange between pools does.
    """

    job: str
    fabric: Fabric
    ranks: np.ndarray
    library: str = "nccl"
    qps_per_connection: int = 1
    channels: int | None = None
    step_overhead_ns: int = 1000
    nccl: NcclSettings | None = None
    rings: tuple[tuple[int, ...], ...] = ()
    pool_qps: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        f = self.fabric
        r = np.asarray(self.ranks, dtype=np.int64)
        object.__setattr__(self, "ranks", r)  # a list or tuple of node ids works too
        if len(r) < 2:
            raise ValueError(f"job {self.job!r}: a communicator needs at least 2 ranks")
        if np.any(f.node_kind[r] != ACCEL):
            raise ValueError(f"job {self.job!r}: ranks must be accelerators")
        if len(np.unique(r)) != len(r):
            raise ValueError(f"job {self.job!r}: an accelerator appears twice")
        if self.qps_per_connection < 1 or self.qps_per_connection > 128:
            raise ValueError("qps_per_connection must be in [1, 128] (NCCL_IB_MAX_QPS)")
        for c, ring in enumerate(self.rings):
            if sorted(ring) != list(range(len(r))):
                raise ValueError(f"job {self.job!r}: ring of channel {c} is not an order of "
                                 f"ranks 0..{len(r) - 1}")

    def under(self, rule: QpsRule | None) -> Communicator:
        """This communicator with the QPs per connection a policy's ``rule`` sets, on its
        own connections and (cross-vendor) on each pool's by that pool's library."""
        if rule is None:
            return self
        own = self.qps_per_connection
        libs = sorted({self.fabric.servers[s].profile.library for s in self.servers}) \
            if self.library == "cross" else []
        return replace(self, qps_per_connection=rule(own, self.library),
                       pool_qps=tuple((lib, rule(own, lib)) for lib in libs))

    @property
    def conn_spec(self) -> ConnSpec:
        """What every connection of this communicator shares (its QP count and job)."""
        return ConnSpec(self.qps_per_connection, self.job)

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    @cached_property
    def rank_server(self) -> np.ndarray:
        return self.fabric.node_server[self.ranks].astype(np.int64)

    @cached_property
    def servers(self) -> list[int]:
        """Servers in order of first appearance."""
        seen: dict[int, None] = {}
        for s in self.rank_server.tolist():
            seen.setdefault(s, None)
        return list(seen)

    @cached_property
    def server_ranks(self) -> list[np.ndarray]:
        """Rank ids on each server (same order as :attr:`servers`)."""
        return [np.flatnonzero(self.rank_server == s) for s in self.servers]

    @property
    def n_nodes(self) -> int:
        return len(self.servers)

    @cached_property
    def nics_per_server(self) -> int:
        return min(self.fabric.servers[s].profile.n_nics for s in self.servers)

    @cached_property
    def rails(self) -> list[int]:
        """Indices of the NICs the communicator's ranks own on a server, in order: the rails
        its rings cross servers on. NCCL's ring search tries the NICs close to the
        communicator's GPUs first (``ncclTopoSelectNets``, ``src/graph/search.cc``: "Select
        NETs starting with those close to GPU(s)"), so a communicator of one GPU per server
        (a data-parallel group) runs every channel through that GPU's own NIC; with every
        GPU of a server, every NIC."""
        f = self.fabric
        srv = f.servers[self.servers[0]]
        own = set(self.ranks[self.server_ranks[0]].tolist())
        return [j for j, nic in enumerate(srv.nics) if f.nic_accel[nic] in own]

    @cached_property
    def n_channels(self) -> int:
        if self.channels is not None:
            return self.channels
        if self.rings:
            return len(self.rings)
        if self.n_nodes == 1:
            return 2 * 8
        settings = self.nccl or NcclSettings.resolve()
        if self.library == "nccl" and settings.version >= OLDEST_MODELLED:
            views = [server_view(p.cuda_sm, p.n_nics, p.nic_bps, p.pcie_bps)
                     for p in {self.fabric.servers[s].profile for s in self.servers}]
            if all(v is not None for v in views):
                # NCCL agrees on the smallest channel count of its ranks (init.cc).
                return min(ring_channels(settings, v, self.n_nodes) for v in views)
        lo, hi = settings.min_channels or 1, settings.max_channels or 64
        return max(lo, min(hi, 2 * self.nics_per_server))

    def nic(self, rank: int, rail: int | None = None) -> int:
        """The NIC node a rank uses: its own NIC, or the server's NIC ``rail`` (PXN/rails)."""
        f = self.fabric
        a = int(self.ranks[rank])
        if rail is None:
            return int(f.accel_nic[a])
        srv = f.servers[int(f.node_server[a])]
        return int(srv.nics[rail % len(srv.nics)])

    def nics(self, ranks: np.ndarray, rails: np.ndarray) -> np.ndarray:
        """:meth:`nic` of many ranks, each on its rail."""
        f = self.fabric
        servers = self.rank_server[ranks]
        width = max(len(f.servers[s].nics) for s in self.servers)
        table = np.full((len(f.servers), width), -1, dtype=np.int64)
        count = np.ones(len(table), dtype=np.int64)
        for s in self.servers:
            table[s, :len(f.servers[s].nics)] = f.servers[s].nics
            count[s] = len(f.servers[s].nics)
        return table[servers, np.asarray(rails) % count[servers]]

    def hop_delays_ns(self, src_nic: np.ndarray, dst_nic: np.ndarray) -> np.ndarray:
        """:meth:`hop_delay_ns` of many NIC pairs."""
        f = self.fabric
        la, lb = f.nic_leaf[src_nic], f.nic_leaf[dst_nic]
        host = f.link_delay_ns[f.link_ids(src_nic, la)].astype(np.int64)
        pa, pb = f.node_pod[la], f.node_pod[lb]
        tiers = np.where(la == lb, 0, np.where((pa == pb) | (pa < 0), 2, 4))
        return 2 * host + tiers * self._fabric_delay_ns

    @cached_property
    def _fabric_delay_ns(self) -> int:
        d = self.fabric.link_delay_ns[self.fabric.link_kind == 2]
        return int(np.median(d)) if len(d) else 0

    def hop_delay_ns(self, src_nic: int, dst_nic: int) -> int:
        """Propagation of one network hop along a shortest path (up to the common tier)."""
        f = self.fabric
        host = int(f.link_delay_ns[f.link_id(src_nic, int(f.nic_leaf[src_nic]))])
        la, lb = int(f.nic_leaf[src_nic]), int(f.nic_leaf[dst_nic])
        fab = self._fabric_delay_ns
        if la == lb:
            return 2 * host
        tiers = 2 if f.node_pod[la] == f.node_pod[lb] or f.node_pod[la] < 0 else 4
        return 2 * host + tiers * fab

    def intra_delay_ns(self, rank: int) -> int:
        srv = self.fabric.servers[int(self.rank_server[rank])]
        return 2 * srv.profile.intra_delay_ns

    @cached_property
    def intra_delays_ns(self) -> np.ndarray:
        """:meth:`intra_delay_ns` of every rank (int64; a fresh copy is the caller's)."""
        per_server = np.array([2 * s.profile.intra_delay_ns for s in self.fabric.servers],
                              dtype=np.int64)
        return per_server[self.rank_server]
