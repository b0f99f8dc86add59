"""AllToAll at cluster scale on the flow engine (issue 17).

Run on demand (not part of the tests):

    python benchmarks/bench_alltoall_scale.py [SCENARIO] [--servers H100,ASCEND]

Runs ``icefab simulate`` on ``benchmarks/alltoall-384.yaml`` (32 H100 + 16 Ascend servers,
384 ranks, 2:1 oversubscribed, every default policy) and prints, per policy, the wall and
CPU time of one run, the flows, routes and engine events, then the totals and the peak
resident memory. ``--servers 8,4`` scales the pools down (96 ranks) to compare. CPU time
is printed beside wall time because the machine is shared: on a loaded machine the wall
time stretches while the CPU time stays. Target: the whole run under 60 s.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from icefabric.experiment.runner import run_policy
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load

HERE = Path(__file__).parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", nargs="?", default=str(HERE / "alltoall-384.yaml"))
    ap.add_argument("--servers", help="H100,ASCEND server counts (default: the file's)")
    args = ap.parse_args()
    ls = load(args.scenario)
    if args.servers:
        h, a = (int(x) for x in args.servers.split(","))
        ls.scenario.pools[0].count, ls.scenario.pools[1].count = h, a
    wall0, cpu0 = time.perf_counter(), time.process_time()
    fabric = build_fabric(ls)
    size = ls.scenario.size_list()[-1]
    print(f"{ls.scenario.name}: {fabric.describe()['nodes']['accel']} ranks, "
          f"size {size} B")
    for p in ls.scenario.policies:
        w, c = time.perf_counter(), time.process_time()
        res = run_policy(ls, fabric, p, size)
        coll = res.collectives[0]
        print(f"  {p:16s} wall {time.perf_counter() - w:6.1f} s  cpu "
              f"{time.process_time() - c:6.1f} s  busbw {coll.busbw_GBps:7.2f} GB/s  "
              f"events {res.events}", flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"total wall {time.perf_counter() - wall0:.1f} s, cpu "
          f"{time.process_time() - cpu0:.1f} s, peak RSS {rss:.2f} GiB")


if __name__ == "__main__":
    main()
