"""Re-planning after link failures: move only the QPs that need it.

When a link fails, each switch removes it from its ECMP groups. With ``mod N`` member
selection the group size changes, so ``hash mod N`` changes for *every* flow through that
group, not only for those on the dead link: QPs whose planned path is intact can still be
re-hashed elsewhere. ICE therefore distinguishes

* **affected** QPs — their planned path used a failed link: they get a new path
  (planned against the load of everything that stays) and a new source port;
* **remapped** QPs — their path is intact but their old port now hashes elsewhere in the
  shrunken groups: they keep their path and only get a new port;
* everything else keeps path and port.

With resilient hashing (``selection="resilient"``) the remapped set is empty except for
flows whose bucket pointed at the dead member — measured by
:func:`replan_after_failure`'s statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from icefabric.control.demand import Demand
from icefabric.control.planning import PathAssignment, plan_paths
from icefabric.control.realize import realize_paths, rehash, same_paths
from icefabric.dataplane.ecmp import HashConfig
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing

__all__ = ["FailoverResult", "affected_qps", "replan_after_failure"]


@dataclass(frozen=True, eq=False)
class FailoverResult:
    """New fabric paths and ports after a failure, with what moved.

    Attributes
    ----------
    assignment : PathAssignment — the new plan (fabric paths).
    sport : ndarray[int64] (Q,) — new source ports (unchanged where nothing moved).
    paths : list of ndarray — re-hashed NIC-to-NIC paths under the new link state.
    ok : ndarray[bool] — re-hashed path equals the planned one.
    affected, remapped : ndarray[int64] — QP ids (see module docstring).
    meta : dict
    """

    assignment: PathAssignment
    sport: np.ndarray
    paths: list[np.ndarray]
    ok: np.ndarray
    affected: np.ndarray
    remapped: np.ndarray
    meta: dict = field(default_factory=dict)


def affected_qps(paths: list[np.ndarray], down: np.ndarray) -> np.ndarray:
    """QPs whose fabric path uses a link marked in the boolean mask ``down``."""
    return np.flatnonzero([bool(np.any(down[p])) if len(p) else False for p in paths])


def replan_after_failure(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig],
                         demand: Demand, paths: list[np.ndarray], sport: np.ndarray, *,
                         mode: str = "model", seed: int = 0) -> FailoverResult:
    """Re-plan after failures already reflected in ``routing`` (``routing.down``).

    Parameters
    ----------
    fabric, routing : fabric and the *new* link state.
    configs : switch hash models.
    demand : Demand — the QPs (same order as ``paths``/``sport``).
    paths : list of arrays — the fabric paths planned before the failure.
    sport : array (Q,) — their source ports.
    mode : {"model", "probe"} — how new ports are found.
    seed : int

    Returns
    -------
    FailoverResult
    """
    sport = np.asarray(sport, dtype=np.int64).copy()
    affected = affected_qps(paths, routing.down)
    pinned = np.ones(demand.n_qps, bool)
    pinned[affected] = False
    a = plan_paths(fabric, routing, demand, method="greedy", pinned=pinned, initial=paths,
                   seed=seed)
    # Which kept QPs does the shrunken group re-hash elsewhere?
    now = rehash(fabric, routing, configs, demand.src_nic, demand.dst_nic, sport)
    moved = ~same_paths([p[1:-1] for p in now], a.paths)
    moved[affected] = True
    remapped = np.setdiff1d(np.flatnonzero(moved), affected)
    todo = np.flatnonzero(moved)
    keep = np.flatnonzero(~moved)
    ip = fabric.node_ip
    excl = (ip[demand.src_nic[keep]], ip[demand.dst_nic[keep]], sport[keep])
    out_paths = list(now)
    ok = np.ones(demand.n_qps, bool)
    if len(todo):
        r = realize_paths(fabric, routing, configs, demand.src_nic[todo],
                          demand.dst_nic[todo], [a.paths[q] for q in todo], mode=mode,
                          exclude=excl, fallback_sport=sport[todo], seed=seed)
        solved = r.sport >= 0
        sport[todo[solved]] = r.sport[solved]
        for i, q in enumerate(todo.tolist()):
            out_paths[q] = r.paths[i]
        ok[todo] = r.ok
    return FailoverResult(a, sport, out_paths, ok, affected, remapped,
                          {"affected": len(affected), "remapped": len(remapped),
                           "ports_changed": len(todo), "verified": int(ok.sum()),
                           "max_util": a.max_util})
