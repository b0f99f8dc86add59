"""The flow engine's view of a problem with shared routes (:class:`SharedRoutes`): each
flow's own incidence entries plus its groups', never the product of the two.

A PXN AllToAll over ``n`` ranks has ``n / 8 * (n - 8)`` merged flows, each on ~6 links of
its own and ~8 NVLink legs it shares with the ~``n / 8`` other flows of its (NIC, channel)
group; expanded, the legs are more than half of the incidence (117 M entries at 8,192
ranks). Here a flow's column is its own entries plus, per group it belongs to, the group's
entries (``A = A_own + A_group @ M``): the legs are stored once per group.

Max-min on it is water-filling in link order (:func:`waterfill`, Bertsekas & Gallager,
*Data Networks*, 2nd ed., §6.5.2, "progressive filling" taken one bottleneck at a time):
the link of least fair share ``rem / sum`` is the next bottleneck, its unfrozen flows
freeze at that share and leave every link they cross. A flow leaves its links once (the
rounds of :func:`~icefabric.engine.batch_kernel._maxmin` visit every unfrozen
entry each round: 132 rounds at 1,024 ranks, BENCHMARKS.md), and a heap keyed by share
(shares only rise as flows freeze: a flow leaves ``rem`` and ``sum`` at most the link's
own share) finds the next bottleneck. The rates are the max-min rates; their floats can
differ from the rounds' in the last bits (the sums run in another order), so this path
serves only problems with shared routes, which only the flow engine reads: every other
problem keeps the rounds' arithmetic to the bit.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import scipy.sparse as sp
from numba import njit

from icefabric.csr import indptr_from_lengths
from icefabric.engine.problem import SimProblem, route_incidence

_STALE = 1e-12  # a popped share this much below the link's current one is re-queued

Cols = namedtuple("Cols", "f_ptr f_idx f_val g_ptr g_idx g_val gr_ptr gr_idx m_ptr m_idx "
                          "r_ptr r_idx")
Marks = namedtuple("Marks", "link group rate")
Marks.__doc__ = """Scratch of :meth:`GroupedIndex.leave`: the call that last saw each link
(``link[-1]``: the calls so far) and each group, and a group's summed finished rate."""
Fill = namedtuple("Fill", "rem s cnt left rate loc live")
Fill.__doc__ = """Water-filling's state: per link the spare ``rem``, the unfrozen flows'
summed coefficient ``s`` and entry count ``cnt``; per group its unfrozen members
``left``; per flow (of those filled) its ``rate`` (NaN: unfrozen); per flow of the
problem ``live``, 1 while it is one of them and unfrozen, and ``loc``, its position among
them (read only where ``live``); both kept by :class:`GroupedIndex` between calls
(``live`` is all 0 after each)."""
Cols.__doc__ = """The kernel's arrays: a flow's record ``f_*`` (:func:`pack_flows`: its own
entries, then its groups with multiplicity), a group's entries ``g_*`` (CSC); a link's
groups ``gr_*`` (CSR), a group's flows ``m_*`` (CSR) and a link's own flows ``r_*``
(CSR)."""


class GroupedIndex:
    """The incidence of ``P``'s own routes ``(r_ptr, r_links)`` and of its shared routes,
    kept apart, with what the flow engine asks of an incidence (the methods of
    :class:`~icefabric.engine.flow._ColumnIndex`)."""

    def __init__(self, P: SimProblem, r_ptr: np.ndarray, r_links: np.ndarray):
        sh = P.shared
        L, F = P.n_links, P.n_flows
        own = route_incidence(r_ptr, r_links, P.route_flow, P.route_weight, L, F)
        own.eliminate_zeros()  # a zero weight limits nothing (maxmin_entries drops them)
        self.rows = own  # CSR: the flows of every link
        grp = route_incidence(sh.indptr, sh.links, sh.group, sh.weight, L, sh.n_groups)
        grp.eliminate_zeros()
        self.g_rows = grp  # CSR: the groups of every link
        self.g_cols = grp.tocsc()  # CSC: the links of every group
        self.g_cols.sum_duplicates()
        member = sp.csr_matrix((np.ones(len(sh.group_flows)), sh.group_flows,
                                sh.group_indptr), shape=(sh.n_groups, F))
        member.sum_duplicates()  # a flow listed twice: weight 2
        self.members = member  # CSR: the flows of every group (with multiplicity)
        of_flow = member.tocsc()  # CSC: the groups of every flow
        of_flow.sum_duplicates()
        self.f_ptr, self.f_rec = pack_flows(own, of_flow)
        self.n_links = L
        self._marks = Marks(np.zeros(L + 1, dtype=np.int64),
                            np.zeros(sh.n_groups, dtype=np.int64), np.zeros(sh.n_groups))
        self._k = None
        self._loc = np.zeros(F, dtype=np.int64)  # waterfill's scratch (Fill)
        self._live = np.zeros(F, dtype=np.uint8)

    def _cols(self) -> Cols:
        if self._k is None:
            g, m, r = self.g_cols, self.members, self.g_rows
            self._k = Cols(self.f_ptr, self.f_rec.view(np.int64), self.f_rec, g.indptr,
                           g.indices, g.data, r.indptr, r.indices, m.indptr, m.indices,
                           self.rows.indptr, self.rows.indices)
        return self._k

    def leave(self, fin: np.ndarray, rate: np.ndarray, load: np.ndarray,
              cap: np.ndarray) -> np.ndarray:
        """The links the finished flows ``fin`` cross (own or shared) that are saturated
        (``load`` within 1e-6 of ``cap``), each once in no particular order; their load
        comes off ``load`` in the same pass (each link read before it loses any)."""
        r = rate[fin]
        return _leave_links(fin, np.where(np.isfinite(r), r, 0.0), load, cap, self._marks,
                            self._cols())

    def top_rate(self, links: np.ndarray, rate: np.ndarray) -> float:
        """The least, over ``links``, of the highest ``rate`` of a flow on the link."""
        return float(_top_rate(links, rate, self._cols()))

    def release(self, load: np.ndarray, fin: np.ndarray, refill: np.ndarray,
                rate: np.ndarray) -> None:
        """Take the load of ``refill`` (at ``rate``) off ``load``, in place; :meth:`leave`
        took the finished flows' (entry by entry: no link-sized temporary per event)."""
        if len(refill):
            r = rate[refill]
            _add_load(refill, -np.where(np.isfinite(r), r, 0.0), load, self._cols())

    def fill(self, flows: np.ndarray, rate: np.ndarray, load: np.ndarray, cap: np.ndarray,
             fcap: np.ndarray) -> None:
        """Max-min rates of ``flows`` (ascending) on what the others leave of ``cap``
        (``load``): into ``rate``, their load added to ``load``."""
        spare = np.maximum(cap - load, 0.0)
        rate[flows] = waterfill(flows, spare, fcap[flows].astype(np.float64), self._cols(),
                                self._loc, self._live)
        r = rate[flows]
        _add_load(flows, np.where(np.isfinite(r), r, 0.0), load, self._cols())

    def link_bytes(self, moved: np.ndarray) -> np.ndarray:
        """Per link: the bytes of flows that moved ``moved`` bytes."""
        return self.rows @ moved + self.g_rows @ (self.members @ moved)

    def raise_peak(self, flows: np.ndarray, load: np.ndarray, cap: np.ndarray,
                   peak: np.ndarray) -> None:
        """``peak = max(peak, load / cap)`` on the links of ``flows`` (own and shared), in
        place."""
        raise_link_peak(flows, load, cap, peak, self._cols())


def pack_flows(rows: sp.csr_matrix, of_flow: sp.csc_matrix) -> tuple[np.ndarray, np.ndarray]:
    """Every flow's own entries (link, value; its column of ``rows``, links ascending) and
    then its groups (``-1 - group``, multiplicity; its column of ``of_flow``) as one
    record of 8-byte pairs (an index's bits, then a float), the records flow after flow:
    ``(indptr, records)``. A finishing or freezing flow reads one record (a cache line or
    two) where the columns of two CSC matrices cost six cache misses (the 8,192-rank
    AllToAll's 8.4 M flows are scattered over 50 M entries)."""
    own = np.bincount(rows.indices, minlength=rows.shape[1])
    ptr = indptr_from_lengths(2 * (own + np.diff(of_flow.indptr)))
    rec = np.empty(int(ptr[-1]))
    _pack_records(rec.view(np.int64), rec, ptr, (rows.indptr, rows.indices, rows.data),
                  (of_flow.indptr, of_flow.indices, of_flow.data))
    return ptr, rec


@njit(cache=True)
def _pack_records(idx, val, ptr, rows, of_flow):  # pragma: no cover
    """Fill :func:`pack_flows`'s records (``idx`` and ``val``: one buffer seen as ints and
    as floats; ``rows`` and ``of_flow``: the matrices' (indptr, indices, data)): the links
    row by row (so ascending in each record), then the groups."""
    r_ptr, r_idx, r_val = rows
    o_ptr, o_idx, o_val = of_flow
    at = ptr[:-1].copy()
    for x in range(len(r_ptr) - 1):
        for e in range(r_ptr[x], r_ptr[x + 1]):
            f = r_idx[e]
            idx[at[f]] = x
            val[at[f] + 1] = r_val[e]
            at[f] += 2
    for f in range(len(at)):
        for e in range(o_ptr[f], o_ptr[f + 1]):
            idx[at[f]] = -1 - o_idx[e]
            val[at[f] + 1] = o_val[e]
            at[f] += 2


@njit(cache=True)
def _leave_links(flows, rates, load, cap, sc, k):  # pragma: no cover
    """:meth:`GroupedIndex.leave` over the scratch :class:`Marks` ``sc``. A group's links
    are walked once, at the summed rate of its finished flows."""
    sc.link[-1] += 1
    stamp = sc.link[-1]
    out = np.empty(len(sc.link), dtype=np.int64)
    groups = np.empty(len(flows) + 1, dtype=np.int64)  # the groups seen (grown by doubling)
    n = ng = 0
    at = _touch(flows, k)
    for i in range(len(flows)):
        f, r = flows[i], rates[i]
        for e in range(at[i], k.f_ptr[f + 1], 2):
            x = k.f_idx[e]
            if x >= 0:  # an own entry
                if _newly_saturated(x, load, cap, sc.link, stamp):
                    out[n] = x
                    n += 1
                load[x] -= k.f_val[e + 1] * r
                continue
            g = -1 - x
            if sc.group[g] != stamp:
                sc.group[g] = stamp
                sc.rate[g] = 0.0
                if ng == len(groups):
                    groups = np.concatenate((groups, np.empty(ng + 1, dtype=np.int64)))
                groups[ng] = g
                ng += 1
            sc.rate[g] += k.f_val[e + 1] * r
    for j in range(ng):
        g = groups[j]
        for e in range(k.g_ptr[g], k.g_ptr[g + 1]):
            x = k.g_idx[e]
            if _newly_saturated(x, load, cap, sc.link, stamp):
                out[n] = x
                n += 1
            load[x] -= k.g_val[e] * sc.rate[g]
    return out[:n].copy()


@njit(cache=True)
def _touch(flows, k):  # pragma: no cover
    """Where the records of ``flows`` start, read ahead of their use: the flows are
    scattered over a gigabyte, and a loop that reads each record only as it walks it
    waits on one cache miss at a time, where these independent loads overlap."""
    at = np.empty(len(flows) + 1, dtype=np.int64)  # (the last: the loads' sum, unused)
    end = np.empty(len(flows), dtype=np.int64)
    for i in range(len(flows)):
        at[i], end[i] = k.f_ptr[flows[i]], k.f_ptr[flows[i] + 1]
    s = 0
    for i in range(len(flows)):
        if end[i] > at[i]:  # (bring the record in: its first and last cache lines)
            s += k.f_idx[at[i]] + k.f_idx[end[i] - 2]
    at[-1] = s  # (kept: unused loads would be dropped)
    return at


@njit(cache=True)
def _newly_saturated(x, load, cap, mark, stamp):  # pragma: no cover
    """Whether link ``x`` is saturated and first seen in this call (``mark[x]`` not yet
    ``stamp``; marked now)."""
    if mark[x] == stamp:
        return False
    mark[x] = stamp
    return load[x] >= cap[x] * (1 - 1e-6)


@njit(cache=True)
def _add_load(flows, rates, load, k):  # pragma: no cover
    """Add every entry of ``flows`` (own and their groups') times its flow's rate to
    ``load``."""
    for i in range(len(flows)):
        f, r = flows[i], rates[i]
        for e in range(k.f_ptr[f], k.f_ptr[f + 1], 2):
            x = k.f_idx[e]
            if x >= 0:
                load[x] += k.f_val[e + 1] * r
                continue
            g, mult = -1 - x, k.f_val[e + 1]
            for j in range(k.g_ptr[g], k.g_ptr[g + 1]):
                load[k.g_idx[j]] += k.g_val[j] * mult * r


@njit(cache=True)
def raise_link_peak(flows, load, cap, peak, k):  # pragma: no cover
    """:meth:`GroupedIndex.raise_peak` (a link seen twice gets the same value again)."""
    for f in flows:
        for e in range(k.f_ptr[f], k.f_ptr[f + 1], 2):
            x = k.f_idx[e]
            if x >= 0:
                peak[x] = max(peak[x], load[x] / cap[x])
                continue
            g = -1 - x
            for j in range(k.g_ptr[g], k.g_ptr[g + 1]):
                y = k.g_idx[j]
                peak[y] = max(peak[y], load[y] / cap[y])


@njit(cache=True)
def _top_rate(links, rate, k):  # pragma: no cover
    """:meth:`GroupedIndex.top_rate` over the columns ``k``."""
    lam = np.inf
    for x in links:
        top = -np.inf
        for e in range(k.r_ptr[x], k.r_ptr[x + 1]):
            top = max(top, rate[k.r_idx[e]])
        for e in range(k.gr_ptr[x], k.gr_ptr[x + 1]):
            g = k.gr_idx[e]
            for j in range(k.m_ptr[g], k.m_ptr[g + 1]):
                top = max(top, rate[k.m_idx[j]])
        lam = min(lam, top)
    return lam


@njit(cache=True)
def _push(hk, hv, size, key, v):  # pragma: no cover
    """Push ``(key, v)`` on the binary min-heap ``hk, hv`` of ``size``; the new size."""
    i = size
    hk[i], hv[i] = key, v
    while i > 0:
        p = (i - 1) // 2
        if hk[p] <= hk[i]:
            break
        hk[p], hk[i] = hk[i], hk[p]
        hv[p], hv[i] = hv[i], hv[p]
        i = p
    return size + 1


@njit(cache=True)
def _second(hk, size):  # pragma: no cover
    """The least key below the top (inf if none)."""
    return min(hk[1] if size > 1 else np.inf, hk[2] if size > 2 else np.inf)


@njit(cache=True)
def _pop(hk, hv, size):  # pragma: no cover
    """Remove the top of the heap; the new size."""
    size -= 1
    _sift_down(hk, hv, size, hk[size], hv[size])
    return size


@njit(cache=True)
def _sift_down(hk, hv, size, key, v=-1):  # pragma: no cover
    """Put ``key`` (and ``v``, unless -1: the top's own) at the top and sift it down."""
    hk[0] = key
    if v >= 0:
        hv[0] = v
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < size and hk[a] < hk[m]:
            m = a
        if b < size and hk[b] < hk[m]:
            m = b
        if m == i:
            return
        hk[m], hk[i] = hk[i], hk[m]
        hv[m], hv[i] = hv[i], hv[m]
        i = m


@njit(cache=True)
def _leave(f, lv, st, k):  # pragma: no cover
    """Flow ``f`` freezes at ``lv``: it leaves every link it crosses (own and shared)."""
    for e in range(k.f_ptr[f], k.f_ptr[f + 1], 2):
        x = k.f_idx[e]
        if x >= 0:
            st.rem[x] -= k.f_val[e + 1] * lv
            st.s[x] -= k.f_val[e + 1]
            st.cnt[x] -= 1
            continue
        g, mult = -1 - x, k.f_val[e + 1]
        st.left[g] -= 1
        for j in range(k.g_ptr[g], k.g_ptr[g + 1]):
            x = k.g_idx[j]
            st.rem[x] -= k.g_val[j] * mult * lv
            st.s[x] -= k.g_val[j] * mult
            st.cnt[x] -= 1


@njit(cache=True)
def waterfill(flows, spare, fcap, k, loc, live):  # pragma: no cover
    """Max-min rates of ``flows`` (capped at ``fcap``) on ``spare`` (per link) over the
    columns :class:`Cols` ``k`` (see the module docstring); ``loc`` and ``live``:
    :class:`Fill`'s scratch, one entry per flow of the problem (``live`` all 0)."""
    n, L = len(flows), len(spare)
    st = Fill(spare.copy(), np.zeros(L), np.zeros(L, dtype=np.int64),
              np.zeros(len(k.g_ptr) - 1, dtype=np.int64), np.full(n, np.nan), loc, live)
    for i in range(n):
        st.loc[flows[i]] = i
        st.live[flows[i]] = 1
    for i in range(n):  # the sums of the flows' coefficients (negated: leaving at 0)
        _leave(flows[i], 0.0, st, k)
    st.s[:], st.cnt[:], st.left[:] = -st.s, -st.cnt, -st.left
    hk, hv = np.empty(L), np.empty(L, dtype=np.int64)
    size = 0
    for x in range(L):
        if st.cnt[x] > 0:
            size = _push(hk, hv, size, st.rem[x] / st.s[x] if st.s[x] > 0 else np.inf, x)
    by_cap = np.argsort(fcap)
    pc, done, level = 0, 0, 0.0
    while done < n:
        while pc < n and not np.isnan(st.rate[by_cap[pc]]):
            pc += 1
        nxt = fcap[by_cap[pc]] if pc < n else np.inf
        share, x = np.inf, -1
        if size:
            x = hv[0]
            if st.cnt[x] == 0:
                size = _pop(hk, hv, size)
                continue
            share = max(st.rem[x] / st.s[x] if st.s[x] > 0 else np.inf, 0.0)
            # it rose since queued: unless still below every other key (each a lower
            # bound of its link's share), queue it anew
            if share > hk[0] * (1 + _STALE) and share > _second(hk, size):
                _sift_down(hk, hv, size, share)
                continue
        if nxt <= share:  # a flow reaches its cap first (or no link is left)
            i = by_cap[pc]
            st.rate[i] = nxt
            st.live[flows[i]] = 0
            done += 1
            _leave(flows[i], nxt, st, k)
            continue
        size = _pop(hk, hv, size)
        level = max(level, share)
        done += _freeze_link(x, level, flows, st, k)
    return st.rate  # (every flow froze: ``live`` is all 0 again)


@njit(cache=True)
def _freeze_link(x, level, flows, st, k):  # pragma: no cover
    """Freeze the unfrozen flows of link ``x`` (own, then its groups' with any left) at
    ``level``; return how many."""
    done = 0
    for e in range(k.r_ptr[x], k.r_ptr[x + 1]):
        if st.cnt[x] == 0:  # (every flow of the link is frozen: the rest were before)
            return done
        done += _freeze(k.r_idx[e], level, flows, st, k)
    for e in range(k.gr_ptr[x], k.gr_ptr[x + 1]):
        g = k.gr_idx[e]
        for j in range(k.m_ptr[g], k.m_ptr[g + 1]):
            if st.left[g] == 0 or st.cnt[x] == 0:  # (walked while some are unfrozen)
                break
            done += _freeze(k.m_idx[j], level, flows, st, k)
    return done


@njit(cache=True, inline="always")
def _freeze(f, level, flows, st, k):  # pragma: no cover
    """Freeze flow ``f`` at ``level`` if it is one of ``flows`` and unfrozen; 1 if so.
    Most flows a link lists are frozen already (a flow is listed by every link it crosses)
    or not filled: a byte per flow (``live``, 8 MB at 8.4 M flows) tells, where its
    position and rate were two cache misses in 130 MB."""
    if not st.live[f]:
        return 0
    st.live[f] = 0
    i = st.loc[f]
    st.rate[i] = level
    _leave(f, level, st, k)
    return 1
