"""Cross-vendor collectives: one job spanning pools of different vendors (e.g. NVIDIA GPUs
with NCCL and Ascend NPUs with HCCL).

Each vendor's library only talks inside its own pool, so a heterogeneous AllReduce is
hierarchical, as FlagCX's heterogeneous "C2C" mode does it (domain-facts §7.4): (1) every pool
reduce-scatters with its own library, (2) the pools exchange their reduced shards pairwise over
RDMA (each shard is sent to the peer(s) in the other pool that own the overlapping part of
the buffer), (3) every pool all-gathers with its own library. With different NIC speeds the
exchange runs at the slower side's rate — the heterogeneity ICE has to plan for.
"""

from __future__ import annotations

from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import CollectiveCall, WorkloadBuilder


def split_pools(comm: Communicator) -> list[Communicator]:
    """Sub-communicators per pool (by the servers' pool name), each with its library."""
    f = comm.fabric
    pools: dict[str, list[int]] = {}
    for r, s in enumerate(comm.rank_server.tolist()):
        pools.setdefault(f.servers[s].pool, []).append(r)
    out, qps = [], dict(comm.pool_qps)
    for idx in pools.values():
        lib = f.servers[int(comm.rank_server[idx[0]])].profile.library
        out.append(Communicator(job=comm.job, fabric=f, ranks=comm.ranks[idx], library=lib,
                                qps_per_connection=qps.get(lib, comm.qps_per_connection),
                                step_overhead_ns=comm.step_overhead_ns, nccl=comm.nccl))
    return out


def _overlaps(na: int, nb: int):
    """(i, j, fraction of the buffer) for shards i of na and j of nb that overlap."""
    for i in range(na):
        lo_i, hi_i = i / na, (i + 1) / na
        for j in range(nb):
            lo, hi = max(lo_i, j / nb), min(hi_i, (j + 1) / nb)
            if hi > lo + 1e-12:
                yield i, j, hi - lo


def hierarchical_allreduce(wb: WorkloadBuilder, comm: Communicator, size_bytes: int, *,
                           after=(), name: str = "", intra_algorithm=None) -> list[int]:
    """Cross-pool AllReduce (reduce-scatter per pool, pairwise exchange, all-gather)."""
    from icefabric.ccl.collectives import add_collective  # avoid an import cycle

    pools = split_pools(comm)
    if len(pools) == 1:
        return add_collective(wb, pools[0], "all_reduce", size_bytes, after=after, name=name)
    if len(pools) != 2:
        raise ValueError("cross-vendor AllReduce supports two pools")
    a, b = pools
    coll = wb.collective(CollectiveCall(name or f"{comm.job}:all_reduce:{size_bytes}",
                                        comm.job, "all_reduce", size_bytes, comm.nranks,
                                        "cross-hier", "+".join(p.library for p in pools)))
    start = len(wb.flow_size)
    # (1) per-pool reduce-scatter of the whole buffer (size = per-rank output * n)
    rs = []
    for p in pools:
        rs += _sub_step(wb, p, "reduce_scatter", size_bytes, after,
                        f"{comm.job}:rs:{p.library}")
    # (2) pairwise exchange of overlapping shards, both directions, own NICs
    x = []
    for i, j, frac in _overlaps(a.nranks, b.nranks):
        for (pa, ra), (pb, rb) in (((a, i), (b, j)), ((b, j), (a, i))):
            sn, dn = pa.nic(ra), pb.nic(rb)
            k = wb.connection((comm.job, "c2c", int(pa.ranks[ra]), int(pb.ranks[rb])), sn, dn,
                              comm.conn_spec)
            lat = pa.hop_delay_ns(sn, dn) + comm.step_overhead_ns
            f = wb.flow(size_bytes * frac, coll=coll, deps=rs, latency_ns=lat)
            wb.hop(f, int(pa.ranks[ra]), int(pb.ranks[rb]), conn=k)
            x.append(f)
    # (3) per-pool all-gather
    ag = []
    for p in pools:
        ag += _sub_step(wb, p, "all_gather", size_bytes, x, f"{comm.job}:ag:{p.library}")
    # every flow created above belongs to this collective for reporting
    owned = set(wb.collectives[coll].flows)
    for f in range(start, len(wb.flow_size)):
        if f not in owned:
            wb.collectives[coll].flows.append(f)
            wb.flow_coll[f] = coll
    return ag


def _sub_step(wb: WorkloadBuilder, pool: Communicator, kind: str, size_bytes: int, after,
              name: str) -> list[int]:
    """One pool's step of a cross-vendor collective: its flows without a collective entry
    of their own (the caller counts them in its own)."""
    from icefabric.ccl.collectives import add_collective  # avoid an import cycle

    n = len(wb.collectives)
    out = add_collective(wb, pool, kind, size_bytes, after=after, name=name)
    del wb.collectives[n:]
    return out


def flat_alltoall(wb: WorkloadBuilder, comm: Communicator, size_bytes: int, *, after=(),
                  name: str = "") -> list[int]:
    """Cross-pool AllToAll: every rank sends ``size/n`` to every rank over its own NIC
    (no PXN across vendors); intra-server pairs use the scale-up fabric."""
    from icefabric.ccl import nccl

    return nccl.alltoall(wb, comm, size_bytes, after=after, pxn=False, name=name)


ALGORITHMS = {
    ("all_reduce", "hier"): hierarchical_allreduce,
    ("alltoall", "direct"): flat_alltoall,
}
DEFAULT_ALGORITHM = {"all_reduce": "hier", "alltoall": "direct"}
