"""Tokens, per-host isolation, size limits and error bodies."""

import logging

import pytest
from sqlalchemy import create_engine, text

from .conftest import ADMIN, auth, enrol


@pytest.fixture
def two_hosts(loaded, scenario):
    _, _, _, reports = scenario
    toks = {}
    for h in ("h100-0", "h100-3"):
        toks[h] = enrol(loaded, h)
    for h, t in toks.items():
        for rep in reports[h]:
            r = loaded.put(f"/v1/hosts/{h}/communicators/{rep.job}",
                           json=rep.model_dump(mode="json"), headers=auth(t))
            assert r.status_code == 200
    return loaded, toks, reports


def test_missing_and_wrong_tokens_are_401(client):
    for method, path in (("GET", "/v1/fabric"), ("GET", "/v1/jobs"), ("POST", "/v1/events"),
                         ("GET", "/v1/hosts/h100-0/plan"), ("POST", "/v1/agents")):
        r = client.request(method, path)
        assert r.status_code == 401, (method, path)
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"] == "unauthorized"
        r = client.request(method, path, headers=auth("wrong-token"))
        assert r.status_code == 401 and r.json()["message"] == "invalid token"
        r = client.request(method, path, headers={"Authorization": "Basic abc"})
        assert r.status_code == 401


def test_agent_token_cannot_touch_other_hosts_or_fabric(two_hosts, scenario):
    c, toks, reports = two_hosts
    a = toks["h100-0"]
    rep_b = reports["h100-3"][0]
    assert c.get("/v1/hosts/h100-3/plan", headers=auth(a)).status_code == 403
    assert c.get("/v1/agents/h100-3", headers=auth(a)).status_code == 403
    assert c.get("/v1/agents/h100-0", headers=auth(a)).status_code == 200
    r = c.put(f"/v1/hosts/h100-3/communicators/{rep_b.job}", json=rep_b.model_dump(mode="json"),
              headers=auth(a))
    assert r.status_code == 403 and "another host" in r.json()["message"]
    assert c.post("/v1/hosts/h100-3/plan/ack", json={"version": 0, "applied": 0},
                  headers=auth(a)).status_code == 403
    # Fabric changes, views and enrolment need other tokens.
    doc = c.get("/v1/fabric/topology", headers=auth(ADMIN)).json()
    assert c.put("/v1/fabric", json={"topology": doc}, headers=auth(a)).status_code == 403
    assert c.post("/v1/fabric/links", json={"links": [{"a": "leaf0", "b": "spine0", "up": False}]},
                  headers=auth(a)).status_code == 403
    for path in ("/v1/fabric", "/v1/jobs", "/v1/plans", "/v1/links", "/v1/agents"):
        assert c.get(path, headers=auth(a)).status_code == 403, path
    assert c.post("/v1/agents", json={"host": "h100-3"}, headers=auth(a)).status_code == 403
    # A host's own report, with ranks on another host, still cannot carry that host's QPs.
    rep_a = reports["h100-0"][0]
    stolen = rep_a.model_copy(update={"qps": rep_b.qps[:1]})
    r = c.put(f"/v1/hosts/h100-0/communicators/{rep_a.job}", json=stolen.model_dump(mode="json"),
              headers=auth(a))
    assert r.status_code == 422


def test_re_enrolment_rotates_the_token(two_hosts):
    c, toks, _ = two_hosts
    old = toks["h100-0"]
    new = enrol(c, "h100-0")
    assert new != old
    assert c.get("/v1/agents/h100-0", headers=auth(old)).status_code == 401
    assert c.get("/v1/agents/h100-0", headers=auth(new)).status_code == 200


def test_enrol_token_only_enrols(tmp_path, scenario):
    from fastapi.testclient import TestClient

    from icefabric.controller.app import create_app
    from icefabric.controller.settings import Settings

    s = Settings(database_url=f"sqlite:///{tmp_path}/e.db", admin_token=ADMIN,
                 enrol_token="enrol-only", policy="ecmp")
    with TestClient(create_app(s)) as c:
        r = c.post("/v1/agents", json={"host": "h100-0"}, headers=auth("enrol-only"))
        assert r.status_code == 201
        assert c.get("/v1/jobs", headers=auth("enrol-only")).status_code == 403
        assert c.get("/v1/hosts/h100-0/plan", headers=auth("enrol-only")).status_code == 403


def test_oversized_and_malformed_bodies_are_4xx(loaded):
    big = b'{"events": [' + b'{"kind": "note", "message": "x"},' * 5000 + b'{"kind":"note"}]}'
    r = loaded.post("/v1/events", content=big, headers={**auth(ADMIN),
                                                        "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "too_large"

    def chunks():
        for _ in range(100):
            yield b" " * 1024

    r = loaded.post("/v1/events", content=chunks(), headers={
        **auth(ADMIN), "Content-Type": "application/json"})
    assert r.status_code == 413
    for body in (b"{", b"[]", b'{"events": "x"}', b'{"events": []}', b"\xff\xfe",
                 b'{"events": [{"kind": "boom"}]}', b'{"schema_version": "9.0", "events": '
                 b'[{"kind": "note"}]}'):
        r = loaded.post("/v1/events", content=body, headers={
            **auth(ADMIN), "Content-Type": "application/json"})
        assert r.status_code == 422, body
        j = r.json()
        assert j["error"] == "invalid" and j["message"]
        assert "Traceback" not in r.text
    r = loaded.get("/v1/hosts/h100-0/plan", params={"wait_s": "x"}, headers=auth(ADMIN))
    assert r.status_code == 422 and "wait_s" in r.json()["message"]
    r = loaded.post("/v1/events", json={"events": [{"kind": "link_down"}]}, headers=auth(ADMIN))
    assert r.status_code == 422 and "needs 'link'" in r.json()["message"]
    r = loaded.post("/v1/events", json={"events": [{"kind": "link_down", "link": {
        "a": "leaf0", "b": "nowhere"}}]}, headers=auth(ADMIN))
    assert r.status_code == 422 and "no link" in r.json()["message"]


def test_secrets_are_never_logged_nor_stored(two_hosts, settings, caplog):
    c, toks, _ = two_hosts
    caplog.set_level(logging.DEBUG)

    for t in toks.values():
        c.get("/v1/hosts/h100-0/plan", headers=auth(t))
    c.get("/v1/jobs", headers=auth(ADMIN))
    c.get("/v1/jobs", headers=auth("wrong-" + ADMIN))
    text_logged = caplog.text
    for secret in (ADMIN, *toks.values()):
        assert secret not in text_logged
    eng = create_engine(settings.database_url)
    with eng.connect() as conn:
        rows = conn.execute(text("SELECT token_sha256 FROM ice_hosts")).scalars().all()
        dump = "\n".join(str(r) for r in conn.execute(text("SELECT * FROM ice_hosts")))
    eng.dispose()
    assert len(rows) == 2 and all(len(r) == 64 for r in rows)
    for t in toks.values():
        assert t not in dump
