"""End to end without RDMA hardware: a controller (policy ``ice``), an agent with the
``verbs`` actuator, a second agent, and a CCL program with the shim preloaded over the
stand-in libibverbs (it checks the wiring, not a NIC).

The QPs are created with the planned flow label (so the planned source port) and paced at
the planned rate; the agent reports them with their real QP numbers; a link failure makes
the controller re-plan and the new ports reach the live QPs through mlx5dv.
"""

from __future__ import annotations

import threading

import pytest

from icefabric.agent.actuators import get_actuator
from icefabric.agent.client import ControllerClient
from icefabric.agent.runner import Agent, AgentOptions
from icefabric.controller.settings import Settings
from icefabric.dataplane.roce import flow_label_to_udp_sport
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import loads
from icefabric.twin.run import host_reports, register_jobs, upload_fabric
from icefabric.twin.serve import ThreadedController
from icefabric.wire import srate_of

from .conftest import IBV_QP_RATE_LIMIT, records, rtr_labels, two_server_ring, wait_for

# One channel with 2 QPs per connection: the NIC pair under test has exactly 2 QPs.
SCENARIO = two_server_ring("shim-e2e", channels=1, qps_per_connection=2)
ADMIN = "e2e-admin"


def pair_plan(agent, sip, dip):
    """The plan's QPs of one NIC pair, by ordinal."""
    return sorted((q for q in agent.plan.qps if (q.src_ip, q.dst_ip) == (sip, dip)),
                  key=lambda q: q.ordinal)


@pytest.mark.slow
def test_controller_plan_reaches_qps_at_connection_and_live(native, tmp_path, agent_sock):
    ls = loads(SCENARIO, "<e2e>")
    fabric = build_fabric(ls)
    sw = scenario_workload(ls, fabric, 1 << 20)
    reports = host_reports(fabric, sw.jobs, sw.workload)
    # What the hosts know before any QP exists: the communicator, not its QPs.
    reports = {h: [r.model_copy(update={"qps": []}) for r in reps] for h, reps in reports.items()}
    s = Settings(database_url=f"sqlite:///{tmp_path}/c.db", admin_token=ADMIN, policy="ice",
                 admin_token_file=str(tmp_path / "t"), plan_debounce_s=0.0)
    with ThreadedController(s) as url:
        _run(native, tmp_path, agent_sock, fabric, reports, url)


def _run(native, tmp_path, sock, fabric, reports, url):
    import httpx

    with httpx.Client(base_url=url, trust_env=False,
                      headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
        upload_fabric(admin, fabric, 7)
        register_jobs(admin, reports)
    verbs = get_actuator("verbs", socket_path=sock, push_timeout_s=5.0).start()
    a = Agent("h100-0", ControllerClient(url), verbs, enrol_token=ADMIN,
              collector=lambda: verbs.with_qps(reports["h100-0"]),
              options=AgentOptions(poll_wait_s=0.2))
    b = Agent("h100-1", ControllerClient(url), get_actuator("twin"), enrol_token=ADMIN,
              collector=lambda: reports["h100-1"], options=AgentOptions(poll_wait_s=0.2))
    stop = threading.Event()
    threads = [threading.Thread(target=x.run, args=(stop,)) for x in (a, b)]
    for t in threads:
        t.start()
    proc = None
    try:
        sip, dip = "10.0.0.1", "10.0.1.1"
        assert wait_for(lambda: a.plan is not None and len(pair_plan(a, sip, dip)) == 2, 30)
        planned = pair_plan(a, sip, dip)
        log, hold = tmp_path / "calls", tmp_path / "release"
        env = native.env(log, sip, ICE_SHIM_SOCKET=str(sock), ICE_JOB="train1")
        proc = native.run("ccl_dlopen", 2, dip, env, hold_ms=60_000, hold_file=hold)
        qpns = [int(line.split()[1]) for line in (proc.stdout.readline() for _ in range(2))]
        # Created with exactly the planned ports (via the flow label) and rates.
        labels = rtr_labels(log)
        assert [int(flow_label_to_udp_sport(labels[q])) for q in qpns] == \
            [q.sport for q in planned]
        # The planned rates are static-rate steps already; they go out at RTR.
        assert [rtr_labels(log, "static_rate")[q] for q in qpns] == [srate_of(q.rate_bps)
                                                            for q in planned]
        assert not any(r.get("mask") == IBV_QP_RATE_LIMIT for r in records(log))
        # The agent reports them; the controller plans with the real QP numbers.
        assert wait_for(lambda: [(q.lqpn, q.rqpn) for q in pair_plan(a, sip, dip)] ==
                        [(qpns[0], 0x500), (qpns[1], 0x501)], 30)
        # A failed link on QP 0's path: re-plan, pushed to the live QPs via mlx5dv.
        before = {q.ordinal: q.sport for q in pair_plan(a, sip, dip)}
        v_before = a.version
        route = pair_plan(a, sip, dip)[0].routes[0]
        names = fabric.node_names
        spine_link = next(l for l in route if "spine" in names[fabric.link_dst[l]])
        down = (names[fabric.link_src[spine_link]], names[fabric.link_dst[spine_link]])
        httpx.post(f"{url}/v1/fabric/links", trust_env=False,
                   json={"links": [{"a": down[0], "b": down[1], "up": False}]},
                   headers={"Authorization": f"Bearer {ADMIN}"}).raise_for_status()
        assert wait_for(lambda: a.version > v_before and a.actuator.state, 30)
        after = {q.ordinal: q.sport for q in pair_plan(a, sip, dip)}
        assert after != before  # the failure moved QP 0 off the dead spine
        live = [r for r in records(log) if r["call"] == "mlx5dv_modify_qp_udp_sport"]
        assert live and all(r["rc"] == 0 for r in live)
        in_force = {qpn: int(flow_label_to_udp_sport(labels[qpn])) for qpn in qpns}
        for r in live:
            in_force[r["qpn"]] = r["sport"]
        assert [in_force[q] for q in qpns] == [after[0], after[1]]
    finally:
        if proc is not None:
            hold.touch()
            proc.communicate(timeout=30)
        stop.set()
        for t in threads:
            t.join(15)
        verbs.stop()
