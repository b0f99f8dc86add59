"""The flow engine over many route sets of one problem at once (ECMP draws).

ECMP draws (:mod:`icefabric.experiment.draws`) run the same flows, sizes, dependencies and
capacities over N different routings. Running :func:`~icefabric.engine.flow.run_flow` N
times costs N times its per-event Python overhead; here the N problems advance in lockstep
instead: iteration ``i`` processes the ``i``-th event of every problem, each at its own
time, and one max-min computation serves them all. The problems are the diagonal blocks of
one link-by-flow incidence, and max-min fairness separates over independent blocks (each
progressive-filling round of :func:`~icefabric.dataplane.fairness.maxmin_rates` looks at a
link's own flows only), so every problem gets exactly its own rates.

Same event rules as :func:`~icefabric.engine.flow.run_flow` (a flow's last byte, its
completion ``latency_ns`` later, dependents released then, scheduled starts; integer-ns
times rounded up the same way) and the same rate updates per problem (from scratch after a
start, an incremental refill after finishes). Links that can never limit a rate are left
out of max-min (:func:`redundant_links`). Start and finish times equal ``run_flow``'s to the
nanosecond (tested with hypothesis on random problems and on ECMP draws). Link failures are
not supported (the caller runs such scenarios draw by draw).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from icefabric.csr import gather
from icefabric.engine.flow import _entries
from icefabric.engine.maxmin import maxmin_entries
from icefabric.engine.problem import EngineError, SimProblem

_NEVER = np.iinfo(np.int64).max


def run_flow_batch(problem: SimProblem,
                   routes: Sequence[tuple[np.ndarray, np.ndarray]]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Run ``problem`` once per route set; return ``(start_ns, finish_ns)``, shape (N, F).

    ``routes[n]`` is ``(indptr, links)``: the link list of every route of ``problem`` (same
    route count, flows and weights) in draw ``n``.
    """
    P = problem
    if P.failures:
        raise EngineError("run_flow_batch runs problems without link failures only")
    if any(len(ip) != P.n_routes + 1 for ip, _ in routes):
        raise EngineError("every route set must have one link list per route of the problem")
    N, F = len(routes), P.n_flows
    b = _Rates(_block_incidence(P, routes, redundant_links(P, routes)),
               np.tile(P.link_capacity_bps.astype(np.float64), N),
               np.tile(P.flow_rate_cap_bps, N), N, F)
    prob = b.prob
    flow = np.tile(np.arange(F), N)
    lat = P.flow_latency_ns[flow]
    fstart = P.flow_start_ns[flow]
    ndeps0 = np.diff(P.dep_indptr).astype(np.int64)
    order = np.argsort(P.dep_indices, kind="stable")
    dependents = np.repeat(np.arange(F), ndeps0)[order]
    dptr = np.zeros(F + 1, dtype=np.int64)
    np.cumsum(np.bincount(P.dep_indices, minlength=F), out=dptr[1:])

    ndeps = np.tile(ndeps0, N)
    remaining = np.tile(P.flow_size_bytes.astype(np.float64), N)
    rate, active = b.rate, b.active
    start = np.full(N * F, -1, dtype=np.int64)
    finish = np.full(N * F, -1, dtype=np.int64)
    start_at = np.where(ndeps == 0, fstart, _NEVER)
    complete_at = np.full(N * F, _NEVER, dtype=np.int64)
    t = np.zeros(N, dtype=np.int64)
    t_adv = np.zeros(N, dtype=np.int64)
    t_data = np.full(N, _NEVER, dtype=np.int64)
    while True:
        dirty = b.dirty()
        if dirty.any():
            _advance(remaining, rate, prob, t - t_adv, dirty, active)
            t_adv[dirty] = t[dirty]
            b.recompute()
            t_data[dirty] = _next_data_done(remaining, rate, active, prob, t)[dirty]
        t_event = np.minimum(start_at, complete_at).reshape(N, F).min(axis=1)
        t_next = np.minimum(t_data, t_event)
        live = t_next < _NEVER
        if not live.any():
            break
        t[live] = t_next[live]
        data = live & (t == t_data)
        if data.any():
            _advance(remaining, rate, prob, t - t_adv, data, active)
            t_adv[data] = t[data]
            run = active & (rate > 0) & data[prob]
            r = rate[run]
            fin = np.flatnonzero(run)[(remaining[run] <= np.maximum(r, 1.0) * 1e-9 / 8 + 1e-9)
                                      | np.isinf(r)]
            remaining[fin] = 0.0
            active[fin] = False
            complete_at[fin] = t[prob[fin]] + lat[fin]
            b.finished(fin)
            sliver = data & ~b.dirty()  # rounding left a sliver: wait for it
            t_data[sliver] = _next_data_done(remaining, rate, active, prob, t)[sliver]
        _discrete_events(t[prob], start_at, complete_at, start, finish, remaining, b,
                         lat, fstart, ndeps, (dependents, dptr, F))
    if (finish < 0).any():
        raise EngineError(f"{int((finish < 0).sum())} flows never finished in the batch "
                          f"(dependency cycle?)")
    return start.reshape(N, F), finish.reshape(N, F)


class _Rates:
    """Max-min rates of the running flows of every problem, recomputed like ``run_flow``
    does: from scratch after a flow started, else (only flows finished) by re-filling the
    flows at or above the lowest level at which a link they left was saturated
    (:func:`icefabric.engine.flow._rates_after_finish`, per problem)."""

    def __init__(self, Ac: sp.csc_matrix, cap: np.ndarray, fcap: np.ndarray, N: int, F: int):
        self.Ac, self.Ar, self.cap, self.fcap = Ac, Ac.tocsr(), cap, fcap
        self.N, self.F, self.L = N, F, len(cap) // N
        self.prob = np.repeat(np.arange(N), F)
        self.rate = np.zeros(N * F)
        self.active = np.zeros(N * F, dtype=bool)
        self.load = np.zeros(len(cap))
        self.restart = np.ones(N, dtype=bool)  # a flow started: recompute from scratch
        self.freed: list[np.ndarray] = []  # flows that finished since the last rates

    def dirty(self) -> np.ndarray:
        d = self.restart.copy()
        for f in self.freed:
            d[self.prob[f]] = True
        return d

    def started(self, flows: np.ndarray) -> None:
        self.restart[self.prob[flows]] = True

    def finished(self, flows: np.ndarray) -> None:
        if len(flows):
            self.freed.append(flows)

    def recompute(self) -> None:
        N, F, L = self.N, self.F, self.L
        fin = np.concatenate(self.freed) if self.freed else np.zeros(0, np.int64)
        fin = fin[~self.restart[self.prob[fin]]]
        refill = self._refill(fin)
        gone = np.concatenate([fin, refill])
        links, vals, n = _entries(self.Ac, gone)
        self.load -= np.bincount(links, vals * np.repeat(_finite(self.rate[gone]), n),
                                 minlength=len(self.load))
        self.rate[gone] = 0.0
        full = np.flatnonzero(self.restart)
        self.rate.reshape(N, F)[full] = 0.0
        self.load.reshape(N, L)[full] = 0.0
        mine = self.active.reshape(N, F)[full]
        rows, cols = np.nonzero(mine)
        idx = np.concatenate([full[rows] * F + cols, refill])
        if len(idx):
            links, coef, n = _entries(self.Ac, idx)
            used = np.zeros(len(self.cap), dtype=bool)  # the links in play, numbered 0..
            used[links] = True
            ids = np.flatnonzero(used)
            local = np.cumsum(used) - 1
            spare = np.maximum(self.cap[ids] - self.load[ids], 0.0)
            self.rate[idx] = maxmin_entries(local[links], np.repeat(np.arange(len(idx)), n),
                                            coef, spare, self.fcap[idx])
            self.load += np.bincount(links, coef * np.repeat(_finite(self.rate[idx]), n),
                                     minlength=len(self.load))
        self.restart[:] = False
        self.freed = []

    def _refill(self, fin: np.ndarray) -> np.ndarray:
        """Running flows whose rate may change now that ``fin`` left (problems without a
        start only)."""
        if not len(fin):
            return np.zeros(0, np.int64)
        links, _, _ = _entries(self.Ac, fin)
        touched = np.unique(links)
        sat = touched[self.load[touched] >= self.cap[touched] * (1 - 1e-6)]
        if not len(sat):
            return np.zeros(0, np.int64)
        flows, _, n = _entries(self.Ar, sat)
        first = (np.cumsum(n) - n)[n > 0]
        top = np.maximum.reduceat(self.rate[flows], first)  # highest rate on each link
        lam = np.full(self.N, np.inf)
        np.minimum.at(lam, sat[n > 0] // self.L, top)
        return np.flatnonzero(self.active & (self.rate >= lam[self.prob] * (1 - 1e-9)))


def _discrete_events(tf, start_at, complete_at, start, finish, remaining, b: _Rates,
                     lat, fstart, ndeps, deps) -> None:
    """Starts and completions due at every problem's time ``tf`` (per flat flow), including
    those they trigger at the same time."""
    dependents, dptr, F = deps
    while True:
        s = np.flatnonzero(start_at <= tf)
        c = np.flatnonzero(complete_at <= tf)
        if not len(s) and not len(c):
            return
        start[s] = tf[s]
        start_at[s] = _NEVER
        empty = s[remaining[s] <= 0]
        complete_at[empty] = tf[empty] + lat[empty]
        go = s[remaining[s] > 0]
        b.active[go] = True
        b.started(go)
        finish[c] = tf[c]
        complete_at[c] = _NEVER
        f = c % F
        n = dptr[f + 1] - dptr[f]
        if n.sum():
            g = np.repeat(c - f, n) + dependents[gather(dptr[f], n)]
            np.subtract.at(ndeps, g, 1)
            ready = np.unique(g[ndeps[g] == 0])
            start_at[ready] = np.maximum(tf[ready], fstart[ready])


def _block_incidence(P: SimProblem, routes, drop: np.ndarray) -> sp.csc_matrix:
    """Link-by-flow incidence with problem ``n``'s links and flows offset by ``n*L``,
    ``n*F``: the problems as diagonal blocks. Links ``drop`` are left out."""
    L, F = P.n_links, P.n_flows
    lens = [np.diff(ip) for ip, _ in routes]
    rows = np.concatenate([links + n * L for n, (_, links) in enumerate(routes)])
    cols = np.concatenate([np.repeat(P.route_flow + n * F, k) for n, k in enumerate(lens)])
    vals = np.concatenate([np.repeat(P.route_weight, k) for k in lens])
    keep = ~np.isin(rows % L, drop)
    A = sp.coo_matrix((vals[keep], (rows[keep], cols[keep])),
                      shape=(len(routes) * L, len(routes) * F)).tocsc()
    A.sum_duplicates()
    return A


def redundant_links(P: SimProblem, routes) -> np.ndarray:
    """Links that can never limit a rate in any of the route sets: every flow crossing
    such a link ``l`` also crosses a kept link ``m`` (with at least the same coefficient)
    of no more capacity, in every route set, so ``m`` saturates no later than ``l``, and
    at the latest together with it. Leaving ``l`` out of max-min gives the same rates
    (typically most intra-server links: a GPU's PCIe path carries the flows of its NIC)
    and saves most of the work. Only links on routes that are the same in every route set
    are considered."""
    ip0, l0 = routes[0]
    same = np.ones(P.n_routes, dtype=bool)
    for ip, links in routes[1:]:
        same &= np.diff(ip) == np.diff(ip0)
        ok = np.flatnonzero(same)
        n = np.diff(ip0)[ok]
        diff = links[gather(ip[ok], n)] != l0[gather(ip0[ok], n)]
        same[ok] = np.bincount(np.repeat(np.arange(len(ok)), n), diff, len(ok)) == 0
    varying = np.zeros(P.n_links, dtype=bool)
    for ip, links in routes:
        varying[links[gather(ip[:-1][~same], np.diff(ip)[~same])]] = True
    A = P.incidence().tocsr()
    A = A[np.flatnonzero(~varying)]  # fixed links x flows
    fixed = np.flatnonzero(~varying)
    pattern = (A > 0).astype(np.float64)
    overlap = (pattern @ pattern.T).tocoo()
    count = np.asarray(pattern.sum(axis=1)).ravel()
    cap = P.link_capacity_bps[fixed]
    cand = (overlap.row != overlap.col) & (overlap.data == count[overlap.row]) & \
        (cap[overlap.row] >= cap[overlap.col]) & (count[overlap.row] > 0)
    drop: list[int] = []
    dropped = np.zeros(len(fixed), dtype=bool)
    for a, b in zip(overlap.row[cand].tolist(), overlap.col[cand].tolist()):
        if dropped[a] or dropped[b]:
            continue
        ra, rb = A[a], A[b]
        if np.all(ra.data <= rb[:, ra.indices].toarray().ravel()):
            dropped[a] = True
            drop.append(int(fixed[a]))
    return np.asarray(drop, dtype=np.int64)


def _advance(remaining, rate, prob, dt, which, active) -> None:
    """Move every running flow of the problems ``which`` forward by its problem's ``dt``."""
    m = np.flatnonzero(active)
    m = m[which[prob[m]] & (rate[m] > 0) & (dt[prob[m]] > 0)]
    if not len(m):
        return
    r, rem = rate[m], remaining[m]
    step = np.minimum(np.where(np.isfinite(r), r * dt[prob[m]] / 8e9, rem), rem)
    remaining[m] = np.maximum(rem - step, 0.0)


def _finite(x: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(x), x, 0.0)


def _next_data_done(remaining, rate, active, prob, t) -> np.ndarray:
    """Per problem: when the first of its running flows sends its last byte."""
    run = np.flatnonzero(active)
    r = rate[run]
    run, r = run[r > 0], r[r > 0]
    dt = np.where(np.isinf(r), 0.0, remaining[run] * 8e9 / np.where(np.isinf(r), 1.0, r))
    first = np.full(len(t), np.inf)
    np.minimum.at(first, prob[run], dt)
    out = np.full(len(t), _NEVER, dtype=np.int64)
    ok = np.isfinite(first)
    out[ok] = t[ok] + np.ceil(first[ok] - 1e-6).astype(np.int64)
    return out
