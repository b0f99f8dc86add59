"""Link flaps against a real controller, checked plan by plan in the twin.

``run_flaps(scenario, url, admin_token, schedule)`` runs one agent per server (twin NICs
that record every plan they apply), replays a schedule of link events at their times (a
link going down and up every few ms, several links at once, a leaf's uplinks), waits until
every agent is on the final plan, then checks **every plan version any agent applied**:

* each planned QP is on a working path of that version's link state — its applied source
  port, hashed through every switch's ECMP model, lands exactly on its planned route, and
  no route crosses a down link;
* each reported QP missing from a plan belongs to a job the plan's summary lists under
  ``no_path`` (no working path exists for it);

and counts what the controller did with the flood: link changes sent, plan requests,
plans computed (bounded by the planner's debounce), and the time from the last event until
every agent applied the final plan.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import asdict, dataclass, field

import httpx
import numpy as np

from icefabric.agent.actuators.twin import TwinNicActuator
from icefabric.agent.client import ControllerClient
from icefabric.agent.runner import Agent, AgentOptions, Backoff, running
from icefabric.control.hashing import ecmp_paths, fabric_hash_configs
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import LoadedScenario, load
from icefabric.schemas_service import HostPlan, QpPlan
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing, RoutingError
from icefabric.twin.run import (
    TwinError,
    host_reports,
    register_jobs,
    settled_plan,
    upload_fabric,
)


@dataclass(frozen=True)
class LinkChange:
    """At ``t_s`` seconds after the start, the cables ``links`` go down (or up)."""

    t_s: float
    links: tuple[tuple[str, str], ...]
    up: bool


def flapping(a: str, b: str, *, start_s: float, period_s: float, count: int) -> list[LinkChange]:
    """One cable going down and up ``count`` times, a change every ``period_s``; it ends up."""
    return [LinkChange(start_s + i * period_s, ((a, b),), up=bool(i % 2))
            for i in range(2 * count)]


@dataclass
class FlapResult:
    scenario: str
    policy: str
    agents: int
    changes_sent: int
    flap_s: float  # first to last change
    plan_requests: int
    plans: int  # computed during the run (plans + re-plans)
    debounce_s: float
    converge_s: float  # last change -> every agent on the final plan
    final_version: int
    versions_checked: int
    qps_checked: int
    qps_off_path: int  # planned QPs whose hashed path is not their route or crosses a down link
    qps_unplanned_unreported: int  # reported QPs missing from a plan with no "no path" entry
    no_path: dict[int, list[dict]] = field(default_factory=dict)  # version -> summary entries
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class _Recording(TwinNicActuator):
    def __init__(self):
        super().__init__()
        self.history: list[HostPlan] = []

    def _apply(self, plan, changed):
        self.history.append(plan)
        return super()._apply(plan, changed)


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def _plans_done(admin: httpx.Client) -> tuple[float, float]:
    m = admin.get("/metrics").text
    return (_metric(m, "ice_plans_total") + _metric(m, "ice_replans_total"),
            _metric(m, "ice_plan_requests_total"))


@dataclass(frozen=True)
class FlapOptions:
    """How :func:`run_flaps` plays a schedule.

    Attributes
    ----------
    size_bytes : int — message size of the scenario's jobs.
    debounce_s : float — the controller's ``ICE_PLAN_DEBOUNCE_S`` (reported, not set).
    poll_wait_s : float — the agents' long-poll wait.
    timeout_s : float — how long the agents may take to reach a plan.
    """

    size_bytes: int = 16 << 20
    debounce_s: float = 0.0
    poll_wait_s: float = 1.0
    timeout_s: float = 60.0


def run_flaps(scenario: str | LoadedScenario, controller_url: str, admin_token: str,
              schedule: list[LinkChange], options: FlapOptions | None = None) -> FlapResult:
    """Replay ``schedule`` against the controller and check every applied plan (see the
    module doc)."""
    o = options or FlapOptions()
    debounce_s, poll_wait_s, timeout_s = o.debounce_s, o.poll_wait_s, o.timeout_s
    ls = load(scenario) if not isinstance(scenario, LoadedScenario) else scenario
    fabric = build_fabric(ls)
    sw = scenario_workload(ls, fabric, o.size_bytes)
    reports = host_reports(fabric, sw.jobs, sw.workload)
    admin = httpx.Client(base_url=controller_url, trust_env=False, timeout=30.0,
                         headers={"Authorization": f"Bearer {admin_token}"})
    try:
        policy = admin.get("/healthz").json()["policy"]
        upload_fabric(admin, fabric, ls.scenario.seed)
        register_jobs(admin, reports)
        agents = {s.name: Agent(s.name, ControllerClient(controller_url), _Recording(),
                                enrol_token=admin_token,
                                collector=lambda h=s.name: reports.get(h, []),
                                options=AgentOptions(poll_wait_s=poll_wait_s,
                                                     backoff=Backoff(0.02, 0.5, seed=i)))
                  for i, s in enumerate(fabric.servers)}
        with running(agents.values(), join_timeout_s=poll_wait_s + 15):
            n_jobs = len(ls.scenario.jobs)
            v0 = _converged(admin, agents, timeout_s, n_jobs, set())
            plans0, req0 = _plans_done(admin)
            _replay(admin, schedule)
            t_last = time.monotonic()
            final = _converged(admin, agents, timeout_s, n_jobs, final_down(schedule))
            converge_s = time.monotonic() - t_last
            plans1, req1 = _plans_done(admin)
            res = FlapResult(ls.scenario.name, policy, len(agents), len(schedule),
                             schedule[-1].t_s - schedule[0].t_s if schedule else 0.0,
                             int(req1 - req0), int(plans1 - plans0), debounce_s,
                             round(converge_s, 3), final, 0, 0, 0, 0)
            _check_applied(fabric, reports, agents, admin, res, since=v0)
            res.errors = [a.last_error for a in agents.values() if a.last_error]
            return res
    finally:
        admin.close()


def _replay(admin: httpx.Client, schedule: list[LinkChange]) -> None:
    """Send each change as link events at its time (as soon as possible when behind)."""
    t0 = time.monotonic()
    for ch in sorted(schedule, key=lambda c: c.t_s):
        time.sleep(max(0.0, t0 + ch.t_s - time.monotonic()))
        kind = "link_up" if ch.up else "link_down"
        r = admin.post("/v1/events", json={"events": [
            {"kind": kind, "link": {"a": a, "b": b}} for a, b in ch.links]})
        if r.status_code != 202:
            raise TwinError(f"event refused: {r.status_code} {r.text[:300]}")


def final_down(schedule: list[LinkChange]) -> set[tuple[str, str]]:
    """The cables down once ``schedule`` has played (none are down before it)."""
    down: set[tuple[str, str]] = set()
    for ch in sorted(schedule, key=lambda c: c.t_s):
        for a, b in ch.links:
            (down.discard if ch.up else down.add)(tuple(sorted((a, b))))
    return down


def _converged(admin: httpx.Client, agents: dict[str, Agent], timeout_s: float, jobs: int,
               down: set[tuple[str, str]]) -> int:
    """Wait until the current plan covers every job (planned or "no path") under the link
    state ``down`` and every agent applied it; returns its version."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cur = settled_plan(admin, agents)
        if cur is not None and len(cur["jobs"]) + len(cur["no_path"]) == jobs and \
                {tuple(sorted((x["a"], x["b"]))) for x in cur["down_links"]} == down:
            return cur["version"]
        time.sleep(0.01)
    raise TwinError(f"agents did not converge within {timeout_s:.0f} s")


def _check_applied(fabric: Fabric, reports: dict, agents: dict[str, Agent],
                   admin: httpx.Client, res: FlapResult, since: int) -> None:
    """Fill the ``versions_checked``/``qps_*`` counts of ``res`` from every plan applied
    from version ``since`` on (the first that covered every job)."""
    nic_of_ip = {int(ip): n for n, ip in enumerate(fabric.node_ip.tolist()) if ip}
    configs = fabric_hash_configs(fabric)
    by_version: dict[int, list[tuple[str, QpPlan]]] = {}
    for host, a in agents.items():
        for plan in a.actuator.history:
            if plan.version < since:
                continue
            by_version.setdefault(plan.version, []).extend((host, q) for q in plan.qps)
            planned = {(q.job, q.src_ip, q.dst_ip, q.ordinal) for q in plan.qps}
            missing = [rep.job for rep in reports.get(host, []) for q in rep.qps
                       if (rep.job, q.src_ip, q.dst_ip, q.ordinal) not in planned]
            if missing:
                entries = admin.get(f"/v1/plans/{plan.version}").json()["no_path"]
                res.no_path[plan.version] = entries
                jobs = {x["job"] for x in entries}
                res.qps_unplanned_unreported += sum(1 for j in missing if j not in jobs)
    for v, qps in sorted(by_version.items()):
        # the link state the plan that made these documents was computed under
        made = admin.get(f"/v1/plans/{v}").json()["down_links"]
        down = sorted({i for x in made for i in fabric.links_between(x["a"], x["b"]).tolist()})
        routing, dead = Routing(fabric, down), set(down)
        res.versions_checked += 1
        res.qps_checked += len(qps)
        res.qps_off_path += sum(1 for _, q in qps
                                if any(l in dead for r in q.routes for l in r))
        hashed = [q for _, q in qps if len(q.routes) == 1 and q.sport is not None]
        if hashed:
            src = np.array([nic_of_ip[int(ipaddress.IPv4Address(q.src_ip))] for q in hashed])
            dst = np.array([nic_of_ip[int(ipaddress.IPv4Address(q.dst_ip))] for q in hashed])
            try:
                paths = ecmp_paths(fabric, routing, configs, src, dst,
                                   np.array([q.sport for q in hashed]))
            except RoutingError:  # a planned QP the switches cannot forward at all
                res.qps_off_path += len(hashed)
                continue
            res.qps_off_path += sum(1 for q, p in zip(hashed, paths) if list(p) != q.routes[0])
