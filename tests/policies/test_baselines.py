import numpy as np
import pytest

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.control.plan import single_path_plan
from icefabric.engine.flow import run_flow
from icefabric.pipeline.problem import to_problem
from icefabric.policies.base import PlanContext, available_policies, get_policy
from icefabric.policies.baselines import nonblocking_twin
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine, star
from icefabric.topology.model import ACCEL, LINK_FABRIC

GiB = 1 << 30


def ring_workload(fabric, channels, size=GiB, qps=1):
    c = Communicator("j", fabric, fabric.nodes_of_kind(ACCEL), channels=channels,
                     qps_per_connection=qps)
    wb = WorkloadBuilder()
    add_collective(wb, c, "all_reduce", size)
    return wb.build(node_ip=fabric.node_ip)


def test_ring_in_rack_order_on_nonblocking_fabric_reaches_the_bound(tiny_profile):
    f = star([ServerGroup(tiny_profile, 4, "t")])
    w = ring_workload(f, channels=2)
    ctx = PlanContext.create(f, w)
    prob, _ = to_problem(f, w, get_policy("ecmp").plan(ctx))
    res = run_flow(prob)
    c = res.collectives[0]
    # bandwidth term: 2 channels, each hop limited by one 100G NIC -> busbw 2*100 Gb/s
    n = 8
    bw_time_ns = 2 * (n - 1) / n * GiB / 2 * 8 / 100e9 * 1e9
    assert c.time_ns == pytest.approx(bw_time_ns + prob.flow_latency_ns.max(), abs=2)
    assert c.busbw_GBps == pytest.approx(25.0, rel=0.01)


def test_two_ring_channels_forced_onto_one_uplink_run_at_half_speed(tiny_profile):
    # 2 servers on 2 leaves, 2 spines: leaf uplinks are 100G each, NICs 100G.
    f = leaf_spine([ServerGroup(tiny_profile, 2, "t")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    w = ring_workload(f, channels=2)
    ctx = PlanContext.create(f, w)

    def plan(choose):
        paths = ctx.routing.walk(w.qp_src_nic, w.qp_dst_nic, choose)
        return single_path_plan(paths, np.zeros(w.n_qps))

    rail = f.node_index[w.qp_src_nic]
    spread = plan(lambda s, i, sw, dl, n: np.minimum(rail[i], n - 1))  # channel c -> spine c
    collide = plan(lambda s, i, sw, dl, n: np.zeros(len(i), int))  # everything on spine 0
    t = {}
    for name, pl in (("spread", spread), ("collide", collide)):
        prob, _ = to_problem(f, w, pl)
        t[name] = run_flow(prob).collectives[0].time_ns
        lat = int(prob.flow_latency_ns.max())
    n = 4
    per_channel_bits = 2 * (n - 1) / n * GiB / 2 * 8
    assert t["spread"] - lat == pytest.approx(per_channel_bits / 100e9 * 1e9, abs=2)
    assert t["collide"] - lat == pytest.approx(per_channel_bits / 50e9 * 1e9, abs=2)


def test_ecmp_is_deterministic_and_uses_linux_source_ports(small_fabric):
    w = ring_workload(small_fabric, channels=16)
    ctx = PlanContext.create(small_fabric, w, seed=3)
    a = get_policy("ecmp").plan(ctx)
    b = get_policy("ecmp").plan(ctx)
    assert np.array_equal(a.route_links, b.route_links)
    assert np.all((a.sport >= 0xC000) & (a.sport <= 0xFFFF))


def test_spray_spreads_every_qp_over_all_paths(small_fabric):
    w = ring_workload(small_fabric, channels=2)
    ctx = PlanContext.create(small_fabric, w)
    plan = get_policy("spray").plan(ctx)
    counts = np.bincount(plan.route_qp)
    assert np.all(counts == 16)  # 4 spines x 2 uplinks x 2 downlinks
    np.testing.assert_allclose(np.bincount(plan.route_qp, weights=plan.route_weight), 1.0)


def test_multiqp_policy_asks_for_more_qps():
    assert get_policy("ecmp-multiqp", qps=8).qps_per_connection(1) == 8
    with pytest.raises(ValueError):
        get_policy("ecmp-multiqp", qps=0)


def test_registry_lists_baselines_and_rejects_unknown():
    names = available_policies()
    assert {"ecmp", "ecmp-multiqp", "spray", "ideal"} <= set(names)
    with pytest.raises(ValueError, match="unknown policy"):
        get_policy("magic")


def test_misspelt_options_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"policy 'ice' has no option 'qsp'; its options: "
                                         r"agent_failover_ns, backup, improve, method, "):
        get_policy("ice", qsp=2)
    # options forwarded with **kw to the parent class are known too
    with pytest.raises(ValueError, match=r"'ecmp-tuned' has no option 'reroute'; "
                                         r"its options: qps, reroute_delay_ns$"):
        get_policy("ecmp-tuned", reroute=1)
    with pytest.raises(ValueError, match="'spray' has no option 'qps'; its options: none"):
        get_policy("spray", qps=2)
    assert get_policy("ecmp-tuned", reroute_delay_ns=5).reroute_delay_ns == 5


def test_nonblocking_twin_keeps_node_ids(small_fabric):
    twin = nonblocking_twin(small_fabric)
    n = small_fabric.n_accels
    acc = small_fabric.nodes_of_kind(ACCEL)
    assert np.array_equal(twin.nodes_of_kind(ACCEL), acc) and len(acc) == n
    assert not np.any(twin.link_kind == LINK_FABRIC)


def test_ecmp_tuned_is_the_common_nccl_setting_beside_the_others(small_fabric):
    assert {"ecmp", "ecmp-multiqp", "ecmp-tuned"} <= set(available_policies())
    tuned = get_policy("ecmp-tuned")
    assert tuned.qps_per_connection(1) == 2 and get_policy("ecmp").qps_per_connection(1) == 1
    assert get_policy("ecmp-tuned", qps=4).qps_per_connection(1) == 4
    with pytest.raises(ValueError, match="ecmp-tuned: qps must be in"):
        get_policy("ecmp-tuned", qps=0)
    # Round-robin and even split give each QP the same share: with the same k the plans of
    # ecmp-tuned and ecmp-multiqp coincide QP for QP.
    w = ring_workload(small_fabric, channels=8, qps=2)
    ctx = PlanContext.create(small_fabric, w, seed=1)
    a, b = tuned.plan(ctx), get_policy("ecmp-multiqp", qps=2).plan(ctx)
    assert np.array_equal(a.route_links, b.route_links) and np.array_equal(a.sport, b.sport)


@pytest.mark.parametrize("profile, idle", [("correlated", 16), ("independent", 0)])
def test_correlated_hash_stages_polarize_the_fat_tree(profile, idle):
    import yaml

    from icefabric.pipeline.plans import scenario_workload
    from icefabric.scenario.build import build_fabric
    from icefabric.scenario.loader import load, loads

    doc = yaml.safe_load(load("suite-fat-tree").text)
    doc["fabric"]["hash_profiles"] = profile
    ls = loads(yaml.safe_dump(doc))
    f = build_fabric(ls)
    w = scenario_workload(ls, f, 1 << 24).workload
    load_ = get_policy("ecmp").plan(PlanContext.create(f, w)).link_load(f.n_links)
    # Aggregation switches that read the leaves' hash bits again send every flow from a
    # leaf member to the same core subset: a quarter of the 64 fabric links stays idle.
    assert int(np.count_nonzero(load_[f.link_kind == LINK_FABRIC] == 0)) == idle


def test_ecmp_tuned_sets_nccls_variable_only():
    """NCCL_IB_QPS_PER_CONNECTION is read by NCCL and RCCL; HCCL and the exchange of a
    cross-vendor job keep their own setting, while ecmp-multiqp splits every library."""
    tuned, multi = get_policy("ecmp-tuned"), get_policy("ecmp-multiqp", qps=3)
    assert [tuned.qps_per_connection(1, lib) for lib in ("nccl", "rccl", "hccl", "cross")] \
        == [2, 2, 1, 1]
    assert [multi.qps_per_connection(1, lib) for lib in ("nccl", "hccl", "cross")] == [3, 3, 3]
