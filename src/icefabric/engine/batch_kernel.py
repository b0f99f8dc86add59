"""Compiled loop of the batched flow engine (:mod:`icefabric.engine.batch` sets it up).

Each draw is a small problem (tens of running flows), so its events cost microseconds in
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

Incidence arrays (block-diagonal over the draws, local ids within a draw):
``c_ptr[n*F + f]`` starts flow ``f`` of draw ``n``'s entries ``(c_link, c_coef)`` (links
ascending); ``r_ptr[n*L + l]`` starts link ``l``'s flows ``r_flow``.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

NEVER = np.iinfo(np.int64).max
_REL_EPS = 1e-9  # fairness._REL_EPS: bottleneck and cap tolerance
_SAT_EPS = 1e-6  # a link within this fraction of its capacity is saturated (flow.py)

#: every draw's routing: see the module docstring; ``cap`` (L,) and ``fcap`` (F,) are
#: the same in every draw
Net = namedtuple("Net", ["c_ptr", "c_link", "c_coef", "r_ptr", "r_flow", "cap", "fcap"])
#: the flows: size, latency, earliest start, dependency counts, dependents (CSR)
Dag = namedtuple("Dag", ["size", "lat", "fstart", "ndeps", "dptr", "dependents"])
#: one draw's evolving state (``ndeps`` counts the dependencies not yet complete)
State = namedtuple("State", ["remaining", "rate", "load", "active", "start", "finish",
                             "start_at", "complete_at", "ndeps"])


@njit(cache=True)
def run_draws(net, dag, n_draws, start, finish) -> int:
    """Run every draw; fill ``start`` and ``finish`` (shape (draws, F)); return how many
    flows never finished (a dependency cycle)."""
    stuck = 0
    for n in range(n_draws):
        st = _new_state(net, dag)
        _run_one(n, net, dag, st)
        start[n, :] = st.start
        finish[n, :] = st.finish
        stuck += np.sum(st.finish < 0)
    return stuck


@njit(cache=True)
def _new_state(net, dag):
    F = len(dag.size)
    start_at = np.full(F, NEVER, dtype=np.int64)
    for f in range(F):
        if dag.ndeps[f] == 0:
            start_at[f] = dag.fstart[f]
    return State(dag.size.copy(), np.zeros(F), np.zeros(len(net.cap)),
                 np.zeros(F, dtype=np.bool_), np.full(F, -1, dtype=np.int64),
                 np.full(F, -1, dtype=np.int64), start_at,
                 np.full(F, NEVER, dtype=np.int64), dag.ndeps.copy())


@njit(cache=True)
def _run_one(n, net, dag, st) -> None:
    """Draw ``n`` from time 0 until nothing is left to happen."""
    fin = np.empty(len(dag.size), dtype=np.int64)  # flows finished since the last rates
    nfin = 0
    restart = True  # a flow started: rates from scratch
    t = t_adv = 0  # ``remaining`` is up to date at t_adv
    t_data = NEVER
    while True:
        if restart or nfin:
            _advance(st, t - t_adv)
            t_adv = t
            if restart:
                _rates_from_scratch(n, net, st)
            else:
                _rates_after_finish(n, net, st, fin[:nfin])
            restart, nfin = False, 0
            t_data = _next_data_done(st, t)
        t_next = min(t_data, min(st.start_at.min(), st.complete_at.min()))
        if t_next == NEVER:
            return
        t = t_next
        if t == t_data:
            _advance(st, t - t_adv)
            t_adv = t
            nfin = _last_bytes(st, dag.lat, t, fin)
            if nfin == 0:  # rounding left a sliver: wait for it
                t_data = _next_data_done(st, t)
        restart |= _discrete_events(st, dag, t)


@njit(cache=True)
def _advance(st, dt) -> None:
    """Move every running flow forward by ``dt`` ns (never past its last byte)."""
    if dt <= 0:
        return
    for f in range(len(st.rate)):
        r = st.rate[f]
        if st.active[f] and r > 0:
            rem = st.remaining[f]
            step = min(r * dt / 8e9 if np.isfinite(r) else rem, rem)
            st.remaining[f] = max(rem - step, 0.0)


@njit(cache=True)
def _next_data_done(st, t):
    """When the first running flow sends its last byte (``NEVER`` if none runs)."""
    first = np.inf
    for f in range(len(st.rate)):
        r = st.rate[f]
        if st.active[f] and r > 0:
            dt = 0.0 if np.isinf(r) else st.remaining[f] * 8e9 / r
            first = min(first, dt)
    if not np.isfinite(first):
        return NEVER
    return t + np.int64(np.ceil(first - 1e-6))


@njit(cache=True)
def _last_bytes(st, lat, t, fin) -> int:
    """Flows whose last byte left by ``t`` stop and complete ``lat`` later; they go to
    ``fin`` (ascending); return how many."""
    k = 0
    for f in range(len(st.rate)):
        r = st.rate[f]
        if st.active[f] and r > 0 and (
                st.remaining[f] <= max(r, 1.0) * 1e-9 / 8 + 1e-9 or np.isinf(r)):
            st.remaining[f] = 0.0
            st.active[f] = False
            st.complete_at[f] = t + lat[f]
            fin[k] = f
            k += 1
    return k


@njit(cache=True)
def _discrete_events(st, dag, t) -> bool:
    """Starts and completions due at ``t``, with those they trigger at ``t``, in rounds;
    return whether a flow with bytes to send started."""
    started = False
    busy = True
    while busy:
        busy = False
        for f in range(len(dag.size)):
            if st.start_at[f] <= t:
                busy = True
                st.start[f] = t
                st.start_at[f] = NEVER
                if st.remaining[f] <= 0:  # nothing to send: completes after its latency
                    st.complete_at[f] = t + dag.lat[f]
                else:
                    st.active[f] = True
                    started = True
        for f in range(len(dag.size)):
            if st.complete_at[f] <= t:
                busy = True
                st.finish[f] = t
                st.complete_at[f] = NEVER
                _release(st, dag, f, t)
    return started


@njit(cache=True)
def _release(st, dag, f, t) -> None:
    """``f`` completed at ``t``: its dependents with no dependency left may start."""
    for p in range(dag.dptr[f], dag.dptr[f + 1]):
        g = dag.dependents[p]
        st.ndeps[g] -= 1
        if st.ndeps[g] == 0:
            st.start_at[g] = max(t, dag.fstart[g])


@njit(cache=True)
def _rates_from_scratch(n, net, st) -> None:
    st.rate[:] = 0.0
    st.load[:] = 0.0
    _fill(n, net, st, np.flatnonzero(st.active))


@njit(cache=True)
def _rates_after_finish(n, net, st, fin) -> None:
    """Rates after flows ``fin`` left (no start): in progressive filling nothing changes
    below ``lam``, the lowest level at which a link they left was saturated (the highest
    rate on it), so only the flows at or above it are re-filled, on what the others leave
    (:func:`icefabric.engine.flow._rates_after_finish`)."""
    refill = _refill(n, net, st, fin)
    gone = np.concatenate((fin, refill))
    lost = _link_sums(n, net, st, gone)
    for x in range(len(lost)):
        st.load[x] -= lost[x]
    st.rate[gone] = 0.0
    _fill(n, net, st, refill)


@njit(cache=True)
def _refill(n, net, st, fin):
    """Running flows whose rate may change now that ``fin`` left (ascending)."""
    F, L = len(st.rate), len(st.load)
    touched = np.zeros(L, dtype=np.bool_)
    for f in fin:
        for p in range(net.c_ptr[n * F + f], net.c_ptr[n * F + f + 1]):
            touched[net.c_link[p]] = True
    lam = np.inf
    for link in range(L):
        if touched[link] and st.load[link] >= net.cap[link] * (1 - _SAT_EPS):
            lo, hi = net.r_ptr[n * L + link], net.r_ptr[n * L + link + 1]
            if hi > lo:
                top = st.rate[net.r_flow[lo]]
                for p in range(lo + 1, hi):
                    top = max(top, st.rate[net.r_flow[p]])
                lam = min(lam, top)
    if lam == np.inf:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(st.active & (st.rate >= lam * (1 - _REL_EPS)))


@njit(cache=True)
def _link_sums(n, net, st, flows):
    """Per link, the sum of ``coef * rate`` over the entries of ``flows`` (infinite rates
    count 0), accumulated in entry order."""
    F = len(st.rate)
    out = np.zeros(len(st.load))
    for f in flows:
        r = st.rate[f] if np.isfinite(st.rate[f]) else 0.0
        for p in range(net.c_ptr[n * F + f], net.c_ptr[n * F + f + 1]):
            out[net.c_link[p]] += net.c_coef[p] * r
    return out


@njit(cache=True)
def _fill(n, net, st, flows) -> None:
    """Max-min rates of ``flows`` (ascending) on what the other running flows leave."""
    if len(flows) == 0:
        return
    F = len(st.rate)
    m = 0
    for f in flows:
        m += net.c_ptr[n * F + f + 1] - net.c_ptr[n * F + f]
    link = np.empty(m, dtype=np.int64)
    who = np.empty(m, dtype=np.int64)  # position in ``flows``
    coef = np.empty(m)
    k = 0
    for i, f in enumerate(flows):
        for p in range(net.c_ptr[n * F + f], net.c_ptr[n * F + f + 1]):
            if net.c_coef[p] > 0:
                link[k], who[k], coef[k] = net.c_link[p], i, net.c_coef[p]
                k += 1
    spare = np.maximum(net.cap - st.load, 0.0)
    st.rate[flows] = _maxmin(link[:k], who[:k], coef[:k], spare, net.fcap[flows])
    gained = _link_sums(n, net, st, flows)
    for x in range(len(gained)):
        st.load[x] += gained[x]


@njit(cache=True)
def _maxmin(link, who, coef, rem, fcap):
    """:func:`icefabric.dataplane.fairness.maxmin_entries` on entries ``(link, who,
    coef)`` grouped by flow (``who`` ascending, ``coef`` > 0), over the links' spare
    capacity ``rem`` (consumed). Each round freezes every bottleneck link's flows (no flow
    of it is held lower elsewhere) and every flow at its cap."""
    F, L = len(fcap), len(rem)
    rate = fcap.copy()  # a flow on no link runs at its cap
    m = np.zeros(F)
    path_min = np.zeros(F)
    while len(who):
        s = np.zeros(L)
        for e in range(len(who)):
            s[link[e]] += coef[e]
        share = np.full(L, np.inf)
        for x in range(L):
            if s[x] > 0:
                share[x] = rem[x] / s[x]
        path_min[who] = np.inf
        for e in range(len(who)):
            path_min[who[e]] = min(path_min[who[e]], share[link[e]])
        below = np.zeros(L, dtype=np.int64)
        for e in range(len(who)):
            f = who[e]
            m[f] = min(path_min[f], fcap[f])
            if m[f] < share[link[e]] * (1 - _REL_EPS):
                below[link[e]] += 1
        freeze = np.zeros(F, dtype=np.bool_)
        for e in range(len(who)):
            f = who[e]
            if below[link[e]] == 0 or fcap[f] <= path_min[f] * (1 + _REL_EPS):
                freeze[f] = True
        done = freeze[who]
        rate[who[done]] = m[who[done]]
        dec = np.zeros(L)
        for e in np.flatnonzero(done):
            dec[link[e]] += coef[e] * rate[who[e]]
        rem = np.maximum(rem - dec, 0.0)
        keep = ~done
        link, who, coef = link[keep], who[keep], coef[keep]
    return rate
