"""Tokens, per-host isolation, size limits and error bodies."""

import logging
from collections import namedtuple

import pytest
from sqlalchemy import create_engine, text

from .conftest import ADMIN, auth, enrol

shutil_usage = namedtuple("usage", "total used free")


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
    ("PUT", "/v1/jobs/{job}"): "admin", ("DELETE", "/v1/jobs/{job}"): "admin",
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
        "/v1/events": {"events": [{"kind": "note", "message": "x"}]},
        "/v1/jobs/{job}": {"hosts": ["h100-0", "h100-3"]}}
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
            if method in ("PUT", "POST"):  # scope first: 403 whatever the body, never 422
                junk = c.request(method, url, json={"junk": [1]}, headers=agent)
                assert junk.status_code == 403, (what, junk.text)
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

    from icefabric.controller import tokens as tokens_mod

    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens_mod.hmac, "compare_digest", spy)
    for tok in ("wrong-token-1", ADMIN):
        calls.clear()
        client.get("/v1/jobs", headers=auth(tok))
        assert calls, "the admin token must be checked with hmac.compare_digest"
        for a, b in calls:  # digests (64 hex digits), never the token itself
            assert len(a) == len(b) == 64 and tok not in (a, b)
    assert calls[0][0] == tokens_mod.sha256(ADMIN)


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


def test_an_agent_reports_only_its_own_hosts_links(two_hosts):
    """Issue 23: a host on leaf0 took leaf1's uplinks down with its agent token."""
    c, toks, _ = two_hosts
    a = auth(toks["h100-0"])
    core = c.app.state.core
    for link in ({"a": "leaf1", "b": "spine0"}, {"a": "leaf0", "b": "spine0"},
                 {"a": "h100-3/nic0", "b": "leaf1"}):  # fabric links, another host's NIC
        for kind in ("link_down", "link_up"):
            r = c.post("/v1/events", json={"events": [
                {"kind": "note", "message": "fine"}, {"kind": kind, "link": link}]}, headers=a)
            assert r.status_code == 403 and r.json()["error"] == "forbidden", r.text
            assert "events[1]" in r.json()["message"] and "not a link of host 'h100-0'" in \
                r.json()["message"]
    assert core.down == set() and core.repo.recent_events() == []  # nothing of it kept
    nic = {"a": "h100-0/nic0", "b": "leaf0"}  # its own NIC's cable: taken
    r = c.post("/v1/events", json={"events": [{"kind": "link_down", "link": nic}]}, headers=a)
    assert r.status_code == 202 and r.json()["replan"] is True
    assert core.down == {("h100-0/nic0", "leaf0")}
    # The operator reports fabric links.
    r = c.post("/v1/events", json={"events": [{"kind": "link_down", "link": {
        "a": "leaf1", "b": "spine0"}}]}, headers=auth(ADMIN))
    assert r.status_code == 202 and ("leaf1", "spine0") in core.down


def test_unknown_hosts_are_404(two_hosts):
    c, toks, _ = two_hosts
    for method, path in (("GET", "/v1/hosts/nosuchhost/plan"), ("GET", "/v1/agents/nosuchhost"),
                         ("POST", "/v1/hosts/nosuchhost/plan/ack"),
                         ("DELETE", "/v1/hosts/nosuchhost/communicators/gpt")):
        body = {"version": 0, "applied": 0} if method == "POST" else None
        r = c.request(method, path, json=body, headers=auth(ADMIN))
        assert r.status_code == 404 and "nosuchhost" in r.json()["message"], (path, r.text)
        # An agent learns nothing about other hosts, known or not.
        r = c.request(method, path, json=body, headers=auth(toks["h100-0"]))
        assert r.status_code == 403, path
    # A server of the fabric without an agent yet is known (its plan may exist).
    assert c.get("/v1/hosts/ascend-0/plan", headers=auth(ADMIN)).status_code in (200, 204)


def test_readyz_reports_a_store_that_cannot_write(client, monkeypatch):
    """Issue 23: /readyz said 200 while no write could succeed (full disk)."""
    from sqlalchemy import event

    from icefabric.controller.store import repo as repo_mod

    repo = client.app.state.core.repo
    assert client.get("/readyz").status_code == 200
    if repo.backend == "sqlite":  # the SQLite file's filesystem is full
        monkeypatch.setattr(repo_mod.shutil, "disk_usage",
                            lambda p: shutil_usage(total=1 << 30, used=(1 << 30) - (1 << 20),
                                                   free=1 << 20))
        r = client.get("/readyz")
        assert r.status_code == 503 and "only 1 MiB free" in r.json()["message"], r.text
        monkeypatch.undo()
    # The database answers reads but refuses every write (SQLite: query_only, as a
    # read-only file; PostgreSQL: a read-only transaction default, as a hot standby).
    pragma = ("PRAGMA query_only = 1" if repo.backend == "sqlite"
              else "SET default_transaction_read_only = on")

    def read_only(dbapi_conn, _):
        cur = dbapi_conn.cursor()
        cur.execute(pragma)
        cur.close()
        if repo.backend != "sqlite":
            dbapi_conn.commit()

    event.listen(repo.engine, "connect", read_only)
    repo.engine.dispose()
    try:
        r = client.get("/readyz")
        assert r.status_code == 503, r.text
        assert r.json()["error"] == "database_unavailable" and "read" in r.json()["message"]
        assert client.get("/healthz").status_code == 200  # alive, not ready
    finally:
        event.remove(repo.engine, "connect", read_only)
        repo.engine.dispose()
    assert client.get("/readyz").status_code == 200


def test_job_squatting_is_impossible(loaded, scenario):
    """Issue 23: the first host to report a job name fixed its ranks for everyone. Now a
    job's hosts are fixed when its scheduler creates it; no other host can report it,
    nor claim a name nobody created."""
    _, _, _, reports = scenario
    c = loaded
    toks = {h: enrol(c, h) for h in ("h100-1", "h100-2", "ascend-0")}
    gpt = reports["h100-1"][0]
    assert gpt.job == "gpt" and {r.host for r in gpt.ranks} == {"h100-1", "h100-2"}
    # ascend-0 (another tenant) reports "gpt" with its own ranks first: refused.
    squat = gpt.model_copy(update={"ranks": [
        r.model_copy(update={"host": "ascend-0"}) if r.host == "h100-2" else r
        for r in gpt.ranks], "qps": []})
    r = c.put("/v1/hosts/ascend-0/communicators/gpt", json=squat.model_dump(mode="json"),
              headers=auth(toks["ascend-0"]))
    assert r.status_code == 403 and "not a host of job 'gpt'" in r.json()["message"]
    # ... and cannot claim a name nobody created either.
    free = squat.model_copy(update={"job": "mine"})
    r = c.put("/v1/hosts/ascend-0/communicators/mine", json=free.model_dump(mode="json"),
              headers=auth(toks["ascend-0"]))
    assert r.status_code == 404 and "PUT /v1/jobs/mine" in r.json()["message"]
    # A host of the job cannot pull another host into it.
    r = c.put("/v1/hosts/h100-1/communicators/gpt", json=squat.model_dump(mode="json"),
              headers=auth(toks["h100-1"]))
    assert r.status_code == 409 and "registered hosts" in r.json()["message"]
    # The honest hosts report it as created, and it is planned.
    for h in ("h100-1", "h100-2"):
        rep = reports[h][0]
        r = c.put(f"/v1/hosts/{h}/communicators/gpt", json=rep.model_dump(mode="json"),
                  headers=auth(toks[h]))
        assert r.status_code == 200 and r.json()["hosts_expected"] == 2, r.text
    assert r.json()["complete"] is True
    # Agents cannot create or delete jobs; the scheduler token can, and only that.
    for method in ("PUT", "DELETE"):
        r = c.request(method, "/v1/jobs/other", json={"hosts": ["ascend-0"]},
                      headers=auth(toks["ascend-0"]))
        assert r.status_code == 403
    view = c.get("/v1/jobs/gpt", headers=auth(ADMIN)).json()
    assert view["hosts_expected"] == ["h100-1", "h100-2"] and view["complete"]


def test_jobs_are_created_once_by_their_scheduler(tmp_path, scenario):
    from fastapi.testclient import TestClient

    from icefabric.controller.app import create_app
    from icefabric.controller.settings import Settings
    from icefabric.schemas_service import FabricUpload
    from icefabric.topology.serialize import fabric_to_dict

    ls, fabric, *_ = scenario
    s = Settings(database_url=f"sqlite:///{tmp_path}/j.db", admin_token=ADMIN,
                 scheduler_token="slurm-hook", policy="ecmp")
    with TestClient(create_app(s)) as c:
        c.app.state.core.set_fabric(FabricUpload(topology=fabric_to_dict(fabric)))
        sched = auth("slurm-hook")
        r = c.put("/v1/jobs/j1", json={"hosts": ["h100-0", "h100-1"]}, headers=sched)
        assert r.status_code == 201 and r.json()["hosts_expected"] == ["h100-0", "h100-1"]
        r = c.put("/v1/jobs/j1", json={"hosts": ["h100-1", "h100-0"]}, headers=sched)
        assert r.status_code == 200  # the same again: nothing changes
        r = c.put("/v1/jobs/j1", json={"hosts": ["h100-0", "ascend-0"]}, headers=sched)
        assert r.status_code == 409 and "delete it first" in r.json()["message"]
        r = c.put("/v1/jobs/j2", json={"hosts": ["nowhere-9"]}, headers=sched)
        assert r.status_code == 422 and "nowhere-9" in r.json()["message"]
        assert c.get("/v1/jobs", headers=sched).status_code == 403  # views: admin only
        assert c.get("/v1/fabric", headers=sched).status_code == 403
        assert c.delete("/v1/jobs/j1", headers=sched).status_code == 204
        assert c.delete("/v1/jobs/j1", headers=sched).status_code == 404


def test_an_agents_text_cannot_forge_a_log_line(two_hosts, caplog):
    c, toks, _ = two_hosts
    caplog.set_level(logging.INFO, logger="icefabric.controller.core")
    forged = "bad plan\nINFO icefabric.controller.core: event link_down leaf0-spine0 from admin"
    r = c.post("/v1/events", json={"events": [{"kind": "plan_rejected", "message": forged},
                                              {"kind": "note", "nic": "n\nx"}]},
               headers=auth(toks["h100-0"]))
    assert r.status_code == 202
    recs = [x for x in caplog.records if x.getMessage().startswith("event ")]
    assert [x.levelno for x in recs] == [logging.WARNING, logging.INFO]  # a refusal warns
    assert all("\n" not in x.getMessage() for x in recs)
    assert "from h100-0: 'bad plan\\nINFO" in recs[0].getMessage()
