"""ICE's pacing rates are part of the plan and follow the planned paths, also after a
link fails."""

import numpy as np
import pytest

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.pipeline.plans import (
    LinkChange,
    plan,
    qp_rates,
    scenario_link_changes,
    with_link_events,
)
from icefabric.pipeline.problem import to_problem
from icefabric.policies.base import get_policy
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import ScenarioError, builtin_text, loads
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.model import ACCEL, LINK_FABRIC


def ring(fabric, channels=2, qps=1):
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("j", fabric, fabric.nodes_of_kind(ACCEL), channels=channels,
                                    qps_per_connection=qps), "all_reduce", 1 << 24)
    return wb.build(node_ip=fabric.node_ip)


def test_rates_are_the_fair_share_over_the_planned_paths(tiny_profile):
    # 2 servers of 2 x 100G NICs, 2 spines: every ring hop crosses one 100G NIC
    f = leaf_spine([ServerGroup(tiny_profile, 2, "t")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    wl = ring(f, channels=2, qps=2)
    p = plan(f, wl, get_policy("spray"))
    rates = qp_rates(f, wl, p.paths, headroom=0.0)
    # each channel's flow runs at 100G; each of a connection's 2 QPs carries half
    np.testing.assert_allclose(rates, 50e9, rtol=1e-9)
    # 2 % headroom: 49 Gb/s, whose share before headroom is the NIC's 50 Gb/s static-rate
    # step (the headroom absorbs the rounding, no link's sum exceeds its capacity)
    np.testing.assert_allclose(qp_rates(f, wl, p.paths), 50e9, rtol=1e-9)
    # a share between steps rounds down: 3 QPs per connection, 33.3 Gb/s -> the 30 step
    wl3 = ring(f, channels=2, qps=3)
    np.testing.assert_allclose(qp_rates(f, wl3, plan(f, wl3, get_policy("spray")).paths), 30e9)
    # paced, the flows are capped at exactly their fair rate
    capped, _ = to_problem(f, wl, p.paths.with_rates(rates), paced=True)
    np.testing.assert_allclose(capped.flow_rate_cap_bps, 100e9, rtol=1e-9)
    # spray does not pace; ice does, with the same numbers
    assert np.all(np.isinf(p.paths.rate_bps))
    ice = plan(f, wl, get_policy("ice"))
    np.testing.assert_allclose(ice.paths.rate_bps, qp_rates(f, wl, ice.paths), rtol=0)


def test_rates_are_recomputed_after_a_link_fails(tiny_profile):
    # 2 leaves, 1 spine with 2 parallel 100G cables per leaf: losing one halves the uplink
    f = leaf_spine([ServerGroup(tiny_profile, 2, "t")],
                   LeafSpineSpec(servers_per_leaf=1, n_spines=1, links_per_spine=2))
    wl = ring(f, channels=2)
    p = plan(f, wl, get_policy("ice"))
    np.testing.assert_allclose(p.paths.rate_bps, 100e9, rtol=1e-9)  # 98 Gb/s of 100
    up = np.flatnonzero((f.link_kind == LINK_FABRIC) & (f.link_src == f.nic_leaf[
        wl.qp_src_nic[0]]))[0]
    a, b = f.node_names[f.link_src[up]], f.node_names[f.link_dst[up]]
    cable = np.array([up, f.link_id(int(f.link_dst[up]), int(f.link_src[up]))])
    after = with_link_events(p, [LinkChange(1000, False, a, b, cable)])
    new = after.final
    assert after.events[0].t_ns == 1000 and not np.isin(new.route_links, cable).any()
    # both channels now share the remaining 100G uplink of that leaf
    np.testing.assert_allclose(new.rate_bps, 50e9, rtol=1e-9)  # 49 Gb/s of 50
    np.testing.assert_allclose(new.rate_bps, qp_rates(f, wl, new), rtol=0)


def test_a_scenario_failure_takes_down_one_named_cable_or_all():
    def changes(failure):
        ls = loads(builtin_text("homog-small") + f"failures:\n  - {failure}\n")
        return ls, scenario_link_changes(ls, build_fabric(ls))

    ls, (one,) = changes("{at_us: 10, link: [leaf0, spine1], cable: 2}")
    names = build_fabric(ls).link_names()
    assert sorted(names[i] for i in one.links) == ["leaf0->spine1/2", "spine1->leaf0/2"]
    _, (every,) = changes("{at_us: 10, link: [leaf0, spine1]}")
    assert len(every.links) == 8  # homog-small: 4 cables per leaf-spine pair
    with pytest.raises(ScenarioError, match=r"cable 4 between leaf0 and spine1: there are 4 "
                                            r"\(0-3\)"):
        changes("{at_us: 10, link: [leaf0, spine1], cable: 4}")
