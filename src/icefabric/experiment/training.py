"""A scenario's training job: one iteration per policy, its time and where the time goes.

Each policy plans and runs the whole iteration's workload at once (every parallel group's
collectives contend on the fabric; compute steps are dependency delays), on the scenario's
engine. The result is data: per policy the iteration time, its gain over ``ecmp`` and its
fraction of ``ideal``, model-FLOPs utilisation, the mean per-device breakdown (compute,
exposed communication per group, bubbles) overall and per pipeline stage, the achieved
bus bandwidth of every group's collectives, and a timeline of a few devices for plots.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from icefabric.ccl.bandwidth import busbw_factor
from icefabric.engine.result import SimResult
from icefabric.experiment.draws import QUANTILES, draw_fabrics, draw_plans, draw_seeds, quantiles
from icefabric.pipeline.recipe import RunSpec
from icefabric.pipeline.simulation import simulate_batch
from icefabric.scenario.loader import LoadedScenario
from icefabric.topology.model import Fabric
from icefabric.training.breakdown import DeviceTime, device_times, mean_time, task_intervals
from icefabric.training.tasks import TrainingWorkload

#: devices drawn in the timeline (the first replica of every stage, or the first ranks)
TIMELINE_DEVICES = 16


def run_training(ls: LoadedScenario, fabric: Fabric, policies: list[str], *,
                 engine: str | None = None, progress=None, draws: int = 1
                 ) -> tuple[dict, dict[str, SimResult]]:
    """Simulate one iteration of the scenario's training job under every policy; returns
    the report (JSON-ready) and the engine results by policy.

    With ``draws`` > 1 a randomised policy (the ECMP family) runs over that many draws of
    QP numbers and hash seeds (:mod:`icefabric.experiment.draws`) and reports its median
    draw: the draw whose iteration time is the median (the lower one for an even count),
    whole (time, breakdown, timeline), with the draws' ``iteration_ms_p10``/``_p50``/
    ``_p90`` and every draw's time beside it."""
    results, timelines, summary, runs = [], {}, {}, {}
    seeds = draw_seeds(ls.scenario.seed, draws)
    for i, p in enumerate(policies):
        if progress:
            progress(i, len(policies), f"training {p}")
        spec = RunSpec.of(ls, fabric, p, engine=engine)
        res, tw = run_training_policy(spec)
        drawn = {}
        if draws > 1 and spec.policy.randomised:
            res, drawn = _median_draw(spec, tw, seeds, res)
        runs[p], summary = res, tw.summary
        results.append({**policy_result(p, res, tw), **drawn})
        timelines[p] = timeline(res, tw)
    _add_relative(results)
    return {"job": ls.scenario.training.name, "summary": summary, "results": results,
            "timeline": timelines}, runs


def run_training_policy(spec: RunSpec) -> tuple[SimResult, TrainingWorkload]:
    """One iteration of ``spec``'s policy through the pipeline (plan, the scenario's link
    failures as the policy reacts, the engine), as the recipe says the policy runs."""
    tw = spec.training()
    return spec.simulate(spec.plan(tw.workload)), tw


def _median_draw(spec: RunSpec, tw: TrainingWorkload, seeds: list[int], first: SimResult
                 ) -> tuple[SimResult, dict]:
    """The run of the median draw (``first``: draw 0, already run) and the draws' figures.
    Without link failures the flow engine runs all other draws in one batch
    (:func:`~icefabric.pipeline.simulation.simulate_batch`); the median draw then runs
    once more whole."""
    plans = draw_plans(spec, draw_fabrics(spec.scenario, spec.fabric, seeds), tw.workload,
                       seeds)
    if spec.batchable:
        spans = simulate_batch(plans[1:])[2].max(axis=1).tolist()
    else:
        spans = [spec.simulate(p).makespan_ns for p in plans[1:]]
    ms = np.asarray([first.makespan_ns] + spans, dtype=float) / 1e6
    k = int(np.argsort(ms, kind="stable")[(len(ms) - 1) // 2])
    q = quantiles(ms)
    return (first if k == 0 else spec.simulate(plans[k])), {
        "draws": len(ms), "median_draw": k,
        **{f"iteration_ms_p{n}": round(v, 4) for n, v in zip(QUANTILES, q)},
        "iteration_ms_draws": ms.round(4).tolist()}


def policy_result(policy: str, res: SimResult, tw: TrainingWorkload) -> dict:
    """Iteration time, utilisation, breakdown and per-group bandwidth of one run."""
    T = int(res.makespan_ns)
    times = device_times(tw.tasks, res.flow_start_ns, res.flow_finish_ns, T)
    s = tw.summary
    return {"policy": policy, "iteration_ms": round(T / 1e6, 4),
            "tokens_per_s": round(s["tokens"] / (T / 1e9), 1) if s.get("tokens") else None,
            "mfu": round(s["model_flops"] / (T / 1e9) / s["peak_flops"], 4)
            if s.get("model_flops") else None,
            "breakdown": mean_time(times).to_dict(),
            "stages": _per_stage(times, s.get("device_stage", [])),
            "collectives": group_bandwidth(res, tw.name),
            "events": res.events, "wall_s": round(res.wall_s, 3)}


def _per_stage(times: list[DeviceTime], device_stage: list[int]) -> list[dict]:
    by: dict[int, list[DeviceTime]] = defaultdict(list)
    for t, st in zip(times, device_stage):
        by[st].append(t)
    return [{"stage": st, **mean_time(ts).to_dict()} for st, ts in sorted(by.items())]


def group_bandwidth(res: SimResult, job: str) -> dict:
    """Per parallel group (tp, pp, dp, ep; ``comm`` for traces): collectives, bytes (the
    nccl-tests ``size`` of each), busy time summed over collectives, and bus bandwidth
    ``sum(size x busbw factor) / sum(time)``."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for c in res.collectives:
        parts = c.job.split("/")
        kind = parts[1] if len(parts) > 1 and parts[0] == job else "comm"
        a = acc[kind]
        a[0] += 1
        a[1] += c.size_bytes
        a[2] += c.time_ns
        a[3] += c.size_bytes * busbw_factor(c.kind, c.nranks)
    return {k: {"count": int(a[0]), "bytes": int(a[1]), "time_ms": round(a[2] / 1e6, 4),
                "busbw_GBps": round(a[3] / max(a[2], 1), 3)} for k, a in sorted(acc.items())}


def timeline(res: SimResult, tw: TrainingWorkload, n_devices: int = TIMELINE_DEVICES) -> dict:
    """``{"devices": [names], "tasks": [[device position, kind, start_us, end_us], ...]}``
    for the devices a Gantt chart shows."""
    t = tw.tasks
    shown = tw.summary.get("timeline_devices") or list(range(len(t.device_names)))
    shown = shown[:n_devices]
    pos = {d: i for i, d in enumerate(shown)}
    start, end = task_intervals(t, res.flow_start_ns, res.flow_finish_ns)
    rows = []
    for i in range(t.n_tasks):
        for d in t.task_devices(i).tolist():
            if d in pos:
                rows.append([pos[d], t.kind_name(i), round(start[i] / 1e3, 3),
                             round(end[i] / 1e3, 3)])
    return {"devices": [t.device_names[d] for d in shown], "tasks": rows}


def _add_relative(results: list[dict]) -> None:
    """Gain over ecmp (its median draw when drawn), over ecmp's lucky draw (its p10
    iteration time) when drawn, and the fraction of ideal."""
    by = {r["policy"]: r for r in results}
    e, i = by.get("ecmp"), by.get("ideal")
    for r in results:
        t = r["iteration_ms"]
        r["gain_vs_ecmp"] = round(e["iteration_ms"] / t - 1, 4) if e else None
        if e and "iteration_ms_p10" in e:
            r["gain_vs_ecmp_lucky"] = round(e["iteration_ms_p10"] / t - 1, 4)
        r["frac_of_ideal"] = round(i["iteration_ms"] / t, 4) if i else None
