"""From (fabric, workload, per-QP paths) to the engines' :class:`SimProblem`, vectorized.

A network hop on a connection with ``k`` QPs becomes, for each QP and each of its planned
routes, one engine route: the server path to the source NIC, the planned route and the
server path from the destination NIC, of weight ``hop_weight / k * route_weight``. An
intra-server hop becomes one route along its server path. Routes keep the order
hop by hop, QP by QP, plan route by plan route.

Every route is three segments (server path, plan route, server path); the engine arrays
are built by gathering the segments of all routes at once (no per-hop Python loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from icefabric.ccl.workload import Workload
from icefabric.control.plan import PathPlan
from icefabric.csr import copy_slices, csr_from_lists, gather, indptr_from_lengths, within
from icefabric.engine.problem import (
    CollectiveSpec,
    LinkFailure,
    SharedRoutes,
    SimProblem,
    route_incidence,
)
from icefabric.topology.model import Fabric
from icefabric.topology.routing import ServerPaths

if TYPE_CHECKING:  # plans imports this module
    from icefabric.pipeline.plans import LinkEvent


class FlowNames(Sequence):
    """``"<collective>#<flow>"`` (``"delay#<flow>"`` outside collectives) of every flow,
    made when read: millions of flows' strings cost seconds and ~70 bytes each, and a
    run reads a few (error messages, the flows a trace records)."""

    __slots__ = ("names", "collective")

    def __init__(self, names: tuple[str, ...], collective: np.ndarray):
        self.names, self.collective = names, collective

    def __len__(self) -> int:
        return len(self.collective)

    def __getitem__(self, f):
        if isinstance(f, slice):
            return [self[i] for i in range(*f.indices(len(self)))]
        c = int(self.collective[f])
        return f"{self.names[c] if c >= 0 else 'delay'}#{int(f) % len(self)}"


@dataclass(frozen=True)
class HopQps:
    """Every (network hop, QP of its connection) pair: the QP carries ``share`` of the
    hop's flow rate (``hop_weight / k`` for ``k`` QPs per connection)."""

    hop: np.ndarray
    qp: np.ndarray
    flow: np.ndarray
    share: np.ndarray

    @classmethod
    def of(cls, wl: Workload) -> HopQps:
        conn_ptr, _ = wl.conn_qps()
        net = np.flatnonzero(wl.hop_conn >= 0)
        c = wl.hop_conn[net]
        k = conn_ptr[c + 1] - conn_ptr[c]
        hop = np.repeat(net, k)
        share = np.repeat(wl.hop_weight[net] / k, k)
        return cls(hop, np.repeat(conn_ptr[c], k) + within(k), wl.hop_flow[hop], share)


@dataclass(frozen=True)
class ProblemMap:
    """How problem routes relate to plan routes (to re-route after failures): route ``k``
    is ``server path pre[k]`` + ``plan route plan_route[k]`` + ``server path post[k]``
    (``plan_route = -1``: an intra-server route, never re-routed)."""

    plan_route: np.ndarray
    pre: np.ndarray
    post: np.ndarray
    sp_indptr: np.ndarray  # server paths (CSR of link ids)
    sp_links: np.ndarray

    def routes(self, ks: np.ndarray, plan: PathPlan) -> tuple[np.ndarray, np.ndarray]:
        """CSR of problem routes ``ks`` with their plan routes taken from ``plan``."""
        return _concat(self, self.pre[ks], self.plan_route[ks], self.post[ks], plan)


def _server_paths(fabric: Fabric, a: np.ndarray, b: np.ndarray):
    """Server paths ``a[i] -> b[i]`` as (CSR over distinct pairs, pair of every i)."""
    n = np.int64(fabric.n_nodes)
    key = a.astype(np.int64) * n + b
    uniq, pair = np.unique(key, return_inverse=True)
    indptr, links = ServerPaths(fabric).paths(uniq // n, uniq % n)
    return indptr, links, pair.reshape(-1)


def _segments(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) in a CSR of each of ``rows``; ``-1`` is an empty segment."""
    start = np.zeros(len(rows), dtype=np.int64)
    length = np.zeros(len(rows), dtype=np.int64)
    ok = rows >= 0
    start[ok] = indptr[rows[ok]]
    length[ok] = indptr[rows[ok] + 1] - start[ok]
    return start, length


def _concat(m: ProblemMap, pre, rte, post, plan: PathPlan) -> tuple[np.ndarray, np.ndarray]:
    """Link lists ``server path pre + plan route rte + server path post`` (CSR); ``-1``
    for an absent segment."""
    segs = [(m.sp_links, *_segments(m.sp_indptr, pre)),
            (plan.route_links, *_segments(plan.route_indptr, rte)),
            (m.sp_links, *_segments(m.sp_indptr, post))]
    indptr = indptr_from_lengths(sum(length for _, _, length in segs))
    out = np.empty(int(indptr[-1]), dtype=np.int64)
    at = indptr[:-1].copy()
    for values, start, length in segs:
        copy_slices(out, at, values, start, length)
        at += length
    return indptr, out


def _routes(fabric: Fabric, W: Workload, plan: PathPlan, *, shared: bool = False):
    """Every engine route, hop by hop: (hop, plan route or -1, QP or -1, weight) and the
    :class:`ProblemMap` that assembles its links.

    A hop's data enters at its source (its own server path, at its weight) or, for a hop
    with shared legs, at every leg of its group (the leg's server path to the NIC, at the
    leg's weight: a route per leg and QP route, as a hop per leg would give); with
    ``shared`` such a hop starts at its NIC and its legs become shared routes
    (:func:`_shared_routes`)."""
    H = len(W.hop_flow)
    conn_ptr, _ = W.conn_qps()
    qptr = plan.qp_route_ptr()
    net = W.hop_conn >= 0
    ni = np.flatnonzero(net)
    c = W.hop_conn[ni]
    k = np.ones(H, dtype=np.int64)  # QPs per connection of every hop
    k[ni] = conn_ptr[c + 1] - conn_ptr[c]
    first = np.zeros(H, dtype=np.int64)  # first plan route of every hop's connection
    first[ni] = qptr[conn_ptr[c]]
    hop_nr = np.ones(H, dtype=np.int64)  # engine routes of every hop
    hop_nr[ni] = qptr[conn_ptr[c + 1]] - first[ni]
    e_hop, src, weight = _sources(W, shared)
    E = len(e_hop)
    e_net = net[e_hop]
    # server paths: src -> dst (intra hops), src -> src NIC and dst NIC -> dst (network hops)
    sp_indptr, sp_links, pair = _server_paths(
        fabric, np.concatenate([src, W.hop_dst_nic[ni]]),
        np.concatenate([np.where(e_net, W.hop_src_nic[e_hop], W.hop_dst[e_hop]),
                        W.hop_dst[ni]]))
    hop_post = np.full(H, -1, dtype=np.int64)
    hop_post[ni] = pair[E:]
    e_nr = hop_nr[e_hop]
    r_e = np.repeat(np.arange(E), e_nr)
    r_hop = e_hop[r_e]
    rn = np.flatnonzero(net[r_hop])
    r_plan = np.full(len(r_e), -1, dtype=np.int64)
    r_plan[rn] = (np.repeat(first[e_hop], e_nr) + within(e_nr))[rn]
    r_qp = np.full(len(r_e), -1, dtype=np.int64)
    r_qp[rn] = plan.route_qp[r_plan[rn]]
    r_weight = weight[r_e].astype(np.float64)
    r_weight[rn] = (weight / k[e_hop])[r_e[rn]] * plan.route_weight[r_plan[rn]]
    pmap = ProblemMap(r_plan, pair[:E][r_e], hop_post[r_hop], sp_indptr, sp_links)
    return r_hop, r_qp, r_weight, pmap


def _sources(W: Workload, shared: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where data enters every hop: (hop, source node, weight) per entry, hop by hop — a
    hop's own source, or each leg of a hop with shared legs unless ``shared``."""
    H = len(W.hop_flow)
    legs = W.legs
    if shared or len(legs.hop) == 0:
        return np.arange(H), W.hop_src, W.hop_weight
    group = legs.hop_group(H)
    gptr, order = legs.group_legs()
    lg = np.flatnonzero(group >= 0)
    n_src = np.ones(H, dtype=np.int64)
    n_src[lg] = np.diff(gptr)[group[lg]]
    e_hop = np.repeat(np.arange(H), n_src)
    le = np.flatnonzero(group[e_hop] >= 0)  # entries of legged hops, hop by hop
    leg = order[gather(gptr[group[lg]], n_src[lg])]
    src, weight = W.hop_src[e_hop], W.hop_weight[e_hop]
    src[le], weight[le] = legs.leg_src[leg], legs.leg_weight[leg]
    return e_hop, src, weight


def _shared_routes(fabric: Fabric, W: Workload) -> SharedRoutes:
    """The shared legs of ``W`` as the engine's shared routes: a group per leg group
    (its hops' flows), a route per leg along its server path."""
    legs = W.legs
    G = legs.n_groups
    order = np.argsort(legs.group, kind="stable")
    indptr, links, pair = _server_paths(fabric, legs.leg_src, legs.leg_nic)
    length = np.diff(indptr)[pair]
    return SharedRoutes(
        group_indptr=indptr_from_lengths(np.bincount(legs.group, minlength=G)),
        group_flows=W.hop_flow[legs.hop[order]], group=legs.leg_group,
        weight=legs.leg_weight.astype(np.float64),
        indptr=indptr_from_lengths(length), links=links[gather(indptr[pair], length)])


def flow_caps(workload: Workload, plan: PathPlan) -> np.ndarray:
    """Every flow's pacer cap (bits/s; inf: none) under ``plan``'s QP rates: a flow
    cannot exceed ``rate / share`` of any QP it runs on."""
    cap = np.full(workload.n_flows, np.inf)
    hq = HopQps.of(workload)
    rate = plan.rate_bps[hq.qp]
    ok = np.isfinite(rate)
    np.minimum.at(cap, hq.flow[ok], rate[ok] / hq.share[ok])
    return cap


def to_problem(fabric: Fabric, workload: Workload, plan: PathPlan, *, paced: bool = False,
               scenario: str = "", shared: bool = False) -> tuple[SimProblem, ProblemMap]:
    """The engine problem of ``workload`` under ``plan`` (see module doc).

    With ``paced``, the QPs' pacing rates (``plan.rate_bps``) cap their flows: a flow cannot
    exceed ``rate / share`` of any QP it runs on. With ``shared`` (the flow engine's), the
    workload's shared legs stay shared routes instead of a route per leg and flow: the
    same incidence, a fraction of the routes.
    """
    W = workload
    shared = shared and len(W.legs.hop) > 0
    r_hop, r_qp, r_weight, pmap = _routes(fabric, W, plan, shared=shared)
    indptr, links = pmap.routes(np.arange(len(r_hop)), plan)
    cap = flow_caps(W, plan) if paced else np.full(W.n_flows, np.inf)
    d_indptr, d_idx = csr_from_lists(W.flow_deps)
    colls = tuple(CollectiveSpec(c.name, c.job, c.kind, c.size_bytes, c.nranks,
                                 np.asarray(c.flows, dtype=np.int64), c.algorithm)
                  for c in W.collectives)
    names = [c.name for c in W.collectives]
    prob = SimProblem(
        link_capacity_bps=fabric.link_capacity_bps.astype(np.float64),
        link_delay_ns=fabric.link_delay_ns.astype(np.int64),
        link_src=fabric.link_src.astype(np.int64),
        link_dst=fabric.link_dst.astype(np.int64),
        flow_size_bytes=W.flow_size_bytes,
        flow_start_ns=W.flow_start_ns,
        flow_latency_ns=W.flow_latency_ns,
        flow_rate_cap_bps=cap,
        dep_indptr=d_indptr, dep_indices=d_idx,
        route_flow=W.hop_flow[r_hop],
        route_weight=r_weight,
        route_qp=r_qp,
        route_indptr=indptr, route_links=links,
        collectives=colls,
        link_kind=fabric.link_kind.astype(np.int8),
        node_is_switch=fabric.is_switch.copy(),
        link_names=fabric.link_names(),
        flow_names=FlowNames(tuple(names), W.flow_collective),
        meta={"scenario": scenario, "policy": plan.policy},
        shared=_shared_routes(fabric, W) if shared else None,
    )
    return prob, pmap


def plan_incidence(fabric: Fabric, workload: Workload, plan: PathPlan) -> sp.csr_matrix:
    """``A[l, f]``: the fraction of flow ``f``'s rate link ``l`` carries under ``plan`` —
    what :meth:`SimProblem.incidence` of :func:`to_problem` gives, from the same routes,
    without building the rest of the problem (the planner needs only this)."""
    r_hop, _, r_weight, pmap = _routes(fabric, workload, plan)
    indptr, links = pmap.routes(np.arange(len(r_hop)), plan)
    return route_incidence(indptr, links, workload.hop_flow[r_hop], r_weight, fabric.n_links,
                           workload.n_flows)


def changed_routes(before: PathPlan, after: PathPlan) -> np.ndarray:
    """Plan routes whose link lists differ between two plans of the same route structure."""
    if len(before.route_qp) != len(after.route_qp):
        raise ValueError("replan changed the route structure; cannot re-route in place")
    la, lb = np.diff(before.route_indptr), np.diff(after.route_indptr)
    same_len = np.flatnonzero(la == lb)
    n = la[same_len]
    diff = (before.route_links[gather(before.route_indptr[same_len], n)]
            != after.route_links[gather(after.route_indptr[same_len], n)])
    changed = la != lb
    changed[same_len] = np.bincount(np.repeat(np.arange(len(same_len)), n), weights=diff,
                                    minlength=len(same_len)) > 0
    return changed


def failure_reroutes(pmap: ProblemMap, before: PathPlan, event: LinkEvent, delay_ns: int
                     ) -> LinkFailure:
    """A :class:`LinkFailure` of ``event``'s links that moves every problem route whose plan
    route changed from ``before`` to the event's plan, ``delay_ns`` after it."""
    after = event.paths
    changed = changed_routes(before, after)
    moved = np.flatnonzero(pmap.plan_route >= 0)
    moved = moved[changed[pmap.plan_route[moved]]]
    indptr, links = pmap.routes(moved, after)
    return LinkFailure(t_ns=int(event.t_ns), links=np.asarray(event.links, dtype=np.int64),
                       reroute_route=moved, reroute_indptr=indptr, reroute_links=links,
                       reroute_delay_ns=int(delay_ns), up=event.up)
