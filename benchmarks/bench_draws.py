"""ECMP draws: cost of ``--draws N`` beside one draw, and how stable the medians are.

Run on demand (not part of the tests):

    python benchmarks/bench_draws.py [--scenario hetero-default] [--draws 100] [--rounds 3]
                                     [--stability 20,50,100] [--seeds 7,1007]

Part 1 (cost): runs ``icefab simulate SCENARIO --json -q`` with one draw and with
``--draws N`` alternately, ``--rounds`` times, each under ``/usr/bin/time -v`` when it exists:
wall time, CPU time (user + sys), peak RSS and the load average before each run. The ratio
of the medians over the rounds is the figure BENCHMARKS.md records (Done-when: <= 3x).

Part 2 (stability): for each N of ``--stability``, runs the draws with two base seeds
(``--seed``) and reports the largest relative change of any median busbw (every randomised
policy, job, collective and size) between the two: the default N is the smallest one below
3 %. Every figure is measured by the commands this script prints.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def run(cmd: list[str]) -> dict:
    """One command: wall, CPU (user+sys), peak RSS, load average before, and its stdout."""
    load = os.getloadavg()[0]
    timed = ["/usr/bin/time", "-v"] + cmd if shutil.which("/usr/bin/time") else cmd
    t0 = time.perf_counter()
    p = subprocess.run(timed, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    cpu = rss = None
    for line in p.stderr.splitlines():
        line = line.strip()
        if line.startswith(("User time", "System time")):
            cpu = (cpu or 0.0) + float(line.rsplit(":", 1)[1])
        elif line.startswith("Maximum resident set size"):
            rss = int(line.rsplit(":", 1)[1]) / 1024
    return {"wall_s": wall, "cpu_s": cpu, "rss_MiB": rss, "load": load, "out": p.stdout}


def medians(doc: dict) -> dict[tuple, float]:
    """Median busbw of every drawn row."""
    return {(r["policy"], r["job"], r["collective"], r["size_bytes"]): r["busbw_GBps"]
            for r in doc["rows"] if r.get("draws")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="hetero-default")
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stability", default="20,50,100")
    ap.add_argument("--seeds", default="7,1007")
    args = ap.parse_args()
    base = [sys.executable, "-m", "icefabric", "simulate", args.scenario, "--json", "-q"]
    if args.rounds:
        cost(base, args.draws, args.rounds)
    stability(base, args.stability, args.seeds)


def cost(base: list[str], draws: int, rounds: int) -> None:
    print(f"# cost: {' '.join(base[2:])} [--draws 1 | --draws {draws}]")
    res: dict[int, list[dict]] = {1: [], draws: []}
    for i in range(rounds):
        for n in res:
            r = run(base + ["--draws", str(n)])
            res[n].append(r)
            print(f"round {i + 1} draws {n:>4}: wall {r['wall_s']:6.2f} s  cpu "
                  f"{r['cpu_s'] or float('nan'):6.2f} s  rss {r['rss_MiB'] or 0:6.0f} MiB  "
                  f"load {r['load']:.2f}", flush=True)
    med = {n: sorted(x["wall_s"] for x in v)[len(v) // 2] for n, v in res.items()}
    cpu = {n: sorted(x["cpu_s"] or 0 for x in v)[len(v) // 2] for n, v in res.items()}
    print(f"median wall: 1 draw {med[1]:.2f} s, {draws} draws {med[draws]:.2f} s "
          f"-> {med[draws] / med[1]:.2f}x; CPU {cpu[1]:.2f} s -> {cpu[draws]:.2f} s "
          f"({cpu[draws] / max(cpu[1], 1e-9):.2f}x)")


def stability(base: list[str], ns: str, seeds: str) -> None:
    s1, s2 = (int(s) for s in seeds.split(","))
    print(f"\n# stability: medians with --seed {s1} vs --seed {s2}")
    for n in (int(x) for x in ns.split(",")):
        a = medians(json.loads(run(base + ["--draws", str(n), "--seed", str(s1)])["out"]))
        b = medians(json.loads(run(base + ["--draws", str(n), "--seed", str(s2)])["out"]))
        change = {k: abs(b[k] / a[k] - 1) for k in a}
        worst = max(change, key=change.get)
        big = [k for k in change if k[3] == max(x[3] for x in change)]
        print(f"draws {n:>4}: largest median change {change[worst]:.1%} ({worst[0]} {worst[1]} "
              f"{worst[2]} {worst[3]} B); at the largest size {max(change[k] for k in big):.1%}"
              f"; mean {sum(change.values()) / len(change):.1%} over {len(change)} medians",
              flush=True)


if __name__ == "__main__":
    main()
