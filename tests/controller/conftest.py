import pytest
from fastapi.testclient import TestClient

from icefabric.controller.app import create_app
from icefabric.controller.settings import Settings
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.schemas_service import FabricUpload
from icefabric.topology.serialize import fabric_to_dict
from icefabric.twin.run import host_reports, job_hosts

ADMIN = "admin-secret-token-123"


def auth(token):
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def settings(tmp_path, database_url):
    """Controller settings on a fresh database: every test that uses them runs on SQLite
    and on PostgreSQL."""
    return Settings(database_url=database_url, admin_token=ADMIN,
                    policy="ecmp", admin_token_file=str(tmp_path / "admin.token"),
                    plan_debounce_s=0.0, max_body_bytes=64 << 10)


@pytest.fixture
def scenario():
    ls = load("hetero-default")
    fabric = build_fabric(ls)
    size = 1 << 20
    sw = scenario_workload(ls, fabric, size)
    return ls, fabric, sw.workload, host_reports(fabric, sw.jobs, sw.workload)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def loaded(client, scenario):
    """A client whose controller has the hetero-default fabric loaded and its jobs
    created (as their scheduler would)."""
    ls, fabric, _, reports = scenario
    body = FabricUpload(topology=fabric_to_dict(fabric), plan_seed=ls.scenario.seed)
    r = client.put("/v1/fabric", json=body.model_dump(mode="json"), headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    create_jobs(client.app.state.core, reports)
    return client


def create_jobs(core, reports):
    """Register every job of ``reports`` on its hosts (what its scheduler does)."""
    for job, hosts in job_hosts(reports).items():
        core.jobs.create(job, hosts, core.fabric)


def enrol(client, host):
    r = client.post("/v1/agents", json={"host": host, "nics": []}, headers=auth(ADMIN))
    assert r.status_code == 201, r.text
    return r.json()["token"]


def wait_version(client, version, timeout_s=20.0):
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        client.app.state.core.publisher.wait_idle(timeout_s)
        if client.app.state.core.plan_version >= version:
            return
        time.sleep(0.01)
    raise TimeoutError(version)
