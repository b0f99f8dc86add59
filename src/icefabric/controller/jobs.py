"""Jobs as their schedulers registered them, and what their hosts reported.

A job is owned: only the hosts it was registered on may report it, and only with its ranks
on exactly those hosts (docs/SERVICE.md, "Jobs are owned"). Every change is stored before
it is acknowledged; a change to a complete job asks for a new plan.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from icefabric.controller.errors import Conflict, Forbidden, Invalid, NotFound
from icefabric.controller.metrics import Metrics
from icefabric.controller.planner import JobState, PlanInputError, check_report
from icefabric.controller.store.repo import Repository
from icefabric.schemas_service import MAX_PLAN_QPS, CommReport
from icefabric.topology.model import Fabric


class JobBook:
    """Registered jobs (``hosts_of``) and their reports (``states``)."""

    def __init__(self, repo: Repository, lock: threading.RLock, metrics: Metrics,
                 request_plan: Callable[[str], None]):
        self.repo, self._lock, self.metrics = repo, lock, metrics
        self._request_plan = request_plan
        self.hosts_of: dict[str, list[str]] = repo.jobs()
        self.states: dict[str, JobState] = {}
        for job, host, doc in repo.reports():
            self.states.setdefault(job, JobState(job)).reports[host] = \
                CommReport.model_validate(doc)

    def snapshot(self) -> dict[str, JobState]:
        """A copy the planner may read while reports keep arriving."""
        with self._lock:
            return {k: JobState(k, dict(v.reports)) for k, v in self.states.items()}

    def create(self, job: str, hosts: list[str], fabric: Fabric | None) -> bool:
        """Register ``job`` on ``hosts``. True if created, False if it already was (same
        hosts); :class:`Conflict` if it exists with other hosts."""
        if fabric is not None:
            unknown = [h for h in hosts if h not in fabric.server_of_name]
            if unknown:
                raise Invalid(f"hosts not in the fabric: {', '.join(unknown[:5])}")
        hosts = sorted(set(hosts))
        with self._lock:
            old = self.hosts_of.get(job)
            if old is not None:
                if old != hosts:
                    raise Conflict(f"job {job!r} exists on other hosts; delete it first")
                return False
            self.repo.save_job(job, hosts)
            self.hosts_of[job] = hosts
        return True

    def delete(self, job: str) -> None:
        """Forget ``job`` and its reports; a planned job leaves the next plan."""
        with self._lock:
            if job not in self.hosts_of:
                raise NotFound(f"no job {job!r}")
            js = self.states.get(job)
            was_complete = js is not None and bool(js.reports) and js.complete
            self.repo.delete_job(job)
            del self.hosts_of[job]
            self.states.pop(job, None)
        if was_complete:
            self._request_plan(f"job {job} deleted")

    def _check_owner(self, host: str, rep: CommReport) -> None:
        """Only a host the job was registered on may report it, and only with its ranks on
        exactly those hosts: no host can claim another tenant's job name."""
        hosts = self.hosts_of.get(rep.job)
        if hosts is None:
            raise NotFound(f"job {rep.job!r} is not registered; its scheduler (or the "
                           f"admin) creates it with its hosts: PUT /v1/jobs/{rep.job}")
        if host not in hosts:
            raise Forbidden(f"host {host!r} is not a host of job {rep.job!r}")
        ranked = sorted({r.host for r in rep.ranks})
        if ranked != hosts:
            raise Conflict(f"job {rep.job!r} runs on {len(hosts)} registered hosts; this "
                           f"report puts its ranks on {len(ranked)} hosts "
                           f"({', '.join(sorted(set(ranked) ^ set(hosts))[:3])} differ)")

    def _check_host_qps(self, host: str, rep: CommReport) -> None:
        """The host's reports of all its jobs must fit one host plan."""
        n = len(rep.qps) + sum(len(js.reports[host].qps) for job, js in self.states.items()
                               if job != rep.job and host in js.reports)
        if n > MAX_PLAN_QPS:
            raise Invalid(f"host {host!r} would hold {n} QPs with this report; a host's "
                          f"plan holds at most {MAX_PLAN_QPS}")

    def put_report(self, fabric: Fabric | None, host: str, rep: CommReport) -> JobState:
        """Store ``host``'s report of its job; a complete job asks for a plan."""
        if fabric is None:
            raise Conflict("no fabric loaded yet; retry after the fabric is set")
        self._check_owner(host, rep)
        try:
            check_report(fabric, host, rep)
        except PlanInputError as e:
            raise Invalid(str(e)) from None
        with self._lock:
            self._check_host_qps(host, rep)
            js = self.states.get(rep.job)
            if js is not None and js.reports and set(js.reports) != {host} and \
                    _ranks(js.any) != _ranks(rep):
                raise Conflict(f"job {rep.job!r}: ranks differ from other hosts' reports")
            if js is not None and js.reports.get(host) == rep:
                return js
            self.repo.save_report(rep.job, host, rep.model_dump(mode="json"))
            js = self.states.setdefault(rep.job, JobState(rep.job))
            js.reports[host] = rep
            complete = js.complete
        self.metrics.reports.inc()
        if complete:
            self._request_plan(f"job {rep.job}")
        return js

    def end_report(self, host: str, job: str) -> None:
        """The job's communicator is gone on ``host`` (job ended or host left it): forget
        the report; a job planned so far is dropped from the next plan."""
        with self._lock:
            js = self.states.get(job)
            if js is None or host not in js.reports:
                raise NotFound(f"host {host!r} has no report for job {job!r}")
            was_complete = js.complete
            self.repo.delete_report(job, host)
            del js.reports[host]
            if not js.reports:
                del self.states[job]
        if was_complete:
            self._request_plan(f"job {job} ended on {host}")


def _ranks(rep: CommReport) -> list[tuple[int, str, int]]:
    return sorted((r.rank, r.host, r.device) for r in rep.ranks)
