"""Fabric builders: 2-tier leaf-spine (any oversubscription, optionally rail-optimized),
3-tier fat-tree with pods, and a single-switch star for tests.

Each builder validates its arguments (like ns.py's ``fattree.build(k)`` rejects odd k) and
names nodes and assigns addresses deterministically (like Mininet), so the same arguments
always give the same fabric.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from icefabric.topology.catalog import ServerProfile, SwitchProfile, switch_profile
from icefabric.topology.model import (
    ACCEL,
    CORE,
    HUB,
    LEAF,
    LINK_FABRIC,
    LINK_HOST,
    LINK_INTRA,
    NIC,
    SPINE,
    Fabric,
    Server,
    TopologyError,
)

#: SONiC default ECMP seeds per device role (dockers/docker-orchagent/switch.json.j2):
#: ToRRouter 0, LeafRouter 10 (with hash offset 10), SpineRouter 25 — domain-facts §3.4.
SONIC_ROLE_SEEDS = {LEAF: (0, 0), SPINE: (10, 10), CORE: (25, 0)}


@dataclass(frozen=True)
class ServerGroup:
    """``count`` servers of one profile forming a resource pool."""

    profile: ServerProfile
    count: int
    pool: str
    prefix: str = ""
    #: explicit server names (e.g. the hostnames a CCL log shows); default ``<prefix>-<i>``
    names: tuple[str, ...] = ()


class _Builder:
    def __init__(self, name: str, seed: int, hash_seeds: str, host_delay_ns: int,
                 fabric_delay_ns: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.hash_seeds = hash_seeds
        self.host_delay_ns = host_delay_ns
        self.fabric_delay_ns = fabric_delay_ns
        self.names: list[str] = []
        self.kind: list[int] = []
        self.server: list[int] = []
        self.index: list[int] = []
        self.pod: list[int] = []
        self.ip: list[int] = []
        self.buffer: list[int] = []
        self.halgo: list[str] = []
        self.hseed: list[int] = []
        self.hoff: list[int] = []
        self.links: list[tuple[int, int, float, int, int]] = []
        self.servers: list[Server] = []

    def node(self, name: str, kind: int, server: int, index: int = 0, ip: int = 0) -> int:
        """A node of server ``server`` (hub, accelerator, NIC): no buffer, no ECMP hash."""
        self._place(name, kind, server, index, -1, ip)
        self._forwarding(0, "", 0, 0)
        return len(self.names) - 1

    def switch(self, name: str, kind: int, sw: SwitchProfile, index: int = 0,
               pod: int = -1) -> int:
        """A switch of profile ``sw``, its ECMP hash seeded as ``hash_seeds`` says."""
        self._place(name, kind, -1, index, pod, 0)
        if self.hash_seeds == "sonic":
            seed, off = SONIC_ROLE_SEEDS[kind]
        elif self.hash_seeds == "random":
            seed, off = int(self.rng.integers(0, 2**32)), 0
        elif self.hash_seeds == "zero":
            seed, off = 0, 0
        else:
            raise TopologyError(f"hash_seeds must be sonic, random or zero, not "
                                f"{self.hash_seeds!r}")
        self._forwarding(sw.buffer_bytes, sw.hash_algorithm, seed, off)
        return len(self.names) - 1

    def _place(self, name: str, kind: int, server: int, index: int, pod: int, ip: int) -> None:
        self.names.append(name)
        self.kind.append(kind)
        self.server.append(server)
        self.index.append(index)
        self.pod.append(pod)
        self.ip.append(ip)

    def _forwarding(self, buffer_bytes: int, algorithm: str, seed: int, offset: int) -> None:
        self.buffer.append(buffer_bytes)
        self.halgo.append(algorithm)
        self.hseed.append(seed)
        self.hoff.append(offset)

    def duplex(self, a, b, bps, delay_ns, kind):
        self.links.append((a, b, bps, delay_ns, kind))
        self.links.append((b, a, bps, delay_ns, kind))

    def add_server(self, name: str, profile: ServerProfile, pool: str) -> Server:
        s = len(self.servers)
        hub = self.node(f"{name}/hub", HUB, server=s)
        accels, nics = [], []
        for i in range(profile.n_accel):
            accels.append(self.node(f"{name}/acc{i}", ACCEL, server=s, index=i))
        for j in range(profile.n_nics):
            # One /24 per server: 10.<s//256>.<s%256>.<nic+1> (deterministic, unique).
            ip = (10 << 24) | ((s // 256) << 16) | ((s % 256) << 8) | (j + 1)
            nics.append(self.node(f"{name}/nic{j}", NIC, server=s, index=j, ip=ip))
        for i, a in enumerate(accels):
            self.duplex(a, hub, profile.intra_bps, profile.intra_delay_ns, LINK_INTRA)
            for j in profile.nics_of_accel(i):
                self.duplex(a, nics[j], profile.pcie_bps, profile.intra_delay_ns, LINK_INTRA)
        srv = Server(name, profile, pool, tuple(accels), tuple(nics), hub)
        self.servers.append(srv)
        return srv

    def build(self, meta: dict) -> Fabric:
        links = np.array(self.links, dtype=object) if self.links else np.zeros((0, 5))
        return Fabric(
            name=self.name,
            node_names=tuple(self.names),
            node_kind=np.array(self.kind, dtype=np.int8),
            node_server=np.array(self.server, dtype=np.int32),
            node_index=np.array(self.index, dtype=np.int32),
            node_pod=np.array(self.pod, dtype=np.int32),
            node_ip=np.array(self.ip, dtype=np.uint32),
            node_buffer_bytes=np.array(self.buffer, dtype=np.int64),
            node_hash_algorithm=tuple(self.halgo),
            node_hash_seed=np.array(self.hseed, dtype=np.int64),
            node_hash_offset=np.array(self.hoff, dtype=np.int8),
            link_src=links[:, 0].astype(np.int32),
            link_dst=links[:, 1].astype(np.int32),
            link_capacity_bps=links[:, 2].astype(np.float64),
            link_delay_ns=links[:, 3].astype(np.int64),
            link_kind=links[:, 4].astype(np.int8),
            servers=tuple(self.servers),
            meta=meta,
        )


def _expand_groups(groups: list[ServerGroup]) -> list[tuple[str, ServerProfile, str]]:
    out = []
    for g in groups:
        if g.count < 0:
            raise TopologyError(f"server count of pool {g.pool!r} must be >= 0")
        prefix = g.prefix or g.pool
        names = g.names or [f"{prefix}-{i}" for i in range(g.count)]
        out += [(n, g.profile, g.pool) for n in names]
    if not out:
        raise TopologyError("a fabric needs at least one server")
    return out


def _place(groups, servers_per_leaf: int, separate_pools: bool,
           placement: str = "packed") -> list[list[int]]:
    """Server indices per leaf (or per rail group); pools start on a fresh leaf.

    ``packed`` fills leaves in server order; ``scattered`` deals each pool's servers
    round-robin over the leaves that pool needs (consecutive servers on different leaves, so
    rings cross the spines at every hop).
    """
    if servers_per_leaf < 1:
        raise TopologyError("servers_per_leaf must be >= 1")
    if placement not in ("packed", "scattered"):
        raise TopologyError(f"placement must be packed or scattered, not {placement!r}")
    slots: list[list[int]] = []
    s = 0
    for g in groups:
        fresh = separate_pools or not slots or len(slots[-1]) == servers_per_leaf
        if placement == "scattered":
            n = -(-g.count // servers_per_leaf)
            new = [[] for _ in range(n)]
            for i in range(g.count):
                new[i % n].append(s + i)
            slots += new
        else:
            for i in range(g.count):
                if not slots or len(slots[-1]) == servers_per_leaf or (fresh and i == 0):
                    slots.append([])
                slots[-1].append(s + i)
        s += g.count
    return slots


@dataclass(frozen=True)
class BuildOptions:
    """What a builder takes besides the fabric's shape.

    Attributes
    ----------
    name : str, optional — the fabric's name (default: the builder's, e.g. ``fat-tree``).
    seed : int — seed of random hash seeds (``hash_seeds="random"``).
    hash_seeds : {"sonic", "random", "zero"} — per-switch ECMP seed policy.
    host_delay_ns, fabric_delay_ns : int — propagation delay of host and fabric links.
    placement : {"packed", "scattered"} — how servers fill the leaves.
    """

    name: str | None = None
    seed: int = 0
    hash_seeds: str = "sonic"
    host_delay_ns: int = 500
    fabric_delay_ns: int = 500
    placement: str = "packed"


@dataclass(frozen=True)
class LeafSpineSpec:
    """The shape of a :func:`leaf_spine` and its switches.

    Attributes
    ----------
    servers_per_leaf : int — servers under one leaf (or, rail-optimized, under one rail group).
    n_spines : int — spine switches; every leaf has ``links_per_spine`` uplinks to each.
    oversub : float — leaf downlink / uplink capacity ratio (1.0 = non-blocking). Each leaf's
        uplink capacity is its NIC capacity divided by ``oversub``, spread evenly over its
        uplinks, so heterogeneous pools keep the same ratio.
    links_per_spine : int — parallel cables from every leaf to each spine.
    rail_optimized : bool — NIC ``i`` of every server in a group connects to rail leaf ``i``
        of that group (NVIDIA rail-optimized design, domain-facts §8.2).
    separate_pools : bool — each pool starts on a fresh leaf (pools under their own leaves).
    leaf, spine : SwitchProfile or catalog name
    """

    servers_per_leaf: int
    n_spines: int
    oversub: float = 1.0
    links_per_spine: int = 1
    rail_optimized: bool = False
    separate_pools: bool = True
    leaf: SwitchProfile | str = "tomahawk5-128x400"
    spine: SwitchProfile | str = "tomahawk5-128x400"


def leaf_spine(groups: list[ServerGroup], spec: LeafSpineSpec,
               options: BuildOptions | None = None) -> Fabric:
    """Two-tier leaf-spine (folded Clos) of ``spec``'s shape; ``groups`` are the server
    pools, placed in order (``options.placement``).

    Raises
    ------
    TopologyError — when ports do not fit a switch radix or counts are invalid.
    """
    t = spec
    o = options or BuildOptions()
    if t.n_spines < 1 or t.links_per_spine < 1:
        raise TopologyError("n_spines and links_per_spine must be >= 1")
    if t.oversub <= 0:
        raise TopologyError("oversub must be positive")
    leaf_p, spine_p = (switch_profile(x) if isinstance(x, str) else x for x in (t.leaf, t.spine))
    b = _Builder(o.name or "leaf-spine", o.seed, o.hash_seeds, o.host_delay_ns,
                 o.fabric_delay_ns)
    servers = [b.add_server(n, p, pool) for n, p, pool in _expand_groups(groups)]
    slots = _place(groups, t.servers_per_leaf, t.separate_pools, o.placement)
    spines = [b.switch(f"spine{i}", SPINE, spine_p, index=i) for i in range(t.n_spines)]
    n_leaves = 0
    for slot in slots:
        n_leaves += _leaf_group(b, [servers[s] for s in slot], spines, t, leaf_p, n_leaves)
    if n_leaves * t.links_per_spine > spine_p.radix:
        raise TopologyError(f"{n_leaves} leaves x {t.links_per_spine} links exceed spine "
                            f"radix {spine_p.radix} of {spine_p.name}")
    return b.build({"builder": "leaf_spine", "leaves": n_leaves, "spines": t.n_spines,
                    "oversub": t.oversub, "rail_optimized": t.rail_optimized})


def _leaf_group(b: _Builder, slot: list[Server], spines: list[int], t: LeafSpineSpec,
                leaf_p: SwitchProfile, first: int) -> int:
    """The leaves of one slot of :func:`leaf_spine` (one, or one per rail), numbered from
    ``first``, cabled to their servers and to every spine; returns how many."""
    rails = slot[0].profile.n_nics if t.rail_optimized else 1
    if t.rail_optimized and len({srv.profile.n_nics for srv in slot}) > 1:
        raise TopologyError("rail-optimized leaves need servers with equal NIC counts")
    leaves = [b.switch(f"leaf{first + r}", LEAF, leaf_p, index=first + r)
              for r in range(rails)]
    down_bps = np.zeros(rails)
    down_ports = np.zeros(rails, dtype=int)
    for srv in slot:
        for j, nic in enumerate(srv.nics):
            r = j if t.rail_optimized else 0
            b.duplex(nic, leaves[r], srv.profile.nic_bps, b.host_delay_ns, LINK_HOST)
            down_bps[r] += srv.profile.nic_bps
            down_ports[r] += 1
    n_up = t.n_spines * t.links_per_spine
    for r, lf in enumerate(leaves):
        if down_ports[r] + n_up > leaf_p.radix:
            raise TopologyError(
                f"leaf {b.names[lf]} needs {down_ports[r]} server ports + {n_up} uplinks "
                f"> radix {leaf_p.radix} of {leaf_p.name}; lower servers_per_leaf or spines")
        up_bps = down_bps[r] / t.oversub / n_up
        for sp in spines:
            for _ in range(t.links_per_spine):
                b.duplex(lf, sp, up_bps, b.fabric_delay_ns, LINK_FABRIC)
    return rails


def rail_optimized(groups: list[ServerGroup], spec: LeafSpineSpec,
                   options: BuildOptions | None = None) -> Fabric:
    """Rail-optimized leaf-spine: NIC ``i`` of every server on rail leaf ``i``."""
    o = options or BuildOptions()
    return leaf_spine(groups, replace(spec, rail_optimized=True),
                      replace(o, name=o.name or "rail-optimized"))


@dataclass(frozen=True)
class FatTreeSpec:
    """The shape of a :func:`fat_tree` (counts are per plane) and its switches.

    Attributes
    ----------
    pods, leaves_per_pod, aggs_per_pod, n_cores : int
    servers_per_leaf : int — servers under one leaf (rail-optimized: one rail group).
    oversub, core_oversub : float — down : up capacity at the leaf and the aggregation.
    rail_optimized : bool
    planes : int — independent network planes; NIC ``j`` sits in plane ``j % planes``.
    links_per_core : int — parallel cables from an aggregation switch to each of its cores.
    leaf, agg, core : SwitchProfile or catalog name
    """

    pods: int
    leaves_per_pod: int
    aggs_per_pod: int
    n_cores: int
    servers_per_leaf: int
    oversub: float = 1.0
    core_oversub: float = 1.0
    rail_optimized: bool = False
    planes: int = 1
    links_per_core: int = 1
    leaf: SwitchProfile | str = "tomahawk5-128x400"
    agg: SwitchProfile | str = "tomahawk5-128x400"
    core: SwitchProfile | str = "tomahawk5-128x400"


def fat_tree(groups: list[ServerGroup], spec: FatTreeSpec,
             options: BuildOptions | None = None) -> Fabric:
    """Three-tier fat-tree with pods (leaf -> aggregation -> core), optionally rail-optimized
    and split into independent planes.

    Every leaf connects to every aggregation switch of its pod; aggregation switch ``j`` of
    every pod connects to the core plane ``j`` (cores ``j*c .. (j+1)*c-1`` with
    ``c = n_cores / aggs_per_pod``) by ``links_per_core`` parallel cables to each, as in the
    k-ary fat-tree (Al-Fares et al., SIGCOMM 2008). Servers fill leaves pod by pod; with
    ``rail_optimized`` a leaf slot is a rail group of one leaf per NIC of a plane (NVIDIA's
    rail-optimized SuperPOD, domain-facts §8.2). With ``planes`` > 1 NIC ``j`` of every
    server sits in network plane ``j % planes``, and each plane is a fat-tree of its own
    (``pods``, ``leaves_per_pod``, ``aggs_per_pod`` and ``n_cores`` count one plane), as in
    Alibaba HPN's dual-plane design (two ports of a NIC on two planes; Qian et al.,
    SIGCOMM 2024). ``oversub`` applies at the leaf, ``core_oversub`` at the aggregation.

    Raises
    ------
    TopologyError — when counts are invalid or ports do not fit a switch radix.
    """
    t = spec
    o = options or BuildOptions()
    _check_tree_counts(t)
    leaf_p, agg_p, core_p = (switch_profile(x) if isinstance(x, str) else x
                             for x in (t.leaf, t.agg, t.core))
    b = _Builder(o.name or "fat-tree", o.seed, o.hash_seeds, o.host_delay_ns,
                 o.fabric_delay_ns)
    servers = [b.add_server(n, p, pool) for n, p, pool in _expand_groups(groups)]
    nics = {s.profile.n_nics for s in servers}
    if t.planes > 1 and any(n % t.planes for n in nics):
        raise TopologyError(f"{t.planes} planes need NIC counts that are multiples of "
                            f"{t.planes} (servers have {sorted(nics)})")
    if t.rail_optimized and len(nics) > 1:
        raise TopologyError("rail-optimized fabrics need servers with equal NIC counts")
    slots = _place(groups, t.servers_per_leaf, separate_pools=False, placement=o.placement)
    rails = servers[0].profile.n_nics // t.planes if t.rail_optimized else 1
    leaves_needed = len(slots) * rails
    if leaves_needed > t.pods * t.leaves_per_pod:
        raise TopologyError(f"{len(servers)} servers need {leaves_needed} leaves per plane "
                            f"but the fabric has {t.pods} pods x {t.leaves_per_pod} leaves")
    _check_tree_radix(t, agg_p, core_p)
    shape = _TreeShape(t.pods, t.leaves_per_pod, t.aggs_per_pod, t.n_cores, t.links_per_core,
                       t.oversub, t.core_oversub)
    for plane in range(t.planes):
        _tree_plane(b, servers, slots, shape, _PlaneSpec(plane, t.planes, rails, leaf_p, agg_p,
                                                           core_p))
    return b.build({"builder": "fat_tree", "pods": t.pods, "leaves": t.pods * t.leaves_per_pod *
                    t.planes, "aggs": t.pods * t.aggs_per_pod * t.planes,
                    "cores": t.n_cores * t.planes, "oversub": t.oversub,
                    "rail_optimized": t.rail_optimized, "planes": t.planes})


def _check_tree_counts(t: FatTreeSpec) -> None:
    if min(t.pods, t.leaves_per_pod, t.aggs_per_pod, t.n_cores, t.servers_per_leaf, t.planes,
           t.links_per_core) < 1:
        raise TopologyError("pods, leaves_per_pod, aggs_per_pod, n_cores, servers_per_leaf, "
                            "planes, links_per_core must be >= 1")
    if t.n_cores % t.aggs_per_pod:
        raise TopologyError(f"n_cores ({t.n_cores}) must be a multiple of aggs_per_pod "
                            f"({t.aggs_per_pod}) so every aggregation switch has a core plane")


def _check_tree_radix(t: FatTreeSpec, agg_p: SwitchProfile, core_p: SwitchProfile) -> None:
    if t.leaves_per_pod + t.n_cores // t.aggs_per_pod * t.links_per_core > agg_p.radix:
        raise TopologyError(f"aggregation switch needs {t.leaves_per_pod} + "
                            f"{t.n_cores // t.aggs_per_pod * t.links_per_core} ports > radix "
                            f"{agg_p.radix}")
    if t.pods * t.links_per_core > core_p.radix:
        raise TopologyError(f"{t.pods} pods x {t.links_per_core} links exceed core radix "
                            f"{core_p.radix}")


@dataclass(frozen=True)
class _TreeShape:
    pods: int
    leaves_per_pod: int
    aggs_per_pod: int
    n_cores: int
    links_per_core: int
    oversub: float
    core_oversub: float


@dataclass(frozen=True)
class _PlaneSpec:
    plane: int
    planes: int
    rails: int
    leaf: SwitchProfile
    agg: SwitchProfile
    core: SwitchProfile

    def name(self, base: str) -> str:
        """Node names of plane 0 of a one-plane fabric stay as they always were."""
        return base if self.planes == 1 else f"p{self.plane}-{base}"


def _tree_plane(b: _Builder, servers: list[Server], slots: list[list[int]], t: _TreeShape,
                ps: _PlaneSpec) -> None:
    """Switches and cables of one plane of :func:`fat_tree`."""
    cores = [b.switch(ps.name(f"core{i}"), CORE, ps.core, index=ps.plane * t.n_cores + i)
             for i in range(t.n_cores)]
    per_plane = t.n_cores // t.aggs_per_pod
    leaf_ids = []
    agg_ids = []
    for p in range(t.pods):
        agg_ids.append([b.switch(ps.name(f"agg{p}-{j}"), SPINE, ps.agg,
                                 index=ps.plane * t.aggs_per_pod + j, pod=p)
                        for j in range(t.aggs_per_pod)])
        leaf_ids += [b.switch(ps.name(f"leaf{p}-{i}"), LEAF, ps.leaf, index=i, pod=p)
                     for i in range(t.leaves_per_pod)]
    leaf_down = np.zeros(len(leaf_ids))
    leaf_ports = np.zeros(len(leaf_ids), dtype=int)
    for k, slot in enumerate(slots):
        for s in slot:
            srv = servers[s]
            for r, j in enumerate(range(ps.plane, srv.profile.n_nics, ps.planes)):
                li = k * ps.rails + (r if ps.rails > 1 else 0)
                b.duplex(srv.nics[j], leaf_ids[li], srv.profile.nic_bps, b.host_delay_ns,
                         LINK_HOST)
                leaf_down[li] += srv.profile.nic_bps
                leaf_ports[li] += 1
    # Uplink capacity follows the largest leaf so that empty leaves still have links.
    up_bps = max(leaf_down.max(), 1.0) / t.oversub / t.aggs_per_pod
    for li, lf in enumerate(leaf_ids):
        if leaf_ports[li] + t.aggs_per_pod > ps.leaf.radix:
            raise TopologyError(f"leaf {b.names[lf]} needs {leaf_ports[li]} + "
                                f"{t.aggs_per_pod} ports > radix {ps.leaf.radix}")
        for a in agg_ids[li // t.leaves_per_pod]:
            b.duplex(lf, a, up_bps, b.fabric_delay_ns, LINK_FABRIC)
    core_bps = up_bps * t.leaves_per_pod / t.core_oversub / (per_plane * t.links_per_core)
    for p in range(t.pods):
        for j, a in enumerate(agg_ids[p]):
            for c in cores[j * per_plane:(j + 1) * per_plane]:
                for _ in range(t.links_per_core):
                    b.duplex(a, c, core_bps, b.fabric_delay_ns, LINK_FABRIC)


#: Switch profile (catalog name) that :func:`fat_tree_for` builds each radix with.
RADIX_SWITCH = {64: "tomahawk4-64x400", 128: "tomahawk5-128x400", 256: "tomahawk5-256x200"}


@dataclass(frozen=True)
class FatTreeSize:
    """The arguments of :func:`fat_tree` that :func:`size_fat_tree` chose."""

    pods: int
    leaves_per_pod: int
    aggs_per_pod: int
    n_cores: int
    links_per_core: int
    servers_per_leaf: int
    oversub: float
    core_oversub: float
    rail_optimized: bool
    planes: int

    def kwargs(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _split_ports(radix: int, oversub: float) -> tuple[int, int]:
    """(down, up) ports of a switch of ``radix`` ports at ``down : up = oversub``."""
    up = min(radix - 1, max(1, round(radix / (1 + oversub))))
    return radix - up, up


@dataclass(frozen=True)
class FatTreeSizing:
    """What :func:`size_fat_tree` sizes a fat-tree for.

    Attributes
    ----------
    radix : int — ports per switch (every tier).
    oversub, core_oversub : float — down : up ports at the leaf and the aggregation.
    rail_optimized : bool
    planes : int — independent network planes.
    bundle_cores : bool — fewer cores, each with parallel cables from every pod.
    """

    radix: int = 128
    oversub: float = 1.0
    core_oversub: float = 1.0
    rail_optimized: bool = False
    planes: int = 1
    bundle_cores: bool = False


def size_fat_tree(n_servers: int, nics_per_server: int, sizing: FatTreeSizing) -> FatTreeSize:
    """The smallest 3-tier fat-tree of ``sizing.radix``-port switches that holds
    ``n_servers``.

    Per plane, a leaf splits its ports ``oversub : 1`` into server ports and one uplink to
    each aggregation switch of its pod; an aggregation switch splits its ports
    ``core_oversub : 1`` into leaves and core cables; pods are filled evenly and every core
    takes one cable from one aggregation switch of each pod, as in Al-Fares et al.'s k-ary
    fat-tree (``k^3/4`` NIC ports at most without oversubscription, domain-facts §8.2);
    with fewer than k pods the cores' other ports stay empty. ``bundle_cores`` builds fewer
    cores instead, each taking ``links_per_core`` parallel cables from every pod, as many as
    its radix allows; the extra ECMP choice among those cables leaves too few RoCE source
    ports to realise every planned path (BENCHMARKS.md, issue 26: 98.5 % of 131,072 QPs
    against 100 % with single cables).

    Raises
    ------
    TopologyError — when ``radix`` cannot hold the servers (more pods than a core has ports,
        or a leaf with fewer server ports than a server has NICs).
    """
    radix, oversub, core_oversub = sizing.radix, sizing.oversub, sizing.core_oversub
    rail_optimized, planes = sizing.rail_optimized, sizing.planes
    if min(n_servers, nics_per_server, radix, planes) < 1 or nics_per_server % planes:
        raise TopologyError(f"size_fat_tree needs positive counts and NICs per server "
                            f"({nics_per_server}) that are a multiple of planes ({planes})")
    if oversub <= 0 or core_oversub <= 0:
        raise TopologyError("oversub and core_oversub must be positive")
    nics = nics_per_server // planes
    down, up = _split_ports(radix, oversub)
    rails = nics if rail_optimized else 1
    per_leaf = down if rail_optimized else down // nics
    if per_leaf < 1:
        raise TopologyError(f"a radix-{radix} leaf at {oversub}:1 has {down} server ports, "
                            f"fewer than a server's {nics} NICs")
    leaves = -(-n_servers // per_leaf) * rails
    most = _split_ports(radix, core_oversub)[0] // rails * rails
    pods = -(-leaves // max(most, 1))
    if most < 1 or pods > radix:
        cap = radix * most // rails * per_leaf
        raise TopologyError(f"{n_servers} servers need {pods} pods of {most} leaves, but a "
                            f"radix-{radix} core reaches at most {radix} pods ({cap} servers "
                            f"at {oversub}:1 / {core_oversub}:1); raise the radix or the "
                            f"oversubscription")
    per_pod = -(-leaves // pods // rails) * rails
    core_up = min(radix - per_pod, max(1, round(per_pod / core_oversub)))
    links = max(d for d in range(1, core_up + 1) if core_up % d == 0 and pods * d <= radix
                and (sizing.bundle_cores or d == 1))
    return FatTreeSize(pods, per_pod, up, up * (core_up // links), links, per_leaf, oversub,
                       core_oversub, rail_optimized, planes)


def fat_tree_for(groups: list[ServerGroup], sizing: FatTreeSizing | None = None,
                 options: BuildOptions | None = None) -> Fabric:
    """:func:`fat_tree` of ``sizing.radix``-port switches (:data:`RADIX_SWITCH`) sized by
    :func:`size_fat_tree` for ``groups`` (all servers with one NIC count), built with
    ``options`` (placement, hash seeds, delays, name)."""
    sizing = sizing or FatTreeSizing()
    if sizing.radix not in RADIX_SWITCH:
        raise TopologyError(f"radix must be one of {sorted(RADIX_SWITCH)}, not {sizing.radix}")
    nics = {g.profile.n_nics for g in groups}
    if len(nics) != 1:
        raise TopologyError("fat_tree_for needs servers with one NIC count")
    size = size_fat_tree(sum(g.count for g in groups), nics.pop(), sizing)
    sw = RADIX_SWITCH[sizing.radix]
    return fat_tree(groups, FatTreeSpec(**size.kwargs(), leaf=sw, agg=sw, core=sw), options)


def star(groups: list[ServerGroup], *, switch: SwitchProfile | str = "tomahawk5-128x400",
         host_delay_ns: int = 500, name: str = "star", seed: int = 0) -> Fabric:
    """Every NIC on one switch: the non-blocking reference fabric."""
    sw_p = switch_profile(switch) if isinstance(switch, str) else switch
    b = _Builder(name, seed, "zero", host_delay_ns, host_delay_ns)
    servers = [b.add_server(n, p, pool) for n, p, pool in _expand_groups(groups)]
    sw = b.switch("leaf0", LEAF, sw_p)
    ports = 0
    for srv in servers:
        for nic in srv.nics:
            b.duplex(nic, sw, srv.profile.nic_bps, host_delay_ns, LINK_HOST)
            ports += 1
    if ports > sw_p.radix:
        raise TopologyError(f"{ports} NICs exceed the radix {sw_p.radix} of {sw_p.name}")
    return b.build({"builder": "star"})
