"""Baseline policies: what RoCEv2 fabrics do without ICE, plus reference bounds.

* ``ecmp`` — default RoCE: one QP per connection, UDP source port derived by the Linux RDMA
  stack from the QP numbers (NCCL leaves the flow label at 0, domain-facts §4.1, §4.3), each
  switch hashes the 5-tuple with its own model (§3). After a link failure the switches drop
  the member and re-hash (non-resilient groups remap flows).
  ``ecmp`` keeps every job's library defaults: its NCCL release's channels, QPs per
  connection and data split (:mod:`icefabric.ccl.nccl_defaults`), HCCL's one QP per pair.
* ``ecmp-multiqp`` — the common "more entropy" fix: ``k`` QPs per connection, data split
  evenly over them (NCCL_IB_QPS_PER_CONNECTION / HCCL_RDMA_QPS_PER_CONNECTION).
* ``ecmp-tuned`` — what RoCE operators commonly deploy on NCCL: ``NCCL_IB_QPS_PER_CONNECTION``
  2-4 with ``NCCL_IB_SPLIT_DATA_ON_QPS=0`` (each message whole on the next QP, round-robin).
  Default 2: the setting NCCL's maintainers suggest for RoCE bonds (NVIDIA/nccl#1015) and the
  one in most public run commands (NVIDIA/nccl#1454, NVIDIA/nccl-tests#232; #1277 uses 4).
  Only NCCL and RCCL read it: HCCL communicators keep their own setting
  (``HCCL_RDMA_QPS_PER_CONNECTION``, default 1; the public run commands above are NCCL's),
  and a cross-vendor job splits only its NCCL/RCCL pools.
  Round-robin gives each QP ``1/k`` of the bytes like the even split does
  (:mod:`icefabric.ccl.nccl_defaults`), so at flow level it equals ``ecmp-multiqp`` with the
  same ``k``; what differs is the default ``k`` and what the name stands for. It is the
  deployed baseline every table gives ICE's gain over first
  (:data:`icefabric.experiment.runner.DEPLOYED`): with it the model lands the public ECMP
  figures it rebuilds inside its p10-p90, with the bare default (``ecmp``) below them
  (docs/calibration.md). A collision still costs the whole collective with either: NCCL
  gives every channel a fixed share of the bytes (``src/enqueue.cc``,
  ``scheduleCollTasksToPlan``; no work stealing), so the slowest channel ends it.
* ``spray`` — ideal per-packet spraying over every shortest path with reordering-tolerant
  NICs (an upper reference that needs special hardware, e.g. adaptive routing).
* ``ideal`` — the non-blocking bound: the same servers on one non-blocking switch.
"""

from __future__ import annotations

import numpy as np

from icefabric.control.hashing import ecmp_routes, hash_chooser
from icefabric.control.plan import PathPlan, single_path_plan_csr
from icefabric.csr import csr_from_lists, gather, indptr_from_lengths, within
from icefabric.policies.base import PlanContext, Policy, PolicyError, register_policy
from icefabric.topology.builders import ServerGroup, star
from icefabric.topology.catalog import SwitchProfile
from icefabric.topology.model import Fabric
from icefabric.units import ms


@register_policy("ecmp")
class EcmpPolicy(Policy):
    description = "default RoCEv2: 1 QP/connection, kernel-derived source ports, switch ECMP hash"
    randomised = True

    def __init__(self, reroute_delay_ns: int = ms(1)):
        # ECMP group repair after a link-down: hardware detection plus next-hop group update;
        # ~1 ms is a typical order of magnitude [UNCONFIRMED], configurable.
        self.reroute_delay_ns = int(reroute_delay_ns)

    def sports(self, ctx: PlanContext) -> np.ndarray:
        return ctx.workload.sports()

    def plan(self, ctx: PlanContext) -> PathPlan:
        w = ctx.workload
        sport = self.sports(ctx)
        routes = ecmp_routes(ctx.fabric, ctx.routing, ctx.hash_configs, w.qp_src_nic,
                             w.qp_dst_nic, sport)
        return single_path_plan_csr(routes, sport, policy=self.name)

    def plan_draws(self, ctx: PlanContext, sports: np.ndarray) -> list[PathPlan]:
        """One plan per row of ``sports`` (draws: the same QPs with other source ports),
        hashed through the switches in one walk."""
        w, ip = ctx.workload, ctx.fabric.node_ip
        n, q = sports.shape
        src, dst = np.tile(w.qp_src_nic, n), np.tile(w.qp_dst_nic, n)
        choose = hash_chooser(ctx.fabric, ctx.hash_configs, ip[src], ip[dst], sports.ravel())
        ptr, links = ctx.routing.walk_csr(src, dst, choose)
        return [single_path_plan_csr((ptr[i * q:(i + 1) * q + 1] - ptr[i * q],
                                      links[ptr[i * q]:ptr[(i + 1) * q]]), sports[i],
                                     policy=self.name) for i in range(n)]


@register_policy("ecmp-multiqp")
class EcmpMultiQpPolicy(EcmpPolicy):
    description = "ECMP with k QPs per connection (data split evenly over them)"

    def __init__(self, qps: int = 4, **kw):
        super().__init__(**kw)
        if not 1 <= qps <= 128:
            raise PolicyError(f"{self.name}: qps must be in [1, 128]")
        self.qps = int(qps)

    def qps_per_connection(self, default: int, library: str = "nccl") -> int:
        return self.qps


#: Libraries that read ``NCCL_IB_QPS_PER_CONNECTION`` (RCCL keeps NCCL's variable names,
#: ``src/transport/net_ib.cc`` of ROCm/rccl).
NCCL_ENV_LIBRARIES = ("nccl", "rccl")


@register_policy("ecmp-tuned")
class EcmpTunedPolicy(EcmpMultiQpPolicy):
    description = ("ECMP as RoCE clusters deploy it: NCCL_IB_QPS_PER_CONNECTION=2 "
                   "(SPLIT_DATA_ON_QPS=0 round-robin) on NCCL/RCCL, HCCL at its default")

    def __init__(self, qps: int = 2, **kw):
        super().__init__(qps=qps, **kw)

    def qps_per_connection(self, default: int, library: str = "nccl") -> int:
        """The tuning is an NCCL variable: HCCL communicators (and the exchange between a
        cross-vendor job's pools) keep their own setting."""
        return self.qps if library in NCCL_ENV_LIBRARIES else default


@register_policy("spray")
class SprayPolicy(Policy):
    description = "ideal per-packet spraying over all shortest paths (needs reordering NICs)"
    reroute_delay_ns = 0

    def plan(self, ctx: PlanContext, n_routes: np.ndarray | None = None) -> PathPlan:
        w, f, rt = ctx.workload, ctx.fabric, ctx.routing
        src_leaf, dst_leaf = f.nic_leaf[w.qp_src_nic], f.nic_leaf[w.qp_dst_nic]
        up = rt.nic_uplink(w.qp_src_nic) if w.n_qps else np.zeros(0, np.int64)
        down = rt.nic_downlink(w.qp_dst_nic) if w.n_qps else np.zeros(0, np.int64)
        # every shortest path of each (source leaf, destination leaf) pair, as one CSR
        keys, pair = np.unique(np.stack([src_leaf, dst_leaf]), axis=1, return_inverse=True)
        pair_paths = [rt.all_paths(int(a), int(b)) for a, b in keys.T.tolist()]
        n_paths = np.array([len(p) for p in pair_paths], dtype=np.int64)
        path_ptr, path_links = csr_from_lists([p for ps in pair_paths for p in ps])
        first = indptr_from_lengths(n_paths)[:-1]
        k = n_paths[pair.ravel()]
        n = k if n_routes is None else np.where(k > 0, np.asarray(n_routes, np.int64), 0)
        # route i of QP q: uplink, path i mod k of its pair, downlink (QP by QP, in order)
        r_qp = np.repeat(np.arange(w.n_qps), n)
        path = first[pair.ravel()][r_qp] + within(n) % np.maximum(k[r_qp], 1)
        plen = np.diff(path_ptr)[path]
        indptr = indptr_from_lengths(plen + 2)
        links = np.empty(int(indptr[-1]), dtype=np.int64)
        links[indptr[:-1]] = up[r_qp]
        links[indptr[1:] - 1] = down[r_qp]
        links[gather(indptr[:-1] + 1, plen)] = path_links[gather(path_ptr[path], plen)]
        return PathPlan(sport=np.full(w.n_qps, -1, dtype=np.int64), route_qp=r_qp,
                        route_weight=1.0 / n[r_qp], route_indptr=indptr, route_links=links,
                        rate_bps=np.full(w.n_qps, np.inf), policy=self.name)

    def replan(self, ctx: PlanContext, previous: PathPlan) -> PathPlan:
        # Keep the number of routes per QP; the surviving paths share them round-robin.
        return self.plan(ctx, n_routes=np.diff(previous.qp_route_ptr()))


def nonblocking_twin(fabric: Fabric) -> Fabric:
    """The same servers (same node ids, addresses and internals) on one non-blocking switch."""
    groups: list[ServerGroup] = []
    for s in fabric.servers:
        prefix = s.name.rsplit("-", 1)[0]
        if groups and groups[-1].pool == s.pool and groups[-1].profile == s.profile \
                and groups[-1].prefix == prefix:
            g = groups[-1]
            groups[-1] = ServerGroup(g.profile, g.count + 1, g.pool, g.prefix)
        else:
            groups.append(ServerGroup(s.profile, 1, s.pool, prefix))
    host_delay = int(np.median(fabric.link_delay_ns[fabric.link_kind == 1]))
    big = SwitchProfile("non-blocking", "ideal", radix=1 << 30, port_bps=0, buffer_bytes=0)
    twin = star(groups, switch=big, host_delay_ns=host_delay, name=f"{fabric.name}-ideal")
    # The star numbers servers per group from 0; names and node ids must match the fabric.
    if twin.node_names[:len(fabric.node_names) - len(fabric.switches)] != \
            fabric.node_names[:len(fabric.node_names) - len(fabric.switches)]:
        raise PolicyError("cannot build the non-blocking twin: server naming differs")
    return twin


@register_policy("ideal")
class IdealPolicy(Policy):
    description = ("non-blocking bound: the same servers on one non-blocking switch, max-min "
                   "fair (flow engine, no queues)")
    reroute_delay_ns = 0
    engine_override = "flow"

    def ideal_fabric(self, fabric: Fabric) -> Fabric:
        return nonblocking_twin(fabric)

    def plan(self, ctx: PlanContext) -> PathPlan:
        w = ctx.workload
        routes = ctx.routing.walk_csr(w.qp_src_nic, w.qp_dst_nic,
                                      lambda *a: np.zeros(len(a[1]), dtype=np.int64))
        return single_path_plan_csr(routes, np.full(w.n_qps, -1), policy=self.name)
