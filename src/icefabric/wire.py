"""The plan contract: every form a QP's plan takes from the planner to the NIC, and every
conversion between them, in this one module.

1. **Arrays** — :class:`~icefabric.control.plan.PathPlan`, one entry per QP of a
   :class:`~icefabric.ccl.workload.Workload` (the planner's and the engines' form).
2. **Host plans** — per host, a :class:`~icefabric.schemas_service.QpPlan` per QP its NICs
   send on, named by its :class:`~icefabric.qpid.QpId` (:func:`qp_ids`) and carrying its QP
   numbers: :func:`host_plans`, and back :func:`paths_from_host_plans`.
3. **Stored record and served document** — a host's QP plans as one JSON array
   (:func:`host_record`, what the controller's database keeps per host and version) and the
   :class:`~icefabric.schemas_service.HostPlan` document an agent is sent
   (:func:`host_document`); a version's arrays as stored (:func:`path_record`,
   :func:`paths_from_record`).
4. **Shim line** — what the verbs shim writes into a QP at INIT->RTR (:func:`shim_plan`)
   and the verbs rate limit in kbit/s (:func:`rate_kbps`).

The sentinel rule, declared once: arrays say "no port" with ``-1`` and "no rate" with
``inf`` (:data:`NO_PORT`, :data:`NO_RATE`); the wire says both with ``None``; the shim line
says "no port" with ``-1`` and "no rate" with ``0``. Only this module converts between them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.control.plan import PathPlan
from icefabric.csr import csr_from_lists, within
from icefabric.dataplane.roce import static_rate
from icefabric.qpid import QpId
from icefabric.schemas_service import QP_PLANS, HostPlan, PlanSummary, QpPlan
from icefabric.topology.model import Fabric
from icefabric.units import bps_to_kbps

#: the arrays' "no source port" (leave the port as is: a spraying NIC)
NO_PORT = -1
#: the arrays' "no pacing rate" (line rate; DCQCN governs)
NO_RATE = math.inf


def port_to_wire(sport: int) -> int | None:
    return None if sport < 0 else sport


def port_from_wire(sport: int | None) -> int:
    return NO_PORT if sport is None else sport


def rate_to_wire(rate_bps: float) -> float | None:
    return rate_bps if math.isfinite(rate_bps) else None


def rate_from_wire(rate_bps: float | None) -> float:
    return NO_RATE if rate_bps is None else rate_bps


# -- naming: the QpId of every modelled QP -----------------------------------------------------
def qp_jobs(wl: Workload) -> list[str]:
    """The job of every QP."""
    return [wl.conn_job[c] for c in wl.qp_conn.tolist()]


def qp_ordinals(wl: Workload, job: np.ndarray | None = None) -> np.ndarray:
    """Ordinal of every QP among the QPs of its job between the same NIC pair, in creation
    order: with the job and the pair it names the QP across reports and plans
    (:class:`icefabric.qpid.QpId`; every modelled QP is a data QP). ``job``: each QP's job
    as any integer code (one per job name), if the caller has it."""
    if wl.n_qps == 0:
        return np.zeros(0, dtype=np.int64)
    if job is None:
        job = _job_codes(wl)[1]
    order = np.lexsort((np.arange(wl.n_qps), wl.qp_dst_nic, wl.qp_src_nic, job))
    keys = np.stack([job, wl.qp_src_nic, wl.qp_dst_nic])[:, order]
    start = np.r_[True, np.any(keys[:, 1:] != keys[:, :-1], axis=0)]
    out = np.empty(wl.n_qps, dtype=np.int64)
    out[order] = within(np.diff(np.r_[np.flatnonzero(start), wl.n_qps]))
    return out


def _job_codes(wl: Workload) -> tuple[tuple[str, ...], np.ndarray]:
    """The job names (sorted) and each QP's index in them."""
    names, job = np.unique(np.asarray(wl.conn_job, dtype=object), return_inverse=True)
    return tuple(names.tolist()), job.reshape(-1)[wl.qp_conn].astype(np.int32)


def qp_ids(wl: Workload) -> list[QpId]:
    """The :class:`QpId` of every QP (its one name in reports, plans and on the hosts)."""
    return list(QpIds.of(wl))


@dataclass(frozen=True, eq=False)
class QpIds:
    """The :class:`QpId` of every QP of a workload as arrays (16 bytes a QP: a published
    plan keeps them to find each QP's place in the next workload, :meth:`positions_in`).
    Iterating gives each QP's :class:`QpId`, in QP order.

    Attributes
    ----------
    jobs : tuple of str — the job names; ``job`` indexes it.
    job, src_ip, dst_ip, ordinal : (Q,) int arrays — the fields of each QP's QpId.
    """

    jobs: tuple[str, ...]
    job: np.ndarray
    src_ip: np.ndarray
    dst_ip: np.ndarray
    ordinal: np.ndarray

    @classmethod
    def of(cls, wl: Workload) -> QpIds:
        names, job = _job_codes(wl)
        return cls(names, job, wl.qp_src_ip.astype(np.uint32),
                   wl.qp_dst_ip.astype(np.uint32), qp_ordinals(wl, job).astype(np.int32))

    def __iter__(self) -> Iterator[QpId]:
        jobs = self.jobs
        return (QpId(jobs[j], s, d, o) for j, s, d, o in zip(
            self.job.tolist(), self.src_ip.tolist(), self.dst_ip.tolist(),
            self.ordinal.tolist(), strict=True))

    def __len__(self) -> int:
        return len(self.job)

    def positions_in(self, other: QpIds) -> np.ndarray:
        """Per QP, the index of the QP with its QpId in ``other`` (-1: none there)."""
        if not len(self) or not len(other):
            return np.full(len(self), -1, dtype=np.int64)
        # one int64 per QpId: (NIC pair rank, job, ordinal) in mixed radix
        jobs = {j: i for i, j in enumerate(sorted(set(self.jobs) | set(other.jobs)))}
        job = np.concatenate([np.array([jobs[j] for j in x.jobs], np.int64)[x.job]
                              for x in (self, other)])
        pair = np.concatenate([(x.src_ip.astype(np.uint64) << np.uint64(32)) | x.dst_ip
                               for x in (self, other)])
        pair = np.unique(pair, return_inverse=True)[1].reshape(-1).astype(np.int64)
        ordinal = np.concatenate([self.ordinal, other.ordinal]).astype(np.int64)
        key = (pair * len(jobs) + job) * (int(ordinal.max()) + 1) + ordinal
        mine, theirs = key[:len(self)], key[len(self):]
        order = np.argsort(theirs, kind="stable")
        at = np.minimum(np.searchsorted(theirs[order], mine), len(other) - 1)
        return np.where(theirs[order][at] == mine, order[at], -1)


def qp_hosts(fabric: Fabric, wl: Workload) -> list[str]:
    """The host whose NIC sends on every QP."""
    names = [s.name for s in fabric.servers]
    return [names[s] for s in fabric.node_server[wl.qp_src_nic].tolist()]


# -- arrays <-> host plans ----------------------------------------------------------------------
def host_plans(fabric: Fabric, wl: Workload, paths: PathPlan,
               ids: Iterable[QpId] | None = None) -> dict[str, list[QpPlan]]:
    """Per host, the plans of the QPs its NICs send on (in QP order). ``ids``: the QpId of
    every QP of ``wl`` (:class:`QpIds`), if the caller has them."""
    ptr = paths.qp_route_ptr().tolist()
    links, rptr = paths.route_links.tolist(), paths.route_indptr.tolist()
    weights, rates = paths.route_weight.tolist(), paths.rate_bps.tolist()
    sport, backup = paths.sport.tolist(), paths.backup_sport.tolist()
    lqpn, rqpn = wl.qp_lqpn.tolist(), wl.qp_rqpn.tolist()
    per_host: dict[str, list[QpPlan]] = {}
    ids = QpIds.of(wl) if ids is None else ids
    for q, (host, i) in enumerate(zip(qp_hosts(fabric, wl), ids, strict=True)):
        per_host.setdefault(host, []).append(QpPlan(
            src_ip=i.src, dst_ip=i.dst, lqpn=lqpn[q], rqpn=rqpn[q], job=i.job,
            ordinal=i.ordinal, sport=port_to_wire(sport[q]), rate_bps=rate_to_wire(rates[q]),
            routes=[links[rptr[r]:rptr[r + 1]] for r in range(ptr[q], ptr[q + 1])],
            weights=weights[ptr[q]:ptr[q + 1]], backup_sport=port_to_wire(backup[q])))
    return per_host


def paths_from_host_plans(wl: Workload, applied: Mapping[QpId, QpPlan], *,
                          policy: str = "", ids: Iterable[QpId] | None = None) -> PathPlan:
    """The :class:`PathPlan` hosts applied, in the QP order of ``wl`` (KeyError naming the
    first QP no host applied). ``ids``: the QpId of every QP of ``wl``, if the caller has
    them."""
    entries = []
    for i in QpIds.of(wl) if ids is None else ids:
        e = applied.get(i)
        if e is None:
            raise KeyError(f"QP {i.job} {i.src}->{i.dst} ordinal {i.ordinal} has no applied "
                           "plan on its host")
        entries.append(e)
    routes = [np.asarray(r, dtype=np.int64) for e in entries for r in e.routes]
    indptr, links = csr_from_lists(routes)
    return PathPlan(
        sport=np.array([port_from_wire(e.sport) for e in entries], dtype=np.int64),
        route_qp=np.repeat(np.arange(len(entries)), [len(e.routes) for e in entries]),
        route_weight=np.array([w for e in entries for w in e.weights], dtype=np.float64),
        route_indptr=indptr, route_links=links,
        rate_bps=np.array([rate_from_wire(e.rate_bps) for e in entries], dtype=np.float64),
        backup_sport=np.array([port_from_wire(e.backup_sport) for e in entries],
                              dtype=np.int64),
        policy=policy)


# -- host plans <-> stored record <-> served document -------------------------------------------
def host_record(qps: list[QpPlan]) -> bytes:
    """A host's QP plans as stored (a JSON array; made from checked models)."""
    return QP_PLANS.dump_json(qps)


def host_document(summary: PlanSummary, host: str, record: bytes) -> bytes:
    """The :class:`HostPlan` JSON of ``host`` under plan ``summary`` with QP plans
    ``record`` (:func:`host_record`): the header is a model, the QP array is spliced in as
    is, so bytes just made from checked models are not parsed and checked again."""
    head = HostPlan(host=host, version=summary.version, fabric_version=summary.fabric_version,
                    policy=summary.policy, created_at=summary.created_at,
                    qps=[]).model_dump_json().encode()
    assert head.endswith(b'"qps":[]}'), head[-20:]  # qps is the model's last field
    return head[:-3] + record + b"}"


def path_record(paths: PathPlan | None, workload_key: str, shape_key: str = "") -> dict:
    """A plan version's arrays as stored, with the digests of the workload they plan (all
    its reports, and its shape: the reports without their QPs)."""
    return {**(paths.to_dict() if paths is not None else {}), "workload_key": workload_key,
            "shape_key": shape_key}


def paths_from_record(record: str) -> tuple[PathPlan | None, str, str]:
    """:func:`path_record`'s JSON text -> (arrays or None, workload digest, shape digest)."""
    d = json.loads(record)
    key, shape = d.pop("workload_key", ""), d.pop("shape_key", "")
    return (PathPlan.from_dict(d) if d.get("sport") is not None else None), key, shape


# -- host plans -> the verbs shim ---------------------------------------------------------------
def rate_kbps(rate_bps: float | None, *, unset: int) -> int:
    """A plan's rate in bit/s as the verbs ``rate_limit`` (kbit/s, >= 1); ``unset`` if none."""
    return unset if rate_bps is None else bps_to_kbps(rate_bps)


def srate_of(rate_bps: float | None) -> int:
    """The ``IBV_RATE_*`` sent for a planned rate (0 = none)."""
    return 0 if rate_bps is None else int(static_rate(rate_bps)[0])


def shim_plan(q: QpPlan) -> dict[str, int]:
    """The fields of the shim's ``PLAN`` line for ``q`` (``native/icefab_verbs.c``):
    ``sport`` (-1 = leave the port) and ``srate``, the RTR static rate (0 = none)."""
    return {"sport": port_from_wire(q.sport), "srate": srate_of(q.rate_bps)}
