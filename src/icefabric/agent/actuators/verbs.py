"""Actuator ``verbs``: ICE's source ports and rates on hosts whose CCL speaks libibverbs
(NCCL, RCCL, any verbs CCL), through the ``LD_PRELOAD`` shim ``native/icefab_verbs.c``.

* A CCL process with the shim reports each RC QP at INIT->RTR (device, port, QP numbers,
  IPv4 addresses of its RoCEv2 GIDs). The QP is named like the controller names it,
  ``(job, src_ip, dst_ip, ordinal)``: the job comes from the process's ``ICE_JOB`` (else the
  agent's default job) and the ordinal is the lowest free one for that NIC pair, in
  connection order. If the current plan has that QP, the reply carries its source port and
  rate; the shim writes the flow label that makes the kernel derive the port (domain-facts
  §4.2) and paces the QP at RTS.
* Live QPs are added to the host's communicator reports (:meth:`VerbsActuator.with_qps`), so
  the controller plans with the QP numbers of the real stack.
* A later plan (re-plan, failover) is pushed to the live QPs: ``SET`` makes the shim call
  ``mlx5dv_modify_qp_udp_sport`` and the verbs rate limit; what the device refuses is
  reported in the plan's ack (failed QPs and why), never hidden.

Known limit: the shim sees QPs, not their direction in the collective, so a QP that only
receives (NCCL's receive side) also takes an ordinal of its NIC pair.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
from collections import Counter
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path

from icefabric.agent.actuators.base import Actuator, ApplyResult, QpKey, qp_key
from icefabric.agent.shim_socket import ShimConn, ShimProtocolError, ShimServer, format_line
from icefabric.schemas_service import CommReport, HostPlan, QpEntry, QpPlan

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/run/icefab/verbs.sock"
PlanKey = tuple[str | None, str, str, int]  # (job, src_ip, dst_ip, ordinal)
LiveKey = tuple[int, str, int]  # (connection id, device, local QPN)


def rate_kbps(rate_bps: float | None, *, unset: int) -> int:
    """A plan's rate in bit/s as the verbs ``rate_limit`` (kbit/s, >= 1); ``unset`` if none."""
    return unset if rate_bps is None else max(1, round(rate_bps / 1000))


def why(what: str, err: int) -> str:
    """Operator text for a shim's error number on ``sport`` or ``rate``."""
    if err == errno.ENOSYS:
        return "libmlx5 (mlx5dv_modify_qp_udp_sport) is not in the CCL process"
    if err == errno.EOPNOTSUPP and what == "sport":
        return "the device cannot change a live QP's source port (EOPNOTSUPP)"
    if err == errno.EOPNOTSUPP:
        return "the driver has no per-QP rate limit for RC QPs (EOPNOTSUPP): DCQCN governs"
    if err == errno.ENOENT:
        return "the QP was destroyed"
    return f"{what}: {os.strerror(err)}"


@dataclass
class LiveQp:
    """A connected QP of a CCL process, and what is in force on it."""

    conn: ShimConn
    dev: str
    lqpn: int
    rqpn: int
    src_ip: str
    dst_ip: str
    job: str | None
    ordinal: int
    sport: int | None = None
    rate_kbps: int | None = None

    @property
    def plan_key(self) -> PlanKey:
        return (self.job, self.src_ip, self.dst_ip, self.ordinal)


class VerbsActuator(Actuator):
    """Serves the shim socket and applies plans to the QPs of every CCL process on the host.

    Parameters
    ----------
    socket_path : path — the Unix socket the shims connect to (``ICE_SHIM_SOCKET``).
    default_job : str, optional — job of processes started without ``ICE_JOB``.
    push_timeout_s : float — how long an apply waits for the shims' answers.
    """

    name = "verbs"

    def __init__(self, socket_path: str | Path = DEFAULT_SOCKET, *,
                 default_job: str | None = None, push_timeout_s: float = 2.0):
        super().__init__()
        self.default_job = default_job
        self.push_timeout_s = push_timeout_s
        self.lock = threading.Lock()
        self.live: dict[LiveKey, LiveQp] = {}
        self.by_plan: dict[PlanKey, LiveQp] = {}
        self.planned: dict[PlanKey, QpPlan] = {}
        self._ordinals: dict[tuple, set[int]] = {}
        self._waiting: dict[LiveKey, Future] = {}
        self.server = ShimServer(socket_path, self._on_message, self._on_close)

    def start(self) -> VerbsActuator:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> VerbsActuator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the shims' side --------------------------------------------------------------------
    def _on_message(self, conn: ShimConn, kind: str, f: dict) -> bytes | None:
        try:
            if kind == "QP":
                return self._on_qp(conn, f)
            key = (id(conn), str(f["dev"]), int(f["lqpn"]))
            with self.lock:
                qp = self.live.get(key)
                if kind == "RTR" and qp is not None:
                    qp.sport = int(f["sport"])
                elif kind == "RATE":
                    self._on_rate(qp, int(f["kbps"]), int(f["err"]))
                elif kind == "GONE" and qp is not None:
                    self._forget(key)
                elif kind == "DONE":
                    fut = self._waiting.pop(key, None)
                    if fut is not None:
                        fut.set_result((int(f["sport_err"]), int(f["rate_err"])))
                elif kind not in ("RTR", "GONE"):
                    raise ShimProtocolError(f"unknown message {kind}")
        except KeyError as e:
            raise ShimProtocolError(f"{kind}: missing field {e}") from None
        return None

    def _on_qp(self, conn: ShimConn, f: dict) -> bytes:
        job = conn.job or self.default_job
        pair = (job, str(f["sip"]), str(f["dip"]))
        with self.lock:
            used = self._ordinals.setdefault(pair, set())
            ordinal = next(i for i in itertools.count() if i not in used)
            used.add(ordinal)
            qp = LiveQp(conn, str(f["dev"]), int(f["lqpn"]), int(f["rqpn"]), pair[1], pair[2],
                        job, ordinal)
            self.live[(id(conn), qp.dev, qp.lqpn)] = qp
            self.by_plan[qp.plan_key] = qp
            plan = self.planned.get(qp.plan_key) if job else None
        if job is None:
            log.warning("pid %s: no ICE_JOB and no default job: QP %s/%d is not steered",
                        conn.pid, qp.dev, qp.lqpn)
        if plan is None:
            return format_line("NONE", seq=int(f["seq"]))
        return format_line("PLAN", seq=int(f["seq"]), sport=max(plan.sport, -1),
                           rate_kbps=rate_kbps(plan.rate_bps, unset=-1))

    def _on_rate(self, qp: LiveQp | None, kbps: int, err: int) -> None:
        if qp is not None and err == 0:
            qp.rate_kbps = kbps
        elif qp is not None:
            log.warning("%s QP %d: rate %d kbit/s not applied: %s", qp.dev, qp.lqpn, kbps,
                        why("rate", err))

    def _forget(self, key: LiveKey) -> None:
        qp = self.live.pop(key)
        self.by_plan.pop(qp.plan_key, None)
        self._ordinals.get((qp.job, qp.src_ip, qp.dst_ip), set()).discard(qp.ordinal)

    def _on_close(self, conn: ShimConn) -> None:
        with self.lock:
            for key in [k for k in self.live if k[0] == id(conn)]:
                self._forget(key)
            for key in [k for k in self._waiting if k[0] == id(conn)]:
                self._waiting.pop(key).set_result((errno.ENOENT, errno.ENOENT))

    # -- the controller's side --------------------------------------------------------------
    def with_qps(self, reports: list[CommReport]) -> list[CommReport]:
        """``reports`` with each job's live QPs of this host (real QP numbers and ports)."""
        with self.lock:
            by_job: dict[str, list[LiveQp]] = {}
            for qp in self.live.values():
                if qp.job is not None:
                    by_job.setdefault(qp.job, []).append(qp)
        out = []
        for r in reports:
            qps = sorted(by_job.get(r.job, []), key=lambda q: q.plan_key[1:])
            if qps:
                r = r.model_copy(update={"qps": [
                    QpEntry(src_ip=q.src_ip, dst_ip=q.dst_ip, sport=q.sport, lqpn=q.lqpn,
                            rqpn=q.rqpn, ordinal=q.ordinal) for q in qps]})
            out.append(r)
        return out

    def _apply(self, plan: HostPlan, changed: list[QpPlan]) -> ApplyResult:
        with self.lock:
            self.planned = {(q.job, q.src_ip, q.dst_ip, q.ordinal): q for q in plan.qps}
            targets = [(self.live_for(q), q) for q in changed]
        errors = self._push([(qp, q.sport, q.rate_bps) for qp, q in targets if qp is not None])
        counts = Counter(f"{qp.dev}: {msg}" for qp, msg in errors)
        failed = {id(qp) for qp, _ in errors}
        return ApplyResult(0, {qp_key(q) for qp, q in targets if id(qp) in failed},
                           [f"{n} QP(s) on {m}" for m, n in counts.items()])

    def live_for(self, q: QpPlan) -> LiveQp | None:
        """The live QP a plan entry names (call with ``lock`` held)."""
        return self.by_plan.get((q.job, q.src_ip, q.dst_ip, q.ordinal))

    def _set_one(self, key: QpKey, sport: int, rate_bps: float | None) -> bool:
        with self.lock:
            q = next((q for q in self.planned.values() if qp_key(q) == key), None)
            qp = self.live_for(q) if q is not None else None
        return qp is not None and not self._push([(qp, sport, rate_bps)])

    def _push(self, changes: list[tuple[LiveQp, int, float | None]]) -> list[tuple[LiveQp, str]]:
        """Send ``SET`` for what differs from what is in force; wait for the answers.
        Returns ``(qp, reason)`` for every change the shim could not make."""
        sent = []
        for qp, sport, rate_bps in changes:
            want_rate = rate_kbps(rate_bps, unset=0)
            s = sport if sport >= 0 and sport != qp.sport else -1
            unpaced = want_rate == 0 and qp.rate_kbps in (None, 0)
            r = -1 if unpaced or want_rate == qp.rate_kbps else want_rate
            if s < 0 and r < 0:
                continue
            fut: Future = Future()
            with self.lock:
                self._waiting[(id(qp.conn), qp.dev, qp.lqpn)] = fut
            if not qp.conn.send(format_line("SET", dev=qp.dev, lqpn=qp.lqpn, sport=s,
                                            rate_kbps=r)):
                fut.set_result((errno.ENOENT, errno.ENOENT))
            sent.append((qp, s, r, fut))
        errors = []
        for qp, s, r, fut in sent:
            try:
                sport_err, rate_err = fut.result(timeout=self.push_timeout_s)
            except FutureTimeout:
                errors.append((qp, f"no answer from the shim (pid {qp.conn.pid})"))
                continue
            if s >= 0 and sport_err == 0:
                qp.sport = s
            elif s >= 0:
                errors.append((qp, why("sport", sport_err)))
            if r >= 0 and rate_err == 0:
                qp.rate_kbps = r
            elif r >= 0 and not (r == 0 and rate_err == errno.EOPNOTSUPP):
                errors.append((qp, why("rate", rate_err)))
        return errors
