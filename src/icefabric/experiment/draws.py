"""ECMP as the distribution it is: randomised policies over N draws of QP numbers and switch
hash seeds.

A job's QP numbers are drawn anew at every communicator creation (each NIC hands them out
from a counter whose start depends on everything the host did before), and with them the
kernel-derived UDP source ports and the paths the switches hash those onto (domain-facts
§3, §4). Switches whose hash seed is random (``hash_seeds: random``, or a hash profile that
draws one, e.g. Cumulus switchd) draw theirs at boot; vendor-fixed seeds (``sonic``,
``zero``) stay. A randomised policy (:attr:`~icefabric.policies.base.Policy.randomised`:
the ECMP family) therefore runs over N independent draws; a policy whose plan fixes every
path runs once.

Draw 0 is the scenario itself (its ``seed``): one draw reproduces the single-draw result.
Draws 1..N-1 take seeds spawned from it (:class:`numpy.random.SeedSequence`), so the whole
distribution is reproducible from the one seed.

What does not change between draws is built once: the fabric, each size's workload and
engine problem, one plan per draw for all sizes (an ECMP plan depends on the QPs only). On
the flow engine without link failures, all draws of one size run together in the batched
engine (:func:`icefabric.pipeline.simulation.simulate_batch`); otherwise draw by draw.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_all_start_methods, get_context

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.engine.result import CollectiveResult
from icefabric.experiment.cluster import ray_tasks
from icefabric.pipeline import Plan
from icefabric.pipeline.recipe import RunSpec
from icefabric.pipeline.simulation import simulate_batch
from icefabric.policies.base import PlanContext
from icefabric.policies.baselines import EcmpPolicy
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import LoadedScenario
from icefabric.topology.model import Fabric

#: Draws per randomised policy when neither ``--draws`` nor the scenario's ``draws`` says.
#: Measured on the default scenario (BENCHMARKS.md, "ECMP draws"; 3 pairs of base seeds,
#: 72 drawn medians each): at 100 draws a median moves by 1.7 % on average (1.1 % at 200,
#: 0.65 % at 800), but a median whose distribution has about half its draws on one
#: discrete busbw level flips between that level and the next, by up to 11.7 % at any N
#: up to 800 (``static-disjoint``'s AllToAll); more draws cost more than they settle.
DEFAULT_DRAWS = 100
#: Quantiles reported for every drawn metric (the range is p10-p90).
QUANTILES = (10, 50, 90)


#: Servers above which a default run draws once. The draws of a (policy, size) share
#: everything but their QP numbers and paths, and run in the batched kernel: at 128 HGX
#: servers (1,024 GPUs, ring AllReduce and AllGather) 100 draws cost under 3x one draw
#: (BENCHMARKS.md, "ECMP draws at 1,024 GPUs").
DRAWS_MAX_SERVERS = 128
#: Servers of one AllToAll job above which a default run draws once: its connections grow
#: with the square of its ranks (BENCHMARKS.md: 6 s of CPU per draw over 48 servers).
DRAWS_MAX_ALLTOALL_SERVERS = 16


def effective_draws(draws: int | None, scenario, engine: str | None = None) -> int:
    """Draws of a run: ``draws`` (the command line), else the scenario's, else
    :data:`DEFAULT_DRAWS` on the flow engine up to :data:`DRAWS_MAX_SERVERS` servers (and
    :data:`DRAWS_MAX_ALLTOALL_SERVERS` in an AllToAll job), and one on the fluid engine
    (whose runs cost seconds each) or on larger fabrics."""
    if draws or scenario.draws:
        return int(draws or scenario.draws)
    counts = {p.name: p.count for p in scenario.pools}
    alltoall = [len(j.servers) if j.servers is not None else sum(counts.get(p, 0) for p in j.pools)
                for j in scenario.jobs if any(c.kind == "alltoall" for c in j.collectives)]
    if (engine or scenario.engine) == "fluid" or sum(counts.values()) > DRAWS_MAX_SERVERS \
            or max(alltoall, default=0) > DRAWS_MAX_ALLTOALL_SERVERS:
        return 1
    return DEFAULT_DRAWS


def draw_seeds(seed: int, n: int) -> list[int]:
    """Seeds of ``n`` draws: ``seed`` itself, then ``n - 1`` spawned from it."""
    rest = np.random.SeedSequence(seed).generate_state(max(n - 1, 0), dtype=np.uint32)
    return [int(seed)] + [int(s) for s in rest]


def quantiles(values) -> tuple[float, float, float]:
    """p10, p50 and p90 of ``values``."""
    return tuple(float(q) for q in np.percentile(np.asarray(values, dtype=float), QUANTILES))


@dataclass(frozen=True)
class DrawnCollectives:
    """Every collective of one randomised policy at one size, over the draws: results
    ``runs[d][c]`` (draw ``d``, collective ``c`` in workload order)."""

    policy: str
    size_bytes: int
    runs: list[list[CollectiveResult]]

    def busbw_GBps(self, c: int) -> list[float]:
        return [round(r[c].busbw_GBps, 3) for r in self.runs]

    def time_us(self, c: int) -> list[float]:
        return [round(r[c].time_us, 3) for r in self.runs]


def draw_fabrics(ls: LoadedScenario, fabric: Fabric, seeds: list[int]) -> list[Fabric]:
    """The fabric of every draw: ``fabric`` with the switch hash seeds the scenario's seed
    policy draws for that draw's seed (the same object where the seeds are fixed)."""
    out = [fabric]
    for s in seeds[1:]:
        other = build_fabric(ls.updated(seed=s))
        if np.array_equal(other.node_hash_seed, fabric.node_hash_seed) and \
                np.array_equal(other.node_hash_offset, fabric.node_hash_offset):
            return [fabric] * len(seeds)  # fixed seeds: no draw changes them
        out.append(replace(fabric, node_hash_algorithm=other.node_hash_algorithm,
                           node_hash_profile=other.node_hash_profile,
                           node_hash_seed=other.node_hash_seed,
                           node_hash_offset=other.node_hash_offset))
    return out


@dataclass(frozen=True, eq=False)
class DrawInputs:
    """What every draw of a scenario's run shares: the scenario, its fabric (draw 0's),
    the draws' seeds (:func:`draw_seeds`) and the engine (None: the scenario's)."""

    ls: LoadedScenario
    fabric: Fabric
    seeds: list[int]
    engine: str | None = None


def run_draws(inputs: DrawInputs, policy: str, sizes: list[int], first=None
              ) -> list[DrawnCollectives]:
    """Policy ``policy`` at every size over the draws of ``inputs``. ``first`` maps size
    -> the collectives of draw 0 when the caller already ran it."""
    ls, fabric, seeds = inputs.ls, inputs.fabric, inputs.seeds
    spec = RunSpec.of(ls, fabric, policy, engine=inputs.engine)
    fabrics = draw_fabrics(ls, fabric, seeds)
    plans: list[Plan] | None = None
    out = []
    for size in sizes:
        sw = spec.workload(size)
        if plans is None or not _same_qps(plans[0].workload, sw.workload):
            plans = draw_plans(spec, fabrics, sw.workload, seeds)
        # this size's flows on each draw's QPs and paths (and re-plans: a randomised
        # policy's paths depend on the QPs only)
        drawn = [replace(p, workload=replace(sw.workload, qp_lqpn=p.workload.qp_lqpn,
                                             qp_rqpn=p.workload.qp_rqpn)) for p in plans]
        todo = list(range(1 if first and size in first else 0, len(drawn)))
        runs = {0: first[size]} if first and size in first else {}
        same_routes = all(np.array_equal(p.paths.route_qp, drawn[0].paths.route_qp)
                          for p in drawn)
        if spec.batchable and same_routes and len(todo) > 1:
            runs.update(zip(todo, _batched([drawn[d] for d in todo])))
        else:
            for d in todo:
                runs[d] = spec.simulate(drawn[d]).collectives
        out.append(DrawnCollectives(policy, size, [runs[d] for d in range(len(drawn))]))
    return out


@dataclass(frozen=True)
class DrawSpread:
    """Where the draws run: ``workers`` local processes, or Ray tasks on the cluster at
    ``ray`` (:func:`icefabric.experiment.cluster.ray_tasks`), one (policy, size) each."""

    workers: int = 1
    ray: str | None = None


def draw_all(inputs: DrawInputs, policies: list[str], sizes: list[int], *, first=None,
             spread: DrawSpread = DrawSpread()) -> Iterator[DrawnCollectives]:
    """:func:`run_draws` of every policy (``first``: policy -> size -> draw 0), spread as
    ``spread`` says (local processes are forked: the inputs are already in memory) one
    (policy, size) each, or in this process. Every way gives the same results (each task
    draws from the same seeds), in the same order."""
    first = first or {}
    tasks = [(p, [s], {s: first[p][s]} if s in first.get(p, {}) else None)
             for p in policies for s in sizes]
    if spread.ray and tasks:
        for got in ray_tasks(_draws_task, tasks, spread.ray, shared=(inputs,), ordered=True):
            yield from got
        return
    if spread.workers <= 1 or len(tasks) <= 1:
        for p in policies:
            yield from run_draws(inputs, p, sizes, first.get(p))
        return
    ctx = get_context("fork" if "fork" in get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(max_workers=spread.workers, mp_context=ctx) as pool:
        futs = [pool.submit(_draws_task, inputs, *t) for t in tasks]
        for f in futs:
            yield from f.result()


def _draws_task(inputs: DrawInputs, policy: str, sizes: list[int], first
                ) -> list[DrawnCollectives]:
    """One (policy, sizes) of :func:`draw_all` in a worker process or a Ray task."""
    return run_draws(inputs, policy, sizes, first)


def draw_plans(spec: RunSpec, fabrics: list[Fabric], workload: Workload, seeds: list[int]
               ) -> list[Plan]:
    """The plan of every draw: the workload with the draw's QP numbers on the draw's
    fabric (draw 0: as given), with the run's link events. ECMP hashes all draws in one
    walk where the fabric's hash seeds are fixed."""
    ws = [workload] + [workload.with_qpns(s) for s in seeds[1:]]
    pol = spec.policy
    if isinstance(pol, EcmpPolicy) and all(f is fabrics[0] for f in fabrics):
        ctx = PlanContext.create(fabrics[0], workload, seed=seeds[0])
        paths = pol.plan_draws(ctx, np.stack([w.sports() for w in ws]))
        return [spec.planned(p, w, fabrics[0], s) for w, p, s in zip(ws, paths, seeds)]
    return [spec.plan(w, fabric=f, seed=s) for f, w, s in zip(fabrics, ws, seeds)]


def _same_qps(a, b) -> bool:
    return np.array_equal(a.qp_src_nic, b.qp_src_nic) and \
        np.array_equal(a.qp_dst_nic, b.qp_dst_nic)


def _batched(plans: list[Plan]) -> list[list[CollectiveResult]]:
    """Collective results of every plan, in one batched flow-engine run."""
    prob, start, finish = simulate_batch(plans)
    out = []
    for s, f in zip(start, finish):
        out.append([CollectiveResult(c.name, c.job, c.kind, c.size_bytes, c.nranks,
                                     int(s[c.flows].min()) if len(c.flows) else 0,
                                     int(f[c.flows].max()) if len(c.flows) else 0,
                                     c.algorithm) for c in prob.collectives])
    return out
