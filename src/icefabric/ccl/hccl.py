"""Huawei HCCL (Ascend) collective models -> workload.

HCCL is hierarchical (domain-facts §7.1): ``level0`` inside a server (HCCS full mesh; only
``NA``, i.e. the built-in mesh algorithm), ``level1`` between servers over the NPUs' own
RoCE ports, where ``HCCL_ALGO`` picks ``ring`` or ``H-D_R`` (recursive halving-doubling).
An AllReduce runs level0 reduce-scatter (each NPU owns 1/m of the buffer), then level1
AllReduce of that shard among the NPUs with the same local index on every server (one ring
or halving-doubling group per local index, i.e. per RoCE plane), then level0 all-gather.
The Ascend 910B's 8 ports sit in one subnet (domain-facts §7.3), so NPU ``i`` talks to NPU
``i`` of the other servers through port ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import CollectiveCall, WorkloadBuilder


@dataclass(frozen=True, eq=False)
class _Emit:
    """Where one collective's flows go: the workload being built, the communicator and the
    collective's id in the workload."""

    wb: WorkloadBuilder
    comm: Communicator
    coll: int


def _mesh(e: _Emit, bytes_per_pair, after) -> list[int]:
    """level0 full-mesh exchange inside every server: each NPU sends ``bytes_per_pair`` to
    each other local NPU, all at once (HCCS point-to-point links)."""
    wb, comm, coll = e.wb, e.comm, e.coll
    flows = []
    for local in comm.server_ranks:
        for a in local.tolist():
            for b in local.tolist():
                if a != b:
                    f = wb.flow(bytes_per_pair, coll=coll, deps=after,
                                latency_ns=comm.intra_delay_ns(a) + comm.step_overhead_ns)
                    wb.hop(f, int(comm.ranks[a]), int(comm.ranks[b]))
                    flows.append(f)
    return flows


def _planes(comm: Communicator) -> list[list[int]]:
    """Level-1 groups: ranks with the same local index across servers."""
    m = min(len(x) for x in comm.server_ranks)
    return [[int(local[i]) for local in comm.server_ranks] for i in range(m)]


def _level1_ring(e: _Emit, group, shard_bytes, kind, after, i) -> list[int]:
    """Ring AllReduce / AllGather / ReduceScatter of a shard among ``group`` (plane ``i``)."""
    wb, comm, coll = e.wb, e.comm, e.coll
    M = len(group)
    factor = 2 * (M - 1) / M if kind == "all_reduce" else (M - 1) / M
    steps = 2 * (M - 1) if kind == "all_reduce" else M - 1
    f = wb.flow(shard_bytes * factor, coll=coll, deps=after)
    delays = []
    for j in range(M):
        a, b = group[j], group[(j + 1) % M]
        sn, dn = comm.nic(a), comm.nic(b)
        k = wb.connection((comm.job, "hccl-ring", i, a, b), sn, dn, comm.conn_spec)
        wb.hop(f, int(comm.ranks[a]), int(comm.ranks[b]), conn=k)
        delays.append(comm.hop_delay_ns(sn, dn))
    wb.flow_latency[f] = steps * (int(np.mean(delays)) + comm.step_overhead_ns)
    return [f]


def _pair(e: _Emit, a, b, nbytes, after):
    """One RoCE transfer of ``nbytes`` from rank ``a`` to rank ``b`` after ``after``."""
    wb, comm, coll = e.wb, e.comm, e.coll
    sn, dn = comm.nic(a), comm.nic(b)
    k = wb.connection((comm.job, "hccl-p2p", a, b), sn, dn, comm.conn_spec)
    f = wb.flow(nbytes, coll=coll, deps=after,
                latency_ns=comm.hop_delay_ns(sn, dn) + comm.step_overhead_ns)
    wb.hop(f, int(comm.ranks[a]), int(comm.ranks[b]), conn=k)
    return f


def _level1_hd(e: _Emit, group, shard_bytes, kind, after) -> list[int]:
    """Recursive halving-doubling among ``len(group)`` ranks. A non-power-of-two group first
    folds its extra ranks onto partners and unfolds them at the end (the "extra traffic"
    the HCCL docs mention)."""
    M = len(group)
    P = 1 << int(np.floor(np.log2(M)))
    prev = list(after)
    if M > P:  # fold: rank P+j sends its whole shard to rank j
        prev = [_pair(e, group[P + j], group[j], shard_bytes, prev) for j in range(M - P)]
    core = group[:P]
    phases = []
    if kind in ("all_reduce", "reduce_scatter"):
        phases += [("rs", k) for k in range(int(np.log2(P)))]
    if kind in ("all_reduce", "all_gather"):
        phases += [("ag", k) for k in reversed(range(int(np.log2(P))))]
    for _, k in phases:
        dist = P >> (k + 1)
        nbytes = shard_bytes / (2 ** (k + 1))
        step = []
        for j in range(P):
            step.append(_pair(e, core[j], core[j ^ dist], nbytes, prev))
        prev = step
    if M > P:  # unfold: send the result back
        prev = [_pair(e, group[j], group[P + j], shard_bytes, prev) for j in range(M - P)]
    return prev


@dataclass(frozen=True)
class Hierarchical:
    """HCCL AllReduce / AllGather / ReduceScatter (``kind``) with ``level1`` in {ring, hd}:
    a collective of the algorithm table (called as ``(wb, comm, size_bytes, *, after,
    name)``, like every other)."""

    kind: str
    level1: str = "ring"

    def __post_init__(self) -> None:
        if self.kind not in ("all_reduce", "all_gather", "reduce_scatter"):
            raise ValueError(f"HCCL hierarchical algorithm does not implement {self.kind!r}")
        if self.level1 not in ("ring", "hd"):
            raise ValueError(f"unknown HCCL level1 algorithm {self.level1!r}; use ring or hd")

    def __call__(self, wb: WorkloadBuilder, comm: Communicator, size_bytes: int, *,
                 after=(), name: str = "") -> list[int]:
        kind, n = self.kind, comm.nranks
        coll = wb.collective(CollectiveCall(name or f"{comm.job}:{kind}:{size_bytes}",
                                            comm.job, kind, size_bytes, n,
                                            f"hccl-{self.level1}", comm.library))
        e = _Emit(wb, comm, coll)
        m = min(len(x) for x in comm.server_ranks)
        prev = list(after)
        # For AllGather the buffer of each rank is size/n; its server holds m of them.
        shard = size_bytes / m if kind == "all_reduce" else size_bytes / n
        per_pair = size_bytes / m if kind == "all_reduce" else size_bytes / n * comm.n_nodes
        if kind in ("all_reduce", "reduce_scatter") and m > 1:
            # level0 reduce-scatter: each NPU sends its partial of every other NPU's shard.
            prev = _mesh(e, per_pair, prev)
        if comm.n_nodes > 1:
            l1 = []
            for i, group in enumerate(_planes(comm)):
                if self.level1 == "ring":
                    l1 += _level1_ring(e, group, shard * (1 if kind == "all_reduce"
                                       else comm.n_nodes), kind, prev, i)
                else:
                    l1 += _level1_hd(e, group, shard if kind == "all_reduce"
                                     else shard * comm.n_nodes, kind, prev)
            prev = l1
        if kind in ("all_reduce", "all_gather") and m > 1:
            prev = _mesh(e, per_pair, prev)  # level0 all-gather
        return prev


def pairwise_alltoall(wb: WorkloadBuilder, comm: Communicator, size_bytes: int, *, after=(),
                      name: str = "") -> list[int]:
    """HCCL ``pairwise`` AlltoAll: n-1 steps, in step k rank r sends to ``(r+k) mod n``
    (avoids many-to-one incast, domain-facts §7.1)."""
    n = comm.nranks
    coll = wb.collective(CollectiveCall(name or f"{comm.job}:alltoall:{size_bytes}", comm.job,
                                        "alltoall", size_bytes, n, "hccl-pairwise",
                                        comm.library))
    e = _Emit(wb, comm, coll)
    chunk = size_bytes / n
    prev = list(after)
    for k in range(1, n):
        step = []
        for a in range(n):
            b = (a + k) % n
            if comm.rank_server[a] == comm.rank_server[b]:
                f = wb.flow(chunk, coll=coll, deps=prev,
                            latency_ns=comm.intra_delay_ns(a) + comm.step_overhead_ns)
                wb.hop(f, int(comm.ranks[a]), int(comm.ranks[b]))
            else:
                f = _pair(e, a, b, chunk, prev)
            step.append(f)
        prev = step
    return prev


ALGORITHMS = {
    **{(kind, level1): Hierarchical(kind, level1)
       for kind in ("all_reduce", "all_gather", "reduce_scatter") for level1 in ("ring", "hd")},
    ("alltoall", "pairwise"): pairwise_alltoall,
}
DEFAULT_ALGORITHM = {"all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "ring",
                     "alltoall": "pairwise"}
