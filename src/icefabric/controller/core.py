"""The controller's state and its planner thread.

Routes call the methods of :class:`ControllerCore`; every change is written to the
database before it is acknowledged. Changes that need a new plan put a typed
:class:`PlanRequest` on a bounded queue; one planner thread coalesces requests, plans with
the configured policy, stores the new version, and wakes long-polling agents.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from icefabric.control.plan import PathPlan
from icefabric.controller.metrics import Metrics
from icefabric.controller.planner import (
    FabricNotCached,
    JobState,
    PlanInputError,
    PlanOutcome,
    check_report,
    compute_plan,
    compute_plan_in_worker,
)
from icefabric.controller.settings import Settings
from icefabric.controller.store.errors import StoreError
from icefabric.controller.store.repo import Repository
from icefabric.schemas_service import (
    QP_PLANS,
    AgentEnrol,
    CommReport,
    Event,
    FabricUpload,
    HostPlan,
    LinkRef,
    PlanSummary,
    QpPlan,
)
from icefabric.topology.model import Fabric
from icefabric.topology.serialize import fabric_from_dict

log = logging.getLogger(__name__)


class NotFound(LookupError):
    pass


class Conflict(RuntimeError):
    pass


class Invalid(ValueError):
    pass


class Forbidden(PermissionError):
    """The token may not do this (403): e.g. an agent reporting another host's link."""


def _host_doc(summary: dict, host: str, qps: list[QpPlan]) -> bytes:
    """The :class:`HostPlan` document of ``host`` under plan ``summary``."""
    return HostPlan(host=host, version=summary.get("version", 0),
                    fabric_version=summary.get("fabric_version", 0),
                    policy=summary.get("policy", ""), created_at=summary.get("created_at", 0.0),
                    down_links=[LinkRef(**x) for x in summary.get("down_links", [])],
                    qps=qps).model_dump_json().encode()


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling: the admin (operator) or the agent of one host."""

    kind: str  # "admin" | "agent" | "enrol" | "scheduler"
    host: str | None = None


@dataclass(frozen=True)
class PlanRequest:
    """A typed request for the planner thread."""

    reason: str
    links_only: bool = False


_STOP = PlanRequest("stop")


class VersionWatch:
    """Lets async long-poll handlers wait for a plan version newer than theirs."""

    def __init__(self, version: int = 0):
        self.version = version
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def publish(self, version: int) -> None:
        self.version = version
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        ev, self._event = self._event, asyncio.Event()
        if ev is not None:
            ev.set()

    async def wait_newer(self, after: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while self.version <= after and self._event is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except TimeoutError:
                break
        return self.version


def _planner_process_init(controller_pid: int) -> None:
    """Planner process: lower CPU priority, so serving agents wins when cores are scarce;
    exit when the controller process is gone (killed with SIGKILL, nothing would stop us)."""
    try:
        os.nice(10)
    except OSError:  # pragma: no cover - not permitted: plan at normal priority
        pass

    def orphaned() -> None:
        while os.getppid() == controller_pid:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=orphaned, name="ice-planner-watch", daemon=True).start()


class ControllerCore:
    """State, persistence and planning of one controller process."""

    def __init__(self, settings: Settings, repo: Repository | None = None):
        self.settings = settings
        self.repo = repo or Repository(settings.database_url,
                                       lock_timeout_s=settings.db_lock_timeout_s)
        self.metrics = Metrics()
        self._lock = threading.RLock()
        self._admin_sha = sha256(self._admin_token())
        enrol = settings.enrol_token.get_secret_value() if settings.enrol_token else None
        self._enrol_sha = sha256(enrol) if enrol else self._admin_sha
        sched = settings.scheduler_token
        self._scheduler_sha = sha256(sched.get_secret_value()) if sched else None
        self.fabric: Fabric | None = None
        self.fabric_version = 0
        self.fabric_name = ""
        self.plan_seed = 0
        self.down: set[tuple[str, str]] = set()
        self.jobs: dict[str, JobState] = {}
        self.job_hosts: dict[str, list[str]] = {}  # registered jobs: who may report them
        self.token_host: dict[str, str] = {}
        self.hosts: dict[str, dict] = {}
        self.plan_version = 0
        self.plan_summary: dict | None = None
        self.host_docs: dict[str, bytes] = {}  # served as is: HostPlan JSON per host
        self.host_qps: dict[str, bytes] = {}  # stored: each host's QP plans (JSON array)
        self._host_models: dict[str, list[QpPlan]] = {}
        self.path_plan: PathPlan | None = None
        self.workload_key = ""
        self.last_error = ""
        self.watch = VersionWatch()
        self._queue: queue.Queue[PlanRequest] = queue.Queue(maxsize=1024)
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._pool = None
        self._worker_fv = -1
        self.fabric_doc: dict | None = None
        self._load()

    # -- startup ------------------------------------------------------------------------------
    def _admin_token(self) -> str:
        s = self.settings
        if s.admin_token is not None:
            return s.admin_token.get_secret_value()
        if s.admin_token_file is None:  # insecure-local: a token nobody knows
            return "ice_admin_" + secrets.token_urlsafe(32)
        p = Path(s.admin_token_file)
        if p.exists():
            return p.read_text().strip()
        tok = "ice_admin_" + secrets.token_urlsafe(32)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch(mode=0o600)
        p.write_text(tok + "\n")
        log.warning("generated an admin token in %s", p)
        return tok

    def _load(self) -> None:
        r = self.repo
        fab = r.load_fabric()
        if fab is not None:
            self.fabric_version, self.fabric_name, doc, self.plan_seed = fab
            self.fabric = fabric_from_dict(doc)
            self.fabric_doc = doc
        self.down = r.down_links()
        for h in r.hosts():
            self.token_host[h.token_sha256] = h.host
            self.hosts[h.host] = {"nics": json.loads(h.nics), "agent_version": h.agent_version,
                                  "actuator": h.actuator, "enrolled_at": h.enrolled_at,
                                  "last_seen": 0.0, "applied_version": h.applied_version}
        self.job_hosts = r.jobs()
        for job, host, doc in r.reports():
            self.jobs.setdefault(job, JobState(job)).reports[host] = \
                CommReport.model_validate(doc)
        latest = r.latest_plan()
        if latest is not None:
            row, docs = latest
            self.plan_version = row.version
            self.plan_summary = json.loads(row.summary)
            self.host_qps = {h: d for h, d in docs.items() if d != b"[]"}
            self._host_models = {h: QP_PLANS.validate_json(d) for h, d in self.host_qps.items()}
            self.host_docs = self._compose(self.plan_summary, self._host_models)
            pp = json.loads(row.path_plan)
            self.workload_key = pp.pop("workload_key", "")
            self.path_plan = PathPlan.from_dict(pp) if pp.get("sport") is not None else None
        self.watch.version = self.plan_version
        self.metrics.plan_version.set(self.plan_version)

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if loop is not None:
            self.watch.bind(loop)
        if self.settings.planner_processes and self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # Planning is CPU-bound Python: in its own process it does not take the GIL
            # from request handling.
            self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_planner_process_init, initargs=(os.getpid(),))
        if self._thread is None:
            self._thread = threading.Thread(target=self._planner_loop, name="ice-planner",
                                            daemon=True)
            self._thread.start()
        # Reports, fabric or links may have changed after the last stored plan (a crash
        # between the two writes); the planner skips the work if the plan is current.
        if self.fabric is not None and self.jobs:
            self.request_plan("startup")

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout=30)
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self.repo.close()

    # -- auth -----------------------------------------------------------------------------------
    def authenticate(self, token: str) -> Principal | None:
        """Constant-time check of a bearer token (digests compared with hmac)."""
        d = sha256(token)
        if hmac.compare_digest(d, self._admin_sha):
            return Principal("admin")
        # Agent tokens are looked up by digest: equal digests are the only way to match,
        # and the secret itself is never compared byte by byte.
        host = self.token_host.get(d)
        if host is not None:
            self.seen(host)
            return Principal("agent", host)
        if hmac.compare_digest(d, self._enrol_sha):
            return Principal("enrol")
        if self._scheduler_sha is not None and hmac.compare_digest(d, self._scheduler_sha):
            return Principal("scheduler")
        return None

    def known_host(self, host: str) -> bool:
        """A server of the fabric, or an enrolled host."""
        return host in self.hosts or (self.fabric is not None and
                                      host in self.fabric.server_of_name)

    def seen(self, host: str) -> None:
        h = self.hosts.get(host)
        if h is not None:
            h["last_seen"] = time.time()

    # -- fabric ---------------------------------------------------------------------------------
    def set_fabric(self, up: FabricUpload) -> int:
        try:
            fabric = fabric_from_dict(up.topology)
        except ValueError as e:
            raise Invalid(f"topology: {e}") from None
        down = set()
        for i, l in enumerate(up.down_links):
            if not len(fabric.links_between(l.a, l.b)):
                raise Invalid(f"down_links[{i}]: no link between {l.a} and {l.b}")
            down.add(tuple(sorted((l.a, l.b))))
        doc = up.topology
        with self._lock:
            v = self.repo.save_fabric(fabric.name, doc, up.plan_seed, sorted(down))
            self.fabric, self.fabric_version, self.fabric_name = fabric, v, fabric.name
            self.fabric_doc = doc
            self.plan_seed = up.plan_seed
            self.down = down
            self.workload_key = ""
        self.request_plan(f"fabric v{v}")
        return v

    def set_links(self, changes: list[tuple[str, str, bool]], reason: str) -> bool:
        """Apply link up/down changes; True if the set of down links changed."""
        if self.fabric is None:
            raise Conflict("no fabric loaded")
        norm = []
        for i, (a, b, up) in enumerate(changes):
            if not len(self.fabric.links_between(a, b)):
                raise Invalid(f"links[{i}]: no link between {a} and {b}")
            norm.append((tuple(sorted((a, b))), up))
        with self._lock:
            new = set(self.down)
            for key, up in norm:
                (new.discard if up else new.add)(key)
            if new == self.down:
                return False
            self.repo.set_links(down=sorted(new - self.down), up=sorted(self.down - new))
            self.down = new
        self.metrics.link_events.inc(len(norm))
        self.request_plan(reason, links_only=True)
        return True

    def down_link_ids(self) -> list[int]:
        ids: list[int] = []
        for a, b in sorted(self.down):
            ids += self.fabric.links_between(a, b).tolist()
        return sorted(ids)

    # -- agents ---------------------------------------------------------------------------------
    def enrol(self, req: AgentEnrol) -> str:
        if self.fabric is not None and req.host not in self.fabric.server_of_name:
            raise NotFound(f"host {req.host!r} is not in the fabric")
        token = "ice_agent_" + secrets.token_urlsafe(32)
        d = sha256(token)
        nics = [n.model_dump() for n in req.nics]
        with self._lock:
            self.repo.upsert_host(req.host, d, nics, req.agent_version, req.actuator)
            for k in [k for k, v in self.token_host.items() if v == req.host]:
                del self.token_host[k]
            self.token_host[d] = req.host
            old = self.hosts.get(req.host, {})
            self.hosts[req.host] = {"nics": nics, "agent_version": req.agent_version,
                                    "actuator": req.actuator, "enrolled_at": time.time(),
                                    "last_seen": time.time(),
                                    "applied_version": old.get("applied_version", 0)}
        self.metrics.enrolments.inc()
        return token

    async def ack(self, host: str, version: int) -> None:
        """Record that ``host`` applied plan ``version`` (stored before it returns; acks
        arriving together share a transaction, and no thread waits for it)."""
        if version > self.plan_version:
            raise Invalid(f"version {version} has not been issued (current "
                          f"{self.plan_version})")
        h = self.hosts.get(host)
        if h is None:
            raise NotFound(f"host {host!r} is not enrolled")
        now = time.time()
        await self.repo.set_applied_async(host, version, now)
        h["applied_version"], h["last_seen"] = version, now

    def connected_agents(self) -> int:
        cut = time.time() - self.settings.agent_timeout_s
        return sum(1 for h in self.hosts.values() if h["last_seen"] >= cut)

    def _host_link(self, host: str, link: LinkRef) -> bool:
        """Is one end of ``link`` a node of server ``host``?"""
        f = self.fabric
        s = f.server_of_name.get(host)
        ends = [f.node_id.get(n) for n in (link.a, link.b)]
        return s is not None and any(n is not None and f.node_server[n] == s for n in ends)

    # -- jobs -----------------------------------------------------------------------------------
    def create_job(self, job: str, hosts: list[str]) -> bool:
        """Register ``job`` on ``hosts``: only they may report it, and their reports must
        put its ranks on exactly these hosts. True if created, False if it already was
        (same hosts); :class:`Conflict` if it exists with other hosts."""
        if self.fabric is not None:
            unknown = [h for h in hosts if h not in self.fabric.server_of_name]
            if unknown:
                raise Invalid(f"hosts not in the fabric: {', '.join(unknown[:5])}")
        hosts = sorted(set(hosts))
        with self._lock:
            old = self.job_hosts.get(job)
            if old is not None:
                if old != hosts:
                    raise Conflict(f"job {job!r} exists on other hosts; delete it first")
                return False
            self.repo.save_job(job, hosts)
            self.job_hosts[job] = hosts
        return True

    def delete_job(self, job: str) -> None:
        """Forget ``job`` and its reports; a planned job leaves the next plan."""
        with self._lock:
            if job not in self.job_hosts:
                raise NotFound(f"no job {job!r}")
            js = self.jobs.get(job)
            was_planned = js is not None and js.ready
            self.repo.delete_job(job)
            del self.job_hosts[job]
            self.jobs.pop(job, None)
        if was_planned:
            self.request_plan(f"job {job} deleted")

    def _check_owner(self, host: str, rep: CommReport) -> None:
        """Only a host the job was registered on may report it, and only with its ranks on
        exactly those hosts: no host can claim another tenant's job name."""
        hosts = self.job_hosts.get(rep.job)
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

    # -- reports --------------------------------------------------------------------------------
    def put_report(self, host: str, rep: CommReport) -> JobState:
        if self.fabric is None:
            raise Conflict("no fabric loaded yet; retry after the fabric is set")
        self._check_owner(host, rep)
        try:
            check_report(self.fabric, host, rep)
        except PlanInputError as e:
            raise Invalid(str(e)) from None
        with self._lock:
            js = self.jobs.get(rep.job)
            if js is not None and js.reports:
                other = js.any
                if sorted((r.rank, r.host, r.device) for r in other.ranks) != \
                        sorted((r.rank, r.host, r.device) for r in rep.ranks):
                    if set(js.reports) != {host}:
                        raise Conflict(f"job {rep.job!r}: ranks differ from other hosts' "
                                       f"reports")
            old = js.reports.get(host) if js else None
            if old is not None and old == rep:
                return js
            self.repo.save_report(rep.job, host, rep.model_dump(mode="json"))
            js = self.jobs.setdefault(rep.job, JobState(rep.job))
            js.reports[host] = rep
            js.ended.discard(host)
            planned = js.ready
        self.metrics.reports.inc()
        if planned:
            self.request_plan(f"job {rep.job}")
        return js

    def end_report(self, host: str, job: str) -> None:
        """The job's communicator is gone on ``host`` (job ended or host left it): forget
        the report; a job planned so far is dropped from the next plan, and stays out
        until its ending hosts report it again (:attr:`JobState.ready`)."""
        with self._lock:
            js = self.jobs.get(job)
            if js is None or host not in js.reports:
                raise NotFound(f"host {host!r} has no report for job {job!r}")
            was_planned = js.ready
            self.repo.delete_report(job, host)
            del js.reports[host]
            js.ended.add(host)
            if not js.reports:
                del self.jobs[job]
        if was_planned:
            self.request_plan(f"job {job} ended on {host}")

    # -- plans ----------------------------------------------------------------------------------
    def request_plan(self, reason: str, links_only: bool = False) -> None:
        self._idle.clear()
        self.metrics.plan_requests.inc()
        try:
            self._queue.put_nowait(PlanRequest(reason, links_only))
        except queue.Full:
            pass  # a plan is pending anyway; it will see the newest state

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until no plan request is pending (tests and the twin use it)."""
        return self._idle.wait(timeout_s)

    def host_plan(self, host: str) -> bytes | None:
        doc = self.host_docs.get(host)
        if doc is None and self.plan_version > 0:
            doc = _host_doc(self.plan_summary or {}, host, [])
        return doc

    def _planner_loop(self) -> None:
        while True:
            req = self._queue.get()
            if req is _STOP:
                return
            reasons, links_only = [req.reason], req.links_only
            if self.settings.plan_debounce_s:
                time.sleep(self.settings.plan_debounce_s)
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)
                    break
                reasons.append(more.reason)
                links_only = links_only and more.links_only
            try:
                self._plan(", ".join(reasons)[:200], links_only)
            except StoreError as e:  # keep the last plan; plan again once the database is back
                self.last_error = str(e)
                self.metrics.plan_errors.inc()
                log.error("plan not stored, retrying in %g s: %s", self.settings.plan_retry_s, e)
                self._retry_later(reasons[0], links_only)
            except Exception as e:  # keep the last plan; report the error on /healthz
                self.last_error = f"{type(e).__name__}: {e}"
                self.metrics.plan_errors.inc()
                log.exception("planning failed")
            if self._queue.empty():
                self._idle.set()

    def _retry_later(self, reason: str, links_only: bool) -> None:
        reason = reason if reason.startswith("retry: ") else f"retry: {reason}"
        t = threading.Timer(self.settings.plan_retry_s, lambda: self._thread is not None and
                            self.request_plan(reason, links_only))
        t.daemon = True
        t.start()

    def _plan(self, reason: str, links_only: bool) -> None:
        with self._lock:
            fabric = self.fabric
            if fabric is None:
                return
            jobs = {k: JobState(k, dict(v.reports), set(v.ended)) for k, v in self.jobs.items()}
            down = sorted(self.down)
            down_ids = self.down_link_ids()
            seed, fv = self.plan_seed, self.fabric_version
            prev, prev_key = self.path_plan, self.workload_key
        last = self.plan_summary or {}
        same_links = last.get("fabric_version") == fv and \
            sorted((x["a"], x["b"]) for x in last.get("down_links", [])) == down
        unchanged_key = prev_key if prev is not None and same_links else None
        kw = dict(policy_name=self.settings.policy, seed=seed, down_ids=down_ids,
                  prev_key=prev_key)
        if self._pool is None:
            out = compute_plan(fabric, jobs, prev=prev, unchanged=lambda k: k == unchanged_key,
                               **kw)
        else:
            out = self._plan_in_worker(fv, jobs, prev, unchanged_key, kw)
        if out is not None:
            self._publish(out, reason, down, fv)

    def _publish(self, out: PlanOutcome, reason: str, down: list, fv: int) -> None:
        """Store plan ``out`` as the next version and serve it. Only the planner thread
        changes plan state, so this runs without the state lock; the swap is atomic."""
        now = time.time()
        version = self.plan_version + 1
        # Only hosts whose QP plans changed are written and re-read (a re-plan moves few).
        changed = {h: q for h, q in out.hosts.items() if self.host_qps.get(h) != q}
        models = {h: self._host_models[h] if h not in changed else QP_PLANS.validate_json(q)
                  for h, q in out.hosts.items()}
        changed.update({h: b"[]" for h in self.host_qps if h not in out.hosts})
        summary = PlanSummary(version=version, policy=out.policy,
                              created_at=now, reason=f"{out.kind}: {reason}",
                              planning_ms=round(out.planning_ms, 3), jobs=out.jobs,
                              qps=out.n_qps, hosts=len(out.hosts),
                              down_links=[LinkRef(a=a, b=b) for a, b in down],
                              fabric_version=fv, no_path=out.no_path
                              ).model_dump(mode="json")
        self.repo.save_plan(version, policy=summary["policy"], reason=summary["reason"],
                            created_at=now, planning_ms=out.planning_ms, fabric_version=fv,
                            summary=summary,
                            path_plan={**out.paths.to_dict(), "workload_key": out.key},
                            host_docs=changed)
        docs = self._compose(summary, models)
        with self._lock:
            self.plan_version, self.plan_summary, self.host_docs = version, summary, docs
            self.host_qps, self._host_models = out.hosts, models
            self.path_plan, self.workload_key = out.paths, out.key
            self.last_error = ""
        for job, why in out.errors.items():
            log.warning("plan v%d leaves out job %s: %s", version, job, why)
        self.metrics.observe_plan(out.planning_ms / 1e3, out.kind, version)
        self.watch.publish(version)
        log.info("plan v%d (%s, %s): %d QPs on %d hosts (%d changed) in %.1f ms", version,
                 out.kind, reason, out.n_qps, len(docs), len(changed), out.planning_ms)
        for x in out.no_path:
            log.warning("plan v%d leaves job %s out: %d QPs have no path (%s)", version,
                        x["job"], x["qps"], x["reason"])

    def _plan_in_worker(self, fv, jobs, prev, unchanged_key, kw) -> PlanOutcome | None:
        for attempt in range(2):
            doc = self.fabric_doc if (attempt or self._worker_fv != fv) else None
            try:
                out = self._pool.submit(compute_plan_in_worker, fv, doc, jobs, prev,
                                        unchanged_key, **kw).result()
            except FabricNotCached:
                continue
            self._worker_fv = fv
            return out
        raise RuntimeError("planner process lost the fabric twice")

    @staticmethod
    def _compose(summary: dict, hosts: dict[str, list[QpPlan]]) -> dict[str, bytes]:
        return {h: _host_doc(summary, h, qps) for h, qps in hosts.items()}

    # -- events ---------------------------------------------------------------------------------
    def add_events(self, host: str, events: list[Event], *, agent: bool = False) -> bool:
        """Store ``events`` of ``host`` and apply their link changes. An agent may name
        only links of its own host (a NIC's cable, its intra-server links): it sees
        those first-hand, while a fabric link's state comes from the operator, so one
        host cannot take down the paths of others (:class:`Forbidden`)."""
        changes = []
        for i, e in enumerate(events):
            if e.kind in ("link_down", "link_up") and e.link is None:
                raise Invalid(f"events[{i}]: {e.kind} event needs 'link'")
            if e.link is not None:
                if self.fabric is None:
                    raise Conflict("no fabric loaded")
                if agent and not self._host_link(host, e.link):
                    raise Forbidden(f"events[{i}]: link {e.link.a}-{e.link.b} is not a link "
                                    f"of host {host!r}; fabric links are reported by the "
                                    f"operator (admin token)")
            if e.kind in ("link_down", "link_up"):
                changes.append((e.link.a, e.link.b, e.kind == "link_up"))
            elif e.kind == "cnp_rate":
                self.metrics.cnp_reports.inc()
        self.repo.add_events(host, [e.model_dump(mode="json") for e in events])
        self.metrics.events.inc(len(events))
        for e in events:  # an operator reads what happened; telemetry only when debugging
            # (an agent's text as repr: a newline in it must not forge a log line)
            what = f"{e.link.a}-{e.link.b}" if e.link else repr(e.nic) if e.nic else ""
            note = f": {e.message!r}" if e.message else ""
            level = (logging.DEBUG if e.kind in ("port_counters", "cnp_rate") else
                     logging.WARNING if e.kind == "plan_rejected" else logging.INFO)
            log.log(level, "event %s %s from %s%s", e.kind, what, host, note)
        if changes:
            replan = self.set_links(changes, f"events from {host}")
            log.info("links %s: %s", ", ".join(f"{a}-{b} {'up' if up else 'down'}"
                                               for a, b, up in changes),
                     "re-plan requested" if replan else "no change, no re-plan")
            return replan
        return False
