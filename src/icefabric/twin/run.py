"""Digital-twin mode: the simulator plays the fabric and the hosts against a real controller.

``run_twin(scenario, controller_url, admin_token, TwinOptions(...))``:

1. uploads the scenario's fabric (topology + switch hash models) to the controller;
2. starts one :class:`~icefabric.agent.runner.Agent` per server, each with a twin NIC
   actuator, talking HTTP to the controller; each reports its host's communicators (ranks,
   library, collectives, size, and the QPs its NICs created, with 5-tuples and QPNs);
3. waits until every agent applied the plan that covers every job, then assembles the plan
   *from what the agents applied*: every QP's applied source port is hashed through every
   switch's ECMP model under the current link state (what real switches would do), and its
   applied pacing rate paces it;
4. injects link failures as events from the agents whose QPs cross the link, waits for the
   re-plan to be applied, and turns the change into engine re-routes;
5. simulates the applied plan with the scenario's engine and options, and the same policy
   in-process on the same scenario (:mod:`icefabric.pipeline`); the results, and every QP's
   port, backup port and rate, must agree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np

from icefabric.agent.actuators.twin import TwinNicActuator
from icefabric.agent.client import ControllerClient
from icefabric.agent.runner import Agent, AgentOptions, Backoff
from icefabric.ccl.workload import Workload
from icefabric.control.hashing import ecmp_paths, fabric_hash_configs
from icefabric.control.plan import PathPlan
from icefabric.csr import csr_from_lists
from icefabric.errors import IceFabricError
from icefabric.experiment.runner import ExperimentResult, collective_row
from icefabric.pipeline import Plan
from icefabric.pipeline.jobs import JobSpec
from icefabric.pipeline.plans import LinkChange, LinkEvent, ScenarioWorkload
from icefabric.pipeline.recipe import RunSpec
from icefabric.qpid import QpId
from icefabric.scenario.build import build_fabric
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
from icefabric.units import ipv4_str
from icefabric.wire import paths_from_host_plans, qp_hosts, qp_ids

#: called with the agents and their threads once the first full plan is applied
OnReady = Callable[[dict[str, Agent], list[threading.Thread]], None]


class TwinError(IceFabricError, RuntimeError):
    """Base of the twin's errors: the controller or its agents did not do their part."""


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
    #: QPs whose applied port, backup port or pacing rate differ from the in-process plan's
    qp_mismatches: int = 0
    #: QPs the applied plan paces (finite rate)
    paced_qps: int = 0

    def to_experiment(self) -> ExperimentResult:
        """An :class:`ExperimentResult` with the twin's rows (policy ``<name> (twin)``) next
        to the in-process ones, for the simulate tables."""
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


def job_hosts(reports: dict[str, list[CommReport]]) -> dict[str, list[str]]:
    """The hosts each job of ``reports`` runs on (what its scheduler registers)."""
    out: dict[str, set[str]] = {}
    for reps in reports.values():
        for rep in reps:
            out.setdefault(rep.job, set()).update(r.host for r in rep.ranks)
    return {job: sorted(hosts) for job, hosts in out.items()}


def register_jobs(admin: httpx.Client, reports: dict[str, list[CommReport]]) -> None:
    """Create every job of ``reports`` on its hosts, as a job scheduler does before the
    job starts (only those hosts may then report it)."""
    for job, hosts in job_hosts(reports).items():
        r = admin.put(f"/v1/jobs/{job}", json={"hosts": hosts})
        if r.status_code not in (200, 201):
            raise TwinError(f"creating job {job} failed: {r.status_code} {r.text[:300]}")


def host_reports(fabric: Fabric, jobs: list[JobSpec], wl: Workload
                 ) -> dict[str, list[CommReport]]:
    """What each host's collector would report: one CommReport per job it takes part in
    (``jobs`` in launch order, ``wl`` their workload)."""
    qps_by: dict[tuple[str, str], list[QpEntry]] = {}
    for i, host, lq, rq in zip(qp_ids(wl), qp_hosts(fabric, wl), wl.qp_lqpn.tolist(),
                               wl.qp_rqpn.tolist(), strict=True):
        qps_by.setdefault((i.job, host), []).append(
            QpEntry(src_ip=i.src, dst_ip=i.dst, lqpn=lq, rqpn=rq, ordinal=i.ordinal))
    out: dict[str, list[CommReport]] = {}
    for j, spec in enumerate(jobs):
        comm = spec.comm
        ranks = [RankEntry(rank=i, host=fabric.servers[int(fabric.node_server[a])].name,
                           device=int(fabric.node_index[a]))
                 for i, a in enumerate(comm.ranks.tolist())]
        for host in dict.fromkeys(r.host for r in ranks):
            out.setdefault(host, []).append(CommReport(
                job=comm.job, job_order=j, library=comm.library,
                collectives=[CollectiveEntry(kind=k, algorithm=a) for k, a in spec.collectives],
                size_bytes=spec.size_bytes, channels=comm.n_channels,
                qps_per_connection=comm.qps_per_connection,
                step_overhead_ns=comm.step_overhead_ns, ranks=ranks,
                qps=qps_by.get((comm.job, host), [])))
    return out


@dataclass(frozen=True)
class QpNames:
    """Each QP of a workload by its sending host and its QpId, in QP order: a twin run's
    workload is fixed, so its QPs are named once and every wait and applied plan reads
    them."""

    hosts: list[str]
    ids: list[QpId]

    @classmethod
    def of(cls, fabric: Fabric, wl: Workload) -> QpNames:
        return cls(qp_hosts(fabric, wl), qp_ids(wl))


def applied_plan(fabric: Fabric, wl: Workload, actuators: dict[str, TwinNicActuator],
                 down_ids: list[int], policy: str, named: QpNames | None = None
                 ) -> tuple[PathPlan, int]:
    """The PathPlan the twin's data plane realizes from the agents' applied settings.

    A single-route QP with a source port travels where the switches' hash models send that
    port under the current link state; multi-route (spraying) QPs use their planned routes.
    Returns the plan and the number of QPs whose realized path differs from the planned one.
    ``named``: the QPs of ``wl`` by host and QpId, if the caller has them.
    """
    named = QpNames.of(fabric, wl) if named is None else named
    applied = {i: actuators[h].applied[i] for h, i in zip(named.hosts, named.ids, strict=True)
               if i in actuators[h].applied}
    try:
        pp = paths_from_host_plans(wl, applied, policy=policy, ids=named.ids)
    except KeyError as e:
        raise TwinError(e.args[0]) from None
    ptr = pp.qp_route_ptr()
    hashed = np.flatnonzero((np.diff(ptr) == 1) & (pp.sport >= 0))
    routes = [pp.route(r) for r in range(len(pp.route_qp))]
    mismatches = 0
    if len(hashed):
        real = ecmp_paths(fabric, Routing(fabric, down_ids), fabric_hash_configs(fabric),
                          wl.qp_src_nic[hashed], wl.qp_dst_nic[hashed], pp.sport[hashed])
        for q, path in zip(hashed.tolist(), real, strict=True):
            r = int(ptr[q])
            mismatches += not np.array_equal(routes[r], path)
            routes[r] = np.asarray(path, dtype=np.int64)
    indptr, links = csr_from_lists(routes)
    return PathPlan(pp.sport, pp.route_qp, pp.route_weight, indptr, links, pp.rate_bps,
                    pp.backup_sport, policy), mismatches


def qp_differences(a: PathPlan, b: PathPlan) -> int:
    """QPs whose source port, backup port or pacing rate differ between two plans."""
    return int(np.count_nonzero((a.sport != b.sport) | (a.backup_sport != b.backup_sport)
                                | ~((a.rate_bps == b.rate_bps)
                                    | (np.isinf(a.rate_bps) & np.isinf(b.rate_bps)))))


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise TwinError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@dataclass
class _Hosts:
    """The twin's hosts: an agent with a twin NIC actuator per server, running in threads."""

    agents: dict[str, Agent]
    actuators: dict[str, TwinNicActuator]
    threads: list[threading.Thread]
    stop: threading.Event

    @classmethod
    def start(cls, fabric: Fabric, url: str, enrol_token: str, reports, poll_wait_s: float
              ) -> _Hosts:
        agents, actuators = {}, {}
        for i, s in enumerate(fabric.servers):
            act = TwinNicActuator()
            nics = [NicInfo(name=fabric.node_names[n].split("/")[-1],
                            ip=ipv4_str(fabric.node_ip[n]), speed_bps=s.profile.nic_bps)
                    for n in s.nics]
            agents[s.name] = Agent(s.name, ControllerClient(url, timeout_s=10.0), act,
                                   enrol_token=enrol_token,
                                   collector=(lambda h=s.name: reports.get(h, [])),
                                   options=AgentOptions(nics=nics, poll_wait_s=poll_wait_s,
                                                        backoff=Backoff(0.05, 1.0, seed=i)))
            actuators[s.name] = act
        stop = threading.Event()
        threads = [threading.Thread(target=a.run, args=(stop,), name=f"agent-{h}", daemon=True)
                   for h, a in agents.items()]
        for t in threads:
            t.start()
        return cls(agents, actuators, threads, stop)

    def close(self, poll_wait_s: float) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=poll_wait_s + 15)
        for a in self.agents.values():
            a.client.close()

    def report_link(self, a: str, b: str, ids: np.ndarray, up: bool, owner: str | None
                    ) -> tuple[int, int]:
        """The agents whose applied routes cross the link notice the change (QPs on a
        failed link move to their backup ports at once); the agent of ``owner``, the host
        the link belongs to (None for a fabric link), reports it to the controller.
        Returns (agents that noticed, QPs moved to backup ports)."""
        idset = set(ids.tolist())
        seen_by = [h for h, act in self.actuators.items()
                   if any(l in idset for q in act.applied.values() for r in q.routes for l in r)]
        if owner is not None and owner not in seen_by:
            seen_by.append(owner)
        switched = 0
        for h in seen_by:
            ag = self.agents[h]
            if up:
                ag.observe_links_up([(a, b)])
            else:
                switched += ag.observe_links_down([(a, b)], idset)
            ag.flush_events()
        return len(seen_by), switched


def settled_plan(admin: httpx.Client, agents: dict[str, Agent]) -> dict | None:
    """The current plan's summary once every agent holds its host's current document (a
    host's document has its own version: the plan that last changed it), else None. The
    summary is read before and after the agents' view, so a plan published meanwhile is
    not taken for settled."""
    try:
        before = admin.get("/v1/plans/current")
        views = admin.get("/v1/agents")
        after = admin.get("/v1/plans/current")
    except httpx.HTTPError:
        return None
    if before.status_code != 200 or views.status_code != 200 or after.status_code != 200:
        return None
    cur = after.json()
    if before.json()["version"] != cur["version"]:
        return None
    held = {v["host"]: v["plan_version"] for v in views.json()}
    return cur if all(a.version == held.get(h, 0) for h, a in agents.items()) else None


@dataclass
class _Session:
    """One twin run against a controller: its admin client, the scenario's hosts (agents)
    and what they applied as links fail and come back."""

    admin: httpx.Client
    hosts: _Hosts
    spec: RunSpec
    wl: Workload
    policy: str
    timeout_s: float
    versions: list[int] = field(default_factory=list)
    path_mismatches: int = 0
    failures: list[dict] = field(default_factory=list)  # each link change, as reported
    down_ids: set[int] = field(default_factory=set)  # the links down after the changes
    named: QpNames = field(init=False)
    jobs: list[str] = field(init=False)  # every job of the scenario, sorted

    def __post_init__(self) -> None:
        self.named = QpNames.of(self.fabric, self.wl)
        self.jobs = sorted(j.name for j in self.spec.scenario.scenario.jobs)

    @property
    def fabric(self) -> Fabric:
        return self.spec.fabric

    def wait_plan(self, down_ids: set[int]) -> None:
        """Wait until every agent applied a plan of every job with exactly ``down`` down."""
        state: dict = {}
        want = list(zip(self.named.hosts, self.named.ids, self.wl.qp_lqpn.tolist(),
                        self.wl.qp_rqpn.tolist(), strict=True))

        def ok() -> bool:
            c = settled_plan(self.admin, self.hosts.agents)
            if c is None or sorted(c["jobs"]) != self.jobs:
                return False
            named = {i for x in c["down_links"]
                     for i in self.fabric.links_between(x["a"], x["b"], x["cable"]).tolist()}
            if named != down_ids:  # compared by link ids: cables named either way
                return False
            state["v"] = c["version"]
            # and names every QP by its reported numbers (a job is planned from its first
            # report, before the other hosts' QP numbers are in)
            acts = self.hosts.actuators
            return all((p := acts[h].applied.get(i)) is not None and
                       (p.lqpn, p.rqpn) == (lq, rq) for h, i, lq, rq in want)

        _wait(ok, self.timeout_s, f"every agent to apply a plan with links {sorted(down_ids)} "
              "down")
        self.versions.append(state["v"])

    def applied(self, down_ids) -> PathPlan:
        paths, m = applied_plan(self.fabric, self.wl, self.hosts.actuators, sorted(down_ids),
                                self.policy, self.named)
        self.path_mismatches += m
        return paths

    def _owner(self, a: str, b: str) -> str | None:
        """The host a link belongs to (one of its ends is a node of that server)."""
        f = self.fabric
        for n in (a, b):
            s = int(f.node_server[f.node_id[n]])
            if s >= 0:
                return f.servers[s].name
        return None

    def _operator_reports(self, ch: LinkChange) -> None:
        kind = "link_up" if ch.up else "link_down"
        r = self.admin.post("/v1/events", json={"events": [
            {"kind": kind, "link": {"a": ch.a, "b": ch.b, "cable": ch.cable},
             "message": "twin operator"}]})
        if r.status_code != 202:
            raise TwinError(f"the controller refused the {kind} of {ch.a}-{ch.b}: "
                            f"HTTP {r.status_code} {r.text[:200]}")

    def play(self, changes: list[LinkChange], on_ready: OnReady | None = None) -> Plan:
        """The plan the agents applied first, and after each of ``changes`` (its rates are
        theirs: not re-paced); ``on_ready`` as in :class:`TwinOptions`."""
        self.wait_plan(set())
        if on_ready is not None:
            on_ready(self.hosts.agents, self.hosts.threads)
            self.wait_plan(set())
        paths0 = self.applied(())
        events = self.replay(changes)
        return Plan(self.fabric, self.wl, self.spec.policy, paths0, self.spec.seed,
                    tuple(events))

    def replay(self, changes: list[LinkChange]) -> list[LinkEvent]:
        """Inject the link changes through the agents that see them; the applied plan after
        each. Returns the events; their reports go to ``failures``, the links down at the
        end to ``down_ids``."""
        events = []
        for ch in changes:
            ids = set(ch.links.tolist())
            self.down_ids = self.down_ids - ids if ch.up else self.down_ids | ids
            owner = self._owner(ch.a, ch.b)
            seen, switched = self.hosts.report_link(ch.a, ch.b, ch.links, ch.up, owner)
            if owner is None:  # a fabric link: the operator (switch telemetry) reports it
                self._operator_reports(ch)
            self.wait_plan(self.down_ids)
            events.append(LinkEvent(ch.t_ns, ch.links, ch.up, self.applied(self.down_ids)))
            self.failures.append({
                "t_ns": ch.t_ns, "link": [ch.a, ch.b], "cable": ch.cable, "up": ch.up,
                "seen_by": seen, "reported_by": owner or "operator",
                "backup_ports_used": switched, "plan_version": self.versions[-1]})
        return events


def upload_fabric(admin: httpx.Client, fabric: Fabric, seed: int) -> None:
    r = admin.put("/v1/fabric", content=FabricUpload(
        topology=fabric_to_dict(fabric), plan_seed=seed).model_dump_json(),
        headers={"Content-Type": "application/json"})
    if r.status_code != 200:
        raise TwinError(f"fabric upload failed: {r.status_code} {r.text[:300]}")


@dataclass(frozen=True)
class TwinOptions:
    """How :func:`run_twin` plays a scenario.

    Attributes
    ----------
    enrol_token : str, optional — agents enrol with it (default: the admin token).
    size_bytes : int, optional — message size (default: the scenario's largest).
    failures : list of FailureSpec, optional — replace the scenario's failures.
    policy : str, optional — must equal the controller's; read from ``/healthz`` if None.
    engine : str, optional — ``flow`` or ``fluid`` (default: the scenario's).
    poll_wait_s : float — the agents' long-poll wait.
    timeout_s : float — how long every plan may take to be applied.
    compare : bool — also run the policy in-process and compare with it.
    on_ready : callable(agents, threads), optional — called once the first full plan is
        applied (tests use it to restart the controller mid-run).
    """

    enrol_token: str | None = None
    size_bytes: int | None = None
    failures: Sequence[FailureSpec] | None = None
    policy: str | None = None
    engine: str | None = None
    poll_wait_s: float = 2.0
    timeout_s: float = 120.0
    compare: bool = True
    on_ready: OnReady | None = None


def run_twin(scenario: str | Path | LoadedScenario, controller_url: str, admin_token: str,
             opts: TwinOptions | None = None) -> TwinResult:
    """Play ``scenario`` against the controller at ``controller_url`` (see module doc).

    Parameters
    ----------
    scenario : name, path or LoadedScenario.
    controller_url : str — ``http://127.0.0.1:PORT``.
    admin_token : str — to load the fabric and read plan summaries.
    opts : TwinOptions, optional — size, failures, engine, waits (default: the scenario's).
    """
    opts = opts or TwinOptions()
    t0 = time.perf_counter()
    ls = load(scenario) if not isinstance(scenario, LoadedScenario) else scenario
    if opts.failures is not None:
        ls = ls.updated(failures=list(opts.failures))
    size = int(opts.size_bytes or ls.scenario.size_list()[-1])
    with httpx.Client(base_url=controller_url, trust_env=False, timeout=30.0,
                      headers={"Authorization": f"Bearer {admin_token}"}) as admin:
        ctl_policy = admin.get("/healthz").json()["policy"]
        if opts.policy is not None and opts.policy != ctl_policy:
            raise TwinError(f"controller plans with {ctl_policy!r}, not {opts.policy!r}")
        spec = _real_fabric_recipe(ls, ctl_policy, opts.engine)
        sw = spec.workload(size)
        changes = list(spec.link_changes)  # errors in the scenario's failures: now
        hosts = _start_hosts(admin, controller_url, opts.enrol_token or admin_token, spec,
                             sw, opts.poll_wait_s)
        try:
            run = _Session(admin, hosts, spec, sw.workload, ctl_policy, opts.timeout_s)
            twin = run.play(changes, opts.on_ready)
        finally:
            hosts.close(opts.poll_wait_s)
    out = _result(run, twin, size)
    ref = spec.plan(sw.workload) if opts.compare else None
    _simulate_and_compare(out, twin, ref, spec)
    out.wall_s = time.perf_counter() - t0
    return out


def _real_fabric_recipe(ls: LoadedScenario, policy: str, engine: str | None) -> RunSpec:
    """The run recipe of the controller's ``policy`` on the scenario's fabric (the twin's
    hosts are that fabric's: a policy planned on another one cannot be played)."""
    fabric = build_fabric(ls)
    spec = RunSpec.of(ls, fabric, policy, engine=engine)
    if spec.run_fabric is not fabric:
        raise TwinError(f"policy {policy!r} does not run on the real fabric")
    return spec


def _start_hosts(admin: httpx.Client, url: str, enrol_token: str, spec: RunSpec,
                 sw: ScenarioWorkload, poll_wait_s: float) -> _Hosts:
    """Give the controller the fabric and the jobs, then start the hosts' agents, each
    with what its collector reports."""
    upload_fabric(admin, spec.fabric, spec.seed)
    reports = host_reports(spec.fabric, sw.jobs, sw.workload)
    register_jobs(admin, reports)
    return _Hosts.start(spec.fabric, url, enrol_token, reports, poll_wait_s)


def _result(run: _Session, twin: Plan, size: int) -> TwinResult:
    """The twin run's result before it is simulated (:func:`_simulate_and_compare`)."""
    spec, scn = run.spec, run.spec.scenario.scenario
    return TwinResult(
        scenario=scn.name, policy=run.policy, engine=spec.options.engine,
        size_bytes=size, agents=len(run.hosts.agents), qps=run.wl.n_qps,
        plan_versions=run.versions, rows=[], agree=False, max_rel_diff=0.0,
        path_mismatches=run.path_mismatches,
        qps_on_down_links=qps_on_links(twin.final, run.down_ids), failures=run.failures,
        wall_s=0.0,
        notes=[f"agent errors (retried): {sum(a.errors for a in run.hosts.agents.values())}"],
        description=scn.description, fabric=spec.fabric.describe(), seed=scn.seed,
        paced_qps=int(np.count_nonzero(np.isfinite(twin.paths.rate_bps))))


def qps_on_links(paths: PathPlan, links) -> int:
    """QPs with a route through any of ``links``."""
    hit = np.isin(paths.route_links, list(links))
    route = np.repeat(np.arange(len(paths.route_qp)), np.diff(paths.route_indptr))
    return len(np.unique(paths.route_qp[route[hit]]))


def _simulate_and_compare(out: TwinResult, twin: Plan, ref: Plan | None, spec: RunSpec
                          ) -> None:
    """Run the twin's applied plan; with ``ref``, run the in-process plan too and compare
    every collective's time and every QP's ports and rate (initially and at the end)."""
    res = spec.simulate(twin)
    out.engine = res.engine
    out.rows = [collective_row(c) for c in res.collectives]
    if ref is None:
        return
    ref_res = spec.simulate(ref)
    out.reference_rows = [collective_row(c) for c in ref_res.collectives]
    out.qp_mismatches = (qp_differences(twin.paths, ref.paths)
                         + qp_differences(twin.final, ref.final))
    for row, c, o in zip(out.rows, res.collectives, ref_res.collectives, strict=True):
        rel = abs(c.time_ns - o.time_ns) / max(o.time_ns, 1)
        out.max_rel_diff = max(out.max_rel_diff, rel)
        row["inprocess_busbw_GBps"] = round(o.busbw_GBps, 3)
        row["match"] = rel <= 1e-9
    out.agree = out.max_rel_diff <= 1e-9 and out.qp_mismatches == 0
