"""NCCL's connection sequence replayed through the shim on emulated hosts, one ``verbs``
agent each, with the ICE planner's host plans: which QPs take a plan, and that each data
QP gets its planned port and static rate at INIT->RTR (over the stand-in libibverbs)."""

from __future__ import annotations

from icefabric.agent.actuators import get_actuator
from icefabric.agent.actuators.verbs import srate_of
from icefabric.dataplane.roce import flow_label_to_udp_sport
from icefabric.pipeline.hosts import host_plans
from icefabric.pipeline.plans import plan, scenario_workload
from icefabric.policies.base import get_policy
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import loads
from icefabric.schemas_service import HostPlan

from .conftest import rtr_labels, two_server_ring

RING16 = two_server_ring("ring16", channels=16, qps_per_connection=1)


def test_replayed_two_node_ring_puts_every_data_qp_on_its_plan(native, tmp_path):
    """A 16-channel 2-node ring replayed the way NCCL >= 2.29.2 connects it, on two
    emulated hosts (one agent each): per connection the receiver's QPs reach RTR first
    (ncclIbAccept, plus its GPU-flush QP), then the sender's data QPs (ncclIbConnect). On
    each host the receive side of B->A shares the NIC pair with the data QPs of A->B; every
    data QP gets its planned port and static rate at RTR, no receive-side QP does."""
    ls = loads(RING16)
    fabric = build_fabric(ls)
    sw = scenario_workload(ls, fabric, 1 << 20)
    plans = host_plans(sw.fabric, sw.workload, plan(sw.fabric, sw.workload,
                                                    get_policy("ice")).paths)
    acts = {h: get_actuator("verbs", socket_path=tmp_path / f"{h}.sock").start() for h in plans}
    runs = []
    try:
        for h, qps in plans.items():
            acts[h].apply(HostPlan(host=h, version=1, fabric_version=1, policy="ice",
                                   created_at=0.0, qps=qps))
        for h, qps in plans.items():
            s, d = qps[0].src_ip, qps[0].dst_ip  # one NIC per host: one pair per host
            peer = next(p for p in plans if p != h)
            assert {(q.src_ip, q.dst_ip) for q in qps} == {(s, d)} and len(qps) == 16
            # the receiver (the peer host) accepts first, then this host connects
            runs.append((None, _replay(native, tmp_path, acts, peer, d, s, 16, accept=True)))
            runs.append((qps, _replay(native, tmp_path, acts, h, s, d, 16)))
        for qps, (_, log, _, lqpns) in runs:
            labels, rates = rtr_labels(log), rtr_labels(log, "static_rate")
            if qps is None:  # receive side and flush: the kernel's ports, no rate
                assert set(labels.values()) == {0} and set(rates.values()) == {0}
                continue
            qps = sorted(qps, key=lambda q: q.ordinal)
            assert [int(flow_label_to_udp_sport(labels[q])) for q in lqpns] == \
                [q.sport for q in qps]
            assert [rates[q] for q in lqpns] == [srate_of(q.rate_bps) for q in qps]
            assert all(r > 0 for r in rates.values())  # ICE paces every data QP
    finally:
        for _, (proc, _, hold, _) in runs:
            hold.touch()
            proc.communicate(timeout=30)
        for a in acts.values():
            a.stop()


def _replay(native, tmp_path, acts, host, sip, dip, n, *, accept=False):
    """One CCL process of ``host`` connecting ``n`` QPs ``sip`` -> ``dip`` (NCCL's send side,
    or with ``accept`` its receive side and flush QP); returns (proc, log, hold, QPNs)."""
    tag = f"{host}-{'recv' if accept else 'send'}"
    log, hold = tmp_path / f"{tag}.log", tmp_path / f"{tag}.release"
    env = native.env(log, sip, ICE_SHIM_SOCKET=str(acts[host].server.path), ICE_JOB="train1",
                     FAKEVERBS_QPN_BASE=hex(0x1000 if accept else 0x2000),
                     **({"CCL_SIM_SIDE": "accept"} if accept else {}))
    proc = native.run("ccl_dlopen", n, dip, env, rqpn_base=0x3000, hold_ms=60_000,
                      hold_file=hold)
    lqpns = []
    for line in proc.stdout:
        if line.startswith("qp "):
            lqpns.append(int(line.split()[1]))
        if line.startswith("connect_ns_per_qp"):
            break
    return proc, log, hold, lqpns
