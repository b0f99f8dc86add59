"""Run a plan on an engine: the one place where a plan, its link events and the engine
options meet the engines.

Pacing: on the fluid engine every QP's pacer (``rate_bps`` of the plan) caps its flows and
the end-side rules watch paced QPs; a re-plan after a link event sets the pacers to its own
rates when its paths take over. The flow engine has no queues to keep empty: it gives
every flow its max-min rate, recomputed whenever flows start or finish, which is what the
pacers approximate, so it runs the plan unpaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from icefabric.csr import indptr_from_lengths
from icefabric.engine.batch import RouteSets, run_flow_batch
from icefabric.engine.options import EngineOptions
from icefabric.engine.problem import EngineError, SimProblem
from icefabric.engine.registry import run_engine
from icefabric.engine.result import SimResult
from icefabric.pipeline.plans import Plan
from icefabric.pipeline.problem import failure_reroutes, flow_caps, to_problem
from icefabric.policies.base import Policy
from icefabric.topology.model import LINK_FABRIC, Fabric


def run_options(policy: Policy, options: EngineOptions, *, engine: str | None = None,
                trace: bool = False) -> EngineOptions:
    """The engine options ``policy`` runs with: ``options`` on the engine ``policy`` must run
    on (its ``engine_override``: ``ideal`` is a bound of the flow engine), else ``engine``,
    else ``options``' own; ``trace`` turns on the fluid engine's recording. The one place a
    run's options are made (:class:`~icefabric.pipeline.recipe.RunSpec` and
    :func:`simulate` both come here)."""
    update: dict = {"engine": policy.engine_override or engine or options.engine}
    if trace:
        update["trace"] = True
    return options.model_copy(update=update)


def simulate(plan: Plan, options: EngineOptions, *, scenario: str = "") -> SimResult:
    """Run ``plan`` (and its link events) on the engine ``options`` choose (a policy's
    ``engine_override`` wins, :func:`run_options`). Raises :class:`EngineError` when flows
    never finish."""
    pol = plan.policy
    opts = run_options(pol, options)
    engine = opts.engine
    paced = engine == "fluid"
    prob, pmap = to_problem(plan.fabric, plan.workload, plan.paths, paced=paced,
                            scenario=scenario)
    prev, failures = plan.paths, []
    for ev in plan.events:
        fl = failure_reroutes(pmap, prev, ev, pol.reroute_delay_ns)
        if paced and pol.proactive_rates:  # the re-plan's rates take over with its paths
            fl = replace(fl, flow_rate_cap_bps=flow_caps(plan.workload, ev.paths))
        failures.append(fl)
        prev = ev.paths
    prob = replace(prob, failures=tuple(failures))
    args = opts.engine_args(buffer_bytes=switch_buffer_bytes(plan.fabric),
                            paced=pol.proactive_rates)
    if opts.trace and engine == "fluid" and not (opts.record_links or opts.record_flows):
        args.update(trace_records(plan.fabric, prob, plan.workload.flow_collective))
    res = run_engine(prob, engine, policy=pol.name, scenario=scenario, seed=plan.seed, **args)
    unfinished = np.flatnonzero(res.flow_finish_ns < 0)
    if len(unfinished):
        raise EngineError(f"{engine} engine stopped with {len(unfinished)} of {prob.n_flows} "
                          f"flows unfinished (e.g. {prob.flow_names[unfinished[0]]}): a failed "
                          f"link nobody routed around, or a step limit (engine_options "
                          f"max_steps/max_time_ns)")
    res.meta["plan_link_qps"] = plan.paths.link_load(plan.fabric.n_links).tolist()
    res.meta["fabric_links"] = np.flatnonzero(plan.fabric.link_kind == LINK_FABRIC).tolist()
    return res


def simulate_batch(plans: Sequence[Plan]) -> tuple[SimProblem, np.ndarray, np.ndarray]:
    """Plans of one workload that differ only in their routes (ECMP draws: the same fabric
    but for its switches' hash seeds, the QPs' own numbers) in one batched flow-engine run
    (:func:`~icefabric.engine.batch.run_flow_batch`): the engine problem of the first and
    the flows' ``(start_ns, finish_ns)``, shape (plans, flows). Raises
    :class:`EngineError` for a plan with link events (the batch has none)."""
    if any(p.events for p in plans):
        raise EngineError("the batched flow engine runs plans without link events only")
    first = plans[0]
    prob, pmap = to_problem(first.fabric, first.workload, first.paths)
    lengths = np.concatenate([np.diff(p.paths.route_indptr) for p in plans])
    # the paths inside servers stay; each plan's fabric routes are its own
    routes = RouteSets(pmap.sp_indptr, pmap.sp_links, pmap.pre, pmap.plan_route, pmap.post,
                       indptr_from_lengths(lengths),
                       np.concatenate([p.paths.route_links for p in plans]), len(plans))
    start, finish = run_flow_batch(prob, routes)
    return prob, start, finish


def switch_buffer_bytes(fabric: Fabric) -> float | None:
    """The median packet buffer of the fabric's switches (None when unknown)."""
    buf = fabric.node_buffer_bytes[fabric.is_switch]
    med = float(np.median(buf)) if len(buf) else 0.0
    return med if med > 0 else None


def trace_records(fabric: Fabric, prob: SimProblem, flow_collective: np.ndarray, n: int = 6
                  ) -> dict:
    """Fluid-engine recording for plots: the queue of every switch egress port, and the
    rates of the largest network flow of every collective (up to ``n`` flows)."""
    sw_egress = fabric.is_switch[fabric.link_src]
    links = tuple(name for name, e in zip(fabric.link_names(), sw_egress) if e)
    net = np.zeros(prob.n_flows, bool)
    net[prob.route_flow[prob.route_qp >= 0]] = True
    order = [int(f) for f in np.argsort(-prob.flow_size_bytes, kind="stable") if net[f]]
    pick: dict[int, int] = {}
    for f in order:
        pick.setdefault(int(flow_collective[f]), f)
    chosen = list(pick.values()) + [f for f in order if f not in pick.values()]
    return {"record_links": links, "record_flows": tuple(prob.flow_names[f] for f in chosen[:n])}
