"""Property-based fuzzing of every operation in the OpenAPI document (schemathesis, built on
hypothesis): no input, with any token, yields a 5xx or an undocumented status."""

import tempfile

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import status_code_conformance

from icefabric.controller.app import create_app
from icefabric.controller.settings import Settings
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.schemas_service import FabricUpload
from icefabric.topology.serialize import fabric_to_dict

ADMIN = "fuzz-admin-token"
_tmp = tempfile.mkdtemp(prefix="ice-fuzz-")
_settings = Settings(database_url=f"sqlite:///{_tmp}/fuzz.db", admin_token=ADMIN,
                     policy="ecmp", admin_token_file=f"{_tmp}/admin.token",
                     long_poll_max_s=0.05, plan_debounce_s=0.0)
app = create_app(_settings)
core = app.state.core
core.set_fabric(FabricUpload(topology=fabric_to_dict(build_fabric(load("homog-small")))))
AGENT = core.fleet.enrol(__import__("icefabric.schemas_service", fromlist=["AgentEnrol"])
                         .AgentEnrol(host=build_fabric(load("homog-small")).servers[0].name),
                         core.fabric)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
# Valid and invalid inputs alike (schema-conforming and schema-violating bodies/params).
schema.config.generation.update(modes=[schemathesis.GenerationMode.POSITIVE,
                                       schemathesis.GenerationMode.NEGATIVE])


def not_a_server_error(ctx, response, case):
    assert response.status_code < 500, f"{case.method} {case.path}: {response.status_code} " \
                                       f"{response.text[:300]}"
    assert "Traceback" not in response.text


@pytest.fixture(scope="module", autouse=True)
def _planner():
    core.start()
    yield
    core.stop()


@pytest.mark.slow
@pytest.mark.parametrize("token", [ADMIN, AGENT, None], ids=["admin", "agent", "anonymous"])
@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = case.call(headers=headers)
    case.validate_response(response, checks=[not_a_server_error, status_code_conformance])
