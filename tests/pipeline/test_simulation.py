"""simulate(): pacing on the fluid engine, none on the flow engine, stalls are errors."""

import numpy as np
import pytest

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.engine.options import EngineOptions
from icefabric.engine.problem import EngineError
from icefabric.pipeline import Plan, plan, simulate
from icefabric.pipeline.plans import LinkEvent
from icefabric.policies.base import get_policy
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL, LINK_FABRIC

SIZE = 1 << 24


@pytest.fixture
def two_servers(tiny_profile):
    f = leaf_spine([ServerGroup(tiny_profile, 2, "t")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("j", f, f.nodes_of_kind(ACCEL), channels=2),
                   "all_reduce", SIZE)
    return f, wb.build(node_ip=f.node_ip)


def test_fluid_runs_paced_flows_at_their_pacer_rate(two_servers):
    f, _ = two_servers
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("j", f, f.nodes_of_kind(ACCEL), channels=2,
                                    qps_per_connection=3), "all_reduce", SIZE)
    wl = wb.build(node_ip=f.node_ip)
    ice = plan(f, wl, get_policy("ice"))
    fluid = EngineOptions(engine="fluid", cc="none", pfc="off", wire_overhead=1.0, ack_bytes=0)
    paced = simulate(ice, fluid).collectives[0].time_ns
    unpaced = simulate(plan(f, wl, get_policy("spray")), fluid).collectives[0].time_ns
    # 2 channels of 100G NICs, 3 QPs each: a QP's 33.3 Gb/s share goes out as the NIC's
    # 30 Gb/s static-rate step, and the pacers hold each channel at 90 Gb/s
    assert paced / unpaced == pytest.approx(100 / 90, rel=5e-3)
    # the flow engine gives every flow its max-min rate: the same time as spraying
    flow = EngineOptions(engine="flow")
    assert simulate(ice, flow).collectives[0].time_ns == \
        simulate(plan(f, wl, get_policy("spray")), flow).collectives[0].time_ns


def test_a_flow_that_can_never_finish_is_an_engine_error(two_servers):
    f, wl = two_servers
    p = plan(f, wl, get_policy("ecmp"))
    # every uplink of the first QP's leaf fails and nobody re-routes
    leaf = f.nic_leaf[wl.qp_src_nic[0]]
    ups = np.flatnonzero((f.link_kind == LINK_FABRIC) & ((f.link_src == leaf)
                                                         | (f.link_dst == leaf)))
    stuck = Plan(f, wl, p.policy, p.paths, events=(LinkEvent(1000, ups, False, p.paths),))
    with pytest.raises(EngineError, match="flows unfinished .* a failed link nobody routed"):
        simulate(stuck, EngineOptions(engine="fluid", max_time_ns=5e6))
    with pytest.raises(EngineError, match="cross failed links and were never rerouted"):
        simulate(stuck, EngineOptions(engine="flow"))


def test_trace_records_switch_queues_and_the_largest_flows(two_servers):
    f, wl = two_servers
    res = simulate(plan(f, wl, get_policy("ecmp")),
                   EngineOptions(engine="fluid", trace=True, sample_interval_ns=50_000.0))
    ts = res.timeseries
    egress = [n for n, s in zip(f.link_names(), f.is_switch[f.link_src]) if s]
    assert sorted(ts["queue_bytes"]) == sorted(egress)
    assert sorted(ts["rate_gbps"]) == ["j:all_reduce:16777216#0", "j:all_reduce:16777216#1"]
    assert res.meta["fabric_links"] == np.flatnonzero(f.link_kind == LINK_FABRIC).tolist()


def test_a_replan_after_a_link_failure_repaces_the_fluid_flows(tiny_profile):
    """ICE re-plans its rates with its paths after a cable fails (98G -> 49G per channel
    when both share the leaf's one remaining uplink): the fluid engine switches the pacers
    with the paths, so the shared uplink is not overrun and DCQCN has nothing to mark."""
    from icefabric.pipeline.plans import LinkChange, with_link_events
    from icefabric.pipeline.problem import flow_caps

    f = leaf_spine([ServerGroup(tiny_profile, 2, "t")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=1, links_per_spine=2))
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("j", f, f.nodes_of_kind(ACCEL), channels=2),
                   "all_reduce", SIZE)
    wl = wb.build(node_ip=f.node_ip)
    p = plan(f, wl, get_policy("ice"))
    up = np.flatnonzero((f.link_kind == LINK_FABRIC) & (f.link_src == f.nic_leaf[
        wl.qp_src_nic[0]]))[0]
    cable = np.array([up, f.link_id(int(f.link_dst[up]), int(f.link_src[up]))])
    after = with_link_events(p, [LinkChange(20_000, False, f.node_names[f.link_src[up]],
                                            f.node_names[f.link_dst[up]], cable)])
    seen = {}

    def capture(prob, engine, **kw):
        seen["failures"] = prob.failures
        raise EngineError("captured")

    import icefabric.pipeline.simulation as sim
    orig = sim.run_engine
    sim.run_engine = capture
    try:
        with pytest.raises(EngineError, match="captured"):
            simulate(after, EngineOptions(engine="fluid"))
    finally:
        sim.run_engine = orig
    np.testing.assert_allclose(seen["failures"][0].flow_rate_cap_bps,
                               flow_caps(wl, after.final), rtol=0)
    res = simulate(after, EngineOptions(engine="fluid"))
    assert (res.flow_finish_ns > 20_000).all()
    assert sum(res.qp_cnp_count.values()) == 0


def test_a_paced_ring_over_parallel_cables_builds_no_queue():
    """ICE fills each of 2 parallel leaf-spine cables with 2 channels at the 200 Gb/s step;
    each cable carries the ACKs of its own reverse traffic only (1.4 %, inside the NICs'
    line rate). With every cable's ACKs on the last one (before fc067ec) that cable's
    queue reached 3.6 MB, ECN marked and DCQCN cut the rates (365.9 GB/s)."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=1, links_per_spine=2))
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("r", f, f.nodes_of_kind(ACCEL)), "all_reduce", 1 << 28)
    p = plan(f, wb.build(node_ip=f.node_ip), get_policy("ice"))
    assert np.all(p.paths.rate_bps == 200e9)
    res = simulate(p, EngineOptions(engine="fluid", endside=False))
    assert max(res.link_max_queue_bytes.values(), default=0.0) < 4154  # under a packet
    assert sum(res.qp_cnp_count.values()) == 0
    assert res.collectives[0].busbw_GBps == pytest.approx(370.7, abs=0.1)
