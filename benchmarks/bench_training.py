"""Training iteration at scale: a 1,024-GPU Llama-3 70B iteration through the flow engine.

Run on demand (not part of the tests):

    python benchmarks/bench_training.py [--gpus 1024] [--policy ecmp] [--global-batch 256]

128 HGX H100 servers on a 1:1 leaf-spine (8 servers per leaf, 16 spines; above 2,048 GPUs a
1:1 fat-tree of radix-128 switches sized by `fat_tree_for`); Megatron plan
TP 8 (inside servers) x PP 8 x DP 16, sequence parallel, distributed optimizer, 1F1B.
Prints the wall and CPU time of every stage as it ends, the iteration time and the peak
resident memory; BENCHMARKS.md records the figures. Target (issue 13): the whole run under 60 s.
"""

from __future__ import annotations

import argparse
import resource
import time

from icefabric.pipeline import EngineOptions, plan, simulate
from icefabric.policies.base import get_policy
from icefabric.topology.builders import (
    FatTreeSizing,
    LeafSpineSpec,
    ServerGroup,
    fat_tree_for,
    leaf_spine,
)
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL
from icefabric.training.iteration import build_iteration
from icefabric.training.spec import TrainingSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--policy", default="ecmp")
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--global-batch", type=int, default=256)
    args = ap.parse_args()
    servers = args.gpus // 8
    t: dict[str, float] = {}

    def timed(stage, fn, *a):
        print(f"  {stage} ...", flush=True)  # a stage that never ends is named
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(*a)
        t[stage] = time.perf_counter() - t0
        print(f"  {stage:<34} {t[stage]:7.2f} s wall "
              f"{time.process_time() - c0:7.2f} s CPU", flush=True)
        return out

    group = [ServerGroup(server_profile("hgx-h100"), servers, "h100")]
    # the 1:1 leaf-spine of radix-128 switches holds 2,048 GPUs; beyond, a sized fat-tree
    fab = timed("build fabric", lambda: leaf_spine(
        group, LeafSpineSpec(servers_per_leaf=8, n_spines=16, links_per_spine=4))
        if args.gpus <= 2048 else fat_tree_for(group, FatTreeSizing(radix=128)))
    spec = TrainingSpec.model_validate({
        "pools": ["h100"], "model": args.model,
        "parallel": {"tp": 8, "pp": args.pp, "global_batch": args.global_batch}})
    tw = timed("iteration workload", build_iteration, fab, fab.nodes_of_kind(ACCEL), spec)
    p = timed(f"plan ({args.policy})", plan, fab, tw.workload, get_policy(args.policy))
    res = timed("simulate (problem + flow engine)", simulate, p, EngineOptions())
    total = sum(t.values())
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    s = tw.summary
    print(f"{args.gpus} GPUs, {len(fab.servers)} servers, {fab.n_nodes} nodes, "
          f"{fab.n_links} links; {s['model']} tp {s['tp']} pp {s['pp']} dp {s['dp']}, "
          f"{s['micro_batches']} micro-batches; workload {tw.workload.summary()}")
    print(f"  {'total':<34} {total:7.2f} s   peak RSS {rss_gib:.2f} GiB")
    T = res.makespan_ns / 1e9
    print(f"  result: iteration {T * 1e3:.1f} ms ({res.events} events), MFU "
          f"{s['model_flops'] / T / s['peak_flops']:.1%}")


if __name__ == "__main__":
    main()
