"""Policy interface and registry; turning (fabric, workload, plan) into an engine problem.

A policy is a named strategy that decides, for every QP of a workload, its fabric path(s),
source port and optional pacing rate. Policies are compared on the same workload and
engine. ``ice`` plugs in here like the baselines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.control.hashing import fabric_hash_configs
from icefabric.control.plan import PathPlan
from icefabric.csr import csr_from_lists
from icefabric.dataplane.ecmp import HashConfig
from icefabric.engine.problem import CollectiveSpec, LinkFailure, SimProblem
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing, ServerPaths


@dataclass
class PlanContext:
    """Everything a policy may look at."""

    fabric: Fabric
    workload: Workload
    routing: Routing
    seed: int = 0
    hash_configs: dict[int, HashConfig] = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    @classmethod
    def create(cls, fabric: Fabric, workload: Workload, *, seed: int = 0, down_links=(),
               **options) -> PlanContext:
        return cls(fabric, workload, Routing(fabric, down_links), seed,
                   fabric_hash_configs(fabric), options)

    def after_failure(self, down_links) -> PlanContext:
        return PlanContext(self.fabric, self.workload, Routing(self.fabric, down_links),
                           self.seed, self.hash_configs, self.options)


class Policy(ABC):
    """Base class of named strategies."""

    name: str = ""
    description: str = ""
    #: time from a link failure until this policy's traffic uses working paths again
    reroute_delay_ns: int = 0
    #: pace every flow at its global max-min rate before it starts (ICE active CC)
    proactive_rates: bool = False
    #: engine this policy must run on regardless of the scenario (``ideal`` is a bound:
    #: non-blocking and perfectly fair, so it always uses the max-min flow engine)
    engine_override: str | None = None

    def qps_per_connection(self, default: int) -> int:
        """QPs per connection this policy wants the workload built with."""
        return default

    @abstractmethod
    def plan(self, ctx: PlanContext) -> PathPlan:
        """Paths, ports and rates for every QP of ``ctx.workload``."""

    def replan(self, ctx: PlanContext, previous: PathPlan) -> PathPlan:
        """Plan after links failed (``ctx.routing`` excludes them). Must keep the route
        structure of ``previous`` (same ``route_qp`` and weights) so the engine can swap
        route link lists in place."""
        return self.plan(ctx)

    def ideal_fabric(self, fabric: Fabric) -> Fabric:
        """The fabric the policy runs on (``ideal`` replaces it by a non-blocking one)."""
        return fabric


_REGISTRY: dict[str, type[Policy]] = {}


def register_policy(name: str):
    def deco(cls):
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return deco


def available_policies() -> dict[str, str]:
    _load_builtin()
    return {k: v.description for k, v in sorted(_REGISTRY.items())}


def get_policy(name: str, **options) -> Policy:
    _load_builtin()
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; available: {sorted(_REGISTRY)}") from None
    return cls(**options)


def _load_builtin():
    import importlib

    for mod in ("baselines", "ice"):
        try:
            importlib.import_module(f"icefabric.policies.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"icefabric.policies.{mod}":
                raise


# --------------------------------------------------------------------------------------
@dataclass
class ProblemMap:
    """How problem routes relate to plan routes (to re-route after failures)."""

    plan_route: np.ndarray  # problem route -> plan route (-1 = intra-server, fixed)
    prefix: list[np.ndarray]
    suffix: list[np.ndarray]


def to_problem(fabric: Fabric, workload: Workload, plan: PathPlan, *, scenario: str = "",
               meta: dict | None = None) -> tuple[SimProblem, ProblemMap]:
    """Expand every hop of every flow into engine routes under ``plan``.

    A network hop on a connection with ``k`` QPs yields, for each QP and each of its plan
    routes, one engine route: server path to the source NIC + plan route + server path
    from the destination NIC, weight ``hop_weight / k * route_weight``. QP pacing rates
    become flow rate caps: a flow whose routes are paced cannot exceed the tightest
    ``rate / share`` among them.
    """
    sp_ = ServerPaths(fabric)
    cache: dict[tuple[int, int], np.ndarray] = {}

    def spath(a, b):
        key = (a, b)
        p = cache.get(key)
        if p is None:
            p = np.asarray(sp_.path(a, b), dtype=np.int64)
            cache[key] = p
        return p

    conn_ptr, _ = workload.conn_qps()
    qptr = plan.qp_route_ptr()
    routes: list[np.ndarray] = []
    r_flow, r_weight, r_qp, r_plan = [], [], [], []
    prefix, suffix = [], []
    flow_cap = np.full(workload.n_flows, np.inf)
    W = workload
    for h in range(len(W.hop_flow)):
        f = int(W.hop_flow[h])
        src, dst = int(W.hop_src[h]), int(W.hop_dst[h])
        c = int(W.hop_conn[h])
        w = float(W.hop_weight[h])
        if c < 0:
            routes.append(spath(src, dst))
            r_flow.append(f)
            r_weight.append(w)
            r_qp.append(-1)
            r_plan.append(-1)
            prefix.append(routes[-1])
            suffix.append(np.zeros(0, np.int64))
            continue
        sn, dn = int(W.hop_src_nic[h]), int(W.hop_dst_nic[h])
        pre, post = spath(src, sn), spath(dn, dst)
        qps = range(conn_ptr[c], conn_ptr[c + 1])
        k = len(qps)
        for q in qps:
            share = w / k
            if np.isfinite(plan.rate_bps[q]):
                flow_cap[f] = min(flow_cap[f], plan.rate_bps[q] / share)
            for r in range(qptr[q], qptr[q + 1]):
                routes.append(np.concatenate([pre, plan.route(r), post]))
                r_flow.append(f)
                r_weight.append(share * plan.route_weight[r])
                r_qp.append(q)
                r_plan.append(r)
                prefix.append(pre)
                suffix.append(post)
    indptr, links = csr_from_lists(routes)
    d_indptr, d_idx = csr_from_lists(W.flow_deps)
    colls = tuple(CollectiveSpec(c.name, c.job, c.kind, c.size_bytes, c.nranks,
                                 np.asarray(c.flows, dtype=np.int64), c.algorithm)
                  for c in W.collectives)
    prob = SimProblem(
        link_capacity_bps=fabric.link_capacity_bps.astype(np.float64),
        link_delay_ns=fabric.link_delay_ns.astype(np.int64),
        link_src=fabric.link_src.astype(np.int64),
        link_dst=fabric.link_dst.astype(np.int64),
        flow_size_bytes=W.flow_size_bytes,
        flow_start_ns=W.flow_start_ns,
        flow_latency_ns=W.flow_latency_ns,
        flow_rate_cap_bps=flow_cap,
        dep_indptr=d_indptr, dep_indices=d_idx,
        route_flow=np.asarray(r_flow, dtype=np.int64),
        route_weight=np.asarray(r_weight, dtype=np.float64),
        route_qp=np.asarray(r_qp, dtype=np.int64),
        route_indptr=indptr, route_links=links,
        collectives=colls,
        link_kind=fabric.link_kind.astype(np.int8),
        node_is_switch=fabric.is_switch.copy(),
        link_names=tuple(fabric.link_names()),
        flow_names=tuple(f"{W.collectives[c].name if c >= 0 else 'delay'}#{f}"
                         for f, c in enumerate(W.flow_collective.tolist())),
        meta={"scenario": scenario, "policy": plan.policy, **(meta or {})},
    )
    return prob, ProblemMap(np.asarray(r_plan, dtype=np.int64), prefix, suffix)


def with_proactive_rates(problem: SimProblem, workload: Workload, *,
                         headroom: float = 0.02) -> SimProblem:
    """Cap every flow at its ICE rate: weighted max-min over its planned routes among the
    flows of its phase (:mod:`icefabric.control.rates`), i.e. the NIC pacer values the
    controller pushes before traffic starts."""
    from dataclasses import replace

    from icefabric.control.rates import allocate_rates, dag_phases

    rates = allocate_rates(problem.incidence(), problem.link_capacity_bps,
                           dag_phases(workload.flow_deps), headroom=headroom)
    return replace(problem, flow_rate_cap_bps=np.minimum(problem.flow_rate_cap_bps, rates))


def failure_reroutes(pmap: ProblemMap, before: PathPlan, after: PathPlan, *, t_ns: int,
                     down_links: np.ndarray, delay_ns: int, up: bool = False) -> LinkFailure:
    """A :class:`LinkFailure` that moves every problem route whose plan route changed."""
    if len(before.route_qp) != len(after.route_qp):
        raise ValueError("replan changed the route structure; cannot re-route in place")
    moved, new = [], []
    for k, r in enumerate(pmap.plan_route.tolist()):
        if r < 0:
            continue
        a, b = before.route(r), after.route(r)
        if len(a) != len(b) or np.any(a != b):
            moved.append(k)
            new.append(np.concatenate([pmap.prefix[k], b, pmap.suffix[k]]))
    indptr, links = csr_from_lists(new)
    return LinkFailure(t_ns=int(t_ns), links=np.asarray(down_links, dtype=np.int64),
                       reroute_route=np.asarray(moved, dtype=np.int64), reroute_indptr=indptr,
                       reroute_links=links, reroute_delay_ns=int(delay_ns), up=up)
