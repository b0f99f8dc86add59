"""The planner thread: it coalesces plan requests, plans with the configured policy (in a
planner process when configured), stores the new version and wakes long-polling agents.

Changes that need a new plan put a typed :class:`PlanRequest` on a bounded queue; only this
thread changes :attr:`Publisher.current`, and it swaps in a whole :class:`PublishedPlan`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from icefabric.controller import planner
from icefabric.controller.cables import Cable
from icefabric.controller.metrics import Metrics
from icefabric.controller.planner import FabricNotCached, JobState, PlanOutcome
from icefabric.controller.published import PublishedPlan, next_plan, restore, store
from icefabric.controller.settings import Settings
from icefabric.controller.store.errors import StoreError
from icefabric.controller.store.repo import Repository
from icefabric.controller.watch import HostWatch
from icefabric.topology.model import Fabric

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanRequest:
    """A typed request for the planner thread."""

    reason: str
    links_only: bool = False


_STOP = PlanRequest("stop")


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is computed from, taken together under the state lock."""

    fabric: Fabric
    fabric_version: int
    seed: int
    jobs: dict[str, JobState]
    down: list[Cable]  # cables down, by node names and index
    down_ids: list[int]  # their directed link ids


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


class Publisher:
    """Plans on request and publishes each new version (stored first, then served)."""

    def __init__(self, settings: Settings, repo: Repository, metrics: Metrics,
                 inputs: Callable[[], PlanInputs | None]):
        self.settings, self.repo, self.metrics = settings, repo, metrics
        self._inputs = inputs
        self.current: PublishedPlan | None = restore(repo)
        self.last_error = ""
        self.watch = HostWatch()
        self._queue: queue.Queue[PlanRequest] = queue.Queue(maxsize=1024)
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._pool = None
        self._worker_fv = -1
        metrics.plan_version.set(self.version)

    @property
    def version(self) -> int:
        return self.current.version if self.current is not None else 0

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
            self._thread = threading.Thread(target=self._loop, name="ice-planner",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout=30)
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def request(self, reason: str, links_only: bool = False) -> None:
        self._idle.clear()
        self.metrics.plan_requests.inc()
        try:
            self._queue.put_nowait(PlanRequest(reason, links_only))
        except queue.Full:
            pass  # a plan is pending anyway; it will see the newest state

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until no plan request is pending (tests and the twin use it)."""
        return self._idle.wait(timeout_s)

    def _next_requests(self) -> tuple[list[str], bool] | None:
        """The next request and every one queued behind it (None: stop)."""
        req = self._queue.get()
        if req is _STOP:
            return None
        reasons, links_only = [req.reason], req.links_only
        if self.settings.plan_debounce_s:
            time.sleep(self.settings.plan_debounce_s)
        while True:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                return reasons, links_only
            if more is _STOP:
                self._queue.put(_STOP)
                return reasons, links_only
            reasons.append(more.reason)
            links_only = links_only and more.links_only

    def _loop(self) -> None:
        while (got := self._next_requests()) is not None:
            reasons, links_only = got
            try:
                self._plan(", ".join(reasons)[:200])
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
                            self.request(reason, links_only))
        t.daemon = True
        t.start()

    def _plan(self, reason: str) -> None:
        inp = self._inputs()
        if inp is None:
            return
        cur = self.current
        prev = None  # a plan of another fabric is no start for one of this fabric
        if cur is not None and cur.paths is not None and \
                cur.summary.fabric_version == inp.fabric_version:
            prev = planner.Previous(cur.paths, cur.workload_key, cur.shape_key, cur.ids,
                                    same_links=cur.down() == inp.down)
        kw = dict(policy_name=self.settings.policy, seed=inp.seed, down_ids=inp.down_ids)
        if self._pool is None:
            out = planner.compute_plan(inp.fabric, inp.jobs, prev=prev, **kw)
        else:
            out = self._plan_in_worker(inp, prev, kw)
        if out is not None:
            self._publish(out, reason, inp)

    def _plan_in_worker(self, inp: PlanInputs, prev: planner.Previous | None,
                        kw: dict) -> PlanOutcome | None:
        fv = inp.fabric_version
        for attempt in range(2):
            # the planner process caches the fabric; it is sent only when new to it
            send = inp.fabric if (attempt or self._worker_fv != fv) else None
            try:
                out = self._pool.submit(planner.compute_plan_in_worker, fv, send, inp.jobs,
                                        prev, **kw).result()
            except FabricNotCached:
                continue
            self._worker_fv = fv
            return out
        raise RuntimeError("planner process lost the fabric twice")

    def _publish(self, out: PlanOutcome, reason: str, inp: PlanInputs) -> None:
        """Store plan ``out`` as the next version, then serve it (one atomic swap) and wake
        the agents of the hosts it changed."""
        plan, changed = next_plan(self.current, out, reason, inp.down, inp.fabric_version,
                                  time.time())
        store(self.repo, plan, changed)
        self.current, self.last_error = plan, ""
        v = plan.version
        for job, why in out.errors.items():
            log.warning("plan v%d leaves out job %s: %s", v, job, why)
        self.metrics.observe_plan(out.planning_ms / 1e3, out.kind, v)
        self.watch.publish(changed)
        log.info("plan v%d (%s, %s): %d QPs on %d hosts, %d hosts changed, in %.1f ms", v,
                 out.kind, reason, out.n_qps, plan.summary.hosts, len(changed),
                 out.planning_ms)
        for x in out.no_path:
            log.warning("plan v%d leaves job %s out: %d QPs have no path (%s)", v,
                        x["job"], x["qps"], x["reason"])
