"""Point-to-point transfers (pipeline activations, trace send/receive pairs) as flows."""

from __future__ import annotations

from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import CollectiveCall, WorkloadBuilder


def transfer(wb: WorkloadBuilder, comm: Communicator, pairs: list[tuple[int, int]],
             size_bytes: float, channels: int, after, label: str) -> int:
    """One coupled flow that moves ``size_bytes`` from each source accelerator to its
    destination in ``pairs`` at once (the receiver needs all of them), each network pair
    over ``channels`` connections of ``comm`` (NCCL p2p channels per peer, each through the
    GPU's port for that channel: :meth:`~icefabric.topology.model.Fabric.accel_port`), an
    intra-server pair over the scale-up fabric. Reported as a ``sendrecv`` of ``size_bytes``."""
    coll = wb.collective(CollectiveCall(f"{comm.job}:{label}", comm.job, "sendrecv",
                                        int(size_bytes), 2, "p2p", comm.library))
    f = wb.flow(size_bytes, coll=coll, deps=after)
    fab, delay = comm.fabric, 0
    for x, y in pairs:
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
