"""A plan as the hosts see it: per host, the :class:`QpPlan` of every QP its NICs send on
(source port, backup port, pacing rate, routes), and back from what hosts applied.

A QP is named across reports and plans by its :class:`~icefabric.qpid.QpId` (job, source
IP, destination IP, ordinal: :func:`icefabric.pipeline.jobs.qp_ids`) and carries its QP
numbers.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.control.plan import PathPlan
from icefabric.csr import csr_from_lists
from icefabric.pipeline.jobs import qp_ids
from icefabric.qpid import QpId
from icefabric.schemas_service import QpPlan
from icefabric.topology.model import Fabric


def qp_hosts(fabric: Fabric, wl: Workload) -> list[str]:
    """The host whose NIC sends on every QP."""
    names = [s.name for s in fabric.servers]
    return [names[s] for s in fabric.node_server[wl.qp_src_nic].tolist()]


def host_plans(fabric: Fabric, wl: Workload, paths: PathPlan) -> dict[str, list[QpPlan]]:
    """Per host, the plans of the QPs its NICs send on (in QP order)."""
    ptr = paths.qp_route_ptr().tolist()
    links, rptr = paths.route_links.tolist(), paths.route_indptr.tolist()
    weights, rates = paths.route_weight.tolist(), paths.rate_bps.tolist()
    sport, backup = paths.sport.tolist(), paths.backup_sport.tolist()
    lqpn, rqpn = wl.qp_lqpn.tolist(), wl.qp_rqpn.tolist()
    per_host: dict[str, list[QpPlan]] = {}
    for q, (host, i) in enumerate(zip(qp_hosts(fabric, wl), qp_ids(wl), strict=True)):
        # the one sentinel rule: arrays say "none" with inf (rate) and -1 (ports), the wire
        # with None; converted here and in paths_from_host_plans, nowhere else
        per_host.setdefault(host, []).append(QpPlan(
            src_ip=i.src, dst_ip=i.dst, lqpn=lqpn[q], rqpn=rqpn[q], job=i.job,
            ordinal=i.ordinal, sport=sport[q] if sport[q] >= 0 else None,
            rate_bps=rates[q] if np.isfinite(rates[q]) else None,
            routes=[links[rptr[r]:rptr[r + 1]] for r in range(ptr[q], ptr[q + 1])],
            weights=weights[ptr[q]:ptr[q + 1]],
            backup_sport=backup[q] if backup[q] >= 0 else None))
    return per_host


def paths_from_host_plans(wl: Workload, applied: Mapping[QpId, QpPlan], *,
                          policy: str = "") -> PathPlan:
    """The :class:`PathPlan` hosts applied, in the QP order of ``wl`` (KeyError naming the
    first QP no host applied)."""
    entries = []
    for i in qp_ids(wl):
        e = applied.get(i)
        if e is None:
            raise KeyError(f"QP {i.job} {i.src}->{i.dst} ordinal {i.ordinal} has no applied "
                           "plan on its host")
        entries.append(e)
    routes = [np.asarray(r, dtype=np.int64) for e in entries for r in e.routes]
    indptr, links = csr_from_lists(routes)
    return PathPlan(
        sport=np.array([-1 if e.sport is None else e.sport for e in entries], dtype=np.int64),
        route_qp=np.repeat(np.arange(len(entries)), [len(e.routes) for e in entries]),
        route_weight=np.array([w for e in entries for w in e.weights], dtype=np.float64),
        route_indptr=indptr, route_links=links,
        rate_bps=np.array([np.inf if e.rate_bps is None else e.rate_bps for e in entries]),
        backup_sport=np.array([-1 if e.backup_sport is None else e.backup_sport
                               for e in entries], dtype=np.int64),
        policy=policy)
