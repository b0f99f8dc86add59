"""The controller rebuilds the scenario's workload from agents' reports, QP for QP, and
plans the same in a planner thread or a planner process."""

import json

import numpy as np
from fastapi.testclient import TestClient

from icefabric.controller.app import create_app
from icefabric.controller.planner import JobState, job_specs
from icefabric.pipeline import build_workload
from icefabric.policies.base import PlanContext, get_policy

from .conftest import auth, enrol, wait_version


def _states(reports, skip=()):
    jobs = {}
    for host, reps in reports.items():
        if host in skip:
            continue
        for rep in reps:
            jobs.setdefault(rep.job, JobState(rep.job)).reports[host] = rep
    return jobs


def test_reports_rebuild_the_scenario_workload_exactly(scenario):
    ls, fabric, wl, reports = scenario
    specs, errors = job_specs(fabric, _states(reports))
    got = build_workload(fabric, specs)
    assert errors == {}
    for name in ("flow_size_bytes", "flow_start_ns", "flow_latency_ns", "hop_src", "hop_dst",
                 "hop_src_nic", "hop_dst_nic", "hop_conn", "qp_src_nic", "qp_dst_nic",
                 "qp_lqpn", "qp_rqpn"):
        assert np.array_equal(getattr(got, name), getattr(wl, name)), name
    assert got.flow_deps == wl.flow_deps
    # Same plan as the in-process policy on the scenario's own workload.
    pol = get_policy("ice")
    a = pol.plan(PlanContext.create(fabric, wl, seed=ls.scenario.seed))
    b = pol.plan(PlanContext.create(fabric, got, seed=ls.scenario.seed))
    assert np.array_equal(a.sport, b.sport) and np.array_equal(a.route_links, b.route_links)


def test_incomplete_jobs_are_not_planned(scenario):
    _, fabric, _, reports = scenario
    specs, _ = job_specs(fabric, _states(reports, skip={"ascend-3"}))
    assert [s.name for s in specs] == ["gpt"]


def _plans(settings, scenario, processes, tmp_path):
    from icefabric.schemas_service import FabricUpload
    from icefabric.topology.serialize import fabric_to_dict

    _, fabric, _, reports = scenario
    s = settings.model_copy(update={"planner_processes": processes, "policy": "ice",
                                    "database_url": f"sqlite:///{tmp_path}/p{processes}.db"})
    with TestClient(create_app(s)) as c:
        c.app.state.core.set_fabric(FabricUpload(topology=fabric_to_dict(fabric), plan_seed=7))
        toks = {}
        for host, reps in reports.items():
            toks[host] = enrol(c, host)
            for rep in reps:
                c.put(f"/v1/hosts/{host}/communicators/{rep.job}",
                      json=rep.model_dump(mode="json"), headers=auth(toks[host]))
        wait_version(c, 1)
        return {h: json.loads(c.get(f"/v1/hosts/{h}/plan", headers=auth(t)).content)["qps"]
                for h, t in toks.items()}


def test_thread_and_process_planners_agree(settings, scenario, tmp_path):
    in_thread = _plans(settings, scenario, 0, tmp_path)
    in_process = _plans(settings, scenario, 1, tmp_path)
    assert in_thread == in_process
    assert any(q["backup_sport"] is not None for qs in in_thread.values() for q in qs)
