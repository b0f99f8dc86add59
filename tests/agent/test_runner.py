"""The agent against a real controller on loopback: enrol, report, long-poll, apply; and its
behaviour when the controller is unreachable or forgets it."""

import threading
import time

import pytest

from icefabric.agent.actuators import get_actuator
from icefabric.agent.client import ControllerClient, ControllerUnavailable
from icefabric.agent.runner import Agent, AgentOptions, Backoff
from icefabric.controller.settings import Settings
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.schemas_service import AgentEnrol, FabricUpload, HostPlan
from icefabric.topology.serialize import fabric_to_dict
from icefabric.twin.run import host_reports, job_hosts
from icefabric.twin.serve import ThreadedController, free_port

ADMIN = "agent-test-admin"


@pytest.fixture
def controller(tmp_path):
    s = Settings(database_url=f"sqlite:///{tmp_path}/a.db", admin_token=ADMIN, policy="ecmp",
                 admin_token_file=str(tmp_path / "t"), plan_debounce_s=0.0)
    srv = ThreadedController(s)
    srv.start()
    yield srv
    srv.stop()


def test_backoff_is_capped_and_resets():
    b = Backoff(0.1, 1.0, seed=1)
    waits = [b.next() for _ in range(10)]
    assert all(0.05 <= w <= 1.0 for w in waits) and max(waits) > 0.5
    b.reset()
    assert b.next() <= 0.1


def test_agents_get_plans_and_keep_them_when_controller_is_gone(controller, tmp_path):
    ls = load("hetero-default")
    fabric = build_fabric(ls)
    sw = scenario_workload(ls, fabric, 1 << 20)
    reports = host_reports(fabric, sw.jobs, sw.workload)
    controller.core.set_fabric(FabricUpload(topology=fabric_to_dict(fabric)))
    _create_jobs(controller, reports)
    agents = {h: Agent(h, ControllerClient(controller.url), get_actuator("twin"),
                       enrol_token=ADMIN, collector=lambda h=h: reports[h],
                       options=AgentOptions(poll_wait_s=0.5, state_file=tmp_path / f"{h}.json"))
              for h in reports}
    stop = threading.Event()
    threads = [threading.Thread(target=a.run, args=(stop,)) for a in agents.values()]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                # the plan of every job, everywhere, and no plan pending (a job is planned
                # from its first report: later reports re-plan)
                controller.core.publisher.wait_idle(0) and controller.core.plan_version and
                len(controller.core.plan.summary.jobs) == len(sw.jobs) and
                # every agent applied (and acknowledged) its host's current document
                all(a.version == controller.core.host_version(h) ==
                    getattr(controller.core.fleet.hosts.get(h), "applied_version", None)
                    for h, a in agents.items())):
            time.sleep(0.05)
        v = controller.core.host_version("h100-0")
        assert v >= 1 and all(a.version == controller.core.host_version(h) > 0
                              for h, a in agents.items())
        a0 = agents["h100-0"]
        applied = dict(a0.actuator.applied)
        assert len(applied) == sum(len(r.qps) for r in reports["h100-0"])
        assert controller.core.fleet.hosts["h100-0"].applied_version == v
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    # Controller gone: the agent backs off, counts errors and keeps its plan.
    controller.stop()
    stop2 = threading.Event()
    t = threading.Thread(target=a0.run, args=(stop2,))
    errors = a0.errors
    t.start()
    time.sleep(0.5)
    stop2.set()
    t.join(10)
    assert a0.errors > errors and a0.version == v and a0.actuator.applied == applied
    # A restarted agent process reloads its token and plan from its state file.
    again = Agent("h100-0", ControllerClient(controller.url), get_actuator("twin"),
                  enrol_token=ADMIN, options=AgentOptions(state_file=tmp_path / "h100-0.json"))
    assert again.version == v and again.client.token == a0.client.token
    assert again.actuator.applied == applied


def test_client_maps_network_errors():
    c = ControllerClient(f"http://127.0.0.1:{free_port()}", timeout_s=0.5)
    with pytest.raises(ControllerUnavailable):
        c.get_plan("h")
    c.close()


def test_agent_re_enrols_when_the_controller_forgot_its_token(controller):
    ls = load("hetero-default")
    fabric = build_fabric(ls)
    controller.core.set_fabric(FabricUpload(topology=fabric_to_dict(fabric)))
    a = Agent("h100-0", ControllerClient(controller.url, token="stale-token"),
              get_actuator("twin"), enrol_token=ADMIN,
              options=AgentOptions(poll_wait_s=0.1, backoff=Backoff(0.01, 0.05)))
    stop = threading.Event()
    t = threading.Thread(target=a.run, args=(stop,))
    t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "h100-0" not in controller.core.fleet.hosts:
        time.sleep(0.02)
    stop.set()
    t.join(10)
    assert "h100-0" in controller.core.fleet.hosts and a.client.token != "stale-token"


def _loaded(controller):
    ls = load("hetero-default")
    fabric = build_fabric(ls)
    sw = scenario_workload(ls, fabric, 1 << 20)
    reports = host_reports(fabric, sw.jobs, sw.workload)
    controller.core.set_fabric(FabricUpload(topology=fabric_to_dict(fabric)))
    _create_jobs(controller, reports)
    return reports


def _create_jobs(controller, reports):
    for job, hosts in job_hosts(reports).items():
        controller.core.jobs.create(job, hosts, controller.core.fabric)


def _run_until(agent, cond, timeout_s=20.0):
    """Run ``agent`` until ``cond()`` holds; assert that it held (when it was seen: the
    controller may publish again while the agent stops, so it is not asked again)."""
    stop = threading.Event()
    t = threading.Thread(target=agent.run, args=(stop,))
    t.start()
    deadline = time.monotonic() + timeout_s
    held = cond()
    while time.monotonic() < deadline and not held:
        time.sleep(0.02)
        held = cond()
    stop.set()
    t.join(10)
    assert held, (agent.errors, agent.last_error, agent.version)


def test_agent_resends_a_failed_ack_and_ends_jobs_it_no_longer_sees(controller):
    reports = _loaded(controller)
    others = {h: Agent(h, ControllerClient(controller.url), get_actuator("twin"),
                       enrol_token=ADMIN, collector=lambda h=h: reports[h]) for h in reports}
    for a in others.values():  # every host reports once: the jobs are complete
        a.enrol()
        a.report()
    controller.core.publisher.wait_idle()
    a = others["h100-0"]
    real_ack, fails = a.client.ack, [1]

    def flaky_ack(host, ack):
        if fails:
            fails.pop()
            raise ControllerUnavailable("POST ack: HTTP 503: database unavailable")
        real_ack(host, ack)

    a.client.ack = flaky_ack
    a.poll_wait_s = 0.2
    v = controller.core.host_version("h100-0")
    _run_until(a, lambda: controller.core.fleet.hosts["h100-0"].applied_version == v)
    assert a.version == v and a.acked == v and a.errors >= 1
    # The collector no longer lists job "mixed" on this host: the agent ends it there.
    jobs = [r.job for r in reports["h100-0"]]
    a.collector = lambda: [r for r in reports["h100-0"] if r.job != "mixed"]
    _run_until(a, lambda: "h100-0" not in controller.core.jobs.states.get(
        "mixed", type("J", (), {"reports": {}})).reports)
    assert "mixed" in jobs and list(a.reported) == [j for j in jobs if j != "mixed"]


def test_agent_takes_the_plan_of_a_controller_that_lost_its_database(controller, tmp_path):
    reports = _loaded(controller)
    a = Agent("h100-0", ControllerClient(controller.url, token="token-of-a-lost-database"),
              get_actuator("twin"), enrol_token=ADMIN, collector=lambda: reports["h100-0"],
              options=AgentOptions(poll_wait_s=0.2, backoff=Backoff(0.01, 0.05)))
    a.plan = HostPlan(host="h100-0", version=41, fabric_version=1, policy="ecmp",
                      created_at=0.0, qps=[])  # from the old database
    for h, reps in reports.items():
        if h != "h100-0":
            controller.core.fleet.enrol(AgentEnrol(host=h), controller.core.fabric)
            for rep in reps:
                controller.core.jobs.put_report(controller.core.fabric, h, rep)
    # (the controller plans both jobs first: seconds on a loaded machine; it may publish
    # again after the agent took a plan, so the test waits for it to be idle). Versions
    # are per host: a later plan that leaves this host's document as it was keeps its
    # version.
    core = controller.core
    _run_until(a, lambda: core.publisher.wait_idle(0) and core.plan is not None and
               len(core.plan.summary.jobs) == 2
               and a.version == core.host_version("h100-0") > 0, timeout_s=60.0)
    assert a.version < 41 and a.plan.qps  # versions started again: the agent followed


def test_a_refused_report_does_not_hold_up_the_other_jobs(controller):
    """A job its scheduler has not created yet is refused (404): logged, sent again
    each iteration, and the host still gets the plan of its other jobs."""
    reports = _loaded(controller)
    ghost = reports["h100-1"][0].model_copy(update={"job": "ghost"})
    controller.core.fleet.enrol(AgentEnrol(host="h100-2"), controller.core.fabric)
    for rep in reports["h100-2"]:
        controller.core.jobs.put_report(controller.core.fabric, "h100-2", rep)
    a = Agent("h100-1", ControllerClient(controller.url), get_actuator("twin"),
              enrol_token=ADMIN, collector=lambda: [ghost, *reports["h100-1"]],
              options=AgentOptions(poll_wait_s=0.2, backoff=Backoff(0.01, 0.05)))
    _run_until(a, lambda: a.plan is not None and a.plan.qps, timeout_s=60.0)
    assert {q.job for q in a.plan.qps} == {"gpt"}
    assert "not registered" in a.report_errors["ghost"] and "ghost" not in a.reported
