"""Compiled loop of the batched flow engine (:mod:`icefabric.engine.batch` sets it up).

Each draw is a small problem (a hundred or so running flows), so its events cost microseconds in
compiled code, where numpy's per-call overhead over a lockstep of all draws cost more than
the work (BENCHMARKS.md, "ECMP draws"). :func:`run_draws` runs every draw to its end, one
after the other, with the event rules and rate updates of
:func:`icefabric.engine.flow.run_flow`: a flow's last byte, its completion ``latency_ns``
later (which releases its dependents), scheduled starts; max-min rates from scratch after
a start, else an incremental refill of the flows at or above the lowest level at which a
link the finished flows left was saturated.

The arithmetic follows the numpy code it replaced operation by operation (sums accumulated
from 0.0 in the same entry order, then added to or subtracted from the running value, as
``np.bincount`` did), so start and finish times are those of that code, to the nanosecond.
Max-min is progressive filling by bottleneck rounds, as
:func:`icefabric.dataplane.fairness.maxmin_entries` (Bertsekas & Gallager, *Data
Networks*, 2nd ed., §6.5.2).

The draws' routes come as segments (:class:`Routes`); each draw's link-by-flow incidence
is built from them in turn (:func:`_incidence`) as :class:`Net`: ``c_ptr[f]``
starts flow ``f``'s entries ``(c_link, c_coef)`` (a link crossed by several routes of the
flow once, their weights summed in route order as ``scipy.sparse`` sums duplicates; in the
order first met: every sum over a link runs over its flows in flow order, so the order
within a flow changes no float) and ``r_ptr[l]`` starts link ``l``'s flows ``r_flow``
(ascending) with their weights ``r_coef`` (``r_hash``: a hash of both). Of links with the
same flows and weights (twins) only one of the least capacity is kept
(:func:`_merge_twins`).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from icefabric.engine.jit import compiled_or_cached

NEVER = np.iinfo(np.int64).max
_REL_EPS = 1e-9  # fairness._REL_EPS: bottleneck and cap tolerance
_SAT_EPS = 1e-6  # a link within this fraction of its capacity is saturated (flow.py)

#: every draw's routes (:class:`icefabric.engine.batch.RouteSets`): route ``k`` in draw
#: ``n`` is row ``pre[k]`` of the CSR ``fixed_*``, row ``n*n_mid + mid_row[k]`` of the CSR
#: ``mid_*``, row ``post[k]`` of ``fixed_*`` (-1: none); per route its ``weight``; the
#: routes of every flow ``fr_ptr``/``fr_route`` (ascending); links ``keep`` (the others
#: never limit a rate); capacities ``cap`` (L,) and flow rate caps ``fcap`` (F,)
Routes = namedtuple("Routes", ["fixed_ptr", "fixed_links", "pre", "mid_row", "post",
                               "mid_ptr", "mid_links", "n_mid", "weight", "fr_ptr",
                               "fr_route", "keep", "cap", "fcap"])
#: one draw's incidence (see the module docstring)
Net = namedtuple("Net", ["c_ptr", "c_link", "c_coef", "r_ptr", "r_flow", "r_coef", "r_hash",
                         "cap", "fcap"])
#: the flows: size, latency, earliest start, dependency counts, dependents (CSR)
Dag = namedtuple("Dag", ["size", "lat", "fstart", "ndeps", "dptr", "dependents"])
#: one draw's evolving state. ``run[:n[0]]``: the running flows, ascending (what every
#: step touches, so a step costs what runs, not all flows); ``pend[:n[1]]``: flows with a
#: start or completion due; ``ndeps``: dependencies not yet complete
State = namedtuple("State", ["remaining", "rate", "load", "start", "finish", "start_at",
                             "complete_at", "ndeps", "run", "pend", "n"])
#: buffers reused by every draw: per-link rows ``lf`` (float) and ``li`` (int), max-min
#: entries ``e_*``, per-flow rows ``ff``, the finished flows ``fin`` and the
#: flows to re-fill ``refill``; ``nacc[0]``: links in ``li[_ACC_LIST]``
Scratch = namedtuple("Scratch", ["lf", "li", "e_link", "e_who", "e_coef", "ff", "fin",
                                 "refill", "nacc"])
_ACC, _SUM, _SHARE, _DEC, _REM = range(5)  # rows of Scratch.lf
_ACC_MARK, _ACC_LIST, _USE_MARK, _USE_LIST, _BELOW = range(5)  # rows of Scratch.li
_RATE, _M, _PMIN, _FCAP = range(4)  # rows of Scratch.ff
_RUN, _PEND = 0, 1  # State.n
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # hash constants (splitmix64)


def kernel_cached() -> bool:
    """Whether :func:`run_draws` is compiled in this process or in numba's cache for this
    source: the first run with draws after an install compiles it instead (BENCHMARKS.md,
    "ECMP draws": about 20 s)."""
    return compiled_or_cached(run_draws)


@njit(cache=True)
def run_draws(rt, dag, start, finish) -> int:
    """Run every draw; fill ``start`` and ``finish`` (shape (draws, F)); return how many
    flows never finished (a dependency cycle)."""
    n_draws = len(start)
    net = _net_buffers(rt, len(dag.size), n_draws)
    sc = new_scratch(len(net.cap), len(dag.size), len(net.c_link))
    table = np.empty(1 << int(np.ceil(np.log2(2 * len(net.cap) + 1))), dtype=np.int64)
    drop = np.zeros(len(net.cap), dtype=np.bool_)
    stuck = 0
    for n in range(n_draws):
        _incidence(rt, n, net, sc)
        _merge_twins(net, table, drop)
        st = _new_state(net, dag)
        _run_one(net, dag, st, sc)
        start[n, :] = st.start
        finish[n, :] = st.finish
        stuck += np.sum(st.finish < 0)
    return stuck


@njit(cache=True)
def _net_buffers(rt, F, n_draws):
    """A :class:`Net` large enough for the draw with the most route links."""
    fixed = 0
    for k in range(len(rt.pre)):
        fixed += _seg_len(rt.fixed_ptr, rt.pre[k]) + _seg_len(rt.fixed_ptr, rt.post[k])
    E = 0
    for n in range(n_draws):
        mid = 0
        for k in range(len(rt.pre)):
            mid += _seg_len(rt.mid_ptr, _mid(rt, n, k))
        E = max(E, fixed + mid)
    L = len(rt.cap)
    return Net(np.zeros(F + 1, dtype=np.int64), np.empty(E, dtype=np.int64), np.empty(E),
               np.zeros(L + 1, dtype=np.int64), np.empty(E, dtype=np.int64), np.empty(E),
               np.empty(L, dtype=np.uint64), rt.cap, rt.fcap)


@njit(cache=True)
def _mid(rt, n, k):
    """Row of route ``k``'s drawn segment in draw ``n`` (-1: none)."""
    return n * rt.n_mid + rt.mid_row[k] if rt.mid_row[k] >= 0 else -1


@njit(cache=True)
def _seg_len(ptr, row):
    return ptr[row + 1] - ptr[row] if row >= 0 else 0


@njit(cache=True)
def _incidence(rt, n, net, sc) -> None:
    """Draw ``n``'s incidence into ``net``: per flow, the kept links of its routes, each
    once (weights of a link crossed by several routes summed in route order, from 0.0, in
    ``sc.lf[_ACC]``, cleared again), then per link its flows. The links stay in the order
    first met: a ring's flow crosses thousands, and keeping them sorted while inserting
    took quadratic time, nearly all of a 1,024-GPU draw. (One loop: a helper called per
    route with the namedtuples cost 3x the whole of it.)"""
    F = len(net.c_ptr) - 1
    acc, mark, c_link = sc.lf[_ACC], sc.li[_ACC_MARK], net.c_link
    e = 0
    for f in range(F):
        first = e
        net.c_ptr[f] = e
        for q in range(rt.fr_ptr[f], rt.fr_ptr[f + 1]):
            k = rt.fr_route[q]
            for s in range(3):  # the fixed segment before, the drawn one, the fixed one after
                ptr, links, row = rt.fixed_ptr, rt.fixed_links, rt.pre[k] if s == 0 else rt.post[k]
                if s == 1:
                    row = _mid(rt, n, k)
                    ptr, links = rt.mid_ptr, rt.mid_links
                lo, hi = (ptr[row], ptr[row + 1]) if row >= 0 else (0, 0)
                for p in range(lo, hi):
                    x = links[p]
                    if rt.keep[x]:
                        if not mark[x]:
                            mark[x] = 1
                            c_link[e] = x
                            e += 1
                        acc[x] += rt.weight[k]
        for i in range(first, e):
            net.c_coef[i] = acc[c_link[i]]
            acc[c_link[i]] = 0.0
            mark[c_link[i]] = 0
    net.c_ptr[F] = e
    _link_flows(net, e)


@njit(cache=True)
def _link_flows(net, e) -> None:
    """Per link its flows and weights (``r_ptr``/``r_flow``/``r_coef``): a counting sort of
    the ``e`` entries; and a hash of them (``r_hash``)."""
    r_ptr = net.r_ptr
    r_ptr[:] = 0
    net.r_hash[:] = 0
    bits = net.c_coef.view(np.uint64)
    for i in range(e):
        r_ptr[net.c_link[i] + 1] += 1
    for x in range(len(r_ptr) - 1):
        r_ptr[x + 1] += r_ptr[x]
    for f in range(len(net.c_ptr) - 1):
        for i in range(net.c_ptr[f], net.c_ptr[f + 1]):
            x = net.c_link[i]
            net.r_flow[r_ptr[x]] = f
            net.r_coef[r_ptr[x]] = net.c_coef[i]
            net.r_hash[x] = _mix(net.r_hash[x] + (bits[i] ^ (np.uint64(f) * _GOLDEN)))
            r_ptr[x] += 1
    for x in range(len(r_ptr) - 1, 0, -1):
        r_ptr[x] = r_ptr[x - 1]
    r_ptr[0] = 0


@njit(cache=True)
def _merge_twins(net, table, drop) -> None:
    """Leave out of the incidence every link whose flows and weights are those of a kept
    link (its twin) of no more capacity: a ring's flow crosses thousands of links, most of
    them twins (at 1,024 GPUs ~65,000 entries over ~7,000 links, ~400 distinct), and
    max-min passes over every entry at every event. Exact: twins' loads and weight sums
    are the same sums in the same order, so the kept twin's spare capacity and share are
    never above the other's (float rounding is monotone); it is on the same flows'
    paths, so each flow's bottleneck share stays; a link with no flow held lower
    elsewhere makes its twin such a link too, so the same flows freeze; and a twin
    saturated after a finish means the kept one is too, with the same top rate.
    ``table`` (a power of two long, at least twice the links): open addressing by hash,
    each slot the kept link of its twins (the least capacity, the first of equals);
    ``drop``: per link whether it is left out (all False again on return)."""
    table[:] = -1
    mask = np.uint64(len(table) - 1)
    n_drop = 0
    for x in range(len(net.cap)):
        if net.r_ptr[x + 1] == net.r_ptr[x]:
            continue
        i = net.r_hash[x] & mask
        while table[i] >= 0:
            y = table[i]
            if net.r_hash[y] == net.r_hash[x] and _twins(net, x, y):
                break
            i = (i + np.uint64(1)) & mask
        y = table[i]
        if y < 0:
            table[i] = x
            continue
        if net.cap[x] < net.cap[y]:
            table[i], x = x, y
        drop[x] = True
        n_drop += 1
    if n_drop:
        _drop_links(net, drop)
        drop[:] = False


@njit(cache=True)
def _twins(net, a, b) -> bool:
    """Whether links ``a`` and ``b`` carry the same flows with the same weights."""
    n = net.r_ptr[a + 1] - net.r_ptr[a]
    if net.r_ptr[b + 1] - net.r_ptr[b] != n:
        return False
    for i in range(n):
        p, q = net.r_ptr[a] + i, net.r_ptr[b] + i
        if net.r_flow[p] != net.r_flow[q] or net.r_coef[p] != net.r_coef[q]:
            return False
    return True


@njit(cache=True)
def _drop_links(net, drop) -> None:
    """The incidence without the entries of the links ``drop`` marks (order kept)."""
    e = start = 0
    for f in range(len(net.c_ptr) - 1):
        end = net.c_ptr[f + 1]
        net.c_ptr[f] = e
        for i in range(start, end):
            if not drop[net.c_link[i]]:
                net.c_link[e], net.c_coef[e] = net.c_link[i], net.c_coef[i]
                e += 1
        start = end
    net.c_ptr[len(net.c_ptr) - 1] = e
    _link_flows(net, e)


@njit(cache=True)
def _mix(z):
    """splitmix64's finaliser (Steele, Lea & Flood, OOPSLA 2014): a 64-bit hash step."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def new_scratch(L, F, E):
    """A :class:`Scratch` for ``L`` links, ``F`` flows and ``E`` incidence entries."""
    return Scratch(np.zeros((5, L)), np.zeros((5, L), dtype=np.int64),
                   np.empty(E, dtype=np.int64), np.empty(E, dtype=np.int64), np.empty(E),
                   np.zeros((4, F)), np.empty(F, dtype=np.int64), np.empty(F, dtype=np.int64),
                   np.zeros(1, dtype=np.int64))


@njit(cache=True)
def _new_state(net, dag):
    F = len(dag.size)
    st = State(dag.size.copy(), np.zeros(F), np.zeros(len(net.cap)),
               np.full(F, -1, dtype=np.int64), np.full(F, -1, dtype=np.int64),
               np.full(F, NEVER, dtype=np.int64), np.full(F, NEVER, dtype=np.int64),
               dag.ndeps.copy(), np.empty(F, dtype=np.int64), np.empty(F, dtype=np.int64),
               np.zeros(2, dtype=np.int64))
    for f in range(F):
        if dag.ndeps[f] == 0:
            st.start_at[f] = dag.fstart[f]
            _push(st, f)
    return st


@njit(cache=True)
def _run_one(net, dag, st, sc) -> None:
    """One draw from time 0 until nothing is left to happen."""
    nfin = 0  # flows finished since the last rates (``sc.fin``)
    restart = True  # a flow started: rates from scratch
    t = t_adv = 0  # ``remaining`` is up to date at t_adv
    t_data = NEVER
    while True:
        if restart or nfin:
            _advance(st, t - t_adv)
            t_adv = t
            if restart:
                _rates_from_scratch(net, st, sc, nfin)
            else:
                _rates_after_finish(net, st, sc, nfin)
            restart, nfin = False, 0
            t_data = _next_data_done(st, t)
        t_next = min(t_data, _next_event(st))
        if t_next == NEVER:
            return
        t = t_next
        if t == t_data:
            _advance(st, t - t_adv)
            t_adv = t
            nfin = _last_bytes(st, dag.lat, t, sc.fin)
            if nfin == 0:  # rounding left a sliver: wait for it
                t_data = _next_data_done(st, t)
        restart |= _discrete_events(st, dag, t)


# --------------------------------------------------------------------------------------
# time: bytes sent, last bytes, starts and completions
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _advance(st, dt) -> None:
    """Move every running flow forward by ``dt`` ns (never past its last byte)."""
    if dt <= 0:
        return
    for i in range(st.n[_RUN]):
        f = st.run[i]
        r = st.rate[f]
        if r > 0:
            rem = st.remaining[f]
            step = min(r * dt / 8e9 if np.isfinite(r) else rem, rem)
            st.remaining[f] = max(rem - step, 0.0)


@njit(cache=True)
def _next_data_done(st, t):
    """When the first running flow sends its last byte (``NEVER`` if none runs)."""
    first = np.inf
    for i in range(st.n[_RUN]):
        f = st.run[i]
        r = st.rate[f]
        if r > 0:
            first = min(first, 0.0 if np.isinf(r) else st.remaining[f] * 8e9 / r)
    if not np.isfinite(first):
        return NEVER
    return t + np.int64(np.ceil(first - 1e-6))


@njit(cache=True)
def _last_bytes(st, lat, t, fin) -> int:
    """Running flows whose last byte left by ``t`` stop and complete ``lat`` later; they
    go to ``fin`` (ascending); return how many."""
    k = kept = 0
    for i in range(st.n[_RUN]):
        f = st.run[i]
        r = st.rate[f]
        if r > 0 and (st.remaining[f] <= max(r, 1.0) * 1e-9 / 8 + 1e-9 or np.isinf(r)):
            st.remaining[f] = 0.0
            st.complete_at[f] = t + lat[f]
            _push(st, f)
            fin[k] = f
            k += 1
        else:
            st.run[kept] = f
            kept += 1
    st.n[_RUN] = kept
    return k


@njit(cache=True)
def _next_event(st):
    """The earliest start or completion due (``NEVER`` if none)."""
    t = NEVER
    for i in range(st.n[_PEND]):
        f = st.pend[i]
        t = min(t, st.start_at[f], st.complete_at[f])
    return t


@njit(cache=True)
def _discrete_events(st, dag, t) -> bool:
    """Starts and completions due at ``t``, with those they trigger at ``t``; return
    whether a flow with bytes to send started. (All happen at ``t``: their order changes
    nothing.)"""
    started = False
    i = 0
    while i < st.n[_PEND]:
        f = st.pend[i]
        if st.start_at[f] <= t:
            st.start[f] = t
            st.start_at[f] = NEVER
            if st.remaining[f] <= 0:  # nothing to send: completes after its latency
                st.complete_at[f] = t + dag.lat[f]
            else:
                _insert_running(st, f)
                started = True
        if st.complete_at[f] <= t:
            st.finish[f] = t
            st.complete_at[f] = NEVER
            _release(st, dag, f, t)
        if st.start_at[f] == NEVER and st.complete_at[f] == NEVER:
            st.n[_PEND] -= 1  # nothing due any more: swap the last one in
            st.pend[i] = st.pend[st.n[_PEND]]
        else:
            i += 1
    return started


@njit(cache=True)
def _release(st, dag, f, t) -> None:
    """``f`` completed at ``t``: its dependents with no dependency left may start."""
    for p in range(dag.dptr[f], dag.dptr[f + 1]):
        g = dag.dependents[p]
        st.ndeps[g] -= 1
        if st.ndeps[g] == 0:
            st.start_at[g] = max(t, dag.fstart[g])
            _push(st, g)


@njit(cache=True)
def _push(st, f) -> None:
    st.pend[st.n[_PEND]] = f
    st.n[_PEND] += 1


@njit(cache=True)
def _insert_running(st, f) -> None:
    """Add ``f`` to the running flows, keeping them ascending (max-min sums over them in
    this order)."""
    i = st.n[_RUN]
    while i > 0 and st.run[i - 1] > f:
        st.run[i] = st.run[i - 1]
        i -= 1
    st.run[i] = f
    st.n[_RUN] += 1


# --------------------------------------------------------------------------------------
# rates
# --------------------------------------------------------------------------------------


@njit(cache=True)
def _rates_from_scratch(net, st, sc, nfin) -> None:
    """Max-min rates of the running flows on the whole capacity. Every other flow's rate
    is already 0 but those that just finished."""
    for i in range(st.n[_RUN]):
        st.rate[st.run[i]] = 0.0
    for i in range(nfin):
        st.rate[sc.fin[i]] = 0.0
    st.load[:] = 0.0
    fill_rates(net, st, sc, st.run[:st.n[_RUN]])


@njit(cache=True)
def _rates_after_finish(net, st, sc, nfin) -> None:
    """Rates after flows ``fin`` left (no start): in progressive filling nothing changes
    below ``lam``, the lowest level at which a link they left was saturated (the highest
    rate on it), so only the flows at or above it are re-filled, on what the others leave
    (:func:`icefabric.engine.flow._rates_after_finish`)."""
    fin = sc.fin[:nfin]
    refill = sc.refill[:_refill(net, st, sc, fin)]
    accumulate_load(net, st, sc, fin)
    accumulate_load(net, st, sc, refill)
    apply_load(st, sc, -1.0)
    st.rate[fin] = 0.0
    st.rate[refill] = 0.0
    fill_rates(net, st, sc, refill)


@njit(cache=True)
def _refill(net, st, sc, fin) -> int:
    """Running flows whose rate may change now that ``fin`` left, into ``sc.refill``
    (ascending); return how many."""
    mark, seen = sc.li[_ACC_MARK], sc.li[_ACC_LIST]
    k = 0
    lam = np.inf
    sat = False
    for f in fin:
        for p in range(net.c_ptr[f], net.c_ptr[f + 1]):
            x = net.c_link[p]
            if mark[x]:
                continue
            mark[x] = 1
            seen[k] = x
            k += 1
            lo, hi = net.r_ptr[x], net.r_ptr[x + 1]
            if st.load[x] >= net.cap[x] * (1 - _SAT_EPS) and hi > lo:
                sat = True
                top = st.rate[net.r_flow[lo]]  # the highest rate on the link
                for q in range(lo + 1, hi):
                    top = max(top, st.rate[net.r_flow[q]])
                lam = min(lam, top)
    mark[seen[:k]] = 0
    if not sat:
        return 0
    k = 0
    for i in range(st.n[_RUN]):
        f = st.run[i]
        if st.rate[f] >= lam * (1 - _REL_EPS):
            sc.refill[k] = f
            k += 1
    return k


@njit(cache=True)
def accumulate_load(net, st, sc, flows) -> None:
    """Add ``coef * rate`` of every entry of ``flows`` (infinite rates count 0) to its
    link's sum in ``sc.lf[_ACC]``, in entry order (as ``np.bincount`` summed)."""
    acc, mark, seen = sc.lf[_ACC], sc.li[_ACC_MARK], sc.li[_ACC_LIST]
    for f in flows:
        r = st.rate[f] if np.isfinite(st.rate[f]) else 0.0
        for p in range(net.c_ptr[f], net.c_ptr[f + 1]):
            x = net.c_link[p]
            if not mark[x]:
                mark[x] = 1
                seen[sc.nacc[0]] = x
                sc.nacc[0] += 1
            acc[x] += net.c_coef[p] * r


@njit(cache=True)
def apply_load(st, sc, sign) -> None:
    """Add (``sign`` 1) or subtract (-1) the accumulated sums to the link loads, each
    summed first (``load -= np.bincount(...)``), and clear them."""
    acc, mark, seen = sc.lf[_ACC], sc.li[_ACC_MARK], sc.li[_ACC_LIST]
    for i in range(sc.nacc[0]):
        x = seen[i]
        if sign > 0:
            st.load[x] += acc[x]
        else:
            st.load[x] -= acc[x]
        acc[x] = 0.0
        mark[x] = 0
    sc.nacc[0] = 0


@njit(cache=True)
def fill_rates(net, st, sc, flows) -> None:
    """Max-min rates of ``flows`` (ascending) on what the other running flows leave."""
    if len(flows) == 0:
        return
    use, used, rem = sc.li[_USE_MARK], sc.li[_USE_LIST], sc.lf[_REM]
    k = nu = 0
    for i, f in enumerate(flows):
        for p in range(net.c_ptr[f], net.c_ptr[f + 1]):
            x = net.c_link[p]
            if net.c_coef[p] > 0:  # (maxmin_entries drops the others)
                sc.e_link[k], sc.e_who[k], sc.e_coef[k] = x, i, net.c_coef[p]
                k += 1
            if not use[x]:
                use[x] = 1
                used[nu] = x
                nu += 1
                rem[x] = max(net.cap[x] - st.load[x], 0.0)
    _maxmin(sc, k, used[:nu], flows, net.fcap)
    for i in range(len(flows)):
        st.rate[flows[i]] = sc.ff[_RATE, i]
    use[used[:nu]] = 0
    accumulate_load(net, st, sc, flows)
    apply_load(st, sc, 1.0)


@njit(cache=True)
def _maxmin(sc, k, used, flows, fcap) -> None:
    """:func:`icefabric.dataplane.fairness.maxmin_entries` on the first ``k`` entries
    ``sc.e_*`` (grouped by flow, ``e_who`` the position in ``flows``) over the spare
    capacity ``sc.lf[_REM]`` of the links ``used`` (consumed); rates into
    ``sc.ff[_RATE]``. Each round freezes the flows of every bottleneck link (no flow of
    it is held lower elsewhere) and every flow at its cap."""
    rate, fc = sc.ff[_RATE], sc.ff[_FCAP]
    s, share, dec, rem = sc.lf[_SUM], sc.lf[_SHARE], sc.lf[_DEC], sc.lf[_REM]
    below = sc.li[_BELOW]
    for i in range(len(flows)):
        fc[i] = fcap[flows[i]]
        rate[i] = fc[i]  # a flow on no link runs at its cap
    while k:
        for x in used:
            s[x], below[x], dec[x] = 0.0, 0, 0.0
        for e in range(k):
            s[sc.e_link[e]] += sc.e_coef[e]
        for x in used:
            share[x] = rem[x] / s[x] if s[x] > 0 else np.inf
        _mark_below(sc, k)
        k = _freeze(sc, k)
        for x in used:
            rem[x] = max(rem[x] - dec[x], 0.0)


@njit(cache=True)
def _mark_below(sc, k) -> None:
    """Per flow (a run of entries), the smallest share on its path ``_PMIN`` and its level
    ``_M`` (that or its cap); per link, how many of its flows are held lower elsewhere."""
    link, who = sc.e_link, sc.e_who
    share, below = sc.lf[_SHARE], sc.li[_BELOW]
    m, pmin, fc = sc.ff[_M], sc.ff[_PMIN], sc.ff[_FCAP]
    e = 0
    while e < k:
        w, end = who[e], e
        p = np.inf
        while end < k and who[end] == w:
            p = min(p, share[link[end]])
            end += 1
        pmin[w] = p
        m[w] = min(p, fc[w])
        for j in range(e, end):
            if m[w] < share[link[j]] * (1 - _REL_EPS):
                below[link[j]] += 1
        e = end


@njit(cache=True)
def _freeze(sc, k) -> int:
    """Freeze every flow on a bottleneck link (none of its flows held lower elsewhere) or
    at its cap: its rate is its level, its use comes off its links' spare (``_DEC``); the
    other flows' entries move to the front; return how many."""
    link, who, coef = sc.e_link, sc.e_who, sc.e_coef
    rate, m, pmin, fc = sc.ff[_RATE], sc.ff[_M], sc.ff[_PMIN], sc.ff[_FCAP]
    below, dec = sc.li[_BELOW], sc.lf[_DEC]
    kept = e = 0
    while e < k:
        w, end = who[e], e
        frozen = fc[w] <= pmin[w] * (1 + _REL_EPS)
        while end < k and who[end] == w:
            frozen |= below[link[end]] == 0
            end += 1
        if frozen:
            rate[w] = m[w]
            for j in range(e, end):
                dec[link[j]] += coef[j] * rate[w]
        else:
            for j in range(e, end):
                link[kept], who[kept], coef[kept] = link[j], w, coef[j]
                kept += 1
        e = end
    return kept


@njit(cache=True)
def dominated_rows(indptr, indices, data, pair_a, pair_b, n_rows):  # pragma: no cover
    """Rows ``a`` of a CSR (indices sorted in each row) dropped by walking the candidate
    pairs ``(pair_a[i], pair_b[i])`` in order: ``a`` is dropped when neither row is
    dropped yet and every entry of row ``a`` is <= row ``b``'s in the same column (0
    where ``b`` has none). :func:`icefabric.engine.batch.redundant_links`' rule, which
    sliced two scipy rows per pair (19 s of a 1,024-GPU ``--draws 10`` run)."""
    dropped = np.zeros(n_rows, dtype=np.bool_)
    for i in range(len(pair_a)):
        a, b = pair_a[i], pair_b[i]
        if dropped[a] or dropped[b]:
            continue
        j, j_end = indptr[b], indptr[b + 1]
        ok = True
        for k in range(indptr[a], indptr[a + 1]):
            col = indices[k]
            while j < j_end and indices[j] < col:
                j += 1
            vb = data[j] if j < j_end and indices[j] == col else 0.0
            if data[k] > vb:
                ok = False
                break
        if ok:
            dropped[a] = True
    return dropped


@njit(cache=True)
def varying_rows(ptr, links, n_sets, n_links):  # pragma: no cover - compiled
    """A CSR of ``n_sets`` blocks of M rows (a route set's drawn segments each): per row
    of a block, whether its links differ in some block from the first's; per link
    whether it is on such a row in some block. What
    :func:`icefabric.engine.batch._varying_links` gathered with numpy over every set
    (a second of a 1,024-GPU run's 100 draws)."""
    M = (len(ptr) - 1) // n_sets
    differs = np.zeros(M, dtype=np.bool_)
    varying = np.zeros(n_links, dtype=np.bool_)
    for m in range(M):
        lo, hi = ptr[m], ptr[m + 1]
        for n in range(1, n_sets):
            r = n * M + m
            if ptr[r + 1] - ptr[r] != hi - lo:
                differs[m] = True
                break
            for i in range(hi - lo):
                if links[ptr[r] + i] != links[lo + i]:
                    differs[m] = True
                    break
            if differs[m]:
                break
        if differs[m]:
            for n in range(n_sets):
                r = n * M + m
                varying[links[ptr[r]:ptr[r + 1]]] = True
    return differs, varying
