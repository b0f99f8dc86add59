"""Jobs: registered by their scheduler (or the admin) with the hosts they run on; only
those hosts may report them (docs/SERVICE.md, "Jobs are owned")."""

from __future__ import annotations

from fastapi import APIRouter, Path, Response

from icefabric.controller.deps import ERRORS, AdminDep, CoreDep, SchedulerDep
from icefabric.controller.errors import NotFound
from icefabric.schemas_service import JobCreate, JobError, JobView

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERRORS)


def _view(core, job: str) -> JobView:
    hosts = core.jobs.hosts_of.get(job)
    if hosts is None:
        raise NotFound(f"no job {job!r}")
    js = core.jobs.states.get(job)
    if js is None or not js.reports:
        return JobView(job=job, hosts_expected=hosts, hosts_reported=[], complete=False, qps=0)
    rep = js.any
    return JobView(job=job, job_order=rep.job_order, library=rep.library,
                   hosts_expected=hosts, hosts_reported=sorted(js.reports),
                   complete=js.complete, qps=sum(len(r.qps) for r in js.reports.values()),
                   size_bytes=rep.size_bytes, failing=js.failing,
                   errors=[JobError(host=h, error=e) for h, r in sorted(js.reports.items())
                           for e in r.errors])


@router.put("/{job}", response_model=JobView, responses={201: {"model": JobView}})
def create_job(body: JobCreate, core: CoreDep, _: SchedulerDep, response: Response,
               job: str = Path(max_length=128, pattern=r"^[A-Za-z0-9][\w.:/-]*$")) -> JobView:
    """Register a job on its hosts (201; 200 if it exists with the same hosts, 409 with
    others)."""
    if core.jobs.create(job, body.hosts, core.fabric):
        response.status_code = 201
    return _view(core, job)


@router.delete("/{job}", status_code=204)
def delete_job(core: CoreDep, _: SchedulerDep, job: str = Path(max_length=128)) -> Response:
    """The job ended: forget it and its reports (a planned job leaves the next plan)."""
    core.jobs.delete(job)
    return Response(status_code=204)


@router.get("", response_model=list[JobView])
async def list_jobs(core: CoreDep, _: AdminDep) -> list[JobView]:
    """Every registered job, with what its hosts reported."""
    return [_view(core, j) for j in sorted(core.jobs.hosts_of)]


@router.get("/{job}", response_model=JobView)
async def get_job(core: CoreDep, _: AdminDep, job: str = Path(max_length=128)) -> JobView:
    """One job."""
    return _view(core, job)
