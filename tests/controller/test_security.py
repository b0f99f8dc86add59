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


# Every route and who may call it: "public"; "admin"; "enrol" (enrolment or admin token);
# "host" (the agent of the host in the path, or the admin); "agent" (any agent, acting as
# its own host, or the admin). A route missing here fails test_every_route_is_scoped.
ACCESS = {
    ("GET", "/healthz"): "public", ("GET", "/readyz"): "public",
    ("GET", "/metrics"): "public", ("GET", "/openapi.json"): "public",
    ("GET", "/docs"): "public", ("GET", "/docs/oauth2-redirect"): "public",
    ("GET", "/redoc"): "public",
    ("PUT", "/v1/fabric"): "admin", ("GET", "/v1/fabric"): "admin",
    ("GET", "/v1/fabric/topology"): "admin", ("POST", "/v1/fabric/links"): "admin",
    ("POST", "/v1/agents"): "enrol", ("GET", "/v1/agents/{host}"): "host",
    ("PUT", "/v1/hosts/{host}/communicators/{job}"): "host",
    ("DELETE", "/v1/hosts/{host}/communicators/{job}"): "host",
    ("GET", "/v1/hosts/{host}/plan"): "host", ("POST", "/v1/hosts/{host}/plan/ack"): "host",
    ("POST", "/v1/events"): "agent",
    ("GET", "/v1/jobs"): "admin", ("GET", "/v1/jobs/{job}"): "admin",
    ("GET", "/v1/plans"): "admin", ("GET", "/v1/plans/current"): "admin",
    ("GET", "/v1/plans/{version}"): "admin", ("GET", "/v1/links"): "admin",
    ("GET", "/v1/agents"): "admin", ("GET", "/v1/events"): "admin",
}


def test_every_route_is_scoped(two_hosts):
    c, toks, reports = two_hosts
    routes = {(m.upper(), p) for p, ops in c.app.openapi()["paths"].items() for m in ops}
    routes |= {(m, r.path) for r in c.app.routes if hasattr(r, "path")
               for m in getattr(r, "methods", ()) if m != "HEAD"}  # docs, schema
    assert routes == set(ACCESS), "add the new route to ACCESS with who may call it"
    doc = c.get("/v1/fabric/topology", headers=auth(ADMIN)).json()
    bodies = {  # valid bodies, so that only the token decides
        "/v1/fabric": {"topology": doc}, "/v1/fabric/links": {"links": [
            {"a": "leaf0", "b": "spine0", "up": True}]},
        "/v1/agents": {"host": "h100-3"},
        "/v1/hosts/{host}/communicators/{job}": reports["h100-3"][0].model_dump(mode="json"),
        "/v1/hosts/{host}/plan/ack": {"version": 0, "applied": 0},
        "/v1/events": {"events": [{"kind": "note", "message": "x"}]}}
    job = reports["h100-3"][0].job
    agent = auth(toks["h100-0"])  # the agent of h100-0 ...
    for (method, path), who in ACCESS.items():
        url = path.format(host="h100-3", job=job, version=1)  # ... on h100-3's data
        body = bodies.get(path) if method in ("PUT", "POST") else None
        anon = c.request(method, url, json=body)
        as_agent = c.request(method, url, json=body, headers=agent)
        what = f"{method} {path}"
        if who == "public":
            assert anon.status_code == 200 and as_agent.status_code == 200, what
            continue
        assert anon.status_code == 401 and anon.json()["error"] == "unauthorized", what
        if who == "agent":
            assert as_agent.status_code < 400, what
        else:
            assert as_agent.status_code == 403, what
            assert as_agent.json()["error"] == "forbidden", what
        if who == "host":
            assert "another host" in as_agent.json()["message"], what
            own = c.request(method, path.format(host="h100-0", job=reports["h100-0"][0].job),
                            json=body if path != "/v1/hosts/{host}/communicators/{job}"
                            else reports["h100-0"][0].model_dump(mode="json"), headers=agent)
            assert own.status_code < 400, (what, own.text)
        assert c.request(method, url, json=body, headers=auth(ADMIN)).status_code not in \
            (401, 403), what


def test_tokens_are_compared_as_digests_in_constant_time(client, monkeypatch):
    import hmac

    from icefabric.controller import core as core_mod

    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(core_mod.hmac, "compare_digest", spy)
    for tok in ("wrong-token-1", ADMIN):
        calls.clear()
        client.get("/v1/jobs", headers=auth(tok))
        assert calls, "the admin token must be checked with hmac.compare_digest"
        for a, b in calls:  # digests (64 hex digits), never the token itself
            assert len(a) == len(b) == 64 and tok not in (a, b)
    assert calls[0][0] == core_mod.sha256(ADMIN)


def test_json_nested_too_deep_is_refused_before_parsing(loaded):
    deep = b'{"events": [{"kind": "note", "counters": {}}], "x": ' + b"[" * 40 + b"]" * 40 + b"}"
    r = loaded.post("/v1/events", content=deep, headers={**auth(ADMIN),
                                                          "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json() == {
        "error": "too_deep", "message": "JSON nested deeper than 32 levels", "details": []}
    # Brackets inside strings do not count.
    ok = {"events": [{"kind": "note", "message": "[" * 500 + '\\"{' * 100}]}
    assert loaded.post("/v1/events", json=ok, headers=auth(ADMIN)).status_code == 202


def test_enrolment_is_rate_limited_per_client(tmp_path):
    from fastapi.testclient import TestClient

    from icefabric.controller.app import create_app
    from icefabric.controller.settings import Settings

    s = Settings(database_url=f"sqlite:///{tmp_path}/r.db", admin_token=ADMIN,
                 enrol_rate_per_s=0.5, enrol_burst=3)
    with TestClient(create_app(s)) as c:
        codes = [c.post("/v1/agents", json={"host": f"h{i}"}, headers=auth(ADMIN)).status_code
                 for i in range(3)]
        assert codes == [201, 201, 201]
        r = c.post("/v1/agents", json={"host": "h9"}, headers=auth(ADMIN))
        assert r.status_code == 429 and r.json()["error"] == "rate_limited"
        assert int(r.headers["retry-after"]) in (1, 2) and "retry in" in r.json()["message"]
        # Guessing tokens on the enrolment route counts too.
        r = c.post("/v1/agents", json={"host": "h9"}, headers=auth("guess"))
        assert r.status_code == 429
        assert c.get("/healthz").status_code == 200  # other routes are not limited
