"""Fluid engine: hand-computed cases, PFC back-pressure and victims, conservation, determinism."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from icefabric.engine.problem import LinkFailure, build_problem, csr_from_lists
from icefabric.engine.registry import get_engine

run = get_engine("fluid")


def star(rates_gbps, flows, delay_ns=1000, **kw):
    """Hosts h0..h{n-1} on one switch (node n). ``flows``: (src, dst, size_bytes)."""
    n = len(rates_gbps)
    sw = n
    cap, src, dst = [], [], []
    for h, r in enumerate(rates_gbps):
        for a, b in ((h, sw), (sw, h)):
            cap.append(r * 1e9)
            src.append(a)
            dst.append(b)
    up = {h: 2 * h for h in range(n)}
    down = {h: 2 * h + 1 for h in range(n)}
    routes = [[up[s], down[d]] for s, d, _ in flows]
    return build_problem(link_capacity_bps=cap, link_delay_ns=[delay_ns] * len(cap),
                         flow_size_bytes=[f[2] for f in flows], routes=routes,
                         route_flow=list(range(len(flows))), route_qp=list(range(len(flows))),
                         link_src=src, link_dst=dst, node_is_switch=[False] * n + [True],
                         link_names=[f"{a}->{b}" for a, b in zip(src, dst, strict=True)], **kw)


def test_single_flow_single_link_is_size_over_capacity_plus_latency():
    prob = build_problem(link_capacity_bps=[100e9], link_delay_ns=[1000],
                         flow_size_bytes=[1_000_000], routes=[[0]], route_flow=[0],
                         flow_latency_ns=[2345])
    res = run(prob)
    assert res.flow_finish_ns[0] == 80_000 + 2345
    assert res.link_bytes[0] == pytest.approx(1_000_000)


def test_wire_overhead_and_two_hop_pass_through():
    prob = star([100, 100], [(0, 1, 4_096_000)])
    res = run(prob, wire_overhead=4132 / 4096)
    assert res.flow_finish_ns[0] == round(4_132_000 * 8 / 100)  # ns
    assert res.link_max_queue_bytes == {}
    assert res.link_pfc_pause_ns == {}


def test_two_senders_into_25g_port_finish_at_receiver_rate_under_pfc():
    prob = star([100, 100, 25], [(0, 2, 4_000_000), (1, 2, 4_000_000)])
    res = run(prob, cc="none", pfc="dynamic")
    ideal = 8_000_000 * 8 / 25e9 * 1e9
    assert res.flow_finish_ns.max() == pytest.approx(ideal, rel=0.01)
    # both senders were paused (PFC back-pressure), never more than ~ the run time
    assert set(res.link_pfc_pause_ns) == {"0->3", "1->3"}
    assert max(res.link_pfc_pause_ns.values()) < ideal
    # the static (htsim-like) threshold gives the same drain time
    res2 = run(prob, cc="none", pfc="static")
    assert res2.flow_finish_ns.max() == pytest.approx(ideal, rel=0.01)
    assert res2.link_max_queue_bytes["3->2"] == pytest.approx(2 * 1_048_576, rel=0.05)


def two_switch_victim():
    """h0,h1 on s0; h2 (25G) and h3 on s1; s0->s1 100G. Incast h0,h1 -> h2; victim h1 -> h3
    shares h1's NIC and the s0->s1 transmitter with the incast."""
    # nodes: h0 0, h1 1, h2 2, h3 3, s0 4, s1 5
    links = [(0, 4, 100), (4, 0, 100), (1, 4, 100), (4, 1, 100), (2, 5, 25), (5, 2, 25),
             (3, 5, 100), (5, 3, 100), (4, 5, 100), (5, 4, 100)]
    lid = {(a, b): i for i, (a, b, _) in enumerate(links)}

    def path(*nodes):
        return [lid[(a, b)] for a, b in zip(nodes[:-1], nodes[1:], strict=True)]

    routes = [path(0, 4, 5, 2), path(1, 4, 5, 2), path(1, 4, 5, 3)]
    return build_problem(link_capacity_bps=[c * 1e9 for _, _, c in links],
                         link_delay_ns=[1000] * len(links),
                         flow_size_bytes=[3_000_000, 3_000_000, 3_000_000], routes=routes,
                         route_flow=[0, 1, 2], route_qp=[0, 1, 2],
                         link_src=[a for a, _, _ in links], link_dst=[b for _, b, _ in links],
                         node_is_switch=[False] * 4 + [True, True],
                         link_names=[f"{a}->{b}" for a, b, _ in links],
                         flow_names=["inc0", "inc1", "victim"])


def test_pfc_victim_is_blocked_by_its_paused_transmitter():
    prob = two_switch_victim()
    free = run(prob, pfc="off")  # infinite buffers: the victim only shares link capacity
    held = run(prob, pfc="static")
    assert held.flow_finish_ns[2] > 1.5 * free.flow_finish_ns[2]
    # pauses spread hop by hop: s1 pauses s0->s1, s0 pauses both host NICs
    assert {"4->5", "0->4", "1->4"} <= set(held.link_pfc_pause_ns)
    assert free.link_pfc_pause_ns == {}


def test_bytes_conserved_and_deterministic():
    prob = two_switch_victim()
    a = run(prob, cc="dcqcn", pfc="dynamic", seed=3)
    b = run(prob, cc="dcqcn", pfc="dynamic", seed=3)
    assert np.array_equal(a.flow_finish_ns, b.flow_finish_ns)
    assert a.link_max_queue_bytes == b.link_max_queue_bytes
    assert a.qp_cnp_count == b.qp_cnp_count
    inc = prob.incidence().toarray()
    expected = inc @ prob.flow_size_bytes
    assert a.link_bytes == pytest.approx(expected, rel=1e-6, abs=1.0)


def test_dependencies_start_after_latency_of_last_prerequisite():
    prob = star([100, 100, 100], [(0, 1, 1_000_000), (1, 2, 500_000), (2, 0, 1_000_000)],
                deps=[[], [], [0, 1]], flow_latency_ns=[5000, 7000, 0])
    res = run(prob)
    assert res.flow_finish_ns[0] == 80_000 + 5000
    assert res.flow_start_ns[2] == max(res.flow_finish_ns[0], res.flow_finish_ns[1])
    assert res.flow_finish_ns[2] == res.flow_start_ns[2] + 80_000


def test_coupled_flow_runs_at_its_slowest_route_and_pacer_caps():
    # one flow, two routes of weight 1 on links of 100G and 50G: rate = 50G
    prob = build_problem(link_capacity_bps=[100e9, 50e9], link_delay_ns=[0, 0],
                         flow_size_bytes=[1_000_000], routes=[[0], [1]], route_flow=[0, 0])
    res = run(prob)
    assert res.flow_finish_ns[0] == 160_000
    capped = build_problem(link_capacity_bps=[100e9], link_delay_ns=[0],
                           flow_size_bytes=[1_000_000], routes=[[0]], route_flow=[0],
                           flow_rate_cap_bps=[10e9])
    assert run(capped).flow_finish_ns[0] == 800_000


def test_dcqcn_incast_cuts_rates_and_counts_cnps():
    prob = star([100] * 5, [(i, 0, 2_000_000) for i in range(1, 5)])
    pfc_only = run(prob, cc="none")
    dc = run(prob, cc="dcqcn", dcqcn="hpcc_ns3_100g")
    assert dc.qp_cnp_count and sum(dc.qp_cnp_count.values()) > 0
    assert dc.link_ecn_marked_frac
    assert max(dc.link_max_queue_bytes.values()) < max(pfc_only.link_max_queue_bytes.values())
    assert dc.makespan_ns >= pfc_only.makespan_ns * 0.98


def chain(delay_ns):
    """h0 -(100G)-> sA -(50G)-> sB -(25G)-> h2, and the reverse links. One flow: both switch
    queues fill, sA's at 6.25 B/ns and sB's at 3.125 B/ns (hand-computed from the rates)."""
    links = [(0, 1, 100), (1, 2, 50), (2, 3, 25), (1, 0, 100), (2, 1, 50), (3, 2, 25)]
    return build_problem(link_capacity_bps=[c * 1e9 for *_, c in links],
                         link_delay_ns=[delay_ns] * 6, flow_size_bytes=[50_000_000],
                         routes=[[0, 1, 2]], route_flow=[0], route_qp=[0],
                         link_src=[a for a, *_ in links], link_dst=[b for _, b, _ in links],
                         node_is_switch=[False, True, True, False])


def cnp_timeline(prob, **opts):
    """Step a DCQCN run one kernel step at a time: (step end ns, marked bytes per link,
    CNPs the QP has seen) after each step, until its first CNP."""
    from icefabric.dataplane.ecn import RedParams
    from icefabric.engine import fluid_kernel as fk
    from icefabric.engine.fluid import FluidConfig, FluidSim

    # every byte past 40 kB is marked; small packets: many marks, a CNP draw is ~certain
    red = RedParams(kmin_bytes=40_000, kmax_bytes=40_001, pmax=1.0)
    sim = FluidSim(prob, FluidConfig(cc="dcqcn", dcqcn="hpcc_ns3_100g", red=red, pfc="off",
                                     packet_bytes=1000.0, **opts))
    net = sim._net()
    st = sim._state(net)
    out = []
    while not out or out[-1][2] == 0:
        net.cfg[fk.C_MAX_STEPS] = st.si[fk.I_STEPS] + 1  # exactly one more step
        assert fk.advance(net, st, sim.rng) == fk.MAX_STEPS, "the flow ended without a CNP"
        out.append((st.sf[fk.F_T], st.f[fk.S_MARKED_BYTES, :6].copy(), st.cc[-1, 0]))
    return out


def _first_cnp_due(delay_ns):
    """Hand computation for ``chain``: sA's queue (6.25 B/ns) passes Kmin = 40 kB at 6400 ns;
    the step lands 1 ns past it and marks. The marked packet then waits behind sB's queue
    (3.125 B/ns x t, drained at 3.125 B/ns: t ns), crosses sA->sB and sB->h2 (propagation
    plus a 1000-byte packet at 50 and 25 Gb/s: 160 + 320 ns), and the ACK comes back over
    the three links (propagation only: no ACK bytes). ns-3 delivers the CNP then."""
    t_mark = 40_000 / 6.25 + 1
    return t_mark, t_mark + t_mark + (2 * delay_ns + 160 + 320) + 3 * delay_ns


@pytest.mark.parametrize("delay_ns", [1000, 100])
def test_a_cnp_arrives_after_the_queues_downstream_of_the_mark(delay_ns):
    """The first CNP reaches the sender in the step holding its hand-computed due time.
    With 100 ns links the delay (about 7.4 us) exceeds four base RTTs (2.4 us), the length
    of the delay line this engine used to have: it must not wrap round and arrive early.
    The line starts shorter than the delay and doubles twice before the CNP is due, the
    second time with marks pending (they must keep their due times)."""
    steps = cnp_timeline(chain(delay_ns))
    t_mark, due = _first_cnp_due(delay_ns)
    first_mark = next(t for t, marked, _ in steps if marked[1] > 0)
    assert first_mark == t_mark, "sA's queue should cross Kmin where the rates say"
    assert not any(marked[2] > 0 for t, marked, _ in steps if t <= t_mark), "sB marks later"
    (t_prev, *_), (t_cnp, *_) = steps[-2:]
    bucket = 250.0  # fluid._FB_BW: the delay line's resolution
    assert t_prev // bucket < due // bucket <= t_cnp // bucket, (
        f"first CNP in the step ending at {t_cnp} ns, due at {due} ns")


def test_a_delay_longer_than_the_line_is_clamped_not_wrapped(monkeypatch):
    """A delay line capped below the delay delivers the CNP at its last slot (as late as
    the line allows), never on a slot that wrapped round to an earlier time."""
    from icefabric.engine import fluid

    monkeypatch.setattr(fluid, "_FB_MAX_BYTES", 8)  # one slot per route: the cap binds
    prob = chain(100)
    sim = fluid.FluidSim(prob, fluid.FluidConfig(packet_bytes=1000.0))
    first, slots = sim._feedback_slots()
    need = int(np.ceil(sim.fb_lat.max() / 250.0)) + 8  # the unqueued latency, in slots
    assert first == slots == 1 << (need - 1).bit_length(), (
        "the line cannot grow; it holds the unqueued latency, rounded up to a power of two")
    steps = cnp_timeline(prob)
    t_mark, due = _first_cnp_due(100)
    last = (t_mark // 250 + slots) * 250  # the line's last slot at mark time
    assert last < due
    (t_prev, *_), (t_cnp, *_) = steps[-2:]
    assert t_prev < last <= t_cnp, f"first CNP in the step ending at {t_cnp} ns"


def test_link_failure_reroute_completes():
    # two parallel paths 0->1: direct link 0 (400G) and link 1 then 2 (100G)
    ip, li = csr_from_lists([[1, 2]])
    fail = LinkFailure(t_ns=50_000, links=np.array([0]), reroute_route=np.array([0]),
                       reroute_indptr=ip, reroute_links=li)
    prob = build_problem(link_capacity_bps=[400e9, 100e9, 100e9], link_delay_ns=[0, 0, 0],
                         flow_size_bytes=[5_000_000], routes=[[0]], route_flow=[0],
                         failures=[fail])
    res = run(prob, pfc="off")
    # 2.5 MB at 400G in 50 us, the rest at 100G
    assert res.flow_finish_ns[0] == pytest.approx(50_000 + 2_500_000 * 8 / 100, rel=1e-3)


def test_a_replan_sets_the_pacers_to_its_rates():
    """A re-plan's rates replace the pacers when its paths take over: one flow on a 400G
    link paced at 100G, re-paced at 200G 50 us in (a pure re-plan, no link goes down)."""
    ip, li = csr_from_lists([])
    replan = LinkFailure(t_ns=50_000, links=np.zeros(0, np.int64),
                         reroute_route=np.zeros(0, np.int64), reroute_indptr=ip,
                         reroute_links=li, flow_rate_cap_bps=np.array([200e9]))
    kw = dict(link_capacity_bps=[400e9], link_delay_ns=[0], flow_size_bytes=[5_000_000],
              routes=[[0]], route_flow=[0], flow_rate_cap_bps=[100e9])
    kept = run(build_problem(**kw), pfc="off").flow_finish_ns[0]
    res = run(build_problem(**kw, failures=[replan]), pfc="off")
    # 625 kB at 100G in the first 50 us, the rest at 200G
    assert res.flow_finish_ns[0] == pytest.approx(50_000 + 4_375_000 * 8 / 200, rel=2e-3)
    assert kept == pytest.approx(5_000_000 * 8 / 100, rel=2e-3)


def test_timeseries_and_unknown_option():
    prob = star([100, 100, 25], [(0, 2, 500_000), (1, 2, 500_000)], flow_names=["a", "b"])
    res = run(prob, cc="dcqcn", record_links=["4->2" if False else "3->2"], record_flows=["a"],
              sample_interval_ns=20_000)
    assert len(res.timeseries["t_us"]) == len(res.timeseries["queue_bytes"]["3->2"]) > 3
    assert max(res.timeseries["rate_gbps"]["a"]) <= 100.0
    with pytest.raises(TypeError):
        run(prob, no_such_option=1)


def test_endside_fallback_releases_a_pacer_that_reality_contradicts():
    """A flow paced above what its bottleneck can carry (a wrong plan) keeps getting CNPs;
    the end-side rules hand it back to DCQCN, and the result reports the fallback."""
    from icefabric.dataplane.endside import EndSideParams
    from icefabric.engine.fluid import run as run_fluid
    from icefabric.engine.problem import build_problem

    # two flows into one 100G egress; both paced at 80G (the plan assumed they were alone)
    prob = build_problem(link_capacity_bps=[100e9, 100e9, 100e9], link_delay_ns=[1000] * 3,
                         flow_size_bytes=[20e6, 20e6], routes=[[0, 2], [1, 2]],
                         route_flow=[0, 1], link_src=[0, 1, 2], link_dst=[2, 2, 3],
                         node_is_switch=[False, False, True, False],
                         link_kind=[1, 1, 1], flow_rate_cap_bps=[80e9, 80e9])
    paced = run_fluid(prob, cc="dcqcn", dcqcn="hpcc_ns3_100g", pfc="off",
                      endside=EndSideParams())
    assert paced.meta["endside_fallbacks"] >= 1
    fixed = run_fluid(prob, cc="dcqcn", dcqcn="hpcc_ns3_100g", pfc="off")
    assert fixed.meta["endside_fallbacks"] == 0


def test_flows_start_and_stop_inside_a_step_at_their_own_time():
    """Twelve flows, each from its own host to its own host, start 300 ns apart: a step
    (2 us at least) holds several starts and ends, yet each flow starts when it is due and
    ends exactly size / line rate later (its bytes are exact; only its rate is averaged
    over the steps it starts and ends in). Ending a step at every start and end took 25."""
    n = 12
    prob = star([100] * (2 * n), [(i, n + i, 250_000) for i in range(n)],
                flow_start_ns=[300 * i for i in range(n)])
    res = run(prob)
    assert res.flow_start_ns.tolist() == [300 * i for i in range(n)]
    assert res.flow_finish_ns.tolist() == [300 * i + 20_000 for i in range(n)]
    assert res.meta["steps"] <= 8, f"{res.meta['steps']} steps: flow events end steps"


def test_free_flowing_steps_hold_several_flow_events():
    """Forty flows on their own host pairs start 1 us apart: nothing queues and no QP sees
    a CNP (free-flowing), so a step whose rates changed is still steady and a quiet step
    holds the flow events of ``dt_free_ns`` (4 us): about one step per 4 us, each flow
    still ending exactly 20 us after its start. Ending every step after a start or end
    with a 2 us step took 59 (and 30 with ``dt_free_ns`` = ``dt_ns``)."""
    n = 40
    prob = star([100] * (2 * n), [(i, n + i, 250_000) for i in range(n)],
                flow_start_ns=[1000 * i for i in range(n)])
    res = run(prob)
    assert res.flow_finish_ns.tolist() == [1000 * i + 20_000 for i in range(n)]
    assert res.meta["steps"] <= 20, f"{res.meta['steps']} steps"
    assert run(prob, dt_free_ns=2000.0).meta["steps"] > 25


def test_nic_sharers_that_all_end_inside_a_step_take_turns():
    """Eight QPs of one NIC with a few bytes each end inside one step: they share the line
    (each ends when the NIC has sent all eight), not each at the line rate."""
    prob = star([100] * 9, [(0, 1 + i, 10_000) for i in range(8)])
    res = run(prob)
    assert res.flow_finish_ns.tolist() == [6400] * 8  # 80 kB at 100 Gb/s


def test_a_quiet_step_ended_by_a_dcqcn_timer_lasts_at_least_dt():
    """50 QPs cut by an incast recover once the short flows are gone: their rate-increase
    timers (55 us apart per QP, one every ~1 us among them) come due during quiet steps.
    A timer due within ``dt_ns`` fires at the step's end, as in active steps, so no step is
    shorter than 2 us (cutting quiet steps at every timer took 4,415 steps here)."""
    flows = [(i, 0, 100_000) for i in range(1, 51)] + [(i, 0, 1_000_000) for i in range(1, 51)]
    res = run(star([100] * 51, flows), cc="dcqcn", dcqcn="paper", pfc="dynamic")
    assert (res.flow_finish_ns > 0).all(), "a flow did not finish"
    assert res.qp_cnp_count, "the incast made no CNPs: the QPs' timers never started"
    most = res.makespan_ns / 2000 + 2 * len(flows)
    assert res.meta["steps"] <= most, f"{res.meta['steps']} steps: quiet steps cut by timers"


def equality_cases() -> dict:
    """Problems and options whose results are recorded in ``fluid_regression.json``: every
    mechanism at least once."""
    from icefabric.dataplane.endside import EndSideParams

    ip, li = csr_from_lists([[1, 2]])
    fail = LinkFailure(t_ns=50_000, links=np.array([0]), reroute_route=np.array([0]),
                       reroute_indptr=ip, reroute_links=li)
    failing = build_problem(link_capacity_bps=[400e9, 100e9, 100e9], link_delay_ns=[0, 0, 0],
                            flow_size_bytes=[5_000_000], routes=[[0]], route_flow=[0],
                            failures=[fail])
    paced = build_problem(link_capacity_bps=[100e9] * 3, link_delay_ns=[1000] * 3,
                          flow_size_bytes=[20e6, 20e6], routes=[[0, 2], [1, 2]],
                          route_flow=[0, 1], link_src=[0, 1, 2], link_dst=[2, 2, 3],
                          node_is_switch=[False, False, True, False], link_kind=[1, 1, 1],
                          flow_rate_cap_bps=[80e9, 80e9])
    incast = star([100] * 5, [(i, 0, 2_000_000) for i in range(1, 5)])
    shared_nic = star([100, 100, 25, 100], [(0, 2, 800_000), (0, 3, 1_200_000),
                                            (1, 2, 900_000)],
                      deps=[[], [], [0]], flow_latency_ns=[3000, 3000, 3000])
    traced = star([100, 100, 25], [(0, 2, 500_000), (1, 2, 500_000)], flow_names=["a", "b"])
    # more routes than links, several QPs per NIC (max-min NIC scheduler)
    crowded = star([100, 50, 25], [(s, d, 100_000 * (1 + s + 3 * d + n)) for n in range(3)
                                   for s in range(3) for d in range(3) if s != d])
    wire = {"wire_overhead": 4132 / 4096, "ack_bytes": 60.0}
    return {
        "victim_dcqcn": (two_switch_victim(), {"cc": "dcqcn", "pfc": "dynamic", "seed": 3}),
        "victim_static": (two_switch_victim(), {"pfc": "static"}),
        "incast_dcqcn": (incast, {"cc": "dcqcn", "dcqcn": "hpcc_ns3_100g", **wire}),
        "incast_paper": (incast, {"cc": "dcqcn", "dcqcn": "paper", "seed": 1}),
        "shared_nic_deps": (shared_nic, {"cc": "dcqcn", "dcqcn": "nvidia_firmware", **wire}),
        "reroute": (failing, {"pfc": "off"}),
        "endside": (paced, {"cc": "dcqcn", "dcqcn": "hpcc_ns3_100g", "pfc": "off",
                            "endside": EndSideParams()}),
        "crowded_pfc": (crowded, {"pfc": "dynamic", "ack_bytes": 60.0}),
        "crowded_dcqcn": (crowded, {"cc": "dcqcn", "dcqcn": "hpcc_ns3_100g", "seed": 2}),
        "traced": (traced, {"cc": "dcqcn", "record_links": ["3->2"], "record_flows": ["a"],
                            "sample_interval_ns": 20_000}),
    }


REGRESSION = Path(__file__).parent / "fluid_regression.json"


def observed(case: str) -> dict:
    """What ``fluid_regression.json`` records of one equality case."""
    prob, opts = equality_cases()[case]
    res = run(prob, **opts)
    return {"flow_start_ns": res.flow_start_ns.tolist(),
            "flow_finish_ns": res.flow_finish_ns.tolist(),
            "link_bytes": res.link_bytes.tolist(),
            "link_peak_util": res.link_peak_util.tolist(),
            "link_max_queue_bytes": res.link_max_queue_bytes,
            "link_pfc_pause_ns": res.link_pfc_pause_ns,
            "link_pfc_pause_count": res.link_pfc_pause_count,
            "link_ecn_marked_frac": res.link_ecn_marked_frac, "qp_cnp_count": res.qp_cnp_count,
            "steps": res.meta["steps"], "endside_fallbacks": res.meta["endside_fallbacks"],
            "timeseries": res.timeseries}


@pytest.mark.parametrize("case", sorted(equality_cases()))
def test_kernel_reproduces_the_recorded_results_bit_for_bit(case):
    """Same floats as recorded: the numpy engine's (commit 611f927), which the compiled loop
    reproduced operation by operation, re-recorded only where the model changed on purpose
    (issue 28: CNPs due after the queues downstream of the mark; issue 26: flows start and
    stop inside a step). Any change to the model shows here first. Re-record with
    ``python tests/engine/test_fluid.py --record`` (only for a deliberate model change)."""
    want = json.loads(REGRESSION.read_text())[case]
    got = observed(case)
    for key, value in want.items():
        assert got[key] == value, f"{case}: {key} differs from the recorded run"


def test_the_cnp_pool_grows_as_the_pending_cnps_need_and_the_run_stays_the_same(monkeypatch):
    """The CNP delay line's node pool, started with room for one step's marks only, grows
    whenever the pending CNPs need more (the kernel returns ``CNP_FULL`` before a step);
    the run is the recorded one, made with room to spare."""
    from icefabric.engine import fluid
    from icefabric.engine import fluid_kernel as fk

    codes = []
    kernel = fk.advance

    def advance(net, st, rng):
        codes.append(kernel(net, st, rng))
        return codes[-1]

    monkeypatch.setattr(fluid, "_CNP_SLACK", 1)
    monkeypatch.setattr(fk, "advance", advance)
    want = json.loads(REGRESSION.read_text())["victim_dcqcn"]
    got = observed("victim_dcqcn")
    assert codes.count(fk.CNP_FULL) >= 3, "the pool never had to grow"
    for key, value in want.items():
        assert got[key] == value, f"{key} differs from the recorded run"


def test_runs_that_reuse_each_others_memory_give_the_recorded_results(monkeypatch):
    """Every array of a run comes from the engine's workspace (memory the runs before it
    wrote): the equality cases run one after another, then again in reverse order, each
    gives its recorded (fresh) result, so nothing leaks from one run into the next; and the
    memory they gave back is all zero again (what the next run is handed)."""
    from icefabric.engine import fluid
    from icefabric.engine.workspace import Workspace

    ws = Workspace(max_bytes=2**30, min_bytes=0)  # every array from the pool
    monkeypatch.setattr(fluid, "_WORKSPACE", ws)
    want = json.loads(REGRESSION.read_text())
    cases = sorted(equality_cases())
    for case in cases + cases[::-1]:
        got = observed(case)
        for key, value in want[case].items():
            assert got[key] == value, f"{case}: {key} differs after other runs"
    assert ws._free, "no run gave its arrays back: nothing was reused"
    assert not any(b.any() for b, _ in ws._free), "the pool holds memory a run wrote"


def test_bank_row_constants_follow_the_layouts():
    """Every ``S_*``/``N_*`` row constant is its name's position in the merged banks (a
    misnumbered row would silently alias another quantity)."""
    from icefabric.engine import fluid_kernel as fk

    for prefix, layout in (("S_", fk.ST_BANKS), ("N_", fk.NET_BANKS)):
        for bank, names in layout.items():
            got = [getattr(fk, prefix + n.upper()) for n in names]
            assert got == list(range(len(names))), f"{prefix}* rows of bank {bank!r}"


hyp = pytest.importorskip("hypothesis")
st_ = hyp.strategies


@hyp.given(st_.integers(0, 130), st_.integers(0, 5), st_.integers(0, 2**32 - 1))
@hyp.settings(max_examples=60, deadline=None)
def test_nic_order_sorts_the_last_order_and_is_numpys_stable_argsort_from_scratch(n, a, seed):
    """The NIC scheduler's hand-written sort of a NIC's positions ``a:a+n`` by demand
    (insertion of the last step's order below 49 QPs, merge sort above): from position
    order it gives ``np.argsort(kind="mergesort")``'s permutation, ties included; from any
    other order of them, the same positions by ascending demand (ties in any order: they
    change no share)."""
    from icefabric.engine import fluid_kernel as fk

    rng = np.random.default_rng(seed)
    # demands by NIC position; the slots before ``a`` belong to another NIC
    key = np.append(rng.choice([0.0, 0.5, 1.0, 2.0, 7.5], a + n), 9.0)
    tmp = np.zeros(a + n + 1, np.int64)
    own = np.arange(a, a + n, dtype=np.int64)
    order = np.concatenate([np.full(a, -1), own]).astype(np.int64)
    fk._sort_by(key, order, a, a + n, tmp)
    want = own[np.argsort(key[a:a + n], kind="mergesort")]
    assert order[a:].tolist() == want.tolist(), "stable order differs from numpy's"
    assert (order[:a] == -1).all(), "wrote outside its NIC's slots"
    order[a:] = rng.permutation(own)  # the last step's order
    fk._sort_by(key, order, a, a + n, tmp)
    assert sorted(order[a:].tolist()) == own.tolist(), "not the NIC's positions"
    assert np.all(np.diff(key[order[a:]]) >= 0), "demands not in ascending order"


@hyp.given(st_.lists(st_.integers(0, 10_000), max_size=60, unique=True),
           st_.lists(st_.integers(10_001, 20_000), max_size=60, unique=True))
@hyp.settings(max_examples=60, deadline=None)
def test_running_set_merge_sorts_new_starts_into_the_running_flows(running, new):
    """``_gather_routes``' running set: the (sorted) running flows merged with the new
    starts, which come in heap order and are sorted first."""
    from icefabric.engine import fluid_kernel as fk

    run_ = np.array(sorted(running) + [-5], np.int64)  # a stale slot past the count
    buf = np.full(len(running) + len(new) + 1, -7, np.int64)
    got = fk._merge_sorted(run_, len(running), fk._heapsort(np.array(new[::-1] + [3]),
                                                            len(new)), buf)
    assert got.tolist() == sorted(running + new), "merged running set out of order"
    assert buf[-1] == -7, "wrote past the merged slice of its buffer"


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    REGRESSION.write_text(json.dumps({c: observed(c) for c in sorted(equality_cases())},
                                     indent=0, sort_keys=True) + "\n")
