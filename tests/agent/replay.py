"""The replay harness: a scenario's jobs connected the way NCCL connects them, on emulated
hosts, with the controller and one ``verbs`` agent per host on loopback.

1. The controller (policy ``ice``) gets the fabric and the jobs; one host's agent reports
   its communicators before any QP exists (the collector's view: ranks, collectives, size;
   the other hosts' collectors are late and report only once the QPs connected) and the
   controller plans them from that one report (plan before connect).
2. Every connection of the job model is replayed in NCCL's order
   (``src/transport/net_ib/connect.cc``): the sender creates its QPs and moves them to INIT
   (``ncclIbConnect``), the receiver creates, connects and readies its own at once plus
   its GPU-flush QP (``ncclIbAccept``), then the sender's QPs go to RTR. One CCL process
   (``native/ccl_replay.c``, the shim preloaded over the stand-in libibverbs) per NIC and
   job — or two per NIC (two ranks sharing a NIC) — on each host; connections are replayed
   in batches, so on a host the receive sides of one direction reach RTR before the data
   QPs of the other on the same NIC pair.
3. The agents report the QPs (both ends, with their INIT->RTR times); the controller pairs
   them and re-plans with the real QP numbers.

:func:`replay` returns what every QP got at RTR and live, and the plans before and after.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from icefabric.agent.actuators import get_actuator
from icefabric.agent.client import ControllerClient
from icefabric.agent.runner import Agent, AgentOptions
from icefabric.controller.settings import Settings
from icefabric.dataplane.roce import flow_label_to_udp_sport, rdma_get_udp_sport
from icefabric.pipeline.recipe import RunSpec
from icefabric.qpid import QpId
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import loads
from icefabric.twin.run import (
    TwinOptions,
    host_reports,
    register_jobs,
    run_twin,
    upload_fabric,
)
from icefabric.twin.serve import ThreadedController
from icefabric.units import ipv4_str
from icefabric.wire import qp_hosts, qp_jobs, qp_ordinals

from .conftest import IBV_QP_RATE_LIMIT, IBV_QPS_RTR, records, wait_for

ADMIN = "replay-admin"
BATCH = 8  # connections replayed together (senders INIT, receivers accept, senders RTR)


@dataclass
class ReplayedQp:
    """A QP the replay connected: ``qp_id`` for a data QP (the model's name for it), None
    for a receive side or a flush QP (``flush``)."""

    host: str
    log: Path
    lqpn: int
    rqpn: int
    qp_id: QpId | None
    flush: bool = False


@dataclass
class Replay:
    """What happened: per data QP the plan in force when it connected (``first``) and
    after the agents reported the QPs (``final``), as ``QpId -> (sport, rate_bps)``; the
    final plans' QP numbers; every QP replayed; the calls every CCL process made."""

    first: dict[QpId, tuple[int, float | None]]
    final: dict[QpId, tuple[int, float | None]]
    final_qpns: dict[QpId, tuple[int, int]]
    qps: list[ReplayedQp]
    calls: dict[Path, list[dict]] = field(default_factory=dict)

    def rtr(self, qp: ReplayedQp) -> dict:
        """The QP's successful INIT->RTR call, as the stand-in libibverbs recorded it."""
        (r,) = [r for r in self.calls[qp.log] if r["call"] == "modify_qp" and r["rc"] == 0
                and r["state"] == IBV_QPS_RTR and r["qpn"] == qp.lqpn]
        return r

    def rtr_sport(self, qp: ReplayedQp) -> int | None:
        """The source port the QP was given at RTR (None: the kernel's own)."""
        fl = self.rtr(qp)["flow_label"]
        return int(flow_label_to_udp_sport(fl)) if fl else None

    def in_force(self, qp: ReplayedQp) -> int:
        """The QP's source port now: from RTR (the kernel's own if no label was set), then
        every successful live change (mlx5dv)."""
        fl = self.rtr(qp)["flow_label"]
        port = int(rdma_get_udp_sport(fl, qp.lqpn, qp.rqpn))
        for r in self.live_changes():
            if r["call"] == "mlx5dv_modify_qp_udp_sport" and r["rc"] == 0 and \
                    r["qpn"] == qp.lqpn and self.calls[qp.log].count(r):
                port = r["sport"]
        return port

    def live_changes(self) -> list[dict]:
        """Every change made to a live QP (a source port through mlx5dv, a rate limit)."""
        return [r for calls in self.calls.values() for r in calls
                if r["call"] == "mlx5dv_modify_qp_udp_sport" or
                (r["call"] == "modify_qp" and r["mask"] & IBV_QP_RATE_LIMIT)]


class CclProcess:
    """One CCL process (``ccl_replay``) with the shim, talking to its host's agent."""

    def __init__(self, native, log: Path, ip: str, sock: Path, job: str, qpn_base: int):
        # All emulated hosts' agents and the controller share this Python process, so an
        # answer can take longer than a real host's agent takes (default 100 ms); the
        # replay checks the ports at RTR, so every QP waits for its answer.
        env = native.env(log, ip, ICE_SHIM_SOCKET=str(sock), ICE_JOB=job,
                         FAKEVERBS_QPN_BASE=hex(qpn_base), ICE_SHIM_TIMEOUT_MS="10000")
        self.log = log
        self.proc = subprocess.Popen([str(native.dir / "ccl_replay")], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, line: str) -> list[str]:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline().split()
        assert out[:1] == ["ok"], f"ccl_replay: {line[:60]!r} -> {out!r}"
        return out[1:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.communicate("quit\n", timeout=30)


def _controller(d: str) -> ThreadedController:
    """A controller planning with ``ice`` on a database in ``d``, served on loopback."""
    return ThreadedController(Settings(database_url=f"sqlite:///{d}/c.db", policy="ice",
                                       admin_token=ADMIN, admin_token_file=f"{d}/t",
                                       plan_debounce_s=0.0))


def replay(native, scenario: str, *, old_nccl: bool = False, ranks_per_nic: int = 1,
           size_bytes: int = 1 << 20) -> Replay:
    """Replay ``scenario`` (YAML text) as the module doc says. ``old_nccl``: the receive
    side gets NCCL <= 2.28's access flags (the host cannot tell it at RTR);
    ``ranks_per_nic``: CCL processes sharing each NIC (connections dealt out in turn)."""
    ls = loads(scenario, "<replay>")
    fabric = build_fabric(ls)
    sw = RunSpec.of(ls, fabric, "ice").workload(size_bytes)
    wl = sw.workload
    reports = {h: [r.model_copy(update={"qps": []}) for r in reps]
               for h, reps in host_reports(fabric, sw.jobs, wl).items()}
    with tempfile.TemporaryDirectory(prefix="ice") as d, _controller(d) as url:
        with httpx.Client(base_url=url, trust_env=False,
                          headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
            upload_fabric(admin, fabric, ls.scenario.seed)
            register_jobs(admin, reports)
        hosts = _Hosts(Path(d), url, reports, early=min(reports))
        try:
            expected = {h: sum(1 for x in qp_hosts(fabric, wl) if x == h) for h in reports}
            assert wait_for(lambda: all(
                a.plan is not None and len(a.plan.qps) == expected[h]
                for h, a in hosts.agents.items()), 60), "no plan before connect"
            first = {q.qp_id: (q.sport, q.rate_bps) for a in hosts.agents.values()
                     for q in a.plan.qps}
            procs = _Processes(native, Path(d), hosts, ranks_per_nic)
            try:
                qps = _connect(fabric, wl, procs, old_nccl)
                hosts.connected.set()
                why = _settled(hosts, qps)
                assert why is None, f"the plans never named the data QPs by number: {why}"
                # taken now: once the processes exit, their QPs leave the next reports
                plans = [q for a in hosts.agents.values() for q in a.plan.qps]
            finally:
                procs.close()
            calls = {p.log: records(p.log) for p in procs.all}
        finally:
            hosts.close()
    return Replay(first, {q.qp_id: (q.sport, q.rate_bps) for q in plans},
                  {q.qp_id: (q.lqpn, q.rqpn) for q in plans}, qps, calls)


class _Hosts:
    """An agent with a ``verbs`` actuator per host, each in a thread; only host ``early``
    reports before ``connected`` is set."""

    def __init__(self, d: Path, url: str, reports, early: str):
        self.connected = threading.Event()
        self.verbs = {h: get_actuator("verbs", socket_path=Path(tempfile.mkdtemp(dir=d)) / "s",
                                      push_timeout_s=5.0).start() for h in reports}

        def collector(h: str):
            if h != early and not self.connected.is_set():
                return []
            return self.verbs[h].with_qps(reports[h])

        self.agents = {h: Agent(h, ControllerClient(url), self.verbs[h], enrol_token=ADMIN,
                                collector=lambda h=h: collector(h),
                                options=AgentOptions(poll_wait_s=0.2))
                       for h in reports}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=a.run, args=(self.stop,), daemon=True)
                        for a in self.agents.values()]
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)
        for v in self.verbs.values():
            v.stop()


class _Processes:
    """The CCL processes, made on first use: per (host, NIC address, job, rank slot)."""

    def __init__(self, native, d: Path, hosts: _Hosts, ranks_per_nic: int):
        self.native, self.d, self.hosts, self.ranks_per_nic = native, d, hosts, ranks_per_nic
        self.procs: dict[tuple, CclProcess] = {}
        self.turn: dict[tuple, int] = {}

    def next(self, host: str, ip: str, job: str) -> CclProcess:
        """The process of the next connection of ``ip`` in ``job`` (ranks take turns)."""
        k = (host, ip, job)
        slot = self.turn.get(k, 0)
        self.turn[k] = (slot + 1) % self.ranks_per_nic
        key = (*k, slot)
        if key not in self.procs:
            n = len(self.procs)
            self.procs[key] = CclProcess(self.native, self.d / f"calls{n}", ip,
                                         self.hosts.verbs[host].server.path, job,
                                         0x1000 + 0x4000 * n)
        return self.procs[key]

    @property
    def all(self) -> list[CclProcess]:
        return list(self.procs.values())

    def close(self) -> None:
        for p in self.procs.values():
            p.close()


@dataclass
class _Conn:
    """One connection being replayed: its first model QP, both ends' processes and
    addresses, and the sender's QP numbers."""

    first_qp: int
    src_host: str
    dst_host: str
    sip: str
    dip: str
    sender: CclProcess
    receiver: CclProcess
    sent: list[str]


def _connect(fabric, wl, procs: _Processes, old_nccl: bool) -> list[ReplayedQp]:
    """Every connection of ``wl`` in NCCL's order, :data:`BATCH` at a time."""
    names = [s.name for s in fabric.servers]
    host_of = [names[s] for s in fabric.node_server.tolist()]
    ordinal, jobs = qp_ordinals(wl).tolist(), qp_jobs(wl)
    first_qp = wl.conn_qps()[0].tolist()  # a connection's QPs are contiguous
    out: list[ReplayedQp] = []
    for b in range(0, wl.n_conns, BATCH):
        batch = []
        for c in range(b, min(b + BATCH, wl.n_conns)):  # ncclIbConnect: create, INIT
            s, d = int(wl.conn_src_nic[c]), int(wl.conn_dst_nic[c])
            sip, dip = ipv4_str(fabric.node_ip[s]), ipv4_str(fabric.node_ip[d])
            x = _Conn(first_qp[c], host_of[s], host_of[d], sip, dip,
                      procs.next(host_of[s], sip, wl.conn_job[c]),
                      procs.next(host_of[d], dip, wl.conn_job[c]), [])
            x.sent = x.sender.ask(f"send {dip} {first_qp[c + 1] - first_qp[c]}")
            batch.append(x)
        # ncclIbAccept: create, INIT, RTR, RTS, flush QP; then the senders' RTR
        answers = [x.receiver.ask(f"accept {x.sip} {int(old_nccl)} 1 {' '.join(x.sent)}")
                   for x in batch]
        for x, got in zip(batch, answers, strict=True):
            recv, flush = got[:-2], int(got[-1])
            pairs = list(zip(x.sent, recv, strict=True))
            x.sender.ask(f"rtr {x.dip} " + " ".join(f"{a} {r}" for a, r in pairs))
            for i, (a, r) in enumerate(pairs):
                q = x.first_qp + i
                out.append(ReplayedQp(x.src_host, x.sender.log, int(a), int(r),
                                      QpId.of(jobs[q], x.sip, x.dip, ordinal[q])))
                out.append(ReplayedQp(x.dst_host, x.receiver.log, int(r), int(a), None))
            out.append(ReplayedQp(x.dst_host, x.receiver.log, flush, flush, None, flush=True))
    return out


def _settled(hosts: _Hosts, qps: list[ReplayedQp]) -> str | None:
    """Wait until every host applied a plan that names its data QPs by their numbers; None
    then, else what was still wrong after the wait."""
    want = {q.qp_id: (q.lqpn, q.rqpn) for q in qps if q.qp_id is not None}

    def wrong() -> str | None:
        got = {q.qp_id: (q.lqpn, q.rqpn) for a in hosts.agents.values()
               for q in (a.plan.qps if a.plan else ())}
        bad = sorted(f"{k}: {got.get(k)} != {want.get(k)}" for k in want.keys() | got.keys()
                     if got.get(k) != want.get(k))
        behind = {h: (a.version, a.acked, a.last_error, a.report_errors)
                  for h, a in hosts.agents.items() if a.version != a.acked or a.report_errors}
        if bad or behind:
            return f"{len(bad)} QPs misnamed (e.g. {bad[:3]}); hosts behind: {behind}"
        return None

    wait_for(lambda: wrong() is None, 60)
    return wrong()


def twin_plan(scenario: str, size_bytes: int = 1 << 20) -> tuple[dict, object]:
    """``icefab twin`` on ``scenario`` (YAML text) against its own controller: every QP's
    applied ``(sport, rate_bps)`` by QpId, and the twin's result."""
    got: dict[QpId, tuple[int, float | None]] = {}

    def ready(agents, threads):
        for a in agents.values():
            got.update({q.qp_id: (q.sport, q.rate_bps) for q in a.actuator.applied.values()})

    with tempfile.TemporaryDirectory(prefix="ice") as d, _controller(d) as url:
        res = run_twin(loads(scenario, "<twin>"), url, ADMIN, TwinOptions(
            size_bytes=size_bytes, poll_wait_s=0.2, timeout_s=60, on_ready=ready))
    return got, res
