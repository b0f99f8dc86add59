"""Realise a path plan with UDP source ports, and verify it by re-hashing.

For every planned QP: turn its fabric path into the chain of ECMP decisions it implies
(switch, group size, wanted member at each hop), find a source port whose hash picks
exactly those members (:func:`icefabric.control.sport.solve_sports` when the switches'
hash models are known, :func:`~icefabric.control.sport.solve_sports_by_probing` when they
have to be learned with probes), then route the port through the switch models again
(:func:`icefabric.control.hashing.ecmp_paths`) and compare with the plan. The re-hashed
path, not the planned one, is what the simulator runs.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass

import numpy as np

from icefabric.control.sport import (
    HashModelProber,
    PortPathCache,
    ProbeOptions,
    QpChains,
    WantedPaths,
    solve_sports,
    solve_sports_by_probing,
)
from icefabric.csr import CsrRows, csr_from_lists, gather
from icefabric.dataplane.ecmp import HashConfig, Headers, ecmp_hash, select_member
from icefabric.dataplane.roce import ROCE_UDP_DPORT
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing

__all__ = ["QpPaths", "RealizeOptions", "Realization", "csr_split", "decision_chain",
           "inner_csr", "realize_paths", "rehash", "rehash_csr", "same_paths", "walk_csr"]


# Per-fabric caches (fabrics are immutable; entries die with the fabric).
_CFG_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True, eq=False)
class Realization:
    """Source ports of a plan and the re-hash check.

    Attributes
    ----------
    sport : ndarray[int64] (Q,) — ``-1`` where no port realises the planned path.
    paths : sequence of ndarray — re-hashed NIC-to-NIC path of every QP (for ``sport =
        -1`` the path of the fallback port ``fallback_sport``), a :class:`CsrRows`.
    ok : ndarray[bool] (Q,) — re-hashed fabric path equals the planned one.
    mode : {"model", "probe"} — how the ports were found (:class:`RealizeOptions`).
    probes : int, optional — probes sent (probe mode; ``None`` in model mode).
    """

    sport: np.ndarray
    paths: list[np.ndarray]
    ok: np.ndarray
    mode: str = "model"
    probes: int | None = None

    @property
    def solved(self) -> int:
        """QPs for which a port was found."""
        return int((self.sport >= 0).sum())

    @property
    def verified(self) -> int:
        """QPs whose re-hashed path is the planned one."""
        return int(self.ok.sum())


def _member_masks(routing: Routing, groups: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(masks, before)`` of ECMP groups ``groups`` (default: all, cached on the
    routing): ``masks[w, i]`` bits ``64w..64w+63`` of the set of out-ranks
    (:attr:`Fabric.out_rank`) of the members of group ``groups[i]`` and ``before[w, i]``
    the members in words below ``w``. A group's members all leave one switch and are
    ordered by link id (hence by out-rank), so a link's member index is the number of
    member bits below its own: two lookups and a popcount per path hop, where a binary
    search of sorted (group, link) keys cost 0.7 s at 1 M QPs."""
    if groups is None:
        got = getattr(routing, "_ice_member_masks", None)
        if got is None:
            got = routing._ice_member_masks = _member_masks(
                routing, np.arange(len(routing.grp_indptr) - 1))
        return got
    f = routing.fabric
    W = max(int(np.diff(f.out_indptr).max(initial=0)) + 63, 64) // 64
    sizes = routing.grp_indptr[groups + 1] - routing.grp_indptr[groups]
    r = f.out_rank[routing.grp_links[gather(routing.grp_indptr[groups], sizes)]]
    g = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
    masks = np.zeros((W, len(groups)), dtype=np.uint64)
    for w in range(W):
        inw = r // 64 == w  # distinct bits: their sum is their union
        np.add.at(masks[w], g[inw], np.uint64(1) << (r[inw] % 64).astype(np.uint64))
    count = np.bitwise_count(masks)
    return masks, np.cumsum(count, axis=0, dtype=np.int64) - count


def _member_of(routing: Routing, g: np.ndarray, links: np.ndarray) -> np.ndarray:
    """Member index of ``links`` in groups ``g`` (-1 where a link is not a member).

    A few hops (a re-plan's new ports, on the new link state's routing) read the masks of
    their own groups; many read every group's, built once per routing."""
    if getattr(routing, "_ice_member_masks", None) is None and \
            len(g) * 16 < len(routing.grp_indptr):
        groups, g = np.unique(g, return_inverse=True)
        masks, before = _member_masks(routing, groups)
    else:
        masks, before = _member_masks(routing)
    r = routing.fabric.out_rank[links]
    word, bit = r >> 6, (r & 63).astype(np.uint64)
    # the one word holding the link's bit: few temporaries (fresh pages are what a first
    # plan pays most for)
    m = masks[word, g]
    one = np.uint64(1)
    idx = before[word, g] + np.bitwise_count(m & ((one << bit) - one))
    return np.where(((m >> bit) & one).astype(bool), idx, -1)


@dataclass(frozen=True, eq=False)
class _Chain:
    """The ECMP decisions of every hop of every path, one entry per hop: QP ``row``, depth
    ``col``, switch node ``sw``, group size ``n`` and wanted member ``want``; ``Q`` paths
    of at most ``D`` hops (``D >= 1``). int32 throughout: at 1 M QPs the five arrays
    are 2.1 M entries each, and fresh pages are what a first plan pays most for."""

    row: np.ndarray
    col: np.ndarray
    sw: np.ndarray
    n: np.ndarray
    want: np.ndarray
    Q: int
    D: int

    def dense(self, cols: np.ndarray, *columns: tuple[np.ndarray, int]) -> list[np.ndarray]:
        """One ``(Q, len(cols))`` table per ``(values, fill)`` of ``columns``: the entries'
        ``values`` at depths ``cols``, ``fill`` elsewhere (the tables share one index)."""
        at = np.full(self.D, -1, dtype=np.int32)
        at[cols] = np.arange(len(cols))
        slot = at[self.col]
        keep = np.flatnonzero(slot >= 0) if len(cols) < self.D else None
        if keep is not None:
            slot = slot[keep]
        idx = (self.row if keep is None else self.row[keep]).astype(np.int64)
        idx *= len(cols)
        idx += slot
        out = []
        for values, fill in columns:
            t = np.full(self.Q * len(cols), fill, dtype=values.dtype)
            t[idx] = values if keep is None else values[keep]
            out.append(t.reshape(self.Q, len(cols)))
        return out


def _chain(fabric: Fabric, routing: Routing, dst_nic: np.ndarray, paths) -> _Chain:
    """:class:`_Chain` of ``paths``; ValueError when a path leaves the current groups."""
    ptr, flat = _to_csr(paths)
    Q = len(ptr) - 1
    lens = np.diff(ptr)
    D = max(int(lens.max(initial=0)), 1)
    row = np.repeat(np.arange(Q, dtype=np.int32), lens)
    col = np.arange(len(flat), dtype=np.int32)
    col -= ptr[:-1].astype(np.int32)[row]
    dl = routing.leaf_index[fabric.nic_leaf[np.asarray(dst_nic, dtype=np.int64)]]
    sw = fabric.link_src[flat]
    at = routing.sw_index[sw]
    g = np.maximum(at, 0)
    g *= len(routing.leaves)
    g += dl[row]
    g = routing.grp_id[g]
    i = _member_of(routing, g, flat)
    if np.any((i < 0) | (at < 0)):
        bad = int(flat[np.flatnonzero((i < 0) | (at < 0))[0]])
        raise ValueError(f"planned link {fabric.link_names()[bad]} is not an ECMP member "
                         "toward the destination (failed or not on a shortest path)")
    del at
    cont = row[1:] == row[:-1]
    if np.any(fabric.link_dst[flat[:-1]][cont] != sw[1:][cont]):
        raise ValueError("a planned path is not a connected link sequence")
    del cont
    n = np.diff(routing.grp_indptr).astype(np.int32)[g]
    return _Chain(row, col, sw.astype(np.int32), n, i.astype(np.int32), Q, D)


def decision_chain(fabric: Fabric, routing: Routing, dst_nic: np.ndarray,
                   paths: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(switch node, group size, wanted member) at every hop of every fabric path.

    Returns three int64 arrays of shape (Q, D) (D = longest path, at least 1); padding
    has switch ``-1``. Raises ValueError when a path leaves the current ECMP groups.
    """
    c = _chain(fabric, routing, dst_nic, paths)
    tables = c.dense(np.arange(c.D), (c.sw, -1), (c.n, 1), (c.want, 0))
    return tuple(t.astype(np.int64) for t in tables)


def walk_csr(fabric: Fabric, routing: Routing, src_nic, dst_nic, choose
             ) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`Routing.walk_csr` (kept for callers that pass the fabric)."""
    return routing.walk_csr(src_nic, dst_nic, choose)


def csr_split(ptr: np.ndarray, flat: np.ndarray) -> CsrRows:
    """CSR -> sequence of arrays (views, sliced on access)."""
    return CsrRows(ptr, flat)


def inner_csr(ptr: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the first and last link of every path (NIC-to-NIC -> switch-to-switch)."""
    keep = np.ones(len(flat), bool)
    keep[ptr[:-1]] = False
    keep[ptr[1:] - 1] = False
    return ptr - 2 * np.arange(len(ptr)), flat[keep]


def dedup_configs(fabric: Fabric, configs: dict[int, HashConfig]
                  ) -> tuple[list[HashConfig], np.ndarray]:
    """Distinct hash models (ignoring the switch name) and, per node, the index of its
    model (-1 for non-switches). Fabrics have a handful of models (one per role under
    SONiC seeds), so hashing per model instead of per switch saves most of the calls."""
    cached = _CFG_CACHE.get(fabric)
    if cached is not None and cached[0] is configs:
        return cached[1]
    # keyed by the fields but the name: a copy of each of 8 k configs (dataclasses.replace
    # and its checks) cost ~0.2 s of a first plan at 131,072 GPUs
    names = [x.name for x in dataclasses.fields(HashConfig) if x.name != "name"]
    uniq: dict[tuple, int] = {}
    cfg_list: list[HashConfig] = []
    node_cfg = np.full(fabric.n_nodes, -1, dtype=np.int32)
    for s, c in configs.items():
        key = tuple(getattr(c, n) for n in names)
        i = uniq.get(key)
        if i is None:
            i = uniq[key] = len(cfg_list)
            cfg_list.append(dataclasses.replace(c, name=""))
        node_cfg[s] = i
    _CFG_CACHE[fabric] = (configs, (cfg_list, node_cfg))
    return cfg_list, node_cfg


def _model_chooser(cfg_list, node_cfg, src_ip, dst_ip, sport):
    """Like :func:`icefabric.control.hashing.hash_chooser`, grouped by hash model."""
    def choose(step, idx, switches, dst_leaves, n_members):
        member = np.zeros(len(idx), dtype=np.int64)
        ci = np.where(n_members > 1, node_cfg[switches], -1)  # one member: no hash
        for c in np.unique(ci[ci >= 0]).tolist():
            m = ci == c
            cfg = cfg_list[c]
            rows = idx[m]
            h = ecmp_hash(cfg, Headers(src_ip[rows], dst_ip[rows], sport[rows], ROCE_UDP_DPORT))
            member[m] = select_member(cfg, h, n_members[m])
        return member
    return choose


def rehash_csr(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig], src_nic,
               dst_nic, sport) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the NIC-to-NIC paths the switches' hash models give these ports (the same
    models and member selection as :func:`icefabric.control.hashing.ecmp_paths`)."""
    sn = np.asarray(src_nic, dtype=np.int64)
    dn = np.asarray(dst_nic, dtype=np.int64)
    ip = fabric.node_ip.astype(np.uint32)
    cfg_list, node_cfg = dedup_configs(fabric, configs)
    choose = _model_chooser(cfg_list, node_cfg, ip[sn], ip[dn], np.asarray(sport, np.int64))
    return walk_csr(fabric, routing, sn, dn, choose)


def rehash(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig], src_nic,
           dst_nic, sport) -> list[np.ndarray]:
    """NIC-to-NIC paths the switches' hash models give these ports."""
    return csr_split(*rehash_csr(fabric, routing, configs, src_nic, dst_nic, sport))


def _to_csr(paths) -> tuple[np.ndarray, np.ndarray]:
    return paths if isinstance(paths, tuple) else csr_from_lists(paths)


def same_paths(a, b) -> np.ndarray:
    """Element-wise equality of two path lists (or CSR ``(indptr, links)`` tuples)."""
    pa, fa = _to_csr(a)
    pb, fb = _to_csr(b)
    la, lb = np.diff(pa), np.diff(pb)
    eq = la == lb
    if len(pa) > 1 and pa[0] == pb[0] == 0 and eq.all():
        # the same lengths (hence the same indptr): one pass over the links, no gathers
        # (a plan's rows are 2 M links at 1 M QPs)
        bad = np.flatnonzero(fa[:pa[-1]] != fb[:pb[-1]])
        eq[np.searchsorted(pa, bad, side="right") - 1] = False
        return eq
    rows = np.flatnonzero(eq)
    n = la[rows]
    rep = np.repeat(rows, n)
    within = np.arange(len(rep)) - np.repeat(np.cumsum(n) - n, n)
    bad = fa[pa[rep] + within] != fb[pb[rep] + within]
    eq[np.unique(rep[bad])] = False
    return eq


def _prober(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig], loss_prob,
            seed):
    sw_list = fabric.switches.tolist()
    cfg_list = [configs[s] for s in sw_list]
    ip_nic = {int(fabric.node_ip[n]): n for n in np.flatnonzero(fabric.node_ip)}

    def next_decision(src_ip, dst_ip, members):
        cur = int(fabric.nic_leaf[ip_nic[src_ip]])
        dst = int(fabric.nic_leaf[ip_nic[dst_ip]])
        for m in members:
            cur = int(fabric.link_dst[routing.group(cur, dst)[m]])
        if cur == dst:
            return None
        return int(routing.sw_index[cur]), len(routing.group(cur, dst))

    return HashModelProber(cfg_list, next_decision, loss_prob=loss_prob, seed=seed)


def _solver_tables(chain: _Chain, cfg_list: list[HashConfig], node_cfg: np.ndarray
                   ) -> list[np.ndarray]:
    """:func:`solve_sports`'s ``(Q, D')`` hash-model, group-size and wanted-member tables
    of a chain. Depths where no QP has a choice (downward hops: one member) change no
    port: they are left out (the tables are never built for every depth)."""
    cfg = node_cfg[chain.sw]
    spray = np.array([c.is_spray for c in cfg_list] + [False])[cfg]
    cols = np.zeros(chain.D, dtype=bool)
    cols[chain.col[(cfg >= 0) & ((chain.n > 1) | spray)]] = True
    cols[0] |= not cols.any()
    return chain.dense(np.flatnonzero(cols), (cfg, -1), (chain.n, 1), (chain.want, 0))


@dataclass(frozen=True, eq=False)
class QpPaths:
    """QPs to realise: their NIC node ids and planned fabric paths.

    Attributes
    ----------
    src_nic, dst_nic : array (Q,) — NIC node ids.
    paths : list of arrays — planned fabric paths (switch-to-switch links).
    """

    src_nic: object
    dst_nic: object
    paths: list[np.ndarray]


@dataclass(frozen=True, eq=False)
class RealizeOptions:
    """How :func:`realize_paths` finds ports.

    Attributes
    ----------
    mode : {"model", "probe"} — invert the known hash models, or learn port -> path maps
        with traceroute-like probes (:class:`~icefabric.control.sport.HashModelProber`).
    exclude : (src_ip, dst_ip, sport) arrays, optional — ports already in use.
    fallback_sport : array (Q,), optional — port used where no port is found (default:
        any free port); such QPs come back with ``ok = False``.
    probe_cache : PortPathCache, optional — learned maps reused across calls (probe mode).
    loss_prob : float — probe loss probability (probe mode).
    seed : int
    """

    mode: str = "model"
    exclude: tuple | None = None
    fallback_sport: object = None
    probe_cache: PortPathCache | None = None
    loss_prob: float = 0.0
    seed: int = 0


def realize_paths(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig],
                  qps: QpPaths, options: RealizeOptions | None = None) -> Realization:
    """Solve a source port per QP for its planned fabric path, then re-hash and compare.

    Parameters
    ----------
    fabric, routing : the fabric and its current link state.
    configs : dict switch node -> HashConfig (see ``fabric_hash_configs``).
    qps : QpPaths — the QPs' NICs and planned paths.
    options : RealizeOptions, optional — mode, ports to avoid, fallback ports, seed.

    Returns
    -------
    Realization
    """
    opts = options or RealizeOptions()
    sn = np.asarray(qps.src_nic, dtype=np.int64)
    dn = np.asarray(qps.dst_nic, dtype=np.int64)
    probes = None
    if opts.mode == "model":
        sport = _model_sports(fabric, routing, configs, QpPaths(sn, dn, qps.paths), opts)
    elif opts.mode == "probe":
        prober = _prober(fabric, routing, configs, opts.loss_prob, opts.seed)
        sport = _probe_sports(fabric, routing, prober, QpPaths(sn, dn, qps.paths), opts)
        probes = int(prober.n_probes)
    else:
        raise ValueError(f"mode must be 'model' or 'probe', not {opts.mode!r}")
    use = sport.copy()
    if opts.fallback_sport is not None:
        use = np.where(use < 0, np.asarray(opts.fallback_sport, dtype=np.int64), use)
    bad = use < 0  # nothing found and no fallback (or a fallback QP that had no port)
    use[bad] = 0xC000 + (np.flatnonzero(bad) % 0x4000)
    gp, gf = rehash_csr(fabric, routing, configs, sn, dn, use)
    ok = same_paths(inner_csr(gp, gf), qps.paths) & (sport >= 0)
    return Realization(sport, csr_split(gp, gf), ok, opts.mode, probes)


def _model_sports(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig],
                  qps: QpPaths, opts: RealizeOptions) -> np.ndarray:
    """Ports found by inverting the switches' hash models (-1: none)."""
    ip = fabric.node_ip
    cfg_list, node_cfg = dedup_configs(fabric, configs)
    # the per-hop chain is dropped once the solver's tables are made (not held
    # through the solver's own peak)
    tables = _solver_tables(_chain(fabric, routing, qps.dst_nic, qps.paths), cfg_list,
                            node_cfg)
    chains = QpChains(ip[qps.src_nic], ip[qps.dst_nic], *tables)
    return solve_sports(cfg_list, chains, exclude=opts.exclude, seed=opts.seed)


def _probe_sports(fabric: Fabric, routing: Routing, prober: HashModelProber, qps: QpPaths,
                  opts: RealizeOptions) -> np.ndarray:
    """Ports picked from port -> path maps learned with ``prober`` (-1: none)."""
    ip = fabric.node_ip
    chain = _chain(fabric, routing, qps.dst_nic, qps.paths)
    sw, want = chain.dense(np.arange(chain.D), (chain.sw, -1), (chain.want, 0))
    wants = [tuple(want[q, sw[q] >= 0].tolist()) for q in range(len(qps.src_nic))]
    cache = opts.probe_cache if opts.probe_cache is not None else PortPathCache()
    wanted = WantedPaths(ip[qps.src_nic].astype(np.int64), ip[qps.dst_nic].astype(np.int64),
                         wants)
    return solve_sports_by_probing(prober, wanted, cache=cache, exclude=opts.exclude,
                                   options=ProbeOptions(seed=opts.seed))
