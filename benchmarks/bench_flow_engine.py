"""Flow engine at scale: ring AllReduce over 16,384 (up to 131,072) GPUs on a 3-tier
fat-tree sized for them (``fat_tree_for``: radix-128 switches, 1:1, by default).

Run on demand (not part of the tests):

    python benchmarks/bench_flow_engine.py [--gpus 16384] [--policy ecmp] [--radix 128]
        [--oversub 1] [--rail] [--collective alltoall]

Prints the wall and CPU time of every stage and the peak resident memory; BENCHMARKS.md
records the figures. numpy's transparent-huge-page advice is off unless ``--hugepages``:
with the kernel's THP defrag on ``madvise`` (this machine's), every fault in a large fresh
array can compact memory first, which was 42 s of system time in the 8,192-rank AllToAll
(BENCHMARKS.md). glibc's malloc keeps what the process frees unless ``--release-memory``
(:func:`_keep_freed_memory`). Targets: under 60 s and under 4 GiB on 2 cores at 16,384 GPUs (issue
2), under 60 s and 8 GiB at 131,072 (issue 26); ``--collective alltoall`` (NCCL's PXN
AllToAll over every GPU) under 60 s at 8,192 GPUs (issue 26). To compare the stages with
another revision side by side, run that revision's copy of this script from its own tree
(``git archive REV src benchmarks | tar -x -C /tmp/rev``, then
``PYTHONPATH=/tmp/rev/src python /tmp/rev/benchmarks/bench_flow_engine.py``) alternately with
this one.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import resource
import time

import numpy as np
from numpy._core.multiarray import _set_madvise_hugepage

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.engine.registry import run_engine
from icefabric.pipeline.problem import to_problem
from icefabric.policies.base import PlanContext, get_policy
from icefabric.topology.builders import FatTreeSizing, ServerGroup, fat_tree_for
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=16384)
    ap.add_argument("--radix", type=int, default=128, help="switch ports (64, 128, 256)")
    ap.add_argument("--oversub", type=float, default=1.0, help="leaf down : up")
    ap.add_argument("--rail", action="store_true", help="rail-optimized leaves")
    ap.add_argument("--policy", default="ecmp")
    ap.add_argument("--size", type=int, default=1 << 30)
    ap.add_argument("--collective", default="all_reduce", choices=("all_reduce", "alltoall"))
    ap.add_argument("--hugepages", action="store_true",
                    help="keep numpy's madvise(MADV_HUGEPAGE) on large arrays")
    ap.add_argument("--release-memory", action="store_true",
                    help="keep glibc's default: freed large arrays go back to the kernel")
    args = ap.parse_args()
    _set_madvise_hugepage(args.hugepages)
    if not args.release_memory:
        _keep_freed_memory()
    servers = args.gpus // 8
    t: dict[str, np.ndarray] = {}

    def stage(name: str, t0: np.ndarray) -> None:
        t[name] = _now() - t0
        print(f"  {name:<18} {t[name][0]:7.2f} s wall {t[name][1]:7.2f} s CPU   "
              f"peak RSS so far {_peak_gib():.2f} GiB", flush=True)

    t0 = _now()
    fab = fat_tree_for([ServerGroup(server_profile("hgx-h100"), servers, "h100")],
                       FatTreeSizing(radix=args.radix, oversub=args.oversub,
                                     rail_optimized=args.rail))
    stage("build fabric", t0)
    t0 = _now()
    wb = WorkloadBuilder()
    comm = Communicator("ring", fab, fab.nodes_of_kind(ACCEL), channels=16)
    add_collective(wb, comm, args.collective, args.size)
    wl = wb.build(node_ip=fab.node_ip)
    del wb  # (its Python lists: ~1.4 GB at 8,192 ranks of AllToAll)
    stage("workload", t0)
    t0 = _now()
    ctx = PlanContext.create(fab, wl)
    stage("routing tables", t0)
    t0 = _now()
    plan = get_policy(args.policy).plan(ctx)
    stage(f"plan ({args.policy})", t0)
    t0 = _now()
    prob, pmap = to_problem(fab, wl, plan, shared=True)  # the flow engine: shared legs
    summary = wl.summary()
    del ctx, plan, wl, pmap  # the engine reads only the problem
    stage("engine problem", t0)
    t0 = _now()
    res = run_engine(prob, "flow")
    stage("flow engine run", t0)
    total = sum(t.values())
    rss_gib = _peak_gib()
    print(f"{args.gpus} GPUs, {len(fab.servers)} servers, {fab.n_nodes} nodes, "
          f"{fab.n_links} links; workload {summary}; {prob.n_routes} routes, "
          f"{len(prob.route_links)} route-links"
          + (f", {len(prob.shared.group)} shared routes" if prob.shared is not None else ""))
    c = res.collectives[0]
    print(f"  total              {total[0]:7.2f} s wall {total[1]:7.2f} s CPU   "
          f"peak RSS {rss_gib:.2f} GiB")
    print(f"  result: {args.collective} {args.size} B in {c.time_us:.1f} us, busbw "
          f"{c.busbw_GBps:.1f} GB/s ({res.events} events)")


def _keep_freed_memory() -> None:
    """Have glibc's malloc take every block from its heap (``M_MMAP_MAX`` 0) and keep up
    to 2 GiB of freed heap (``M_TRIM_THRESHOLD``), so that a freed array's pages serve the
    next one. By default every block above 32 MiB is its own mapping, unmapped when freed,
    and the next array faults fresh pages in; on this machine (a VM whose free pages go
    back to the host) a fault costs ~4 us of system time, and the 8,192-rank AllToAll
    faulted 7.9 M pages (~30 GiB through a 4.3 GiB peak): 34 s of its 86 s of CPU
    (BENCHMARKS.md). Elsewhere than glibc nothing changes."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return
    mallopt(_M_MMAP_MAX, 0)
    mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _now() -> np.ndarray:
    """Wall and CPU (process) time: on a shared machine the CPU time compares between runs."""
    return np.array([time.perf_counter(), time.process_time()])


if __name__ == "__main__":
    main()
