"""Fluid engine cost as the fabric grows (issue 4): 64, 256 and 1,024 GPUs.

    python benchmarks/bench_fluid_scaling.py [--gpus 64,256,1024] [--size 64M]

A 1:1 leaf-spine of HGX H100 servers (4 servers per leaf, scattered placement so every ring
hop crosses the spines), one NCCL ring AllReduce job over all GPUs, ECMP with DCQCN + PFC
(the congested case: collisions build queues, so the engine takes small steps) and ICE
(paced, queues stay empty). Prints wall time, steps and peak RSS per size; BENCHMARKS.md
records the figures.
"""

from __future__ import annotations

import argparse
import resource
import time

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.pipeline import EngineOptions, plan, simulate
from icefabric.policies.base import get_policy
from icefabric.topology.builders import ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL
from icefabric.units import parse_size


def one(gpus: int, policy: str, size: int) -> dict:
    servers = gpus // 8
    fab = leaf_spine([ServerGroup(server_profile("hgx-h100"), servers, "h100")],
                     servers_per_leaf=4, n_spines=8, links_per_spine=4, placement="scattered")
    wb = WorkloadBuilder()
    add_collective(wb, Communicator("ring", fab, fab.nodes_of_kind(ACCEL)), "all_reduce", size)
    wl = wb.build(node_ip=fab.node_ip)
    pol = get_policy(policy)
    pol.ideal_fabric(fab)
    p = plan(fab, wl, pol)
    t0 = time.perf_counter()
    res = simulate(p, EngineOptions(engine="fluid", endside=False))
    wall = time.perf_counter() - t0
    c = res.collectives[0]
    return {"gpus": gpus, "policy": policy, "routes": len(p.paths.route_qp),
            "links": fab.n_links,
            "wall_s": wall, "events": res.events, "busbw": c.busbw_GBps,
            "pause_us": sum(res.link_pfc_pause_ns.values()) / 1e3}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="64,256,1024")
    ap.add_argument("--size", default="64M")
    ap.add_argument("--policies", default="ecmp,ice")
    args = ap.parse_args()
    size = parse_size(args.size)
    print(f"{'GPUs':>6} {'policy':>6} {'routes':>7} {'links':>6} {'wall s':>8} {'steps':>7} "
          f"{'busbw GB/s':>10} {'PFC pause us':>12}")
    for g in (int(x) for x in args.gpus.split(",")):
        for p in args.policies.split(","):
            r = one(g, p, size)
            print(f"{r['gpus']:>6} {r['policy']:>6} {r['routes']:>7} {r['links']:>6} "
                  f"{r['wall_s']:>8.2f} {r['events']:>7} {r['busbw']:>10.1f} "
                  f"{r['pause_us']:>12.1f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak RSS {rss:.2f} GiB")


if __name__ == "__main__":
    main()
