"""ECMP draws: cost of ``--draws N`` beside one draw, and how stable the medians are.

Run on demand (not part of the tests):

    python benchmarks/bench_draws.py [--scenario hetero-default] [--draws 100] [--rounds 3]
                                     [--stability 100,200,400,800]
                                     [--seeds 7:1007,8:1008,9:1009]

Part 1 (cost): runs ``icefab simulate SCENARIO --json -q`` with one draw and with
``--draws N`` alternately, ``--rounds`` times, each under ``/usr/bin/time -v`` when it exists:
wall time, CPU time (user + sys), peak RSS and the load average before each run. The ratio
of the medians over the rounds is the figure BENCHMARKS.md records (Done-when: <= 3x).

Part 2 (stability): for each N of ``--stability`` and each pair of base seeds (``--seed``)
of ``--seeds``, the relative change of every median busbw (every randomised policy, job,
collective and size) between the two seeds of a pair: the worst and the mean over all
pairs (Done-when: worst < 3 %), for the sample median the tables report and, beside it,
the Harrell-Davis median. ``--stability ''`` skips it. Every figure is measured by the
commands this script prints.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="hetero-default")
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stability", default="100,200,400,800")
    ap.add_argument("--seeds", default="7:1007,8:1008,9:1009")
    ap.add_argument("--save", default="", help="directory for the runs' JSON")
    args = ap.parse_args()
    base = [sys.executable, "-m", "icefabric", "simulate", args.scenario, "--json", "-q"]
    if args.rounds:
        cost(base, args.draws, args.rounds)
    if args.stability:
        stability(base, args.stability, args.seeds, args.save)


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


def stability(base: list[str], ns: str, seeds: str, save: str = "") -> None:
    """Median changes between base seeds, for every N of ``ns``, over every seed pair of
    ``seeds`` ("7:1007,8:1008"). One run per seed at the largest N: draw ``d``'s seed is
    the ``d``-th word of ``SeedSequence(seed)`` (a prefix-stable stream), so the first N
    draws of that run are the N-draw run; checked against a direct run at the smallest
    N. Beside the sample median (what the tables report), the Harrell-Davis estimate of
    the median (Harrell & Davis, Biometrika 69(3), 1982), a weighted mean of all order
    statistics that does not jump between a discrete outcome's levels."""
    counts = sorted(int(x) for x in ns.split(","))
    pairs = [tuple(int(s) for s in p.split(":")) for p in seeds.split(",")]
    per_draw = {}
    for s in sorted({s for p in pairs for s in p}):
        out = run(base + ["--draws", str(counts[-1]), "--seed", str(s)])["out"]
        if save:
            Path(save, f"draws{counts[-1]}_seed{s}.json").write_text(out)
        per_draw[s] = drawn(json.loads(out))
    check = drawn(json.loads(run(base + ["--draws", str(counts[0]), "--seed",
                                         str(pairs[0][0])])["out"]))
    assert all(v == per_draw[pairs[0][0]][k][:counts[0]] for k, v in check.items()), \
        "the first N draws of a longer run differ from an N-draw run"
    print(f"\n# stability: medians between base seeds {seeds} (prefixes of {counts[-1]}-draw "
          f"runs; a direct {counts[0]}-draw run matched its prefix)")
    for n in counts:
        for name, est in (("sample median", _median), ("Harrell-Davis", _harrell_davis)):
            change = {(a, b, k): abs(est(per_draw[b][k][:n]) / est(per_draw[a][k][:n]) - 1)
                      for a, b in pairs for k in per_draw[a]}
            a, b, k = max(change, key=change.get)
            over = sum(c >= 0.03 for c in change.values())
            print(f"draws {n:>4} {name:>13}: worst {change[a, b, k]:5.1%}  mean "
                  f"{np.mean(list(change.values())):5.2%}  {over} of {len(change)} medians "
                  f"moved 3 % or more ({len(pairs)} seed pairs); worst: seeds {a}/{b} "
                  f"{' '.join(map(str, k))} B", flush=True)
            largest = max(k[3] for k in per_draw[a])
            parts = {"ECMP family": [v for x, v in change.items()
                                     if x[2][0] != "static-disjoint"],
                     f"at {largest} B": [v for x, v in change.items() if x[2][3] == largest]}
            for part, c in parts.items():
                print(f"{'':>25}{part}: worst {max(c):5.1%}  mean {np.mean(c):5.2%}")
    worst_levels(per_draw, pairs, counts[-1])


def worst_levels(per_draw: dict, pairs: list, n: int) -> None:
    """Why the worst medians move: their busbw levels and each level's share of draws."""
    change = {k: max(abs(_median(per_draw[b][k][:n]) / _median(per_draw[a][k][:n]) - 1)
                     for a, b in pairs) for k in per_draw[pairs[0][0]]}
    for k in sorted(change, key=change.get, reverse=True)[:4]:
        x = np.concatenate([per_draw[s][k][:n] for p in pairs for s in p])
        levels, counts = np.unique(np.round(x, 1), return_counts=True)
        top = np.argsort(counts)[::-1][:4]
        shares = ", ".join(f"{levels[i]:g} GB/s {counts[i] / len(x):.0%}" for i in sorted(top))
        print(f"  {' '.join(map(str, k))} B: median moves up to {change[k]:.1%} at {n} draws;"
              f" main levels {shares}")


def drawn(doc: dict) -> dict[tuple, list[float]]:
    """Per-draw busbw of every drawn row."""
    return {(r["policy"], r["job"], r["collective"], r["size_bytes"]): r["busbw_GBps_draws"]
            for r in doc["rows"] if r.get("draws")}


def _median(x) -> float:
    return float(np.percentile(x, 50))  # as the tables' median (experiment.draws.quantiles)


def _harrell_davis(x) -> float:
    from scipy.stats.mstats import hdquantiles

    return float(hdquantiles(np.asarray(x, dtype=float), prob=[0.5])[0])


if __name__ == "__main__":
    main()
