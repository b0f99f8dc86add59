"""Every communication pattern replayed in NCCL's connection order on emulated hosts, with
the controller and one ``verbs`` agent per host on loopback (tests/agent/replay.py): every
data QP gets its planned port and (rounded) rate at INIT->RTR from the first communicator
on, no QP is re-ported live, and no receive-side or flush QP takes a data QP's port."""

from __future__ import annotations

import pytest

from icefabric.dataplane.roce import default_sports
from icefabric.wire import srate_of

from .replay import Replay, replay, twin_plan


def scenario(name: str, servers: int, gpus: int, collectives: str, *, channels: int,
             qps_per_connection: int = 1) -> str:
    """``servers`` H100 servers (one leaf each) and a job with ``gpus`` ranks per server
    running ``collectives`` (``kind[:algorithm]``, comma separated) one after another."""
    colls = ", ".join(f"{{kind: {k}{f', algorithm: {a}' if a else ''}}}"
                      for k, _, a in (c.partition(":") for c in collectives.split(",")))
    return f"""
name: {name}
seed: 3
fabric: {{kind: leaf-spine, servers_per_leaf: 1, spines: 4, links_per_spine: 1, oversub: 1.0}}
pools: [{{name: h100, server: hgx-h100, count: {servers}}}]
jobs:
  - {{name: train1, pools: [h100], ranks_per_server: {gpus}, channels: {channels},
     qps_per_connection: {qps_per_connection}, collectives: [{colls}]}}
sizes: {{min: 1MiB, max: 1MiB, factor: 2}}
"""


PATTERNS = {
    # name: (scenario, CCL processes per NIC)
    "ring-2-nodes-16-channels": (scenario("r2", 2, 1, "all_reduce", channels=16), 1),
    "ring-8-nodes-16-channels": (scenario("r8", 8, 1, "all_reduce", channels=16), 1),
    "tree-4-nodes": (scenario("t4", 4, 1, "all_reduce:tree", channels=2,
                              qps_per_connection=2), 1),
    "alltoall-4-nodes": (scenario("a4", 4, 1, "alltoall", channels=2), 1),
    "pxn-2-nodes-2-rails": (scenario("p2", 2, 2, "alltoall", channels=2), 1),
    "two-ranks-per-nic": (scenario("n2", 2, 1, "all_reduce", channels=16), 2),
    # NCCL connects a communicator's ring, tree and peer-to-peer (AllToAll) channels as
    # separate connection sets, as it does another communicator's: under one ICE_JOB they
    # share each NIC pair's data-QP ordinals in connection order, the naming's hard case
    "several-connection-sets-one-job": (
        scenario("s1", 2, 1, "all_reduce,alltoall,all_reduce:tree", channels=4), 1),
}


_REPLAYED: dict[str, Replay] = {}


def replayed(native, pattern: str) -> Replay:
    """:func:`replay` of ``pattern``, once per session (the twin test compares with it)."""
    if pattern not in _REPLAYED:
        yaml, ranks_per_nic = PATTERNS[pattern]
        _REPLAYED[pattern] = replay(native, yaml, ranks_per_nic=ranks_per_nic)
    return _REPLAYED[pattern]


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_every_data_qp_is_on_its_plan_from_the_first_communicator(native, pattern):
    r = replayed(native, pattern)
    data = [q for q in r.qps if q.qp_id is not None]
    others = [q for q in r.qps if q.qp_id is None]
    assert len(data) == len(r.first) and len({q.qp_id for q in data}) == len(data)
    # the plan made before any QP connected: every data QP's port and static-rate step
    assert [r.rtr_sport(q) for q in data] == [r.first[q.qp_id][0] for q in data]
    assert [r.rtr(q)["static_rate"] for q in data] == \
        [srate_of(r.first[q.qp_id][1]) for q in data]
    assert all(r.rtr(q)["static_rate"] > 0 for q in data)  # ICE paces every data QP
    # the QPs' numbers reached the controller, it paired the ends and re-planned: same
    # ports and rates, each plan entry naming its data QP by number; nothing moved live
    assert r.final == r.first
    assert all(r.final_qpns[q.qp_id] == (q.lqpn, q.rqpn) for q in data)
    assert r.live_changes() == []
    # receive sides and flush QPs keep the kernel's ports, with no rate
    assert [(r.rtr_sport(q), r.rtr(q)["static_rate"]) for q in others] == \
        [(None, 0)] * len(others)
    assert sum(q.flush for q in others) == len(others) - len(data)


def test_older_nccl_data_qps_reach_their_plan_through_the_controllers_pairing(native):
    """NCCL <= 2.28 and RCCL give the receive side the send side's access flags: at RTR a
    host cannot tell them, so on a 2-node ring (data both ways on each NIC pair) receive
    sides take data QPs' ordinals and ports. The hosts report both ends with their
    INIT->RTR times; the controller pairs them, tells each sender by the longer time and
    names the data QPs by number, and the agents re-port the misnamed ones live: every
    data QP ends on its planned port, with the same plan as before connection, and every
    receive side on the kernel's port. (Their
    rates are another matter: a static rate set at RTR can only be lowered live, where the
    device has a live rate limit at all; docs/verbs-shim.md.)"""
    r = replay(native, PATTERNS["ring-2-nodes-16-channels"][0], old_nccl=True)
    data = [q for q in r.qps if q.qp_id is not None]
    assert r.final == r.first
    assert all(r.final_qpns[q.qp_id] == (q.lqpn, q.rqpn) for q in data)
    assert [r.in_force(q) for q in data] == [r.final[q.qp_id][0] for q in data]
    # the documented limit: at RTR data QPs got other QPs' ports (or none); fixed live
    wrong_at_rtr = [q.lqpn for q in data if r.rtr_sport(q) != r.first[q.qp_id][0]]
    moved = [x for x in r.live_changes() if x["call"] == "mlx5dv_modify_qp_udp_sport"]
    assert wrong_at_rtr and set(wrong_at_rtr) <= {x["qpn"] for x in moved}
    assert all(x["rc"] == 0 for x in moved)
    # the receive sides that took a data QP's port at RTR are back on the kernel's
    recv = [q for q in r.qps if q.qp_id is None and not q.flush]
    assert any(r.rtr_sport(q) is not None for q in recv)
    assert [r.in_force(q) for q in recv] == [int(default_sports(q.lqpn, q.rqpn)) for q in recv]


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_the_twin_reports_the_replayed_ports_and_rates(native, pattern):
    """``icefab twin`` on the same scenario (its agents report the modelled QPs at once)
    applies the ports and rates the replayed hosts put on their data QPs at RTR, QP for
    QP, and agrees with the in-process plan, paths included."""
    r = replayed(native, pattern)
    twin, res = twin_plan(PATTERNS[pattern][0])
    at_rtr = {q.qp_id: (r.rtr_sport(q), r.rtr(q)["static_rate"]) for q in r.qps
              if q.qp_id is not None}
    assert set(twin) == set(at_rtr) == set(r.final)
    assert {k: (s, srate_of(b)) for k, (s, b) in twin.items()} == at_rtr
    assert twin == r.final
    # and the switches' hash models send every port on its planned path
    assert res.qp_mismatches == 0 and res.path_mismatches == 0 and res.agree
