"""Faults at start: a corrupt, locked or read-only database stops ``controller serve`` with
one clear line; agents started before their controller retry with backoff and catch up."""

import os
import shutil
import sqlite3
import subprocess
import time

import pytest

from icefabric.twin.serve import SubprocessController, free_port

from .conftest import Fleet, check_plans

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


def _start_fails(env, tmp_path, command=None) -> str:
    ctl = SubprocessController(env, command=command, log_path=str(tmp_path / "ctl.log"))
    with pytest.raises(RuntimeError, match="controller exited with code 1") as e:
        ctl.start(timeout_s=60)
    out = str(e.value)
    assert "Traceback" not in out and "cannot start the controller" in out
    return out


def test_corrupt_sqlite_file(controller_env, tmp_path):
    (tmp_path / "ice.db").write_bytes(os.urandom(64 << 10))
    out = _start_fails(controller_env, tmp_path)
    assert "is not a valid SQLite database" in out and "restore it from a backup" in out


def test_sqlite_file_locked_by_another_process(controller_env, tmp_path):
    lock = sqlite3.connect(tmp_path / "ice.db", isolation_level=None)
    lock.execute("CREATE TABLE other (x)")
    lock.execute("BEGIN EXCLUSIVE")
    try:
        out = _start_fails({**controller_env, "ICE_DB_LOCK_TIMEOUT_S": "0.5"}, tmp_path)
    finally:
        lock.close()
    assert "is locked by another process or connection (waited 0.5 s)" in out


def _read_only(path):
    """A command prefix that runs the controller with ``path`` read-only: a read-only
    mount in its own mount namespace when root (root ignores permission bits), else
    permissions."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return None
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("root without unshare -m: cannot make a read-only path here")
    return ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"',
            str(path), *SubprocessController({}).command]


def test_read_only_database_directory(controller_env, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    cmd = _read_only(ro)
    try:
        out = _start_fails({**controller_env, "ICE_DATABASE_URL": f"sqlite:///{ro}/ice.db"},
                           tmp_path, command=cmd)
    finally:
        ro.chmod(0o755)
    assert f"cannot write SQLite file {ro}/ice.db: directory {ro} is read-only" in out


def test_agents_started_before_their_controller_catch_up(controller_env, tmp_path):
    port = free_port()
    fleet = Fleet("hetero-default", f"http://127.0.0.1:{port}").start()
    ctl = SubprocessController(controller_env, port=port,
                               log_path=str(tmp_path / "controller.log"))
    try:
        time.sleep(3.0)
        # Nobody there: each agent retries with capped exponential backoff (waits drawn
        # in [cap/2, cap], cap 50 ms doubling to 1 s: at most 11 tries in 3 s), and holds
        # no plan.
        per_agent = [a.errors for a in fleet.agents.values()]
        assert min(per_agent) >= 2 and max(per_agent) <= 11, per_agent
        assert set(fleet.versions().values()) == {0}
        ctl.start()
        fleet.upload_fabric()
        fleet.wait_converged()
        check_plans(fleet, controller_env["ICE_DATABASE_URL"])
    finally:
        fleet.stop()
        ctl.stop()
