"""Global path planning: pin every QP to a fabric path so that no link carries more than
its capacity within a communication phase (ICE's controller algorithm).

Objective: minimise the maximum link utilisation

``u_l = (sum over jobs j of max over phases p of j of sum_{q on l, q in p} rate_qp) / cap_l``

over fabric (switch-to-switch) links (see :mod:`icefabric.control.demand`). A plan with
``max u <= 1`` is collision-free: every QP can run at its demanded rate at once.

Methods (registry :data:`PLANNERS`, chosen with ``method=``):

* ``edge_coloring`` — 2-tier leaf-spine with uniform demand: bipartite multigraph edge
  colouring of the leaf-to-leaf QPs (Kőnig: ``Δ`` colours), colours folded onto uplinks;
  every uplink/downlink carries at most ``ceil(Δ/U)`` QPs, which is optimal.
* ``fat_tree`` — 3-tier fat-tree with uniform demand: the same colouring picks the
  aggregation plane, a second colouring per plane (source pod x destination pod) picks
  the core, so leaf, aggregation and core links are all balanced to the lower bound.
* ``greedy`` — any fabric, weighted demand (mixed NIC speeds, several jobs and phases):
  longest-rate-first greedy on the objective, then local improvement that moves QPs off
  the current bottleneck link while that strictly lowers it.
* ``milp`` — exact mixed-integer programme (scipy/HiGHS) for small instances; the
  optimality reference of the tests.
* ``auto`` — ``edge_coloring``/``fat_tree`` when the demand is uniform and nothing is
  pinned, else ``greedy``.

Incremental planning (a new job without moving existing QPs) and failure re-planning
pin QPs with :class:`Constraints` (``pinned``/``initial``) and plan only the others;
``method="greedy"`` with no pins is the explicit re-optimisation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from icefabric.control.coloring import bipartite_edge_coloring
from icefabric.control.demand import Demand
from icefabric.control.errors import ControlError
from icefabric.control.sport import dense_rows
from icefabric.csr import CsrRows, csr_from_lists, gather, indptr_from_lengths
from icefabric.topology.model import LINK_FABRIC, Fabric
from icefabric.topology.routing import Routing

__all__ = ["PLANNERS", "PathAssignment", "Candidates", "Constraints", "PlanOptions", "Subset",
           "assignment_from_paths", "plan_incremental", "reoptimize", "split_needed",
           "leaf_cut_bound", "link_utilization", "plan_paths", "qps_needed"]


# --------------------------------------------------------------------------- results
@dataclass(frozen=True, eq=False)
class PathAssignment:
    """Fabric path (switch-to-switch link ids, empty inside one leaf) of every QP.

    Attributes
    ----------
    paths : sequence of ndarray[int64] — one per QP of the demand (the colouring
        planners give a :class:`~icefabric.csr.CsrRows`: rows of one flat array).
    link_util : ndarray[float64] (n_links,) — planned utilisation of every link (the
        objective's ``u_l``; 0 on host and server-internal links).
    method : str — planner that produced it.
    meta : dict — planner statistics (moves, MILP status, ...).
    """

    paths: list[np.ndarray]
    link_util: np.ndarray
    method: str
    meta: dict = field(default_factory=dict)

    @property
    def max_util(self) -> float:
        return float(self.link_util.max(initial=0.0))

    @property
    def collision_free(self) -> bool:
        return self.max_util <= 1.0 + 1e-9


def qps_needed(rate_bps, path_capacity_bps) -> np.ndarray:
    """QPs a connection needs so that each fits one path: ``ceil(rate / capacity)``.

    A 400G sender whose uplinks are 200G needs two QPs on two different paths.

    Examples
    --------
    >>> qps_needed([400e9, 200e9, 100e9], 200e9).tolist()
    [2, 1, 1]
    """
    r = np.asarray(rate_bps, dtype=np.float64)
    c = np.asarray(path_capacity_bps, dtype=np.float64)
    return np.maximum(1, np.ceil(r / c - 1e-9)).astype(np.int64)


# --------------------------------------------------------------------------- candidates
def _all_paths(routing: Routing, src_leaf: int, dst_leaf: int, limit: int) -> np.ndarray:
    """Every shortest path from ``src_leaf`` to ``dst_leaf`` as an (n_paths, depth) array,
    expanded level by level with numpy (same order as :meth:`Routing.all_paths`)."""
    f = routing.fabric
    cur = np.array([src_leaf], dtype=np.int64)
    prefix = np.zeros((1, 0), dtype=np.int64)
    for _ in range(9):
        if np.all(cur == dst_leaf):
            return prefix
        dl = np.full(len(cur), dst_leaf, dtype=np.int64)
        n = routing.group_sizes(cur, dl)
        if np.any(n == 0):
            keep = n > 0
            cur, prefix, n, dl = cur[keep], prefix[keep], n[keep], dl[keep]
            if len(cur) == 0:
                break
        rep = np.repeat(np.arange(len(cur)), n)
        member = np.arange(len(rep)) - np.repeat(np.cumsum(n) - n, n)
        link = routing.group_member(cur[rep], dl[rep], member)
        prefix = np.column_stack([prefix[rep], link])[:limit]
        cur = f.link_dst[link][:limit].astype(np.int64)
    from icefabric.topology.routing import RoutingError

    raise RoutingError(f"no path from {f.node_names[src_leaf]} to {f.node_names[dst_leaf]}")


class Candidates:
    """All shortest fabric paths of every distinct (source leaf, destination leaf) pair,
    enumerated lazily (only pairs that are asked for).

    ``pair[q]`` is the pair of QP ``q`` (-1 for a QP left out by ``qps``);
    ``pair_paths(k)`` an int64 array (n_paths, depth) of link ids of pair ``k`` (depth 0
    inside one leaf).
    """

    def __init__(self, routing: Routing, demand: Demand, limit: int = 4096,
                 qps: np.ndarray | None = None):
        self.routing = routing
        self.limit = limit
        self._n = routing.fabric.n_nodes + 1
        sel = slice(None) if qps is None else qps  # qps: only these QPs (others: -1)
        key = demand.src_leaf[sel] * self._n + demand.dst_leaf[sel]
        self.keys, pair = np.unique(key, return_inverse=True)
        self.pair = np.full(demand.n_qps, -1, dtype=np.int64)
        self.pair[sel] = pair.ravel()
        self._paths: dict[int, np.ndarray] = {}
        self._index: dict[int, dict[tuple, int]] = {}

    def pair_paths(self, k: int) -> np.ndarray:
        p = self._paths.get(k)
        if p is None:
            a, b = divmod(int(self.keys[k]), self._n)
            p = (np.zeros((1, 0), dtype=np.int64) if a == b else
                 _all_paths(self.routing, a, b, self.limit))
            self._paths[k] = p
        return p

    def of(self, q: int) -> np.ndarray:
        return self.pair_paths(int(self.pair[q]))

    def index_of(self, q: int, path: np.ndarray) -> int:
        """Candidate index of ``path`` for QP ``q`` (-1 if it is not a candidate)."""
        k = int(self.pair[q])
        idx = self._index.get(k)
        if idx is None:
            idx = self._index[k] = {tuple(r): i for i, r in
                                    enumerate(self.pair_paths(k).tolist())}
        return idx.get(tuple(np.asarray(path).tolist()), -1)


# --------------------------------------------------------------------------- load state
def paths_to_csr(paths: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``paths`` as one CSR ``(indptr, links)`` (the controller keeps its plan state in
    this form)."""
    return csr_from_lists(paths)


def _hop_loads(demand: Demand, e: np.ndarray, rows: np.ndarray, ptr: np.ndarray,
               flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Link, phase and rate of every hop of entries ``e`` (in entry order, each path in
    order), entry ``e[i]`` riding row ``rows[i]`` of the CSR ``(ptr, flat)``."""
    n = ptr[rows + 1] - ptr[rows]
    rep = np.repeat(np.arange(len(e)), n)
    return flat[gather(ptr[rows], n)], demand.ent_phase[e][rep], demand.ent_rate_bps[e][rep]


def _one_phase_per_job(demand: Demand) -> bool:
    """Phase ``j`` is job ``j``'s only phase (a job of one collective)."""
    nj = max(len(demand.job_names), 1)
    return nj == max(demand.n_phases, 1) and np.array_equal(demand.phase_job, np.arange(nj))


#: Entries (links x phases plus links x jobs) up to which :class:`LoadState` keeps link-sized
#: tables; past it (many jobs) it keeps a row per (link, job) that carries load instead:
#: 5,000 jobs on 802,560 links asked for 29.9 GiB of dense tables. One job keeps them
#: link-sized whatever its phases (its row per link would hold the same columns).
_DENSE_ENTRIES = 1 << 24


class LoadState:
    """Link x phase rate sums and the objective's per-link value, updated incrementally.

    ``L[l, p]``: rate sum of phase ``p`` on link ``l``; ``M[l, j]``: job ``j``'s peak
    phase there; ``S[l]``: the sum over jobs (the objective's numerator). ``S`` is
    link-sized; ``L`` and ``M`` are link-sized tables when they are small (``dense``), else
    rows of the (link, job) pairs that carry load (:class:`_Slots`), with the same values
    and sums (``S`` of a link with three jobs or more is added as the dense table adds its
    row). Where every job has one phase (phase ``j`` is job ``j``), a job's maximum over
    its phases is the phase's load: the dense ``M`` is then ``L`` itself (and ``S``, with
    one job, its column)."""

    def __init__(self, fabric: Fabric, demand: Demand):
        self.cap = fabric.link_capacity_bps.astype(np.float64, copy=False)  # read only
        self.fab = fabric.link_kind == LINK_FABRIC
        self.n_links = fabric.n_links
        self.demand = demand
        P = max(demand.n_phases, 1)
        nj = max(len(demand.job_names), 1)
        self.job_phases = [np.flatnonzero(demand.phase_job == j) for j in range(nj)]
        self.q_job = demand.job
        # position of each phase inside its job's phase list
        self.pos_in_job = np.zeros(P, dtype=np.int64)
        for ph in self.job_phases:
            self.pos_in_job[ph] = np.arange(len(ph))
        self.dense = nj == 1 or fabric.n_links * (P + nj) <= _DENSE_ENTRIES
        self._alias = self.dense and _one_phase_per_job(demand)
        self._s_alias = self._alias and nj == 1
        if not self.dense:
            self.slots = _Slots(fabric.n_links, demand.phase_job, self.pos_in_job, nj)
            self.S = np.zeros(fabric.n_links)
            return
        self.L = np.zeros((fabric.n_links, P))
        if self._alias:
            self.M = self.L
            self.S = self.L[:, 0] if self._s_alias else np.zeros(fabric.n_links)
        else:
            self.M = np.zeros((fabric.n_links, nj))
            self.S = np.zeros(fabric.n_links)

    def copy(self) -> LoadState:
        """An independent copy (a re-plan changes its copy of the plan's load)."""
        out = LoadState.__new__(LoadState)
        out.__dict__.update(self.__dict__)
        if not self.dense:
            out.slots, out.S = self.slots.copy(), self.S.copy()
            return out
        out.L = self.L.copy()
        out.M = out.L if self._alias else self.M.copy()
        out.S = out.L[:, 0] if self._s_alias else self.S.copy()
        return out

    def _span(self, q: int) -> slice:
        """QP ``q``'s entries (:meth:`Demand.entry_spans`: no QP-sized pointer)."""
        lo, n = self.demand.entry_spans(q)
        return slice(int(lo), int(lo + n))

    def _refresh(self, links=None) -> None:
        if not self.dense:
            links = np.arange(self.n_links) if links is None else links
            self.S[links] = self.slots.sums(links)
            return
        sel = slice(None) if links is None else links
        if not self._alias:
            for j, jp in enumerate(self.job_phases):
                if len(jp):
                    self.M[sel, j] = self.L[sel][:, jp].max(axis=1)
        if not self._s_alias:
            self.S[sel] = self.M[sel].sum(axis=1)

    def add_rows(self, e: np.ndarray, rows: np.ndarray, ptr: np.ndarray, flat: np.ndarray,
                 sign: float = 1.0) -> None:
        """Add (``sign`` -1: take away) the load of demand entries ``e`` (sorted), entry
        ``e[i]`` riding row ``rows[i]`` of the CSR ``(ptr, flat)``: every (link, phase) sum
        is formed first (in entry order, each path in order), then added to the table."""
        links, phase, rate = _hop_loads(self.demand, e, rows, ptr, flat)
        P = max(self.demand.n_phases, 1)
        if self.dense:
            if sign > 0 and len(links) * 4 > self.n_links:
                self.L += np.bincount(links * P + phase, weights=rate,
                                      minlength=self.n_links * P).reshape(self.n_links, P)
                self._refresh()
                return
            u, at = np.unique(links, return_inverse=True)
            sums = np.bincount(at * P + phase, weights=rate, minlength=len(u) * P)
            if sign > 0:
                self.L[u] += sums.reshape(-1, P)
            else:
                self.L[u] -= sums.reshape(-1, P)
        else:
            u = self.slots.add(links, phase, rate, sign)
        self._refresh(u)

    def add_many(self, qps: np.ndarray, paths: list[np.ndarray]) -> None:
        """Add many QPs at once (vectorised)."""
        ptr, flat = paths_to_csr(paths)
        pos = np.full(self.demand.n_qps, -1, dtype=np.int64)
        pos[np.asarray(qps, dtype=np.int64)] = np.arange(len(qps))
        e = np.flatnonzero(pos[self.demand.ent_qp] >= 0)
        self.add_rows(e, pos[self.demand.ent_qp[e]], ptr, flat)

    def add(self, q: int, links: np.ndarray, sign: float = 1.0) -> None:
        span = self._span(q)
        ps = self.demand.ent_phase[span]
        if len(links) == 0 or len(ps) == 0:
            return
        if not self.dense:
            j = int(self.q_job[q])
            self.slots.add_qp(links, j, self.pos_in_job[ps], sign * self.demand.ent_rate_bps[span])
            self.S[links] = self.slots.sums(links)
            return
        self.L[np.ix_(links, ps)] += sign * self.demand.ent_rate_bps[span]
        if not self._alias:
            j = int(self.q_job[q])
            self.M[links, j] = self.L[np.ix_(links, self.job_phases[j])].max(axis=1)
        if not self._s_alias:
            self.S[links] = self.M[links].sum(axis=1)

    def util(self) -> np.ndarray:
        u = self.S / self.cap
        u[~self.fab] = 0.0
        return u

    def rate_sums(self) -> np.ndarray:
        """The dense link x phase table ``L`` (small instances: the MILP's pinned load)."""
        return self.L if self.dense else self.slots.dense_l(self.demand.n_phases)

    def score(self, q: int, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(max, sum) of the utilisation of each candidate's links if ``q`` took it."""
        if cand.shape[1] == 0:
            z = np.zeros(cand.shape[0])
            return z, z
        flat = cand.ravel()
        span = self._span(q)
        ps, rate = self.demand.ent_phase[span], self.demand.ent_rate_bps[span]
        if self._s_alias:  # S = M = L: the sum below is the new load itself
            u = (self.L[flat, 0] + (rate[0] if len(ps) else 0.0)) / self.cap[flat]
        else:
            j = int(self.q_job[q])
            if self.dense:
                sub, m = self.L[np.ix_(flat, self.job_phases[j])], self.M[flat, j]
            else:
                sub, m = self.slots.job_rows(flat, j, len(self.job_phases[j]))
            if len(ps):
                sub[:, self.pos_in_job[ps]] += rate
            newm = sub.max(axis=1) if sub.shape[1] else np.zeros(len(flat))
            u = (self.S[flat] - m + newm) / self.cap[flat]
        u = u.reshape(cand.shape)
        return u.max(axis=1), u.sum(axis=1)


class _Slots:
    """:class:`LoadState`'s tables where they carry load: a row per (link, job) pair, its job's
    phase sums ``L`` (column = the phase's position in its job; ``-inf`` past the job's
    phases, so a row's maximum is the job's peak ``M``). A link's rows are chained in job
    order from ``head[link]`` (``nxt``; -1 ends a chain): looking up many links of one job
    walks the chains a step per job below it, vectorised over the links."""

    def __init__(self, n_links: int, phase_job: np.ndarray, pos_in_job: np.ndarray, nj: int):
        self.nj = nj
        self.phase_job, self.pos_in_job = phase_job, pos_in_job
        self.n_ph = np.bincount(phase_job, minlength=nj)
        self.W = max(int(self.n_ph.max(initial=1)), 1)
        self.head = np.full(n_links, -1, dtype=np.int64)
        self.n = 0
        self._grow(64)

    def _grow(self, cap: int) -> None:
        old = self.n
        for name, fill, shape in (("link", -1, ()), ("job", -1, ()), ("nxt", -1, ()),
                                  ("M", 0.0, ()), ("L", 0.0, (self.W,))):
            a = np.full((cap, *shape), fill, dtype=np.float64 if name in "LM" else np.int64)
            if old:
                a[:old] = getattr(self, name)[:old]
            setattr(self, name, a)

    def copy(self) -> _Slots:
        out = _Slots.__new__(_Slots)
        out.__dict__.update(self.__dict__)
        for name in ("head", "link", "job", "nxt", "M", "L"):
            setattr(out, name, getattr(self, name).copy())
        return out

    def find(self, links: np.ndarray, jobs) -> np.ndarray:
        """Row of (``links[i]``, ``jobs[i]``) (``jobs``: one job or one per link), -1
        where there is none."""
        jobs = np.broadcast_to(jobs, links.shape)
        s = self.head[links]
        walk = s >= 0
        while True:
            walk[walk] = self.job[s[walk]] < jobs[walk]
            if not walk.any():
                break
            s[walk] = self.nxt[s[walk]]
            walk &= s >= 0
        found = s >= 0
        found[found] = self.job[s[found]] == jobs[found]
        return np.where(found, s, -1)

    def _new_rows(self, links: np.ndarray, jobs: np.ndarray) -> np.ndarray:
        """Rows for distinct (link, job) pairs that have none, chained in job order."""
        k = len(links)
        if self.n + k > len(self.link):
            self._grow(max(2 * len(self.link), self.n + k))
        rows = np.arange(self.n, self.n + k)
        self.n += k
        self.link[rows], self.job[rows] = links, jobs
        self.L[rows] = np.where(np.arange(self.W) < self.n_ph[jobs][:, None], 0.0, -np.inf)
        self.M[rows] = 0.0
        if k > 64:  # many: re-chain every row of the links that got one
            mine = np.flatnonzero(np.isin(self.link[:self.n], links))
            mine = mine[np.lexsort((self.job[mine], self.link[mine]))]
            last = np.r_[self.link[mine][1:] != self.link[mine][:-1], True]
            self.nxt[mine] = np.where(last, -1, np.r_[mine[1:], -1])
            first = np.r_[True, last[:-1]]
            self.head[self.link[mine[first]]] = mine[first]
            return rows
        for r, lk, j in zip(rows.tolist(), links.tolist(), jobs.tolist(), strict=True):
            prev, cur = -1, int(self.head[lk])
            while cur >= 0 and self.job[cur] < j:
                prev, cur = cur, int(self.nxt[cur])
            self.nxt[r] = cur
            if prev < 0:
                self.head[lk] = r
            else:
                self.nxt[prev] = r
        return rows

    def rows_of(self, links: np.ndarray, jobs: np.ndarray) -> np.ndarray:
        """Row of every (link, job) pair, made where missing."""
        u, inv = np.unique(links * self.nj + jobs, return_inverse=True)
        ul, uj = u // self.nj, u % self.nj
        rows = self.find(ul, uj)
        miss = rows < 0
        if miss.any():
            rows[miss] = self._new_rows(ul[miss], uj[miss])
        return rows[inv.ravel()]

    def add(self, links: np.ndarray, phase: np.ndarray, rate: np.ndarray, sign: float
            ) -> np.ndarray:
        """Add (``sign`` -1: take away) entries' rates, summed per (link, phase) in entry
        order first; returns the links touched."""
        rows = self.rows_of(links, self.phase_job[phase])
        cell = rows * self.W + self.pos_in_job[phase]
        u, at = np.unique(cell, return_inverse=True)
        sums = np.bincount(at.ravel(), weights=rate, minlength=len(u))
        flat_l = self.L.reshape(-1)
        if sign > 0:
            flat_l[u] += sums
        else:
            flat_l[u] -= sums
        r = np.unique(u // self.W)
        self.M[r] = self.L[r].max(axis=1)
        return np.unique(self.link[r])

    def add_qp(self, links: np.ndarray, j: int, cols: np.ndarray, rate: np.ndarray) -> None:
        """One QP of job ``j`` on ``links``: ``rate`` (signed) into columns ``cols``."""
        rows = self.rows_of(links, np.full(len(links), j, dtype=np.int64))
        self.L[np.ix_(rows, cols)] += rate
        self.M[rows] = self.L[rows].max(axis=1)

    def job_rows(self, links: np.ndarray, j: int, nph: int) -> tuple[np.ndarray, np.ndarray]:
        """Job ``j``'s phase sums on ``links`` (``(len(links), nph)``, zeros where it has
        none) and its peak there."""
        rows = self.find(links, j)
        has = rows >= 0
        sub = np.zeros((len(links), nph))
        sub[has] = self.L[rows[has], :nph]
        return sub, np.where(has, self.M[rows], 0.0)

    def sums(self, links: np.ndarray) -> np.ndarray:
        """``S`` of ``links`` as the dense ``M[links].sum(axis=1)``: one or two jobs add
        exactly in any order; three or more are added as a dense row of every job (zeros
        included, numpy's pairwise order), a block of rows at a time."""
        pos, rows = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        s = self.head[links]
        at = np.arange(len(links))
        while len(at):
            keep = s >= 0
            at, s = at[keep], s[keep]
            pos.append(at)
            rows.append(s)
            s = self.nxt[s]
        pos, rows = np.concatenate(pos), np.concatenate(rows)
        out = np.bincount(pos, weights=self.M[rows], minlength=len(links))
        many = np.bincount(pos, minlength=len(links)) >= 3
        if many.any():
            sel = np.flatnonzero(many[pos])
            idx = np.flatnonzero(many)
            local = np.searchsorted(idx, pos[sel])
            order = np.argsort(local, kind="stable")
            local, rows = local[order], rows[sel[order]]
            block = max(1, (1 << 22) // self.nj)
            for a in range(0, len(idx), block):
                lo, hi = np.searchsorted(local, [a, a + block])
                dense = np.zeros((min(block, len(idx) - a), self.nj))
                dense[local[lo:hi] - a, self.job[rows[lo:hi]]] = self.M[rows[lo:hi]]
                out[idx[a:a + block]] = dense.sum(axis=1)
        return out

    def dense_l(self, P: int) -> np.ndarray:
        """The link x phase table (small instances only)."""
        out = np.zeros((len(self.head), max(P, 1)))
        for p in range(P):
            r = np.flatnonzero(self.job[:self.n] == self.phase_job[p])
            out[self.link[r], p] = self.L[r, self.pos_in_job[p]]
        return out


def link_utilization(fabric: Fabric, demand: Demand, paths: list[np.ndarray]) -> np.ndarray:
    """The objective's per-link utilisation ``u_l`` of a given assignment (vectorised)."""
    st = LoadState(fabric, demand)
    st.add_many(np.arange(demand.n_qps), paths)
    return st.util()


def load_state(fabric: Fabric, demand: Demand, paths_csr: tuple[np.ndarray, np.ndarray]
               ) -> LoadState:
    """The load of a whole plan: its link x phase rate sums and per-link objective (what a
    controller keeps next to its plan, so that re-planning a few QPs does not recompute
    the load of all the others); pass it to :func:`replan_subset` as ``load``."""
    st = LoadState(fabric, demand)
    st.add_rows(np.arange(len(demand.ent_qp)), demand.ent_qp, *paths_csr)
    return st


@dataclass(frozen=True, eq=False)
class Constraints:
    """What a plan must respect besides the links' capacity.

    Attributes
    ----------
    pinned : bool array (Q,), optional — QPs that keep ``initial[q]`` (incremental
        planning of a new job, failure re-planning); only ``greedy``, ``milp`` and
        ``auto`` keep QPs.
    initial : list of arrays, optional — current paths of the pinned QPs.
    forbid : dict QP -> set of candidate indices, optional — paths not to use (e.g. no
        source port realises them); ``greedy`` and ``auto`` read it.
    """

    pinned: np.ndarray | None = None
    initial: list[np.ndarray] | None = None
    forbid: dict[int, set[int]] | None = None

    def pins_any(self) -> bool:
        return self.pinned is not None and bool(np.any(self.pinned))


@dataclass(frozen=True)
class PlanOptions:
    """How a planner searches.

    Attributes
    ----------
    improve : bool — run local improvement after greedy.
    seed : int, optional — tie-breaking order.
    swaps : int, optional — two-QP swaps local improvement may try (default: 32 for a
        plan, 0 for :func:`replan_subset`: a failure that removed capacity usually cannot
        be fully absorbed, and the fail-over path must stay fast).
    time_limit_s : float — the MILP solver's time limit.
    """

    improve: bool = True
    seed: int | None = None
    swaps: int | None = None
    time_limit_s: float = 30.0


@dataclass(frozen=True, eq=False)
class Subset:
    """QPs to re-plan against the rest of a plan.

    Attributes
    ----------
    qps : array of int — the QPs that move.
    paths_csr : (indptr, links) — the current fabric path of every QP.
    load : the plan's :func:`load_state` (all QPs), if the caller keeps it (not changed).
    """

    qps: np.ndarray
    paths_csr: tuple[np.ndarray, np.ndarray]
    load: LoadState | None = None


def replan_subset(fabric: Fabric, routing: Routing, demand: Demand, subset: Subset,
                  constraints: Constraints | None = None, options: PlanOptions | None = None
                  ) -> tuple[list[np.ndarray], np.ndarray]:
    """Plan only the QPs of ``subset`` (greedy + local improvement restricted to them)
    against the load of every other QP on its current path; the fast path of failure
    re-planning. Returns the new paths of ``subset.qps`` (in order) and the resulting
    per-link utilisation. ``constraints.forbid`` is read (nothing is pinned: the other
    QPs stay where they are)."""
    c, o = constraints or Constraints(), options or PlanOptions()
    rng = np.random.default_rng(o.seed)
    qps = np.asarray(subset.qps, dtype=np.int64)
    Q = demand.n_qps
    ptr, flat = subset.paths_csr
    load = subset.load
    others = np.ones(Q, bool)
    others[qps] = False
    if load is None:
        st = LoadState(fabric, demand)
        e = np.flatnonzero(others[demand.ent_qp])
        st.add_rows(e, demand.ent_qp[e], ptr, flat)
    else:
        # the plan's load less that of the QPs that move, summed (as load_state summed
        # it) on their links only
        st = load.copy()
        e = demand.entries(qps)
        st.add_rows(e, demand.ent_qp[e], ptr, flat, sign=-1.0)
    cands = Candidates(routing, demand, qps=qps)  # only the QPs that move
    s = _Search(cands, st, np.full(Q, -1, dtype=np.int64), c.forbid or {})
    _greedy(s, demand, qps, rng)
    if o.improve and len(qps):
        _improve(s, demand, ~others, 20 * len(qps) + 100, swaps=o.swaps or 0)
    return [cands.of(q)[s.choice[q]] for q in qps.tolist()], st.util()


def assignment_from_paths(fabric: Fabric, demand: Demand, paths: list[np.ndarray],
                          method: str = "given", meta: dict | None = None) -> PathAssignment:
    """Wrap explicit paths (e.g. what ECMP hashing produced) for comparison."""
    paths = [np.asarray(p, dtype=np.int64) for p in paths]
    return PathAssignment(paths, link_utilization(fabric, demand, paths), method,
                          dict(meta or {}))


# --------------------------------------------------------------------------- greedy
@dataclass(eq=False)
class _Search:
    """One planning call's search: each QP's candidate paths, the link loads, the candidate
    each QP holds (-1: none yet) and the candidates it must not take."""

    cands: Candidates
    st: LoadState
    choice: np.ndarray
    forbid: dict[int, set[int]]


@dataclass(eq=False)
class _Movable:
    """The QPs local improvement may move (``mq``), the current path of each (a row of
    ``pm``, -1 padded) and their peak rates."""

    mq: np.ndarray
    pm: np.ndarray
    rate: np.ndarray


def _best_candidate(st, q, cand, forbid) -> tuple[int, np.ndarray]:
    """Index of the candidate path of QP ``q`` with the lowest (max, sum) utilisation given
    the current loads (forbidden candidates excluded), and the per-candidate max."""
    mx, sm = st.score(q, cand)
    bad = forbid.get(q)
    if bad:
        mx = mx.copy()
        mx[list(bad)] = np.inf
    return int(np.lexsort((sm, mx))[0]), mx


def _greedy(s: _Search, demand: Demand, todo: np.ndarray, rng: np.random.Generator) -> None:
    """Give each QP of ``todo`` its best candidate given the load so far, biggest first."""
    rate = demand.peak_rates(todo)
    ncand = np.array([s.cands.of(q).shape[0] for q in todo], dtype=np.int64)
    # Longest-processing-time order: big rates first, then the most constrained QPs.
    order = np.lexsort((rng.random(len(todo)), ncand, -rate))
    for q in np.asarray(todo)[order].tolist():
        cand = s.cands.of(q)
        best, _ = _best_candidate(s.st, q, cand, s.forbid)
        s.choice[q] = best
        s.st.add(q, cand[best])


def _set_row(pm, i, path):
    pm[i, :] = -1
    pm[i, :len(path)] = path


def _try_swap(s: _Search, mv: _Movable, rows: np.ndarray, l: int, umax: float,
              width: int = 6) -> bool:
    """Two-QP move: put a QP ``q`` of the bottleneck link ``l`` (one of ``rows``) on a path
    whose only obstacle is another QP ``q2``, and move ``q2`` elsewhere, if afterwards every
    touched link is strictly below ``umax``. Resolves granularity deadlocks a single move
    cannot."""
    eps = 1e-9
    cands, st, choice, forbid, mq, pm = s.cands, s.st, s.choice, s.forbid, mv.mq, mv.pm
    row_of = {int(q): i for i, q in enumerate(mq.tolist())}
    for i in rows.tolist():
        q = int(mq[i])
        cand = cands.of(q)
        cur = int(choice[q])
        st.add(q, cand[cur], -1.0)
        mx, sm = st.score(q, cand)
        bad = forbid.get(q, set())
        for k in np.lexsort((sm, mx))[:width].tolist():
            if k == cur or k in bad:
                continue
            st.add(q, cand[k])
            lk = cand[k]
            block = lk[st.S[lk] / st.cap[lk] >= umax - eps]
            for m in block[:2].tolist():
                for j in np.flatnonzero((pm == m).any(axis=1)).tolist():
                    q2 = int(mq[j])
                    if q2 == q:
                        continue
                    cand2 = cands.of(q2)
                    c2 = int(choice[q2])
                    st.add(q2, cand2[c2], -1.0)
                    b2, _ = _best_candidate(st, q2, cand2, forbid)
                    st.add(q2, cand2[b2])
                    touched = np.unique(np.r_[lk, cand2[b2], cand[cur], cand2[c2], [l]])
                    if b2 != c2 and np.all(st.S[touched] / st.cap[touched] < umax - eps):
                        choice[q], choice[q2] = k, b2
                        _set_row(pm, i, cand[k])
                        _set_row(pm, row_of[q2], cand2[b2])
                        return True
                    st.add(q2, cand2[b2], -1.0)
                    st.add(q2, cand2[c2])
            st.add(q, cand[k], -1.0)
        st.add(q, cand[cur])
    return False


def _improve(s: _Search, demand: Demand, movable: np.ndarray, max_moves: int,
             swaps: int = 32) -> int:
    """Move QPs off the most loaded link (among links that carry a movable QP) while that
    strictly lowers its utilisation; links at the same level are tried in turn."""
    mq = np.flatnonzero(movable)
    if len(mq) == 0:
        return 0
    cands, st, choice, forbid = s.cands, s.st, s.choice, s.forbid
    rate = demand.peak_rates(mq)  # of the movable QPs, in their order
    dmax = max(max(cands.of(q).shape[1] for q in mq.tolist()), 1)
    pm = np.full((len(mq), dmax), -1, dtype=np.int64)  # current path of each movable QP
    for i, q in enumerate(mq.tolist()):
        p = cands.of(q)[choice[q]]
        pm[i, :len(p)] = p
    mv = _Movable(mq, pm, rate)
    moves = 0
    tabu: set[int] = set()
    while moves < max_moves:
        links = np.unique(pm[pm >= 0])
        if len(links) == 0:
            break
        u = st.S[links] / st.cap[links]
        if tabu:
            u[np.isin(links, list(tabu), kind="sort")] = -1  # no table over link ids
        k = int(np.argmax(u))
        l, umax = int(links[k]), float(u[k])
        if umax <= 0:
            break
        rows = np.flatnonzero((pm == l).any(axis=1))
        rows = rows[np.argsort(-rate[rows], kind="stable")]
        moved = False
        for i in rows.tolist():
            q = int(mq[i])
            cand = cands.of(q)
            cur = int(choice[q])
            st.add(q, cand[cur], -1.0)
            best, mx = _best_candidate(st, q, cand, forbid)
            if best != cur and mx[best] < umax - 1e-9:
                choice[q] = best
                st.add(q, cand[best])
                _set_row(pm, i, cand[best])
                moves += 1
                moved = True
                break
            st.add(q, cand[cur])
        if not moved and swaps > 0 and umax > 1.0 + 1e-9:
            # Swaps only while the plan still has collisions, and a bounded number of tries.
            swaps -= 1
            moved = _try_swap(s, mv, rows, l, umax)
            if moved:
                moves += 1
        if moved:
            tabu.clear()
            continue
        # This link cannot be lowered by a single move or swap; try the next one if it is
        # at the same level (ties), else stop.
        tabu.add(l)
        u[k] = -1
        if float(u.max(initial=0)) < umax - 1e-9 or len(tabu) > 64:
            break
    return moves


@dataclass(frozen=True, eq=False)
class _Start:
    """Where :func:`plan_greedy` starts: ``cands`` shared with another plan of the same
    demand, and ``warm`` paths (e.g. a colouring) local improvement starts from instead of
    building greedily."""

    cands: Candidates | None = None
    warm: list[np.ndarray] | None = None


def plan_greedy(fabric, routing, demand, constraints: Constraints | None = None,
                options: PlanOptions | None = None, start: _Start | None = None
                ) -> PathAssignment:
    """Greedy + local improvement (see module docstring)."""
    c, o, start = constraints or Constraints(), options or PlanOptions(), start or _Start()
    rng = np.random.default_rng(o.seed)
    cands = start.cands or Candidates(routing, demand)
    st = LoadState(fabric, demand)
    Q = demand.n_qps
    choice = np.full(Q, -1, dtype=np.int64)
    pinned = np.zeros(Q, bool) if c.pinned is None else np.asarray(c.pinned, bool)
    initial, warm = c.initial, start.warm
    s = _Search(cands, st, choice, c.forbid or {})
    fixed_paths: dict[int, np.ndarray] = {}
    pq = np.flatnonzero(pinned)
    st.add_many(pq, [np.asarray(initial[q], dtype=np.int64) for q in pq.tolist()])
    for q in pq.tolist():
        fixed_paths[q] = np.asarray(initial[q], dtype=np.int64)  # carries load, never moves
    todo = np.flatnonzero(~pinned)
    if warm is not None:
        for q in todo.tolist():
            choice[q] = max(cands.index_of(q, warm[q]), 0)
        st.add_many(todo, [cands.of(q)[choice[q]] for q in todo.tolist()])
    else:
        _greedy(s, demand, todo, rng)
    moves = 0
    if o.improve and len(todo):
        movable = ~pinned & (choice >= 0)
        moves = _improve(s, demand, movable, 20 * Q + 100,
                         swaps=32 if o.swaps is None else o.swaps)
    paths = [fixed_paths[q] if pinned[q] else cands.of(q)[choice[q]] for q in range(Q)]
    return PathAssignment(paths, st.util(), "greedy", {"moves": moves,
                                                       "pinned": int(pinned.sum()),
                                                       "warm": warm is not None})


# --------------------------------------------------------------------------- colouring
def _parallel_index(fabric: Fabric) -> np.ndarray:
    """Rank of each link among the parallel links with the same (src, dst) nodes."""
    key = fabric.link_src.astype(np.int64) * fabric.n_nodes + fabric.link_dst
    order = np.lexsort((np.arange(fabric.n_links), key))
    ks = key[order]
    start = np.r_[0, np.flatnonzero(np.diff(ks)) + 1]
    rank = np.arange(len(ks)) - np.repeat(start, np.diff(np.r_[start, len(ks)]))
    out = np.empty(fabric.n_links, dtype=np.int64)
    out[order] = rank
    return out


def _walk_slots(fabric, routing, demand, qs, slots) -> tuple[np.ndarray, np.ndarray]:
    """Route QPs ``qs`` hop by hop: at step ``d`` take member ``slots[d][i] mod n`` when
    given (>= 0), else the member with the same parallel index as the previous link.
    Returns the fabric paths as a CSR ``(indptr, links)``."""
    par = _parallel_index(fabric)
    last = np.zeros(len(qs), dtype=np.int64)

    def choose(step, idx, switches, dst_leaves, n):
        s = slots[step][idx] if step < len(slots) else np.full(len(idx), -1)
        member = np.where(s >= 0, s % n, par[last[idx]] % n)
        last[idx] = routing.group_member(switches, dst_leaves, member)
        return member

    from icefabric.control.realize import inner_csr

    return inner_csr(*routing.walk_csr(demand.src_nic[qs], demand.dst_nic[qs], choose))


def _color_classes(demand: Demand, qs: np.ndarray) -> list[np.ndarray]:
    """Groups of QPs coloured separately: QPs with the same set of phases (a ring
    channel's QPs, an AllToAll's QPs, ...). Each class is balanced on its own, so every
    phase — the sum of its classes — is balanced too."""
    if len(qs) == 0:
        return []
    ptr = demand.ent_ptr()
    cnt = np.diff(ptr)
    E = max(int(cnt.max(initial=0)), 1)
    mat = np.full((demand.n_qps, E), -1, dtype=np.int64)
    within = np.arange(len(demand.ent_qp)) - ptr[demand.ent_qp]
    mat[demand.ent_qp, within] = demand.ent_phase
    sub = mat[qs]
    cls = dense_rows([sub[:, j] for j in range(E)])  # np.unique(axis=0)'s order, faster
    order = np.argsort(cls, kind="stable")
    bounds = np.flatnonzero(np.diff(cls[order])) + 1
    return np.split(qs[order], bounds)


def _coloring_paths(fabric, routing, demand, three_tier: bool):
    """Colour every class; class ``k``'s colours are shifted by the colours used before it
    so that small classes do not all start on uplink 0."""
    Q = demand.n_qps
    inter = np.flatnonzero(demand.inter_leaf())
    slot0 = np.full(Q, -1, dtype=np.int64)
    slot1 = np.full(Q, -1, dtype=np.int64)
    pod = fabric.node_pod
    off0 = 0
    off1: dict[int, int] = {}
    delta = 0
    # vertex labels need not be compact: the colouring depends on edge order only
    src_li, dst_li = routing.leaf_index[demand.src_leaf], routing.leaf_index[demand.dst_leaf]
    for cls in _color_classes(demand, inter):
        c = bipartite_edge_coloring(src_li[cls], dst_li[cls])
        d = int(c.max(initial=-1)) + 1
        delta = max(delta, d)
        slot0[cls] = c + off0
        off0 += d
        if not three_tier:
            continue
        n0 = routing.group_sizes(demand.src_leaf[cls], demand.dst_leaf[cls])
        up = routing.group_member(demand.src_leaf[cls], demand.dst_leaf[cls], slot0[cls] % n0)
        plane = fabric.node_index[fabric.link_dst[up]]
        xp = pod[demand.src_leaf[cls]] != pod[demand.dst_leaf[cls]]
        for j in np.unique(plane[xp]).tolist():
            sel = cls[xp & (plane == j)]
            c1 = bipartite_edge_coloring(pod[demand.src_leaf[sel]], pod[demand.dst_leaf[sel]])
            slot1[sel] = c1 + off1.get(j, 0)
            off1[j] = off1.get(j, 0) + int(c1.max(initial=-1)) + 1
    if not len(inter):
        return CsrRows(np.zeros(Q + 1, np.int64), np.zeros(0, np.int64)), delta
    slots = [slot0[inter], slot1[inter]] if three_tier else [slot0[inter]]
    ptr, flat = _walk_slots(fabric, routing, demand, inter, slots)
    lengths = np.zeros(Q, dtype=np.int64)
    lengths[inter] = np.diff(ptr)  # inter is sorted: its rows keep their order
    return CsrRows(indptr_from_lengths(lengths), flat), delta


def plan_edge_coloring(fabric, routing, demand, constraints: Constraints | None = None,
                       options: PlanOptions | None = None) -> PathAssignment:
    """2-tier leaf-spine: colour leaf-to-leaf QPs, colour ``c`` -> uplink ``c mod U``.

    Notes
    -----
    Optimal for uniform demand: each uplink and downlink gets at most ``ceil(Δ/U)`` QPs of
    a class, and ``Δ/U`` QPs per link is a lower bound for the busiest leaf. QPs are
    coloured per class (same phases), each class balanced on its own.
    """
    paths, delta = _coloring_paths(fabric, routing, demand, False)
    return PathAssignment(paths, link_utilization(fabric, demand, paths), "edge_coloring",
                          {"colors": delta})


def plan_fat_tree(fabric, routing, demand, constraints: Constraints | None = None,
                  options: PlanOptions | None = None) -> PathAssignment:
    """3-tier fat-tree: leaf-level colouring picks the aggregation plane; per plane, a
    (source pod, destination pod) colouring picks the core."""
    paths, delta = _coloring_paths(fabric, routing, demand, True)
    return PathAssignment(paths, link_utilization(fabric, demand, paths), "fat_tree",
                          {"colors": delta})


# --------------------------------------------------------------------------- MILP
@dataclass
class _Milp:
    """The MILP of :func:`plan_milp` as it is built: its variables (``x`` per free QP and
    candidate, then ``y`` per link and job, then ``z``) and its constraint rows, as COO
    triplets with their bounds."""

    xq: list[int]  # the QP of each x variable
    xk: list[int]  # its candidate index
    links: list[int]  # the fabric links with y variables
    J: int  # jobs: y variables per link
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    lo: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)
    nx: int = field(init=False)  # x variables
    nvar: int = field(init=False)  # all variables
    lidx: dict[int, int] = field(init=False)  # index of each link in ``links``

    def __post_init__(self) -> None:
        self.nx = len(self.xq)
        self.nvar = self.nx + len(self.links) * self.J + 1
        self.lidx = {l: i for i, l in enumerate(self.links)}

    @classmethod
    def build(cls, fabric: Fabric, demand: Demand, cands: Candidates, free: np.ndarray,
              base: np.ndarray) -> _Milp:
        """The model for QPs ``free``, over the pinned QPs' normalised load ``base``."""
        xq, xk = [], []
        for q in free.tolist():
            n = cands.of(q).shape[0]
            xq += [q] * n
            xk += list(range(n))
        links = sorted({int(l) for q in free.tolist() for l in cands.of(q).ravel().tolist()} |
                       set(np.flatnonzero(base.sum(axis=1) > 0).tolist()))
        links = [l for l in links if fabric.link_kind[l] == LINK_FABRIC]
        m = cls(xq, xk, links, max(len(demand.job_names), 1))
        m.one_path_rows(free)
        m.load_rows(demand, cands, fabric.link_capacity_bps, base)
        m.max_rows()
        return m

    def add(self, terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        """One constraint row ``lo <= sum(v * var[c] for c, v in terms) <= hi``."""
        r = len(self.lo)
        for c, v in terms:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.lo.append(lo)
        self.hi.append(hi)

    def y(self, link: int, job: int) -> int:
        return self.nx + self.lidx[link] * self.J + job

    def one_path_rows(self, free: np.ndarray) -> None:
        """Each free QP takes exactly one candidate."""
        xq = np.asarray(self.xq)
        for q in free.tolist():
            self.add([(i, 1.0) for i in np.flatnonzero(xq == q).tolist()], 1.0, 1.0)

    def load_rows(self, demand: Demand, cands: Candidates, cap: np.ndarray,
                  base: np.ndarray) -> None:
        """Per (link, phase): the phase's normalised load on the link, pinned load
        included, is at most its job's ``y``."""
        ptr = demand.ent_ptr()
        lp: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for i in range(self.nx):
            q, k = self.xq[i], self.xk[i]
            for l in cands.of(q)[k].tolist():
                if l not in self.lidx:
                    continue
                for e in range(ptr[q], ptr[q + 1]):
                    p = int(demand.ent_phase[e])
                    lp.setdefault((l, p), []).append((i, demand.ent_rate_bps[e] / cap[l]))
        for l in self.links:
            for p in np.flatnonzero(base[l] > 0).tolist():
                lp.setdefault((l, p), [])
        for (l, p), terms in lp.items():
            self.add([*terms, (self.y(l, int(demand.phase_job[p])), -1.0)], -np.inf,
                     -base[l, p])

    def max_rows(self) -> None:
        """Per link: the sum of its jobs' ``y`` is at most ``z``."""
        for l in self.links:
            self.add([(self.y(l, j), 1.0) for j in range(self.J)] + [(self.nvar - 1, -1.0)],
                     -np.inf, 0.0)

    def solve(self, time_limit: float):
        """:func:`scipy.optimize.milp` (HiGHS) minimising ``z``, ``x`` binary."""
        import scipy.sparse as sp
        from scipy.optimize import Bounds, LinearConstraint, milp

        A = sp.csr_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.lo), self.nvar))
        c = np.zeros(self.nvar)
        c[-1] = 1.0
        integ = np.zeros(self.nvar)
        integ[:self.nx] = 1
        ub = np.full(self.nvar, np.inf)
        ub[:self.nx] = 1
        return milp(c, constraints=LinearConstraint(A, self.lo, self.hi), integrality=integ,
                    bounds=Bounds(np.zeros(self.nvar), ub), options={"time_limit": time_limit})

    def choice(self, x: np.ndarray, n_qps: int) -> np.ndarray:
        """Each free QP's candidate: the one of its ``x`` of the largest value (the first
        on ties); -1 for the others."""
        choice = np.full(n_qps, -1, dtype=np.int64)
        best = {}
        for i in range(self.nx):
            q = self.xq[i]
            if q not in best or x[i] > best[q][0]:
                best[q] = (x[i], self.xk[i])
        for q, (_, k) in best.items():
            choice[q] = k
        return choice


def plan_milp(fabric, routing, demand, constraints: Constraints | None = None,
              options: PlanOptions | None = None) -> PathAssignment:
    """Exact minimum of the maximum link utilisation (small instances).

    Variables: ``x[q,k]`` binary (QP ``q`` on candidate ``k``), ``y[l,j]`` (job ``j``'s
    peak phase load on link ``l``, normalised by capacity), ``z`` (max utilisation).
    ``sum_k x[q,k] = 1``; ``sum_q w[q,p] x[q,k]·[l in k] / cap_l <= y[l,job(p)]``;
    ``sum_j y[l,j] <= z``; minimise ``z``. Solved with HiGHS through
    :func:`scipy.optimize.milp`.

    Raises
    ------
    ControlError — when HiGHS ends without a solution (e.g. its time limit on a large
        instance).

    References
    ----------
    .. [1] Q. Huangfu, J. A. J. Hall, "Parallelizing the dual revised simplex method",
       Mathematical Programming Computation 10, 2018 (HiGHS).
    """
    c, o = constraints or Constraints(), options or PlanOptions()
    cands = Candidates(routing, demand)
    Q = demand.n_qps
    pinned = np.zeros(Q, bool) if c.pinned is None else np.asarray(c.pinned, bool)
    initial = c.initial
    st = LoadState(fabric, demand)
    for q in np.flatnonzero(pinned).tolist():
        st.add(q, np.asarray(initial[q], dtype=np.int64))
    base = st.rate_sums() / fabric.link_capacity_bps[:, None]  # pinned load, normalised
    m = _Milp.build(fabric, demand, cands, np.flatnonzero(~pinned), base)
    res = m.solve(o.time_limit_s)
    if res.x is None:
        raise ControlError(f"the MILP planner found no path assignment ({res.message}); "
                           "use the greedy or auto method instead")
    choice = m.choice(res.x, Q)
    paths = [np.asarray(initial[q], dtype=np.int64) if pinned[q] else cands.of(q)[choice[q]]
             for q in range(Q)]
    util = link_utilization(fabric, demand, paths)
    return PathAssignment(paths, util, "milp", {"status": int(res.status),
                                                "objective": float(res.fun),
                                                "optimal": res.status == 0})


# --------------------------------------------------------------------------- entry point
def _is_fat_tree(fabric: Fabric) -> bool:
    return fabric.meta.get("builder") == "fat_tree"


def leaf_cut_bound(fabric: Fabric, demand: Demand) -> float:
    """Lower bound on the maximum link utilisation of any plan: per leaf, the demand that
    must leave (or enter) it through its fabric links over their summed capacity.

    The busiest uplink of a leaf is at least as loaded as their capacity-weighted mean,
    and a job's peak phase on one link is at least its share of the peak phase over all
    of them, so ``max u >= sum_j max_p out(leaf, p) / sum cap`` for every leaf. When every
    QP wants the same rate ``r`` and a leaf's fabric links share one capacity ``c``, every
    ``u`` of those links is a whole multiple of ``r / c`` (a job's peak on a link is a count
    of its QPs there), so the leaf's bound rounds up to the next multiple.

    Examples
    --------
    >>> from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
    >>> from icefabric.topology.catalog import server_profile
    >>> from icefabric.control.demand import demand_from_pairs
    >>> fab = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
    ...                  LeafSpineSpec(servers_per_leaf=2, n_spines=4, oversub=2.0))
    >>> src = list(fab.servers[0].nics) + list(fab.servers[1].nics)
    >>> dst = list(fab.servers[2].nics) + list(fab.servers[3].nics)
    >>> leaf_cut_bound(fab, demand_from_pairs(fab, src, dst))  # 2:1 oversubscribed leaf
    2.0
    """
    fab = fabric.link_kind == LINK_FABRIC
    e = np.flatnonzero(demand.inter_leaf()[demand.ent_qp])
    if len(e) == 0:
        return 0.0
    q, ph, rate = demand.ent_qp[e], demand.ent_phase[e], demand.ent_rate_bps[e]
    best = 0.0
    for leaf, cap_side in ((demand.src_leaf[q], fabric.link_src),
                           (demand.dst_leaf[q], fabric.link_dst)):
        need = _leaf_need(fabric.n_nodes, demand, leaf, ph, rate)
        cap = np.bincount(cap_side[fab], fabric.link_capacity_bps[fab],
                          minlength=fabric.n_nodes)
        ok = cap > 0
        bound = need[ok] / cap[ok]
        quantum = _utilisation_quantum(fabric, demand, cap_side)[ok]
        whole = quantum > 0
        bound[whole] = np.ceil(bound[whole] / quantum[whole] - 1e-9) * quantum[whole]
        best = max(best, float(bound.max(initial=0.0)))
    return best


def _leaf_need(n_nodes: int, demand: Demand, leaf: np.ndarray, ph: np.ndarray,
               rate: np.ndarray) -> np.ndarray:
    """Per node: the sum over jobs of the job's peak phase of the rates of entries at
    ``leaf``, from the (leaf, phase) and (leaf, job) pairs that occur (a node x phase table
    is 7 GB for 5,000 jobs on 176,572 nodes); the sums are the node x phase table's, taken
    in the same order (each (leaf, phase) in entry order, jobs in job order)."""
    P = max(demand.n_phases, 1)
    nj = max(len(demand.job_names), 1)
    u, inv = np.unique(leaf * P + ph, return_inverse=True)
    per = np.bincount(inv.ravel(), weights=rate, minlength=len(u))
    lj, at = np.unique(u // P * nj + demand.phase_job[u % P], return_inverse=True)
    peak = np.zeros(len(lj))  # rates are positive: as the table's max with its zeros
    np.maximum.at(peak, at.ravel(), per)
    return np.bincount(lj // nj, weights=peak, minlength=n_nodes)


def _utilisation_quantum(fabric: Fabric, demand: Demand, side: np.ndarray) -> np.ndarray:
    """Per node: ``r / c`` when every QP wants one rate ``r`` and the node's fabric links
    (``side``: ``link_src`` for the links leaving it, ``link_dst`` for those entering) all
    have one capacity ``c``; 0 where the utilisation of those links is not quantised."""
    out = np.zeros(fabric.n_nodes)
    if len(demand.ent_rate_bps) == 0 or not demand.is_uniform():
        return out
    fab = fabric.link_kind == LINK_FABRIC
    node, cap = side[fab], fabric.link_capacity_bps[fab].astype(np.float64)
    lo = np.full(fabric.n_nodes, np.inf)
    hi = np.zeros(fabric.n_nodes)
    np.minimum.at(lo, node, cap)
    np.maximum.at(hi, node, cap)
    same = (hi > 0) & (lo == hi)
    out[same] = float(demand.ent_rate_bps[0]) / hi[same]
    return out


def _auto(fabric, routing, demand, constraints: Constraints, options: PlanOptions
          ) -> PathAssignment:
    simple = not constraints.pins_any() and not constraints.forbid
    builder = fabric.meta.get("builder")
    if not simple or builder not in ("leaf_spine", "fat_tree"):
        return plan_greedy(fabric, routing, demand, constraints, options)
    method = "fat_tree" if builder == "fat_tree" else "edge_coloring"
    a = PLANNERS[method](fabric, routing, demand)
    if (a.collision_free or not options.improve or demand.n_qps > GREEDY_LIMIT
            or a.max_util <= leaf_cut_bound(fabric, demand) * (1 + 1e-9)):
        return a  # nothing can beat it (e.g. an oversubscribed fabric at its cut bound)
    # Weighted demand or uneven capacities: improve the colouring locally, and also try
    # the weighted greedy from scratch; keep the best.
    seeded = PlanOptions(seed=options.seed)
    cands = Candidates(routing, demand)
    b = plan_greedy(fabric, routing, demand, None, seeded, _Start(cands, a.paths))
    c = plan_greedy(fabric, routing, demand, None, seeded, _Start(cands))
    best = min((a, b, c), key=lambda x: x.max_util)
    best.meta["tried"] = {x.method + ("+warm" if x.meta.get("warm") else ""): x.max_util
                          for x in (a, b, c)}
    return best


#: ``auto`` runs the (per-QP Python) greedy on top of a colouring only up to this many QPs.
GREEDY_LIMIT = 20_000


PLANNERS = {
    "edge_coloring": plan_edge_coloring,
    "fat_tree": plan_fat_tree,
    "greedy": plan_greedy,
    "milp": plan_milp,
    "auto": _auto,
}


def plan_paths(fabric: Fabric, routing: Routing, demand: Demand, *, method: str = "auto",
               constraints: Constraints | None = None, options: PlanOptions | None = None
               ) -> PathAssignment:
    """Assign every QP of ``demand`` a fabric path minimising the maximum link utilisation.

    Parameters
    ----------
    fabric : Fabric
    routing : Routing — current link state (failed links excluded).
    demand : Demand
    method : {"auto", "edge_coloring", "fat_tree", "greedy", "milp"}
    constraints : Constraints, optional — pinned QPs and their paths, forbidden paths.
    options : PlanOptions, optional — local improvement, seed, swaps, MILP time limit.

    Returns
    -------
    PathAssignment

    Examples
    --------
    >>> from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
    >>> from icefabric.topology.catalog import server_profile
    >>> from icefabric.topology.routing import Routing
    >>> from icefabric.control.demand import demand_from_pairs
    >>> fab = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
    ...                  LeafSpineSpec(servers_per_leaf=2, n_spines=4, links_per_spine=4))
    >>> src = list(fab.servers[0].nics) + list(fab.servers[1].nics)
    >>> dst = list(fab.servers[2].nics) + list(fab.servers[3].nics)
    >>> a = plan_paths(fab, Routing(fab), demand_from_pairs(fab, src, dst))
    >>> a.method, a.max_util
    ('edge_coloring', 1.0)
    """
    if method not in PLANNERS:
        raise ValueError(f"unknown planning method {method!r}; known: {sorted(PLANNERS)}")
    c = constraints or Constraints()
    if c.pins_any() and method in ("edge_coloring", "fat_tree"):
        raise ValueError(f"method {method!r} cannot keep pinned QPs; use greedy or milp")
    return PLANNERS[method](fabric, routing, demand, c, options or PlanOptions())


def uplink_capacity(fabric: Fabric, routing: Routing, demand: Demand) -> np.ndarray:
    """Bottleneck capacity of the best single path of each QP (inf inside one leaf)."""
    cands = Candidates(routing, demand)
    best = np.array([np.inf if c.shape[1] == 0 else
                     float(fabric.link_capacity_bps[c].min(axis=1).max())
                     for c in (cands.pair_paths(k) for k in range(len(cands.keys)))])
    return best[cands.pair]


def split_needed(fabric: Fabric, routing: Routing, demand: Demand) -> np.ndarray:
    """QPs each connection of ``demand`` needs so no single path is overloaded."""
    cap = uplink_capacity(fabric, routing, demand)
    k = qps_needed(demand.peak_rate_bps(), cap)
    return k if len(k) else np.zeros(0, np.int64)



def plan_incremental(fabric: Fabric, routing: Routing, existing: Demand,
                     existing_paths: list[np.ndarray], new: Demand, *,
                     seed: int | None = None) -> tuple[Demand, PathAssignment]:
    """Plan a new job's QPs around the existing ones, which keep their paths.

    Tries the weighted greedy and a colouring of the new QPs improved locally (both with
    the existing QPs pinned) and keeps the better. Use :func:`reoptimize` to move
    everything when the operator allows it.

    Returns
    -------
    (Demand, PathAssignment)
        The combined demand (existing QPs first) and its assignment.
    """
    d = existing.concat(new)
    pinned = np.zeros(d.n_qps, bool)
    pinned[:existing.n_qps] = True
    initial = list(existing_paths) + [np.zeros(0, np.int64)] * new.n_qps
    cands = Candidates(routing, d)
    keep, seeded = Constraints(pinned, initial), PlanOptions(seed=seed)
    a = plan_greedy(fabric, routing, d, keep, seeded, _Start(cands))
    best = a
    if fabric.meta.get("builder") in ("leaf_spine", "fat_tree"):
        warm_new, _ = _coloring_paths(fabric, routing, new,
                                      fabric.meta.get("builder") == "fat_tree")
        warm = list(existing_paths) + list(warm_new)
        b = plan_greedy(fabric, routing, d, keep, seeded, _Start(cands, warm))
        best = b if b.max_util < a.max_util - 1e-12 else a
    best.meta["incremental"] = True
    return d, best


def reoptimize(fabric: Fabric, routing: Routing, demand: Demand, *,
               seed: int | None = None) -> PathAssignment:
    """Re-plan every QP from scratch (the explicit re-optimisation; QPs may move)."""
    return plan_paths(fabric, routing, demand, method="auto", options=PlanOptions(seed=seed))

