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
import scipy.sparse as sp

from icefabric.control.demand import Demand
from icefabric.control.planning import PathAssignment, _paths_csr, replan_subset
from icefabric.control.realize import (
    inner_csr,
    realize_paths,
    rehash,
    rehash_csr,
    same_paths,
)
from icefabric.dataplane.ecmp import HashConfig
from icefabric.topology.model import LINK_FABRIC, Fabric
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
    ptr, flat = _paths_csr(paths)
    hit = np.bincount(np.repeat(np.arange(len(paths)), np.diff(ptr)), weights=down[flat],
                      minlength=len(paths))
    return np.flatnonzero(hit > 0)


def _changed_groups(old: Routing, new: Routing) -> np.ndarray:
    """Boolean mask over (switch index x leaf index) pairs whose ECMP members changed."""
    so = np.diff(old.grp_indptr)[old.grp_id]
    changed = so != np.diff(new.grp_indptr)[new.grp_id]
    D = old.dist != new.dist  # (leaves, switches): distance to a leaf changed
    if not D.any():
        # Distances unchanged: failures only remove members, so a group changed iff its
        # size did.
        return changed
    # A group (s, leaf) can change only if the distance of s or of a neighbour of s to
    # that leaf changed; compare members of those groups only.
    f = old.fabric
    fab = f.link_kind == LINK_FABRIC
    S = len(old.switches)
    adj = sp.csr_matrix((np.ones(int(fab.sum())), (old.sw_index[f.link_src[fab]],
                                                   old.sw_index[f.link_dst[fab]])),
                        shape=(S, S))
    cand = D | (adj @ D.T.astype(np.float64)).T.astype(bool)  # (leaves, switches)
    li, si = np.nonzero(cand)
    NL = len(old.leaves)
    gid = np.zeros(len(so), bool)
    gid[si * NL + li] = True
    same = np.flatnonzero(~changed & gid)
    # Equal sizes: compare members once per distinct (old group, new group) pair.
    if len(same):
        n_new = len(new.grp_indptr)
        pairs, inv = np.unique(old.grp_id[same].astype(np.int64) * n_new + new.grp_id[same],
                               return_inverse=True)
        go, gn = pairs // n_new, pairs % n_new
        size = np.diff(old.grp_indptr)[go]
        lo = np.repeat(old.grp_indptr[go], size)
        ln = np.repeat(new.grp_indptr[gn], size)
        within = np.arange(len(lo)) - np.repeat(np.cumsum(size) - size, size)
        diff = old.grp_links[lo + within] != new.grp_links[ln + within]
        bad = np.zeros(len(pairs), bool)
        bad[np.repeat(np.arange(len(pairs)), size)[diff]] = True
        changed[same[bad[inv.ravel()]]] = True
    return changed


def replan_after_failure(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig],
                         demand: Demand, paths: list[np.ndarray], sport: np.ndarray, *,
                         full_paths: list[np.ndarray] | None = None,
                         old_routing: Routing | None = None,
                         paths_csr: tuple[np.ndarray, np.ndarray] | None = None,
                         load: np.ndarray | None = None, mode: str = "model",
                         seed: int = 0) -> FailoverResult:
    """Re-plan after failures already reflected in ``routing`` (``routing.down``).

    Parameters
    ----------
    fabric, routing : fabric and the *new* link state.
    configs : switch hash models.
    demand : Demand — the QPs (same order as ``paths``/``sport``).
    paths : list of arrays — the fabric paths planned before the failure.
    sport : array (Q,) — their source ports.
    full_paths : list of arrays, optional — the NIC-to-NIC paths before the failure (kept
        for QPs that do not move; recomputed by re-hashing when not given).
    old_routing : Routing, optional — link state before the failure. With it only QPs
        through ECMP groups that changed are re-hashed (fast path); without it every QP is.
    paths_csr : (indptr, links), optional — ``paths`` in CSR form, if the caller keeps it.
    load : array, optional — the plan's :func:`~icefabric.control.planning.load_state`.
    mode : {"model", "probe"} — how new ports are found.
    seed : int

    Returns
    -------
    FailoverResult
    """
    sport = np.asarray(sport, dtype=np.int64).copy()
    Q = demand.n_qps
    ptr, flat = paths_csr if paths_csr is not None else _paths_csr(paths)
    row = np.repeat(np.arange(Q), np.diff(ptr))
    hit = np.zeros(Q, bool)
    hit[row[routing.down[flat]]] = True
    affected = np.flatnonzero(hit)
    if old_routing is None:
        maybe = np.arange(Q)
    else:
        changed = _changed_groups(old_routing, routing)
        NL = len(routing.leaves)
        g = routing.sw_index[fabric.link_src[flat]] * NL + \
            routing.leaf_index[demand.dst_leaf[row]]
        maybe = np.unique(row[changed[g]])
    new_sub, util = replan_subset(fabric, routing, demand, affected, (ptr, flat), load=load,
                                 seed=seed)
    new_paths = list(paths)
    for q, p in zip(affected.tolist(), new_sub, strict=True):
        new_paths[q] = p
    # Which kept QPs does the shrunken group re-hash elsewhere?
    sub = np.setdiff1d(maybe, affected)
    sub = sub[sport[sub] >= 0]  # no planned port (none realised the path): nothing to check
    now = rehash_csr(fabric, routing, configs, demand.src_nic[sub], demand.dst_nic[sub],
                     sport[sub])
    stay = same_paths(inner_csr(*now), [paths[q] for q in sub.tolist()])
    remapped = sub[~stay]
    todo = np.union1d(affected, remapped)
    keep = np.ones(Q, bool)
    keep[todo] = False
    # Only ports of the same NIC pairs can clash with the new ones.
    pair = demand.src_nic * fabric.n_nodes + demand.dst_nic
    keep &= np.isin(pair, pair[todo])
    ip = fabric.node_ip
    excl = (ip[demand.src_nic[keep]], ip[demand.dst_nic[keep]], sport[keep])
    if full_paths is None:
        out_paths = rehash(fabric, routing, configs, demand.src_nic, demand.dst_nic, sport)
    else:
        out_paths = list(full_paths)
    ok = sport >= 0  # kept QPs stay verified; one without a planned port never was
    if len(todo):
        r = realize_paths(fabric, routing, configs, demand.src_nic[todo],
                          demand.dst_nic[todo], [new_paths[q] for q in todo.tolist()],
                          mode=mode, exclude=excl, fallback_sport=sport[todo], seed=seed)
        solved = r.sport >= 0
        sport[todo[solved]] = r.sport[solved]
        for i, q in enumerate(todo.tolist()):
            out_paths[q] = r.paths[i]
        ok[todo] = r.ok
    a = PathAssignment(new_paths, util, "failover", {"replanned": len(affected)})
    return FailoverResult(a, sport, out_paths, ok, affected, remapped,
                          {"affected": len(affected), "remapped": len(remapped),
                           "rehashed": len(sub), "ports_changed": len(todo),
                           "verified": int(ok.sum()), "max_util": a.max_util})
