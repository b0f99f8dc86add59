"""kill -9 of the controller while its agents long-poll it: while it plans (128 agents),
and inside the transaction that stores a plan (SQLite and PostgreSQL). Agents keep their
plans, retry with backoff, and end on the latest plan; no plan version is lost or served
twice with different content."""

import os
import time

import pytest

from icefabric.twin.serve import SubprocessController

from .conftest import FLEET, Fleet, admin, check_plans, faulty, wait_file

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

LINK = {"a": "leaf0", "b": "spine0"}


def _kill_at(point, env, tmp_path, scenario=FLEET):
    ctl = faulty(env, point, tmp_path)
    fleet = Fleet(scenario, ctl.start())
    n = len(fleet.agents)
    try:
        fleet.upload_fabric()
        fleet.start()
        v1 = fleet.wait_converged()
        held = fleet.versions()  # each host's document version (the plan that last changed it)
        (tmp_path / "arm").touch()
        r = admin(ctl.url).post("/v1/fabric/links", json={"links": [{**LINK, "up": False}]})
        assert r.status_code == 200
        assert wait_file(tmp_path / "at") == point
        errors = fleet.errors()
        ctl.kill()  # every agent is parked on a long-poll
        time.sleep(3.0)
        # Controller gone: every agent keeps the plan it had and retries with capped
        # exponential backoff (at most 11 tries each in 3 s, see test_start), no storm.
        assert fleet.versions() == held
        assert n <= fleet.errors() - errors <= n * 11, fleet.errors() - errors
        (tmp_path / "arm").unlink()
        ctl.start()  # same database, same port
        v = fleet.wait_converged(at_least=v1 + 1)
        cur = admin(ctl.url).get("/v1/plans/current").json()
        # The link change was stored before the crash; the restarted controller planned it.
        assert v == v1 + 1 and cur["down_links"] == [LINK] and cur["reason"].startswith(
            ("plan: startup", "replan: startup"))
        # every host applied its document once, and the hosts the re-plan changed theirs
        # again (a link no planned route crosses changes none)
        return {**check_plans(fleet, env["ICE_DATABASE_URL"]),
                "must_apply": n + cur["hosts_changed"]}
    finally:
        fleet.stop()
        ctl.stop()


def test_kill_while_planning(controller_env, tmp_path):
    out = _kill_at("planning", controller_env, tmp_path)
    assert out["applied"] >= out["must_apply"] >= 128


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_kill_inside_the_plan_write(controller_env, tmp_path, database_url):
    env = {**controller_env, "ICE_DATABASE_URL": database_url}
    # The half-written version was rolled back: the version after it is the one planned
    # after the restart, and the only one of that number any agent ever saw.
    out = _kill_at("write", env, tmp_path, "hetero-default")
    assert out["applied"] >= out["must_apply"] >= 8


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_controller_leaves_no_planner_process(controller_env, tmp_path):
    ctl = SubprocessController({**controller_env, "ICE_PLANNER_PROCESSES": "1"},
                               log_path=str(tmp_path / "controller.log"))
    fleet = Fleet("hetero-default", ctl.start())
    try:
        fleet.upload_fabric()
        fleet.start()
        fleet.wait_converged()  # planned in the planner process
        pid = ctl.proc.pid
        kids = [int(c) for t in os.listdir(f"/proc/{pid}/task")
                for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
        assert kids, "the planner process should be running"
        ctl.kill()
        deadline = time.monotonic() + 10
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(k) for k in kids), "planner process outlived its controller"
    finally:
        fleet.stop()
        ctl.stop()
