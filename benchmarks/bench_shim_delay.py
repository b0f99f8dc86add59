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

Each case runs at ``--qps`` and a tenth of it; the medians over rounds are fitted as
``once + per_qp * N`` (one-time costs: loading libmlx5, the first connect or timeout), in
wall-clock time (what the CCL waits) and in the program's CPU time (what the shim itself
costs, less sensitive to other load on the machine).

Run: ``PYTHONPATH=src python benchmarks/bench_shim_delay.py [--qps 2000 --rounds 5]``.
Prints the raw totals as JSON and a markdown table.
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


def connect_ns(kit, n: int, sock: Path, shim: bool) -> tuple[float, float]:
    """Wall-clock and CPU ns per QP of the program's connection phase."""
    env = kit.env(Path("/dev/null"), SIP, ICE_SHIM_SOCKET=str(sock), ICE_JOB=JOB)
    env.pop("FAKEVERBS_LOG")  # the stand-in records nothing: only the verbs path is timed
    if not shim:
        env.pop("LD_PRELOAD")
    proc = kit.run("ccl_dlopen", n, DIP, env)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    f = out.split("connect_ns_per_qp")[1].split()
    return float(f[0]), float(f[2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="icebench"))
    kit = build_kit(tmp)
    plan = HostPlan(host="h", version=1, fabric_version=1, policy="ice", created_at=0.0,
                    qps=[QpPlan(src_ip=SIP, dst_ip=DIP, lqpn=i, rqpn=i, job=JOB,
                                               ordinal=i, sport=0xC000 + i % 0x4000,
                                               rate_bps=100e9, routes=[[0]], weights=[1.0])
                                        for i in range(args.qps)])
    cases = ("no shim", "shim, no agent", "shim, agent, plan", "shim, silent agent")
    sizes = (args.qps // 10, args.qps)
    # total connection-phase time of a process (wall, CPU), per case and size, over rounds
    total: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for n in sizes:
            for case in cases:
                wall, cpu = run_case(kit, tmp, case, n, plan)
                total.setdefault((case, n), []).append((n * wall, n * cpu))
    print(json.dumps({"qps": sizes, "rounds": args.rounds, "wall_cpu_ms": {
        f"{c} / {n} QPs": [[round(x / 1e6, 3) for x in w] for w in v]
        for (c, n), v in total.items()}}))
    print("\n| case | per QP, wall (µs) | per QP, CPU (µs) | once per process, wall (ms) |")
    print("|---|---|---|---|")
    for case in cases:
        (ws, cs), (wb, cb) = [[statistics.median(x[k] for x in total[(case, n)])
                               for k in (0, 1)] for n in sizes]
        dn = sizes[1] - sizes[0]
        per_wall, per_cpu = (wb - ws) / dn, (cb - cs) / dn
        print(f"| {case} | {per_wall / 1e3:.2f} | {per_cpu / 1e3:.2f} | "
              f"{(ws - sizes[0] * per_wall) / 1e6:.2f} |")


def run_case(kit, tmp: Path, case: str, n: int, plan: HostPlan) -> tuple[float, float]:
    if case == "no shim":
        return connect_ns(kit, n, tmp / "none.sock", False)
    if case == "shim, no agent":
        return connect_ns(kit, n, tmp / "none.sock", True)
    if case == "shim, agent, plan":
        with VerbsActuator(tmp / "a.sock") as act:
            act.apply(plan)
            return connect_ns(kit, n, tmp / "a.sock", True)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(tmp / "s.sock"))
    silent.listen(64)
    try:
        return connect_ns(kit, n, tmp / "s.sock", True)
    finally:
        silent.close()
        (tmp / "s.sock").unlink()


if __name__ == "__main__":
    main()
