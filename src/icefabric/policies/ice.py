"""The ``ice`` policy (global path plan realised by source ports) and the
``static-disjoint`` baseline (each host spreads its own QPs over its leaf's uplinks
without a global view — the common per-host fix).

``ice``:

1. demand model of the workload (:func:`icefabric.control.demand.workload_demand`);
2. global plan minimising the maximum link utilisation
   (:func:`icefabric.control.planning.plan_paths`);
3. a source port per QP that makes every switch hash it onto the plan, in the known-hash
   (``sport_mode="model"``) or probing (``"probe"``) mode; every port is re-hashed through
   the switch models and the *re-hashed* path is what the engine runs. QPs whose path no
   port realises are re-planned away from that path (up to ``port_rounds`` times);
4. a backup port per QP on a path that avoids the primary's fabric links as far as
   possible (``PathPlan.backup_sport``), for end-side fail-over.

Its QPs are paced: the plan's rates come from the planned paths
(:func:`icefabric.pipeline.plans.qp_rates`).

When a job starts or ends :meth:`IcePolicy.extend` keeps every other QP's path, source
port and backup port and plans only the new QPs around them (pinned greedy,
:func:`icefabric.control.planning.plan_paths`); the pacing rates are recomputed for all
(:mod:`icefabric.pipeline.plans`): capacity a job frees or takes changes the others'
max-min shares, and a new job's QPs fit only if the others slow down.

After a link failure :meth:`IcePolicy.replan` moves only the QPs that need it
(:func:`icefabric.control.failover.replan_after_failure`). The end-side agent reacts in
``agent_failover_ns`` (default 50 µs: link-down detection on the NIC or a CQE error plus
a ``modify_qp`` of the UDP source port — an [UNCONFIRMED] order of magnitude, configurable
with ``policy_options: {ice: {agent_failover_ns: ...}}``).
"""

from __future__ import annotations

import numpy as np

from icefabric.control.demand import workload_demand
from icefabric.control.failover import PlanBefore, replan_after_failure
from icefabric.control.plan import PathPlan, single_path_plan
from icefabric.control.planning import Candidates, Constraints, PlanOptions, plan_paths
from icefabric.control.realize import QpPaths, RealizeOptions, realize_paths, rehash
from icefabric.control.sport import QpChains, solve_sports
from icefabric.policies.base import PlanContext, Policy, PolicyError, register_policy
from icefabric.units import us


def fabric_split(fabric) -> int:
    """QPs per connection so that one NIC's full rate fits single paths: the largest
    ``ceil(nic_bps / best uplink of its leaf)`` over NICs (1 on non-blocking fabrics with
    uplinks at least as fast as the NICs)."""
    from icefabric.control.demand import nic_bps
    from icefabric.control.planning import qps_needed
    from icefabric.topology.model import LINK_FABRIC, NIC

    bps = nic_bps(fabric)
    fab = fabric.link_kind == LINK_FABRIC
    up = np.zeros(fabric.n_nodes)
    np.maximum.at(up, fabric.link_src[fab], fabric.link_capacity_bps[fab])
    nics = fabric.nodes_of_kind(NIC)
    leaf = fabric.nic_leaf[nics]
    ok = leaf >= 0
    if not np.any(ok):
        return 1
    return int(qps_needed(bps[nics[ok]], up[leaf[ok]]).max())


def _fabric_paths(plan: PathPlan) -> list[np.ndarray]:
    ptr = plan.qp_route_ptr()
    return [plan.route(int(ptr[q]))[1:-1] for q in range(plan.n_qps)]


@register_policy("ice")
class IcePolicy(Policy):
    description = ("ICE: global path plan (min max link load), realised by solved UDP source "
                   "ports, verified by re-hashing; proactive per-QP rates; local fail-over "
                   "to backup ports")
    # Global active congestion control: NIC pacers at the global max-min share before
    # traffic starts, DCQCN underneath as the safety net (control/rates.py).
    proactive_rates = True

    # Keyword-only: these are the ``policy_options: {ice: {...}}`` that get_policy passes
    # by name and lists (``option_names``) when one is misspelt.
    def __init__(self, *, method: str = "auto", sport_mode: str = "model",
                 qps: int | str = "auto", backup: bool = True, port_rounds: int = 3,
                 improve: bool = True, agent_failover_ns: int = us(50),
                 proactive_rates: bool = True):
        if sport_mode not in ("model", "probe"):
            raise PolicyError("ice: sport_mode must be 'model' or 'probe'")
        self.method = method
        self.sport_mode = sport_mode
        if qps != "auto" and not (isinstance(qps, int) and 1 <= qps <= 128):
            raise PolicyError("ice: qps must be an integer in [1, 128] or 'auto'")
        self.qps = qps
        self._fabric = None
        self.backup = bool(backup)
        self.port_rounds = int(port_rounds)
        self.improve = bool(improve)
        self.reroute_delay_ns = int(agent_failover_ns)
        self.proactive_rates = bool(proactive_rates)
        # (workload, routing, demand) of the last plan: the controller's state, so that a
        # re-plan only re-hashes QPs through ECMP groups the failure changed.
        self._last: tuple | None = None

    def ideal_fabric(self, fabric):
        # Called by the runner before the workload is built: remember the fabric so that
        # ``qps="auto"`` can size the split from it.
        self._fabric = fabric
        return fabric

    def qps_per_connection(self, default: int, library: str = "nccl") -> int:
        """One QP per connection unless a split is needed: ``qps="auto"`` splits every
        connection into ``ceil(NIC rate / best uplink capacity)`` QPs when a single path
        cannot carry a NIC's full rate (e.g. 400G NICs under 200G uplinks), so the planner
        can put the parts on different paths
        (:func:`icefabric.control.planning.split_needed` does the same per connection)."""
        if self.qps != "auto":
            return max(default, int(self.qps))
        if self._fabric is None:
            return default
        return max(default, fabric_split(self._fabric))

    # ----------------------------------------------------------------------------------
    def plan(self, ctx: PlanContext) -> PathPlan:
        f, rt, cfg = ctx.fabric, ctx.routing, ctx.hash_configs
        d = workload_demand(f, ctx.workload)
        a = plan_paths(f, rt, d, method=self.method,
                       options=PlanOptions(improve=self.improve, seed=ctx.seed))
        paths = list(a.paths)
        forbid: dict[int, set[int]] = {}
        cands = None
        rounds = 0
        while True:
            r = realize_paths(f, rt, cfg, QpPaths(d.src_nic, d.dst_nic, paths),
                              RealizeOptions(mode=self.sport_mode, seed=ctx.seed))
            bad = np.flatnonzero(~r.ok)
            if len(bad) == 0 or rounds >= self.port_rounds:
                break
            # No port realises these paths (e.g. hash polarisation between tiers): forbid
            # them and re-plan only those QPs.
            cands = cands or Candidates(rt, d)
            for q in bad.tolist():
                forbid.setdefault(q, set()).add(cands.index_of(q, paths[q]))
            pinned = np.ones(d.n_qps, bool)
            pinned[bad] = False
            a = plan_paths(f, rt, d, method="greedy",
                           constraints=Constraints(pinned, paths, forbid),
                           options=PlanOptions(seed=ctx.seed))
            paths = list(a.paths)
            rounds += 1
        sport = np.where(r.sport >= 0, r.sport, ctx.workload.sports())
        meta = {"method": a.method, "planned_max_util": a.max_util,
                "sport_mode": self.sport_mode, "verified": r.verified,
                "n_qps": d.n_qps, "verified_frac": float(r.ok.mean()) if d.n_qps else 1.0,
                "port_rounds": rounds, "planned_paths": paths, "mode": r.mode}
        if r.probes is not None:
            meta["probes"] = r.probes
        meta["solved"] = r.solved
        self._last = (ctx.workload, rt, d)
        backup = None
        if self.backup:
            backup, meta["backup_paths"] = self._backups(ctx, d, paths, sport)
        return single_path_plan(r.paths, sport, policy=self.name, meta=meta,
                                backup_sport=backup)

    def _backups(self, ctx, d, paths, sport):
        """Backup port per QP: the least-overlapping other candidate path (prefer another
        uplink and another spine), solved with the primary ports excluded."""
        f, rt = ctx.fabric, ctx.routing
        cands = Candidates(rt, d)
        alt = list(paths)
        order = np.argsort(cands.pair, kind="stable")
        bounds = np.flatnonzero(np.diff(cands.pair[order])) + 1
        groups = np.split(order, bounds) if len(order) else []  # split([]) is one empty
        for qs in groups:  # the QPs of one (source leaf, dest leaf) pair
            c = cands.of(int(qs[0]))
            if c.shape[1] == 0 or c.shape[0] < 2:
                continue
            for q, choice in zip(qs.tolist(), _least_overlap(c, [paths[q] for q in qs], qs)):
                alt[q] = c[choice]
        ip = f.node_ip
        excl = (ip[d.src_nic], ip[d.dst_nic], sport)
        r = realize_paths(f, rt, ctx.hash_configs, QpPaths(d.src_nic, d.dst_nic, alt),
                          RealizeOptions(exclude=excl, seed=ctx.seed + 1))
        return r.sport, alt

    def extend(self, ctx: PlanContext, previous: PathPlan, kept: np.ndarray) -> PathPlan:
        f, rt = ctx.fabric, ctx.routing
        d = workload_demand(f, ctx.workload)
        old, new = np.flatnonzero(kept >= 0), np.flatnonzero(kept < 0)
        before = previous.meta.get("planned_paths") or _fabric_paths(previous)
        ptr = previous.qp_route_ptr()
        planned = [np.zeros(0, np.int64)] * d.n_qps
        routes: list = [None] * d.n_qps
        for q, k in zip(old.tolist(), kept[old].tolist(), strict=True):
            planned[q] = np.asarray(before[k], dtype=np.int64)
            routes[q] = previous.route(int(ptr[k]))
        sport = np.full(d.n_qps, -1, dtype=np.int64)
        sport[old] = previous.sport[kept[old]]
        meta = {"method": "extend", "kept": len(old), "sport_mode": self.sport_mode,
                "n_qps": d.n_qps, "planned_paths": planned}
        if len(new):
            a = plan_paths(f, rt, d, method="greedy", constraints=Constraints(kept >= 0, planned),
                           options=PlanOptions(improve=self.improve, seed=ctx.seed))
            planned = meta["planned_paths"] = list(a.paths)
            ip = f.node_ip  # the new ports avoid the kept ones of the same NIC pairs
            qps = QpPaths(d.src_nic[new], d.dst_nic[new], [planned[q] for q in new.tolist()])
            excl = (ip[d.src_nic[old]], ip[d.dst_nic[old]], sport[old])
            r = realize_paths(f, rt, ctx.hash_configs, qps,
                              RealizeOptions(mode=self.sport_mode, exclude=excl, seed=ctx.seed))
            sport[new] = np.where(r.sport >= 0, r.sport, ctx.workload.sports()[new])
            for q, route in zip(new.tolist(), r.paths, strict=True):
                routes[q] = route
            meta.update(planned_max_util=a.max_util, verified_new=int(r.ok.sum()))
        self._last = (ctx.workload, rt, d)
        backup = None
        if self.backup and len(new):
            backup, meta["backup_paths"] = self._backups(ctx, d, planned, sport)
            backup[old] = previous.backup_sport[kept[old]]
        elif self.backup:  # nothing new: every backup port is kept too
            backup = previous.backup_sport[kept]
        return single_path_plan(routes, sport, policy=self.name, meta=meta,
                                backup_sport=backup)

    def replan(self, ctx: PlanContext, previous: PathPlan) -> PathPlan:
        f, rt = ctx.fabric, ctx.routing
        old = None
        if self._last is not None and self._last[0] is ctx.workload:
            _, old, d = self._last
        else:
            d = workload_demand(f, ctx.workload)
        paths = previous.meta.get("planned_paths") or _fabric_paths(previous)
        ptr = previous.qp_route_ptr()
        full = [previous.route(int(ptr[q])) for q in range(previous.n_qps)]
        before = PlanBefore(d, paths, previous.sport, full_paths=full, routing=old)
        res = replan_after_failure(f, rt, ctx.hash_configs, before, mode=self.sport_mode,
                                   seed=ctx.seed)
        self._last = (ctx.workload, rt, d)
        meta = dict(previous.meta)
        meta.update({"planned_paths": res.assignment.paths, "failover": res.meta,
                     "planned_max_util": res.assignment.max_util})
        return single_path_plan(res.paths, res.sport, policy=self.name, meta=meta,
                                backup_sport=previous.backup_sport)


@register_policy("static-disjoint")
class StaticDisjointPolicy(Policy):
    description = ("per-host fix: each NIC spreads its own QPs over distinct uplinks of its "
                   "leaf (source ports solved for the first hop only), no global view")
    # the first hop is solved, the rest hashed from the kernel's ports: drawn like ECMP
    randomised = True

    def __init__(self, reroute_delay_ns: int | None = None):
        from icefabric.units import ms

        # After a failure the switches re-hash; nobody re-plans (like ecmp).
        self.reroute_delay_ns = int(ms(1) if reroute_delay_ns is None else reroute_delay_ns)

    def plan(self, ctx: PlanContext) -> PathPlan:
        f, rt, cfg, w = ctx.fabric, ctx.routing, ctx.hash_configs, ctx.workload
        sn = w.qp_src_nic.astype(np.int64)
        dn = w.qp_dst_nic.astype(np.int64)
        sl, dl = f.nic_leaf[sn], f.nic_leaf[dn]
        Q = w.n_qps
        sport = w.sports()
        inter = np.flatnonzero(sl != dl)
        if len(inter):
            # Each NIC numbers its own inter-leaf QPs 0, 1, 2, ... and puts QP i on uplink
            # (offset + i) mod U; the offset is local (seeded per NIC), so hosts under one
            # leaf do not coordinate.
            rng = np.random.default_rng(ctx.seed)
            offset = rng.integers(0, 1 << 16, f.n_nodes)
            order = np.lexsort((inter, sn[inter]))
            q_sorted = inter[order]
            nic_sorted = sn[q_sorted]
            start = np.r_[0, np.flatnonzero(np.diff(nic_sorted)) + 1]
            rank = np.arange(len(q_sorted)) - np.repeat(start, np.diff(np.r_[start,
                                                                           len(q_sorted)]))
            n = rt.group_sizes(sl[q_sorted], dl[q_sorted])
            want = (offset[nic_sorted] + rank) % n
            sw_list = f.switches.tolist()
            cfgs = [cfg[s] for s in sw_list]
            ci = rt.sw_index[sl[q_sorted]]
            ip = f.node_ip
            sp = solve_sports(cfgs, QpChains(ip[sn[q_sorted]], ip[dn[q_sorted]], ci, n, want),
                              seed=ctx.seed)
            sport[q_sorted] = np.where(sp >= 0, sp, sport[q_sorted])
        paths = rehash(f, rt, cfg, sn, dn, sport)
        del Q
        return single_path_plan(paths, sport, policy=self.name)


def describe_plan(fabric, workload, plan: PathPlan) -> dict:
    """A JSON-ready view of a plan: per job, per QP the path (node names), source port
    (and backup port for ``ice``), demanded rate and pacing rate (``None`` = not paced);
    per fabric link the predicted load.

    The predicted load is the planner's objective (:mod:`icefabric.control.demand`): per
    link, the sum over jobs of the job's busiest phase, in bits/s and as utilisation.
    """
    from icefabric.control.planning import link_utilization

    d = workload_demand(fabric, workload)
    paths = [p[1:-1] for p in (plan.path_of(q) for q in range(plan.n_qps))]
    util = link_utilization(fabric, d, paths)
    names = fabric.node_names
    backup = plan.backup_sport
    rate = d.peak_rate_bps()
    jobs: dict[str, list[dict]] = {}
    for q in range(plan.n_qps):
        p = plan.path_of(q)
        hops = [names[int(fabric.link_src[p[0]])]] + [names[int(fabric.link_dst[x])]
                                                      for x in p]
        jobs.setdefault(d.job_names[int(d.job[q])], []).append({
            "qp": q, "src": names[int(d.src_nic[q])], "dst": names[int(d.dst_nic[q])],
            "path": hops, "sport": int(plan.sport[q]),
            "backup_sport": int(backup[q]) if backup[q] >= 0 else None,
            "rate_gbps": round(float(rate[q]) / 1e9, 3),
            "pacing_gbps": (round(float(plan.rate_bps[q]) / 1e9, 3)
                            if np.isfinite(plan.rate_bps[q]) else None)})
    fab = np.flatnonzero(util > 0)
    links = [{"link": f"{names[int(fabric.link_src[l])]}->{names[int(fabric.link_dst[l])]}",
              "id": int(l), "load_gbps": round(float(util[l] * fabric.link_capacity_bps[l])
                                               / 1e9, 3),
              "capacity_gbps": round(float(fabric.link_capacity_bps[l]) / 1e9, 3),
              "util": round(float(util[l]), 4)} for l in fab.tolist()]
    meta = {k: v for k, v in plan.meta.items()
            if isinstance(v, (int, float, str, bool)) or v is None}
    return {"policy": plan.policy, "n_qps": plan.n_qps,
            "max_util": round(float(util.max(initial=0.0)), 4), "meta": meta,
            "jobs": jobs, "links": links}


def _least_overlap(cands: np.ndarray, paths: list[np.ndarray], qps: np.ndarray) -> np.ndarray:
    """For each path, the candidate (row of ``cands``) sharing the fewest links with it;
    among equals, the ``qp % ties``-th, so that backups spread (rotation by QP id)."""
    if len({len(p) for p in paths}) == 1:
        overlap = (cands[None, :, :, None] == np.asarray(paths)[:, None, None, :]).any(-1)
        overlap = overlap.sum(-1)
    else:  # paths of different lengths (rare): one at a time
        overlap = np.array([np.isin(cands, p).sum(axis=1) for p in paths])
    best = overlap == overlap.min(axis=1, keepdims=True)
    nth = qps % best.sum(axis=1)
    return np.argmax(best & (np.cumsum(best, axis=1) == (nth + 1)[:, None]), axis=1)
