"""The plan contract, end to end: a policy's PathPlan -> per-host QP plans -> the HostPlan
JSON a controller serves -> each actuator -> what it puts in force, read back from that
actuator's own output (twin NIC table, dry-run calls, HCCL config file, the verbs shim's
PLAN line) and compared with the PathPlan it came from, QP by QP."""

from __future__ import annotations

import io
import re
import socket

import numpy as np
import pytest

from icefabric.agent.actuators import get_actuator
from icefabric.agent.actuators.hccl_cfg import FILE_NAME, parse_cfg
from icefabric.agent.shim_socket import ShimConn, parse_line
from icefabric.pipeline import plan
from icefabric.pipeline.recipe import RunSpec
from icefabric.policies.base import get_policy
from icefabric.qpid import QpId
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.schemas_service import HostPlan, QpPlan
from icefabric.units import bps_to_kbps
from icefabric.wire import host_plans, paths_from_host_plans, qp_hosts, qp_ids, srate_of


@pytest.fixture(scope="module")
def planned():
    ls = load("homog-small")
    fabric = build_fabric(ls)
    pol = get_policy("ice")
    sw = RunSpec(ls, fabric, pol).workload(1 << 20)
    p = plan(sw.fabric, sw.workload, pol, seed=ls.scenario.seed)
    hosts = host_plans(sw.fabric, sw.workload, p.paths)
    wire = {h: HostPlan.model_validate_json(HostPlan(
        host=h, version=1, fabric_version=1, policy="ice", created_at=0.0,
        qps=qps).model_dump_json()) for h, qps in hosts.items()}
    return sw, p.paths, wire


def _twin(act, plan: HostPlan, tmp_path) -> dict:
    return {k: (q.sport, q.rate_bps) for k, q in act.applied.items()}


def _dry_run(act, plan: HostPlan, tmp_path) -> dict:
    by_lqpn = {q.lqpn: q.qp_id for q in plan.qps}
    out: dict = {}
    for line in act.calls:
        m = re.match(r"mlx5dv_modify_qp_udp_sport\(qp=0x([0-9a-f]+) .*udp_sport=(\d+)\)", line)
        if m:
            out[by_lqpn[int(m[1], 16)]] = (int(m[2]), None)
        m = re.match(r"ibv_modify_qp_rate_limit\(qp=0x([0-9a-f]+), \{\.rate_limit=(\d+)", line)
        if m:
            k = by_lqpn[int(m[1], 16)]
            out[k] = (out[k][0], int(m[2]) or None)
    return out


def _hccl(act, plan: HostPlan, tmp_path) -> dict:
    ports = parse_cfg((tmp_path / FILE_NAME).read_text())
    return {q.qp_id: (ports[(q.src_ip, q.dst_ip)][q.ordinal], None) for q in plan.qps}


def _verbs(act, plan: HostPlan, tmp_path) -> dict:
    """Each QP connecting as the shim sees it (data side, in ordinal order): the agent's
    answer is the line the shim writes into the QP at INIT->RTR."""
    out = {}
    for job in sorted({q.job for q in plan.qps}):
        a, b = socket.socketpair()
        conn = ShimConn(a)
        conn.job = job
        for i, q in enumerate(sorted((q for q in plan.qps if q.job == job),
                                     key=lambda q: (q.src_ip, q.dst_ip, q.ordinal))):
            kind, f = parse_line(act._on_message(conn, "QP", {
                "seq": i, "dev": "mlx5_0", "port": 1, "lqpn": q.lqpn, "rqpn": q.rqpn,
                "sip": q.src_ip, "dip": q.dst_ip, "acc": 2}).decode())
            assert kind == "PLAN", (kind, f)
            out[q.qp_id] = (f["sport"], f["srate"] or None)
        a.close()
        b.close()
    return out


#: per actuator: how to make it, read back what it put in force, and the same quantity
#: from the plan (the actuator's unit: bit/s, kbit/s, IBV_RATE_*, or no rate)
CASES = {
    "twin": (lambda tmp: get_actuator("twin"), _twin, lambda r: r),
    "dry-run": (lambda tmp: get_actuator("dry-run", stream=io.StringIO()), _dry_run,
                lambda r: None if r is None else bps_to_kbps(r)),
    "hccl-cfg": (lambda tmp: get_actuator("hccl-cfg", directory=tmp), _hccl, lambda r: None),
    "verbs": (lambda tmp: get_actuator("verbs", socket_path=tmp / "s.sock"), _verbs,
              lambda r: srate_of(r) or None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_actuator_puts_the_planned_ports_and_rates_in_force(planned, name, tmp_path):
    sw, paths, wire = planned
    make, read, unit = CASES[name]
    in_force: dict = {}
    for h, hp in wire.items():
        d = tmp_path / h
        d.mkdir()
        act = make(d)
        res = act.apply(hp)
        assert res.failed == set() and res.applied == len(hp.qps), res.messages
        got = read(act, hp, d)
        assert len(got) == len(hp.qps)
        in_force.update(got)
    rates = [None if np.isinf(r) else r for r in paths.rate_bps.tolist()]
    assert any(r is not None for r in rates) and all(s >= 0 for s in paths.sport.tolist())
    want = {k: (s, unit(r)) for k, s, r in zip(qp_ids(sw.workload), paths.sport.tolist(),
                                               rates, strict=True)}
    assert in_force == want


def test_the_twin_gives_back_the_path_plan(planned):
    """The whole PathPlan (ports, backup ports, rates, routes, weights) round-trips through
    the wire and the twin's NIC tables."""
    sw, paths, wire = planned
    applied: dict[QpId, QpPlan] = {}
    for hp in wire.values():
        act = get_actuator("twin")
        act.apply(hp)
        applied.update(act.applied)
    assert set(qp_hosts(sw.fabric, sw.workload)) == set(wire)
    back = paths_from_host_plans(sw.workload, applied, policy=paths.policy)
    for f in ("sport", "backup_sport", "rate_bps", "route_qp", "route_weight",
              "route_indptr", "route_links"):
        assert np.array_equal(getattr(back, f), getattr(paths, f)), f
