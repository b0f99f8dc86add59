"""The flow engine over many route sets of one problem (ECMP draws).

ECMP draws (:mod:`icefabric.experiment.draws`) run the same flows, sizes, dependencies and
capacities over N different routings. Each draw is a small problem (a hundred or so running
flows), so :func:`run_flow_batch` runs them one after the other in compiled code
(:mod:`icefabric.engine.batch_kernel`), where Python's per-event overhead (``run_flow``)
or numpy's per-call overhead (a lockstep of all draws, which this replaced) would cost
more than the work.

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
from dataclasses import dataclass

import numpy as np

from icefabric.csr import gather, indptr_from_lengths
from icefabric.engine.batch_kernel import Dag, Routes, dominated_rows, run_draws, varying_rows
from icefabric.engine.problem import EngineError, SimProblem


@dataclass(frozen=True)
class RouteSets:
    """``n`` route sets of a problem's K routes (same flows and weights, links drawn
    anew). Route ``k`` in set ``i`` is row ``pre[k]`` of ``fixed``, then row
    ``i*M + mid_row[k]`` of ``mid``, then row ``post[k]`` of ``fixed`` (``-1``: none):
    ``mid`` (CSR, M rows per set) holds what is drawn, e.g. the plans' fabric routes,
    and ``fixed`` (CSR) what every set shares, e.g. the paths inside servers. Given so,
    nothing of size N x K is built (the kernel reads the segments)."""

    fixed_indptr: np.ndarray
    fixed_links: np.ndarray
    pre: np.ndarray
    mid_row: np.ndarray
    post: np.ndarray
    mid_indptr: np.ndarray
    mid_links: np.ndarray
    n: int

    @classmethod
    def stacked(cls, route_sets: Sequence[tuple[np.ndarray, np.ndarray]]) -> RouteSets:
        """Route sets given as one CSR ``(indptr, links)`` of the K routes each."""
        K = len(route_sets[0][0]) - 1
        none = np.full(K, -1, dtype=np.int64)
        lengths = np.concatenate([np.diff(ip) for ip, _ in route_sets])
        return cls(np.zeros(1, np.int64), np.zeros(0, np.int64), none,
                   np.arange(K, dtype=np.int64), none, indptr_from_lengths(lengths),
                   np.concatenate([lk for _, lk in route_sets]), len(route_sets))

    @property
    def mid_per_set(self) -> int:
        return (len(self.mid_indptr) - 1) // max(self.n, 1)


def run_flow_batch(problem: SimProblem, routes: RouteSets) -> tuple[np.ndarray, np.ndarray]:
    """Run ``problem`` once per route set; return ``(start_ns, finish_ns)``, shape (N, F).
    The problem's own routes must be one of the sets (e.g. the first draw's): links are
    left out of max-min on its incidence (:func:`redundant_links`)."""
    P = problem
    P.require_own_routes("batched flow")
    if P.failures:
        raise EngineError("run_flow_batch runs problems without link failures only")
    if len(routes.mid_row) != P.n_routes or \
            len(routes.mid_indptr) != routes.n * routes.mid_per_set + 1:
        raise EngineError("every route set must have one link list per route of the problem")
    N, F = routes.n, P.n_flows
    start = np.full((N, F), -1, dtype=np.int64)
    finish = np.full((N, F), -1, dtype=np.int64)
    stuck = run_draws(_routes(P, routes), _dag(P), start, finish)
    if stuck:
        raise EngineError(f"{stuck} flows never finished in the batch (dependency cycle?)")
    return start, finish


def _routes(P: SimProblem, rs: RouteSets) -> Routes:
    """The kernel's view of the draws' routes: the segments, the routes of every flow, the
    links that may limit a rate, and the capacities."""
    order = np.argsort(P.route_flow, kind="stable")
    keep = np.ones(P.n_links, dtype=bool)
    keep[redundant_links(P, rs)] = False
    i64 = np.int64
    return Routes(rs.fixed_indptr.astype(i64), rs.fixed_links.astype(i64),
                  rs.pre.astype(i64), rs.mid_row.astype(i64), rs.post.astype(i64),
                  rs.mid_indptr.astype(i64), rs.mid_links.astype(i64), rs.mid_per_set,
                  P.route_weight.astype(np.float64),
                  indptr_from_lengths(np.bincount(P.route_flow, minlength=P.n_flows)),
                  order.astype(i64), keep, P.link_capacity_bps.astype(np.float64),
                  P.flow_rate_cap_bps.astype(np.float64))


def _dag(P: SimProblem) -> Dag:
    """The kernel's view of the flows: sizes, latencies, starts, dependencies and the
    dependents of every flow (the reverse CSR)."""
    ndeps = np.diff(P.dep_indptr).astype(np.int64)
    dptr, dependents = P.dependents()
    return Dag(P.flow_size_bytes.astype(np.float64), P.flow_latency_ns.astype(np.int64),
               P.flow_start_ns.astype(np.int64), ndeps, dptr, dependents)


def redundant_links(P: SimProblem, routes) -> np.ndarray:
    """Links that can never limit a rate in any of the route sets (``routes`` as
    :class:`RouteSets`): every flow crossing such a link ``l`` also
    crosses a kept link ``m`` (with at least the same coefficient) of no more capacity,
    in every route set, so ``m`` saturates no later than ``l``, and at the latest together
    with it. Leaving ``l`` out of max-min gives the same rates (typically most
    intra-server links: a GPU's PCIe path carries the flows of its NIC) and saves most of
    the work. Only links on routes that are the same in every route set are considered."""
    fixed = np.flatnonzero(~_varying_links(P, routes))
    A = P.incidence().tocsr()[fixed]  # fixed links x flows
    A.sum_duplicates()  # sorted column indices in every row, for the kernel's merge
    pattern = (A > 0).astype(np.float64)
    overlap = (pattern @ pattern.T).tocoo()
    count = np.asarray(pattern.sum(axis=1)).ravel()
    cap = P.link_capacity_bps[fixed]
    cand = (overlap.row != overlap.col) & (overlap.data == count[overlap.row]) & \
        (cap[overlap.row] >= cap[overlap.col]) & (count[overlap.row] > 0)
    # candidate pairs in the order the product lists them; the first that holds wins
    dropped = dominated_rows(A.indptr.astype(np.int64), A.indices.astype(np.int64),
                             A.data.astype(np.float64), overlap.row[cand].astype(np.int64),
                             overlap.col[cand].astype(np.int64), len(fixed))
    return fixed[dropped].astype(np.int64)


def _varying_links(P: SimProblem, rs: RouteSets) -> np.ndarray:
    """Links on a route whose link list is not the same in every route set (its drawn
    segment differs): its fixed segments' and its drawn segment's in every set."""
    differs, varying = varying_rows(rs.mid_indptr, rs.mid_links, rs.n, P.n_links)
    drawn = np.flatnonzero(rs.mid_row >= 0)
    k = drawn[differs[rs.mid_row[drawn]]]
    for ends in (rs.pre[k], rs.post[k]):
        ends = ends[ends >= 0]
        varying[rs.fixed_links[gather(rs.fixed_indptr[ends], np.diff(rs.fixed_indptr)[ends])]] \
            = True
    return varying
