"""The ``verbs`` actuator with the real shim preloaded into a small CCL program.

The program runs against a stand-in libibverbs/libmlx5 (tests/agent/native/) that records
the attributes reaching the symbol boundary: these tests check the wiring (what the shim
asks, what it writes into ibv_modify_qp, what it calls on live QPs), not a NIC. What a real
ConnectX does with the flow label is the kernel's (domain-facts §4.1-4.2), checked on a
cluster as docs/verbs-shim.md describes.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from pathlib import Path

import pytest

from icefabric.agent.actuators.verbs import VerbsActuator
from icefabric.agent.shim_socket import ShimConn
from icefabric.dataplane.roce import default_sports, flow_label_to_udp_sport
from icefabric.schemas_service import CommReport, HostPlan, QpPlan, RankEntry

from .conftest import IBV_QP_RATE_LIMIT, IBV_QPS_RTR, records, rtr_labels, wait_for

SIP, DIP, JOB = "10.0.0.1", "10.0.0.2", "train1"


def plan_of(sports: list[int], rates: list[float | None] | None = None, version: int = 1,
            job: str = JOB) -> HostPlan:
    rates = rates or [None] * len(sports)
    return HostPlan(host="h0", version=version, fabric_version=1, policy="ice", created_at=0.0,
                    qps=[
                        QpPlan(src_ip=SIP, dst_ip=DIP, lqpn=100 + i, rqpn=200 + i, job=job,
                               ordinal=i, sport=s, rate_bps=r, routes=[[1]], weights=[1.0])
                        for i, (s, r) in enumerate(zip(sports, rates))])


@pytest.fixture
def actuator(agent_sock):
    with VerbsActuator(agent_sock, push_timeout_s=5.0) as act:
        yield act


def connect(native, tmp_path, sock, n, *, program="ccl_dlopen", hold=True, threads=1,
            rqpn_base=0x500, **env):
    log = tmp_path / f"log{time.monotonic_ns()}"
    hold_file = tmp_path / f"release{time.monotonic_ns()}"
    # The tests check ports at RTR: on a loaded machine the agent thread (sharing the GIL
    # with the test) may answer later than the production default of 100 ms.
    env = {"ICE_SHIM_TIMEOUT_MS": "5000", **env}
    e = native.env(log, SIP, real_verbs=program == "ccl_real", ICE_SHIM_SOCKET=str(sock),
                   ICE_JOB=JOB, **env)
    proc = native.run(program, n, DIP, e, threads=threads, rqpn_base=rqpn_base,
                      hold_ms=30_000 if hold else 0, hold_file=hold_file)
    lines = []
    for line in proc.stdout:
        lines.append(line.split())
        if line.startswith("connect_ns_per_qp"):
            break
    qps = [int(x[1]) for x in lines if x[0] == "qp"]
    assert all(x[3:] == ["rtr=0", "rts=0"] for x in lines if x[0] == "qp"), lines
    return proc, log, hold_file, qps


def release(proc, hold_file) -> str:
    """Let the program end; its stderr."""
    hold_file.touch()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


# -- naming and plan lookup (pure Python) ------------------------------------------------------
def test_qps_take_the_lowest_free_ordinal_of_their_job_and_nic_pair(agent_sock):
    act = VerbsActuator(agent_sock, default_job="dflt")
    a, b = socket.socketpair()
    conn = ShimConn(a)
    conn.job = JOB
    act.apply(plan_of([49200, 49300], [100e9, None]))

    def ask(lqpn, c=conn, dip=DIP):
        return act._on_message(c, "QP", {"seq": lqpn, "dev": "mlx5_0", "port": 1,
                                         "lqpn": lqpn, "rqpn": 7, "sip": SIP, "dip": dip})

    assert ask(10) == b"PLAN seq=10 sport=49200 srate=16\n"  # IBV_RATE_100_GBPS
    assert ask(11) == b"PLAN seq=11 sport=49300 srate=0\n"
    assert ask(12) == b"NONE seq=12\n"  # a third QP: the plan has two
    assert ask(13, dip="10.0.0.9") == b"NONE seq=13\n"  # another pair starts at ordinal 0
    act._on_message(conn, "GONE", {"dev": "mlx5_0", "lqpn": 10})
    assert ask(14) == b"PLAN seq=14 sport=49200 srate=16\n"  # ordinal 0 reused
    anon = ShimConn(b)  # no ICE_JOB: the agent's default job, which has no plan
    assert ask(15, c=anon) == b"NONE seq=15\n"
    assert act.live[(id(anon), "mlx5_0", 15)].job == "dflt"
    act._on_close(conn)
    assert {k[0] for k in act.live} == {id(anon)}
    a.close()
    b.close()


def test_receive_side_qps_take_no_ordinal_and_no_plan(agent_sock):
    """NCCL >= 2.29.2's receive side (REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC at INIT) reaches
    RTR first on a NIC pair that also carries the host's data QPs (REMOTE_WRITE)."""
    act = VerbsActuator(agent_sock)
    a, b = socket.socketpair()
    conn = ShimConn(a)
    conn.job = JOB
    act.apply(plan_of([49200, 49300]))

    def ask(lqpn, acc):
        return act._on_message(conn, "QP", {"seq": lqpn, "dev": "mlx5_0", "port": 1,
                                            "lqpn": lqpn, "rqpn": 7, "sip": SIP, "dip": DIP,
                                            "acc": acc, "span": 1000 * lqpn})

    assert [ask(10, 14), ask(11, 14)] == [b"NONE seq=10\n", b"NONE seq=11\n"]
    assert ask(12, 2) == b"PLAN seq=12 sport=49200 srate=0\n"
    assert ask(13, -1) == b"PLAN seq=13 sport=49300 srate=0\n"  # flags unknown: data
    # Reported for the controller's pairing: the data QPs by ordinal, then the receive
    # sides (no ordinal), each with its INIT->RTR time.
    assert [(e.lqpn, e.ordinal, e.side, e.init_rtr_ns) for e in act.with_qps([REP])[0].qps] \
        == [(12, 0, None, 12000), (13, 1, None, 13000), (10, 0, "receive", 10000),
            (11, 0, "receive", 11000)]
    a.close()
    b.close()


REP = CommReport(job=JOB, library="nccl", collectives=[{"kind": "all_reduce"}],
                 size_bytes=1 << 20, ranks=[RankEntry(rank=0, host="h0", device=0),
                                            RankEntry(rank=1, host="h1", device=0)])


def test_a_plan_entry_with_a_live_qps_numbers_names_that_qp(agent_sock):
    """The controller paired the ends and found that this host's ordinal 0 (QPN 20) only
    receives (older NCCL: no access flags): its plan names the data QP 21 by its numbers
    under ordinal 0, and ordinal 0 does not fall back to QP 20 or take QP 21 twice."""
    act = VerbsActuator(agent_sock)
    a, b = socket.socketpair()
    conn = ShimConn(a)
    conn.job = JOB
    for lqpn in (20, 21):
        act._on_message(conn, "QP", {"seq": lqpn, "dev": "mlx5_0", "port": 1, "lqpn": lqpn,
                                     "rqpn": 7, "sip": SIP, "dip": DIP, "acc": 2})
    plan = plan_of([49200, 49300]).qps
    named = [plan[0].model_copy(update={"lqpn": 21, "rqpn": 7}), plan[1]]
    with act.lock:
        got = [(qp and qp.lqpn, q.ordinal) for qp, q in act.targets(named)]
    assert got == [(21, 0), (None, 1)]
    a.close()
    b.close()


# -- interposition --------------------------------------------------------------------------
@pytest.mark.parametrize("program", ["ccl_dlopen", "ccl_linked"])
def test_planned_port_and_rate_are_written_at_connection(native, tmp_path, actuator,
                                                         agent_sock, program):
    """NCCL's way (dlopen + dlvsym) and a linked program both get the planned flow label
    and static rate at INIT->RTR (a rate between two steps takes the lower one)."""
    sports = [0xC000, 0xC123, 0xFFFF]
    rates = [50e9, None, 12.5e9]
    actuator.apply(plan_of(sports, rates))
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 3, program=program)
    try:
        labels = rtr_labels(log)
        assert [int(flow_label_to_udp_sport(labels[q])) for q in qps] == sports
        # IBV_RATE_50_GBPS, none, IBV_RATE_10_GBPS
        assert [rtr_labels(log, "static_rate")[q] for q in qps] == [20, 0, 3]
        assert not any(r.get("mask") == IBV_QP_RATE_LIMIT for r in records(log))
        assert wait_for(lambda: len(actuator.live) == 3 and all(
            q.sport is not None for q in actuator.live.values()))
        assert [(q.rate_kbps, q.rate_via) for q in sorted(
            actuator.live.values(), key=lambda q: q.qp_id)] == [
            (50_000_000, "static_rate"), (None, None), (10_000_000, "static_rate")]
        rep = CommReport(job=JOB, library="nccl", collectives=[{"kind": "all_reduce"}],
                         size_bytes=1 << 20, ranks=[RankEntry(rank=0, host="h0", device=0),
                                                    RankEntry(rank=1, host="h1", device=0)])
        entries = actuator.with_qps([rep])[0].qps
        assert [(e.lqpn, e.rqpn, e.ordinal, e.sport) for e in entries] == \
            [(q, 0x500 + i, i, s) for i, (q, s) in enumerate(zip(qps, sports))]
        assert [(e.rate_kbps, e.rate_via) for e in entries] == [
            (50_000_000, "static_rate"), (None, None), (10_000_000, "static_rate")]
    finally:
        release(proc, hold)
    assert wait_for(lambda: not actuator.live)  # GONE, then the connection closed


def test_real_libibverbs_carries_label_and_static_rate_to_the_kernel(native, tmp_path,
                                                                    actuator, agent_sock):
    """The installed libibverbs between the shim and a faked kernel (native/fakekernel.c):
    NCCL's dlopen + dlvsym, the real ibv_modify_qp and ibv_cmd_modify_qp marshalling, the
    GID query through the uverbs ioctl; the kernel records the MODIFY_QP commands it gets."""
    actuator.apply(plan_of([0xC000, 0xD123], [100e9, None]))
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 2, program="ccl_real")
    try:
        assert [r["index"] for r in records(log) if r["call"] == "query_gid"] == [3, 3]
        labels = rtr_labels(log)  # struct ib_uverbs_qp_dest as the kernel received it
        assert [int(flow_label_to_udp_sport(labels[q])) for q in qps] == [0xC000, 0xD123]
        assert [rtr_labels(log, "static_rate")[q] for q in qps] == [16, 0]  # 100G, none
        assert wait_for(lambda: len(actuator.live) == 2 and all(
            q.sport is not None for q in actuator.live.values()))
        # A live rate: the kernel refuses IB_QP_RATE_LIMIT on an RC QP (EINVAL); reported.
        res = actuator.apply(plan_of([0xC000, 0xD123], [50e9, None], version=2))
        live = [(r["qpn"], r["rate_limit"], r["rc"]) for r in records(log)
                if r["call"] == "modify_qp" and r["mask"] == IBV_QP_RATE_LIMIT]
        assert live == [(qps[0], 50_000_000, errno.EINVAL)]
        assert len(res.failed) == 1 and "no live per-QP rate for RC QPs (EINVAL)" in \
            res.messages[0]
    finally:
        release(proc, hold)


def test_receive_side_and_flush_qps_never_take_a_data_qps_port(native, tmp_path, actuator,
                                                               agent_sock):
    """On one NIC pair, NCCL's receive side (its QPs and the GPU-flush QP, connected to
    itself) connects before the send side: only the send side's data QPs get the plan."""
    actuator.apply(plan_of([49200, 49300]))
    recv, rlog, rhold, rqps = connect(native, tmp_path, agent_sock, 2, CCL_SIM_SIDE="accept",
                                      OMPI_COMM_WORLD_RANK="5")
    send, slog, shold, sqps = connect(native, tmp_path, agent_sock, 2, rqpn_base=0x900,
                                      RANK="3", OMPI_COMM_WORLD_RANK="9")
    try:
        flush = [r["qpn"] for r in records(rlog)
                 if r.get("state") == IBV_QPS_RTR and r["dest_qpn"] == r["qpn"]]
        assert len(flush) == 1 and set(rtr_labels(rlog).values()) == {0}  # the kernel's
        assert [int(flow_label_to_udp_sport(rtr_labels(slog)[q])) for q in sqps] == \
            [49200, 49300]
        assert wait_for(lambda: len(actuator.live) == 4)
        assert flush[0] not in {q.lqpn for q in actuator.live.values()}  # never reported
        assert sorted(q.lqpn for q in actuator.live.values() if q.qp_id is None) == rqps
        # each process's launcher rank (RANK before OMPI_COMM_WORLD_RANK ...)
        assert {(q.qp_id is None, q.conn.rank) for q in actuator.live.values()} == {
            (True, 5), (False, 3)}
    finally:
        release(recv, rhold)
        release(send, shold)


def test_without_a_plan_nothing_changes(native, tmp_path, actuator, agent_sock):
    actuator.apply(plan_of([49200], job="other-job"))
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 2, hold=False)
    release(proc, hold)
    assert set(rtr_labels(log).values()) == {0}
    assert not any(r["mask"] == IBV_QP_RATE_LIMIT for r in records(log) if "mask" in r)


def test_a_qp_moved_live_then_found_a_receive_side_goes_back_to_the_kernel_port(
        native, tmp_path, actuator, agent_sock):
    """Older NCCL: both QPs look like data QPs and take ordinals 0 and 1; a plan naming the
    ordinals moves both live; the controller's pairing then names ordinal 0 by QP 1's
    numbers (QP 0 is a receive side), so QP 0 goes back to the kernel's port."""
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 2)
    try:
        assert wait_for(lambda: all(q.sport for q in actuator.live.values()))
        actuator.apply(plan_of([50000, 50001]))
        live = {q.lqpn: q for q in actuator.live.values()}
        data = live[qps[1]]
        paired = HostPlan(host="h0", version=2, fabric_version=1, policy="ice", created_at=0.0,
                          qps=[QpPlan(src_ip=SIP, dst_ip=DIP, lqpn=data.lqpn, rqpn=data.rqpn,
                                      job=JOB, ordinal=0, sport=50000, routes=[[1]],
                                      weights=[1.0])])
        actuator.apply(paired)
        moved = [(r["qpn"], r["sport"]) for r in records(log)
                 if r["call"] == "mlx5dv_modify_qp_udp_sport" and r["rc"] == 0]
        kernel = int(default_sports(qps[0], live[qps[0]].rqpn))
        assert moved == [(qps[0], 50000), (qps[1], 50001), (qps[1], 50000), (qps[0], kernel)]
    finally:
        release(proc, hold)


def test_replan_reaches_live_qps_through_mlx5dv(native, tmp_path, actuator, agent_sock):
    actuator.apply(plan_of([49200, 49300], [None, 40e9]))
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 2)
    try:
        assert wait_for(lambda: [(q.sport, q.rate_kbps) for q in sorted(
            actuator.live.values(), key=lambda q: q.qp_id)] == [(49200, None),
                                                                  (49300, 40_000_000)])
        plan = plan_of([49200, 50001], [30e9, None], version=2)
        res = actuator.apply(plan)
        calls = [r for r in records(log) if r["call"] == "mlx5dv_modify_qp_udp_sport"]
        assert [(r["qpn"], r["sport"], r["rc"]) for r in calls] == [(qps[1], 50001, 0)]
        paced = [(r["qpn"], r["rate_limit"]) for r in records(log)
                 if r.get("mask") == IBV_QP_RATE_LIMIT]
        assert paced == [(qps[0], 30_000_000)]  # QP 0 paced live by the re-plan
        # QP 1's RTR static rate cannot be lifted live: reported, not acked.
        assert res.failed == {plan.qps[1].qp_id} and len(res.messages) == 1
        assert "static rate set at RTR (40000000 kbit/s) cannot be raised" in res.messages[0]
        by_ordinal = sorted(actuator.live.values(), key=lambda q: q.qp_id)
        assert [(q.sport, q.rate_kbps, q.rate_via) for q in by_ordinal] == [
            (49200, 30_000_000, "rate_limit"), (50001, 40_000_000, "static_rate")]
        # The autonomous backup-port switch goes the same way.
        assert actuator.set_sport(plan.qps[0].qp_id, 0xD000)
        assert records(log)[-1]["sport"] == 0xD000, records(log)[-3:]
    finally:
        release(proc, hold)


@pytest.mark.parametrize("late", [False, True], ids=["restarted", "late"])
def test_an_agent_that_starts_again_learns_every_live_qp(native, tmp_path, agent_sock, late):
    """The agent restarts (or starts only after the CCL connected): the shim connects again
    within ICE_SHIM_RETRY_MS and tells it every connected QP in connection order, with the
    port RTR put in force, so they keep their names and a plan reaches them live."""
    planned = [49200, 49300, 49400]
    first = VerbsActuator(agent_sock, push_timeout_s=5.0)
    if not late:
        first.start().apply(plan_of(planned))
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 3, ICE_SHIM_RETRY_MS="100")
    try:
        first.stop()
        at_rtr = [int(flow_label_to_udp_sport(fl)) if fl else None
                  for fl in rtr_labels(log).values()]
        assert at_rtr == ([None] * 3 if late else planned)
        with VerbsActuator(agent_sock, push_timeout_s=5.0) as again:
            # each QP is told, then its RTR (two messages): wait for the ports too
            assert wait_for(lambda: len(again.live) == 3
                            and all(q.sport for q in again.live.values())), again.live
            live = sorted(again.live.values(), key=lambda q: q.qp_id)
            assert [(q.lqpn, q.qp_id.ordinal) for q in live] == list(zip(qps, range(3)))
            if not late:
                assert [q.sport for q in live] == planned
            replanned = [49200, 49300, 50000]
            moved = [(n, p) for n, p, q in zip(qps, replanned, live, strict=True)
                     if q.sport != p]
            again.apply(plan_of(replanned))
        calls = [(r["qpn"], r["sport"]) for r in records(log)
                 if r["call"] == "mlx5dv_modify_qp_udp_sport" and r["rc"] == 0]
        assert calls == moved and moved
    finally:
        release(proc, hold)


@pytest.mark.parametrize("env, msg", [
    ({"FAKEMLX5_NO_SPORT": "1"}, "cannot change a live QP's source port"),
    ({"ICE_SHIM_MLX5_LIB": "none"}, "libmlx5 (mlx5dv_modify_qp_udp_sport) is not in"),
    ({"ICE_SHIM_MLX5_LIB": "/nonexistent/libmlx5.so.1"}, "libmlx5 (mlx5dv_modify_qp_udp"),
])
def test_unsupported_live_port_change_is_reported(native, tmp_path, actuator, agent_sock,
                                                  env, msg):
    actuator.apply(plan_of([49200, 49300]))
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 2, **env)
    try:
        assert wait_for(lambda: all(q.sport for q in actuator.live.values()))
        plan = plan_of([50000, 50001], version=2)
        res = actuator.apply(plan)
        assert res.failed == {q.qp_id for q in plan.qps} and len(res.messages) == 1
        assert res.messages[0].startswith("2 QP(s) on mlx5_0: ") and msg in res.messages[0]
        # Nothing applied is recorded as applied: the same plan again retries both QPs.
        again = actuator.apply(plan)
        assert again.failed == res.failed and again.messages == res.messages
    finally:
        release(proc, hold)


@pytest.mark.parametrize("err", ["EINVAL", "EOPNOTSUPP"])
def test_unsupported_live_rate_leaves_the_static_rate(native, tmp_path, actuator, agent_sock,
                                                      err):
    """mlx5 refuses IBV_QP_RATE_LIMIT on RC QPs with EINVAL (the kernel core's
    qp_state_table), other drivers with EOPNOTSUPP: alike, the QP keeps its RTR rate."""
    actuator.apply(plan_of([49200], [25e9]))
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 1, FAKEVERBS_NO_RATE=err)
    try:
        assert rtr_labels(log, "static_rate") == {qps[0]: 15}  # IBV_RATE_25_GBPS
        assert wait_for(lambda: len(actuator.live) == 1 and next(
            iter(actuator.live.values())).rate_kbps == 25_000_000)
        res = actuator.apply(plan_of([49200], [20e9], version=2))
        rate_calls = [r for r in records(log) if r.get("mask") == IBV_QP_RATE_LIMIT]
        assert [(r["rate_limit"], r["rc"]) for r in rate_calls] == [
            (20_000_000, getattr(errno, err))]
        assert len(res.failed) == 1
        assert f"no live per-QP rate for RC QPs ({err}): the QP keeps its RTR static rate" \
            in res.messages[0]
        assert next(iter(actuator.live.values())).rate_via == "static_rate"
    finally:
        release(proc, hold)


def test_many_processes_and_threads(native, tmp_path, actuator, agent_sock):
    """2 processes x 4 threads x 16 QPs on one NIC pair: each QP gets one planned port."""
    sports = list(range(0xC100, 0xC100 + 32))
    actuator.apply(plan_of(sports))
    runs = [connect(native, tmp_path, agent_sock, 16, threads=4, rqpn_base=0x1000 * (k + 1))
            for k in range(2)]
    try:
        got = [int(flow_label_to_udp_sport(fl)) for _, log, _, _ in runs
               for fl in rtr_labels(log).values()]
        assert sorted(got) == sports
    finally:
        for proc, _, hold, _ in runs:
            release(proc, hold)


# -- failing open ---------------------------------------------------------------------------
class FakeAgent:
    """An agent that misbehaves: never reads (``reply=b"-"``), never answers (None), or
    answers ``reply``."""

    def __init__(self, path: Path, reply: bytes | None):
        self.reply = reply
        self.requests = 0
        self.conns: list[socket.socket] = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c):
        if self.reply == b"-":
            self.conns.append(c)  # keep it open, read nothing
            return
        with contextlib.suppress(OSError):  # the program may end at any time ...
            for line in c.makefile("rb"):
                if line.startswith(b"QP "):
                    self.requests += 1
                    if self.reply is not None:
                        with contextlib.suppress(OSError):  # ... its lines still count
                            c.sendall(self.reply)

    def close(self):
        self.srv.close()


@pytest.mark.parametrize("reply, n", [
    (None, 20), (b"PLAN seq=1 sport=banana srate=1\n", 20), (b"\x00\xff garbage\n", 20),
    # Never reading: the QP request and thousands of notifications fill the socket buffer;
    # the shim must drop the connection rather than block the CCL on send().
    (b"-", 4000)], ids=["slow", "malformed", "garbage", "not-reading"])
def test_a_misbehaving_agent_changes_nothing(native, tmp_path, agent_sock, reply, n):
    fake = FakeAgent(agent_sock, reply)
    try:
        proc, log, hold, qps = connect(native, tmp_path, agent_sock, n,
                                       ICE_SHIM_TIMEOUT_MS="50", ICE_SHIM_DEBUG="1")
        # After the first failure no QP waits for the agent (ICE_SHIM_RETRY_MS, default
        # 10 s), but each is still told, so that the agent can plan it and re-port it live
        # (counted while the program holds its QPs).
        told = wait_for(lambda: fake.requests == n) if reply != b"-" else fake.requests == 0
        err = release(proc, hold)
    finally:
        fake.close()
    assert told, fake.requests
    assert set(rtr_labels(log).values()) == {0} and len(rtr_labels(log)) == n
    if reply == b"-":
        assert "the agent is not reading" in err
    else:
        assert err.count("no usable answer from the agent") == 1, err


def test_no_agent_changes_nothing(native, tmp_path, agent_sock):
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 5, hold=False)
    release(proc, hold)
    calls = [r for r in records(log) if r["call"] == "modify_qp"]
    assert len(calls) == 15 and {r["flow_label"] for r in calls} == {0}  # only the CCL's own


def test_a_label_the_driver_rejects_is_replayed_without_it(native, tmp_path, actuator,
                                                           agent_sock):
    actuator.apply(plan_of([49200]))
    proc, log, hold, qps = connect(native, tmp_path, agent_sock, 1, hold=False,
                                   FAKEVERBS_REJECT_FLOW_LABEL="1")
    release(proc, hold)
    rtr = [(r["flow_label"], r["rc"]) for r in records(log) if r.get("state") == 2]
    assert rtr == [(49200 & 0x3FFF, errno.EINVAL), (0, 0)]
