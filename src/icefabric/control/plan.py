"""Plans: per QP the fabric path(s), the UDP source port, a backup source port and a pacing
rate, in one :class:`PathPlan`.

A QP normally has one route (its pinned path) of weight 1. Per-packet spraying spreads a
QP over several routes with weights summing to 1. Routes are NIC-to-NIC link lists
(NIC uplink, switch hops, NIC downlink); server-internal legs are added when the plan is
turned into an engine problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np

from icefabric.csr import indptr_from_lengths


@dataclass(frozen=True)
class PathPlan:
    """Per-QP routes, source ports, backup ports and rates.

    Attributes
    ----------
    sport : ndarray[int64] (Q,) — UDP source port of every QP (RoCEv2 range 0xC000-0xFFFF;
        -1 = leave as is, e.g. a spraying NIC).
    route_qp : ndarray[int64] (R,) — QP of every route, non-decreasing.
    route_weight : ndarray[float64] (R,) — share of the QP's bytes on the route.
    route_indptr, route_links : CSR of ordered fabric link ids per route.
    rate_bps : ndarray[float64] (Q,) — pacing rate per QP (``inf`` = line rate / none).
    backup_sport : ndarray[int64] (Q,) — source port to switch to when the path fails
        (end-side fail-over; -1 = none). Default: none for every QP.
    policy : str — who made the plan.
    meta : dict — the policy's own notes (method, verified fraction, planned paths ...).
    """

    sport: np.ndarray
    route_qp: np.ndarray
    route_weight: np.ndarray
    route_indptr: np.ndarray
    route_links: np.ndarray
    rate_bps: np.ndarray
    backup_sport: np.ndarray | None = None
    policy: str = ""
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.backup_sport is None:
            object.__setattr__(self, "backup_sport", np.full(len(self.sport), -1, np.int64))

    @property
    def n_qps(self) -> int:
        return len(self.sport)

    def route(self, r: int) -> np.ndarray:
        return self.route_links[self.route_indptr[r]:self.route_indptr[r + 1]]

    def qp_route_ptr(self) -> np.ndarray:
        """indptr over QPs into the route arrays (routes of QP q: ptr[q]..ptr[q+1])."""
        return indptr_from_lengths(np.bincount(self.route_qp, minlength=self.n_qps))

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

    # -- plain data (storage, process pools) ---------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-ready arrays (``inf`` as ``None``) and the JSON-ready entries of ``meta``."""
        def arr(x):
            return ([None if not np.isfinite(v) else v for v in x.tolist()]
                    if x.dtype.kind == "f" else x.tolist())

        return {"sport": arr(self.sport), "route_qp": arr(self.route_qp),
                "route_weight": arr(self.route_weight),
                "route_indptr": arr(self.route_indptr), "route_links": arr(self.route_links),
                "rate_bps": arr(self.rate_bps), "backup_sport": arr(self.backup_sport),
                "policy": self.policy,
                "meta": {k: v for k, v in ((k, _plain(v)) for k, v in self.meta.items())
                         if _json_ok(v)}}

    @classmethod
    def from_dict(cls, d: dict) -> PathPlan:
        def f(x):
            return np.array([np.inf if v is None else v for v in x], dtype=np.float64)

        def i(x):
            return np.asarray(x, dtype=np.int64)

        return cls(sport=i(d["sport"]), route_qp=i(d["route_qp"]),
                   route_weight=f(d["route_weight"]), route_indptr=i(d["route_indptr"]),
                   route_links=i(d["route_links"]), rate_bps=f(d["rate_bps"]),
                   backup_sport=i(d["backup_sport"]) if "backup_sport" in d else None,
                   policy=d.get("policy", ""), meta=dict(d.get("meta", {})))


def _plain(v):
    return v.tolist() if isinstance(v, np.ndarray) else v


def _json_ok(v) -> bool:
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return False
    return True


def single_path_plan(paths: list[np.ndarray], sport: np.ndarray, policy: str = "",
                     rate_bps: np.ndarray | None = None, meta: dict | None = None,
                     backup_sport: np.ndarray | None = None) -> PathPlan:
    """A plan with exactly one route per QP."""
    q = len(paths)
    indptr = indptr_from_lengths(np.fromiter((len(p) for p in paths), np.int64, q))
    links = np.concatenate(paths).astype(np.int64) if q else np.zeros(0, np.int64)
    return single_path_plan_csr((indptr, links), sport, policy, rate_bps, meta, backup_sport)


def single_path_plan_csr(routes: tuple[np.ndarray, np.ndarray], sport: np.ndarray,
                         policy: str = "", rate_bps: np.ndarray | None = None,
                         meta: dict | None = None, backup_sport: np.ndarray | None = None
                         ) -> PathPlan:
    """:func:`single_path_plan` of paths given as CSR ``routes = (indptr, links)``."""
    indptr, links = routes
    q = len(indptr) - 1
    return PathPlan(sport=np.asarray(sport, dtype=np.int64), route_qp=np.arange(q),
                    route_weight=np.ones(q), route_indptr=indptr, route_links=links,
                    rate_bps=(np.full(q, np.inf) if rate_bps is None
                              else np.asarray(rate_bps, dtype=np.float64)),
                    backup_sport=(None if backup_sport is None
                                  else np.asarray(backup_sport, dtype=np.int64)),
                    policy=policy, meta=dict(meta or {}))
