"""Delay the verbs shim adds to connecting a QP (issue 10), without RDMA hardware.

The CCL program of the shim's tests (tests/agent/native/ccl_sim.c, NCCL's dlopen + dlvsym
way) connects ``--qps`` RC QPs (create, RESET->INIT, INIT->RTR, RTR->RTS) against the
stand-in libibverbs, whose verbs return at once: the figure is the shim's own cost per QP,
which on a NIC comes on top of the driver's (ibv_modify_qp to RTR is a firmware command,
typically tens of microseconds or more). Cases, interleaved over ``--rounds`` rounds:

* ``no shim``              - the program alone;
* ``shim, no agent``       - LD_PRELOAD, no socket: one failed connect(), then no QP asks
                             for ICE_SHIM_RETRY_MS;
* ``shim, agent, plan``    - a live ``verbs`` actuator answers every QP from its plan;
* ``shim, silent agent``   - an agent that never answers: the first QP waits
                             ICE_SHIM_TIMEOUT_MS (100 ms), the others pass at once.

Run: ``PYTHONPATH=src python benchmarks/bench_shim_delay.py [--qps 2000 --rounds 5]``.
Prints a JSON summary and a markdown table (median over rounds of the mean per-QP time).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.agent.conftest import build_kit  # noqa: E402

from icefabric.agent.actuators.verbs import VerbsActuator  # noqa: E402
from icefabric.schemas_service import HostPlan, QpPlan  # noqa: E402

SIP, DIP, JOB = "10.0.0.1", "10.0.0.2", "bench"


def connect_ns(kit, n: int, sock: Path, shim: bool) -> float:
    env = kit.env(Path("/dev/null"), SIP, ICE_SHIM_SOCKET=str(sock), ICE_JOB=JOB)
    env.pop("FAKEVERBS_LOG")  # the stand-in records nothing: only the verbs path is timed
    if not shim:
        env.pop("LD_PRELOAD")
    proc = kit.run("ccl_dlopen", n, DIP, env)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return float(out.split("connect_ns_per_qp")[1].split()[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="icebench"))
    kit = build_kit(tmp)
    plan = HostPlan(host="h", version=1, fabric_version=1, policy="ice", created_at=0.0,
                    down_links=[], qps=[QpPlan(src_ip=SIP, dst_ip=DIP, lqpn=i, rqpn=i, job=JOB,
                                               ordinal=i, sport=0xC000 + i % 0x4000,
                                               rate_bps=100e9, routes=[[0]], weights=[1.0])
                                        for i in range(args.qps)])
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        times.setdefault("no shim", []).append(connect_ns(kit, args.qps, tmp / "a.sock", False))
        times.setdefault("shim, no agent", []).append(
            connect_ns(kit, args.qps, tmp / "none.sock", True))
        with VerbsActuator(tmp / "a.sock") as act:
            act.apply(plan)
            times.setdefault("shim, agent, plan", []).append(
                connect_ns(kit, args.qps, tmp / "a.sock", True))
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.bind(str(tmp / "s.sock"))
        silent.listen(64)
        times.setdefault("shim, silent agent", []).append(
            connect_ns(kit, args.qps, tmp / "s.sock", True))
        silent.close()
        (tmp / "s.sock").unlink()
    base = statistics.median(times["no shim"])
    summary = {k: {"median_us_per_qp": statistics.median(v) / 1e3,
                   "added_us_per_qp": (statistics.median(v) - base) / 1e3,
                   "rounds_us": [round(x / 1e3, 2) for x in v]} for k, v in times.items()}
    print(json.dumps({"qps": args.qps, "rounds": args.rounds, "cases": summary}, indent=1))
    print("\n| case | per QP (µs, median of rounds) | added by the shim (µs/QP) |")
    print("|---|---|---|")
    for k, v in summary.items():
        print(f"| {k} | {v['median_us_per_qp']:.2f} | {v['added_us_per_qp']:.2f} |")


if __name__ == "__main__":
    main()
