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

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from icefabric.control.demand import Demand
from icefabric.control.planning import (
    LoadState,
    PathAssignment,
    PlanOptions,
    Subset,
    paths_to_csr,
    replan_subset,
)
from icefabric.control.realize import (
    QpPaths,
    RealizeOptions,
    inner_csr,
    realize_paths,
    rehash,
    rehash_csr,
    same_paths,
)
from icefabric.csr import CsrRows, gather
from icefabric.dataplane.ecmp import HashConfig
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing

__all__ = ["FailoverResult", "PlanBefore", "affected_qps", "replan_after_failure"]


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
    ptr, flat = paths_to_csr(paths)
    hit = np.bincount(np.repeat(np.arange(len(paths)), np.diff(ptr)), weights=down[flat],
                      minlength=len(paths))
    return np.flatnonzero(hit > 0)


def _changed_pairs(old: Routing, new: Routing, at: np.ndarray) -> np.ndarray:
    """Sorted ids ``switch index * n_leaves + leaf index`` of the (switch, leaf) pairs
    whose ECMP members differ between two link states (``at``: :func:`_ends` of them).

    The group of switch ``s`` toward leaf ``l`` holds the working links ``s -> t`` with
    ``t`` one hop closer to ``l``, so it can change only if a link out of ``s`` changed
    state, or the distance to ``l`` of ``s`` or of a neighbour ``t`` changed. Only those
    candidate pairs are compared (a few thousand of the 10 M of a 131,072-GPU fabric)."""
    f = old.fabric
    NL = len(old.leaves)
    parts = [(at[:, None] * NL + np.arange(NL)).ravel()]
    li, si = old.dist_changes(new)  # (leaf, switch) whose distance changed
    if len(si):
        parts.append(si * NL + li)
        # switches with a cable into a switch whose distance changed, toward that leaf:
        # the links into those switches (one pass over the link table, no sort of it)
        into = np.zeros(f.n_nodes, dtype=bool)
        into[old.switches[si]] = True
        lk = np.flatnonzero(into[f.link_dst])
        lk = lk[old.sw_index[f.link_src[lk]] >= 0]
        order = np.argsort(si, kind="stable")
        t = old.sw_index[f.link_dst[lk]]
        lo = np.searchsorted(si[order], t)
        n = np.searchsorted(si[order], t, side="right") - lo
        src = old.sw_index[f.link_src[np.repeat(lk, n)]]
        parts.append(src * NL + li[order[gather(lo, n)]])
    cand = np.unique(np.concatenate(parts))
    go, gn = old.grp_id[cand], new.grp_id[cand]
    size = np.diff(old.grp_indptr)[go]
    changed = size != np.diff(new.grp_indptr)[gn]
    same = np.flatnonzero(~changed)
    n = size[same]
    diff = old.grp_links[gather(old.grp_indptr[go[same]], n)] != \
        new.grp_links[gather(new.grp_indptr[gn[same]], n)]
    changed[same[np.bincount(np.repeat(np.arange(len(same)), n), diff, len(same)) > 0]] = True
    return cand[changed]


def _ends(old: Routing, new: Routing) -> np.ndarray:
    """Switch indices at the source of a link that changed state."""
    at = old.sw_index[old.fabric.link_src[np.flatnonzero(old.down != new.down)]]
    return np.unique(at[at >= 0])


def _qps_through(routing: Routing, demand: Demand, csr: tuple[np.ndarray, np.ndarray],
                 links: np.ndarray, pairs: np.ndarray, ends: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """QPs whose path uses one of ``links`` (mask over links), and QPs whose path crosses
    a (switch, destination leaf) pair of ``pairs`` (sorted ids, see :func:`_changed_pairs`).

    Only some path entries are looked at: those of links out of switches ``ends`` (where
    a link changed state, every leaf's group may change) or in ``links``, found in one
    pass over the entries, and every entry of the QPs toward the leaves of the other
    pairs (where a distance changed: a few leaves, ~500 QPs each at 1 M QPs)."""
    ptr, flat = csr
    f = routing.fabric
    NL = len(routing.leaves)
    sw = routing.switches[ends]
    hot = links.copy()
    n = f.out_indptr[sw + 1] - f.out_indptr[sw]
    hot[f.out_links[gather(f.out_indptr[sw], n)]] = True
    wide = np.zeros(len(routing.switches), dtype=bool)
    wide[ends] = True
    toward = np.zeros(f.n_nodes, dtype=bool)
    toward[routing.leaves[pairs[~wide[pairs // NL]] % NL]] = True
    rows = np.flatnonzero(toward[demand.dst_leaf])
    e = np.union1d(np.flatnonzero(hot[flat]), gather(ptr[rows], ptr[rows + 1] - ptr[rows]))
    row = np.searchsorted(ptr, e, side="right") - 1
    hit = np.unique(row[links[flat[e]]])
    key = routing.sw_index[f.link_src[flat[e]]] * NL + routing.leaf_index[demand.dst_leaf[row]]
    i = np.minimum(np.searchsorted(pairs, key), max(len(pairs) - 1, 0))
    through = np.unique(row[(pairs[i] == key) if len(pairs) else np.zeros(len(e), bool)])
    return hit, through


def _with_rows(seq, rows: np.ndarray, new):
    """``seq`` with rows ``rows`` set to ``new`` (a :class:`CsrRows` stays one)."""
    if isinstance(seq, CsrRows):
        return seq.replaced(rows, new)
    out = list(seq)
    for q, p in zip(rows.tolist(), new, strict=True):
        out[q] = p
    return out


@dataclass(frozen=True, eq=False)
class PlanBefore:
    """The plan in force when links failed: what :func:`replan_after_failure` starts from.

    Attributes
    ----------
    demand : Demand — the QPs (same order as ``paths``/``sport``).
    paths : list of arrays (or CsrRows) — the fabric paths planned before the failure.
    sport : array (Q,) — their source ports.
    full_paths : list of arrays, optional — the NIC-to-NIC paths before the failure (kept
        for QPs that do not move; recomputed by re-hashing when not given).
    routing : Routing, optional — link state before the failure. With it only QPs
        through ECMP groups that changed are re-hashed (fast path); without it every QP is.
    paths_csr : (indptr, links), optional — ``paths`` in CSR form, if the caller keeps it.
    load : optional — the plan's :func:`~icefabric.control.planning.load_state`.
    """

    demand: Demand
    paths: Sequence[np.ndarray]
    sport: np.ndarray
    full_paths: Sequence[np.ndarray] | None = None
    routing: Routing | None = None
    paths_csr: tuple[np.ndarray, np.ndarray] | None = None
    load: LoadState | None = None


def replan_after_failure(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig],
                         before: PlanBefore, *, mode: str = "model",
                         seed: int = 0) -> FailoverResult:
    """Re-plan after failures already reflected in ``routing`` (``routing.down``).

    Parameters
    ----------
    fabric, routing : fabric and the *new* link state.
    configs : switch hash models.
    before : PlanBefore — the plan in force before the failure.
    mode : {"model", "probe"} — how new ports are found.
    seed : int

    Returns
    -------
    FailoverResult
        Its paths are :class:`~icefabric.csr.CsrRows` where the given ones were.
    """
    demand, paths = before.demand, before.paths
    sport = np.asarray(before.sport, dtype=np.int64).copy()
    csr = before.paths_csr if before.paths_csr is not None else paths_to_csr(paths)
    affected, maybe = _candidates(routing, before.routing, demand, csr)
    new_sub, util = replan_subset(fabric, routing, demand, Subset(affected, csr, before.load),
                                  options=PlanOptions(seed=seed))
    new_paths = _with_rows(paths, affected, new_sub)
    # Which kept QPs does the shrunken group re-hash elsewhere?
    sub = np.setdiff1d(maybe, affected)
    sub = sub[sport[sub] >= 0]  # no planned port (none realised the path): nothing to check
    now = rehash_csr(fabric, routing, configs, demand.src_nic[sub], demand.dst_nic[sub],
                     sport[sub])
    stay = same_paths(inner_csr(*now), [paths[q] for q in sub.tolist()])
    remapped = sub[~stay]
    todo = np.union1d(affected, remapped)
    if before.full_paths is None:
        out_paths = rehash(fabric, routing, configs, demand.src_nic, demand.dst_nic, sport)
    else:
        out_paths = before.full_paths
    ok = sport >= 0  # kept QPs stay verified; one without a planned port never was
    if len(todo):
        qps = QpPaths(demand.src_nic[todo], demand.dst_nic[todo],
                      [new_paths[q] for q in todo.tolist()])
        opts = RealizeOptions(mode=mode, exclude=_ports_near(fabric, demand, sport, todo),
                              fallback_sport=sport[todo], seed=seed)
        r = realize_paths(fabric, routing, configs, qps, opts)
        solved = r.sport >= 0
        sport[todo[solved]] = r.sport[solved]
        out_paths = _with_rows(out_paths, todo, r.paths)
        ok[todo] = r.ok
    a = PathAssignment(new_paths, util, "failover", {"replanned": len(affected)})
    return FailoverResult(a, sport, out_paths, ok, affected, remapped,
                          {"affected": len(affected), "remapped": len(remapped),
                           "rehashed": len(sub), "ports_changed": len(todo),
                           "verified": int(ok.sum()), "max_util": a.max_util})


def _candidates(routing: Routing, old_routing: Routing | None, demand: Demand,
                csr: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The QPs whose path uses a down link, and those whose port may re-hash elsewhere:
    every QP without the link state before, else those through a group that changed."""
    ptr, flat = csr
    if old_routing is None:
        row = np.repeat(np.arange(demand.n_qps), np.diff(ptr))
        return np.unique(row[routing.down[flat]]), np.arange(demand.n_qps)
    ends = _ends(old_routing, routing)
    return _qps_through(routing, demand, csr, routing.down,
                        _changed_pairs(old_routing, routing, ends), ends)


def _ports_near(fabric: Fabric, demand: Demand, sport: np.ndarray, todo: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source IPs, destination IPs, ports) of the kept QPs that new ports for QPs
    ``todo`` must not take: only ports of the same NIC pairs can clash."""
    same_src = np.zeros(fabric.n_nodes, dtype=bool)
    same_src[demand.src_nic[todo]] = True
    near = np.flatnonzero(same_src[demand.src_nic])
    pair = demand.src_nic[near] * fabric.n_nodes + demand.dst_nic[near]
    keep = near[np.isin(pair, demand.src_nic[todo] * fabric.n_nodes + demand.dst_nic[todo])]
    keep = np.setdiff1d(keep, todo)
    ip = fabric.node_ip
    return ip[demand.src_nic[keep]], ip[demand.dst_nic[keep]], sport[keep]
