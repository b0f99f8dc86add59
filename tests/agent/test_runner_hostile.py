"""A real agent process (``icefab agent run --actuator hccl-cfg``) against a hostile fake
controller on loopback: after every bad answer the agent is alive, still holds the last
good plan, reported the refusal, and ``MultiQpSrcPort.cfg`` holds only values of plans it
accepted (issue 23)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from icefabric.agent.actuators.hccl_cfg import FILE_NAME, parse_cfg
from icefabric.agent.client import MAX_RESPONSE_BYTES
from icefabric.schemas_service import MAX_PLAN_QPS

HOST = "h1"
#: a line of MultiQpSrcPort.cfg written from checked values only
CFG_LINE = re.compile(r"^(\d{1,3}\.){3}\d{1,3},(\d{1,3}\.){3}\d{1,3}=\d{1,5}(,\d{1,5})*$")


def qp(i: int, **kw) -> dict:
    d = {"src_ip": "10.0.0.1", "dst_ip": "10.0.1.1", "lqpn": 100 + i, "rqpn": 200 + i,
         "job": "gpt", "ordinal": i, "sport": 50000 + i, "rate_bps": 1e11,
         "routes": [[3, 7]], "weights": [1.0], "backup_sport": 51000 + i}
    d.update(kw)
    return d


def plan(version: int, qps: list[dict], **kw) -> dict:
    d = {"schema_version": "1.0", "host": HOST, "version": version, "fabric_version": 1,
         "policy": "ice", "created_at": 1.0, "qps": qps}
    d.update(kw)
    return d


def _doc(d) -> bytes:
    return json.dumps(d).encode()


def _many_qps(n: int) -> bytes:
    one = json.dumps(qp(0))
    return (b'{"schema_version":"1.0","host":"h1","version":9,"fabric_version":1,"policy":"x",'
            b'"created_at":1,"qps":[' +
            b",".join(one.replace('"lqpn": 100', f'"lqpn": {i % 0xFFFFFF}').encode()
                      for i in range(n)) + b"]}")


def hostile_cases() -> list[tuple[str, bytes]]:
    """The issue's reproductions first, then more of the same kind."""
    good = [qp(0), qp(1)]
    nosport = qp(0)
    del nosport["sport"]
    return [
        ("qp without sport", _doc(plan(5, [nosport]))),
        ("non-JSON 200 body", b"<html>surprise</html>"),
        ("version 2**63", _doc(plan(2**63, good))),
        ("sport 70000", _doc(plan(5, [qp(0, sport=70000)]))),
        ("backup_sport 1e9", _doc(plan(5, [qp(0, backup_sport=10**9)]))),
        ("rate_bps -1e9", _doc(plan(5, [qp(0, rate_bps=-1e9)]))),
        ("rate_bps NaN", _doc(plan(5, [qp(0, rate_bps=12345.5)])).replace(b"12345.5", b"NaN")),
        ("plan for another host", _doc(plan(5, good, host="h2"))),
        ("duplicated QPs", _doc(plan(5, [qp(0), qp(0)]))),
        (f"{MAX_PLAN_QPS + 1} QPs", _many_qps(MAX_PLAN_QPS + 1)),
        ("forged cfg line", _doc(plan(5, [qp(0, src_ip="../../etc/passwd",
                                                 dst_ip="a\nb=c,d")]))),
        ("JSON array", b"[1, 2, 3]"),
        ("rate_bps Infinity", _doc(plan(5, [qp(0, rate_bps=12345.5)])).replace(
            b"12345.5", b"Infinity")),
        ("weight NaN", _doc(plan(5, [qp(0, weights=[0.5])])).replace(b"0.5", b"NaN")),
        ("negative link id", _doc(plan(5, [qp(0, routes=[[-3]])]))),
        ("routes without weights", _doc(plan(5, [qp(0, weights=[])]))),
        ("lqpn 2**24", _doc(plan(5, [qp(0, lqpn=1 << 24)]))),
        ("job with a newline", _doc(plan(5, [qp(0, job="a\nb")]))),
        ("sport as a string", _doc(plan(5, [qp(0, sport="50000;rm")]))),
        ("schema_version 9.0", _doc(plan(5, good, schema_version="9.0"))),
        ("JSON null", b"null"),
        ("truncated JSON", _doc(plan(5, good))[:-7]),
        ("empty body", b""),
        ("unknown field", _doc(plan(5, good, shell="rm -rf /"))),
        ("negative version", _doc(plan(-5, good))),
        ("route of 10,000 hops", _doc(plan(5, [qp(0, routes=[list(range(10_000))])]))),
        ("answer above the size cap", b'{"pad":"' + b"x" * (MAX_RESPONSE_BYTES + 1) + b'"}'),
    ]


def mutants(seed: int, n: int) -> list[tuple[str, bytes]]:
    """``n`` copies of a good plan, each with one field set to a hostile value (fixed
    seed). Every one is invalid: the values lie outside each field's domain."""
    rng = random.Random(seed)
    bad = {
        "src_ip": ["1.2.3", "300.1.1.1", "", "x" * 300, 7, None, "1.1.1.1\n"],
        "dst_ip": ["::1", "1.1.1.1,2.2.2.2", [], "a=b"],
        "lqpn": [-1, 1 << 24, 2**64, "1", 1.5, None],
        "rqpn": [-7, 1 << 40, {}],
        "job": ["", "a b", "x" * 200, "../x", 3],
        "ordinal": [-1, 10**7, "0"],
        "sport": [-1, 65536, 2**63, 1.5, "80", "", []],
        "rate_bps": [-1.0, 1e300, "fast", [], True and "1"],
        "routes": [[[1, -1]], [[2**40]], "r", [list(range(65))], [[]] * 5000],
        "weights": [[-1.0], [1e300], ["w"], [None]],
        "backup_sport": [-1, 65536, "1"],
    }
    top = {"host": ["", "h 1", None], "version": [-1, 2**63, "1", 1.5],
           "fabric_version": [-1, 2**70], "created_at": [-1.0, "now"],
           "qps": [{}, "all", None]}
    out = []
    for i in range(n):
        d = plan(100 + i, [qp(0), qp(1)])
        if rng.random() < 0.7:
            field = rng.choice(sorted(bad))
            d["qps"][rng.randrange(2)][field] = rng.choice(bad[field])
        else:
            field = rng.choice(sorted(top))
            d[field] = rng.choice(top[field])
        out.append((f"mutant {i}: {field}", _doc(d)))
    return out


class FakeController:
    """Answers an agent like a controller would, except for the plans: each one queued
    is served once; between them a plan request gets 204 after a short wait."""

    def __init__(self):
        self.plans: list[bytes] = []
        self.served = 0  # plans served so far
        self.polls = 0  # plan requests answered
        self.acks: list[dict] = []
        self.events: list[dict] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self) -> dict:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def do_POST(self):
                body = self._body()
                if self.path == "/v1/agents":
                    return self._send(201, _doc({"host": HOST, "token": "tok",
                                                 "fabric_version": 1}))
                with fake.lock:
                    if self.path.endswith("/plan/ack"):
                        fake.acks.append(body)
                        return self._send(204)
                    fake.events += body["events"]
                return self._send(202, _doc({"accepted": len(body["events"]),
                                             "replan": False, "plan_version": 0}))

            def do_GET(self):
                with fake.lock:
                    fake.polls += 1
                    doc = fake.plans[fake.served] if fake.served < len(fake.plans) else None
                    if doc is not None:
                        fake.served += 1
                if doc is None:
                    time.sleep(0.05)
                    return self._send(204)
                self._send(200, doc)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, doc: bytes, agent: subprocess.Popen, timeout_s: float = 60.0) -> None:
        """Serve ``doc`` once and wait until the agent came back for the next plan."""
        with self.lock:
            self.plans.append(doc)
            n = len(self.plans)
        deadline = time.monotonic() + timeout_s
        polls = None
        while time.monotonic() < deadline and agent.poll() is None:
            with self.lock:
                if self.served >= n and polls is None:
                    polls = self.polls
                elif polls is not None and self.polls > polls:
                    return
            time.sleep(0.01)
        raise AssertionError(f"the agent did not come back (exit code {agent.poll()})")

    def rejections(self) -> list[str]:
        with self.lock:
            return [e["message"] for e in self.events if e["kind"] == "plan_rejected"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    f = FakeController()
    yield f
    f.close()


def _agent(fake: FakeController, tmp_path: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICE_")}
    env["ICE_ENROL_TOKEN"] = "enrol"
    return subprocess.Popen(
        [sys.executable, "-m", "icefabric", "agent", "run", "--controller", fake.url,
         "--host", HOST, "--actuator", "hccl-cfg", "--hccl-dir", str(tmp_path),
         "--poll-wait-s", "0.2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(agent: subprocess.Popen) -> tuple[int, str]:
    agent.send_signal(signal.SIGTERM)
    try:
        _, err = agent.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        agent.kill()
        _, err = agent.communicate()
    return agent.returncode, err


def _wait(cond, what: str, timeout_s: float = 30.0) -> None:
    """Wait until ``cond()`` holds (not asked again after: the agent runs on)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _check_file(cfg: Path, want: bytes, name: str) -> None:
    text = cfg.read_bytes()
    assert text == want, f"{name}: {FILE_NAME} changed: {text[:200]!r}"
    assert all(CFG_LINE.match(x) for x in text.decode().splitlines())


def test_agent_survives_every_hostile_plan_and_keeps_the_last_good_one(fake, tmp_path):
    """Every reproduction of issue 23 and more: refused, reported, the agent alive, the
    file still the last good plan's; then a new good plan is applied."""
    agent = _agent(fake, tmp_path)
    cfg = tmp_path / FILE_NAME
    try:
        fake.serve(_doc(plan(1, [qp(0), qp(1)])), agent)
        _wait(lambda: [a["version"] for a in fake.acks] == [1], "plan v1 acknowledged")
        assert parse_cfg(cfg.read_text()) == {("10.0.0.1", "10.0.1.1"): [50000, 50001]}
        good = cfg.read_bytes()
        cases = hostile_cases()
        for name, doc in cases:
            before = len(fake.rejections())
            fake.serve(doc, agent)
            assert agent.poll() is None, f"{name}: the agent exited"
            _check_file(cfg, good, name)
            _wait(lambda b=before: len(fake.rejections()) > b, f"{name}: not reported")
        assert [a["version"] for a in fake.acks] == [1]  # no bad plan acknowledged
        reasons = fake.rejections()
        assert len(reasons) == len(cases)
        assert any("src_ip" in r and "not an IPv4 address" in r for r in reasons)
        assert any("for host 'h2', not 'h1'" in r for r in reasons)
        assert any("planned twice" in r for r in reasons)
        assert any("larger than 128 MiB" in r for r in reasons)
        fake.serve(_doc(plan(2, [qp(0, sport=50100)])), agent)
        _wait(lambda: fake.acks[-1]["version"] == 2, "plan v2 acknowledged")
        assert parse_cfg(cfg.read_text()) == {("10.0.0.1", "10.0.1.1"): [50100]}
    finally:
        rc, err = _stop(agent)
    assert rc == 0 and "Traceback" not in err, err[-2000:]
    assert "refused the plan served, keeping plan v1" in err


def test_agent_refuses_random_hostile_mutants(fake, tmp_path):
    """A bounded fuzz (fixed seed): 60 one-field mutants of a good plan, each refused,
    the agent alive after each and the file untouched."""
    agent = _agent(fake, tmp_path)
    cfg = tmp_path / FILE_NAME
    try:
        fake.serve(_doc(plan(1, [qp(0), qp(1)])), agent)
        _wait(lambda: len(fake.acks) == 1, "plan v1 acknowledged")
        good = cfg.read_bytes()
        for name, doc in mutants(seed=23, n=60):
            fake.serve(doc, agent)
            assert agent.poll() is None, f"{name}: the agent exited"
            _check_file(cfg, good, name)
        assert [a["version"] for a in fake.acks] == [1], fake.acks
    finally:
        rc, err = _stop(agent)
    assert rc == 0 and "Traceback" not in err, err[-2000:]
