"""Fluid engine cost as the fabric grows (issues 4, 12 and 26): 64 to 16,384 GPUs.

    python benchmarks/bench_fluid_scaling.py [--gpus 64,256,1024,4096] [--size 1G] [--seeds 0]
        [--pacers 1.0] [--engine-options '{"ack_bytes": 0}']

A 1:1 leaf-spine of HGX H100 servers (4 servers per leaf, scattered placement so every ring
hop crosses the spines; above 4,096 GPUs, where a spine's 128 ports cannot reach every
leaf, a 1:1 3-tier fat-tree of radix-128 switches sized by ``fat_tree_for``, scattered),
one NCCL ring AllReduce job over all GPUs, ECMP with DCQCN + PFC (the congested case:
collisions build queues, so the engine takes small steps) and ICE (paced, queues stay
empty since each ACK takes its own cable back; BENCHMARKS.md). Each size
runs in its own process, so its peak RSS is its own. Prints the engine's wall and CPU
time, steps, busbw, the largest queue and peak RSS per size; BENCHMARKS.md records the
figures (targets: 1,024 GPUs ECMP within 60 s and 4 GiB; issue 26: 4,096 GPUs ECMP and
16,384 GPUs ICE within 60 s CPU). ``--seeds 0,1,2`` runs each case once per seed of the
engine's CNP draws (the same paths and pacers): where DCQCN reacts, one seed's busbw is one
draw of a spread. ``--pacers 0.95`` scales the plan's pacer rates and ``--engine-options``
adds engine options (JSON), to tell why a figure is what it is.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import replace

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.pipeline import EngineOptions, plan, simulate
from icefabric.policies.base import get_policy
from icefabric.topology.builders import (
    BuildOptions,
    FatTreeSizing,
    LeafSpineSpec,
    ServerGroup,
    fat_tree_for,
    leaf_spine,
)
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL
from icefabric.units import parse_size


def one(gpus: int, policy: str, size: int, seed: int, pacers: float = 1.0,
        options: str = "{}") -> dict:
    """One run; ``pacers`` scales the plan's pacer rates, ``options`` (JSON) adds engine
    options (e.g. ``{"ack_bytes": 0}``)."""
    servers = gpus // 8
    group = [ServerGroup(server_profile("hgx-h100"), servers, "h100")]
    if servers // 4 > 128:  # more leaves than a spine has ports: a 3-tier fat-tree
        fab = fat_tree_for(group, FatTreeSizing(radix=128), BuildOptions(placement="scattered"))
    else:
        # 1:1: 32 uplinks per leaf; 4 cables per spine while the spines' 128 ports allow it
        per_spine = max(1, min(4, 128 // max(servers // 4, 1)))
        fab = leaf_spine(group,
                         LeafSpineSpec(servers_per_leaf=4, n_spines=32 // per_spine,
                                       links_per_spine=per_spine),
                         BuildOptions(placement="scattered"))
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("ring", fab, fab.nodes_of_kind(ACCEL)), "all_reduce", size)
    wl = wb.build(node_ip=fab.node_ip)
    pol = get_policy(policy)
    pol.ideal_fabric(fab)
    p = replace(plan(fab, wl, pol), seed=seed)  # the engine's seed only: the same paths
    if pacers != 1.0:
        p = replace(p, paths=p.paths.with_rates(p.paths.rate_bps * pacers))
    opts = EngineOptions(**{"engine": "fluid", "endside": False, **json.loads(options)})
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(p, opts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    c = res.collectives[0]
    return {"gpus": gpus, "policy": policy, "seed": seed, "routes": len(p.paths.route_qp),
            "links": fab.n_links, "wall_s": wall, "cpu_s": cpu, "events": res.events,
            "busbw": c.busbw_GBps, "pause_us": sum(res.link_pfc_pause_ns.values()) / 1e3,
            "max_queue_mb": max(res.link_max_queue_bytes.values(), default=0.0) / 1e6,
            "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def in_child(gpus: int, policy: str, size: str, seed: int, variant: list[str]) -> dict:
    """:func:`one` in a fresh process (its own peak RSS); ``variant``: the pacer and engine
    options' arguments."""
    out = subprocess.run([sys.executable, __file__, "--one", f"{gpus},{policy},{size},{seed}",
                          *variant], check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="64,256,1024,4096")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--policies", default="ecmp,ice")
    ap.add_argument("--seeds", default="0", help="the engine's seeds (CNP draws), one run each")
    ap.add_argument("--pacers", type=float, default=1.0, help="scale the pacer rates")
    ap.add_argument("--engine-options", default="{}", help="JSON: more EngineOptions")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # gpus,policy,size[,seed]: JSON out
    args = ap.parse_args()
    if args.one:
        g, p, size, *seed = args.one.split(",")
        print(json.dumps(one(int(g), p, parse_size(size), int(seed[0]) if seed else 0,
                             args.pacers, args.engine_options)))
        return
    variant = ["--pacers", str(args.pacers), "--engine-options", args.engine_options]
    print(f"size {args.size}; load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'GPUs':>6} {'policy':>6} {'seed':>4} {'routes':>7} {'links':>6} {'wall s':>8} "
          f"{'CPU s':>8} {'steps':>7} {'busbw GB/s':>10} {'PFC pause us':>12} "
          f"{'max queue MB':>12} {'peak RSS GiB':>12}")
    for g in (int(x) for x in args.gpus.split(",")):
        for p, s in ((p, int(s)) for p in args.policies.split(",")
                     for s in args.seeds.split(",")):
            r = in_child(g, p, args.size, s, variant)
            print(f"{r['gpus']:>6} {r['policy']:>6} {r['seed']:>4} {r['routes']:>7} "
                  f"{r['links']:>6} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} {r['events']:>7} "
                  f"{r['busbw']:>10.1f} {r['pause_us']:>12.1f} {r['max_queue_mb']:>12.2f} "
                  f"{r['rss_gib']:>12.2f}",
                  flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
