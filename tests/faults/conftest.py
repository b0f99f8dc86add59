"""Fault-injection suite: real controller processes, real agents (threads, HTTP on
127.0.0.1), faults injected at known moments. Every test ends with :func:`check_plans`:
no plan version lost or served twice with different content, every agent on its host's
latest document.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, select

from icefabric.agent.actuators.twin import TwinNicActuator
from icefabric.agent.client import ControllerClient
from icefabric.agent.runner import Agent, AgentOptions, Backoff, running
from icefabric.controller.store import tables as t
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.schemas_service import FabricUpload, HostPlan, QpPlan
from icefabric.topology.serialize import fabric_to_dict
from icefabric.twin.run import host_reports, register_jobs
from icefabric.twin.serve import SubprocessController

HERE = Path(__file__).parent
ADMIN = "fault-suite-admin-token"
FLEET = HERE / "fleet-128.yaml"

class RecordingActuator(TwinNicActuator):
    """Twin NICs that remember every plan version applied (and its content)."""

    def __init__(self):
        super().__init__()
        self.history: list[tuple[int, HostPlan]] = []

    def _apply(self, plan, changed):
        self.history.append((plan.version, plan))
        return super()._apply(plan, changed)


@functools.cache
def scenario_reports(scenario, size_bytes: int = 16 << 20):
    """Scenario, fabric and each host's communicator reports (built once per session)."""
    ls = load(scenario)
    fabric = build_fabric(ls)
    sw = scenario_workload(ls, fabric, size_bytes)
    return ls, fabric, host_reports(fabric, sw.jobs, sw.workload)


class Fleet:
    """One agent thread per host of a scenario, against the controller at ``url``."""

    def __init__(self, scenario, url: str, *, poll_wait_s: float = 2.0,
                 backoff_max_s: float = 1.0):
        self.ls, self.fabric, self.reports = scenario_reports(scenario)
        self.n_jobs = len(self.ls.scenario.jobs)
        self.url = url
        self.agents: dict[str, Agent] = {}
        for i, s in enumerate(self.fabric.servers):
            self.agents[s.name] = Agent(
                s.name, ControllerClient(url, timeout_s=5.0), RecordingActuator(),
                enrol_token=ADMIN, collector=(lambda h=s.name: self.reports.get(h, [])),
                options=AgentOptions(poll_wait_s=poll_wait_s,
                                     backoff=Backoff(0.05, backoff_max_s, seed=i)))
        self._running = running(self.agents.values())

    def upload_fabric(self) -> None:
        """The fabric, and the scenario's jobs created on their hosts."""
        r = admin(self.url).put("/v1/fabric", content=FabricUpload(
            topology=fabric_to_dict(self.fabric), plan_seed=self.ls.scenario.seed)
            .model_dump_json(), headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        register_jobs(admin(self.url), self.reports)

    def start(self) -> Fleet:
        self._running.__enter__()
        return self

    def stop(self) -> None:
        self._running.__exit__(None, None, None)

    def versions(self) -> dict[str, int]:
        return {h: a.version for h, a in self.agents.items()}

    def errors(self) -> int:
        return sum(a.errors for a in self.agents.values())

    def wait_converged(self, timeout_s: float = 60.0, at_least: int = 1) -> int:
        """Wait until every agent sent its reports, the current plan covers every job of
        the scenario, every agent applied and acknowledged its host's current document, and
        that holds for half a second (a report sent last may still be planning); returns
        the plan's version."""
        deadline = time.monotonic() + timeout_s
        last, seen = None, None
        while time.monotonic() < deadline:
            if not all(set(a.reported) == {r.job for r in self.reports.get(h, [])}
                       for h, a in self.agents.items()):
                last = "reports still being sent"
                time.sleep(0.1)
                continue
            try:
                cur = admin(self.url).get("/v1/plans/current")
                agents = admin(self.url).get("/v1/agents").json()
            except httpx.HTTPError as e:
                last = repr(e)
            else:
                if cur.status_code == 200:
                    c = cur.json()
                    v = c["version"]
                    own = {a["host"]: a["plan_version"] for a in agents
                           if a["applied_version"] == a["plan_version"]}
                    if v >= at_least and len(c["jobs"]) + len(c["no_path"]) == self.n_jobs \
                            and all(own.get(h) == x for h, x in self.versions().items()):
                        if seen is not None and seen[0] == v and \
                                time.monotonic() - seen[1] >= 0.5:
                            return v
                        seen = seen if seen is not None and seen[0] == v else \
                            (v, time.monotonic())
                    else:
                        seen = None
                    last = (v, sorted(set(self.versions().values())))
            time.sleep(0.1)
        raise AssertionError(f"agents did not converge in {timeout_s} s: {last}")


_ADMINS: dict[str, httpx.Client] = {}


def admin(url: str) -> httpx.Client:
    c = _ADMINS.get(url)
    if c is None:
        c = _ADMINS[url] = httpx.Client(base_url=url, trust_env=False, timeout=10.0,
                                        headers={"Authorization": f"Bearer {ADMIN}"})
    return c


def _digest(qps: list[QpPlan]) -> str:
    doc = json.dumps([q.model_dump(mode="json") for q in qps], sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()


def check_plans(fleet: Fleet, database_url: str) -> dict:
    """The invariants every fault test ends with (returns a few counts for the test):

    * plan versions in the database are 1..N without gaps, and N is the current one;
    * every version an agent ever applied exists there, with exactly the QP plans the
      agent applied (so no version was served twice with different content, across
      crashes and restarts);
    * each agent applied strictly increasing versions, and ends on its host's latest
      document (the latest version that changed it) with what the controller serves.
    """
    # What the agents applied, before reading the database: anything applied was stored
    # before it was served, so the read below sees it.
    histories = {h: list(a.actuator.history) for h, a in fleet.agents.items()}
    eng = create_engine(database_url)
    try:
        with eng.connect() as c:
            summaries = {v: json.loads(doc) for v, doc in c.execute(
                select(t.PlanRow.version, t.PlanRow.summary))}
            versions = sorted(summaries)
            rows: dict[str, list[tuple[int, str]]] = {}
            for v, h, doc in c.execute(select(t.HostPlanRow.version, t.HostPlanRow.host,
                                              t.HostPlanRow.document)
                                       .order_by(t.HostPlanRow.version)):
                qps = [QpPlan.model_validate(x) for x in json.loads(doc)]
                rows.setdefault(h, []).append((v, _digest(qps)))
    finally:
        eng.dispose()
    assert versions == list(range(1, len(versions) + 1)), f"gaps in plan versions {versions}"
    latest = versions[-1]
    applied = 0
    for host, agent in fleet.agents.items():
        seen = [v for v, _ in histories[host]]
        assert seen == sorted(set(seen)), f"{host} applied versions {seen}"
        for v, plan in histories[host]:
            stored = [d for rv, d in rows.get(host, []) if rv <= v]
            want = stored[-1] if stored else _digest([])
            assert _digest(plan.qps) == want, f"{host} v{v}: applied QPs != stored"
            s = summaries[v]
            head = (plan.created_at, plan.fabric_version, plan.policy)
            assert head == (s["created_at"], s["fabric_version"], s["policy"]), \
                f"{host} v{v}: applied header != stored"
            applied += 1
        # a host's document has its own version: the latest plan that changed it
        own = max((rv for rv, _ in rows.get(host, []) if rv <= latest), default=0)
        assert agent.version == own, f"{host} on v{agent.version}, its latest is v{own}"
        served = HostPlan.model_validate_json(admin(fleet.url).get(
            f"/v1/hosts/{host}/plan").content)
        assert served == agent.plan, f"{host}: holds something else than the controller serves"
    return {"versions": latest, "applied": applied}


@pytest.fixture
def controller_env(tmp_path):
    """Environment of a controller subprocess on a fresh SQLite file."""
    return {"ICE_DATABASE_URL": f"sqlite:///{tmp_path}/ice.db", "ICE_ADMIN_TOKEN": ADMIN,
            "ICE_POLICY": "ice", "ICE_PLAN_DEBOUNCE_S": "0.05",
            "ICE_FAULT_ARM": str(tmp_path / "arm"), "ICE_FAULT_MARKER": str(tmp_path / "at"),
            "PYTHONPATH": ":".join(p for p in sys.path if p)}


def faulty(env: dict, point: str, tmp_path: Path, port: int | None = None
           ) -> SubprocessController:
    """A controller process with fault point ``point`` (see faulty_controller.py)."""
    return SubprocessController({**env, "ICE_FAULT_AT": point}, port=port, command=[
        sys.executable, str(HERE / "faulty_controller.py")],
        log_path=str(tmp_path / "controller.log"))


def wait_file(path: Path, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} did not appear in {timeout_s} s")
