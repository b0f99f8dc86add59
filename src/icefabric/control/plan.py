"""Plans: per QP the fabric path(s) and UDP source port (PathPlan), and a pacing rate
(RatePlan folded into the same object as ``rate_bps``).

A QP normally has one route (its pinned path) of weight 1. Per-packet spraying spreads a
QP over several routes with weights summing to 1. Routes are NIC-to-NIC link lists
(NIC uplink, switch hops, NIC downlink); server-internal legs are added when the plan is
turned into an engine problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np


@dataclass(frozen=True)
class PathPlan:
    """Per-QP routes, source ports and rates.

    Attributes
    ----------
    sport : ndarray[int64] (Q,) — UDP source port of every QP (RoCEv2 range 0xC000-0xFFFF).
    route_qp : ndarray[int64] (R,) — QP of every route, non-decreasing.
    route_weight : ndarray[float64] (R,) — share of the QP's bytes on the route.
    route_indptr, route_links : CSR of ordered fabric link ids per route.
    rate_bps : ndarray[float64] (Q,) — pacing rate per QP (``inf`` = line rate / none).
    policy : str — who made the plan.
    """

    sport: np.ndarray
    route_qp: np.ndarray
    route_weight: np.ndarray
    route_indptr: np.ndarray
    route_links: np.ndarray
    rate_bps: np.ndarray
    policy: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def n_qps(self) -> int:
        return len(self.sport)

    def route(self, r: int) -> np.ndarray:
        return self.route_links[self.route_indptr[r]:self.route_indptr[r + 1]]

    def qp_route_ptr(self) -> np.ndarray:
        """indptr over QPs into the route arrays (routes of QP q: ptr[q]..ptr[q+1])."""
        counts = np.bincount(self.route_qp, minlength=self.n_qps)
        ptr = np.zeros(self.n_qps + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        return ptr

    def path_of(self, q: int) -> np.ndarray:
        """The (first) route of QP ``q``."""
        return self.route(int(self.qp_route_ptr()[q]))

    def link_load(self, n_links: int, qp_bytes: np.ndarray | None = None) -> np.ndarray:
        """Sum over routes of ``weight * qp_bytes[qp]`` per link (QP count if no bytes)."""
        w = self.route_weight * (1.0 if qp_bytes is None else qp_bytes[self.route_qp])
        lengths = np.diff(self.route_indptr)
        return np.bincount(self.route_links, weights=np.repeat(w, lengths), minlength=n_links)

    def with_rates(self, rate_bps: np.ndarray) -> PathPlan:
        return replace(self, rate_bps=np.asarray(rate_bps, dtype=np.float64))


def single_path_plan(paths: list[np.ndarray], sport: np.ndarray, policy: str = "",
                     rate_bps: np.ndarray | None = None, meta: dict | None = None) -> PathPlan:
    """A plan with exactly one route per QP."""
    q = len(paths)
    lengths = np.fromiter((len(p) for p in paths), np.int64, q)
    indptr = np.zeros(q + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    links = np.concatenate(paths).astype(np.int64) if q else np.zeros(0, np.int64)
    return PathPlan(sport=np.asarray(sport, dtype=np.int64), route_qp=np.arange(q),
                    route_weight=np.ones(q), route_indptr=indptr, route_links=links,
                    rate_bps=(np.full(q, np.inf) if rate_bps is None
                              else np.asarray(rate_bps, dtype=np.float64)),
                    policy=policy, meta=dict(meta or {}))
