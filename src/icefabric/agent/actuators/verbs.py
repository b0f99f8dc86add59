"""Actuator ``verbs``: ICE's source ports and rates on hosts whose CCL speaks libibverbs
(NCCL, RCCL, any verbs CCL), through the ``LD_PRELOAD`` shim ``native/icefab_verbs.c``.

* A CCL process with the shim reports each RC QP at INIT->RTR (device, port, QP numbers,
  IPv4 addresses of its RoCEv2 GIDs, access flags at INIT; loopback QPs, NCCL's GPU flush,
  are not reported). A data QP is named like the controller names it, a
  :class:`~icefabric.qpid.QpId`: the job comes from the process's ``ICE_JOB`` (else the
  agent's default job) and the ordinal is the lowest free one for that NIC pair, in
  connection order. A receive-side QP (NCCL >= 2.29.2 tells it by its access flags,
  :func:`is_receive_side`) takes no ordinal and no plan. If the current plan has that QP,
  the reply carries its source port and rate; the shim writes the flow label that makes
  the kernel derive the port (domain-facts §4.2) and the rate as the address vector's
  ``static_rate`` (the ``IBV_RATE_*`` step the planner already rounded to,
  :func:`icefabric.dataplane.roce.static_rate`), which the NIC applies from RTR on.
* Live QPs are added to the host's communicator reports (:meth:`VerbsActuator.with_qps`), so
  the controller plans with the QP numbers of the real stack: the data QPs with their
  ordinals, the receive-side QPs marked ``side=receive``, each with its INIT->RTR time.
  The controller pairs the two ends of each connection and tells the data QPs where this
  host could not (:mod:`icefabric.pipeline.pairing`); a plan entry that carries a live
  QP's numbers names that QP (:meth:`VerbsActuator.targets`), whatever ordinal this host
  gave it at RTR.
* A later plan (re-plan, failover) is pushed to the live QPs: ``SET`` makes the shim call
  ``mlx5dv_modify_qp_udp_sport`` and the verbs rate limit; what the device refuses is
  reported in the plan's ack (failed QPs and why), never hidden, and such QPs are retried
  by the next plan. The verbs rate limit is refused for RC QPs by the kernel core on
  ConnectX (EINVAL) and by some drivers with EOPNOTSUPP: both mean "no live per-QP rate";
  the QP keeps the static rate it got at RTR. ``LiveQp.rate_via`` says per QP which
  mechanism set the rate in force (``static_rate`` at RTR, ``rate_limit`` live), and the
  host's reports carry it per QP (``QpEntry.rate_via``).

Known limit: older NCCL and RCCL give both sides of a connection the same access flags, so
at RTR a QP that only receives also takes an ordinal of its NIC pair; the controller's
pairing corrects the naming once both ends are reported, through a live re-port where the
device has one (docs/verbs-shim.md).
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
from dataclasses import dataclass, replace
from pathlib import Path

from icefabric.agent.actuators.base import Actuator, ApplyResult
from icefabric.agent.shim_socket import ShimConn, ShimProtocolError, ShimServer, format_line
from icefabric.dataplane.roce import IBV_RATE_GBPS, default_sports
from icefabric.qpid import QpId
from icefabric.schemas_service import CommReport, HostPlan, QpEntry, QpPlan
from icefabric.units import bps_to_kbps
from icefabric.wire import rate_kbps, shim_plan

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/run/icefab/verbs.sock"
LiveKey = tuple[int, str, int]  # (connection id, device, local QPN)


#: access flags at INIT of NCCL's receive-side QPs (>= 2.29.2, ncclIbAccept); its data QPs
#: have IBV_ACCESS_REMOTE_WRITE (2) alone (ncclIbConnect; libibverbs verbs.h)
RECEIVE_SIDE_ACCESS = 4 | 8  # IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC


def is_receive_side(access_flags: int) -> bool:
    """Whether a QP's INIT access flags mark it as NCCL's receive side (-1 = unknown)."""
    return access_flags >= 0 and bool(access_flags & RECEIVE_SIDE_ACCESS)


#: a driver's ways of saying "no live per-QP rate limit for this QP"
NO_RATE_LIMIT = (errno.EOPNOTSUPP, errno.EINVAL)


def why(what: str, err: int) -> str:
    """Operator text for a shim's error number on ``sport`` or ``rate``."""
    if err == errno.ENOSYS:
        return "libmlx5 (mlx5dv_modify_qp_udp_sport) is not in the CCL process"
    if err == errno.EOPNOTSUPP and what == "sport":
        return "the device cannot change a live QP's source port (EOPNOTSUPP)"
    if err in NO_RATE_LIMIT and what == "rate":
        name = "EINVAL" if err == errno.EINVAL else "EOPNOTSUPP"  # Linux: ENOTSUP == 95
        return (f"no live per-QP rate for RC QPs ({name}): the QP keeps "
                "its RTR static rate (DEVX packet pacing is not used)")
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
    qp_id: QpId | None  # None: not a data QP (receive side) or no job: takes no plan
    receive: bool = False  # told the receive side by its access flags
    span_ns: int | None = None  # INIT->RTR time (None: INIT not seen)
    sport: int | None = None
    rate_kbps: int | None = None  # in force (0 / None = not paced)
    rate_via: str | None = None  # "static_rate" (at RTR) or "rate_limit" (live)
    static_kbps: int = 0  # the static rate set at RTR (0 = none)
    steered: bool = False  # on a planned port (taken at RTR, or moved there live)


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
        self.by_plan: dict[QpId, LiveQp] = {}  # the data QPs by the QpId given at RTR
        self.by_qpn: dict[tuple[str, int, int], LiveQp] = {}  # (src IP, lqpn, rqpn)
        self._ordinals: dict[tuple[str, int, int], set[int]] = {}
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
                    self._on_rtr(qp, f)
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
        sip, dip = str(f["sip"]), str(f["dip"])
        receive = is_receive_side(int(f.get("acc", -1)))
        key = (id(conn), str(f["dev"]), int(f["lqpn"]))
        with self.lock:
            qp = self.live.get(key)
            if qp is None or (qp.rqpn, qp.src_ip, qp.dst_ip) != (int(f["rqpn"]), sip, dip):
                if qp is not None:  # the QP number was reused without a GONE
                    self._forget(key)
                qp = self._register(key, conn, f, job, receive)
            qp_id = qp.qp_id  # a QP told again (a shim reconnecting) keeps its ordinal
            plan = self.planned.get(qp_id) if qp_id is not None else None
            if plan is not None and self.live_for(plan) is not qp:
                plan = None  # the controller names another live QP by this QpId
        if job is None:
            log.warning("pid %s: no ICE_JOB and no default job: QP %s/%d is not steered",
                        conn.pid, qp.dev, qp.lqpn)
        if plan is None:
            return format_line("NONE", seq=int(f["seq"]))
        return format_line("PLAN", seq=int(f["seq"]), **shim_plan(plan))

    def _register(self, key: LiveKey, conn: ShimConn, f: dict, job: str | None,
                  receive: bool) -> LiveQp:
        """A QP new to this host (``key``: its :data:`LiveKey`): named (a data QP) and
        indexed (lock held)."""
        sip, dip, span = str(f["sip"]), str(f["dip"]), int(f.get("span", -1))
        qp_id = self._next_id(QpId.of(job, sip, dip, 0)) if job and not receive else None
        qp = LiveQp(conn, key[1], key[2], int(f["rqpn"]), sip, dip, job, qp_id, receive,
                    span if span >= 0 else None)
        self.live[key] = qp
        if qp_id is not None:
            self.by_plan[qp_id] = qp
            self.by_qpn[(sip, qp.lqpn, qp.rqpn)] = qp
        return qp

    def _next_id(self, first: QpId) -> QpId:
        """The lowest free ordinal of ``first``'s job and NIC pair (lock held)."""
        used = self._ordinals.setdefault(first.pair, set())
        ordinal = next(i for i in itertools.count() if i not in used)
        used.add(ordinal)
        return replace(first, ordinal=ordinal)

    @staticmethod
    def _on_rtr(qp: LiveQp, f: dict) -> None:
        qp.sport = int(f["sport"])
        qp.steered = bool(int(f.get("planned", 0)))
        gbps = IBV_RATE_GBPS.get(int(f.get("srate", 0)))
        if gbps is not None:
            qp.static_kbps = qp.rate_kbps = bps_to_kbps(gbps * 1e9)
            qp.rate_via = "static_rate"

    def _forget(self, key: LiveKey) -> None:
        qp = self.live.pop(key)
        if qp.qp_id is not None:
            self.by_plan.pop(qp.qp_id, None)
            self.by_qpn.pop((qp.src_ip, qp.lqpn, qp.rqpn), None)
            self._ordinals.get(qp.qp_id.pair, set()).discard(qp.qp_id.ordinal)

    def _on_close(self, conn: ShimConn) -> None:
        with self.lock:
            for key in [k for k in self.live if k[0] == id(conn)]:
                self._forget(key)
            for key in [k for k in self._waiting if k[0] == id(conn)]:
                self._waiting.pop(key).set_result((errno.ENOENT, errno.ENOENT))

    # -- the controller's side --------------------------------------------------------------
    def with_qps(self, reports: list[CommReport]) -> list[CommReport]:
        """``reports`` with each job's live QPs of this host (real QP numbers and ports):
        its data QPs by ordinal, then its receive-side QPs (``side=receive``)."""
        with self.lock:
            by_job: dict[str, list[LiveQp]] = {}
            for qp in self.live.values():
                if qp.job is not None and (qp.qp_id is not None or qp.receive):
                    by_job.setdefault(qp.job, []).append(qp)
        out = []
        for r in reports:
            qps = sorted(by_job.get(r.job, []), key=lambda q: (q.qp_id is None, q.qp_id or 0,
                                                              q.src_ip, q.lqpn))
            if qps:
                r = r.model_copy(update={"qps": [
                    QpEntry(src_ip=q.src_ip, dst_ip=q.dst_ip, sport=q.sport, lqpn=q.lqpn,
                            rqpn=q.rqpn, ordinal=q.qp_id.ordinal if q.qp_id else 0,
                            rate_kbps=q.rate_kbps or None,
                            rate_via=q.rate_via if q.rate_kbps else None,
                            side="receive" if q.receive else None, init_rtr_ns=q.span_ns)
                    for q in qps]})
            out.append(r)
        return out

    def _apply(self, plan: HostPlan, changed: list[QpPlan]) -> ApplyResult:
        with self.lock:
            every = self.targets(plan.qps)
            changed_ids = {id(q) for q in changed}
            targets = [t for t in every if id(t[1]) in changed_ids]
            unnamed = self._unnamed(every)
        errors = self._push([(qp, q.sport, q.rate_bps) for qp, q in targets if qp is not None]
                            + [(qp, int(default_sports(qp.lqpn, qp.rqpn)),
                                qp.static_kbps * 1e3 if qp.static_kbps else None)
                               for qp in unnamed])
        for qp in unnamed:
            qp.steered = False
        counts = Counter(f"{qp.dev}: {msg}" for qp, msg in errors)
        failed = {id(qp) for qp, _ in errors}
        return ApplyResult(0, {q.qp_id for qp, q in targets if id(qp) in failed},
                           [f"{n} QP(s) on {m}" for m, n in counts.items()])

    def _unnamed(self, every: list[tuple[LiveQp | None, QpPlan]]) -> list[LiveQp]:
        """QPs on a planned port (from RTR, or moved there by an earlier plan that named
        them by ordinal) that the plan no longer names, on a NIC pair where it names live
        QPs by number: the controller's pairing found them to be receive sides (older
        NCCL), so they go back to the kernel's port and their RTR rate (lock held)."""
        named = {id(qp) for qp, _ in every if qp is not None}
        paired = {qp.qp_id.pair for qp, q in every
                  if qp is not None and (q.lqpn, q.rqpn) == (qp.lqpn, qp.rqpn)}
        return [qp for qp in self.by_plan.values()
                if qp.steered and id(qp) not in named and qp.qp_id.pair in paired]

    def live_for(self, q: QpPlan) -> LiveQp | None:
        """The live QP a plan entry names (call with ``lock`` held): the data QP with its
        QP numbers (the controller paired the ends and named it), else the one this host
        gave its QpId at RTR."""
        return self.by_qpn.get((q.src_ip, q.lqpn, q.rqpn)) or self.by_plan.get(q.qp_id)

    def targets(self, qps: list[QpPlan]) -> list[tuple[LiveQp | None, QpPlan]]:
        """:meth:`live_for` of each plan entry, where a QP named by its numbers in ``qps``
        is not also taken by another entry's QpId (call with ``lock`` held)."""
        exact = [self.by_qpn.get((q.src_ip, q.lqpn, q.rqpn)) for q in qps]
        taken = {id(qp) for qp in exact if qp is not None}
        out = []
        for qp, q in zip(exact, qps, strict=True):
            if qp is None:
                qp = self.by_plan.get(q.qp_id)
                qp = None if qp is not None and id(qp) in taken else qp
            out.append((qp, q))
        return out

    def _set_one(self, qp_id: QpId, sport: int, rate_bps: float | None) -> bool:
        with self.lock:
            q = self.planned.get(qp_id)
            qp = self.live_for(q) if q is not None else None
        return qp is not None and not self._push([(qp, sport, rate_bps)])

    def _push(self, changes: list[tuple[LiveQp, int, float | None]]) -> list[tuple[LiveQp, str]]:
        """Send ``SET`` for what differs from what is in force; wait for the answers.
        Returns ``(qp, reason)`` for every change the shim could not make."""
        sent, errors = [], []
        for qp, sport, rate_bps in changes:
            want_rate = rate_kbps(rate_bps, unset=0)
            s = sport if sport is not None and sport != qp.sport else -1
            r = -1 if want_rate == (qp.rate_kbps or 0) else want_rate
            if r >= 0 and qp.static_kbps and not 0 < r <= qp.static_kbps:
                # The NIC paces at the lower of the RTR static rate and a live rate limit.
                errors.append((qp, f"the static rate set at RTR ({qp.static_kbps} kbit/s) "
                                   "cannot be raised or removed live"))
                r = -1
            if s < 0 and r < 0:
                continue
            fut: Future = Future()
            with self.lock:
                self._waiting[(id(qp.conn), qp.dev, qp.lqpn)] = fut
            if not qp.conn.send(format_line("SET", dev=qp.dev, lqpn=qp.lqpn, sport=s,
                                            rate_kbps=r)):
                fut.set_result((errno.ENOENT, errno.ENOENT))
            sent.append((qp, s, r, fut))
        for qp, s, r, fut in sent:
            try:
                sport_err, rate_err = fut.result(timeout=self.push_timeout_s)
            except FutureTimeout:
                errors.append((qp, f"no answer from the shim (pid {qp.conn.pid})"))
                continue
            if s >= 0 and sport_err == 0:
                qp.sport, qp.steered = s, True
            elif s >= 0:
                errors.append((qp, why("sport", sport_err)))
            if r >= 0 and rate_err == 0:
                qp.rate_kbps, qp.rate_via = r, "rate_limit"
            elif r >= 0:
                errors.append((qp, why("rate", rate_err)))
        return errors
