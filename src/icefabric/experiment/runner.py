"""Run a scenario: every policy on the same workload, every message size, one engine.

Results are data first: :class:`ExperimentResult` holds the nccl-tests-style rows and the
per-policy link statistics, saves to JSON, and is the only input of tables and plots.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from icefabric.engine.result import CollectiveResult, SimResult
from icefabric.experiment.bounds import collective_cut_ns
from icefabric.experiment.draws import (
    DrawInputs,
    DrawnCollectives,
    DrawSpread,
    draw_all,
    draw_seeds,
    quantiles,
)
from icefabric.pipeline import scenario_policy
from icefabric.pipeline.recipe import RunSpec
from icefabric.provenance import provenance
from icefabric.scenario.budget import check_budget
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import LoadedScenario
from icefabric.topology.model import Fabric
from icefabric.units import format_size

SCHEMA_VERSION = 1
#: ECMP as RoCE clusters deploy it: NCCL_IB_QPS_PER_CONNECTION=2 (policies/baselines.py
#: cites the public run commands); ``gain_vs_deployed`` is over its median, and tables give
#: it first, with the bare NCCL default (``ecmp``, ``gain_vs_ecmp``) beside it.
DEPLOYED = "ecmp-tuned"
#: What RoCE fabrics run without ICE, the deployed one first; ``gain_vs_best`` compares
#: with the best of these (by median busbw). ``spray`` (needs reordering NICs) and
#: ``ideal`` are references.
BASELINES = (DEPLOYED, "ecmp", "ecmp-multiqp", "static-disjoint")


@dataclass
class LinkStats:
    """Fabric (switch-to-switch) link statistics of one policy at the largest size."""

    policy: str
    link_names: list[str]
    mean_util: list[float]
    peak_util: list[float]
    qps_on_link: list[float]

    def summary(self) -> dict:
        u = np.asarray(self.mean_util)
        q = np.asarray(self.qps_on_link)
        return {"policy": self.policy, "uplinks": len(u),
                "util_min": float(u.min()) if len(u) else 0.0,
                "util_mean": float(u.mean()) if len(u) else 0.0,
                "util_max": float(u.max()) if len(u) else 0.0,
                "idle_links": int(np.count_nonzero(u < 0.01)),
                "max_qps_on_link": float(q.max()) if len(q) else 0.0,
                "mean_qps_on_busy_link": float(q[q > 0].mean()) if np.any(q > 0) else 0.0}


@dataclass
class ExperimentResult:
    scenario: str
    description: str
    seed: int
    engine: str
    policies: list[str]
    sizes: list[int]
    rows: list[dict]
    link_stats: list[LinkStats]
    fabric: dict
    wall_s: float
    notes: list[str] = field(default_factory=list)
    congestion: list[dict] = field(default_factory=list)
    #: the scenario as run (YAML) and where the result came from (version, commit, command)
    scenario_text: str = ""
    provenance: dict = field(default_factory=dict)
    training: dict | None = None  # the training job's iteration per policy (training.py)
    draws: int = 1  # draws of every randomised policy (experiment/draws.py)
    runs: dict[str, SimResult] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        from icefabric.experiment.calibration import trust_line  # it runs scenarios too

        d = {k: v for k, v in asdict(self).items() if k != "runs"}
        d["schema_version"] = SCHEMA_VERSION
        d["link_summary"] = [s.summary() for s in self.link_stats]
        d["trust"] = trust_line()
        return d

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1, default=_default)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, text: str) -> ExperimentResult:
        d = json.loads(text)
        for derived in ("schema_version", "link_summary", "trust"):
            d.pop(derived, None)
        d["link_stats"] = [LinkStats(**s) for s in d["link_stats"]]
        return cls(**d)


def _default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x))


def run_policy(ls: LoadedScenario, fabric: Fabric, policy_name: str, size_bytes: int, *,
               engine: str | None = None, trace: bool = False) -> SimResult:
    """One engine run of one policy at one size (failures applied as the policy reacts);
    ``trace`` records fluid-engine queues and rates for plots."""
    spec = RunSpec.of(ls, fabric, policy_name, engine=engine, trace=trace)
    p = spec.size_plan(size_bytes)
    res = spec.simulate(p)
    if p.fabric is fabric:  # the cut bound of this fabric (ideal's twin has no cuts)
        res.meta["cut_ns"] = collective_cut_ns(p.fabric, p.workload)
    return res


@dataclass(frozen=True)
class Execution:
    """How :func:`run_scenario` runs and what it records beside its rows.

    Attributes
    ----------
    progress : callable ``(done, total, label)``, optional — called before every run.
    trace : bool — with the fluid engine, the largest size records queue and rate time
        series for plots.
    spread : DrawSpread — where the draws run (local processes or a Ray cluster).
    """

    progress: Callable[[int, int, str], None] | None = None
    trace: bool = False
    spread: DrawSpread = DrawSpread()


@dataclass
class _Run:
    """One :func:`run_scenario` call: what it runs and what it has produced so far."""

    ls: LoadedScenario
    fabric: Fabric
    policies: list[str]
    sizes: list[int]
    drawn: list[str]  # the randomised policies that also run over draws
    draws: int
    engine: str | None
    how: Execution
    total: int = 0  # runs, for progress
    done: int = 0
    rows: list[dict] = field(default_factory=list)
    largest: dict[str, SimResult] = field(default_factory=dict)  # policy -> largest size's run
    first: dict[str, dict[int, list[CollectiveResult]]] = field(default_factory=dict)

    def announce(self, label: str) -> None:
        """Tell the progress callback, if any, which run starts."""
        if self.how.progress:
            self.how.progress(self.done, self.total, label)


def run_scenario(ls: LoadedScenario, *, policies: list[str] | None = None,
                 sizes: list[int] | None = None, engine: str | None = None, draws: int = 1,
                 how: Execution | None = None) -> ExperimentResult:
    """Run every policy at every size; rows carry gains over ``ecmp`` and the fraction of
    the ``ideal`` bound (computed when those policies are part of the run). ``how`` gives
    a progress callback, traces (fluid engine: the largest size records queue and rate
    time series for plots) and where the draws run (:class:`Execution`).

    With ``draws`` > 1, every randomised policy (the ECMP family) also runs over that many
    draws of QP numbers and hash seeds (:mod:`icefabric.experiment.draws`; draw 0 is the
    single-draw run): its rows carry the median as ``busbw_GBps`` (and ``time_us``,
    ``algbw_GBps``), ``busbw_GBps_p10``/``_p90``, the per-draw ``busbw_GBps_draws`` and
    ``draws``; gains over ECMP get ``gain_vs_ecmp_p10``/``_p90`` (over the draws) and
    ``gain_vs_ecmp_lucky`` (over ECMP's p90). ``how.spread`` runs the draws of different
    policies and sizes in local processes or on a Ray cluster (:class:`DrawSpread`)."""
    t0 = time.perf_counter()
    scn = ls.scenario
    run = _new_run(ls, policies, sizes, engine, draws, how or Execution())
    _run_sizes(run)
    _run_draws(run)
    training = _run_training(run)
    if run.how.progress:
        run.how.progress(run.total, run.total, "done")
    _add_relative(run.rows)
    congestion = [congestion_summary(p, r) for p, r in run.largest.items()
                  if r.engine == "fluid"]
    return ExperimentResult(scn.name, scn.description, scn.seed, engine or scn.engine,
                            run.policies, run.sizes, run.rows, _link_stats(run.largest),
                            run.fabric.describe(), time.perf_counter() - t0, _notes(run),
                            congestion, ls.text, provenance(), training, runs=run.largest,
                            draws=draws if run.drawn else 1)


def _new_run(ls: LoadedScenario, policies: list[str] | None, sizes: list[int] | None,
             engine: str | None, draws: int, how: Execution) -> _Run:
    """Check the policies (unknown names and options fail here) and the budget, build the
    fabric and count the runs."""
    scn = ls.scenario
    policies = list(policies or scn.policies)
    randomised = [p for p in policies if scenario_policy(ls, p).randomised]
    drawn = randomised if draws > 1 else []
    sizes = list(sizes or scn.size_list()) if scn.jobs else []
    check_budget(ls, draws=draws)
    run = _Run(ls, build_fabric(ls), policies, sizes, drawn, draws, engine, how)
    run.total = len(policies) * (len(sizes) + (scn.training is not None)) + \
        len(drawn) * len(sizes)
    return run


def _run_sizes(run: _Run) -> None:
    """One run of every policy at every size (draw 0 of the randomised ones)."""
    fluid = (run.engine or run.ls.scenario.engine) == "fluid"
    for size in run.sizes:
        for p in run.policies:
            run.announce(f"{p} @ {format_size(size)}")
            tr = run.how.trace and size == run.sizes[-1] and fluid
            res = run_policy(run.ls, run.fabric, p, size, engine=run.engine, trace=tr)
            cut = res.meta.get("cut_ns", {})
            run.rows += [{"policy": p, **collective_row(c),
                          "cut_time_us": cut[c.name] / 1e3 if c.name in cut else None}
                         for c in res.collectives]
            if size == run.sizes[-1]:
                run.largest[p] = res
            run.first.setdefault(p, {})[size] = res.collectives
            run.done += 1


def _run_draws(run: _Run) -> None:
    """The other draws of every randomised policy; their spread goes into the rows."""
    inputs = DrawInputs(run.ls, run.fabric, draw_seeds(run.ls.scenario.seed, run.draws),
                        run.engine)
    for d in draw_all(inputs, run.drawn, run.sizes, first=run.first, spread=run.how.spread):
        run.announce(f"{d.policy} @ {format_size(d.size_bytes)}, {run.draws} draws")
        apply_draws(run.rows, d)
        run.done += 1


def _run_training(run: _Run) -> dict | None:
    """The training job's iteration per policy (None without one); a training-only
    scenario takes its link statistics from these runs."""
    if run.ls.scenario.training is None:
        return None
    from icefabric.experiment.training import run_training

    progress, done, total = run.how.progress, run.done, run.total
    step = (lambda i, n, label: progress(done + i, total, label)) if progress else None
    training, runs = run_training(run.ls, run.fabric, run.policies, engine=run.engine,
                                  progress=step, draws=run.draws)
    run.largest = run.largest or runs
    return training


def _link_stats(largest: dict[str, SimResult]) -> list[LinkStats]:
    """Fabric link statistics of each policy's largest run."""
    stats = []
    for p, res in largest.items():
        fl = np.asarray(res.meta["fabric_links"], dtype=np.int64)
        util = res.link_mean_util()
        qps = np.asarray(res.meta["plan_link_qps"])
        stats.append(LinkStats(p, [res.link_names[i] for i in fl], util[fl].round(4).tolist(),
                               res.link_peak_util[fl].round(4).tolist(),
                               qps[fl].round(3).tolist()))
    return stats


def _notes(run: _Run) -> list[str]:
    scn = run.ls.scenario
    notes = []
    if scn.failures and "ideal" in run.policies:
        notes.append("ideal ignores link failures (non-blocking bound)")
    if run.drawn:
        notes.append(f"{', '.join(run.drawn)}: median [p10-p90] over {run.draws} draws of QP "
                     f"numbers and switch hash seeds (seed {scn.seed})")
    return notes


def collective_row(c: CollectiveResult) -> dict:
    """One nccl-tests-style result row of a collective."""
    return {"job": c.job, "collective": c.kind, "algorithm": c.algorithm,
            "size_bytes": c.size_bytes, "nranks": c.nranks, "time_us": round(c.time_us, 3),
            "algbw_GBps": round(c.algbw_GBps, 3), "busbw_GBps": round(c.busbw_GBps, 3)}


def congestion_summary(policy: str, res: SimResult) -> dict:
    """Queue, PFC, ECN and CNP figures of one fluid run (largest size)."""
    pause = res.link_pfc_pause_ns
    return {"policy": policy,
            "pfc_pause_us": round(sum(pause.values()) / 1e3, 3),
            "paused_links": len(pause),
            "pfc_pause_count": int(sum(res.link_pfc_pause_count.values())),
            "max_queue_KB": round(max(res.link_max_queue_bytes.values(), default=0) / 1e3, 1),
            "ecn_marked_links": sum(1 for v in res.link_ecn_marked_frac.values() if v > 0),
            "cnps": int(sum(res.qp_cnp_count.values())),
            "endside_fallbacks": int(res.meta.get("endside_fallbacks", 0))}


def apply_draws(rows: list[dict], drawn: DrawnCollectives) -> None:
    """Put one policy's draws at one size into its rows: medians in the nccl-tests columns,
    the p10-p90 range and every draw's busbw beside them."""
    by = {(r["job"], r["collective"]): r for r in rows
          if r["policy"] == drawn.policy and r["size_bytes"] == drawn.size_bytes}
    for c, res in enumerate(drawn.runs[0]):
        r = by[(res.job, res.kind)]
        busbw, t = drawn.busbw_GBps(c), drawn.time_us(c)
        lo, mid, hi = quantiles(busbw)
        t_mid = quantiles(t)[1]
        r.update(time_us=round(t_mid, 3), busbw_GBps=round(mid, 3),
                 algbw_GBps=round(res.size_bytes / (t_mid * 1e3), 3) if t_mid > 0 else 0.0,
                 busbw_GBps_p10=round(lo, 3), busbw_GBps_p90=round(hi, 3),
                 draws=len(busbw), busbw_GBps_draws=busbw)


def _gains_over_draws(r: dict, e: dict, key: str) -> dict:
    """Row ``r``'s gain over a drawn baseline's draws (row ``e``), as ``<key>_p10`` and
    ``_p90`` of the per-draw gain (draw ``d`` against the baseline's draw ``d``, independent
    draws; a policy run once against every draw) and ``<key>_lucky`` over its p90."""
    own = np.asarray(r.get("busbw_GBps_draws") or [r["busbw_GBps"]])
    base = np.asarray(e["busbw_GBps_draws"])
    n = min(len(own), len(base)) if len(own) > 1 else len(base)
    lucky = _ratio(r["busbw_GBps"], e["busbw_GBps_p90"], 1)
    if not base[:n].all():  # a draw's busbw rounds to 0: no gain to show
        return {f"{key}_p10": None, f"{key}_p90": None, f"{key}_lucky": lucky}
    lo, _, hi = quantiles(np.resize(own, n) / base[:n] - 1)
    return {f"{key}_p10": round(lo, 4), f"{key}_p90": round(hi, 4), f"{key}_lucky": lucky}


def _ratio(a: float, b: float, minus: float = 0.0) -> float | None:
    """``a / b - minus`` to 4 decimals; None when ``b`` is 0 (a size so small that its busbw
    rounds to 0 GB/s: 8 B, where every nccl-tests log starts)."""
    return round(a / b - minus, 4) if b else None


def _add_relative(rows: list[dict]) -> None:
    """Gain over the deployed ECMP (``ecmp-tuned``) and over ``ecmp``, fraction of ``ideal``
    (non-blocking) and of the capacity bound (``ideal``'s time or the fabric's cut time,
    whichever is longer; see :mod:`icefabric.experiment.bounds`)."""
    key = lambda r: (r["job"], r["collective"], r["size_bytes"])  # noqa: E731
    ecmp = {key(r): r for r in rows if r["policy"] == "ecmp"}
    deployed = {key(r): r for r in rows if r["policy"] == DEPLOYED}
    ideal = {key(r): r for r in rows if r["policy"] == "ideal"}
    baselines: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        if r["policy"] in BASELINES:
            baselines.setdefault(key(r), {})[r["policy"]] = r
    cut: dict[tuple, float] = {}
    for r in rows:
        if r.get("cut_time_us") is not None:
            cut[key(r)] = max(cut.get(key(r), 0.0), r["cut_time_us"])
    for r in rows:
        r.pop("cut_time_us", None)
        i = ideal.get(key(r))
        e = ecmp.get(key(r))
        r["ideal_busbw_GBps"] = i["busbw_GBps"] if i else None
        r["frac_of_ideal"] = _ratio(r["busbw_GBps"], i["busbw_GBps"]) if i else None
        for name, base in (("gain_vs_deployed", deployed.get(key(r))), ("gain_vs_ecmp", e)):
            r[name] = _ratio(r["busbw_GBps"], base["busbw_GBps"], 1) if base else None
            if base and base.get("busbw_GBps_draws") and r is not base:
                r.update(_gains_over_draws(r, base, name))
        best = max((b for p, b in baselines.get(key(r), {}).items() if p != r["policy"]),
                   key=lambda b: b["busbw_GBps"], default=None)
        r["best_baseline"] = best["policy"] if best else None
        r["gain_vs_best"] = _ratio(r["busbw_GBps"], best["busbw_GBps"], 1) if best else None
        # busbw x time is the same for every policy at one size: rescale to the bound time
        t_bound = max(i["time_us"] if i else 0.0, cut.get(key(r), 0.0))
        b = r["busbw_GBps"] * r["time_us"] / t_bound if t_bound > 0 else None
        b = None if r["policy"] == "ideal" else b  # ideal runs on another (non-blocking) fabric
        r["bound_busbw_GBps"] = round(b, 3) if b else None
        r["frac_of_bound"] = round(r["busbw_GBps"] / b, 4) if b else None
