"""Jobs, whoever describes them, and the workload of a set of jobs.

A :class:`JobSpec` is one job as the CCL models need it: its communicator (ranks placed on
accelerators, library, channels, QPs per connection, and the ring orders the library
reported, if any), its collectives and message size, and the QPs seen on its hosts (QP
numbers, source ports).
Three front ends make them: a scenario file (:func:`scenario_jobs`), the agents'
communicator reports (:func:`report_job`, the controller), and CCL logs (through a
scenario whose job keeps the log's rings, :mod:`icefabric.experiment.fromlog`).
:func:`build_workload` turns any list of them into one :class:`Workload`, job by job,
collectives chained inside a job, so every front end gets the same QPs in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator, QpsRule
from icefabric.ccl.workload import Workload, WorkloadBuilder
from icefabric.errors import IceFabricError
from icefabric.pipeline.pairing import QpEnd, data_qps
from icefabric.scenario.build import job_nccl_settings, placed_accels
from icefabric.scenario.loader import LoadedScenario
from icefabric.schemas_service import CommReport
from icefabric.topology.model import Fabric
from icefabric.units import ipv4_int
from icefabric.wire import port_from_wire, qp_ids


class PipelineError(IceFabricError, ValueError):
    """Base of the pipeline layer's errors: a job that cannot be turned into a workload."""


class JobError(PipelineError):
    """Job ``job`` cannot be built (its collective ``collective``, when one is to blame)."""

    def __init__(self, job: str, reason: str, collective: int | None = None):
        self.job, self.reason, self.collective = job, reason, collective
        super().__init__(f"job {job!r}: {reason}")


@dataclass(frozen=True, eq=False)
class JobSpec:
    """One job: communicator, collectives (run one after another), size, observed QPs.

    Attributes
    ----------
    comm : Communicator — ranks, library, channels, QPs per connection, observed rings.
    collectives : tuple of (kind, algorithm or None).
    size_bytes : int — nccl-tests ``size`` of every collective.
    qps : the QP ends the job's hosts reported, both ends of each connection where the
        hosts report them (:mod:`icefabric.pipeline.pairing` tells the data QPs among
        them); modelled QP numbers and kernel-derived ports stay for the QPs nobody
        reported.
    """

    comm: Communicator
    collectives: tuple[tuple[str, str | None], ...]
    size_bytes: int
    qps: tuple[QpEnd, ...] = ()

    @property
    def name(self) -> str:
        return self.comm.job


def build_workload(fabric: Fabric, jobs: Sequence[JobSpec], *, qpn_seed: int = 0) -> Workload:
    """The workload of ``jobs``: all jobs start together; each job runs its collectives one
    after another (nccl-tests runs one size at a time). Raises :class:`JobError`."""
    wb = WorkloadBuilder()
    for job in jobs:
        after: list[int] = []
        for i, (kind, algorithm) in enumerate(job.collectives):
            try:
                after = add_collective(wb, job.comm, kind, job.size_bytes, algorithm=algorithm,
                                       after=after, name=f"{job.name}:{kind}")
            except ValueError as e:
                raise JobError(job.name, str(e), i) from None
    wl = wb.build(node_ip=fabric.node_ip, qpn_seed=qpn_seed)
    _apply_observed_qps(wl, jobs)
    return wl


def _apply_observed_qps(wl: Workload, jobs: Sequence[JobSpec]) -> None:
    """Replace modelled QP numbers (and derived ports) by those of the reported data QPs
    (:func:`icefabric.pipeline.pairing.data_qps`), matched by :class:`QpId`."""
    if not any(j.qps for j in jobs):
        return
    ids = qp_ids(wl)
    modelled: dict[str, set[tuple[int, int]]] = {}
    for i in ids:
        modelled.setdefault(i.job, set()).add((i.src_ip, i.dst_ip))
    observed = {j.name: data_qps(j.qps, modelled.get(j.name, set())) for j in jobs if j.qps}
    for q, i in enumerate(ids):
        got = observed.get(i.job, {}).get(i)
        if got is not None:
            wl.qp_lqpn[q], wl.qp_rqpn[q], wl.qp_sport[q] = got.lqpn, got.rqpn, got.sport


# -- front ends ---------------------------------------------------------------------------------
def scenario_jobs(ls: LoadedScenario, fabric: Fabric, size_bytes: int,
                  qps_rule: QpsRule | None = None) -> list[JobSpec]:
    """The jobs of a scenario at ``size_bytes`` (with the QPs per connection a policy's
    ``qps_rule`` sets, for policies that split connections). Errors point into the
    scenario file."""
    out = []
    used: dict[int, str] = {}
    for j, job in enumerate(ls.scenario.jobs):
        ranks = _scenario_ranks(ls, fabric, j, used)
        libs = {fabric.servers[int(fabric.node_server[a])].profile.library for a in ranks}
        lib = job.library
        if lib == "auto":
            lib = libs.pop() if len(libs) == 1 else "cross"
        nccl = job_nccl_settings(ls, j, lib)
        qps = job.qps_per_connection
        if lib in ("nccl", "rccl") and "qps_per_connection" not in job.model_fields_set:
            qps = nccl.qps_per_connection
        try:
            comm = Communicator(job=job.name, fabric=fabric, ranks=np.asarray(ranks),
                                library=lib, qps_per_connection=qps,
                                channels=job.channels, step_overhead_ns=job.step_overhead_ns,
                                nccl=nccl, rings=tuple(tuple(r) for r in job.rings or ())
                                ).under(qps_rule)
        except ValueError as e:
            raise ls.error(("jobs", j), str(e)) from None
        out.append(JobSpec(comm, tuple((c.kind, c.algorithm) for c in job.collectives),
                           size_bytes))
    return out


def _scenario_ranks(ls: LoadedScenario, fabric: Fabric, j: int, used: dict[int, str]
                    ) -> list[int]:
    """Accelerators of scenario job ``j`` in rank order (server by server)."""
    ranks = placed_accels(ls, fabric, ("jobs", j), ls.scenario.jobs[j], used)
    if len(ranks) < 2:
        raise ls.error(("jobs", j), "a job needs at least 2 ranks")
    return ranks


def report_job(fabric: Fabric, reports: Sequence[CommReport]) -> JobSpec:
    """One job from its hosts' communicator reports (the controller's view): ranks and
    library from any report, rings from its collector report, every host's QPs.
    Raises :class:`JobError` when the reports do not fit the fabric."""
    rep = reports[0]
    ranks = sorted(rep.ranks, key=lambda r: r.rank)
    try:
        accels = [fabric.servers[fabric.server_of_name[r.host]].accels[r.device] for r in ranks]
        rings = rep.collector.ring_orders(len(ranks)) if rep.collector else {}
        comm = Communicator(job=rep.job, fabric=fabric, ranks=np.asarray(accels),
                            library=rep.library, qps_per_connection=rep.qps_per_connection,
                            channels=rep.channels, step_overhead_ns=rep.step_overhead_ns,
                            rings=tuple(tuple(rings[c]) for c in sorted(rings)))
    except (KeyError, IndexError, ValueError) as e:
        raise JobError(rep.job, f"reports do not fit the fabric: {e}") from None
    qps = tuple(QpEnd(rep.job, ipv4_int(q.src_ip), ipv4_int(q.dst_ip), q.lqpn, q.rqpn,
                      q.ordinal, q.side == "receive", q.init_rtr_ns,
                      port_from_wire(q.sport)) for r in reports for q in r.qps)
    return JobSpec(comm, tuple((c.kind, c.algorithm) for c in rep.collectives),
                   rep.size_bytes, qps)
