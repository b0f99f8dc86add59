"""The controller rebuilds the scenario's workload from agents' reports, QP for QP, and
plans the same in a planner thread or a planner process."""

import json
import pickle

import numpy as np
import pytest
from fastapi.testclient import TestClient

from icefabric.controller import planner
from icefabric.controller.app import create_app
from icefabric.controller.planner import JobState, Previous, compute_plan, job_specs
from icefabric.pipeline import build_workload
from icefabric.policies.base import PlanContext, get_policy
from icefabric.policies.ice import IcePolicy
from icefabric.schemas_service import QP_PLANS
from icefabric.wire import qp_ids

from .conftest import ADMIN, auth, create_jobs, enrol, wait_version


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


def _first_reports(reports):
    """Each job's report from one host only (its first host, by name)."""
    first = {}
    for host in sorted(reports):
        for rep in reports[host]:
            first.setdefault(rep.job, (host, rep.model_copy(update={"qps": []})))
    return {h: [r for hh, r in first.values() if hh == h] for h, _ in first.values()}


def test_job_states_travel_to_the_planner_process_as_report_json(scenario):
    """A snapshot pickles each report as its JSON, not as pydantic models (whose pickle
    held the controller's GIL 17 times longer), and comes back equal."""
    *_, reports = scenario
    jobs = _states(reports)
    jobs["gpt"].ended.add("nobody")
    data = pickle.dumps(jobs)
    assert b"CommReport" not in data and b"pydantic" not in data
    assert pickle.loads(data) == jobs


def test_a_job_is_planned_from_its_first_report(scenario):
    """Plan before connect: one host's report (no QPs yet) names the whole communicator,
    so the job's workload and ICE plan are those of every host's full report."""
    ls, fabric, wl, reports = scenario
    specs, _ = job_specs(fabric, _states(_first_reports(reports)))
    assert sorted(s.name for s in specs) == ["gpt", "mixed"]
    got = build_workload(fabric, specs)
    assert np.array_equal(got.qp_src_nic, wl.qp_src_nic)
    assert np.array_equal(got.qp_dst_nic, wl.qp_dst_nic)
    pol = get_policy("ice")
    a = pol.plan(PlanContext.create(fabric, wl, seed=ls.scenario.seed))
    b = pol.plan(PlanContext.create(fabric, got, seed=ls.scenario.seed))
    assert np.array_equal(a.sport, b.sport) and np.array_equal(a.route_links, b.route_links)


def test_a_job_that_ends_on_one_host_is_not_planned(scenario):
    _, fabric, _, reports = scenario
    states = _states(reports)
    states["mixed"].ended.add("ascend-3")
    specs, _ = job_specs(fabric, states)
    assert [s.name for s in specs] == ["gpt"]
    states["mixed"].ended.clear()  # the host reports it again
    assert len(job_specs(fabric, states)[0]) == 2


def _plans(settings, scenario, processes, tmp_path):
    from icefabric.schemas_service import FabricUpload
    from icefabric.topology.serialize import fabric_to_dict

    _, fabric, _, reports = scenario
    s = settings.model_copy(update={"planner_processes": processes, "policy": "ice",
                                    "database_url": f"sqlite:///{tmp_path}/p{processes}.db"})
    with TestClient(create_app(s)) as c:
        c.app.state.core.set_fabric(FabricUpload(topology=fabric_to_dict(fabric), plan_seed=7))
        create_jobs(c.app.state.core, reports)
        toks = {}
        for host, reps in reports.items():
            toks[host] = enrol(c, host)
            for rep in reps:
                c.put(f"/v1/hosts/{host}/communicators/{rep.job}",
                      json=rep.model_dump(mode="json"), headers=auth(toks[host]))
        wait_version(c, 1)
        return {h: json.loads(c.get(f"/v1/hosts/{h}/plan", headers=auth(t)).content)["qps"]
                for h, t in toks.items()}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_thread_and_process_planners_agree(settings, scenario, tmp_path):
    in_thread = _plans(settings, scenario, 0, tmp_path)
    in_process = _plans(settings, scenario, 1, tmp_path)
    assert in_thread == in_process
    assert any(q["backup_sport"] is not None for qs in in_thread.values() for q in qs)


def test_host_plans_carry_the_simulators_pacing_rates_also_after_a_failure(settings):
    """Done-when: per-QP rates in host plans equal those the simulator uses for the same
    scenario, are recomputed after a link failure, and reach the agent's actuator."""
    from icefabric.agent.actuators.twin import TwinNicActuator
    from icefabric.pipeline.plans import (
        LinkChange,
        with_link_events,
    )
    from icefabric.pipeline.problem import to_problem
    from icefabric.pipeline.recipe import RunSpec
    from icefabric.scenario.build import build_fabric
    from icefabric.scenario.loader import load
    from icefabric.schemas_service import FabricUpload, HostPlan
    from icefabric.topology.serialize import fabric_to_dict
    from icefabric.twin.run import host_reports
    from icefabric.wire import paths_from_host_plans

    ls = load("hetero-default")
    fabric, size = build_fabric(ls), 1 << 20
    spec = RunSpec.of(ls, fabric, "ice")
    sim = spec.size_plan(size)  # what `icefab simulate` runs
    sw = spec.workload(size)
    wl = sw.workload

    def rates(paths):
        return dict(zip(qp_ids(wl), paths.rate_bps.tolist(), strict=True))

    def fetch(c, toks):
        plans = {h: HostPlan.model_validate_json(c.get(f"/v1/hosts/{h}/plan",
                                                       headers=auth(t)).content)
                 for h, t in toks.items()}
        return plans, {q.qp_id: q for p in plans.values() for q in p.qps}

    s = settings.model_copy(update={"policy": "ice"})
    with TestClient(create_app(s)) as c:
        c.app.state.core.set_fabric(FabricUpload(topology=fabric_to_dict(fabric),
                                                 plan_seed=ls.scenario.seed))
        toks = {}
        reports = host_reports(fabric, sw.jobs, wl)
        create_jobs(c.app.state.core, reports)
        for host, reps in reports.items():
            toks[host] = enrol(c, host)
            for rep in reps:
                c.put(f"/v1/hosts/{host}/communicators/{rep.job}",
                      json=rep.model_dump(mode="json"), headers=auth(toks[host]))
        wait_version(c, 1)
        plans, got = fetch(c, toks)
        assert {k: q.rate_bps for k, q in got.items()} == rates(sim.paths)
        assert all(q.rate_bps is not None and q.rate_bps > 1e9 for q in got.values())
        # the simulator paces the flows with exactly these numbers (fluid engine problem)
        applied = paths_from_host_plans(wl, got)
        a, _ = to_problem(fabric, wl, applied, paced=True)
        b, _ = to_problem(sim.fabric, sim.workload, sim.paths, paced=True)
        assert np.array_equal(a.flow_rate_cap_bps, b.flow_rate_cap_bps)
        assert np.isfinite(a.flow_rate_cap_bps).sum() > 0
        # an agent's actuator receives them
        act = TwinNicActuator()
        act.apply(plans["h100-0"])
        assert act.state and all((act.state[q.qp_id].sport, act.state[q.qp_id].rate_bps) ==
                                 (q.sport, q.rate_bps)
                                 for q in plans["h100-0"].qps)
        # a link fails: the controller re-plans and recomputes the rates
        v = c.app.state.core.plan_version
        r = c.post("/v1/events", json={"events": [
            {"kind": "link_down", "link": {"a": "leaf0", "b": "spine0"}}]},
            headers=auth(ADMIN))
        assert r.status_code == 202
        wait_version(c, v + 1)
        _, after = fetch(c, toks)
    new = {k: q.rate_bps for k, q in after.items()}
    assert sum(new[k] != got[k].rate_bps for k in new) > 0
    # ... to what the simulator's re-plan after the same failure paces with
    cable = fabric.links_between("leaf0", "spine0")
    replan = with_link_events(sim, [LinkChange(10_000, False, "leaf0", "spine0", cable)])
    assert new == rates(replan.final)


def test_a_report_names_each_receive_side_once(scenario):
    """Receive sides carry no ordinal: two with one QP number on a NIC are refused, two
    with distinct numbers are taken (both ends are what the controller pairs)."""
    from icefabric.controller.planner import PlanInputError, check_report

    _, fabric, _, reports = scenario
    rep = reports["h100-0"][0]
    q = rep.qps[0]
    recv = [q.model_copy(update={"side": "receive", "lqpn": n}) for n in (0x77, 0x78)]
    check_report(fabric, "h100-0", rep.model_copy(update={"qps": [*rep.qps, *recv]}))
    twice = rep.model_copy(update={"qps": [*rep.qps, recv[0], recv[0]]})
    with pytest.raises(PlanInputError, match="duplicate QP .* QPN 119"):
        check_report(fabric, "h100-0", twice)


# -- what a plan starts from --------------------------------------------------------------------
def _compute(fabric, states, prev=None, policy="ice"):
    return compute_plan(fabric, states, policy_name=policy, seed=7, down_ids=[], prev=prev)


def _after(out, same_links=True):
    return Previous(out.paths, out.key, out.shape_key, out.ids, same_links)


def _by_qp(out) -> dict:
    return {q.qp_id: q for doc in out.hosts.values() for q in QP_PLANS.validate_json(doc)}


def _count_plans(monkeypatch) -> list:
    """Calls of the ICE policy's from-scratch planner."""
    calls = []
    real = IcePolicy.plan
    monkeypatch.setattr(IcePolicy, "plan", lambda self, ctx: calls.append(1) or real(self, ctx))
    return calls


def test_a_job_that_ends_moves_no_other_qp(scenario, monkeypatch):
    """Job ``mixed`` ends: every QP of ``gpt`` keeps its path, port and backup port, with
    no planning from scratch; the rates are recomputed (the freed capacity is shared)."""
    _, fabric, _, reports = scenario
    states = _states(reports)
    both = _compute(fabric, states)
    assert both.kind == "plan" and sorted(both.jobs) == ["gpt", "mixed"]
    calls = _count_plans(monkeypatch)
    states["mixed"].ended.add("ascend-3")
    left = _compute(fabric, states, _after(both))
    assert (left.kind, left.jobs, calls) == ("extend", ["gpt"], [])
    before, after = _by_qp(both), _by_qp(left)
    assert set(after) == {i for i in before if i.job == "gpt"} and after
    assert all((q.sport, q.backup_sport, q.routes) ==
               (before[i].sport, before[i].backup_sport, before[i].routes)
               for i, q in after.items())
    assert all(q.rate_bps is not None for q in after.values())
    # the same jobs planned from scratch move some of those ports
    fresh = _by_qp(_compute(fabric, states))
    assert calls == [1] and any(fresh[i].sport != q.sport for i, q in after.items())


def test_a_job_that_starts_is_planned_with_the_others_from_scratch(scenario):
    """The plan then depends on the jobs, not on the order their reports came in."""
    _, fabric, _, reports = scenario
    states = _states(reports)
    alone = {"gpt": states["gpt"]}
    first = _compute(fabric, alone)
    both = _compute(fabric, states, _after(first))
    assert both.kind == "plan"
    assert {i: q.sport for i, q in _by_qp(both).items()} == \
        {i: q.sport for i, q in _by_qp(_compute(fabric, states)).items()}


def test_reports_that_only_add_qp_numbers_are_published_without_planning(scenario,
                                                                         monkeypatch):
    """A job is planned from its first report; the QP numbers the other hosts report next
    only rename its QPs: the plan is published again under them, nothing is planned. The
    ECMP baselines, whose ports the kernel derives from the numbers, plan again."""
    _, fabric, wl, reports = scenario
    first = _compute(fabric, _states(_first_reports(reports)))
    calls = []
    real = planner.plan
    monkeypatch.setattr(planner, "plan", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    named = _compute(fabric, _states(reports), _after(first))
    assert (named.kind, calls) == ("rename", [])
    got = _by_qp(named)
    assert {(q.lqpn, q.rqpn) for q in got.values()} == set(zip(wl.qp_lqpn.tolist(),
                                                                wl.qp_rqpn.tolist()))
    assert all(q.sport == _by_qp(first)[i].sport for i, q in got.items())
    assert _compute(fabric, _states(reports), _after(named)) is None  # nothing changed
    ecmp = _compute(fabric, _states(_first_reports(reports)), policy="ecmp")
    again = _compute(fabric, _states(reports), _after(ecmp), policy="ecmp")
    assert again.kind == "plan" and len(calls) == 2
