"""The database goes away while agents run: PostgreSQL stopped for a while, a SQLite file
locked by another process. The controller answers 503 with the reason, keeps serving the
plans it has, and recovers by itself; agents keep their plans, retry, and catch up."""

import sqlite3
import time

import pytest

from icefabric.controller.settings import Settings
from icefabric.schemas_service import AgentEnrol, FabricUpload
from icefabric.topology.serialize import fabric_to_dict
from icefabric.twin.run import job_hosts
from icefabric.twin.serve import SubprocessController, ThreadedController

from .conftest import ADMIN, Fleet, admin, check_plans, scenario_reports

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

DOWN = {"links": [{"a": "leaf0", "b": "spine0", "up": False}]}


def test_postgresql_down_for_a_while(pg_cluster, controller_env, tmp_path):
    url_db = pg_cluster.new_database()
    ctl = SubprocessController({**controller_env, "ICE_DATABASE_URL": url_db,
                                "ICE_DB_LOCK_TIMEOUT_S": "2"},
                               log_path=str(tmp_path / "controller.log"))
    fleet = Fleet("hetero-default", ctl.start())
    try:
        fleet.upload_fabric()
        fleet.start()
        v1 = fleet.wait_converged()
        held = fleet.versions()  # each host's document version (the plan that last changed it)
        pg_cluster.stop()
        try:
            a = admin(ctl.url)
            r = a.post("/v1/fabric/links", json=DOWN)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            body = r.json()
            assert body["error"] == "database_unavailable"
            assert body["message"].startswith("database unavailable: PostgreSQL database")
            assert "is unavailable" in body["message"] and "retry later" in body["message"]
            assert a.get("/readyz").status_code == 503
            assert a.get("/healthz").status_code == 200
            # Plans already issued are still served from memory.
            assert a.get("/v1/hosts/h100-0/plan").json()["version"] == held["h100-0"]
            # An agent sees its NIC's link fail: its event cannot be stored now; it keeps it
            # and retries with backoff, keeping its plan meanwhile.
            ag = fleet.agents["h100-0"]
            ag.observe_links_down([("h100-0/nic0", "leaf0")], set(
                fleet.fabric.links_between("h100-0/nic0", "leaf0").tolist()))
            errors = fleet.errors()
            time.sleep(2.0)
            assert fleet.errors() > errors and fleet.versions() == held
            # (between its attempts the event is in flight: it is queued again when the
            # attempt fails)
            deadline = time.monotonic() + 10
            while not ag.events and time.monotonic() < deadline:
                time.sleep(0.01)
            assert ag.events, "the event must wait in the agent until it is stored"
        finally:
            pg_cluster.start()
        # Back by itself: the queued event is stored, re-planned, and every agent follows.
        v = fleet.wait_converged(at_least=v1 + 1)
        cur = admin(ctl.url).get("/v1/plans/current").json()
        assert cur["down_links"] == [{"a": "h100-0/nic0", "b": "leaf0", "cable": 0}] and \
            v == cur["version"]
        assert admin(ctl.url).get("/readyz").status_code == 200
        check_plans(fleet, url_db)
        assert "is unavailable" in ctl.output()  # and the log says so
    finally:
        fleet.stop()
        ctl.stop()


def test_plan_not_stored_while_the_database_is_down_is_retried(pg_cluster):
    _, fabric, reports = scenario_reports("hetero-default")
    s = Settings(database_url=pg_cluster.new_database(), admin_token=ADMIN, policy="ecmp",
                 plan_debounce_s=1.0, plan_retry_s=0.3, db_lock_timeout_s=1)
    srv = ThreadedController(s)
    with srv:
        core = srv.core
        core.set_fabric(FabricUpload(topology=fabric_to_dict(fabric)))
        for job, hosts in job_hosts(reports).items():
            core.jobs.create(job, hosts, core.fabric)
        for h, reps in reports.items():
            core.fleet.enrol(AgentEnrol(host=h), core.fabric)
            for rep in reps:
                # the last report completes the jobs: a plan is asked
                core.jobs.put_report(core.fabric, h, rep)
        pg_cluster.stop()  # ... and the database goes away within the 1 s debounce
        try:
            _wait(lambda: core.metrics.value("ice_plan_errors_total") >= 1)
            assert core.plan_version == 0 and "is unavailable" in core.publisher.last_error
        finally:
            pg_cluster.start()
        _wait(lambda: core.plan_version == 1)
        assert core.plan.summary.reason.startswith("plan: retry:")


def _wait(cond, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_sqlite_locked_by_another_process(controller_env, tmp_path):
    s = Settings(database_url=controller_env["ICE_DATABASE_URL"], admin_token=ADMIN,
                 policy="ice", plan_debounce_s=0.05, db_lock_timeout_s=0.5)
    with ThreadedController(s) as url:
        fleet = Fleet("hetero-default", url)
        try:
            fleet.upload_fabric()
            fleet.start()
            v1 = fleet.wait_converged()
            lock = sqlite3.connect(controller_env["ICE_DATABASE_URL"].removeprefix(
                "sqlite:///"), isolation_level=None)
            lock.execute("BEGIN EXCLUSIVE")
            try:
                r = admin(url).post("/v1/fabric/links", json=DOWN)
                assert r.status_code == 503
                assert "is locked by another process or connection (waited 0.5 s)" in \
                    r.json()["message"]
                # Long-polls and plan reads do not wait for the database.
                r = admin(url).get("/v1/hosts/h100-0/plan",
                                   params={"after_version": v1, "wait_s": 0.2})
                assert r.status_code == 204
            finally:
                lock.execute("ROLLBACK")
                lock.close()
            assert admin(url).post("/v1/fabric/links", json=DOWN).status_code == 200
            fleet.wait_converged(at_least=v1 + 1)
            check_plans(fleet, controller_env["ICE_DATABASE_URL"])
        finally:
            fleet.stop()
