"""The agent loop: enrol, report, long-poll the plan, apply it, run local rules, report
events. Any failure of an iteration (network, HTTP status, a body that is not what the
API promises, a plan that fails validation, an actuator error) is logged and retried with
capped exponential backoff, and the last good plan stays applied meanwhile: the agent
never exits on what a controller (or anything posing as one) answers. A plan that fails
validation is refused whole and reported to the controller (a ``plan_rejected`` event)."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from icefabric.agent import autonomy
from icefabric.agent.actuators.base import Actuator
from icefabric.agent.client import (
    AuthError,
    BadResponse,
    ControllerClient,
    ControllerUnavailable,
    Rejected,
)
from icefabric.qpid import QpId
from icefabric.schemas_service import (
    AgentEnrol,
    CommReport,
    Event,
    EventBatch,
    HostPlan,
    NicInfo,
    PlanAck,
)

log = logging.getLogger(__name__)

AGENT_VERSION = "0.1.0"


@dataclass
class Backoff:
    """Capped exponential backoff with full jitter (AWS architecture blog, 2015)."""

    initial_s: float = 0.05
    max_s: float = 5.0
    factor: float = 2.0
    seed: int | None = None
    _n: int = 0
    _rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self):
        self._rng = random.Random(self.seed)

    def next(self) -> float:
        cap = min(self.max_s, self.initial_s * self.factor ** self._n)
        self._n += 1
        return self._rng.uniform(cap / 2, cap)

    def reset(self) -> None:
        self._n = 0


@dataclass(frozen=True, eq=False)
class AgentOptions:
    """How an :class:`Agent` runs.

    Attributes
    ----------
    nics : list of NicInfo — the host's NICs, sent when it enrols.
    poll_wait_s : float — long-poll wait per request.
    backoff : Backoff, optional — retry delays after a failed request.
    rules : LocalRules, optional — what the agent does on its own (autonomy).
    state_file : path, optional — keeps token and last plan across agent restarts.
    """

    nics: list[NicInfo] | None = None
    poll_wait_s: float = 10.0
    backoff: Backoff | None = None
    rules: autonomy.LocalRules | None = None
    state_file: str | Path | None = None


class Agent:
    """One host's agent.

    Parameters
    ----------
    host : str — the host name (as in the fabric).
    client : ControllerClient
    actuator : Actuator
    enrol_token : str — token to enrol with (rotated agent token is kept in memory and in
        ``options.state_file``).
    collector : callable returning the host's :class:`CommReport` list.
    options : AgentOptions, optional — NICs, long-poll wait, backoff, rules, state file.
    """

    def __init__(self, host: str, client: ControllerClient, actuator: Actuator, *,
                 enrol_token: str, collector: Callable[[], list[CommReport]] = list,
                 options: AgentOptions | None = None):
        o = options or AgentOptions()
        self.host = host
        self.client = client
        self.actuator = actuator
        self.enrol_token = enrol_token
        self.collector = collector
        self.nics = o.nics or []
        self.poll_wait_s = o.poll_wait_s
        self.backoff = o.backoff or Backoff()
        self.rules = o.rules or autonomy.LocalRules()
        self.state_file = Path(o.state_file) if o.state_file else None
        self.plan: HostPlan | None = None
        self.acked = 0  # the plan version the controller knows this host applied
        self._ack: PlanAck | None = None
        self._resync = False
        self.reported: dict[str, str] = {}  # job -> the report sent
        self.report_errors: dict[str, str] = {}  # job -> why the controller refused it
        self.events: list[Event] = []
        self.errors = 0
        self.last_error = ""
        self.rejected = 0  # plans refused (failed validation, or for another host)
        self._last_rejection = ""
        self._lock = threading.Lock()
        self._load_state()

    # -- persistence of the agent's own state ---------------------------------------------------
    def _load_state(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        try:
            d = json.loads(self.state_file.read_text())
            self.client.token = d.get("token") or None
            if d.get("plan"):
                plan = HostPlan.model_validate(d["plan"])
                if plan.host != self.host:
                    raise ValueError(f"its plan is for host {plan.host!r}")
                self.plan = plan
                self.actuator.apply(self.plan)
                self.rules.on_plan(self.plan)
        except (ValueError, OSError) as e:
            log.warning("%s: ignoring unreadable state file: %s", self.host, e)

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        d = {"token": self.client.token,
             "plan": self.plan.model_dump(mode="json") if self.plan else None}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.touch(mode=0o600)
        tmp.write_text(json.dumps(d))
        tmp.replace(self.state_file)

    # -- steps ----------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.plan.version if self.plan else 0

    def enrol(self) -> None:
        req = AgentEnrol(host=self.host, nics=self.nics, agent_version=AGENT_VERSION,
                         actuator=self.actuator.name)
        self.client.enrol(self.enrol_token, req)
        self.reported.clear()
        # A controller that forgot our token may have lost its plans too (versions start
        # again): take its current plan whatever its version.
        self._resync = self.plan is not None
        self._save_state()

    def report(self) -> None:
        """Send new or changed reports; end the jobs the collector no longer lists. A
        report the controller refuses (e.g. a job its scheduler has not created yet) is
        logged and sent again next iteration; it does not hold up the other jobs' plans."""
        now = {rep.job: rep for rep in self.collector()}
        for job in [j for j in self.reported if j not in now]:
            self.client.end_report(self.host, job)
            del self.reported[job]
        for job in [j for j in self.report_errors if j not in now]:
            del self.report_errors[job]
        for job, rep in now.items():
            doc = rep.model_dump_json()
            if self.reported.get(job) != doc:
                try:
                    self.client.put_report(self.host, rep)
                except Rejected as e:
                    if self.report_errors.get(job) != str(e):
                        log.warning("%s: report of job %s refused: %s", self.host, job, e)
                    self.report_errors[job] = str(e)
                    continue
                self.report_errors.pop(job, None)
                self.reported[job] = doc

    def flush_events(self) -> None:
        with self._lock:
            batch, self.events = self.events[:1000], self.events[1000:]
        if not batch:
            return
        try:
            self.client.post_events(EventBatch(events=batch))
        except (ControllerUnavailable, AuthError):
            with self._lock:
                self.events[:0] = batch
            raise

    def poll(self, wait_s: float | None = None) -> bool:
        """Fetch a newer plan (long-poll) and apply it; True if one was applied. A plan
        that fails validation is reported and raised as :class:`BadResponse` (the last
        good plan stays applied)."""
        resync = self._resync
        try:
            # Resyncing, any plan the controller has will do (its versions start at 1).
            plan = self.client.get_plan(self.host, after_version=0 if resync else self.version,
                                        wait_s=self.poll_wait_s if wait_s is None else wait_s)
            if plan is not None and plan.host != self.host:
                raise BadResponse(f"plan v{plan.version} is for host {plan.host!r}, not "
                                  f"{self.host!r}")
        except BadResponse as e:
            self._reject(str(e))
            raise
        if plan is None:
            return False
        self._resync = False  # (only once a plan came: the controller may have none yet)
        if plan.version == self.version or \
                (plan.version < self.version and not resync):
            return False
        if plan.version < self.version:
            log.warning("%s: the controller's plan went back from v%d to v%d (its database "
                        "was reset?); applying it", self.host, self.version, plan.version)
        self.apply(plan)
        return True

    def apply(self, plan: HostPlan) -> None:
        res = self.actuator.apply(plan)
        self.plan = plan
        self.rules.on_plan(plan)
        self._save_state()
        for m in res.messages:
            log.warning("%s: %s", self.host, m)
        self._ack = PlanAck(version=plan.version, applied=res.applied, failed=len(res.failed),
                            message="; ".join(res.messages)[:1000])
        self.send_ack()

    def _reject(self, why: str) -> None:
        """Tell the controller (once per distinct reason) that its plan was refused."""
        self.rejected += 1
        if why == self._last_rejection:
            return
        self._last_rejection = why
        log.warning("%s: refused the plan served, keeping plan v%d: %s", self.host,
                    self.version, why)
        with self._lock:
            self.events.append(Event(kind="plan_rejected", t_ns=time.time_ns(),
                                     message=why[:1024]))
        try:
            self.flush_events()
        except (ControllerUnavailable, AuthError, Rejected, BadResponse):
            pass  # still queued (or refused); the next iteration tries again

    def send_ack(self) -> None:
        """Tell the controller which plan is applied (again after a failed attempt)."""
        if self._ack is not None and self._ack.version != self.acked:
            self.client.ack(self.host, self._ack)
            self.acked = self._ack.version

    # -- local observations -> autonomous actions -------------------------------------------------
    def _own_link(self, a: str, b: str) -> bool:
        """A link of this host (its nodes are ``host/...``): the only ones the controller
        takes link events for from an agent."""
        return any(n == self.host or n.startswith(self.host + "/") for n in (a, b))

    def observe_links_down(self, link_names: list[tuple[str, str]], link_ids: set[int]) -> int:
        """A local observation of failed links: switch affected QPs to backup ports now and
        queue the events of this host's own links for the controller (fabric links reach
        it from the operator). Returns the number of QPs switched."""
        ports, _ = self.rules.step(down_link_ids=set(link_ids))
        for a in ports:
            self.actuator.set_sport(a.qp, a.sport)
        with self._lock:
            for a, b in link_names:
                if self._own_link(a, b):
                    self.events.append(Event(kind="link_down", link={"a": a, "b": b},
                                             t_ns=time.time_ns(),
                                             counters={"qps_to_backup_port": len(ports)}))
        return len(ports)

    def observe_links_up(self, link_names: list[tuple[str, str]]) -> None:
        """A local observation of links that work again: queue the events of this host's
        own links (the controller re-plans; the QPs stay on their ports until the new
        plan arrives)."""
        with self._lock:
            self.events += [Event(kind="link_up", link={"a": a, "b": b}, t_ns=time.time_ns())
                            for a, b in link_names if self._own_link(a, b)]

    def observe_cnps(self, cnps_in_window: dict[QpId, int]) -> int:
        """CNPs per QP in the last window: persistent congestion releases the pacer (DCQCN
        governs). Returns the number of QPs that fell back."""
        _, unpace = self.rules.step(cnps_in_window=cnps_in_window)
        for a in unpace:
            self.actuator.set_rate(a.qp, None)
        if unpace:
            with self._lock:
                self.events.append(Event(kind="cnp_rate", counters={
                    "max_cnps_in_window": float(max(cnps_in_window.values())),
                    "qps_fell_back_to_dcqcn": float(len(unpace))}))
        return len(unpace)

    # -- loop -----------------------------------------------------------------------------------
    def step(self) -> None:
        """One iteration: (re-)enrol if needed, report, flush events, long-poll."""
        if not self.client.token:
            self.enrol()
        self.report()
        self.flush_events()
        self.send_ack()
        self.poll()

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set; every failure of an iteration is logged and backs
        off, and the last good plan stays applied."""
        while not stop.is_set():
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - whatever an iteration met, try again
                self._failed(e)
                stop.wait(self.backoff.next())
            else:
                self.backoff.reset()

    def _failed(self, e: Exception) -> None:
        self.errors += 1
        self.last_error = f"{type(e).__name__}: {e}"
        if isinstance(e, AuthError):
            self.client.token = None  # the controller forgot us: enrol again
        elif isinstance(e, ControllerUnavailable) or \
                (isinstance(e, Rejected) and e.status in (404, 409)):
            log.debug("%s: %s", self.host, e)  # expected while the controller catches up
        elif isinstance(e, (Rejected, BadResponse)):
            log.warning("%s: %s", self.host, e)
        else:  # an actuator, collector or state-file failure, or a bug: keep going
            log.warning("%s: iteration failed, retrying: %s", self.host, self.last_error,
                        exc_info=log.isEnabledFor(logging.DEBUG))


@contextmanager
def running(agents: Iterable[Agent], join_timeout_s: float = 15.0) -> Iterator[None]:
    """Run each agent's loop in a thread for the duration of the ``with`` block; then stop
    them, wait for them, and close their clients (the twin and the tests run fleets so)."""
    agents = list(agents)
    stop = threading.Event()
    threads = [threading.Thread(target=a.run, args=(stop,), daemon=True, name=f"agent-{a.host}")
               for a in agents]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=join_timeout_s)
        for a in agents:
            a.client.close()
