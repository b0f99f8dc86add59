"""Digital twin end to end: a real controller on loopback, one agent per host over HTTP,
a link failure injected in the twin, results compared with the in-process policy."""

import time
from pathlib import Path

import httpx
import pytest

from icefabric.controller.settings import Settings
from icefabric.scenario.schema import FailureSpec
from icefabric.twin.run import TwinOptions, run_twin
from icefabric.twin.serve import SubprocessController, ThreadedController

HERE = Path(__file__).parent
ADMIN = "twin-test-admin"
POLICY = "ice"


@pytest.mark.slow
def test_64_agents_failure_replan_and_agreement(tmp_path):
    s = Settings(database_url=f"sqlite:///{tmp_path}/ice.db", admin_token=ADMIN, policy=POLICY,
                 admin_token_file=str(tmp_path / "t"))
    t0 = time.perf_counter()
    with ThreadedController(s) as url:
        res = run_twin(HERE / "hetero-64.yaml", url, ADMIN,
                       TwinOptions(poll_wait_s=2.0, timeout_s=60))
        plans = httpx.get(f"{url}/v1/plans", headers={"Authorization": f"Bearer {ADMIN}"},
                          trust_env=False).json()
    assert res.agents >= 64 and res.qps > 800
    assert len(res.failures) == 1 and res.failures[0]["seen_by"] >= 1
    # The agents that saw the failure moved their QPs to the plan's backup ports at once
    # (end-side rule), before the controller's re-plan arrived.
    assert res.failures[0]["backup_ports_used"] >= 1
    # The failure reached the controller as events and came back as a new plan version.
    assert res.plan_versions[-1] > res.plan_versions[0]
    assert plans[0]["reason"].startswith("replan") and plans[0]["down_links"] == [
        {"a": "leaf0", "b": "spine0", "cable": 1}]
    # Every QP ends on a working path, exactly where the switches hash its applied port.
    assert res.qps_on_down_links == 0 and res.path_mismatches == 0
    # Same numbers as the in-process policy.
    assert res.agree and res.max_rel_diff <= 1e-9
    assert all(r["match"] for r in res.rows) and len(res.rows) == 3
    assert time.perf_counter() - t0 < 60


@pytest.mark.slow
def test_controller_killed_mid_run_agents_keep_plans_and_restart_serves_same(tmp_path):
    env = {"ICE_DATABASE_URL": f"sqlite:///{tmp_path}/ice.db", "ICE_ADMIN_TOKEN": ADMIN,
           "ICE_POLICY": POLICY, "ICE_ADMIN_TOKEN_FILE": str(tmp_path / "t")}
    ctl = SubprocessController(env)
    url = ctl.start()
    seen = {}
    adm = {"Authorization": f"Bearer {ADMIN}"}

    def restart(agents, threads):
        hosts = sorted(agents)
        before = {h: httpx.get(f"{url}/v1/hosts/{h}/plan", headers=adm, trust_env=False).content
                  for h in hosts}
        versions = {h: a.version for h, a in agents.items()}
        applied = {h: dict(a.actuator.applied) for h, a in agents.items()}
        errors = sum(a.errors for a in agents.values())
        ctl.kill()  # SIGKILL: no shutdown handlers run
        time.sleep(1.5)
        # Meanwhile every agent keeps its plan and retries with backoff.
        assert {h: a.version for h, a in agents.items()} == versions
        assert {h: dict(a.actuator.applied) for h, a in agents.items()} == applied
        assert all(t.is_alive() for t in threads)
        assert sum(a.errors for a in agents.values()) > errors
        ctl.start()
        after = {h: httpx.get(f"{url}/v1/hosts/{h}/plan", headers=adm, trust_env=False).content
                 for h in hosts}
        seen["same"] = after == before
        seen["versions"] = versions

    try:
        res = run_twin("hetero-default", url, ADMIN, TwinOptions(
            size_bytes=64 << 20, poll_wait_s=1.0,
            failures=[FailureSpec(at_us=50, link=("leaf0", "spine0"))], on_ready=restart,
            timeout_s=60))
    finally:
        ctl.stop()
    assert seen["same"] is True
    # After the restart the same agents (same tokens) got the failure re-plan.
    assert res.plan_versions[1] == res.plan_versions[0]
    assert res.plan_versions[-1] > res.plan_versions[0]
    assert res.agree and res.qps_on_down_links == 0 and res.path_mismatches == 0


@pytest.mark.slow
def test_two_failures_and_a_recovery_agree(tmp_path):
    s = Settings(database_url=f"sqlite:///{tmp_path}/ice.db", admin_token=ADMIN, policy=POLICY,
                 admin_token_file=str(tmp_path / "t"))
    with ThreadedController(s) as url:
        res = run_twin("hetero-default", url, ADMIN, TwinOptions(
            size_bytes=64 << 20, poll_wait_s=1.0,
            failures=[FailureSpec(at_us=50, link=("leaf0", "spine0"), until_us=400),
                      FailureSpec(at_us=100, link=("leaf2", "spine3"))],
            timeout_s=60))
    assert [(f["link"], f["up"]) for f in res.failures] == [
        (["leaf0", "spine0"], False), (["leaf2", "spine3"], False), (["leaf0", "spine0"], True)]
    assert res.plan_versions == sorted(set(res.plan_versions)) and len(res.plan_versions) == 4
    assert res.agree and res.qps_on_down_links == 0 and res.path_mismatches == 0


@pytest.mark.slow
def test_fluid_scenario_agrees_with_paced_qps(tmp_path):
    """Done-when: the twin agrees exactly with the in-process run on a fluid scenario (same
    busbw per row, same ports, backup ports and pacing rates per QP)."""
    s = Settings(database_url=f"sqlite:///{tmp_path}/ice.db", admin_token=ADMIN, policy=POLICY,
                 admin_token_file=str(tmp_path / "t"))
    with ThreadedController(s) as url:
        res = run_twin("hetero-ratemismatch", url, ADMIN,
                       TwinOptions(size_bytes=16 << 20, poll_wait_s=1.0, timeout_s=60))
    assert res.engine == "fluid" and res.qps > 0
    assert res.paced_qps == res.qps  # ICE paces every QP, with the controller's rates
    assert res.qp_mismatches == 0 and res.path_mismatches == 0
    assert res.agree and res.max_rel_diff == 0.0
    assert [r["busbw_GBps"] for r in res.rows] == [r["busbw_GBps"] for r in res.reference_rows]
