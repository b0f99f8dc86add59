"""Communicator reports from agents (own host only)."""

from __future__ import annotations

from fastapi import APIRouter, Path, Response

from icefabric.controller.deps import ERRORS, CoreDep, HostDep
from icefabric.controller.errors import Invalid
from icefabric.schemas_service import CommReport, ReportAccepted

router = APIRouter(prefix="/v1/hosts", tags=["reports"], responses=ERRORS)


@router.put("/{host}/communicators/{job}", response_model=ReportAccepted)
def put_report(body: CommReport, core: CoreDep, _: HostDep,
               host: str = Path(max_length=128), job: str = Path(max_length=128)
               ) -> ReportAccepted:
    """Report (or update) what this host knows about one job's communicator."""
    if body.job != job:
        raise Invalid(f"body job {body.job!r} does not match the path ({job!r})")
    js = core.jobs.put_report(core.fabric, host, body)
    return ReportAccepted(job=job, host=host, hosts_reported=len(js.reports),
                          hosts_expected=len(js.hosts_expected), complete=js.complete,
                          failing=js.failing)


@router.delete("/{host}/communicators/{job}", status_code=204)
def end_report(core: CoreDep, _: HostDep, host: str = Path(max_length=128),
                     job: str = Path(max_length=128)) -> Response:
    """The job's communicator is gone on this host (the job ended, or the host left it);
    a planned job is dropped from the next plan."""
    core.jobs.end_report(host, job)
    return Response(status_code=204)
