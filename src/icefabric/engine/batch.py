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
from icefabric.engine.batch_kernel import Dag, Net, run_draws
from icefabric.engine.problem import EngineError, SimProblem


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
    start = np.full((N, F), -1, dtype=np.int64)
    finish = np.full((N, F), -1, dtype=np.int64)
    stuck = run_draws(_net(P, routes), _dag(P), N, start, finish)
    if stuck:
        raise EngineError(f"{stuck} flows never finished in the batch (dependency cycle?)")
    return start, finish


def _net(P: SimProblem, routes) -> Net:
    """The kernel's view of every draw's routing: the block incidence (column-wise and
    row-wise) with ids local to a draw, and the capacities."""
    Ac = _block_incidence(P, routes, redundant_links(P, routes))
    Ar = Ac.tocsr()
    i64 = np.int64
    return Net(Ac.indptr.astype(i64), (Ac.indices % P.n_links).astype(i64),
               Ac.data.astype(np.float64), Ar.indptr.astype(i64),
               (Ar.indices % P.n_flows).astype(i64),
               P.link_capacity_bps.astype(np.float64),
               P.flow_rate_cap_bps.astype(np.float64))


def _dag(P: SimProblem) -> Dag:
    """The kernel's view of the flows: sizes, latencies, starts, dependencies and the
    dependents of every flow (the reverse CSR)."""
    F = P.n_flows
    ndeps = np.diff(P.dep_indptr).astype(np.int64)
    order = np.argsort(P.dep_indices, kind="stable")
    dependents = np.repeat(np.arange(F, dtype=np.int64), ndeps)[order]
    dptr = np.zeros(F + 1, dtype=np.int64)
    np.cumsum(np.bincount(P.dep_indices, minlength=F), out=dptr[1:])
    return Dag(P.flow_size_bytes.astype(np.float64), P.flow_latency_ns.astype(np.int64),
               P.flow_start_ns.astype(np.int64), ndeps, dptr, dependents)


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
