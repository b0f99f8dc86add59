"""Flow-level engine: event-driven, max-min fair rates, recomputed only when the set of
active flows (or routes, after a failure) changes.

Between two events every rate is constant, so the next event is the earliest of: a flow's
last byte (``remaining / rate``), a flow's completion (``latency_ns`` after its last byte,
which releases its dependents), a scheduled start, or a link failure/reroute. Time is
integer nanoseconds; byte counts are floats. Same input, same output (no randomness).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time

import numpy as np
import scipy.sparse as sp
from numba import njit

from icefabric.csr import gather, replace_rows
from icefabric.engine.batch_kernel import (
    Net,
    State,
    accumulate_load,
    apply_load,
    fill_rates,
    new_scratch,
)
from icefabric.engine.grouped import Cols, GroupedIndex, pack_flows, raise_link_peak
from icefabric.engine.problem import EngineError, SimProblem, routes_touching
from icefabric.engine.registry import register_engine
from icefabric.engine.result import CollectiveResult, SimResult

log = logging.getLogger(__name__)

_START, _COMPLETE, _FAIL, _REROUTE = 0, 1, 2, 3


@register_engine("flow")
def run_flow(problem: SimProblem, *, policy: str = "", scenario: str = "", seed: int = 0,
             until_ns: int | None = None, progress=None) -> SimResult:
    """Run the flow-level engine on ``problem``.

    Flows that started together with the same size and have had the same rate ever since
    have the same bytes left, so they advance as one class (:class:`_Classes`): an event
    costs in proportion to the classes running, not to the flows (an AllToAll's equal
    flows, which finish together when their rates agree). Starts and completions due at
    one time are one heap entry. The arithmetic per class is the one per flow, so the
    times are those of the flow-by-flow loop to the nanosecond. A problem with shared
    routes (a PXN AllToAll's NVLink legs) keeps them apart and takes max-min by
    water-filling (:mod:`icefabric.engine.grouped`): the same rates up to the last bits.
    The run's state, and what each kind of event does to it, is a :class:`_Run`.

    Parameters
    ----------
    problem : SimProblem
    until_ns : int, optional — stop at this time (unfinished flows keep finish = -1).
    progress : callable(done_flows, total_flows), optional — called after each event batch.

    Returns
    -------
    SimResult
    """
    wall0 = time.perf_counter()
    problem.validate()
    run = _Run(problem)
    ev = run.ev
    handle = {_START: run.on_start, _COMPLETE: run.on_complete, _FAIL: run.on_fail,
              _REROUTE: run.on_reroute}
    F = problem.n_flows
    never = np.iinfo(np.int64).max
    limit = until_ns if until_ns is not None else never
    while True:
        if run.dirty:
            run.recompute_rates()
        t_data = run.t_data
        t_next = min(t_data, ev.next_time())
        if t_next == never:
            break
        if t_next > limit:
            run.stop_at(limit)
            break
        run.t = t = t_next
        run.events += 1
        if t == t_data:  # flows whose last byte left by now
            run.on_data_done()
        while ev.due(t):  # discrete events at t
            kind, x = ev.pop()
            handle[kind](x)
        if progress is not None:
            progress(run.done_count, F)
        if ev.empty() and not run.active.any():
            break
    if run.done_count < F and until_ns is None:
        run.raise_unfinished()
    return run.result(policy, scenario, seed, wall0)


class _Run:
    """One run of the flow engine: every flow's times and state, the running classes, the
    links' bytes, loads and peaks, the routes in force (failures re-route some) and the
    event heap, with one method per kind of event. :func:`run_flow` is the loop that
    calls them in time order.

    The arrays are per flow (``start``, ``data_done``, ``finish``: ns, -1 until then;
    ``ndeps``: dependencies not yet complete; ``active``, ``rate`` in bits/s) or per link
    (``link_bytes``; ``load`` in bits/s; ``peak``: the highest ``load / capacity``). Rates
    hold from ``t`` until the next recompute (``dirty``); the classes' bytes are up to
    date at ``t_adv`` and the next of them sends its last byte at ``t_data``.
    """

    def __init__(self, P: SimProblem):
        self.P = P
        F, L = P.n_flows, P.n_links
        # the routes in force (CSR; failures re-route some) and their incidence
        self.r_ptr, self.r_links = P.route_indptr, P.route_links
        self.down = np.zeros(L, dtype=bool)
        self.blocked = np.zeros(P.n_routes, dtype=bool)
        self.ci = _index(P, self.r_ptr, self.r_links)  # column slices of the active flows
        self.flow_blocked = np.zeros(F, dtype=bool)

        self.size = P.flow_size_bytes.astype(np.float64)
        self.start = np.full(F, -1, dtype=np.int64)
        self.data_done = np.full(F, -1, dtype=np.int64)
        self.finish = np.full(F, -1, dtype=np.int64)
        self.ndeps = np.diff(P.dep_indptr).astype(np.int64)
        self.dptr, self.dependents = P.dependents()

        self.ev = _Events(P.flow_latency_ns)
        roots = np.flatnonzero(self.ndeps == 0)
        self.ev.starts(roots, P.flow_start_ns[roots])
        for i, fail in enumerate(P.failures):
            self.ev.push(int(fail.t_ns), _FAIL, i)

        self.active = np.zeros(F, dtype=bool)
        self.rate = np.zeros(F)
        self.cl = _Classes(self.size)
        self.link_bytes = np.zeros(L)
        self.load = np.zeros(L)
        self.peak = np.zeros(L)
        self.t = 0
        self.dirty = True
        # flows that left since the last rates, if only that
        self.freed: list[np.ndarray] | None = None
        self.done_count = 0
        self.events = 0
        self.t_adv = 0  # the classes' bytes left and moved are up to date at t_adv
        self.t_data = np.iinfo(np.int64).max  # (set by every recompute_rates)

    def recompute_rates(self) -> None:
        """New rates at ``t``: only those above the level the freed flows left, when flows
        only left since the last rates, else those of every running flow."""
        cl, t = self.cl, self.t
        self._advance_to(t)
        if self.freed is not None and len(self.freed):
            changed = self._refill_after_finish()
        else:
            changed = self._fill_running()
        cl.regroup(changed, self.rate)
        self.dirty = False
        self.freed = []
        # rates are constant until the next recompute: so are the running classes
        # and the time the next of them sends its last byte
        cl.freeze_running()
        self.t_data = cl.next_data_done(t)

    def _refill_after_finish(self) -> np.ndarray:
        """Rates after the ``freed`` flows left; the flows whose rates were recomputed."""
        P, load = self.P, self.load
        changed = _rates_after_finish(self.ci, P, self.rate, load, self.cl,
                                      np.concatenate(self.freed))
        # only the re-filled flows' links gained load: every other link's load
        # fell or stayed, so its peak holds (a pass over every link was ~2 s of
        # the 8,192-rank AllToAll's 26,042 finish events)
        self.ci.raise_peak(changed, load, P.link_capacity_bps, self.peak)
        return changed

    def _fill_running(self) -> np.ndarray:
        """Max-min rates of every running flow from scratch; the active flows."""
        P, rate, load = self.P, self.rate, self.load
        # only the running flows and the links they cross: an event costs in
        # proportion to what runs, not to every flow of a long dependency DAG
        idx = np.flatnonzero(self.active & ~self.flow_blocked)
        rate[:] = 0.0
        load[:] = 0.0
        if len(idx):
            self.ci.fill(idx, rate, load, P.link_capacity_bps, P.flow_rate_cap_bps)
        changed = np.flatnonzero(self.active)
        # every other link carries nothing (load 0): its peak holds
        self.ci.raise_peak(idx, load, P.link_capacity_bps, self.peak)
        return changed

    def on_data_done(self) -> None:
        """Flows whose last byte left by ``t`` (``t_data``) stop running and complete
        their latency later."""
        cl, t = self.cl, self.t
        self._advance_to(t)
        fin = cl.finish_done()
        if len(fin):
            self.active[fin] = False
            self.data_done[fin] = t
            self.dirty = True
            if self.freed is not None:
                self.freed.append(fin)
            self.ev.completions(t, fin)
        else:  # rounding left a sliver: wait for it
            self.t_data = cl.next_data_done(t)

    def on_start(self, x: np.ndarray) -> None:
        """Flows ``x`` start at ``t``; those with no bytes have sent them all."""
        t, size = self.t, self.size
        self.start[x] = t
        empty = size[x] <= 0
        self.data_done[x[empty]] = t
        self.ev.completions(t, x[empty])
        go = x[~empty]
        if len(go):  # they join classes with their first rates
            self.active[go] = True
            self.dirty = True
            self.freed = None

    def on_complete(self, x: np.ndarray) -> None:
        """Flows ``x`` complete at ``t``: the dependents they were the last wait of start."""
        t, dependents, dptr, ndeps = self.t, self.dependents, self.dptr, self.ndeps
        self.finish[x] = t
        self.done_count += len(x)
        if len(dependents) == 0:  # (no flow waits for another: an AllToAll)
            return
        g = dependents[dptr[x[0]]:dptr[x[0] + 1]] if len(x) == 1 else \
            dependents[gather(dptr[x], dptr[x + 1] - dptr[x])]
        if len(g):
            np.subtract.at(ndeps, g, 1)
            g = np.unique(g[ndeps[g] == 0])
            self.ev.starts(g, np.maximum(self.P.flow_start_ns[g], t))

    def on_fail(self, x: int) -> None:
        """Failure ``x``'s links go down (or, with ``up``, come back): the flows whose
        routes cross a down link stop; its re-route follows ``reroute_delay_ns`` later."""
        t, fail = self.t, self.P.failures[x]
        self.down[fail.links] = not fail.up
        hit = routes_touching(self.r_ptr, self.r_links, self.down)
        self.blocked = hit if fail.up else self.blocked | hit
        self.ev.push(t + int(fail.reroute_delay_ns), _REROUTE, x)
        self.flow_blocked[:] = self.P.flows_touching(self.blocked, self.down)
        self.dirty, self.freed = True, None
        log.info("t=%d ns: %d links %s", t, len(fail.links), "up" if fail.up else "down")

    def on_reroute(self, x: int) -> None:
        """Failure ``x``'s new routes take over; the bytes moved on the old ones are
        counted on their links first."""
        P, fail = self.P, self.P.failures[x]
        self.r_ptr, self.r_links = replace_rows(self.r_ptr, self.r_links, fail.reroute_route,
                                                fail.reroute_indptr, fail.reroute_links)
        self.blocked[fail.reroute_route] = routes_touching(
            fail.reroute_indptr, fail.reroute_links, self.down)
        self.link_bytes += self.ci.link_bytes(self.cl.take_moved())
        self.ci = _index(P, self.r_ptr, self.r_links)
        self.flow_blocked[:] = P.flows_touching(self.blocked, self.down)
        self.dirty, self.freed = True, None

    def stop_at(self, limit: int) -> None:
        """End the run at ``limit`` (``until_ns``), the classes' bytes advanced to it."""
        self._advance_to(limit)
        self.t = limit

    def _advance_to(self, t: int) -> None:
        """The classes' bytes left and moved brought up to date at ``t``."""
        self.cl.advance(t - self.t_adv)
        self.t_adv = t

    def raise_unfinished(self) -> None:
        """Raise :class:`EngineError`: flows that cannot progress, else a deadlock."""
        t, F = self.t, self.P.n_flows
        stuck = self.active & self.flow_blocked
        if stuck.any():
            raise EngineError(f"t={t} ns: {int(stuck.sum())} active flows cannot progress "
                              f"(e.g. flow {int(np.flatnonzero(stuck)[0])}): their routes "
                              f"cross failed links and were never rerouted")
        waiting = np.flatnonzero(self.start < 0)
        raise EngineError(f"deadlock at t={t} ns: {F - self.done_count} flows never finished "
                          f"(e.g. flow {int(waiting[0]) if len(waiting) else -1}: "
                          f"dependency cycle?)")

    def result(self, policy: str, scenario: str, seed: int, wall0: float) -> SimResult:
        """The run's :class:`SimResult` (``wall0``: its ``time.perf_counter()`` start)."""
        P, start, finish = self.P, self.start, self.finish
        self.link_bytes += self.ci.link_bytes(self.cl.take_moved())
        makespan = int(finish.max()) if P.n_flows else 0
        colls = []
        for c in P.collectives:
            fl = np.asarray(c.flows, dtype=np.int64)
            s = int(start[fl].min()) if len(fl) else 0
            e = int(finish[fl].max()) if len(fl) else 0
            colls.append(CollectiveResult(c.name, c.job, c.kind, c.size_bytes, c.nranks, s, e,
                                          c.algorithm))
        return SimResult(
            engine="flow", policy=policy, scenario=scenario, seed=seed, makespan_ns=makespan,
            flow_start_ns=start, flow_finish_ns=finish, collectives=colls,
            link_names=list(P.link_names), link_capacity_bps=P.link_capacity_bps.copy(),
            link_bytes=self.link_bytes, link_peak_util=self.peak,
            wall_s=time.perf_counter() - wall0, events=self.events, meta=dict(P.meta))


class _Events:
    """The event heap: ``(time, kind, seq, payload)``; a start or completion entry holds
    every flow due at that time (an array), a failure entry its index. Flows due at one
    time are handled together, as the flow-by-flow heap handled them one after the other
    within that time (nothing at one time depends on their order)."""

    def __init__(self, latency_ns: np.ndarray):
        self.heap: list[tuple[int, int, int, object]] = []
        self.seq = itertools.count()
        self.latency = latency_ns

    def push(self, t: int, kind: int, payload) -> None:
        heapq.heappush(self.heap, (t, kind, next(self.seq), payload))

    def _grouped(self, kind: int, flows: np.ndarray, at: np.ndarray) -> None:
        """Push ``flows`` (int array) due at times ``at``, one entry per distinct time."""
        if len(flows) == 0:
            return
        if len(flows) == 1 or at.min() == at.max():  # the common cases: no sort
            self.push(int(at[0]), kind, flows)
            return
        order = np.argsort(at, kind="stable")
        at, flows = at[order], flows[order]
        first = np.flatnonzero(at[1:] != at[:-1]) + 1  # (np.unique and np.split cost
        bounds = [0, *first.tolist(), len(at)]  # more than the sort at ~300 flows)
        for a, b in zip(bounds[:-1], bounds[1:]):
            self.push(int(at[a]), kind, flows[a:b])

    def starts(self, flows: np.ndarray, at_ns: np.ndarray) -> None:
        """Start ``flows`` at ``at_ns`` (one time per flow)."""
        self._grouped(_START, flows, at_ns)

    def completions(self, t: int, flows: np.ndarray) -> None:
        """``flows`` sent their last byte at ``t``: they complete their latency later."""
        self._grouped(_COMPLETE, flows, t + self.latency[flows])

    def next_time(self) -> int:
        return self.heap[0][0] if self.heap else np.iinfo(np.int64).max

    def due(self, t: int) -> bool:
        return bool(self.heap) and self.heap[0][0] <= t

    def pop(self):
        _, kind, _, payload = heapq.heappop(self.heap)
        return kind, payload

    def empty(self) -> bool:
        return not self.heap


class _Classes:
    """Flows that move as one: same bytes left, same bytes moved since the routes last
    changed, same rate. A class's members (``members[c]``, filtered by ``cls`` on use:
    a flow that left keeps its old entry) run, and finish, together; a flow whose rate
    changes moves to a new class with its old class's bytes. Only classes advance, by the
    per-flow arithmetic of the flow-by-flow engine (``_advance``, ``_next_data_done``)."""

    def __init__(self, size: np.ndarray):
        self.size = size  # every flow's bytes: what a flow has left when it starts
        self.cls = np.full(len(size), -1, dtype=np.int64)  # -1: not started
        self.n = 0  # classes so far; the arrays below hold room for more
        self.rem = np.zeros(16)
        self.moved = np.zeros(16)
        self.rate = np.zeros(16)
        self.count = np.zeros(16, dtype=np.int64)
        self.members: list[np.ndarray] = []
        self.run = np.zeros(0, dtype=np.int64)
        self.fresh: list[int] = []  # classes made since the last freeze_running

    def _new(self, flows: np.ndarray, bounds: np.ndarray, rem, moved, rate) -> None:
        """Classes of the runs ``flows[bounds[i]:bounds[i+1]]``, with their state."""
        n0, k = self.n, len(bounds) - 1
        if n0 + k > len(self.rem):  # grow by doubling: adding classes costs what they are
            room = max(2 * len(self.rem), n0 + k)
            for name in ("rem", "moved", "rate", "count"):
                old = getattr(self, name)
                grown = np.zeros(room, dtype=old.dtype)
                grown[:n0] = old[:n0]
                setattr(self, name, grown)
        self.n = n0 + k
        self.fresh.append(n0)
        self.rem[n0:n0 + k] = rem
        self.moved[n0:n0 + k] = moved
        self.rate[n0:n0 + k] = rate
        if k == 1:  # one class (a DAG's flows start and change one at a time)
            self.count[n0] = len(flows)
            self.members.append(flows)
            self.cls[flows] = n0
            return
        self.count[n0:n0 + k] = np.diff(bounds)
        self.members += np.split(flows, bounds[1:-1])
        self.cls[flows] = np.repeat(np.arange(n0, n0 + k), np.diff(bounds))

    def regroup(self, flows: np.ndarray, rate: np.ndarray) -> None:
        """Move the ``flows`` whose ``rate`` is not their class's to new classes, one per
        (old class, new rate); flows that just started (no class yet: their whole size
        left, nothing moved) join one per (size, rate)."""
        if len(flows) == 0:  # (most events of an AllToAll: only finishes, no refill)
            return
        old = self.cls[flows]
        r = rate[flows]
        stale = (old < 0) | (r != self.rate[old])
        if not stale.any():
            return
        moved, old, r = flows[stale], old[stale], r[stale]
        if len(moved) == 1:  # a DAG's flows change one at a time: no sorting
            o = int(old[0])
            if o >= 0:
                self.count[o] -= 1
            self._new(moved, np.array([0, 1]), self.rem[o] if o >= 0 else self.size[moved],
                      self.moved[o] if o >= 0 else 0.0, r)
            return
        left = np.where(old >= 0, self.rem[old], self.size[moved])
        order = np.lexsort((r, left, old))
        moved, old, left, r = moved[order], old[order], left[order], r[order]
        bounds = np.flatnonzero(np.concatenate(
            ([True], (old[1:] != old[:-1]) | (left[1:] != left[:-1]) | (r[1:] != r[:-1]),
             [True])))
        np.subtract.at(self.count, old[old >= 0], 1)
        head = bounds[:-1]
        self._new(moved, bounds, left[head],
                  np.where(old[head] >= 0, self.moved[old[head]], 0.0), r[head])

    def freeze_running(self) -> None:
        """The classes with members and a rate: what advances until the rates change.
        A class's rate is set when it is made, so only the classes made since the last
        call can join (and any can have lost its members)."""
        run = self.run
        if self.fresh:
            new = np.arange(self.fresh[0], self.n)
            run = np.concatenate([run, new[self.rate[new] > 0]])
            self.fresh = []
        self.run = run[self.count[run] > 0]

    def advance(self, dt_ns: int) -> None:
        _advance(self.rem, self.rate, self.run, self.moved, dt_ns)

    def next_data_done(self, t: int) -> int:
        return _next_data_done(self.rem, self.rate, self.run, t)

    def finish_done(self) -> np.ndarray:
        """The flows of the running classes whose last byte left (the sub-ns residue of a
        finishing flow still crosses its links); those classes end."""
        run = self.run
        done = _done_classes(self.rem, self.rate, run)
        if len(done) == 0:
            return done
        self.moved[done] += self.rem[done]
        self.rem[done] = 0.0
        flows = self._flows_of(done)
        self.count[done] = 0
        self.run = run[self.count[run] > 0]
        return flows

    def flows_at_least(self, lam: float) -> np.ndarray:
        """The running flows whose rate is at least ``lam``, ascending."""
        return self._flows_of(self.run[self.rate[self.run] >= lam])

    def _flows_of(self, classes: np.ndarray) -> np.ndarray:
        """The flows of ``classes``, ascending."""
        if len(classes) == 0:
            return np.zeros(0, dtype=np.int64)
        if len(classes) == 1:
            c = int(classes[0])
            flows = self.members[c]
            return np.sort(flows[self.cls[flows] == c])
        lists = [self.members[c] for c in classes.tolist()]
        flows = np.concatenate(lists)
        owner = np.repeat(classes, [len(x) for x in lists])
        return np.sort(flows[self.cls[flows] == owner])  # entries of flows that left: out

    def take_moved(self) -> np.ndarray:
        """Bytes every flow moved since the last call (or the start); resets them."""
        out = np.zeros(len(self.cls))
        has = self.cls >= 0
        out[has] = self.moved[self.cls[has]]
        self.moved[:] = 0.0
        return out


def _rates_after_finish(ci, P: SimProblem, rate, load, cl: _Classes, fin) -> np.ndarray:
    """Update ``rate`` and ``load`` (link loads) in place after flows ``fin`` left (the
    others run in the classes ``cl``); return the flows whose rates were recomputed.

    Only links crossed by ``fin`` lost load. In progressive filling nothing changes below
    ``lam``, the lowest level at which one of those links saturated (the highest rate on
    it): every flow below ``lam`` keeps its rate, and the flows at or above it are
    re-filled on what the others leave. The result equals a full recomputation; an
    AllToAll, whose fastest flows finish first, re-fills only the top levels, so an event
    costs in proportion to the flows it touches, not to the whole problem.
    """
    cap = P.link_capacity_bps
    sat = ci.leave(fin, rate, load, cap)
    refill = np.zeros(0, np.int64)
    if len(sat):
        refill = cl.flows_at_least(ci.top_rate(sat, rate) * (1 - 1e-9))
    ci.release(load, fin, refill, rate)
    rate[fin] = 0.0
    rate[refill] = 0.0
    if len(refill):
        ci.fill(refill, rate, load, cap, P.flow_rate_cap_bps)
    return refill


def _entries(M: sp.spmatrix, idx: np.ndarray):
    """(indices, values, count per element of ``idx``) of the rows (CSR) or columns (CSC)
    ``idx`` of ``M``, concatenated: plain gathers, no sparse-matrix objects."""
    first = M.indptr[idx]
    n = M.indptr[idx + 1] - first
    pos = gather(first, n)
    return M.indices[pos], M.data[pos], n


def _index(P: SimProblem, r_ptr: np.ndarray, r_links: np.ndarray):
    """What the engine reads of the incidence of the routes ``(r_ptr, r_links)`` (the
    problem's own, or after a re-route): with shared routes kept apart
    (:class:`~icefabric.engine.grouped.GroupedIndex`), else as one matrix."""
    if P.shared is not None:
        return GroupedIndex(P, r_ptr, r_links)
    own = r_ptr is P.route_indptr and r_links is P.route_links
    return _ColumnIndex(P.incidence() if own else P.incidence_of(r_ptr, r_links))


class _ColumnIndex:
    """The incidence as a canonical CSC (each column's rows ascending, once), read by the
    batched engine's compiled steps (:mod:`~icefabric.engine.batch_kernel`:
    ``fill_rates``, ``accumulate_load``, ``apply_load``; the peaks by
    :mod:`~icefabric.engine.grouped`'s ``raise_link_peak``) over link- and flow-sized
    scratch made once, so an event costs what it touches, not the fabric's size. Those
    steps are the numpy code they replaced operation for operation (max-min's rounds over
    the entries in column order, each link's load summed from 0 in entry order, then
    added), so the rates and loads are the same to the bit; no array or scipy matrix is
    built per event (their constructors, a sort of the links per event and numpy's
    per-call overhead were most of a 16,384-GPU training iteration's engine time)."""

    def __init__(self, A: sp.csr_matrix):
        self.A = A
        self.Ac = A.tocsc()
        self.Ac.sum_duplicates()
        L, F = A.shape
        f0, i0 = np.zeros(0), np.zeros(0, dtype=np.int64)
        # the flows' entries; cap and fcap come with each call (the per-link fields,
        # which the batched engine alone reads, stay empty)
        self._net = Net(self.Ac.indptr.astype(np.int64), self.Ac.indices.astype(np.int64),
                        self.Ac.data.astype(np.float64), i0, i0, f0,
                        np.zeros(0, dtype=np.uint64), f0, f0)
        self._sc = new_scratch(L, F, self.Ac.nnz)
        # the kernel's state with no flows of its own: its steps here read only the rates
        # and loads, which each call brings (:meth:`_state`)
        self._idle = State(remaining=f0, rate=f0, load=f0, start=i0, finish=i0, start_at=i0,
                           complete_at=i0, ndeps=i0, run=i0, pend=i0,
                           n=np.zeros(2, dtype=np.int64))
        # every flow's links as GroupedIndex's records (no groups), for its compiled peaks
        ptr, rec = pack_flows(A, sp.csc_matrix((0, F)))
        self._k = Cols(ptr, rec.view(np.int64), rec, np.zeros(1, dtype=np.int64), i0, f0,
                       np.zeros(L + 1, dtype=np.int64), i0, np.zeros(1, dtype=np.int64), i0,
                       A.indptr.astype(np.int64), A.indices.astype(np.int64))

    def _state(self, rate: np.ndarray, load: np.ndarray) -> State:
        """The kernel's view of ``rate`` and ``load`` (written in place)."""
        return self._idle._replace(rate=rate, load=load)

    def leave(self, fin: np.ndarray, rate: np.ndarray, load: np.ndarray,
              cap: np.ndarray) -> np.ndarray:
        """The links the finished flows ``fin`` cross that are saturated (``load``
        within 1e-6 of ``cap``), a link once per flow on it (their only use, a least
        and a count, needs no sort); :meth:`release` takes their load off."""
        touched = _entries(self.Ac, fin)[0]
        return touched[load[touched] >= cap[touched] * (1 - 1e-6)]

    def top_rate(self, links: np.ndarray, rate: np.ndarray) -> float:
        """The least, over ``links``, of the highest ``rate`` of a flow on the link."""
        flows, _, n = _entries(self.A, links)
        first = (np.cumsum(n) - n)[n > 0]
        return np.maximum.reduceat(rate[flows], first).min()

    def release(self, load: np.ndarray, fin: np.ndarray, refill: np.ndarray,
                rate: np.ndarray) -> None:
        """Take the load of the finished flows ``fin`` and of ``refill`` (at ``rate``) off
        ``load``, in place: one sum per link (``load -= np.bincount(...)``)."""
        st = self._state(rate, load)
        accumulate_load(self._net, st, self._sc, fin)
        accumulate_load(self._net, st, self._sc, refill)
        apply_load(st, self._sc, -1.0)

    def fill(self, flows: np.ndarray, rate: np.ndarray, load: np.ndarray, cap: np.ndarray,
             fcap: np.ndarray) -> None:
        """Max-min rates of ``flows`` (ascending) on what the others leave of ``cap``
        (``load``): into ``rate``, their load added to ``load``."""
        fill_rates(self._net._replace(cap=cap, fcap=fcap), self._state(rate, load),
                   self._sc, flows)

    def link_bytes(self, moved: np.ndarray) -> np.ndarray:
        """Per link: the bytes of flows that moved ``moved`` bytes."""
        return self.A @ moved

    def raise_peak(self, flows: np.ndarray, load: np.ndarray, cap: np.ndarray,
                   peak: np.ndarray) -> None:
        """``peak = max(peak, load / cap)`` on the links of ``flows``, in place (a link
        seen twice gets the same value again: no sort to make them distinct)."""
        raise_link_peak(flows, load, cap, peak, self._k)


def _next_data_done(remaining, rate, run, t: int) -> int:
    """Time the first of the running flows sends its last byte (never if none runs)."""
    if len(run) == 0:
        return np.iinfo(np.int64).max
    return t + int(math.ceil(_least_time_left(remaining, rate, run) - 1e-6))


# The per-event steps over the running classes, compiled: numpy's per-call overhead on
# a few thousand classes was most of a large AllToAll's events. Each is the numpy
# expression it replaced element by element (the same IEEE operations in the same
# order), so the times are those of that code to the nanosecond.
@njit(cache=True, error_model="numpy")
def _least_time_left(remaining, rate, run):  # pragma: no cover
    """min over ``run`` of ``remaining * 8e9 / rate`` (0 at an infinite rate), in ns."""
    best = np.inf
    for c in run:
        r = rate[c]
        best = min(best, 0.0 if np.isinf(r) else remaining[c] * 8e9 / r)
    return best


@njit(cache=True)
def _done_classes(remaining, rate, run):  # pragma: no cover
    """The classes of ``run`` whose last byte left (within the sub-ns residue)."""
    out = np.empty(len(run), dtype=np.int64)
    n = 0
    for c in run:
        r = rate[c]
        if remaining[c] <= max(r, 1.0) * 1e-9 / 8 + 1e-9 or np.isinf(r):
            out[n] = c
            n += 1
    return out[:n].copy()


@njit(cache=True)
def _advance(remaining, rate, run, moved, dt_ns):  # pragma: no cover
    if dt_ns <= 0:
        return
    for c in run:
        left, r = remaining[c], rate[c]
        # never more than what is left: finish times are rounded up to whole ns
        step = min(r * dt_ns / 8e9 if np.isfinite(r) else left, left)
        remaining[c] = max(left - step, 0.0)
        moved[c] += step
