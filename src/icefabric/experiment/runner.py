"""Run a scenario: every policy on the same workload, every message size, one engine.

Results are data first: :class:`ExperimentResult` holds the nccl-tests-style rows and the
per-policy link statistics, saves to JSON, and is the only input of tables and plots.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from icefabric.engine.registry import run_engine
from icefabric.engine.result import SimResult
from icefabric.experiment.bounds import collective_cut_ns
from icefabric.policies.base import (
    PlanContext,
    failure_reroutes,
    get_policy,
    to_problem,
    with_proactive_rates,
)
from icefabric.provenance import provenance
from icefabric.scenario.build import build_fabric, build_workload
from icefabric.scenario.loader import LoadedScenario
from icefabric.topology.model import LINK_FABRIC, Fabric
from icefabric.units import format_size, us

SCHEMA_VERSION = 1


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
    runs: dict[str, SimResult] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "runs"}
        d["schema_version"] = SCHEMA_VERSION
        d["link_summary"] = [s.summary() for s in self.link_stats]
        return d

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1, default=_default)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, text: str) -> ExperimentResult:
        d = json.loads(text)
        d.pop("schema_version", None)
        d.pop("link_summary", None)
        d["link_stats"] = [LinkStats(**s) for s in d["link_stats"]]
        return cls(**d)


def _default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x))


def _failure_links(ls: LoadedScenario, fabric: Fabric) -> list[tuple[int, int, list[int]]]:
    """(t_down_ns, t_up_ns or -1, link ids) per scenario failure."""
    idx = {n: i for i, n in enumerate(fabric.node_names)}
    out = []
    for k, f in enumerate(ls.scenario.failures):
        a, b = f.link
        for n in (a, b):
            if n not in idx:
                raise ls.error(("failures", k, "link"), f"node {n!r} does not exist")
        links = [l for l in range(fabric.n_links)
                 if {int(fabric.link_src[l]), int(fabric.link_dst[l])} == {idx[a], idx[b]}]
        if not links:
            raise ls.error(("failures", k, "link"), f"no link between {a} and {b}")
        up = us(f.until_us) if f.until_us is not None else -1
        if up >= 0 and up <= us(f.at_us):
            raise ls.error(("failures", k, "until_us"), "until_us must be after at_us")
        out.append((us(f.at_us), up, links))
    return out


def fluid_defaults(fabric: Fabric) -> dict:
    """Fluid-engine settings for scenario runs: what a RoCEv2 fabric runs by default —
    DCQCN with the NVIDIA ConnectX firmware defaults, RED/ECN scaled to the port speed, PFC
    with a shared-buffer dynamic threshold on the switches' buffer, 4 KiB MTU payload with
    RoCEv2 headers (Eth 14 + IP 20 + UDP 8 + BTH 12 + ICRC 4 = 58 B) and one ACK per packet."""
    from icefabric.dataplane.pfc import PfcParams

    buf = fabric.node_buffer_bytes[fabric.is_switch]
    buffer = float(np.median(buf)) if len(buf) and np.median(buf) > 0 else 16 * 2**20
    return {"cc": "dcqcn", "dcqcn": "nvidia_firmware", "pfc": PfcParams(buffer_bytes=buffer),
            "wire_overhead": (4096 + 58) / 4096, "ack_bytes": 58.0}


def _fluid_options(options: dict, pfc_default) -> dict:
    """Scenario ``engine_options`` for the fluid engine; a ``pfc`` mapping overrides fields
    of the default PFC model (e.g. ``{buffer_bytes: 16777216}`` for a shallow buffer)."""
    from dataclasses import replace as _replace

    out = dict(options)
    if isinstance(out.get("pfc"), dict):
        out["pfc"] = _replace(pfc_default, **out["pfc"])
    return out


def _policy_failures(ls: LoadedScenario, fabric: Fabric, pol, ctx: PlanContext, plan,
                     pmap) -> tuple:
    """The scenario's link failures/recoveries as the policy reacts to them: each event
    re-plans from the previous plan and moves the routes that changed."""
    events = []
    for t_down, t_up, links in _failure_links(ls, fabric):
        events.append((t_down, False, links))
        if t_up >= 0:
            events.append((t_up, True, links))
    down: set[int] = set()
    prev, out = plan, []
    for t, up, links in sorted(events, key=lambda e: e[0]):
        down = (down - set(links)) if up else (down | set(links))
        new = pol.replan(ctx.after_failure(sorted(down)), prev)
        out.append(failure_reroutes(pmap, prev, new, t_ns=t, down_links=links,
                                    delay_ns=pol.reroute_delay_ns, up=up))
        prev = new
    return tuple(out)


def _fluid_run_options(ls: LoadedScenario, fabric: Fabric, pol) -> dict:
    """Fluid defaults, the end-side rules for paced policies, then the scenario's options."""
    opts = fluid_defaults(fabric)
    if pol.proactive_rates:
        from icefabric.dataplane.endside import EndSideParams

        opts["endside"] = EndSideParams()
    opts.update(_fluid_options(ls.scenario.engine_options, opts["pfc"]))
    return opts


def _traced_flows(prob, wl, n: int = 6) -> list[str]:
    """Flows worth plotting: per collective its largest flow that crosses the network."""
    net = np.zeros(prob.n_flows, bool)
    net[prob.route_flow[prob.route_qp >= 0]] = True
    order = [int(f) for f in np.argsort(-prob.flow_size_bytes, kind="stable") if net[f]]
    pick: dict[int, int] = {}
    for f in order:
        pick.setdefault(int(wl.flow_collective[f]), f)
    chosen = list(pick.values()) + [f for f in order if f not in pick.values()]
    return [prob.flow_names[f] for f in chosen[:n]]


def run_policy(ls: LoadedScenario, fabric: Fabric, policy_name: str, size_bytes: int, *,
               engine: str | None = None, engine_options: dict | None = None,
               trace: bool = False) -> SimResult:
    """One engine run of one policy at one size (failures applied as the policy reacts)."""
    from dataclasses import replace

    scn = ls.scenario
    pol = get_policy(policy_name, **scn.policy_options.get(policy_name, {}))
    fab = pol.ideal_fabric(fabric)
    qps = pol.qps_per_connection(1)  # 1 = keep each job's own setting
    wl = build_workload(ls, fab, size_bytes, qps_per_connection=qps if qps != 1 else None)
    ctx = PlanContext.create(fab, wl, seed=scn.seed)
    plan = pol.plan(ctx)
    prob, pmap = to_problem(fab, wl, plan, scenario=scn.name)
    engine = pol.engine_override or engine or scn.engine
    opts: dict = {}
    thresholds = None
    if engine == "fluid":
        if pol.proactive_rates:
            # Pacers only matter where queues exist; the flow engine already runs every flow
            # at its max-min rate, which is what the pacers are set to.
            prob = with_proactive_rates(prob, wl)
        opts = _fluid_run_options(ls, fab, pol)
        if trace:
            opts.update(trace_options(fab, _traced_flows(prob, wl)))
            thresholds = queue_thresholds(fab, opts)
    if fab is fabric and scn.failures:  # the ideal bound has no failures
        prob = replace(prob, failures=_policy_failures(ls, fabric, pol, ctx, plan, pmap))
    opts.update(engine_options or {})
    res = run_engine(prob, engine, policy=policy_name, scenario=scn.name, seed=scn.seed, **opts)
    res.meta["plan_link_qps"] = plan.link_load(fab.n_links).tolist()
    if thresholds is not None:
        res.meta["queue_thresholds"] = thresholds
    if fab is fabric:  # the cut bound of this fabric (ideal's twin has no cuts)
        res.meta["cut_ns"] = collective_cut_ns(fab, wl)
    res.meta["fabric_links"] = np.flatnonzero(fab.link_kind == LINK_FABRIC).tolist()
    return res


def trace_options(fabric: Fabric, flow_names=()) -> dict:
    """Fluid-engine recording for plots: the queue of every switch egress port and the
    DCQCN/sending rate of up to 12 flows, sampled every 10 µs."""
    sw_egress = fabric.is_switch[fabric.link_src]
    links = tuple(n for n, e in zip(fabric.link_names(), sw_egress) if e)
    flows = tuple(flow_names[:12])
    return {"record_links": links, "record_flows": flows}


def queue_thresholds(fabric: Fabric, opts: dict) -> dict:
    """ECN marking (Kmin, Kmax) and PFC pause thresholds of the recorded switch ports, in
    bytes, for queue plots. The dynamic PFC threshold moves with the shared buffer's use:
    its value with an otherwise empty buffer (``alpha * buffer``) is the highest it gets."""
    from icefabric.dataplane.ecn import RedParams
    from icefabric.dataplane.pfc import PfcParams

    idx = {n: i for i, n in enumerate(fabric.link_names())}
    links = [n for n in opts.get("record_links", ()) if n in idx]
    cap = fabric.link_capacity_bps[[idx[n] for n in links]]
    red = opts.get("red")
    if isinstance(red, RedParams):
        kmin, kmax = np.full(len(cap), red.kmin_bytes), np.full(len(cap), red.kmax_bytes)
    else:
        per = {k: v for k, v in (red or {}).items() if k.endswith("_per_gbps")}
        r = [RedParams.per_gbps(c, **per) for c in cap]
        kmin, kmax = np.array([x.kmin_bytes for x in r]), np.array([x.kmax_bytes for x in r])
    pfc = opts.get("pfc")
    out = {"ecn_kmin_bytes": dict(zip(links, kmin.tolist())),
           "ecn_kmax_bytes": dict(zip(links, kmax.tolist()))}
    if isinstance(pfc, PfcParams) and pfc.mode != "off":
        xoff = (pfc.port_alpha(cap) * pfc.buffer_bytes if pfc.mode == "dynamic"
                else np.full(len(cap), pfc.xoff_bytes))
        out["pfc_xoff_bytes"] = dict(zip(links, xoff.tolist()))
    return out


def run_scenario(ls: LoadedScenario, *, policies: list[str] | None = None,
                 sizes: list[int] | None = None, engine: str | None = None,
                 progress=None, trace: bool = False) -> ExperimentResult:
    """Run every policy at every size; rows carry gains over ``ecmp`` and the fraction of
    the ``ideal`` bound (computed when those policies are part of the run). With ``trace``
    (fluid engine), the largest size records queue and rate time series for plots."""
    t0 = time.perf_counter()
    scn = ls.scenario
    policies = list(policies or scn.policies)
    for p in policies:
        get_policy(p)  # fail early on unknown names
    sizes = list(sizes or scn.size_list())
    fabric = build_fabric(ls)
    total = len(policies) * len(sizes)
    rows: list[dict] = []
    largest: dict[str, SimResult] = {}
    done = 0
    for size in sizes:
        for p in policies:
            if progress:
                progress(done, total, f"{p} @ {format_size(size)}")
            tr = trace and size == sizes[-1] and (engine or scn.engine) == "fluid"
            res = run_policy(ls, fabric, p, size, engine=engine, trace=tr)
            cut = res.meta.get("cut_ns", {})
            for c in res.collectives:
                rows.append({"cut_time_us": cut[c.name] / 1e3 if c.name in cut else None,
"policy": p, "job": c.job, "collective": c.kind,
                             "algorithm": c.algorithm, "size_bytes": c.size_bytes,
                             "nranks": c.nranks, "time_us": round(c.time_us, 3),
                             "algbw_GBps": round(c.algbw_GBps, 3),
                             "busbw_GBps": round(c.busbw_GBps, 3)})
            if size == sizes[-1]:
                largest[p] = res
            done += 1
    if progress:
        progress(total, total, "done")
    _add_relative(rows)
    stats = []
    for p, res in largest.items():
        fl = np.asarray(res.meta["fabric_links"], dtype=np.int64)
        util = res.link_mean_util()
        qps = np.asarray(res.meta["plan_link_qps"])
        stats.append(LinkStats(p, [res.link_names[i] for i in fl], util[fl].round(4).tolist(),
                               res.link_peak_util[fl].round(4).tolist(),
                               qps[fl].round(3).tolist()))
    congestion = [congestion_summary(p, r) for p, r in largest.items()
                  if r.engine == "fluid"]
    notes = []
    if scn.failures and "ideal" in policies:
        notes.append("ideal ignores link failures (non-blocking bound)")
    return ExperimentResult(scn.name, scn.description, scn.seed, engine or scn.engine,
                            policies, sizes, rows, stats, fabric.describe(),
                            time.perf_counter() - t0, notes, congestion, ls.text,
                            provenance(), largest)


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


def _add_relative(rows: list[dict]) -> None:
    """Gain over ``ecmp``, fraction of ``ideal`` (non-blocking) and of the capacity bound
    (``ideal``'s time or the fabric's cut time, whichever is longer; see
    :mod:`icefabric.experiment.bounds`)."""
    key = lambda r: (r["job"], r["collective"], r["size_bytes"])  # noqa: E731
    ecmp = {key(r): r for r in rows if r["policy"] == "ecmp"}
    ideal = {key(r): r for r in rows if r["policy"] == "ideal"}
    cut: dict[tuple, float] = {}
    for r in rows:
        if r.get("cut_time_us") is not None:
            cut[key(r)] = max(cut.get(key(r), 0.0), r["cut_time_us"])
    for r in rows:
        r.pop("cut_time_us", None)
        i = ideal.get(key(r))
        e = ecmp.get(key(r))
        r["ideal_busbw_GBps"] = i["busbw_GBps"] if i else None
        r["frac_of_ideal"] = round(r["busbw_GBps"] / i["busbw_GBps"], 4) if i else None
        r["gain_vs_ecmp"] = round(r["busbw_GBps"] / e["busbw_GBps"] - 1, 4) if e else None
        # busbw x time is the same for every policy at one size: rescale to the bound time
        t_bound = max(i["time_us"] if i else 0.0, cut.get(key(r), 0.0))
        b = r["busbw_GBps"] * r["time_us"] / t_bound if t_bound > 0 else None
        b = None if r["policy"] == "ideal" else b  # ideal runs on another (non-blocking) fabric
        r["bound_busbw_GBps"] = round(b, 3) if b else None
        r["frac_of_bound"] = round(r["busbw_GBps"] / b, 4) if b else None
