"""``icefab controller serve``: refuses to start without an admin token (unless
--insecure-local, on loopback only) and says why a database cannot be used."""

import httpx
import pytest
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.controller.settings import Settings
from icefabric.twin.serve import ThreadedController

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_token_env(monkeypatch):
    for k in ("ICE_ADMIN_TOKEN", "ICE_ADMIN_TOKEN_FILE", "ICE_INSECURE_LOCAL"):
        monkeypatch.delenv(k, raising=False)


def test_serve_needs_an_admin_token(tmp_path):
    r = runner.invoke(app, ["controller", "serve", "--db", f"sqlite:///{tmp_path}/x.db"])
    assert r.exit_code == 2
    assert "no admin token: set ICE_ADMIN_TOKEN" in r.output and "Traceback" not in r.output


def test_insecure_local_only_on_loopback(tmp_path):
    r = runner.invoke(app, ["controller", "serve", "--insecure-local", "--host", "0.0.0.0"])
    assert r.exit_code == 2 and "binds only a loopback address, not '0.0.0.0'" in r.output


def test_serve_says_why_the_database_cannot_be_used(tmp_path, monkeypatch):
    monkeypatch.setenv("ICE_ADMIN_TOKEN", "cli-test-admin-token")
    db = tmp_path / "ice.db"
    db.write_bytes(b"garbage" * 1000)
    r = runner.invoke(app, ["controller", "serve", "--db", f"sqlite:///{db}"])
    assert r.exit_code == 1 and "cannot start the controller" in r.output
    assert "is not a valid SQLite database" in r.output and "Traceback" not in r.output


def test_insecure_local_admin_needs_no_token_but_a_given_token_must_be_valid(tmp_path):
    s = Settings(database_url=f"sqlite:///{tmp_path}/x.db", insecure_local=True)
    with ThreadedController(s) as url:
        assert httpx.get(f"{url}/v1/jobs", trust_env=False).status_code == 200
        r = httpx.get(f"{url}/v1/jobs", headers={"Authorization": "Bearer nope"},
                      trust_env=False)
        assert r.status_code == 401
    with pytest.raises(ValueError, match="no admin token"):
        Settings(database_url=f"sqlite:///{tmp_path}/x.db")
