"""Point-to-point transfers (pipeline activations, trace send/receive pairs) as flows."""

from __future__ import annotations

from dataclasses import dataclass

from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import CollectiveCall, WorkloadBuilder


@dataclass(frozen=True)
class Transfer:
    """``size_bytes`` from each source accelerator to its destination in ``pairs``, all at
    once (the receiver needs all of them), each network pair over ``channels`` connections
    (NCCL p2p channels per peer); ``label`` names it (``<job>:<label>``)."""

    pairs: list[tuple[int, int]]
    size_bytes: float
    channels: int
    label: str


def transfer(wb: WorkloadBuilder, comm: Communicator, t: Transfer, after) -> int:
    """``t`` as one coupled flow after the flows ``after``: a network pair over ``t.channels``
    connections of ``comm`` (each through the GPU's port for that channel:
    :meth:`~icefabric.topology.model.Fabric.accel_port`), an intra-server pair over the
    scale-up fabric. Reported as a ``sendrecv`` of ``t.size_bytes``."""
    channels = t.channels
    coll = wb.collective(CollectiveCall(f"{comm.job}:{t.label}", comm.job, "sendrecv",
                                        int(t.size_bytes), 2, "p2p", comm.library))
    f = wb.flow(t.size_bytes, coll=coll, deps=after)
    fab, delay = comm.fabric, 0
    for x, y in t.pairs:
        if fab.node_server[x] == fab.node_server[y]:
            wb.hop(f, x, y)
            srv = fab.servers[int(fab.node_server[x])]
            delay = max(delay, 2 * srv.profile.intra_delay_ns)
            continue
        for c in range(channels):
            sn, dn = int(fab.accel_port(x, c)), int(fab.accel_port(y, c))
            k = wb.connection((comm.job, x, y, c), sn, dn, comm.conn_spec)
            wb.hop(f, x, y, conn=k, weight=1.0 / channels)
            delay = max(delay, comm.hop_delay_ns(sn, dn))
    wb.flow_latency[f] = delay + comm.step_overhead_ns
    return f
