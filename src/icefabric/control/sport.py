"""UDP source-port solving: pin each RoCEv2 QP to a planned path through ECMP hashing.

ICE realises a path plan through the one knob every RoCEv2 NIC has: the UDP source
port of the QP (GRH flow label at INIT->RTR, ``mlx5dv_modify_qp_udp_sport`` on a live
QP, or HCCL's ``MultiQpSrcPort.cfg``). Two modes:

* **Model mode** (:func:`solve_sports`): the hash model of each switch is known
  (:class:`~icefabric.dataplane.ecmp.HashConfig`); ports are found by inverting the
  hash. CRC/XOR linearity turns hashing many ports of one flow into one XOR per port
  (``hash = base ^ T[sport]``), and for power-of-two ``mod N`` groups only the low
  ``log2 N`` bits matter, so the wanted members of a whole decision chain become one
  integer key looked up in a sorted index of ports.
* **Probing mode** (:func:`learn_port_paths`, :func:`solve_sports_by_probing`): the
  model is unknown; a traceroute-like :class:`Prober` reports the members each probe
  port takes. Ports are learned under a probe budget, lost probes are retried, and a
  cached map is invalidated when a verification probe no longer matches (switch
  reseed). This is how Alibaba HPN/C4 and Crux discover paths by varying the source
  port on commodity switches.

All functions are pure (no I/O); randomness comes from ``seed``.

References
----------
.. [1] Linux ``include/rdma/ib_verbs.h`` (``rdma_flow_label_to_udp_sport``: usable
   ports 0xC000..0xFFFF).
.. [2] OCP SAI ``inc/saiswitch.h`` (hash algorithm, seed, offset = rotate right).
.. [3] Meta FBOSS ``BcmRtag7Module.cpp`` (Broadcom RTAG7 CRC16-CCITT ECMP hash).
.. [4] Huawei CANN HCCL ``HCCL_RDMA_QP_PORT_CONFIG_PATH``, ``MultiQpSrcPort.cfg``
   (``srcIP,dstIP=port0,port1,...``, one port per QP).
.. [5] rdma-core ``providers/mlx5/verbs.c``, ``mlx5dv_modify_qp_udp_sport``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from icefabric.control.errors import ControlError
from icefabric.csr import dense_ids
from icefabric.dataplane.ecmp import (
    HashConfig,
    Headers,
    base_hash,
    ecmp_hash,
    ecmp_select,
    linear_key,
    select_member,
    sport_xor_table,
)
from icefabric.dataplane.roce import ROCE_UDP_DPORT, NicPortLimits

__all__ = [
    "HashModelProber",
    "LearnGoal",
    "PortPathCache",
    "PortPathMap",
    "ProbeOptions",
    "Prober",
    "QpChains",
    "WantedPaths",
    "learn_port_paths",
    "path_members",
    "solve_sports",
    "solve_sports_by_probing",
    "validate_port_paths",
    "verify_sports",
]

_PORT_SPACE = 1 << 16
_MAX_KEY_BITS = 62  # combined index key must fit an int64/uint64 comfortably
_MAX_CHUNK = 4096
#: ECMP decisions a probed path may take (a Clos path takes a few, one per hop up; more
#: means the routing has a loop)
MAX_DECISIONS = 64


# =========================================================================== model mode


@dataclass(frozen=True, eq=False)
class QpChains:
    """The QPs whose source ports are solved or checked: their NIC addresses, the other
    header fields the switches hash, and each one's chain of ECMP decisions.

    Attributes
    ----------
    src_ip, dst_ip : array of uint32, shape (Q,)
        IPv4 addresses of each QP's NICs.
    cfg_index : array of int, shape (Q, D)
        Switch making the decision at depth ``d`` of QP ``q``'s path, an index into the
        ``configs`` the functions take; ``-1`` = none.
    n_members : int or array of int, shape (Q, D)
        ECMP group size of each decision.
    want : array of int, shape (Q, D), optional
        Member index the plan needs at each decision (members in the caller's fixed
        order, the same order :func:`~icefabric.dataplane.ecmp.select_member` uses).
        Solving and verifying need it; :func:`path_members` does not read it.
    dqpn : array of int, optional
        BTH destination QP per QP, for configs that hash ``bth_dqpn``.
    dport, proto : int
        Constant header fields (RoCEv2: 4791, UDP).
    """

    src_ip: object
    dst_ip: object
    cfg_index: object
    n_members: object
    want: object = None
    dqpn: object = None
    dport: int = ROCE_UDP_DPORT
    proto: int = 17


@dataclass(frozen=True)
class _Decisions:
    """Normalised decision arrays (Q QPs x D depths)."""

    sip: np.ndarray  # (Q,) uint64
    dip: np.ndarray  # (Q,) uint64
    cfg: np.ndarray  # (Q, D) signed int, -1 = no decision
    n: np.ndarray  # (Q, D) signed int (read only: may be a broadcast view)
    want: np.ndarray  # (Q, D) signed int (read only)
    dqpn: np.ndarray | None  # (Q,) uint64
    dport: int = ROCE_UDP_DPORT
    proto: int = 17


def _normalise(configs: Sequence[HashConfig], chains: QpChains) -> _Decisions:
    if chains.want is None:
        raise ValueError("QpChains.want is needed to solve or verify ports")
    sip = np.asarray(chains.src_ip).astype(np.uint64).ravel()
    dip = np.asarray(chains.dst_ip).astype(np.uint64).ravel()
    if sip.shape != dip.shape:
        raise ValueError("src_ip and dst_ip must have the same length")
    q = sip.shape[0]
    cfg = _signed(chains.cfg_index)
    if cfg.ndim == 1:
        cfg = cfg[:, None]
    if cfg.shape[0] != q:
        raise ValueError(f"cfg_index has {cfg.shape[0]} rows for {q} QPs")
    n = _per_decision(chains.n_members, cfg.shape)
    w = _per_decision(chains.want, cfg.shape)
    if cfg.size and int(cfg.max(initial=-1)) >= len(configs):
        raise ValueError(f"cfg_index refers to config {int(cfg.max())}, only {len(configs)} given")
    if np.any((cfg >= 0) & (n < 1)):
        raise ValueError("n_members must be >= 1 where a decision exists")
    dq = (None if chains.dqpn is None
          else np.broadcast_to(np.asarray(chains.dqpn).astype(np.uint64), (q,)))
    return _Decisions(sip, dip, cfg, n, w, dq, chains.dport, chains.proto)


def _signed(a: object) -> np.ndarray:
    """``a`` as an array of signed integers, not copied when it is one already (the
    solver's (Q, D) tables come as int32 from :mod:`icefabric.control.realize`)."""
    arr = np.asarray(a)
    return arr if arr.dtype.kind == "i" else arr.astype(np.int64)


def _per_decision(a: object, shape: tuple[int, ...]) -> np.ndarray:
    """Broadcast a scalar, a per-QP vector (when D == 1) or a (Q, D) array to ``shape``
    (a read-only view: nothing writes the decision tables)."""
    arr = _signed(a)
    if arr.ndim == 1 and shape[1] == 1 and arr.shape[0] == shape[0]:
        arr = arr[:, None]
    return np.broadcast_to(arr, shape)


def _is_pow2(x: np.ndarray) -> np.ndarray:
    return (x > 0) & ((x & (x - 1)) == 0)


def _pair_ids(
    sip: np.ndarray, dip: np.ndarray, exclude: tuple[object, object, object] | None
) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids of (sip, dip) pairs, plus sorted ``pair_id * 65536 + port`` exclusion codes."""
    if exclude is None:
        # np.unique's ids of the 64-bit pairs, from each address's rank (a table of the
        # range of addresses) and one sort of the ranks' pairs (1 M QPs: 0.18 s before)
        ranks = [dense_ids(c - c.min(), int(np.ptp(c)) + 1) if c.size else c.astype(np.int64)
                 for c in (sip, dip)]
        width = int(ranks[1].max(initial=0)) + 1
        return (dense_ids(ranks[0] * width + ranks[1],
                          (int(ranks[0].max(initial=0)) + 1) * width),
                np.zeros(0, dtype=np.int64))
    pk = (sip << np.uint64(32)) | dip
    esip = np.asarray(exclude[0]).astype(np.uint64).ravel()
    edip = np.asarray(exclude[1]).astype(np.uint64).ravel()
    eport = np.asarray(exclude[2]).astype(np.int64).ravel()
    epk = (esip << np.uint64(32)) | edip
    uniq, inv = np.unique(np.concatenate([pk, epk]), return_inverse=True)
    pid = inv[: pk.shape[0]].astype(np.int64)
    codes = inv[pk.shape[0]:].astype(np.int64) * _PORT_SPACE + eport
    return pid, np.unique(codes)


def _in_sorted(sorted_codes: np.ndarray, codes: np.ndarray) -> np.ndarray:
    if sorted_codes.size == 0:
        return np.zeros(codes.shape, dtype=bool)
    pos = np.searchsorted(sorted_codes, codes)
    pos = np.minimum(pos, sorted_codes.size - 1)
    return sorted_codes[pos] == codes


def _base_matrix(configs: Sequence[HashConfig], d: _Decisions, usable: np.ndarray,
                 xid_of_cfg: np.ndarray, pid: np.ndarray | None) -> np.ndarray:
    """``base_hash`` of every (QP, depth) with a decision (0 elsewhere); ``pid``: dense
    ids of the QPs' IP pairs, if known.

    Switches that differ only by seed share a linear key; their rows are hashed in one
    call with per-row seeds.
    """
    base = np.zeros(d.cfg.shape, dtype=np.uint32)
    qs, ds = np.nonzero(usable)
    cfgs = d.cfg[qs, ds]
    if pid is not None and d.dqpn is None and len(qs):
        # The hash of port 0 depends on the IP pair and the switch's config only: hash
        # each distinct (pair, config) once (the QPs of a NIC pair share it).
        key = pid[qs] * len(configs) + cfgs
        ids = dense_ids(key, int(key.max()) + 1)
        one = np.zeros(int(ids.max()) + 1, dtype=np.int64)
        one[ids] = np.arange(len(ids))  # any row of a (pair, config) stands for all
        uq, ud = qs[one], ds[one]
        sub = _Decisions(d.sip[uq], d.dip[uq], d.cfg[uq, ud][:, None],
                         d.n[uq, ud][:, None], d.want[uq, ud][:, None], None, d.dport, d.proto)
        base[qs, ds] = _base_matrix(configs, sub, np.ones((len(uq), 1), dtype=bool),
                                    xid_of_cfg, None)[ids, 0]
        return base
    seeds = np.array([c.seed for c in configs], dtype=np.uint64)
    gid = xid_of_cfg[cfgs]
    rep_cfg = {int(x): configs[i] for i, x in reversed(list(enumerate(xid_of_cfg[:-1])))}
    for g in np.unique(gid):
        r = np.flatnonzero(gid == g)
        q = qs[r]
        dq = None if d.dqpn is None else d.dqpn[q]
        base[q, ds[r]] = base_hash(rep_cfg[int(g)],
                                   Headers(d.sip[q], d.dip[q], 0, d.dport, d.proto, dq),
                                   seed=seeds[cfgs[r]])
    return base


def dense_rows(cols: Sequence[np.ndarray]) -> np.ndarray:
    """Dense ids of equal rows of integer columns, in the rows' lexicographic order (that
    of ``np.unique(axis=0)``, faster)."""
    return dense_ids(*_row_keys(cols))


def _row_keys(cols: Sequence[np.ndarray]) -> tuple[np.ndarray, int]:
    """One int64 key per row of integer columns, equal for equal rows and ordered as the
    rows lexicographically, with its span (keys in ``[0, span)``). A column of a narrow
    value range enters the key as ``value - min`` (no sort); a wide one through its dense
    ids; when the key would pass 62 bits it is densified first."""
    ids = np.zeros(cols[0].shape[0], dtype=np.int64)
    if ids.size == 0:
        return ids, 1
    span = 1
    for c in cols:
        lo, hi = int(c.min()), int(c.max())
        if hi - lo < 4 * c.size + 64:
            width, inv = hi - lo + 1, c.astype(np.int64) - lo
        else:
            u, inv = np.unique(c, return_inverse=True)
            width, inv = u.size, inv.ravel()
        if span * width >= 1 << 62:
            ids = dense_ids(ids, span)
            span = int(ids.max(initial=0)) + 1
        ids = ids * width + inv
        span *= width
    return ids, span


def _classify(configs: Sequence[HashConfig], d: _Decisions
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Classify each decision: ``code`` 0 when trivial (N == 1), odd when indexable by the
    hash's low bits (``1 + 2 * (xid * 32 + bits)``), even > 0 for a filter (``2 + 2 *
    cfg``); the QPs no port can serve (``impossible``), the decisions whose base hash is
    needed (``hashed``) and ``xid_of_cfg`` (the linear-key id of each config, -1 past the
    end). A function of its own so that its dozen (Q, D) masks are gone before the
    solver's peak (fresh pages are what a first plan at 1 M QPs pays most for)."""
    active = d.cfg >= 0
    spray = np.array([c.is_spray for c in configs] + [False], dtype=bool)[d.cfg]
    bad = d.want < 0
    bad |= d.want >= d.n
    bad |= spray
    bad &= active
    impossible = bad.any(axis=1)
    del bad
    usable = active & ~spray
    sel_mod = np.array([c.selection == "mod" for c in configs] + [True])[d.cfg]
    tsize = np.array([c.table_size for c in configs] + [1], dtype=np.int32)[d.cfg]
    pow2n = _is_pow2(d.n)
    indexable = usable & pow2n & (sel_mod | (_is_pow2(tsize) & (d.n <= tsize)))
    bits = np.where(indexable, np.bitwise_count(d.n - 1), 0)  # log2 of a power of two
    # The folded key must fit 62 bits; later decisions beyond that become filters.
    if int(bits.max(initial=0)) * bits.shape[1] > _MAX_KEY_BITS:
        over = indexable & (np.cumsum(bits, axis=1) > _MAX_KEY_BITS)
        indexable &= ~over
        bits = np.where(over, 0, bits)
    lin_ids: dict[HashConfig, int] = {}
    xid_of_cfg = np.array(
        [lin_ids.setdefault(linear_key(c), len(lin_ids)) if not c.is_spray else -1
         for c in configs] + [-1], dtype=np.int64)
    xid = xid_of_cfg.astype(np.int32)[d.cfg]
    trivial = usable & (d.n == 1)  # member 0 whatever the hash: nothing to hash
    code = np.where(usable & ~indexable, 2 + 2 * d.cfg, 0)
    code = np.where(indexable, 1 + 2 * (xid * 32 + bits), code)
    code[trivial] = 0
    return (code.astype(np.int32, copy=False), impossible,
            usable & ~trivial & ~impossible[:, None], xid_of_cfg)


def solve_sports(
    configs: Sequence[HashConfig],
    chains: QpChains,
    *,
    limits: NicPortLimits | None = None,
    exclude: tuple[object, object, object] | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Find a UDP source port per QP so that each ECMP decision on its path picks the wanted member.

    Parameters
    ----------
    configs : sequence of HashConfig
        Hash model of each switch (or ECMP group); referenced by ``chains.cfg_index``.
    chains : QpChains
        The QPs: NIC addresses, header fields and the wanted member at each decision.
    limits : NicPortLimits, optional
        Accepted source-port range (default 0xC000..0xFFFF, the flow-label range).
    exclude : (src_ip, dst_ip, sport) arrays, optional
        Ports already used between those NIC pairs; never returned for that pair.
    seed : int
        Candidate ports are tried in a seeded random order: same inputs and seed,
        same ports.

    Returns
    -------
    numpy.ndarray of int64, shape (Q,)
        A port per QP, distinct among QPs of the same ``(src_ip, dst_ip)`` pair and
        from ``exclude``; ``-1`` if no port satisfies the whole chain (e.g. a hash
        polarisation between two tiers makes the combination impossible, the wanted
        member is out of range, a decision is at a spraying switch, or the pair ran
        out of matching ports).

    Notes
    -----
    Per (QP, depth): ``hash(sport) = base ^ T[sport]`` (CRC/XOR linearity, see
    :mod:`icefabric.dataplane.ecmp`). Decisions with a power-of-two ``mod N`` (or
    power-of-two resilient tables with power-of-two N) depend only on the low
    ``log2 N`` bits, so the chain's wanted members fold into one integer key and the
    matching ports are a contiguous slice of a port index sorted by that key (built
    once per chain signature; T does not depend on seed or IPs). Remaining decisions
    (non-power-of-two N) filter candidates from that slice in vectorised batches.
    Cost is about ``O(P log P)`` per distinct chain signature (P = usable ports) plus
    ``O(Q * D)`` hashing, independent of how many switches or IP pairs there are.

    Examples
    --------
    >>> from icefabric.dataplane.ecmp import HashConfig
    >>> cfgs = [HashConfig("crc16_ccitt", seed=1), HashConfig("crc16_ccitt", seed=2, offset=8)]
    >>> qps = QpChains([0x0A000001], [0x0A000102], [[0, 1]], [[4, 8]], want=[[3, 5]])
    >>> bool(verify_sports(cfgs, qps, solve_sports(cfgs, qps))[0])
    True
    """
    d = _normalise(configs, chains)
    out = np.full(d.sip.shape[0], -1, dtype=np.int64)
    if out.size == 0:
        return out
    solver, todo = _new_solver(configs, d, limits or NicPortLimits(), exclude, seed)
    while todo.size:
        _solve_rows(solver, todo, out)
        todo = _release_duplicates(solver, out)
    return out


@dataclass
class _Solver:
    """What every chain signature of one :func:`solve_sports` call reads, and the port
    indexes the signatures share."""

    configs: Sequence[HashConfig]
    d: _Decisions
    code: np.ndarray  # (Q, D) class of each decision (see _classify)
    base: np.ndarray  # (Q, D) uint32 hash of port 0 at each hashed decision
    pid: np.ndarray  # (Q,) dense ids of the QPs' NIC pairs
    excl: np.ndarray  # sorted ``pair_id * 65536 + port`` codes never to hand out
    tables: dict[int, np.ndarray]  # config -> its source-port XOR table
    xtables: dict[int, np.ndarray]  # linear-key id -> the XOR table of its configs
    order0: np.ndarray  # usable ports in the seeded order candidates are tried
    index_cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def _new_solver(configs: Sequence[HashConfig], d: _Decisions, limits: NicPortLimits,
                exclude: tuple[object, object, object] | None, seed: int
                ) -> tuple[_Solver, np.ndarray]:
    """The solver's state and the QPs it has to solve (those some port may serve)."""
    pid, excl = _pair_ids(d.sip, d.dip, exclude)
    order0 = np.random.default_rng(seed).permutation(limits.ports())
    code, impossible, hashed, xid_of_cfg = _classify(configs, d)
    base = _base_matrix(configs, d, hashed, xid_of_cfg, pid)
    del hashed
    tables = {i: sport_xor_table(c) for i, c in enumerate(configs) if not c.is_spray}
    xtables: dict[int, np.ndarray] = {}
    for i, table in tables.items():
        xtables.setdefault(int(xid_of_cfg[i]), table)
    solver = _Solver(configs, d, code, base, pid, excl, tables, xtables, order0)
    return solver, np.flatnonzero(~impossible)


def _release_duplicates(s: _Solver, out: np.ndarray) -> np.ndarray:
    """Distinct ports per NIC pair across chain signatures: keep the first QP of each
    duplicate, exclude every kept port from then on, unassign the others and return
    them (to be solved again)."""
    solved = np.flatnonzero(out >= 0)
    codes = s.pid[solved] * _PORT_SPACE + out[solved]
    _, first = np.unique(codes, return_index=True)
    losers = np.setdiff1d(solved, solved[first], assume_unique=True)
    if losers.size:
        keep = np.setdiff1d(solved, losers, assume_unique=True)
        s.excl = np.union1d(s.excl, s.pid[keep] * _PORT_SPACE + out[keep])
        out[losers] = -1
    return losers


class _Window(NamedTuple):
    """Each QP's candidates: ``ports[lo:hi]`` of a sorted port index, of which it takes
    the ``rank``-th that passes the filters (QPs of equal candidates take distinct ones)."""

    ports: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    rank: np.ndarray


def _solve_rows(s: _Solver, rows: np.ndarray, out: np.ndarray) -> None:
    """Solve the QPs ``rows`` in place into ``out``, grouped by chain signature."""
    sigs, groups = _signature_groups(s.code[rows])
    for srow, at in zip(sigs, groups, strict=True):
        gq = rows[at]
        del at
        idx_cols, filt_cols = _split_signature(srow)
        sorted_ports, sorted_key = _port_index(s, tuple((x, b) for _, x, b in idx_cols))
        tgt = _index_targets(s, gq, idx_cols)
        lo = np.searchsorted(sorted_key, tgt, side="left")
        hi = np.searchsorted(sorted_key, tgt, side="right")

        # QPs with identical candidate sets need distinct ports: rank them.
        cols = [s.pid[gq].astype(np.uint64), tgt]
        for depth, _ in filt_cols:
            cols += [s.base[gq, depth].astype(np.uint64), s.d.n[gq, depth].astype(np.uint64),
                     s.d.want[gq, depth].astype(np.uint64)]
        rank = _rank_among_equal(cols)
        del cols, tgt

        if not filt_cols and s.excl.size == 0:
            # Every port in the slice is valid: the rank-th one, if the slice is long enough.
            pick = lo + rank
            out[gq] = np.where(pick < hi, sorted_ports[np.minimum(pick, sorted_ports.size - 1)],
                               -1)
            continue
        out[gq] = _search_candidates(s, gq, filt_cols, _Window(sorted_ports, lo, hi, rank))


def _split_signature(srow: np.ndarray
                     ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """A chain signature's indexed decisions ``(depth, xid, bits)`` and filtered ones
    ``(depth, cfg)`` (decoding :func:`_classify`'s codes; trivial ones are dropped)."""
    idx_cols: list[tuple[int, int, int]] = []
    filt_cols: list[tuple[int, int]] = []
    for depth, cv in enumerate(srow.tolist()):
        if cv == 0:
            continue
        if cv % 2 == 1:
            x, b = divmod((cv - 1) // 2, 32)
            idx_cols.append((depth, x, b))
        else:
            filt_cols.append((depth, (cv - 2) // 2))
    return idx_cols, filt_cols


def _port_index(s: _Solver, sig_key: tuple[tuple[int, int], ...]
                ) -> tuple[np.ndarray, np.ndarray]:
    """The usable ports sorted by the key their low hash bits fold to along a chain of
    (xor table, bits), with those keys; built once per chain."""
    if sig_key not in s.index_cache:
        key = np.zeros(s.order0.shape[0], dtype=np.uint64)
        shift = 0
        for x, b in sig_key:
            key |= (s.xtables[x][s.order0] & np.uint32((1 << b) - 1)).astype(np.uint64) << \
                np.uint64(shift)
            shift += b
        perm = np.argsort(key, kind="stable")
        s.index_cache[sig_key] = (s.order0[perm], key[perm])
    return s.index_cache[sig_key]


def _index_targets(s: _Solver, gq: np.ndarray, idx_cols: list[tuple[int, int, int]]
                   ) -> np.ndarray:
    """Per QP of ``gq``, the index key of the ports whose low hash bits give the wanted
    members at every indexed decision."""
    tgt = np.zeros(gq.shape[0], dtype=np.uint64)
    shift = 0
    for depth, _, b in idx_cols:
        m = np.uint32((1 << b) - 1)
        part = (s.d.want[gq, depth].astype(np.uint32) ^ s.base[gq, depth]) & m
        tgt |= part.astype(np.uint64) << np.uint64(shift)
        shift += b
    return tgt


def _signature_groups(crow: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The distinct chain signatures (rows of ``crow``, in ``np.unique(axis=0)``'s order)
    and the positions of the rows of each. Its own function: the sort's QP-sized
    temporaries die before the solver's (fresh pages cost a first plan at 1 M QPs)."""
    inv = dense_rows([crow[:, j] for j in range(crow.shape[1])])
    # a few signatures: 16-bit ids sort by radix (numpy's stable sort of small ints)
    by_sig = np.argsort(inv.astype(np.int16) if inv.max(initial=0) < 1 << 15 else inv,
                        kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(inv[by_sig]) != 0, True])
    return crow[by_sig[bounds[:-1]]], [by_sig[a:b] for a, b in
                                       zip(bounds[:-1], bounds[1:], strict=True)]


def _rank_among_equal(cols: list[np.ndarray]) -> np.ndarray:
    """Rank of each row (of integer columns ``cols``) among the equal rows before it."""
    cls = _row_keys(cols)[0]  # order-preserving ids: their sort is the ranks' order
    srt = np.argsort(cls, kind="stable")
    cs = cls[srt]
    del cls
    starts = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]])
    rank = np.zeros(cs.size, dtype=np.int64)
    if starts.size < cs.size:  # else every row is alone: rank 0
        rank[srt] = np.arange(cs.size) - np.repeat(starts, np.diff(np.r_[starts, cs.size]))
    return rank


def _search_candidates(s: _Solver, gq: np.ndarray, filt_cols: list[tuple[int, int]],
                       w: _Window) -> np.ndarray:
    """For each QP, the ``rank``-th candidate in ``ports[lo:hi]`` passing the filters."""
    res = np.full(gq.shape[0], -1, dtype=np.int64)
    need = w.rank.copy()
    pos = w.lo.astype(np.int64).copy()
    hi = w.hi
    act = np.flatnonzero(pos < hi)
    chunk = 16
    last = w.ports.shape[0] - 1
    d = s.d
    while act.size:
        off = pos[act, None] + np.arange(chunk)
        ok = off < hi[act, None]
        cand = w.ports[np.minimum(off, last)]
        qa = gq[act]
        for depth, c in filt_cols:
            h = s.base[qa, depth, None] ^ s.tables[c][cand]
            ok &= select_member(s.configs[c], h, d.n[qa, depth, None]) == d.want[qa, depth, None]
        if s.excl.size:
            ok &= ~_in_sorted(s.excl, s.pid[qa, None] * _PORT_SPACE + cand)
        csum = np.cumsum(ok, axis=1)
        total = csum[:, -1]
        found = total > need[act]
        col = np.argmax(csum > need[act, None], axis=1)
        res[act[found]] = cand[found, col[found]]
        nf = ~found
        need[act[nf]] -= total[nf]
        pos[act] += chunk
        act = act[nf & (pos[act] < hi[act])]
        chunk = min(_MAX_CHUNK, chunk * 2)
    return res


def verify_sports(configs: Sequence[HashConfig], chains: QpChains, sport: object
                  ) -> np.ndarray:
    """Re-hash each QP's port through the switch models; True where every decision matches.

    Uses the direct hash (:func:`~icefabric.dataplane.ecmp.ecmp_select`), not the XOR
    table, so it independently checks :func:`solve_sports`. QPs with ``sport < 0``
    are False.

    Returns
    -------
    numpy.ndarray of bool, shape (Q,)
    """
    d = _normalise(configs, chains)
    sp = np.asarray(sport, dtype=np.int64).ravel()
    normalised = QpChains(d.sip, d.dip, d.cfg, d.n, dqpn=d.dqpn, dport=d.dport,
                          proto=d.proto)
    members = path_members(configs, normalised, np.maximum(sp, 0))
    active = d.cfg >= 0
    ok = np.where(active, members == d.want, True).all(axis=1)
    return ok & (sp >= 0)


def path_members(configs: Sequence[HashConfig], chains: QpChains, sport: object
                 ) -> np.ndarray:
    """Members each QP's hash selects at each given decision (``-1`` where
    ``chains.cfg_index < 0``; ``chains.want`` is not read).

    Spraying switches (``random``) raise: they have no per-flow choice.

    Returns
    -------
    numpy.ndarray of int64, shape (Q, D)
    """
    cfg = np.asarray(chains.cfg_index, dtype=np.int64)
    if cfg.ndim == 1:
        cfg = cfg[:, None]
    q, dd = cfg.shape
    n = _per_decision(chains.n_members, cfg.shape)
    rep = lambda a: np.repeat(np.broadcast_to(np.asarray(a), (q,)), dd)  # noqa: E731
    dqpn = None if chains.dqpn is None else rep(chains.dqpn)
    members = ecmp_select(configs, cfg.ravel(), n.ravel(),
                          Headers(rep(chains.src_ip), rep(chains.dst_ip), rep(sport),
                                  chains.dport, chains.proto, dqpn))
    return members.reshape(q, dd)


# =========================================================================== probing mode

Path = tuple[int, ...]


@runtime_checkable
class Prober(Protocol):
    """Traceroute-like path probe with chosen UDP source ports.

    ``probe(src_ip, dst_ip, sports)`` sends one probe per port (RoCEv2 dport 4791) and
    returns, for each, the sequence of ECMP member indices it took (members ordered as
    the controller orders them), or ``None`` if the probe was lost.
    """

    def probe(self, src_ip: int, dst_ip: int, sports: np.ndarray) -> list[Path | None]: ...


NextDecision = Callable[[int, int, Path], "tuple[int, int] | None"]


class HashModelProber:
    """A :class:`Prober` backed by known hash models (tests, simulator, digital twin).

    Parameters
    ----------
    configs : sequence of HashConfig
        One hash model per switch.
    next_decision : callable ``(src_ip, dst_ip, members_so_far) -> (switch, n_members) | None``
        Routing of the fabric: which switch makes the next ECMP decision after the
        members chosen so far, and its group size; ``None`` when the remaining path
        has no choice.
    loss_prob : float
        Probability that a probe is lost (independent per probe).
    seed : int
        Seed of the loss process.
    dport, proto : int
        Constant header fields.

    Attributes
    ----------
    n_probes : int
        Probes sent so far.
    """

    def __init__(
        self,
        configs: Sequence[HashConfig],
        next_decision: NextDecision,
        *,
        loss_prob: float = 0.0,
        seed: int = 0,
        dport: int = ROCE_UDP_DPORT,
        proto: int = 17,
    ) -> None:
        if not 0.0 <= loss_prob < 1.0:
            raise ValueError("loss_prob must be in [0, 1)")
        self.configs = list(configs)
        self.next_decision = next_decision
        self.loss_prob = float(loss_prob)
        self.dport = dport
        self.proto = proto
        self.n_probes = 0
        self._rng = np.random.default_rng(seed)

    def reseed(self, switch: int, new_seed: int) -> None:
        """Change one switch's hash seed (what an operator or a reboot may do)."""
        self.configs[switch] = self.configs[switch].with_seed(new_seed)

    def paths(self, src_ip: int, dst_ip: int, sports: np.ndarray) -> list[Path]:
        """Loss-free ground-truth paths (member sequences) of the given ports.

        Raises :class:`ControlError` when ``next_decision`` still has a decision after
        :data:`MAX_DECISIONS` (a routing loop in the routing it describes)."""
        sp = np.asarray(sports, dtype=np.int64).ravel()
        result: list[Path] = [()] * sp.shape[0]
        groups: dict[Path, np.ndarray] = {(): np.arange(sp.shape[0])}
        for _ in range(MAX_DECISIONS):
            if not groups:
                break
            nxt: dict[Path, np.ndarray] = {}
            for prefix, idx in groups.items():
                dec = self.next_decision(int(src_ip), int(dst_ip), prefix)
                if dec is None:
                    for i in idx.tolist():
                        result[i] = prefix
                    continue
                sw, n = dec
                cfg = self.configs[sw]
                pkt = Headers(src_ip, dst_ip, sp[idx], self.dport, self.proto)
                m = select_member(cfg, ecmp_hash(cfg, pkt), n)
                for u in np.unique(m).tolist():
                    nxt[prefix + (int(u),)] = idx[m == u]
            groups = nxt
        else:
            raise ControlError(f"a path from {src_ip} to {dst_ip} takes more than "
                               f"{MAX_DECISIONS} ECMP decisions: the routing that "
                               f"next_decision describes has a loop")
        return result

    def probe(self, src_ip: int, dst_ip: int, sports: np.ndarray) -> list[Path | None]:
        sp = np.asarray(sports, dtype=np.int64).ravel()
        self.n_probes += sp.shape[0]
        truth = self.paths(src_ip, dst_ip, sp)
        lost = self._rng.random(sp.shape[0]) < self.loss_prob
        return [None if lo else p for p, lo in zip(truth, lost.tolist(), strict=True)]


@dataclass
class PortPathMap:
    """Learned ``port -> path`` map of one NIC pair (probing mode).

    Attributes
    ----------
    src_ip, dst_ip : int
    order : numpy.ndarray
        Candidate ports in probing order (seeded permutation of the usable range).
    next_pos : int
        Ports ``order[:next_pos]`` have been scheduled for probing.
    port_path : dict
        Port -> member sequence learned.
    by_path : dict
        Member sequence -> ports, in learning order.
    probes_used : int
        Probes spent on this map (including retries).
    """

    src_ip: int
    dst_ip: int
    order: np.ndarray
    next_pos: int = 0
    port_path: dict[int, Path] = field(default_factory=dict)
    by_path: dict[Path, list[int]] = field(default_factory=dict)
    probes_used: int = 0

    def ports_for(self, path: Sequence[int]) -> list[int]:
        """Learned ports whose probe took ``path``."""
        return self.by_path.get(tuple(path), [])

    @property
    def exhausted(self) -> bool:
        return self.next_pos >= self.order.shape[0]


@dataclass
class PortPathCache:
    """Learned maps per NIC pair, kept across planning rounds.

    Attributes
    ----------
    maps : dict
        ``(src_ip, dst_ip) -> PortPathMap``.
    probes_used : int
        Total probes spent through :func:`solve_sports_by_probing`.
    invalidations : int
        Maps discarded because a verification probe contradicted them.
    """

    maps: dict[tuple[int, int], PortPathMap] = field(default_factory=dict)
    probes_used: int = 0
    invalidations: int = 0


@dataclass(frozen=True)
class ProbeOptions:
    """How probing mode sends probes and orders ports.

    Attributes
    ----------
    limits : NicPortLimits
        Usable port range of a new map.
    batch : int
        Probes per prober call.
    max_retries : int
        A lost probe is re-sent at most this many times, then the port is skipped.
    seed : int
        Order of the candidate ports.
    budget_per_pair : int
        Probe budget of each learning pass of a pair (:func:`solve_sports_by_probing`).
    max_relearn : int
        Relearn attempts after a failed verification (:func:`solve_sports_by_probing`).
    """

    limits: NicPortLimits = field(default_factory=NicPortLimits)
    batch: int = 256
    max_retries: int = 8
    seed: int = 0
    budget_per_pair: int = 16384
    max_relearn: int = 3


@dataclass(frozen=True, eq=False)
class LearnGoal:
    """When :func:`learn_port_paths` stops: after ``budget`` probes (retries included),
    once ``n_ports`` new ports are learned, or as soon as every path of ``need`` has at
    least its count of learned ports not in ``skip_ports``, whichever comes first. With
    neither ``n_ports`` nor ``need`` it learns until the budget or the port range is
    exhausted.

    Attributes
    ----------
    budget : int
    n_ports : int, optional
    need : dict path -> count, optional
    skip_ports : set of int
        Ports not to count towards ``need`` (already used for this pair).
    """

    budget: int = 4096
    n_ports: int | None = None
    need: dict[Path, int] | None = None
    skip_ports: set[int] | frozenset[int] = frozenset()


def _new_map(src_ip: int, dst_ip: int, limits: NicPortLimits, seed: int) -> PortPathMap:
    rng = np.random.default_rng([seed, int(src_ip), int(dst_ip)])
    return PortPathMap(int(src_ip), int(dst_ip), rng.permutation(limits.ports()))


@dataclass
class _Learning:
    """The progress of one :func:`learn_port_paths` call."""

    missing: dict[Path, int]  # path of ``need`` -> ports still to learn for it
    retry: list[tuple[int, int]] = field(default_factory=list)  # (lost port, tries so far)
    learned: int = 0
    sent: int = 0


def learn_port_paths(
    prober: Prober,
    src_ip: int,
    dst_ip: int,
    *,
    pmap: PortPathMap | None = None,
    goal: LearnGoal | None = None,
    options: ProbeOptions | None = None,
) -> PortPathMap:
    """Learn which path each source port takes between two NICs by probing.

    Parameters
    ----------
    prober : Prober
        Sends probes and reports member sequences (``None`` = lost).
    src_ip, dst_ip : int
        NIC pair.
    pmap : PortPathMap, optional
        Map to extend (default: a new one, ports in a seeded random order).
    goal : LearnGoal, optional
        When to stop (default: after 4096 probes).
    options : ProbeOptions, optional
        Batch size, retries of lost probes, port range and order of a new map.

    Returns
    -------
    PortPathMap
        The (extended) map.
    """
    goal = goal or LearnGoal()
    options = options or ProbeOptions()
    if pmap is None:
        pmap = _new_map(src_ip, dst_ip, options.limits, options.seed)
    st = _Learning(_missing_ports(pmap, goal))
    if goal.need and not st.missing:
        return pmap
    while st.sent < goal.budget:
        ports, tries = _next_batch(pmap, st, min(options.batch, goal.budget - st.sent))
        if not ports:
            break
        res = prober.probe(src_ip, dst_ip, np.asarray(ports, dtype=np.int64))
        st.sent += len(ports)
        pmap.probes_used += len(ports)
        for port, t, path in zip(ports, tries, res, strict=True):
            if path is None:
                if t + 1 <= options.max_retries:
                    st.retry.append((port, t + 1))
                continue
            _learn(pmap, st, port, tuple(int(x) for x in path), goal.skip_ports)
        if goal.need and not st.missing:
            break
        if goal.n_ports is not None and st.learned >= goal.n_ports:
            break
    return pmap


def _missing_ports(pmap: PortPathMap, goal: LearnGoal) -> dict[Path, int]:
    """Per path of ``goal.need``: how many more usable ports the map must learn."""
    missing: dict[Path, int] = {}
    for p, k in (goal.need or {}).items():
        have = sum(1 for x in pmap.ports_for(p) if x not in goal.skip_ports)
        if have < k:
            missing[tuple(p)] = k - have
    return missing


def _next_batch(pmap: PortPathMap, st: _Learning, room: int) -> tuple[list[int], list[int]]:
    """Up to ``room`` ports to probe next, lost ones first, and their tries so far."""
    take, st.retry = st.retry[:room], st.retry[room:]
    fresh = min(room - len(take), pmap.order.shape[0] - pmap.next_pos)
    ports = [p for p, _ in take] + pmap.order[pmap.next_pos: pmap.next_pos + fresh].tolist()
    pmap.next_pos += fresh
    return ports, [t for _, t in take] + [0] * fresh


def _learn(pmap: PortPathMap, st: _Learning, port: int, path: Path,
           skip_ports: set[int] | frozenset[int]) -> None:
    """Record that ``port`` takes ``path``."""
    pmap.port_path[port] = path
    pmap.by_path.setdefault(path, []).append(port)
    st.learned += 1
    if path in st.missing and port not in skip_ports:
        st.missing[path] -= 1
        if st.missing[path] == 0:
            del st.missing[path]


def _verify_by_probe(
    prober: Prober, src_ip: int, dst_ip: int, ports: list[int], expected: list[Path],
    max_retries: int,
) -> tuple[np.ndarray, int]:
    """Probe the chosen ports again: +1 match, -1 mismatch, 0 unknown (all probes lost)."""
    state = np.zeros(len(ports), dtype=np.int64)
    pending = np.arange(len(ports))
    used = 0
    for _ in range(max_retries + 1):
        if pending.size == 0:
            break
        res = prober.probe(src_ip, dst_ip, np.asarray(ports, dtype=np.int64)[pending])
        used += pending.size
        still = []
        for i, path in zip(pending.tolist(), res, strict=True):
            if path is None:
                still.append(i)
            else:
                state[i] = 1 if tuple(path) == expected[i] else -1
        pending = np.asarray(still, dtype=np.int64)
    return state, used


def validate_port_paths(
    prober: Prober,
    pmap: PortPathMap,
    *,
    n_probes: int = 16,
    max_retries: int = 8,
    seed: int = 0,
) -> bool:
    """Re-probe a sample of learned ports; False if any now takes another path.

    A periodic check an agent can run on cached maps: after a switch reseed (or a
    membership change) the sampled ports move, and the map must be relearned. Lost
    probes are retried; a port whose probes are all lost counts as consistent.

    Parameters
    ----------
    prober : Prober
    pmap : PortPathMap
        Learned map to check.
    n_probes : int
        Sample size (distinct learned ports).
    max_retries : int
        Retries per lost probe.
    seed : int
        Sample choice.
    """
    ports = np.fromiter(pmap.port_path, dtype=np.int64, count=len(pmap.port_path))
    if ports.size == 0:
        return True
    rng = np.random.default_rng(seed)
    sample = rng.choice(ports, min(n_probes, ports.size), replace=False).tolist()
    state, used = _verify_by_probe(prober, pmap.src_ip, pmap.dst_ip, sample,
                                   [pmap.port_path[p] for p in sample], max_retries)
    pmap.probes_used += used
    return bool(np.all(state >= 0))


@dataclass(frozen=True, eq=False)
class WantedPaths:
    """The QPs of probing mode: each one's NIC pair and the members it wants.

    Attributes
    ----------
    src_ip, dst_ip : array of int, shape (Q,)
    paths : sequence of member sequences, length Q
        Wanted members along each QP's path (the ``want`` row without the depths
        that have no decision).
    """

    src_ip: object
    dst_ip: object
    paths: Sequence[Sequence[int]]


def solve_sports_by_probing(
    prober: Prober,
    wanted: WantedPaths,
    *,
    cache: PortPathCache | None = None,
    exclude: tuple[object, object, object] | None = None,
    options: ProbeOptions | None = None,
) -> np.ndarray:
    """Pick source ports from learned port -> path maps when the hash model is unknown.

    For each NIC pair: reuse the cached map or learn one with :func:`learn_port_paths`
    until every wanted path has enough unused ports; hand out ports in learning order
    (distinct per pair, never in ``exclude``); then probe the chosen ports once more.
    If a verification probe takes another path than learned, the switches changed
    (e.g. a reseed): the map is discarded and relearned, up to
    ``options.max_relearn`` times.

    Parameters
    ----------
    prober : Prober
    wanted : WantedPaths
        Each QP's NIC pair and wanted members.
    cache : PortPathCache, optional
        Maps reused and updated across calls (pass the same object each round).
    exclude : (src_ip, dst_ip, sport) arrays, optional
        Ports already used per NIC pair.
    options : ProbeOptions, optional
        Probe budget per learning pass of a pair, relearn attempts, batch size,
        retries, port range and probing order.

    Returns
    -------
    numpy.ndarray of int64, shape (Q,)
        Ports, ``-1`` where no port for the wanted path was found within budget.
        A port whose verification probes were all lost is kept (inconclusive).
    """
    options = options or ProbeOptions()
    cache = cache if cache is not None else PortPathCache()
    sip = np.asarray(wanted.src_ip, dtype=np.int64).ravel()
    dip = np.asarray(wanted.dst_ip, dtype=np.int64).ravel()
    wants = [tuple(int(x) for x in w) for w in wanted.paths]
    if not (sip.shape[0] == dip.shape[0] == len(wants)):
        raise ValueError("WantedPaths: src_ip, dst_ip and paths must have the same length")
    out = np.full(sip.shape[0], -1, dtype=np.int64)
    used_by_pair: dict[tuple[int, int], set[int]] = {}
    if exclude is not None:
        for a, b, p in zip(*(np.asarray(x, dtype=np.int64).ravel().tolist() for x in exclude),
                           strict=True):
            used_by_pair.setdefault((a, b), set()).add(p)
    pairs: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(sip.tolist(), dip.tolist(), strict=True)):
        pairs.setdefault(key, []).append(i)
    for key, qs in pairs.items():
        pair = _PairProbe(prober, cache, key, used_by_pair.get(key, set()), options)
        out[qs] = _solve_pair(pair, [wants[i] for i in qs])
    return out


@dataclass(frozen=True, eq=False)
class _PairProbe:
    """One NIC pair's probing: who probes, the cache to update, the pair, the ports it
    already uses and the options."""

    prober: Prober
    cache: PortPathCache
    key: tuple[int, int]
    used: set[int]
    options: ProbeOptions


def _solve_pair(pair: _PairProbe, wants: list[Path]) -> list[int]:
    """Ports for the QPs of one NIC pair that want ``wants`` (-1 where none is found),
    learned (or taken from the cache) and verified; the cache keeps the map (or drops it
    when the last verification failed)."""
    cache, key, opts = pair.cache, pair.key, pair.options
    need = Counter(wants)
    pmap = cache.maps.get(key)
    ports = [-1] * len(wants)
    for _attempt in range(opts.max_relearn + 1):
        before = 0 if pmap is None else pmap.probes_used
        goal = LearnGoal(budget=opts.budget_per_pair, need=dict(need), skip_ports=pair.used)
        pmap = learn_port_paths(pair.prober, key[0], key[1], pmap=pmap, goal=goal, options=opts)
        cache.probes_used += pmap.probes_used - before
        chosen = _first_free_ports(pmap, wants, pair.used)
        got = [j for j, p in enumerate(chosen) if p >= 0]
        state, spent = _verify_by_probe(
            pair.prober, key[0], key[1], [chosen[j] for j in got],
            [wants[j] for j in got], opts.max_retries,
        )
        cache.probes_used += spent
        pmap.probes_used += spent
        if np.any(state < 0):
            cache.invalidations += 1
            pmap = None
            continue
        ports = chosen
        break
    if pmap is not None:
        cache.maps[key] = pmap
    else:
        cache.maps.pop(key, None)
    return ports


def _first_free_ports(pmap: PortPathMap, wants: list[Path], used: set[int]) -> list[int]:
    """Per wanted path, the first learned port taking it that neither ``used`` nor an
    earlier QP holds (-1 when none is left)."""
    chosen: list[int] = []
    for w in wants:
        avail = [p for p in pmap.ports_for(w) if p not in used and p not in chosen]
        chosen.append(avail[0] if avail else -1)
    return chosen
