"""Where an agent's communicator reports come from.

* a JSON file of :class:`~icefabric.schemas_service.CommReport` (what the twin and tests
  produce, or an operator wrote);
* the collectors' normalized :class:`~icefabric.schemas.CommunicatorReport` (``icefab
  collect nccl-log ... --json``) plus what a log does not say (job name, collectives, size):
  ranks (host, device), library and channels come from the log; QP numbers come from the
  log's QP records on this host. A log does not show each QP's peer address, so such QPs are
  matched by the controller only once an RDMA-level source (QP creation events) adds it;
  until then the controller plans with modelled QP numbers for them.
"""

from __future__ import annotations

import json
from pathlib import Path

from icefabric.schemas import CommunicatorReport
from icefabric.schemas_service import (
    MAX_REPORT_ERRORS,
    CollectiveEntry,
    CommReport,
    RankEntry,
)


class CollectorError(ValueError):
    pass


def from_collector_report(rep: CommunicatorReport, *, job: str, size_bytes: int,
                          collectives: list[str], job_order: int = 0) -> CommReport:
    """A service :class:`CommReport` from a collector's :class:`CommunicatorReport`."""
    if rep.library not in ("nccl", "rccl", "hccl"):
        raise CollectorError(f"library {rep.library!r} not recognised in the report")
    ranks = []
    for r in sorted(rep.ranks, key=lambda r: r.rank):
        if r.host is None or r.device is None:
            raise CollectorError(f"rank {r.rank}: host or device not shown in the artefact")
        ranks.append(RankEntry(rank=r.rank, host=r.host, device=r.device, nic=r.nic))
    if len(ranks) < 2:
        raise CollectorError("the report shows fewer than 2 ranks")
    return CommReport(job=job, job_order=job_order, comm_id=rep.comm_id, library=rep.library,
                      collectives=[CollectiveEntry(kind=k) for k in collectives],
                      size_bytes=size_bytes, channels=rep.nchannels, ranks=ranks,
                      collector=rep, errors=rep.errors[:MAX_REPORT_ERRORS])


def load_reports(path: str | Path, *, job: str | None = None, size_bytes: int | None = None,
                 collectives: list[str] | None = None) -> list[CommReport]:
    """Read ``path``: a list of CommReport, or the collectors' output (``icefab collect
    ... --json``: one CommunicatorReport or a list of them; then ``job``, ``size_bytes``
    and ``collectives`` are required)."""
    from pydantic import ValidationError

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise CollectorError(f"{path}: {e}") from None
    items = data if isinstance(data, list) else [data]
    if not items:
        raise CollectorError(f"{path}: no reports in the file")
    try:
        if all(isinstance(x, dict) and "job" in x for x in items):
            return [CommReport.model_validate(x) for x in items]
        if all(isinstance(x, dict) and "rows" in x for x in items):
            return [_from_nccl_tests_run(x, path, job=job, size_bytes=size_bytes,
                                         collectives=collectives, job_order=i)
                    for i, x in enumerate(items)]
        if not (job and size_bytes and collectives):
            raise CollectorError("a collector report (icefab collect ... --json) needs --job, "
                                 "--size and --collective")
        return [from_collector_report(CommunicatorReport.model_validate(x), job=job,
                                      size_bytes=size_bytes, collectives=collectives,
                                      job_order=i) for i, x in enumerate(items)]
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise CollectorError(f"{path}: not a CommReport list nor collector output ({where}: "
                             f"{err['msg']})") from None


def _from_nccl_tests_run(run: dict, path, *, job: str | None, size_bytes: int | None,
                         collectives: list[str] | None, job_order: int) -> CommReport:
    """A CommReport from one run of ``icefab collect nccl-tests --json``: ranks from its
    device lines; the collective and the largest size from the run unless given."""
    from icefabric.collect.nccl_tests import communicator_from_devices

    if not run.get("devices"):
        raise CollectorError(f"{path}: the nccl-tests output has no '# Rank ... on HOST device "
                             "D' lines, so it does not say which host runs which rank")
    if not job:
        raise CollectorError("an nccl-tests report needs --job (the job's name)")
    coll = run.get("collective") or ""
    coll = coll.removesuffix("_perf")
    rows = run.get("rows") or []
    size = size_bytes or max((r["size"] for r in rows), default=0)
    colls = collectives or ([coll] if coll else [])
    if not (size and colls):
        raise CollectorError(f"{path}: the nccl-tests output names no collective or size; "
                             "give --collective and --size")
    return from_collector_report(communicator_from_devices(run["devices"]), job=job,
                                 size_bytes=size, collectives=colls, job_order=job_order)

