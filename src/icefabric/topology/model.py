"""The Fabric: a frozen structure of numpy arrays (nodes, directed links), built by plain
functions in :mod:`icefabric.topology.builders` (Mininet's ``Topo``/ns.py's ``build()`` idea).

Nodes are accelerators, NICs, the server's scale-up hub (NVSwitch/HCCS/Infinity Fabric) and
network switches; links are directed transmit queues (a duplex cable is two links), so the
server-internal fabric and the network are treated uniformly by every engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from icefabric.csr import within
from icefabric.errors import IceFabricError
from icefabric.topology.catalog import ServerProfile


class TopologyError(IceFabricError, ValueError):
    """Base of the topology layer's errors: a fabric that cannot be built as asked (ports,
    counts, placement), routed, or read from a document."""


# Node kinds
ACCEL, NIC, HUB, LEAF, SPINE, CORE = range(6)
NODE_KIND_NAMES = ("accel", "nic", "hub", "leaf", "spine", "core")
SWITCH_KINDS = (LEAF, SPINE, CORE)

# Link kinds (same codes as icefabric.engine.problem)
LINK_INTRA, LINK_HOST, LINK_FABRIC = 0, 1, 2


@dataclass(frozen=True)
class Server:
    """One server: its profile, resource pool and node ids."""

    name: str
    profile: ServerProfile
    pool: str
    accels: tuple[int, ...]
    nics: tuple[int, ...]
    hub: int


@dataclass(frozen=True, eq=False)
class Fabric:
    """Topology and device state as arrays. Never mutated; builders return new ones.

    Per-node arrays are indexed by node id, per-link arrays by link id. ``node_hash_*``
    describe each switch's ECMP hash configuration (algorithm name, seed, rotate-right
    offset); they are empty strings / 0 for non-switch nodes. ``node_hash_profile`` names
    each switch's hash profile (``icefabric.dataplane.ecmp.PROFILES``: key fields, symmetric
    hashing, member selection); empty (the default) or ``""`` = plain 5-tuple, ``mod N``.
    """

    name: str
    node_names: tuple[str, ...]
    node_kind: np.ndarray  # int8
    node_server: np.ndarray  # int32, -1 for network switches
    node_index: np.ndarray  # int32: local accel/NIC index, or switch index in its tier
    node_pod: np.ndarray  # int32, -1 if not in a pod
    node_ip: np.ndarray  # uint32 IPv4 address of NICs, 0 elsewhere
    node_buffer_bytes: np.ndarray  # int64 switch packet buffer, 0 elsewhere
    node_hash_algorithm: tuple[str, ...]
    node_hash_seed: np.ndarray  # int64
    node_hash_offset: np.ndarray  # int8
    link_src: np.ndarray  # int32
    link_dst: np.ndarray  # int32
    link_capacity_bps: np.ndarray  # float64
    link_delay_ns: np.ndarray  # int64
    link_kind: np.ndarray  # int8
    servers: tuple[Server, ...]
    meta: dict = field(default_factory=dict)
    node_hash_profile: tuple[str, ...] = ()

    # -- sizes -----------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.node_kind)

    @property
    def n_links(self) -> int:
        return len(self.link_src)

    @property
    def n_accels(self) -> int:
        return int(np.count_nonzero(self.node_kind == ACCEL))

    # -- lookups ---------------------------------------------------------------------------
    def nodes_of_kind(self, kind: int) -> np.ndarray:
        return np.flatnonzero(self.node_kind == kind)

    @cached_property
    def switches(self) -> np.ndarray:
        return np.flatnonzero(np.isin(self.node_kind, SWITCH_KINDS))

    @cached_property
    def is_switch(self) -> np.ndarray:
        return np.isin(self.node_kind, SWITCH_KINDS)

    @cached_property
    def out_indptr(self) -> np.ndarray:
        """CSR over source node of link ids (links sorted by (src, id))."""
        counts = np.bincount(self.link_src, minlength=self.n_nodes)
        indptr = np.zeros(self.n_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return indptr

    @cached_property
    def out_links(self) -> np.ndarray:
        return np.argsort(self.link_src, kind="stable").astype(np.int64)

    @cached_property
    def out_rank(self) -> np.ndarray:
        """Rank of every link among its source node's links (ordered by link id)."""
        rank = np.empty(self.n_links, dtype=np.int64)
        rank[self.out_links] = within(np.diff(self.out_indptr))
        return rank

    def links_from(self, node: int) -> np.ndarray:
        return self.out_links[self.out_indptr[node]:self.out_indptr[node + 1]]

    @cached_property
    def _link_index(self) -> dict[tuple[int, int], int]:
        return {(int(s), int(d)): i for i, (s, d) in enumerate(zip(self.link_src, self.link_dst))}

    def link_id(self, src: int, dst: int) -> int:
        """Id of the link src -> dst (the last one of parallel links); KeyError if none."""
        return self._link_index[(src, dst)]

    @cached_property
    def _link_keys(self) -> tuple[np.ndarray, np.ndarray]:
        key = self.link_src.astype(np.int64) * self.n_nodes + self.link_dst
        order = np.argsort(key, kind="stable")
        return key[order], order

    def link_ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """:meth:`link_id` of many (src, dst) pairs at once; KeyError if one has no link."""
        keys, order = self._link_keys
        want = np.asarray(src, dtype=np.int64) * self.n_nodes + np.asarray(dst, dtype=np.int64)
        pos = np.searchsorted(keys, want, side="right") - 1
        ok = pos >= 0
        ok[ok] = keys[pos[ok]] == want[ok]
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise KeyError((int(want[i] // self.n_nodes), int(want[i] % self.n_nodes)))
        return order[pos]

    @cached_property
    def nic_leaf(self) -> np.ndarray:
        """For every node: the leaf a NIC is cabled to (-1 for non-NICs)."""
        out = np.full(self.n_nodes, -1, dtype=np.int64)
        host = self.link_kind == LINK_HOST
        up = host & (self.node_kind[self.link_src] == NIC)
        out[self.link_src[up]] = self.link_dst[up]
        return out

    @cached_property
    def nic_links(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node: the NIC's uplink and downlink ids (-1 for non-NICs); of the fabric, so
        every link state's routing reads the same pair."""
        up = np.full(self.n_nodes, -1, dtype=np.int64)
        down = np.full(self.n_nodes, -1, dtype=np.int64)
        host = np.flatnonzero(self.link_kind == LINK_HOST)
        from_nic = self.node_kind[self.link_src[host]] == NIC
        up[self.link_src[host[from_nic]]] = host[from_nic]
        to_nic = self.node_kind[self.link_dst[host]] == NIC
        down[self.link_dst[host[to_nic]]] = host[to_nic]
        return up, down

    @cached_property
    def nic_accel(self) -> np.ndarray:
        """For every NIC node: the accelerator that owns it (the first one cabled to it on
        PCIe; -1 elsewhere). An accelerator may own several NICs (ports)."""
        out = np.full(self.n_nodes, -1, dtype=np.int64)
        k = self.node_kind
        pcie = np.flatnonzero((self.link_kind == LINK_INTRA) & (k[self.link_src] == ACCEL)
                              & (k[self.link_dst] == NIC))[::-1]  # the first one wins
        out[self.link_dst[pcie]] = self.link_src[pcie]
        return out

    @cached_property
    def accel_nic(self) -> np.ndarray:
        """For every accelerator node: its own (first) NIC node id (-1 elsewhere)."""
        return self._accel_ports[0][:, 0].copy()

    @cached_property
    def _accel_ports(self) -> tuple[np.ndarray, np.ndarray]:
        """Every accelerator's own NICs (ports) in order, -1 padded, and how many it has."""
        width = max((len(s.profile.nics_of_accel(i)) for s in self.servers
                     for i in range(len(s.accels))), default=1)
        table = np.full((self.n_nodes, width), -1, dtype=np.int64)
        count = np.ones(self.n_nodes, dtype=np.int64)
        for srv in self.servers:
            for i, a in enumerate(srv.accels):
                own = [srv.nics[j] for j in srv.profile.nics_of_accel(i)]
                table[a, :len(own)], count[a] = own, len(own)
        return table, count

    def accel_port_count(self, accel) -> np.ndarray:
        """How many NICs (ports) each accelerator of ``accel`` owns."""
        return self._accel_ports[1][np.asarray(accel)]

    def accel_port(self, accel, channel) -> np.ndarray:
        """The NIC (port) accelerator ``accel`` sends channel ``channel`` of a
        point-to-point connection through: its own ports in turn.

        NCCL's ``ncclTopoGetLocalNet`` (``src/graph/topo.cc``, 2.19 on) gives channel ``c``
        of a GPU the local net ``localNets[(base + c) % localNetCount]`` when
        ``localNetCount / localGpuCount`` NICs share one GPU (two ports per GPU on 16-port
        servers), so p2p channels alternate between a GPU's ports. ``base`` (derived from the
        GPU's device index) only relabels the ports; it is taken as 0."""
        a = np.asarray(accel)
        table, count = self._accel_ports
        return table[a, np.asarray(channel) % count[a]]

    @cached_property
    def server_of_name(self) -> dict[str, int]:
        return {s.name: i for i, s in enumerate(self.servers)}

    def link_names(self) -> tuple[str, ...]:
        """``"a->b"`` per link; parallel links get ``"a->b/1"``, ``"a->b/2"``... (unique)."""
        return self._link_names

    @cached_property
    def _link_names(self) -> tuple[str, ...]:
        n = self.node_names
        return tuple(f"{n[s]}->{n[d]}" + (f"/{k}" if k else "") for s, d, k in
                     zip(self.link_src.tolist(), self.link_dst.tolist(),
                         self.link_cable.tolist()))

    @cached_property
    def link_cable(self) -> np.ndarray:
        """Each link's index among the parallel links from its source to its destination
        (in link order; 0 for a single cable): the ``k`` of ``a->b/k``."""
        return cable_index(self.link_src, self.link_dst)

    @cached_property
    def node_id(self) -> dict[str, int]:
        """Node id by name."""
        return {name: i for i, name in enumerate(self.node_names)}

    def links_between(self, a: str, b: str, cable: int | None = None) -> np.ndarray:
        """Ids of the links of every cable between nodes ``a`` and ``b``, both directions
        (parallel cables included; empty if none or a name is unknown); with ``cable``,
        of that cable only: cable ``k`` is ``a->b/k`` and ``b->a/k`` of :meth:`link_names`
        (0 the first; empty if there are not that many)."""
        ia, ib = self.node_id.get(a), self.node_id.get(b)
        if ia is None or ib is None or ia == ib:
            return np.zeros(0, dtype=np.int64)
        s, d = self.link_src, self.link_dst
        ids = np.flatnonzero(((s == ia) & (d == ib)) | ((s == ib) & (d == ia)))
        return ids if cable is None else ids[self.link_cable[ids] == cable]

    def n_cables(self, a: str, b: str) -> int:
        """Cables between nodes ``a`` and ``b`` (each is two directed links)."""
        return len(self.links_between(a, b)) // 2

    def missing_cable(self, a: str, b: str, cable: int | None = None) -> str | None:
        """Why :meth:`links_between` ``(a, b, cable)`` finds nothing, for an error message
        (None when it finds links)."""
        n = self.n_cables(a, b)
        if not n:
            return f"no link between {a} and {b}"
        if cable is None or 0 <= cable < n:
            return None
        return (f"cable {cable} between {a} and {b}: there "
                f"{'is 1 (0)' if n == 1 else f'are {n} (0-{n - 1})'}")

    def describe(self) -> dict:
        kinds = {NODE_KIND_NAMES[k]: int(np.count_nonzero(self.node_kind == k))
                 for k in range(len(NODE_KIND_NAMES))}
        return {"name": self.name, "nodes": kinds, "links": self.n_links,
                "servers": len(self.servers), **self.meta}


def _pair_keys(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One int64 key per (src, dst) link, its stable sort order, and the key base."""
    n = int(max(src.max(initial=0), dst.max(initial=0))) + 1
    key = src.astype(np.int64) * n + dst
    return key, np.argsort(key, kind="stable"), n


def cable_index(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Each link's index among the parallel links from its source to its destination (in
    link order; 0 for a single cable): the ``k`` of ``a->b/k``."""
    key, order, _ = _pair_keys(src, dst)
    return _cable_of(key, order)


def _cable_of(key: np.ndarray, order: np.ndarray) -> np.ndarray:
    """:func:`cable_index` from the links' keys and their stable sort order."""
    out = np.empty(len(key), dtype=np.int64)
    out[order] = within(np.unique(key[order], return_counts=True)[1])
    return out


def reverse_links(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The other direction of every link's cable: ``b->a/k`` for ``a->b/k``, -1 where the
    cable is simplex. Parallel cables pair by their index, so each carries the ACKs of its
    own reverse traffic (not every cable's on one).

    Examples
    --------
    >>> reverse_links(np.array([0, 0, 1, 1, 1]), np.array([1, 1, 0, 0, 2])).tolist()
    [2, 3, 0, 1, -1]
    """
    key, order, n = _pair_keys(src, dst)
    ks = key[order]
    back = dst.astype(np.int64) * n + src
    first = np.searchsorted(ks, back, side="left")
    k = _cable_of(key, order)  # (the same sort, not a second one)
    ok = np.searchsorted(ks, back, side="right") - first > k
    return np.where(ok, order[np.minimum(first + k, len(ks) - 1)], -1).astype(np.int64)
