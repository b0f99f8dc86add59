"""The plan contract: a plan as hosts receive it (the wire models), stored, served and
written by the shim, and back, QP for QP; the QP names; the sentinel rule."""

import json

import numpy as np

from icefabric.ccl.communicator import Communicator
from icefabric.control.plan import single_path_plan
from icefabric.pipeline import plan
from icefabric.pipeline.jobs import JobSpec, build_workload
from icefabric.pipeline.recipe import RunSpec
from icefabric.policies.base import get_policy
from icefabric.qpid import QpId
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.schemas_service import HostPlan, PlanSummary
from icefabric.topology.model import ACCEL
from icefabric.wire import (
    host_document,
    host_plans,
    host_record,
    path_record,
    paths_from_host_plans,
    paths_from_record,
    qp_hosts,
    qp_ids,
    qp_jobs,
    qp_ordinals,
    rate_kbps,
    shim_plan,
)

FIELDS = ("sport", "backup_sport", "rate_bps", "route_qp", "route_weight", "route_indptr",
          "route_links")


def test_host_plans_round_trip_ports_backups_rates_and_routes():
    ls = load("hetero-default")
    fabric = build_fabric(ls)
    pol = get_policy("ice")
    wl = RunSpec(ls, fabric, pol).workload(1 << 20).workload
    p = plan(fabric, wl, pol, seed=ls.scenario.seed).paths
    hosts = host_plans(fabric, wl, p)
    assert set(hosts) == set(qp_hosts(fabric, wl))
    # stored, served and received as an agent receives them
    summary = PlanSummary(version=3, policy="ice", created_at=1.0, reason="r", planning_ms=1,
                          jobs=[], qps=wl.n_qps, hosts=len(hosts), down_links=[],
                          fabric_version=2)
    docs = {h: HostPlan.model_validate_json(host_document(summary, h, host_record(q)))
            for h, q in hosts.items()}
    assert all((d.host, d.version, d.fabric_version) == (h, 3, 2) for h, d in docs.items())
    got = {q.qp_id: q for d in docs.values() for q in d.qps}
    assert set(got) == set(qp_ids(wl)) and len(got) == wl.n_qps
    back = paths_from_host_plans(wl, got, policy="ice")
    for name in FIELDS:
        assert np.array_equal(getattr(back, name), getattr(p, name)), name
    assert np.all(np.isfinite(back.rate_bps)) and np.any(back.backup_sport >= 0)
    stored, key, shape = paths_from_record(json.dumps(path_record(p, "k1", "s1")))
    assert (key, shape) == ("k1", "s1") and all(
        np.array_equal(getattr(stored, f), getattr(p, f)) for f in FIELDS)
    assert paths_from_record(json.dumps(path_record(None, "k2"))) == (None, "k2", "")


def test_no_port_and_no_rate_are_none_on_the_wire_and_minus_one_and_zero_on_the_shim(
        small_fabric):
    """The sentinel rule: arrays -1 / inf, wire None, shim line -1 / 0; and back."""
    acc = small_fabric.nodes_of_kind(ACCEL)
    comm = Communicator("j", small_fabric, acc[[0, 8]], channels=1)
    wl = build_workload(small_fabric, [JobSpec(comm, (("all_reduce", None),), 1 << 20)])
    n = wl.n_qps
    sport = np.where(np.arange(n) % 2 == 0, -1, 50000 + np.arange(n))
    rate = np.where(np.arange(n) % 2 == 0, np.inf, 25e9)
    p = single_path_plan([np.array([0])] * n, sport, "x", rate_bps=rate,
                         backup_sport=np.full(n, -1))
    qps = [q for qs in host_plans(small_fabric, wl, p).values() for q in qs]
    by_id = {q.qp_id: q for q in qps}
    wire = [by_id[i] for i in qp_ids(wl)]
    assert [(q.sport, q.rate_bps, q.backup_sport) for q in wire[:2]] == [
        (None, None, None), (50001, 25e9, None)]
    assert [shim_plan(q) for q in wire[:2]] == [{"sport": -1, "srate": 0},
                                                {"sport": 50001, "srate": 15}]  # IBV_RATE_25_GBPS
    back = paths_from_host_plans(wl, by_id)
    assert np.array_equal(back.sport, sport) and np.array_equal(back.rate_bps, rate)
    assert np.all(back.backup_sport == -1)


def test_rate_conversion():
    assert rate_kbps(None, unset=-1) == -1 and rate_kbps(None, unset=0) == 0
    assert rate_kbps(25e9, unset=0) == 25_000_000 and rate_kbps(10.0, unset=0) == 1


def test_ordinals_count_qps_per_job_and_nic_pair(small_fabric):
    acc = small_fabric.nodes_of_kind(ACCEL)
    # two jobs over the same NIC pairs, the first one's name sorting last
    jobs = [JobSpec(Communicator(name, small_fabric, acc[:16], channels=4,
                                 qps_per_connection=2), (("all_reduce", None),), 1 << 20)
            for name in ("j", "b")]
    wl = build_workload(small_fabric, jobs)
    o = qp_ordinals(wl)
    seen: dict[tuple, int] = {}
    for q in range(wl.n_qps):  # creation order, one counter per (job, NIC pair)
        k = (qp_jobs(wl)[q], int(wl.qp_src_nic[q]), int(wl.qp_dst_nic[q]))
        assert o[q] == seen.get(k, 0)
        seen[k] = o[q] + 1
    assert o.max() >= 1
    ids = qp_ids(wl)
    assert len(set(ids)) == wl.n_qps and ids == [
        QpId(j, s, d, int(n)) for j, s, d, n in zip(
            qp_jobs(wl), wl.qp_src_ip.tolist(), wl.qp_dst_ip.tolist(), o, strict=True)]
    assert ids[0].job == "j" and ids[-1].job == "b"
