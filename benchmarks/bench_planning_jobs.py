"""ICE planning of many small jobs at once: the controller's load tables at scale.

Run on demand (not part of the tests):

    PYTHONPATH=src python benchmarks/bench_planning_jobs.py [--servers 10000] [--jobs 5000]

The fabric of ``bench_controller.py --agents 10000`` (HGX H100 servers scattered over a
3-tier fat-tree of 128-port switches, ``fat_tree_for``); job ``j`` runs on servers ``2j``
and ``2j + 1``, one QP from every NIC of each to the same NIC of the other (16 QPs, one
phase per job). Timed: planning every job's paths (``plan_paths``, which also computes the
plan's link utilisation) and the plan's load state (``load_state``), with the peak of the
memory numpy allocates meanwhile (tracemalloc). Link x phase and link x job tables for
5,000 jobs on 802,560 links would be 2 x 29.9 GiB.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np

from icefabric.control.demand import demand_from_pairs
from icefabric.control.planning import load_state, paths_to_csr, plan_paths
from icefabric.topology.builders import BuildOptions, FatTreeSizing, ServerGroup, fat_tree_for
from icefabric.topology.catalog import server_profile
from icefabric.topology.routing import Routing


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=5000)
    args = ap.parse_args()
    if not 1 <= args.jobs <= args.servers // 2:
        raise SystemExit(f"--jobs must be in [1, {args.servers // 2}] (two servers a job)")
    fab = fat_tree_for([ServerGroup(server_profile("hgx-h100"), args.servers, "h100")],
                       FatTreeSizing(radix=128), BuildOptions(placement="scattered"))
    rt = Routing(fab)
    a_nics = [fab.servers[2 * j].nics for j in range(args.jobs)]
    b_nics = [fab.servers[2 * j + 1].nics for j in range(args.jobs)]
    src = np.concatenate([np.r_[a, b] for a, b in zip(a_nics, b_nics, strict=True)])
    dst = np.concatenate([np.r_[b, a] for a, b in zip(a_nics, b_nics, strict=True)])
    per_job = len(src) // args.jobs
    d = demand_from_pairs(fab, src, dst, job=np.repeat(np.arange(args.jobs), per_job))
    dense = fab.n_links * (d.n_phases + len(d.job_names)) * 8 / 2**30
    print(f"{fab.n_nodes} nodes, {fab.n_links} links, {d.n_qps} QPs in {args.jobs} jobs "
          f"({d.n_phases} phases); link x phase and link x job tables: {dense:.1f} GiB")
    tracemalloc.start()
    t0, c0 = time.perf_counter(), os.times()
    a = plan_paths(fab, rt, d)
    load = load_state(fab, d, paths_to_csr(a.paths))
    t1, c1 = time.perf_counter(), os.times()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"plan_paths ({a.method}) + load_state: {(t1 - t0) * 1e3:.0f} ms wall, "
          f"{(c1.user - c0.user) * 1e3:.0f} ms user + {(c1.system - c0.system) * 1e3:.0f} ms "
          f"sys; numpy's peak {peak / 2**20:.0f} MiB (tables kept per (link, job): "
          f"{not load.dense}); max link util {a.max_util:.3f}")


if __name__ == "__main__":
    main()
