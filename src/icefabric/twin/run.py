"""Digital-twin mode: the simulator plays the fabric and the hosts against a real controller.

``run_twin(scenario, controller_url, admin_token)``:

1. uploads the scenario's fabric (topology + switch hash models) to the controller;
2. starts one :class:`~icefabric.agent.runner.Agent` per server, each with a twin NIC
   actuator, talking HTTP to the controller; each reports its host's communicators (ranks,
   library, collectives, size, and the QPs its NICs created, with 5-tuples and QPNs);
3. waits until every agent applied the plan that covers every job, then assembles the plan
   *from what the agents applied*: every QP's applied source port is hashed through every
   switch's ECMP model under the current link state (what real switches would do);
4. injects link failures as events from the agents whose QPs cross the link, waits for the
   re-plan to be applied, and turns the change into engine re-routes;
5. runs the flow engine, and runs the same policy in-process (``run_policy``) on the same
   scenario; the results must agree.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field, replace

import httpx
import numpy as np

from icefabric.agent.actuators.twin import TwinNicActuator
from icefabric.agent.client import ControllerClient
from icefabric.agent.runner import Agent, Backoff
from icefabric.ccl.workload import Workload
from icefabric.control.hashing import ecmp_paths, fabric_hash_configs
from icefabric.control.plan import PathPlan
from icefabric.csr import csr_from_lists
from icefabric.engine.registry import run_engine
from icefabric.experiment.runner import run_policy
from icefabric.policies.base import failure_reroutes, get_policy, to_problem
from icefabric.scenario.build import build_fabric, build_workload, job_communicators
from icefabric.scenario.loader import LoadedScenario, load
from icefabric.scenario.schema import FailureSpec
from icefabric.schemas_service import (
    CollectiveEntry,
    CommReport,
    FabricUpload,
    NicInfo,
    QpEntry,
    RankEntry,
)
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing
from icefabric.topology.serialize import fabric_to_dict
from icefabric.units import us


class TwinError(RuntimeError):
    pass


def _ip(x: int) -> str:
    x = int(x)
    return f"{x >> 24 & 255}.{x >> 16 & 255}.{x >> 8 & 255}.{x & 255}"


@dataclass
class TwinResult:
    scenario: str
    policy: str
    engine: str
    size_bytes: int
    agents: int
    qps: int
    plan_versions: list[int]
    rows: list[dict]
    agree: bool
    max_rel_diff: float
    path_mismatches: int
    qps_on_down_links: int
    failures: list[dict]
    wall_s: float
    notes: list[str] = field(default_factory=list)
    reference_rows: list[dict] = field(default_factory=list)
    description: str = ""
    fabric: dict = field(default_factory=dict)
    seed: int = 0

    def to_experiment(self):
        """An :class:`~icefabric.experiment.runner.ExperimentResult` with the twin's rows
        (policy ``<name> (twin)``) next to the in-process ones, for the simulate tables."""
        from icefabric.experiment.runner import ExperimentResult

        tw = f"{self.policy} (twin)"
        rows = [{**r, "policy": tw} for r in self.rows] + \
            [{**r, "policy": self.policy} for r in self.reference_rows]
        for r in rows:
            r.pop("inprocess_busbw_GBps", None)
            r.pop("match", None)
            r.update(ideal_busbw_GBps=None, frac_of_ideal=None, gain_vs_ecmp=None)
        pols = [tw] + ([self.policy] if self.reference_rows else [])
        return ExperimentResult(self.scenario, self.description, self.seed, self.engine,
                                pols, [self.size_bytes], rows, [], self.fabric, self.wall_s,
                                list(self.notes))

    def to_dict(self) -> dict:
        return {"schema_version": 1, **asdict(self)}


def host_reports(ls: LoadedScenario, fabric: Fabric, wl: Workload, qps_override: int | None,
                 size_bytes: int) -> dict[str, list[CommReport]]:
    """What each host's collector would report: one CommReport per job it takes part in."""
    scn = ls.scenario
    qp_job = [wl.conn_job[c] for c in wl.qp_conn.tolist()]
    ordinal: dict[tuple, int] = {}
    qps_by: dict[tuple[str, str], list[QpEntry]] = {}
    srv = fabric.node_server[wl.qp_src_nic]
    for q in range(wl.n_qps):
        s, d = _ip(wl.qp_src_ip[q]), _ip(wl.qp_dst_ip[q])
        k = (qp_job[q], s, d)
        o = ordinal.get(k, 0)
        ordinal[k] = o + 1
        host = fabric.servers[int(srv[q])].name
        qps_by.setdefault((qp_job[q], host), []).append(QpEntry(
            src_ip=s, dst_ip=d, lqpn=int(wl.qp_lqpn[q]), rqpn=int(wl.qp_rqpn[q]), ordinal=o))
    out: dict[str, list[CommReport]] = {}
    for j, comm in job_communicators(ls, fabric, qps_override):
        job = scn.jobs[j]
        ranks = [RankEntry(rank=i, host=fabric.servers[int(fabric.node_server[a])].name,
                           device=int(fabric.node_index[a]))
                 for i, a in enumerate(comm.ranks.tolist())]
        for host in dict.fromkeys(r.host for r in ranks):
            out.setdefault(host, []).append(CommReport(
                job=comm.job, job_order=j, library=comm.library,
                collectives=[CollectiveEntry(kind=c.kind, algorithm=c.algorithm)
                             for c in job.collectives],
                size_bytes=size_bytes, channels=comm.channels,
                qps_per_connection=comm.qps_per_connection,
                step_overhead_ns=comm.step_overhead_ns, ranks=ranks,
                qps=qps_by.get((comm.job, host), [])))
    return out


def applied_plan(fabric: Fabric, wl: Workload, actuators: dict[str, TwinNicActuator],
                 down_ids: list[int], policy: str) -> tuple[PathPlan, int]:
    """The PathPlan the twin's data plane realizes from the agents' applied settings.

    A single-route QP with a source port travels where the switches' hash models send that
    port under the current link state; multi-route (spraying) QPs use their planned routes.
    Returns the plan and the number of QPs whose realized path differs from the planned one.
    """
    srv = fabric.node_server[wl.qp_src_nic]
    entries = []
    for q in range(wl.n_qps):
        act = actuators[fabric.servers[int(srv[q])].name]
        key = (_ip(wl.qp_src_ip[q]), _ip(wl.qp_dst_ip[q]), int(wl.qp_lqpn[q]),
               int(wl.qp_rqpn[q]))
        e = act.applied.get(key)
        if e is None:
            raise TwinError(f"QP {key} has no applied plan on its host")
        entries.append(e)
    sport = np.array([e.sport for e in entries], dtype=np.int64)
    hashed = np.array([len(e.routes) == 1 and e.sport >= 0 for e in entries], dtype=bool)
    idx = np.flatnonzero(hashed)
    real: dict[int, np.ndarray] = {}
    if len(idx):
        paths = ecmp_paths(fabric, Routing(fabric, down_ids), fabric_hash_configs(fabric),
                           wl.qp_src_nic[idx], wl.qp_dst_nic[idx], sport[idx])
        real = dict(zip(idx.tolist(), paths))
    routes, r_qp, r_w = [], [], []
    mismatches = 0
    for q, e in enumerate(entries):
        if q in real:
            p = real[q]
            if list(p) != e.routes[0]:
                mismatches += 1
            routes.append(p)
            r_qp.append(q)
            r_w.append(1.0)
        else:
            for r, w in zip(e.routes, e.weights):
                routes.append(np.asarray(r, dtype=np.int64))
                r_qp.append(q)
                r_w.append(w)
    indptr, links = csr_from_lists(routes)
    rate = np.array([np.inf if e.rate_bps is None else e.rate_bps for e in entries])
    return PathPlan(sport=sport, route_qp=np.asarray(r_qp, dtype=np.int64),
                    route_weight=np.asarray(r_w, dtype=np.float64), route_indptr=indptr,
                    route_links=links, rate_bps=rate, policy=policy), mismatches


def _failure_events(ls: LoadedScenario, fabric: Fabric) -> list[tuple[int, bool, str, str]]:
    out = []
    names = set(fabric.node_names)
    for k, f in enumerate(ls.scenario.failures):
        a, b = f.link
        for n in (a, b):
            if n not in names:
                raise ls.error(("failures", k, "link"), f"node {n!r} does not exist")
        out.append((us(f.at_us), False, a, b))
        if f.until_us is not None:
            out.append((us(f.until_us), True, a, b))
    return sorted(out, key=lambda e: e[0])


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise TwinError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def run_twin(scenario: str | LoadedScenario, controller_url: str, admin_token: str, *,
             enrol_token: str | None = None, size_bytes: int | None = None,
             failures: list[FailureSpec] | None = None, policy: str | None = None,
             poll_wait_s: float = 2.0, timeout_s: float = 120.0,
             compare: bool = True, on_ready=None) -> TwinResult:
    """Play ``scenario`` against the controller at ``controller_url`` (see module doc).

    Parameters
    ----------
    scenario : name, path or LoadedScenario.
    controller_url : str — ``http://127.0.0.1:PORT``.
    admin_token : str — to load the fabric and read plan summaries.
    enrol_token : str, optional — agents enrol with it (default: the admin token).
    size_bytes : int, optional — message size (default: the scenario's largest).
    failures : list of FailureSpec, optional — replace the scenario's failures.
    policy : str, optional — must equal the controller's; read from ``/healthz`` if None.
    on_ready : callable(agents, threads) — called once the first full plan is applied
        (tests use it to restart the controller mid-run).
    """
    t0 = time.perf_counter()
    ls = load(scenario) if not isinstance(scenario, LoadedScenario) else scenario
    if failures is not None:
        ls = LoadedScenario(ls.scenario.model_copy(update={"failures": list(failures)}),
                            ls.source, ls.lines, ls.text)
    scn = ls.scenario
    size = int(size_bytes or scn.size_list()[-1])
    admin = httpx.Client(base_url=controller_url, trust_env=False, timeout=30.0,
                         headers={"Authorization": f"Bearer {admin_token}"})
    try:
        health = admin.get("/healthz").json()
        ctl_policy = health["policy"]
        if policy is not None and policy != ctl_policy:
            raise TwinError(f"controller plans with {ctl_policy!r}, not {policy!r}")
        policy = ctl_policy
        pol = get_policy(policy, **scn.policy_options.get(policy, {}))
        fabric = build_fabric(ls)
        if pol.ideal_fabric(fabric) is not fabric:
            raise TwinError(f"policy {policy!r} does not run on the real fabric")
        qps = pol.qps_per_connection(1)
        override = qps if qps != 1 else None
        wl = build_workload(ls, fabric, size, qps_per_connection=override)
        reports = host_reports(ls, fabric, wl, override, size)
        r = admin.put("/v1/fabric", content=FabricUpload(
            topology=fabric_to_dict(fabric), plan_seed=scn.seed).model_dump_json(),
            headers={"Content-Type": "application/json"})
        if r.status_code != 200:
            raise TwinError(f"fabric upload failed: {r.status_code} {r.text[:300]}")
        all_jobs = sorted(j.name for j in scn.jobs)

        actuators: dict[str, TwinNicActuator] = {}
        agents: dict[str, Agent] = {}
        for i, s in enumerate(fabric.servers):
            act = TwinNicActuator()
            nics = [NicInfo(name=fabric.node_names[n].split("/")[-1],
                            ip=_ip(fabric.node_ip[n]),
                            speed_bps=s.profile.nic_bps) for n in s.nics]
            client = ControllerClient(controller_url, timeout_s=10.0)
            agents[s.name] = Agent(s.name, client, act, enrol_token=enrol_token or admin_token,
                                   collector=(lambda h=s.name: reports.get(h, [])), nics=nics,
                                   poll_wait_s=poll_wait_s,
                                   backoff=Backoff(0.05, 1.0, seed=i))
            actuators[s.name] = act
        stop = threading.Event()
        threads = [threading.Thread(target=a.run, args=(stop,), name=f"agent-{h}", daemon=True)
                   for h, a in agents.items()]
        for t in threads:
            t.start()

        def current() -> dict | None:
            try:
                r = admin.get("/v1/plans/current")
            except httpx.HTTPError:
                return None
            return r.json() if r.status_code == 200 else None

        def wait_plan(down: set[tuple[str, str]]) -> int:
            state: dict = {}

            def ok() -> bool:
                c = current()
                if c is None or sorted(c["jobs"]) != all_jobs:
                    return False
                if {tuple(sorted((x["a"], x["b"]))) for x in c["down_links"]} != down:
                    return False
                state["v"] = c["version"]
                return all(a.version >= c["version"] for a in agents.values())

            _wait(ok, timeout_s, f"every agent to apply a plan with down links {sorted(down)}")
            return state["v"]

        versions = []
        try:
            versions.append(wait_plan(set()))
            if on_ready is not None:
                on_ready(agents, threads)
                versions.append(wait_plan(set()))
            plan0, mism = applied_plan(fabric, wl, actuators, [], policy)
            prob, pmap = to_problem(fabric, wl, plan0, scenario=scn.name)
            prev, down = plan0, set()
            reroutes, fails = [], []
            for t_ns, up, a, b in _failure_events(ls, fabric):
                key = tuple(sorted((a, b)))
                ids = [l for l in range(fabric.n_links)
                       if {int(fabric.link_src[l]), int(fabric.link_dst[l])} ==
                       {fabric.node_names.index(a), fabric.node_names.index(b)}]
                down = (down - {key}) if up else (down | {key})
                # The agents whose applied routes cross the link notice it and report it.
                idset = set(ids)
                seen_by = [h for h, act in actuators.items()
                           if any(l in idset for q in act.applied.values()
                                  for r in q.routes for l in r)] or [next(iter(agents))]
                switched = 0
                for h in seen_by:
                    ag = agents[h]
                    if up:
                        from icefabric.schemas_service import Event

                        with ag._lock:
                            ag.events.append(Event(kind="link_up", link={"a": a, "b": b}))
                    else:
                        switched += ag.observe_links_down([(a, b)], idset)
                    ag.flush_events()
                versions.append(wait_plan(down))
                down_ids = sorted(l for x, y in down for l in range(fabric.n_links)
                                  if {fabric.node_names[fabric.link_src[l]],
                                      fabric.node_names[fabric.link_dst[l]]} == {x, y})
                new, m = applied_plan(fabric, wl, actuators, down_ids, policy)
                mism += m
                reroutes.append(failure_reroutes(pmap, prev, new, t_ns=t_ns, down_links=ids,
                                                 delay_ns=pol.reroute_delay_ns, up=up))
                fails.append({"t_ns": t_ns, "link": [a, b], "up": up,
                              "reported_by": len(seen_by), "backup_ports_used": switched,
                              "plan_version": versions[-1]})
                prev = new
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=poll_wait_s + 15)
            for a in agents.values():
                a.client.close()
        # Every QP ends on a working path.
        down_ids = {l for x, y in down for l in range(fabric.n_links)
                    if {fabric.node_names[fabric.link_src[l]],
                        fabric.node_names[fabric.link_dst[l]]} == {x, y}}
        on_down = sum(1 for q in range(prev.n_qps)
                      if any(int(l) in down_ids for r in range(prev.qp_route_ptr()[q],
                                                               prev.qp_route_ptr()[q + 1])
                             for l in prev.route(r)))
        prob = replace(prob, failures=tuple(reroutes))
        res = run_engine(prob, scn.engine, policy=policy, scenario=scn.name, seed=scn.seed)
        ref = {}
        if compare:
            rr = run_policy(ls, fabric, policy, size)
            ref = {(c.job, c.name): c for c in rr.collectives}
        def as_row(c) -> dict:
            return {"job": c.job, "collective": c.kind, "algorithm": c.algorithm,
                    "size_bytes": c.size_bytes, "nranks": c.nranks,
                    "time_us": round(c.time_us, 3), "algbw_GBps": round(c.algbw_GBps, 3),
                    "busbw_GBps": round(c.busbw_GBps, 3)}

        rows, worst = [], 0.0
        for c in res.collectives:
            row = as_row(c)
            o = ref.get((c.job, c.name))
            if o is not None:
                rel = abs(c.time_ns - o.time_ns) / max(o.time_ns, 1)
                worst = max(worst, rel)
                row["inprocess_busbw_GBps"] = round(o.busbw_GBps, 3)
                row["match"] = rel <= 1e-9
            rows.append(row)
        agree = bool(compare and len(ref) == len(res.collectives) and worst <= 1e-9)
        return TwinResult(scn.name, policy, scn.engine, size, len(agents), wl.n_qps, versions,
                          rows, agree, worst, mism, on_down, fails,
                          time.perf_counter() - t0,
                          [f"agent errors (retried): {sum(a.errors for a in agents.values())}"],
                          [as_row(c) for c in ref.values()], scn.description,
                          fabric.describe(), scn.seed)
    finally:
        admin.close()
