"""The state of one controller process, and the parts that keep it.

Routes reach the parts through :class:`ControllerCore`: the fabric and its link states
(here), the jobs and their reports (:class:`~.jobs.JobBook`), the enrolled hosts
(:class:`~.fleet.Fleet`) and the published plan (:class:`~.publisher.Publisher`). Every
change is written to the database before it is acknowledged; changes that need a new plan
ask the publisher for one.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

from icefabric.controller import cables
from icefabric.controller.cables import Cable
from icefabric.controller.errors import Conflict, Forbidden, Invalid
from icefabric.controller.fleet import Fleet
from icefabric.controller.jobs import JobBook
from icefabric.controller.metrics import Metrics
from icefabric.controller.published import PublishedPlan
from icefabric.controller.publisher import PlanInputs, Publisher
from icefabric.controller.settings import Settings
from icefabric.controller.store.repo import Repository
from icefabric.controller.tokens import Principal, Tokens
from icefabric.schemas_service import Event, FabricUpload, LinkRef
from icefabric.topology.model import Fabric
from icefabric.topology.serialize import fabric_from_dict

log = logging.getLogger(__name__)

#: younger collections before a full one, with ``Settings.tune_gc`` (Python's default: 10)
FULL_GC_AFTER = 100


class ControllerCore:
    """State, persistence and planning of one controller process."""

    def __init__(self, settings: Settings, repo: Repository | None = None):
        self.settings = settings
        self.repo = repo or Repository(settings.database_url,
                                       lock_timeout_s=settings.db_lock_timeout_s)
        self.metrics = Metrics()
        self._lock = threading.RLock()
        self.tokens = Tokens(settings)
        self.fabric: Fabric | None = None
        self.fabric_version, self.fabric_name, self.plan_seed = 0, "", 0
        fab = self.repo.load_fabric()  # (its document is not kept: the database has it)
        if fab is not None:
            self.fabric_version, self.fabric_name, doc, self.plan_seed = fab
            self.fabric = fabric_from_dict(doc)
        self.down: set[Cable] = self._load_down()
        self.fleet = Fleet(self.repo, self._lock, self.metrics)
        self.publisher = Publisher(settings, self.repo, self.metrics, self._plan_inputs)
        self.jobs = JobBook(self.repo, self._lock, self.metrics, self.publisher.request)

    def _load_down(self) -> set[Cable]:
        """The stored down cables, a pair stored as "every cable" (schema 3) expanded
        against the fabric and written back per cable."""
        down = self.repo.down_links()
        whole = {(a, b) for a, b, k in down if k < 0}
        if not whole:
            return down
        if self.fabric is None:
            return set()
        new = {c for c in down if c[2] >= 0} | {
            (a, b, k) for a, b in whole for k in range(self.fabric.n_cables(a, b))}
        self.repo.set_links(down=sorted(new), up=[(a, b, -1) for a, b in sorted(whole)])
        return new

    @property
    def plan(self) -> PublishedPlan | None:
        """The plan served now."""
        return self.publisher.current

    @property
    def plan_version(self) -> int:
        return self.publisher.version

    def host_version(self, host: str) -> int:
        """The version of ``host``'s plan document (0: none yet)."""
        plan = self.publisher.current
        return plan.host_version(host) if plan is not None else 0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.publisher.start(loop)
        # Reports, fabric or links may have changed after the last stored plan (a crash
        # between the two writes); the planner skips the work if the plan is current.
        if self.fabric is not None and self.jobs.states:
            self.publisher.request("startup")
        self._tune_gc()

    def _tune_gc(self) -> None:
        """With ``settings.tune_gc``: every object alive now (the imports, the fabric)
        leaves the garbage collector's scans, and a full collection waits for 100 younger
        ones instead of 10. Each full collection stops every request: in the soak's ramp
        the ~170,000 objects of the imports and fabric, and ~150 per parked long-poll,
        made one every ~5 s that took 100-350 ms (BENCHMARKS.md). Collected first, so no
        garbage is kept."""
        if self.settings.tune_gc:
            gc.collect()
            gc.freeze()
            gc.set_threshold(*gc.get_threshold()[:2], FULL_GC_AFTER)

    def stop(self) -> None:
        self.publisher.stop()
        self.repo.close()

    def authenticate(self, token: str) -> Principal | None:
        return self.tokens.principal(token, self.fleet.host_of)

    def known_host(self, host: str) -> bool:
        """A server of the fabric, or an enrolled host."""
        return host in self.fleet.hosts or (self.fabric is not None and
                                            host in self.fabric.server_of_name)

    def _plan_inputs(self) -> PlanInputs | None:
        with self._lock:
            if self.fabric is None:
                return None
            return PlanInputs(self.fabric, self.fabric_version, self.plan_seed,
                              self.jobs.snapshot(), sorted(self.down), self.down_link_ids())

    # -- fabric ---------------------------------------------------------------------------------
    def set_fabric(self, up: FabricUpload) -> int:
        try:
            fabric = fabric_from_dict(up.topology)
        except ValueError as e:
            raise Invalid(f"topology: {e}") from None
        down = {c for i, l in enumerate(up.down_links)
                for c in cables.cables(fabric, l, f"down_links[{i}]")}
        with self._lock:
            v = self.repo.save_fabric(fabric.name, up.topology, up.plan_seed, sorted(down))
            self.fabric, self.fabric_version, self.fabric_name = fabric, v, fabric.name
            self.plan_seed, self.down = up.plan_seed, down
        self._tune_gc()
        self.publisher.request(f"fabric v{v}")
        return v

    def set_links(self, changes: list[tuple[LinkRef, bool]], where: str, reason: str) -> bool:
        """Apply cable up/down changes (``where[i]`` names change ``i`` in errors; one log
        line says them, who sent them and what follows); True if the set of down cables
        changed."""
        if self.fabric is None:
            raise Conflict("no fabric loaded")
        norm = [(cables.cables(self.fabric, link, f"{where}[{i}]"), up)
                for i, (link, up) in enumerate(changes)]
        said = ", ".join(f"{cables.name(link)} {'up' if up else 'down'}"
                         for link, up in changes)
        with self._lock:
            new = set(self.down)
            for named, up in norm:
                (new.difference_update if up else new.update)(named)
            if new == self.down:
                log.info("links %s (%s): no change, no re-plan", said, reason)
                return False
            self.repo.set_links(down=sorted(new - self.down), up=sorted(self.down - new))
            self.down = new
        self.metrics.link_events.inc(len(norm))
        log.info("links %s (%s): re-plan requested", said, reason)
        self.publisher.request(reason, links_only=True)
        return True

    def down_link_ids(self) -> list[int]:
        return cables.link_ids(self.fabric, self.down)

    def _host_link(self, host: str, link: LinkRef) -> bool:
        """Is one end of ``link`` a node of server ``host``?"""
        f = self.fabric
        s = f.server_of_name.get(host)
        ends = [f.node_id.get(n) for n in (link.a, link.b)]
        return s is not None and any(n is not None and f.node_server[n] == s for n in ends)

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
                changes.append((e.link, e.kind == "link_up"))
            elif e.kind == "cnp_rate":
                self.metrics.cnp_reports.inc()
        self.repo.add_events(host, [e.model_dump(mode="json") for e in events])
        self.metrics.events.inc(len(events))
        for e in events:
            if e.kind not in ("link_down", "link_up"):  # link changes: set_links says them
                _log_event(host, e)
        return bool(changes) and self.set_links(changes, "events", f"events from {host}")


def _log_event(host: str, e: Event) -> None:
    """One log line per event: an operator reads what happened; telemetry only when
    debugging (an agent's text as repr: a newline in it must not forge a log line)."""
    what = cables.name(e.link) if e.link else repr(e.nic) if e.nic else ""
    note = f": {e.message!r}" if e.message else ""
    level = (logging.DEBUG if e.kind in ("port_counters", "cnp_rate") else
             logging.WARNING if e.kind == "plan_rejected" else logging.INFO)
    log.log(level, "event %s %s from %s%s", e.kind, what, host, note)
