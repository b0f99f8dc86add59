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

from icefabric.csr import replace_rows
from icefabric.dataplane.fairness import maxmin_coo
from icefabric.engine.problem import EngineError, SimProblem, route_incidence, routes_touching
from icefabric.engine.registry import register_engine
from icefabric.engine.result import CollectiveResult, SimResult

log = logging.getLogger(__name__)

_START, _COMPLETE, _FAIL, _REROUTE = 0, 1, 2, 3


@register_engine("flow")
def run_flow(problem: SimProblem, *, policy: str = "", scenario: str = "", seed: int = 0,
             until_ns: int | None = None, progress=None) -> SimResult:
    """Run the flow-level engine on ``problem``.

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
    P = problem
    F, L = P.n_flows, P.n_links
    # the routes in force (CSR; failures re-route some) and their incidence
    r_ptr, r_links = P.route_indptr, P.route_links
    A = P.incidence()
    down = np.zeros(L, dtype=bool)
    blocked = np.zeros(P.n_routes, dtype=bool)
    Ac = A.tocsc()  # columns = flows: the active flows' incidence is cut from it per event
    flow_blocked = np.zeros(F, dtype=bool)

    remaining = P.flow_size_bytes.astype(np.float64).copy()
    start = np.full(F, -1, dtype=np.int64)
    data_done = np.full(F, -1, dtype=np.int64)
    finish = np.full(F, -1, dtype=np.int64)
    ndeps = np.diff(P.dep_indptr).astype(np.int64)
    # dependents CSR (reverse of deps)
    order = np.argsort(P.dep_indices, kind="stable")
    dependents = np.repeat(np.arange(F), ndeps)[order]
    dcounts = np.bincount(P.dep_indices, minlength=F)
    dptr = np.zeros(F + 1, dtype=np.int64)
    np.cumsum(dcounts, out=dptr[1:])

    seq = itertools.count()
    heap: list[tuple[int, int, int, int]] = []
    for f in np.flatnonzero(ndeps == 0):
        heapq.heappush(heap, (int(P.flow_start_ns[f]), _START, next(seq), int(f)))
    for i, fail in enumerate(P.failures):
        heapq.heappush(heap, (int(fail.t_ns), _FAIL, next(seq), i))

    active = np.zeros(F, dtype=bool)
    rate = np.zeros(F)
    link_bytes = np.zeros(L)
    peak = np.zeros(L)
    t = 0
    dirty = True
    done_count = 0
    events = 0
    limit = until_ns if until_ns is not None else np.iinfo(np.int64).max

    # Between events only the active flows matter: ``sub`` is the incidence of the unblocked
    # active flows ``idx`` restricted to the links ``rows`` they cross, so an event costs
    # O(active flows), not O(all flows), in workloads of many dependent steps.
    idx = np.zeros(0, dtype=np.int64)
    sub, rows = _columns(Ac, idx)  # (link, flow, coefficient) entries over rows x idx
    while True:
        if dirty:
            act = np.flatnonzero(active)
            idx = act[~flow_blocked[act]]
            rate[:] = 0.0
            sub, rows = _columns(Ac, idx)
            if len(idx):
                rate[idx] = maxmin_coo(*sub, P.link_capacity_bps[rows],
                                       P.flow_rate_cap_bps[idx], n_flows=len(idx))
                load = _times(sub, np.where(np.isfinite(rate[idx]), rate[idx], 0.0), rows)
                np.maximum.at(peak, rows, load / P.link_capacity_bps[rows])
            dirty = False
        # next data completion
        run = idx[rate[idx] > 0]
        t_data = np.iinfo(np.int64).max
        if len(run):
            with np.errstate(divide="ignore"):
                dt = np.where(np.isinf(rate[run]), 0.0,
                              remaining[run] * 8e9 / np.where(np.isinf(rate[run]), 1.0,
                                                              rate[run]))
            t_data = t + int(math.ceil(dt.min() - 1e-6))
        t_event = heap[0][0] if heap else np.iinfo(np.int64).max
        t_next = min(t_data, t_event)
        if t_next == np.iinfo(np.int64).max:
            break
        if t_next > limit:
            _advance(remaining, rate, idx, sub, rows, link_bytes, limit - t)
            t = limit
            break
        _advance(remaining, rate, idx, sub, rows, link_bytes, t_next - t)
        t = t_next
        events += 1
        # flows whose last byte left by now
        if len(run):
            fin = run[remaining[run] <= np.maximum(rate[run], 1.0) * 1e-9 / 8 + 1e-9]
            fin = np.union1d(fin, run[np.isinf(rate[run])])
            if len(fin):
                # the sub-ns residue of a finishing flow still crosses its links
                residue = np.where(np.isin(idx, fin), remaining[idx], 0.0)
                link_bytes[rows] += _times(sub, residue, rows)
                remaining[fin] = 0.0
                active[fin] = False
                data_done[fin] = t
                dirty = True
                for f in fin.tolist():
                    heapq.heappush(heap, (t + int(P.flow_latency_ns[f]), _COMPLETE, next(seq), f))
        # discrete events at t
        while heap and heap[0][0] <= t:
            _, kind, _, x = heapq.heappop(heap)
            if kind == _START:
                start[x] = t
                if remaining[x] <= 0:
                    data_done[x] = t
                    heapq.heappush(heap, (t + int(P.flow_latency_ns[x]), _COMPLETE, next(seq), x))
                else:
                    active[x] = True
                    dirty = True
            elif kind == _COMPLETE:
                finish[x] = t
                done_count += 1
                for g in dependents[dptr[x]:dptr[x + 1]].tolist():
                    ndeps[g] -= 1
                    if ndeps[g] == 0:
                        heapq.heappush(heap, (max(t, int(P.flow_start_ns[g])), _START,
                                              next(seq), g))
            elif kind == _FAIL:
                fail = P.failures[x]
                down[fail.links] = not fail.up
                hit = routes_touching(r_ptr, r_links, down)
                blocked = hit if fail.up else blocked | hit
                heapq.heappush(heap, (t + int(fail.reroute_delay_ns), _REROUTE, next(seq), x))
                flow_blocked[:] = np.bincount(P.route_flow[blocked], minlength=F) > 0
                dirty = True
                log.info("t=%d ns: %d links %s", t, len(fail.links), "up" if fail.up else "down")
            elif kind == _REROUTE:
                fail = P.failures[x]
                r_ptr, r_links = replace_rows(r_ptr, r_links, fail.reroute_route,
                                              fail.reroute_indptr, fail.reroute_links)
                blocked[fail.reroute_route] = routes_touching(
                    fail.reroute_indptr, fail.reroute_links, down)
                A = route_incidence(r_ptr, r_links, P.route_flow, P.route_weight, L, F)
                Ac = A.tocsc()
                flow_blocked[:] = np.bincount(P.route_flow[blocked], minlength=F) > 0
                dirty = True
        if progress is not None:
            progress(done_count, F)
        if not heap and not active.any():
            break

    if done_count < F and until_ns is None:
        stuck = active & flow_blocked
        if stuck.any():
            raise EngineError(f"t={t} ns: {int(stuck.sum())} active flows cannot progress "
                              f"(e.g. flow {int(np.flatnonzero(stuck)[0])}): their routes "
                              f"cross failed links and were never rerouted")
        waiting = np.flatnonzero(start < 0)
        raise EngineError(f"deadlock at t={t} ns: {F - done_count} flows never finished "
                          f"(e.g. flow {int(waiting[0]) if len(waiting) else -1}: "
                          f"dependency cycle?)")
    makespan = int(finish.max()) if F else 0
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
        link_bytes=link_bytes, link_peak_util=peak, wall_s=time.perf_counter() - wall0,
        events=events, meta=dict(P.meta))


def _columns(Ac: sp.csc_matrix, cols: np.ndarray):
    """Columns ``cols`` of ``Ac`` over the rows they touch: ``((row, col, value) entries,
    those row ids)`` with rows and columns renumbered from 0."""
    first = Ac.indptr[cols]
    n = Ac.indptr[cols + 1] - first
    pos = np.repeat(first - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
    links = Ac.indices[pos]
    touched = np.zeros(Ac.shape[0], dtype=bool)
    touched[links] = True
    local = np.cumsum(touched) - 1
    return (local[links], np.repeat(np.arange(len(cols)), n), Ac.data[pos]), \
        np.flatnonzero(touched)


def _times(sub, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``sub @ x``: per row, the sum of coefficient x value over its entries."""
    r, c, v = sub
    return np.bincount(r, weights=v * x[c], minlength=len(rows))


def _advance(remaining, rate, idx, sub, rows, link_bytes, dt_ns):
    """Move every running flow of ``idx`` forward by ``dt_ns`` at its rate."""
    if dt_ns <= 0 or len(idx) == 0:
        return
    r = rate[idx]
    left = remaining[idx]
    finite = np.isfinite(r)
    # never more than what is left: finish times are rounded up to whole ns
    moved = np.where(r > 0, np.minimum(np.where(finite, r * dt_ns / 8e9, left), left), 0.0)
    remaining[idx] = np.maximum(left - moved, 0.0)
    link_bytes[rows] += _times(sub, moved, rows)
