"""A plan as hosts receive it (the wire models) and back, QP for QP."""

import numpy as np

from icefabric.pipeline import plan
from icefabric.pipeline.hosts import host_plans, paths_from_host_plans, qp_hosts, qp_keys
from icefabric.pipeline.recipe import RunSpec
from icefabric.policies.base import get_policy
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.schemas_service import HostPlan


def test_host_plans_round_trip_ports_backups_rates_and_routes():
    ls = load("hetero-default")
    fabric = build_fabric(ls)
    pol = get_policy("ice")
    wl = RunSpec(ls, fabric, pol).workload(1 << 20).workload
    p = plan(fabric, wl, pol, seed=ls.scenario.seed).paths
    hosts = host_plans(fabric, wl, p)
    assert set(hosts) == set(qp_hosts(fabric, wl))
    # on the wire and back, as an agent receives them
    wire = {h: HostPlan(host=h, version=1, fabric_version=1, policy="ice", created_at=0.0,
                        qps=q).model_dump_json() for h, q in hosts.items()}
    got = {q.key: q for doc in wire.values() for q in HostPlan.model_validate_json(doc).qps}
    assert set(got) == set(qp_keys(wl)) and len(got) == wl.n_qps
    back = paths_from_host_plans(wl, got, policy="ice")
    for name in ("sport", "backup_sport", "rate_bps", "route_qp", "route_weight",
                 "route_indptr", "route_links"):
        assert np.array_equal(getattr(back, name), getattr(p, name)), name
    assert np.all(np.isfinite(back.rate_bps)) and np.any(back.backup_sport >= 0)
