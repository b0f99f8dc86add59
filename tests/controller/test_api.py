"""The /v1 API end to end in-process: fabric, enrolment, reports, plans, events, views."""

import time
from concurrent.futures import ThreadPoolExecutor

from icefabric.schemas_service import HostPlan

from .conftest import ADMIN, auth, enrol, wait_version


def report_all(client, reports):
    tokens = {}
    for host, reps in reports.items():
        tokens[host] = enrol(client, host)
        for rep in reps:
            r = client.put(f"/v1/hosts/{host}/communicators/{rep.job}",
                           json=rep.model_dump(mode="json"), headers=auth(tokens[host]))
            assert r.status_code == 200, r.text
    return tokens


def test_health_and_metrics(client, settings):
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["policy"] == "ecmp"
    assert h["database"] == settings.database_url.split(":")[0].split("+")[0]
    assert client.get("/readyz").json() == h
    m = client.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    for name in ("ice_planning_seconds_count", "ice_agents_connected", "ice_plan_version",
                 "ice_replans_total"):
        assert name in m.text


def test_fabric_load_and_replace(loaded, scenario):
    _, fabric, *_ = scenario
    info = loaded.get("/v1/fabric", headers=auth(ADMIN)).json()
    assert info["version"] == 1 and info["links"] == fabric.n_links
    assert info["servers"] == len(fabric.servers)
    doc = loaded.get("/v1/fabric/topology", headers=auth(ADMIN)).json()
    assert doc["node_names"] == list(fabric.node_names)
    r = loaded.put("/v1/fabric", json={"topology": doc, "down_links": [
        {"a": "leaf0", "b": "spine0"}]}, headers=auth(ADMIN))
    assert r.status_code == 200 and r.json()["version"] == 2
    # a pair names every cable between its ends (this fabric has 2 per leaf-spine pair)
    assert r.json()["down_links"] == [{"a": "leaf0", "b": "spine0", "cable": k} for k in (0, 1)]
    r = loaded.put("/v1/fabric", json={"topology": doc, "down_links": [
        {"a": "spine0", "b": "leaf0", "cable": 1}]}, headers=auth(ADMIN))
    assert r.json()["down_links"] == [{"a": "leaf0", "b": "spine0", "cable": 1}]
    links = loaded.get("/v1/links", headers=auth(ADMIN)).json()
    assert sorted(x["name"] for x in links if not x["up"]) == ["leaf0->spine0/1",
                                                               "spine0->leaf0/1"]
    bad = loaded.put("/v1/fabric", json={"topology": doc, "down_links": [
        {"a": "leaf0", "b": "spine0", "cable": 2}]}, headers=auth(ADMIN))
    assert bad.status_code == 422
    assert bad.json()["message"] == ("down_links[0]: cable 2 between leaf0 and spine0: there "
                                     "are 2 (0-1)")
    bad = loaded.put("/v1/fabric", json={"topology": {"node_names": []}}, headers=auth(ADMIN))
    assert bad.status_code == 422 and "topology" in bad.json()["message"]
    bad = loaded.put("/v1/fabric", json={"topology": doc, "down_links": [
        {"a": "leaf0", "b": "leaf1"}]}, headers=auth(ADMIN))
    assert bad.status_code == 422 and "no link" in bad.json()["message"]


def test_reports_plan_longpoll_ack_and_events(loaded, scenario):
    ls, fabric, wl, reports = scenario
    tokens = report_all(loaded, reports)
    wait_version(loaded, 1)
    core = loaded.app.state.core
    assert sorted(core.plan.summary.jobs) == ["gpt", "mixed"]
    host = "h100-0"
    r = loaded.get(f"/v1/hosts/{host}/plan", headers=auth(tokens[host]))
    assert r.status_code == 200
    plan = HostPlan.model_validate_json(r.content)
    v = plan.version
    mine = [q for rep in reports[host] for q in rep.qps]
    assert len(plan.qps) == len(mine)
    assert {(q.src_ip, q.dst_ip, q.lqpn, q.rqpn) for q in plan.qps} == \
        {(q.src_ip, q.dst_ip, q.lqpn, q.rqpn) for q in mine}
    assert all(0xC000 <= q.sport <= 0xFFFF for q in plan.qps)
    # Long-poll with nothing newer answers 204 after the wait.
    r = loaded.get(f"/v1/hosts/{host}/plan", params={"after_version": v, "wait_s": 0.2},
                   headers=auth(tokens[host]))
    assert r.status_code == 204
    assert loaded.post(f"/v1/hosts/{host}/plan/ack", json={"version": v, "applied": 3},
                       headers=auth(tokens[host])).status_code == 204
    assert loaded.post(f"/v1/hosts/{host}/plan/ack", json={"version": v + 5, "applied": 3},
                       headers=auth(tokens[host])).status_code == 422
    # An agent's telemetry is taken; the operator's link-down event re-plans (a fabric
    # link: an agent may not report it), and the new plan avoids the link.
    r = loaded.post("/v1/events", json={"events": [
        {"kind": "cnp_rate", "counters": {"cnp_per_s": 12.0}}]}, headers=auth(tokens[host]))
    assert r.status_code == 202 and r.json()["replan"] is False
    r = loaded.post("/v1/events", json={"events": [
        {"kind": "link_down", "link": {"a": "leaf0", "b": "spine0"}}]}, headers=auth(ADMIN))
    assert r.status_code == 202 and r.json()["replan"] is True
    v_plan = core.plan_version  # the host's plan may be older: a later plan left it as it was
    assert v <= v_plan
    wait_version(loaded, v_plan + 1)
    r = loaded.get(f"/v1/hosts/{host}/plan", params={"after_version": v, "wait_s": 5},
                   headers=auth(tokens[host]))
    new = HostPlan.model_validate_json(r.content)  # the link moved some of this host's QPs
    assert new.version == v_plan + 1 and core.plan.summary.down_links[0].a == "leaf0"
    bad = {fabric.link_id(fabric.node_names.index("leaf0"), fabric.node_names.index("spine0")),
           fabric.link_id(fabric.node_names.index("spine0"), fabric.node_names.index("leaf0"))}
    assert not any(l in bad for q in new.qps for r in q.routes for l in r)
    # Views.
    jobs = loaded.get("/v1/jobs", headers=auth(ADMIN)).json()
    assert {j["job"] for j in jobs} == {"gpt", "mixed"} and all(j["complete"] for j in jobs)
    assert loaded.get("/v1/jobs/gpt", headers=auth(ADMIN)).json()["library"] == "nccl"
    assert loaded.get("/v1/jobs/nope", headers=auth(ADMIN)).status_code == 404
    plans = loaded.get("/v1/plans", headers=auth(ADMIN)).json()
    assert plans[0]["version"] == v_plan + 1 and plans[0]["reason"].startswith("replan")
    assert loaded.get(f"/v1/plans/{v}", headers=auth(ADMIN)).json()["version"] == v
    links = loaded.get("/v1/links", headers=auth(ADMIN)).json()
    down = [l for l in links if not l["up"]]
    # both parallel cables between leaf0 and spine0 (a link event names the node pair),
    # told apart by /k as the simulator's link names (result.json) do
    assert {l["name"] for l in down} == {"leaf0->spine0", "spine0->leaf0", "leaf0->spine0/1",
                                         "spine0->leaf0/1"}
    assert all(l["planned_qps"] == 0 for l in down)
    every = loaded.get("/v1/links", headers=auth(ADMIN), params={"kind": "all"}).json()
    assert [l["name"] for l in every] == list(fabric.link_names())
    assert {l["kind"] for l in every} == {"intra", "host", "fabric"} and \
        {l["kind"] for l in links} == {"fabric"}
    agents = loaded.get("/v1/agents", headers=auth(ADMIN)).json()
    assert len(agents) == len(reports) and any(a["applied_version"] == v for a in agents)
    mine = next(a for a in agents if a["host"] == host)
    assert mine["plan_version"] == v_plan + 1 and mine["applied_version"] == v
    assert len(loaded.get("/v1/events", headers=auth(ADMIN)).json()) == 2
    m = loaded.get("/metrics").text
    assert "ice_replans_total 1" in m and f"ice_plan_version {v_plan + 1}" in m
    # Link back up (operator) re-plans again.
    r = loaded.post("/v1/fabric/links", json={"links": [{"a": "spine0", "b": "leaf0",
                                                        "up": True}]}, headers=auth(ADMIN))
    assert r.status_code == 200 and r.json()["down_links"] == []
    wait_version(loaded, v_plan + 2)


def test_report_validation(loaded, scenario):
    _, _, _, reports = scenario
    tok = enrol(loaded, "h100-0")
    rep = reports["h100-0"][0]
    # Report for a job under the wrong path name.
    r = loaded.put("/v1/hosts/h100-0/communicators/other", json=rep.model_dump(mode="json"),
                   headers=auth(tok))
    assert r.status_code == 422 and "does not match" in r.json()["message"]
    # A QP whose source is not this host's NIC.
    bad = rep.model_copy(update={"qps": [rep.qps[0].model_copy(update={"src_ip": "10.9.9.9"})]})
    r = loaded.put(f"/v1/hosts/h100-0/communicators/{rep.job}", json=bad.model_dump(mode="json"),
                   headers=auth(tok))
    assert r.status_code == 422 and "not a NIC of host" in r.json()["message"]
    # Unknown host in the fabric cannot enrol.
    r = loaded.post("/v1/agents", json={"host": "nope-1"}, headers=auth(ADMIN))
    assert r.status_code == 404


def test_report_before_fabric_is_409(client, scenario):
    _, _, _, reports = scenario
    tok = enrol(client, "h100-0")
    rep = reports["h100-0"][0]
    r = client.put(f"/v1/hosts/h100-0/communicators/{rep.job}", json=rep.model_dump(mode="json"),
                   headers=auth(tok))
    assert r.status_code == 409 and "fabric" in r.json()["message"]


def _all_planned(client, reports):
    """Every host reports; returns the tokens, the core and the settled plan version."""
    tokens = report_all(client, reports)
    core = client.app.state.core
    core.publisher.wait_idle()
    return tokens, core, core.plan_version


def test_a_job_change_wakes_only_the_hosts_it_changes(loaded, scenario):
    _, _, _, reports = scenario
    tokens, core, v = _all_planned(loaded, reports)
    gpt = {h for h, reps in reports.items() for r in reps if r.job == "gpt" and r.qps}
    assert gpt and set(reports) - gpt  # hosts of the other job only, too
    held = {h: core.host_version(h) for h in reports}
    assert loaded.delete("/v1/jobs/gpt", headers=auth(ADMIN)).status_code == 204
    wait_version(loaded, v + 1)
    assert {h for h in reports if core.host_version(h) == v + 1} == gpt
    assert core.plan.summary.hosts_changed == len(gpt)
    for h in sorted(reports):  # a long-poll answers at once for those, waits for the others
        r = loaded.get(f"/v1/hosts/{h}/plan", params={"after_version": held[h], "wait_s": 0.2},
                       headers=auth(tokens[h]))
        assert r.status_code == (200 if h in gpt else 204), h
        if h in gpt:
            plan = HostPlan.model_validate_json(r.content)
            assert plan.version == v + 1 and all(q.job != "gpt" for q in plan.qps)
    # an ack names the host's own version: a newer one has not been issued to it
    h = sorted(set(reports) - gpt)[0]
    r = loaded.post(f"/v1/hosts/{h}/plan/ack", json={"version": v + 1, "applied": 1},
                    headers=auth(tokens[h]))
    assert r.status_code == 422 and f"current {held[h]}" in r.json()["message"]


def test_a_cut_off_leaf_is_reported_as_no_path_and_the_rest_replanned(loaded, scenario):
    _, fabric, _, reports = scenario
    tokens, core, v = _all_planned(loaded, reports)
    cut = [{"a": "leaf3", "b": f"spine{i}", "up": False} for i in range(8)]
    r = loaded.post("/v1/fabric/links", json={"links": cut}, headers=auth(ADMIN))
    assert r.status_code == 200
    wait_version(loaded, v + 1)
    s = loaded.get("/v1/plans/current", headers=auth(ADMIN)).json()
    # "mixed" has ranks on ascend-2/-3 under leaf3: left out, with the reason; "gpt" goes on.
    assert s["jobs"] == ["gpt"] and [x["job"] for x in s["no_path"]] == ["mixed"]
    (np_,) = s["no_path"]
    assert np_["reason"].startswith("no working path") and "leaf3" in np_["reason"]
    assert np_["qps"] > 0 and 0 < len(np_["examples"]) <= 5
    plan = HostPlan.model_validate_json(loaded.get(
        "/v1/hosts/ascend-2/plan", headers=auth(tokens["ascend-2"])).content)
    assert plan.version == v + 1 and plan.qps == []
    down = {l for i in range(8) for l in (
        fabric.link_id(fabric.node_names.index("leaf3"), fabric.node_names.index(f"spine{i}")),
        fabric.link_id(fabric.node_names.index(f"spine{i}"), fabric.node_names.index("leaf3")))}
    for h in ("h100-1", "h100-2"):
        p = HostPlan.model_validate_json(loaded.get(f"/v1/hosts/{h}/plan",
                                                    headers=auth(tokens[h])).content)
        assert p.qps and {q.job for q in p.qps} == {"gpt"}
        assert not any(l in down for q in p.qps for r in q.routes for l in r)
    # The leaf comes back: both jobs are planned again.
    r = loaded.post("/v1/fabric/links", json={"links": [{**x, "up": True} for x in cut]},
                    headers=auth(ADMIN))
    wait_version(loaded, v + 2)
    s = loaded.get("/v1/plans/current", headers=auth(ADMIN)).json()
    assert sorted(s["jobs"]) == ["gpt", "mixed"] and s["no_path"] == []


def test_jobs_that_end_leave_the_plan(loaded, scenario):
    _, _, _, reports = scenario
    tokens, core, v = _all_planned(loaded, reports)
    for h, reps in reports.items():
        for rep in reps:
            if rep.job == "gpt":
                r = loaded.delete(f"/v1/hosts/{h}/communicators/gpt", headers=auth(tokens[h]))
                assert r.status_code == 204
    r = loaded.delete("/v1/hosts/h100-1/communicators/gpt", headers=auth(tokens["h100-1"]))
    assert r.status_code == 404 and "no report for job 'gpt'" in r.json()["message"]
    wait_version(loaded, v + 1)
    assert core.plan.summary.jobs == ["mixed"] and "gpt" not in core.jobs.states
    # The last job ends: an empty plan replaces it (no host keeps stale ports).
    for h, reps in reports.items():
        if any(rep.job == "mixed" for rep in reps):
            loaded.delete(f"/v1/hosts/{h}/communicators/mixed", headers=auth(tokens[h]))
    wait_version(loaded, v + 2)
    assert core.plan.summary.jobs == [] and core.plan.summary.qps == 0
    p = loaded.get("/v1/hosts/h100-0/plan", headers=auth(tokens["h100-0"])).json()
    assert p["version"] == v + 2 and p["qps"] == []


def test_a_report_with_ccl_errors_marks_the_job_failing(loaded, scenario):
    # The EJ0001 error torch_npu printed in hiyouga/LlamaFactory#3839 (tests/collect/corpus).
    from pathlib import Path

    from icefabric.collect.hccl_log import parse_hccl_log

    corpus = Path(__file__).resolve().parents[1] / "collect" / "corpus"
    errors = parse_hccl_log((corpus / "hccl-llamafactory-3839-ej0001.log").read_text()).errors
    *_, reports = scenario
    host, (rep, *_) = next(iter(reports.items()))
    token = enrol(loaded, host)
    ok = loaded.put(f"/v1/hosts/{host}/communicators/{rep.job}",
                    json=rep.model_dump(mode="json"), headers=auth(token)).json()
    assert ok["failing"] is False
    bad = rep.model_copy(update={"errors": errors})
    r = loaded.put(f"/v1/hosts/{host}/communicators/{rep.job}",
                   json=bad.model_dump(mode="json"), headers=auth(token))
    assert r.status_code == 200 and r.json()["failing"] is True
    view = loaded.get(f"/v1/jobs/{rep.job}", headers=auth(ADMIN)).json()
    assert view["failing"] is True
    assert [(e["host"], e["error"]["code"], e["error"]["rank"]) for e in view["errors"]] == [
        (host, "ERR02200", 3), (host, "EJ0001", 3)]
    assert view["errors"][1]["error"]["reason"] == "Maybe the last training process is running."
    too_many = rep.model_dump(mode="json") | {"errors": [errors[0].model_dump()] * 257}
    r = loaded.put(f"/v1/hosts/{host}/communicators/{rep.job}", json=too_many,
                   headers=auth(token))
    assert r.status_code == 422


def test_a_long_poll_before_the_first_plan_waits_for_it(loaded, scenario):
    """An agent that joins before its host has a document, asking for any version
    (after_version -1), is parked until its first plan, not answered 204 at once (which
    made every agent of a join storm poll in a busy loop)."""
    _, _, _, reports = scenario
    host = sorted(reports)[0]
    token = enrol(loaded, host)
    with ThreadPoolExecutor(1) as pool:
        poll = pool.submit(loaded.get, f"/v1/hosts/{host}/plan",
                           params={"after_version": -1, "wait_s": 20}, headers=auth(token))
        time.sleep(0.3)
        assert not poll.done(), poll.result().status_code
        for rep in reports[host]:  # a job is planned from its first report
            r = loaded.put(f"/v1/hosts/{host}/communicators/{rep.job}",
                           json=rep.model_dump(mode="json"), headers=auth(token))
            assert r.status_code == 200, r.text
        r = poll.result(timeout=20)
    assert r.status_code == 200, r.text
    assert HostPlan.model_validate_json(r.content).host == host
