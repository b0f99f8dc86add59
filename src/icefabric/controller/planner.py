"""The controller's planning: agents' communicator reports -> jobs -> workload -> plan ->
per-host plans, through the same spine as the simulator (:mod:`icefabric.pipeline`).

A job is planned from its first report (plan before connect): one host's report names every
rank, its device, the collectives and the size, so the data QPs of its first communicator
get their ports and rates when they connect, not from a live re-port later. Each planned
job's reports become a :class:`~icefabric.pipeline.JobSpec` (ranks on hosts
and devices, library, channels, QPs per connection, collectives and size, the rings its
collector saw, the QP numbers and ports its hosts reported); jobs are built in launch order
and every modelled QP takes the numbers an agent reported for
``(job, src_ip, dst_ip, ordinal)``. The plan carries ICE's per-QP pacing rates, recomputed
at every re-plan.

What the next plan starts from (:func:`compute_plan`, one kind per outcome):

* nothing — the workload is the one the plan in force covers (:meth:`Workload.digest`),
  under the same links: a report that changes nothing the plan depends on plans nothing;
* ``rename`` — the workload changed only in its QP numbers (and the ports hosts reported),
  for a policy whose plan does not depend on them (not ``randomised``): the plan in force
  is published again under the new numbers, without planning;
* ``replan`` — the same workload under other link states: the policy re-plans from the
  plan in force (:meth:`~icefabric.policies.base.Policy.replan`);
* ``extend`` — jobs ended under the same links (every QP is one of the plan in force,
  matched by QpId): the others keep their paths and ports
  (:meth:`~icefabric.policies.base.Policy.extend`); their pacing rates are recomputed, so
  the capacity the ended jobs held goes to the ones that run on;
* ``plan`` — from scratch: a job started, or there is no plan in force (or only one
  restored from the database, whose QpIds are not stored).

A job that starts is planned with the others from scratch, not around them: the plan then
depends only on the jobs, not on the order their reports arrived (agents report
concurrently), so it is the simulator's plan of the same jobs, which the twin checks QP by
QP. A job that ends moves nothing: the plan of the jobs that remain is the plan in force
less its QPs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.control.plan import PathPlan, single_path_plan
from icefabric.pipeline import JobError, build_workload, plan
from icefabric.pipeline.jobs import JobSpec, report_job
from icefabric.pipeline.plans import Kept
from icefabric.policies.base import get_policy
from icefabric.schemas_service import CommReport
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing
from icefabric.units import ipv4_str
from icefabric.wire import QpIds, host_plans, host_record, qp_jobs


class PlanInputError(ValueError):
    """A report that cannot be mapped onto the fabric (unknown host, device, address)."""


_IP_CACHE: dict[int, tuple[Fabric, set[str]]] = {}


def _all_ips(fabric: Fabric) -> set[str]:
    hit = _IP_CACHE.get(id(fabric))
    if hit is None or hit[0] is not fabric:
        hit = (fabric, {ipv4_str(ip) for ip in fabric.node_ip[fabric.node_ip > 0]})
        _IP_CACHE.clear()
        _IP_CACHE[id(fabric)] = hit
    return hit[1]


def host_nic_ips(fabric: Fabric, host: str) -> set[str]:
    s = fabric.server_of_name.get(host)
    if s is None:
        return set()
    return {ipv4_str(fabric.node_ip[n]) for n in fabric.servers[s].nics}


def check_report(fabric: Fabric, host: str, rep: CommReport) -> None:
    """Raise :class:`PlanInputError` unless ``rep`` fits the fabric and the reporting host."""
    hosts = {r.host for r in rep.ranks}
    if host not in hosts:
        raise PlanInputError(f"host {host!r} has no rank in job {rep.job!r}")
    ranks = sorted(r.rank for r in rep.ranks)
    if ranks != list(range(len(ranks))):
        raise PlanInputError("ranks must be numbered 0..n-1, each once")
    for r in rep.ranks:
        s = fabric.server_of_name.get(r.host)
        if s is None:
            raise PlanInputError(f"rank {r.rank}: host {r.host!r} is not in the fabric")
        if r.device >= len(fabric.servers[s].accels):
            raise PlanInputError(f"rank {r.rank}: host {r.host!r} has no device {r.device}")
    mine = host_nic_ips(fabric, host)
    all_ips = _all_ips(fabric)
    seen = set()
    for i, q in enumerate(rep.qps):
        if q.src_ip not in mine:
            raise PlanInputError(f"qps[{i}]: source {q.src_ip} is not a NIC of host {host!r}")
        if q.dst_ip not in all_ips:
            raise PlanInputError(f"qps[{i}]: destination {q.dst_ip} is not a NIC in the fabric")
        # a data QP is named by its ordinal, a receive side (no ordinal) by its number
        key = (q.src_ip, q.dst_ip, q.ordinal) if q.side is None else (q.src_ip, q.lqpn)
        if key in seen:
            what = f"ordinal {q.ordinal}" if q.side is None else f"QPN {q.lqpn}"
            raise PlanInputError(f"qps[{i}]: duplicate QP {q.src_ip}->{q.dst_ip} {what}")
        seen.add(key)


@dataclass
class JobState:
    """All reports of one job, and the hosts whose communicator of it has ended."""

    job: str
    reports: dict[str, CommReport] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)

    @property
    def any(self) -> CommReport:
        return self.reports[min(self.reports)]

    @property
    def hosts_expected(self) -> list[str]:
        return sorted({r.host for r in self.any.ranks})

    @property
    def complete(self) -> bool:
        return set(self.hosts_expected) <= set(self.reports)

    @property
    def ready(self) -> bool:
        """Planned: a report names the communicator (any host's will do: plan before
        connect) and no host has ended it (a job that ends on one host is ending: all its
        ranks share the communicator, so it leaves the plan at the first end)."""
        return bool(self.reports) and not self.ended

    @property
    def failing(self) -> bool:
        """Some host reported CCL errors for the job (its communicator is failing)."""
        return any(r.errors for r in self.reports.values())

    def __reduce__(self):
        # To the planner process each report travels as its JSON: pydantic's pickle of
        # the nested models holds the controller's GIL ~17 times longer (70 ms for the
        # 1,000 reports of the soak, per plan), stalling every request meanwhile.
        return _job_state, (self.job, {h: r.model_dump_json() for h, r in self.reports.items()},
                            self.ended)


def _job_state(job: str, reports: dict[str, str], ended: set[str]) -> JobState:
    return JobState(job, {h: CommReport.model_validate_json(r) for h, r in reports.items()},
                    ended)


@dataclass(frozen=True)
class Previous:
    """The plan in force, as the next one starts from it."""

    paths: PathPlan
    key: str  # digest of the workload it plans (Workload.digest)
    shape_key: str  # the same without QP numbers and reported ports
    ids: QpIds | None  # the QpId of each of its QPs (None: restored from the database)
    same_links: bool  # the link states are those it was planned under (same fabric)


@dataclass
class PlanOutcome:
    """A new plan: its paths, what it covers and the QP plans of every host."""

    kind: str  # "plan" | "replan" | "extend" | "rename" (module docstring)
    paths: PathPlan
    key: str  # digest of the workload (Workload.digest)
    shape_key: str  # the same without QP numbers and reported ports
    ids: QpIds  # the QpId of each QP of ``paths``
    jobs: list[str]
    n_qps: int
    hosts: dict[str, bytes]  # per host: its QP plans as stored (wire.host_record)
    planning_ms: float
    policy: str
    errors: dict[str, str] = field(default_factory=dict)  # jobs left out, and why
    no_path: list[dict] = field(default_factory=list)  # jobs left out for want of a path


def job_specs(fabric: Fabric, jobs: dict[str, JobState]) -> tuple[list[JobSpec], dict[str, str]]:
    """The jobs that are :attr:`JobState.ready`, in launch order; jobs whose reports do
    not fit the fabric are left out (and named with the reason)."""
    ready = sorted((j for j in jobs.values() if j.ready),
                   key=lambda j: (j.any.job_order, j.job))
    specs, errors = [], {}
    for js in ready:
        try:
            specs.append(report_job(fabric, [js.reports[h] for h in sorted(js.reports)]))
        except JobError as e:
            errors[js.job] = e.reason
    return specs, errors


def compute_plan(fabric: Fabric, jobs: dict[str, JobState], *, policy_name: str, seed: int,
                 down_ids: list[int], prev: Previous | None) -> PlanOutcome | None:
    """Build the workload and plan it, from the plan in force ``prev`` where it can (the
    kinds are in the module docstring). None when there is nothing to plan or nothing
    changed."""
    t0 = time.perf_counter()
    specs, errors = job_specs(fabric, jobs)
    no_path: list[dict] = []
    while True:
        try:
            wl = build_workload(fabric, specs)
        except JobError as e:  # leave the job out, plan the others
            errors[e.job] = e.reason
            specs = [s for s in specs if s.name != e.job]
            continue
        cut = no_path_jobs(fabric, wl, down_ids) if down_ids else []
        if not cut:
            break
        # These jobs cannot run until a path comes back: plan the others.
        no_path += cut
        specs = [s for s in specs if s.name not in {x["job"] for x in cut}]
    names = [s.name for s in specs]
    key, shape_key = wl.digest(), wl.digest(numbers=False)
    if (prev is not None and prev.same_links and prev.key == key) or \
            (wl.n_qps == 0 and prev is None):
        return None
    ids = QpIds.of(wl)
    pol = get_policy(policy_name)
    kind, kept = plan_kind(prev, shape_key, ids, pol.randomised)
    if kind == "rename":
        paths = prev.paths
    elif wl.n_qps == 0:  # every job ended or has no path: an empty plan replaces the last
        paths = single_path_plan([], np.zeros(0, dtype=np.int64), policy_name)
    else:
        start = None if kind == "plan" else prev.paths if kept is None else \
            Kept(prev.paths, kept)
        paths = plan(fabric, wl, pol, seed=seed, down_links=down_ids, previous=start).paths
    hosts = {h: host_record(q) for h, q in host_plans(fabric, wl, paths, ids).items()}
    return PlanOutcome(kind, paths, key, shape_key, ids, names, wl.n_qps, hosts,
                       (time.perf_counter() - t0) * 1e3, paths.policy or policy_name, errors,
                       sorted(no_path, key=lambda e: e["job"]))


def plan_kind(prev: Previous | None, shape_key: str, ids: QpIds, randomised: bool
              ) -> tuple[str, np.ndarray | None]:
    """How the workload of QPs ``ids`` and shape ``shape_key`` is planned after ``prev``
    (module docstring), for a policy whose plan depends on QP numbers if ``randomised``;
    for ``extend``, each QP's index in ``prev``, else None."""
    if prev is None or not len(ids):
        return "plan", None
    same_shape = prev.shape_key == shape_key and prev.paths.n_qps == len(ids)
    if not prev.same_links:
        return ("replan" if same_shape else "plan"), None
    if same_shape:  # only QP numbers changed: they matter to a randomised policy's plan
        return ("plan" if randomised else "rename"), None
    if prev.ids is None or len(prev.ids) != prev.paths.n_qps:
        return "plan", None
    kept = ids.positions_in(prev.ids)
    return ("extend", kept) if np.all(kept >= 0) else ("plan", None)


def no_path_jobs(fabric: Fabric, wl: Workload, down_ids: list[int],
                 examples: int = 5) -> list[dict]:
    """The jobs with QPs that no working path joins under ``down_ids`` (a NIC link down,
    or one leaf cut off from the other): ``{job, qps, examples, reason}`` per job."""
    routing = Routing(fabric, down_ids)
    bad = np.flatnonzero(~routing.reachable(wl.qp_src_nic, wl.qp_dst_nic))
    if not len(bad):
        return []
    jobs = qp_jobs(wl)
    out: dict[str, dict] = {}
    names = fabric.node_names
    for q in bad.tolist():
        s, d = int(wl.qp_src_nic[q]), int(wl.qp_dst_nic[q])
        e = out.setdefault(jobs[q], {"job": jobs[q], "qps": 0, "examples": [], "reason": ""})
        e["qps"] += 1
        if len(e["examples"]) < examples:
            e["examples"].append(f"{ipv4_str(wl.qp_src_ip[q])}->{ipv4_str(wl.qp_dst_ip[q])}")
        if not e["reason"]:
            src_down = routing.down[routing.nic_uplink(s)[0]]
            if src_down or routing.down[routing.nic_downlink(d)[0]]:
                e["reason"] = f"NIC link of {names[s] if src_down else names[d]} is down"
            else:
                e["reason"] = (f"no working path from {names[fabric.nic_leaf[s]]} to "
                               f"{names[fabric.nic_leaf[d]]}")
    return sorted(out.values(), key=lambda e: e["job"])


_WORKER_FABRIC: dict[int, Fabric] = {}


class FabricNotCached(LookupError):
    pass


def compute_plan_in_worker(fabric_version: int, fabric: Fabric | None,
                           jobs: dict[str, JobState], prev: Previous | None,
                           **kw) -> PlanOutcome | None:
    """:func:`compute_plan` in a planner process (arguments and result are pickled;
    ``fabric``: sent when the process may not have version ``fabric_version`` cached).

    The fabric travels as the pickled :class:`Fabric` (numpy arrays), not as its topology
    document: at 10,000 servers the document's 40 MB of JSON parse into ~180 MB of Python
    objects, the pickle into ~60 MB (``BENCHMARKS.md``, 10,000 agents)."""
    if fabric is None:
        fabric = _WORKER_FABRIC.get(fabric_version)
        if fabric is None:
            raise FabricNotCached(fabric_version)
    elif fabric_version not in _WORKER_FABRIC:
        _WORKER_FABRIC.clear()
        _WORKER_FABRIC[fabric_version] = fabric
    return compute_plan(fabric, jobs, prev=prev, **kw)
