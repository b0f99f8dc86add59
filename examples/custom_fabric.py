"""Build a fabric and a workload in Python (no scenario file) and compare two policies.

A 2:1 oversubscribed rail-optimized fabric of 8 MI300X servers, one RCCL job running a ring
AllReduce; prints the collective time under ECMP and under ideal per-packet spraying.

    python examples/custom_fabric.py
"""

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.pipeline import EngineOptions, plan, simulate
from icefabric.policies.base import get_policy
from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import ACCEL

fabric = leaf_spine([ServerGroup(server_profile("mi300x"), 8, "mi300x")],
                    LeafSpineSpec(servers_per_leaf=4, n_spines=4, oversub=2.0, rail_optimized=True))
# every GPU of every server in one RCCL communicator; 8 channels (one per rail)
comm = Communicator("train", fabric, fabric.nodes_of_kind(ACCEL), library="rccl", channels=8)
wb = WorkloadBuilder()
add_collective(wb, comm, "all_reduce", 256 << 20)
workload = wb.build(node_ip=fabric.node_ip)

for name in ("ecmp", "spray"):
    p = plan(fabric, workload, get_policy(name), seed=1)
    c = simulate(p, EngineOptions(engine="flow")).collectives[0]
    print(f"{name:>6}: {c.time_us:9.1f} us  busbw {c.busbw_GBps:6.1f} GB/s")
