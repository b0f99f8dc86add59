"""A plan as the hosts see it: per host, the :class:`QpPlan` of every QP its NICs send on
(source port, backup port, pacing rate, routes), and back from what hosts applied.

A QP is named across reports and plans by (job, source IP, destination IP, ordinal) and
carries its QP numbers (:func:`icefabric.pipeline.jobs.qp_ordinals`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.control.plan import PathPlan
from icefabric.csr import csr_from_lists
from icefabric.pipeline.jobs import qp_jobs, qp_ordinals
from icefabric.schemas_service import QpKey, QpPlan
from icefabric.topology.model import Fabric
from icefabric.units import ipv4_str


def qp_keys(wl: Workload) -> list[QpKey]:
    """The NIC-level key of every QP of ``wl``."""
    return [(ipv4_str(s), ipv4_str(d), lq, rq) for s, d, lq, rq in
            zip(wl.qp_src_ip.tolist(), wl.qp_dst_ip.tolist(), wl.qp_lqpn.tolist(),
                wl.qp_rqpn.tolist(), strict=True)]


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
    per_host: dict[str, list[QpPlan]] = {}
    for q, (host, key, job, ordinal) in enumerate(zip(
            qp_hosts(fabric, wl), qp_keys(wl), qp_jobs(wl), qp_ordinals(wl).tolist(),
            strict=True)):
        # the wire's sentinels: no rate (inf in the arrays) and no backup port (-1) are None
        per_host.setdefault(host, []).append(QpPlan(
            src_ip=key[0], dst_ip=key[1], lqpn=key[2], rqpn=key[3], job=job,
            ordinal=ordinal, sport=sport[q],
            rate_bps=rates[q] if np.isfinite(rates[q]) else None,
            routes=[links[rptr[r]:rptr[r + 1]] for r in range(ptr[q], ptr[q + 1])],
            weights=weights[ptr[q]:ptr[q + 1]],
            backup_sport=backup[q] if backup[q] >= 0 else None))
    return per_host


def paths_from_host_plans(wl: Workload, applied: Mapping[QpKey, QpPlan], *,
                          policy: str = "") -> PathPlan:
    """The :class:`PathPlan` hosts applied, in the QP order of ``wl`` (KeyError naming the
    first QP no host applied)."""
    entries = []
    for key in qp_keys(wl):
        e = applied.get(key)
        if e is None:
            raise KeyError(f"QP {key} has no applied plan on its host")
        entries.append(e)
    routes = [np.asarray(r, dtype=np.int64) for e in entries for r in e.routes]
    indptr, links = csr_from_lists(routes)
    return PathPlan(
        sport=np.array([e.sport for e in entries], dtype=np.int64),
        route_qp=np.repeat(np.arange(len(entries)), [len(e.routes) for e in entries]),
        route_weight=np.array([w for e in entries for w in e.weights], dtype=np.float64),
        route_indptr=indptr, route_links=links,
        rate_bps=np.array([np.inf if e.rate_bps is None else e.rate_bps for e in entries]),
        backup_sport=np.array([-1 if e.backup_sport is None else e.backup_sport
                               for e in entries], dtype=np.int64),
        policy=policy)
