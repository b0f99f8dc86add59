"""The newcomer's controller path, as docs/SERVICE.md walks it: serve -> fabric load ->
collect a real log -> agent run with that output -> plan applied (dry-run) -> an operator
fails a link (`icefab controller link down`) -> the re-plan reaches the agent; plans, hosts
and events read back with the operator commands."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

LOG = Path(__file__).resolve().parents[1] / "collect" / "corpus" / "reference" / \
    "ncclt-oci-h100-roce-2.21.5.log"
HOSTS = ("instance-20240722-0952", "instance-20240722-0955")


def _icefab(*args, env, timeout=180):
    r = subprocess.run([sys.executable, "-m", "icefabric", *args], capture_output=True,
                       text=True, env=env, timeout=timeout)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    return r


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_serve_load_collect_agent_applies_the_plan(tmp_path):
    env = {**os.environ, "ICE_ADMIN_TOKEN": "admin-secret", "ICE_ENROL_TOKEN": "enrol-secret"}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "icefabric", "controller", "serve",
                               "--port", str(port), "--db", f"sqlite:///{tmp_path}/ice.db",
                               "--log-level", "info"], env=env, stderr=subprocess.PIPE,
                              text=True)
    try:
        # an agent before any fabric: a clear message, not a traceback or a silent wait
        deadline = time.time() + 60
        while True:
            r = _icefab("agent", "run", "--controller", url, "--host", HOSTS[0], "--once",
                        env=env)
            if "cannot reach the controller" not in r.stderr or time.time() > deadline:
                break
            time.sleep(0.5)
        assert r.returncode == 1 and "no plan yet" in r.stderr
        r = _icefab("controller", "fabric", "load", "homog-small", "--from-log", str(LOG),
                    "--controller", url, env=env)
        assert r.returncode == 0 and "2 servers" in r.stdout, r.stderr
        r = _icefab("collect", "nccl-tests", str(LOG), "--json", env=env)
        assert r.returncode == 0, r.stderr
        comms = tmp_path / "comms.json"
        comms.write_text(r.stdout)
        # a job nobody created: a clear message naming the command that creates it
        r = _icefab("agent", "run", "--controller", url, "--host", HOSTS[0], "--once",
                    "--reports", str(comms), "--job", "oci", "--size", "1G",
                    "--collective", "all_reduce", env=env)
        assert r.returncode == 2 and "job 'oci' is not registered" in r.stderr, r.stderr
        assert "icefab controller job create" in r.stderr and "Traceback" not in r.stderr
        r = _icefab("controller", "job", "create", "oci", "--hosts", ",".join(HOSTS),
                    "--controller", url, env=env)
        assert r.returncode == 0 and "job oci created on 2 hosts" in r.stdout, r.stderr
        outs = []
        for host in HOSTS:
            r = _icefab("agent", "run", "--controller", url, "--host", host, "--once",
                        "--reports", str(comms), "--job", "oci", "--size", "1G",
                        "--collective", "all_reduce", env=env)
            assert r.returncode == 0, r.stderr
            outs.append(r)
        # the last host completes the job: its agent gets and applies the plan; the first
        # one gets it on its next iteration
        assert "plan version 1 applied with the dry-run actuator (16 QPs)" in outs[1].stdout
        r = _icefab("agent", "run", "--controller", url, "--host", HOSTS[0], "--once",
                    "--reports", str(comms), "--job", "oci", "--size", "1G",
                    "--collective", "all_reduce", env=env)
        assert "plan version 1 applied" in r.stdout and "mlx5dv_modify_qp_udp_sport" in r.stdout
        _operator_fails_a_link_and_the_agent_gets_the_re_plan(url, env, comms)
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
        assert "Traceback" not in err
    # the controller's INFO lines: the operator's event and every plan version
    # (one line per event, one per plan version)
    assert "INFO icefabric.controller.core: links leaf0-spine0/2 down (events from admin): " \
        "re-plan requested" in err
    assert re.search(r"INFO icefabric\.controller\.publisher: plan v1 ", err), err[-2000:]
    assert re.search(r"INFO icefabric\.controller\.publisher: plan v2 ", err), err[-2000:]


def _plans(url, env):
    return json.loads(_icefab("controller", "plans", "--json", "--controller", url,
                              env=env).stdout)


def _operator_fails_a_link_and_the_agent_gets_the_re_plan(url, env, comms):
    # (agents' reports may have re-planned already: versions are counted from here)
    v0 = _plans(url, env)[0]["version"]
    # homog-small has 4 cables between each leaf and spine: the operator names the third
    r = _icefab("controller", "link", "down", "leaf0", "spine0", "--cable", "2",
                "--controller", url, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("link leaf0-spine0/2 down: re-plan requested")
    deadline = time.time() + 60
    while True:  # the re-plan runs in the controller's planner
        plans = _plans(url, env)
        if plans[0]["version"] > v0 or time.time() > deadline:
            break
        time.sleep(0.3)
    assert plans[0]["down_links"] == [{"a": "leaf0", "b": "spine0", "cable": 2}]
    v = plans[0]["version"]
    assert v == v0 + 1 and [p["version"] for p in plans][:2] == [v, v0]
    r = _icefab("agent", "run", "--controller", url, "--host", HOSTS[1], "--once",
                "--reports", str(comms), "--job", "oci", "--size", "1G",
                "--collective", "all_reduce", env=env)
    got = re.search(r"plan version (\d+) applied", r.stdout)
    assert r.returncode == 0 and got and int(got[1]) >= v, r.stdout + r.stderr
    hosts = json.loads(_icefab("controller", "hosts", "--json", "--controller", url,
                               env=env).stdout)
    assert {h["host"]: h["applied_version"] for h in hosts}[HOSTS[1]] == int(got[1])
    table = _icefab("controller", "events", "--controller", url, env=env)
    assert table.returncode == 0 and "link_down" in table.stdout
    assert "leaf0-spine0/2" in table.stdout and "admin" in table.stdout
    r = _icefab("controller", "link", "down", "spine0", "leaf0", "--cable", "2",
                "--controller", url, env=env)
    assert "already down, no re-plan" in r.stdout
    r = _icefab("controller", "link", "down", "leaf0", "spine0", "--cable", "4",
                "--controller", url, env=env)
    assert r.returncode == 2
    assert "cable 4 between leaf0 and spine0: there are 4 (0-3)" in r.stderr, r.stderr
    r = _icefab("controller", "link", "down", "leaf0", "nowhere", "--controller", url, env=env)
    assert r.returncode == 2 and "no link between leaf0 and nowhere" in r.stderr
