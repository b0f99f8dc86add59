"""Plans: a policy's per-QP ports, backup ports, pacing rates and routes for a workload, and
its re-plans when links fail or come back.

The simulator, the controller, the twin and ``icefab plan`` all plan through :func:`plan`
(a scenario's runs through :class:`icefabric.pipeline.recipe.RunSpec`, which calls it), so
the numbers an agent receives are the numbers the simulator runs. ICE's active congestion
control is part of the plan: a policy with ``proactive_rates`` gets every QP's NIC pacer
rate (:func:`qp_rates`), recomputed at every re-plan (:func:`planned` decides it, once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from icefabric.ccl.communicator import QpsRule
from icefabric.ccl.workload import Workload
from icefabric.control.plan import PathPlan
from icefabric.control.rates import allocate_rates, dag_phases
from icefabric.dataplane.roce import static_rate
from icefabric.pipeline.jobs import JobError, JobSpec, build_workload, scenario_jobs
from icefabric.pipeline.problem import HopQps, plan_incidence
from icefabric.policies.base import PlanContext, Policy, UnknownOptionError, get_policy
from icefabric.scenario.loader import LoadedScenario
from icefabric.topology.model import Fabric
from icefabric.units import us

#: fraction of every link ICE leaves unallocated so queues stay near empty
RATE_HEADROOM = 0.02


@dataclass(frozen=True)
class LinkChange:
    """The cables ``a``-``b`` (every one, or ``cable``; link ids ``links``, both
    directions) going down or, with ``up``, coming back at ``t_ns``."""

    t_ns: int
    up: bool
    a: str
    b: str
    links: np.ndarray
    cable: int | None = None


@dataclass(frozen=True)
class LinkEvent:
    """Links that go down (or come back, ``up``) at ``t_ns``, and the policy's paths after
    it reacted."""

    t_ns: int
    links: np.ndarray
    up: bool
    paths: PathPlan


@dataclass(frozen=True, eq=False)
class Plan:
    """A policy's plan of one workload on one fabric.

    ``paths`` holds, per QP, its source port, backup port, pacing rate and routes (CSR);
    ``events`` the re-plans after link changes, in time order.
    """

    fabric: Fabric
    workload: Workload
    policy: Policy
    paths: PathPlan
    seed: int = 0
    events: tuple[LinkEvent, ...] = ()

    @property
    def final(self) -> PathPlan:
        """The paths in force after the last event."""
        return self.events[-1].paths if self.events else self.paths


def qp_rates(fabric: Fabric, workload: Workload, paths: PathPlan, *,
             headroom: float = RATE_HEADROOM) -> np.ndarray:
    """ICE's NIC pacer rate of every QP (bits/s; ``inf`` for a QP that carries nothing).

    Every flow gets its weighted max-min rate over its planned routes among the flows of
    its phase (:func:`icefabric.control.rates.allocate_rates`, with ``headroom``); a QP
    carrying ``share`` of a flow is paced at ``rate x share`` — the tightest such value if
    it carries flows of several phases — as the NIC's static-rate step
    (:func:`icefabric.dataplane.roce.static_rate`): that step is what the host agent sets at
    INIT->RTR and what the NIC applies, so the planner and the simulator use it too.

    The step is the largest one not above the share *before* the headroom: max-min rates
    scale with the capacities, so those shares sum to at most each link's capacity, and
    the headroom absorbs the rounding instead of adding to it (a 196 Gb/s pacer of a
    200 Gb/s share goes out at the 200 step, not at 168, 16 % below).
    """
    flow_rate = allocate_rates(plan_incidence(fabric, workload, paths),
                               fabric.link_capacity_bps.astype(np.float64),
                               dag_phases(workload.flow_deps), headroom=headroom)
    hq = HopQps.of(workload)
    out = np.full(workload.n_qps, np.inf)
    np.minimum.at(out, hq.qp, flow_rate[hq.flow] * hq.share)
    return static_rate(out / (1.0 - headroom))[1]


def _paced(p: Plan, paths: PathPlan) -> PathPlan:
    """``paths`` with the pacer rates ``p``'s policy sets: the only place that decides."""
    if not p.policy.proactive_rates:
        return paths
    return paths.with_rates(qp_rates(p.fabric, p.workload, paths))


@dataclass(frozen=True)
class Kept:
    """A plan of another workload under the same links, and per QP of the workload to plan
    its index there (``index``; -1: a new QP)."""

    paths: PathPlan
    index: np.ndarray


def planned(fabric: Fabric, workload: Workload, policy: Policy, paths: PathPlan,
            seed: int = 0) -> Plan:
    """The :class:`Plan` of ``policy``'s ``paths`` for ``workload``, paced as the policy
    paces (for paths the policy made in bulk, e.g. every ECMP draw in one walk)."""
    p = Plan(fabric, workload, policy, paths, seed)
    return replace(p, paths=_paced(p, paths))


def plan(fabric: Fabric, workload: Workload, policy: Policy, *, seed: int = 0,
         down_links: Sequence[int] = (), previous: PathPlan | Kept | None = None) -> Plan:
    """Plan ``workload`` with ``policy`` (links ``down_links`` excluded). With ``previous``
    a plan of the same workload, the policy re-plans from it instead of from scratch; with
    :class:`Kept`, it keeps the QPs it names where they were
    (:meth:`~icefabric.policies.base.Policy.extend`)."""
    ctx = PlanContext.create(fabric, workload, seed=seed, down_links=down_links)
    if previous is None:
        paths = policy.plan(ctx)
    elif isinstance(previous, Kept):
        paths = policy.extend(ctx, previous.paths, previous.index)
    else:
        paths = policy.replan(ctx, previous)
    return planned(fabric, workload, policy, paths, seed)


def with_link_events(p: Plan, changes: Sequence[LinkChange]) -> Plan:
    """``p`` with the policy's re-plan after each link change, each from the one before."""
    ctx = PlanContext.create(p.fabric, p.workload, seed=p.seed)
    down: set[int] = set()
    prev, events = p.paths, []
    for ch in sorted(changes, key=lambda c: c.t_ns):
        down = (down - set(ch.links.tolist())) if ch.up else (down | set(ch.links.tolist()))
        prev = _paced(p, p.policy.replan(ctx.after_failure(sorted(down)), prev))
        events.append(LinkEvent(ch.t_ns, ch.links, ch.up, prev))
    return replace(p, events=tuple(events))


# -- scenarios ----------------------------------------------------------------------------------
def scenario_link_changes(ls: LoadedScenario, fabric: Fabric) -> list[LinkChange]:
    """The scenario's failures and recoveries in time order; errors point into the file."""
    out = []
    for k, f in enumerate(ls.scenario.failures):
        a, b = f.link
        for n in (a, b):
            if n not in fabric.node_id:
                raise ls.error(("failures", k, "link"), f"node {n!r} does not exist")
        links = fabric.links_between(a, b, f.cable)
        if not len(links):
            raise ls.error(("failures", k, "cable" if fabric.n_cables(a, b) else "link"),
                           fabric.missing_cable(a, b, f.cable))
        out.append(LinkChange(us(f.at_us), False, a, b, links, f.cable))
        if f.until_us is not None:
            if f.until_us <= f.at_us:
                raise ls.error(("failures", k, "until_us"), "until_us must be after at_us")
            out.append(LinkChange(us(f.until_us), True, a, b, links, f.cable))
    return sorted(out, key=lambda c: c.t_ns)


def scenario_policy(ls: LoadedScenario, name: str, **options) -> Policy:
    """Policy ``name`` with the scenario's ``policy_options`` for it (``options`` win)."""
    given = ls.scenario.policy_options.get(name, {})
    try:
        return get_policy(name, **{**given, **options})
    except UnknownOptionError as e:
        bad = [k for k in e.options if k in given]
        if not bad:
            raise
        raise ls.error(("policy_options", name, bad[0]), str(e)) from None  # its line


@dataclass(frozen=True)
class ScenarioWorkload:
    """A scenario's jobs at one size on one fabric, and their workload."""

    fabric: Fabric
    jobs: list[JobSpec]
    workload: Workload


def scenario_workload(ls: LoadedScenario, fabric: Fabric, size_bytes: int,
                      qps_rule: QpsRule | None = None) -> ScenarioWorkload:
    """The scenario's jobs at ``size_bytes`` on ``fabric`` (with the QPs per connection
    ``qps_rule`` sets; a policy's run gets its rule and fabric from
    :class:`~icefabric.pipeline.recipe.RunSpec`) and their workload. Errors point into
    the scenario file."""
    jobs = scenario_jobs(ls, fabric, size_bytes, qps_rule)
    try:
        return ScenarioWorkload(fabric, jobs, build_workload(fabric, jobs,
                                                             qpn_seed=ls.scenario.seed))
    except JobError as e:
        j = next(i for i, job in enumerate(ls.scenario.jobs) if job.name == e.job)
        where = ("jobs", j) if e.collective is None else ("jobs", j, "collectives", e.collective)
        raise ls.error(where, e.reason) from None
