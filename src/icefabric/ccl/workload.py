"""Workload: the traffic a set of collectives puts on a fabric, as tables.

Three levels, each a table of numpy columns:

* **flows** — rate variables (see :mod:`icefabric.engine.problem`): bytes, dependencies,
  earliest start, completion latency. A pipelined ring channel is one *coupled* flow whose
  hops all move at its rate.
* **hops** — point-to-point segments of a flow (accelerator -> accelerator, optionally
  through a NIC pair). ``hop_weight`` is the fraction of the flow's rate the hop carries
  (1 for every hop of a ring). Intra-server hops have ``src_nic = dst_nic = -1``.
* **qps** — RDMA queue pairs. Every network hop belongs to a *connection* (NCCL: one per
  channel and peer; HCCL: one per rank pair) and a connection has ``k`` QPs that split its
  data evenly (``NCCL_IB_QPS_PER_CONNECTION`` / ``HCCL_RDMA_QPS_PER_CONNECTION``). QPs carry
  their 5-tuple: NIC IPs, UDP destination port 4791 and the UDP source port.
* **shared legs** (:class:`SharedLegs`) — where several flows reach one source NIC over the
  same server paths (NCCL PXN with shared connections: a server's GPUs hand their messages
  to the proxy on the destination's rail), a network hop can start at the NIC and name a
  group of legs instead: each leg carries ``weight`` of the rate of every flow of the
  group's hops from an accelerator to the NIC. Built once per group, not per flow.

Policies decide the fabric path of every QP; :func:`icefabric.policies.base.build_problem`
turns workload + plan into the engine's :class:`~icefabric.engine.problem.SimProblem`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields, replace
from typing import NamedTuple

import numpy as np

from icefabric.csr import indptr_from_lengths
from icefabric.dataplane.roce import default_sports

#: first QP number a NIC hands out before its seeded random offset
QPN_BASE = 0x100


@dataclass
class CollectiveCall:
    """One collective call of one job, as nccl-tests would time it."""

    name: str
    job: str
    kind: str  # nccl-tests name: all_reduce, all_gather, reduce_scatter, alltoall, ...
    size_bytes: int
    nranks: int
    algorithm: str
    library: str
    flows: list[int] = field(default_factory=list)


class ConnSpec(NamedTuple):
    """What the connections one communicator opens share: QPs per connection and job."""

    nqps: int
    job: str


class WorkloadBuilder:
    """Accumulates flows, hops, connections and QPs; ``build()`` freezes them to arrays.

    Connections are keyed by the caller (e.g. ``(job, "ring", channel, src_rank, dst_rank)``)
    so that successive collectives of a job reuse the same QPs, as real communicators do.
    """

    def __init__(self):
        self.flow_size: list[float] = []
        self.flow_deps: list[list[int]] = []
        self.flow_start: list[int] = []
        self.flow_latency: list[int] = []
        self.flow_coll: list[int] = []
        self._hops = _Table((np.int64,) * 4 + (np.float64,))  # flow, src, dst, conn, weight
        self.conn_key: dict[tuple, int] = {}
        self._conns = _Table((np.int64,) * 3)  # source NIC, destination NIC, QPs
        self._key_tables: dict[tuple, _KeyTable] = {}
        self.conn_job: list[str] = []
        self.collectives: list[CollectiveCall] = []
        self._legs: list[SharedLegs] = []
        self._n_groups = 0

    # ---------------------------------------------------------------------------------
    def collective(self, call: CollectiveCall) -> int:
        self.collectives.append(call)
        return len(self.collectives) - 1

    def flow(self, size_bytes: float, *, coll: int, deps=(), start_ns: int = 0,
             latency_ns: int = 0) -> int:
        f = len(self.flow_size)
        self.flow_size.append(float(size_bytes))
        self.flow_deps.append([int(d) for d in deps])
        self.flow_start.append(int(start_ns))
        self.flow_latency.append(int(latency_ns))
        self.flow_coll.append(coll)
        self.collectives[coll].flows.append(f)
        return f

    def flows(self, sizes: np.ndarray, *, coll: int, deps=(), latency_ns: np.ndarray
              ) -> np.ndarray:
        """:meth:`flow` for many flows of one collective with the same dependencies."""
        first, m = len(self.flow_size), len(sizes)
        dep = [int(d) for d in deps]
        self.flow_size += np.asarray(sizes, dtype=np.float64).tolist()
        self.flow_deps += [dep] * m  # one list for all (read only: a list each cost ~1 GB)
        self.flow_start += [0] * m
        self.flow_latency += np.asarray(latency_ns, dtype=np.int64).tolist()
        self.flow_coll += [coll] * m
        ids = np.arange(first, first + m)
        self.collectives[coll].flows += ids.tolist()
        return ids

    def delay(self, duration_ns: int, *, deps=()) -> int:
        """A flow that moves no bytes and completes ``duration_ns`` after its dependencies:
        a compute step (or any wait) inside a dependency DAG. It belongs to no collective
        (``flow_collective`` -1) and crosses no link."""
        f = len(self.flow_size)
        self.flow_size.append(0.0)
        self.flow_deps.append([int(d) for d in deps])
        self.flow_start.append(0)
        self.flow_latency.append(int(duration_ns))
        self.flow_coll.append(-1)
        return f

    def connection(self, key: tuple, src_nic: int, dst_nic: int, spec: ConnSpec) -> int:
        """The connection of ``key``: made (``src_nic`` to ``dst_nic``, ``spec``) the first
        time the key is asked for."""
        c = self.conn_key.get(key)
        if c is None:
            c = self.conn_key[key] = self._conns.count
            self._conns.rows.append((int(src_nic), int(dst_nic), int(spec.nqps)))
            self.conn_job.append(spec.job)
        return c

    def connections(self, keys: list[tuple], src_nic: np.ndarray, dst_nic: np.ndarray,
                    spec: ConnSpec) -> np.ndarray:
        """:meth:`connection` of many keys."""
        out, new = [], []
        get = self.conn_key.get
        n = self._conns.count
        for i, k in enumerate(keys):
            c = get(k)
            if c is None:
                c = self.conn_key[k] = n + len(new)
                new.append(i)
            out.append(c)
        self._add_conns(np.asarray(src_nic, dtype=np.int64)[new],
                        np.asarray(dst_nic, dtype=np.int64)[new], spec)
        return np.array(out, dtype=np.int64)

    def connection_table(self, prefix: tuple, x: np.ndarray, y: np.ndarray,
                         src_nic: np.ndarray, dst_nic: np.ndarray, spec: ConnSpec
                         ) -> np.ndarray:
        """:meth:`connections` of the keys ``prefix + (x[i], y[i])`` (ints in ``[0,
        2**31)``), kept as arrays per prefix: no tuple per key (an 8,192-rank AllToAll
        has 8 M connections). Keys made here are found only here; new connections are
        numbered in the order their keys first appear, as :meth:`connections` does."""
        table = self._key_tables.setdefault(prefix, _KeyTable())
        code = (np.asarray(x, dtype=np.int64) << 32) | np.asarray(y, dtype=np.int64)
        ids = table.find(code)
        miss = np.flatnonzero(ids < 0)
        if len(miss):
            want = code[miss]
            if np.all(want[1:] > want[:-1]):  # distinct and in order (an AllToAll's): no sort
                uniq, first, inv = want, np.arange(len(want)), np.arange(len(want))
            else:
                uniq, first, inv = np.unique(want, return_index=True, return_inverse=True)
            rank = np.empty(len(uniq), dtype=np.int64)
            rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
            new = self._conns.count + rank
            ids[miss] = new[inv.reshape(-1)]
            table.add(uniq, new)
            at = miss[np.sort(first)]
            self._add_conns(np.asarray(src_nic, dtype=np.int64)[at],
                            np.asarray(dst_nic, dtype=np.int64)[at], spec)
        return ids

    def _add_conns(self, src_nic: np.ndarray, dst_nic: np.ndarray, spec: ConnSpec) -> None:
        n = len(src_nic)
        self._conns.add_block(src_nic, dst_nic, np.full(n, int(spec.nqps), dtype=np.int64))
        self.conn_job += [spec.job] * n

    def hops(self, flows: np.ndarray, src: np.ndarray, dst: np.ndarray, *,
             conn: np.ndarray, weight: np.ndarray | float = 1.0) -> np.ndarray:
        """:meth:`hop` of many hops; connection -1 for intra-server. Returns their ids."""
        n = len(flows)
        first = self._hops.count
        i64 = [np.array(np.broadcast_to(np.asarray(v, dtype=np.int64), (n,)))
               for v in (flows, src, dst, conn)]
        self._hops.add_block(*i64, np.array(np.broadcast_to(
            np.asarray(weight, dtype=np.float64), (n,))))
        return np.arange(first, first + n)

    def shared_legs(self, legs: SharedLegs) -> None:
        """Add ``legs`` (group ids numbered from 0 within them; hops from :meth:`hops`)."""
        self._legs.append(legs.shifted(self._n_groups))
        self._n_groups += legs.n_groups

    def hop(self, flow: int, src: int, dst: int, *, conn: int = -1,
            weight: float = 1.0) -> None:
        """A hop of ``flow`` from accelerator (or NIC) ``src`` to ``dst`` carrying ``weight``
        of its rate: over connection ``conn`` (:meth:`connection`), whose NICs are the
        hop's, or inside a server (-1)."""
        self._hops.rows.append((int(flow), int(src), int(dst), int(conn), float(weight)))

    def build(self, *, node_ip: np.ndarray, qpn_seed: int = 0, qpn_base: int = QPN_BASE
              ) -> Workload:
        conn_src, conn_dst, conn_nqps = self._conns.columns()
        qp_conn = np.repeat(np.arange(len(conn_nqps)), conn_nqps)
        src_nic = conn_src[qp_conn]
        dst_nic = conn_dst[qp_conn]
        lqpn, rqpn = _allocate_qpns(src_nic, dst_nic, qpn_seed, qpn_base)
        i64 = np.int64
        hop_flow, hop_src, hop_dst, hop_conn, hop_weight = self._hops.columns()
        return Workload(
            flow_size_bytes=np.array(self.flow_size, dtype=np.float64),
            flow_deps=self.flow_deps,
            flow_start_ns=np.array(self.flow_start, dtype=np.int64),
            flow_latency_ns=np.array(self.flow_latency, dtype=np.int64),
            flow_collective=np.array(self.flow_coll, dtype=i64),
            hop_flow=hop_flow, hop_src=hop_src, hop_dst=hop_dst,
            hop_src_nic=_of_conn(conn_src, hop_conn), hop_dst_nic=_of_conn(conn_dst, hop_conn),
            hop_conn=hop_conn, hop_weight=hop_weight,
            conn_src_nic=conn_src,
            conn_dst_nic=conn_dst,
            conn_job=list(self.conn_job),
            qp_conn=qp_conn,
            qp_src_nic=src_nic,
            qp_dst_nic=dst_nic,
            qp_src_ip=node_ip[src_nic].astype(np.uint32) if len(src_nic) else
            np.zeros(0, np.uint32),
            qp_dst_ip=node_ip[dst_nic].astype(np.uint32) if len(dst_nic) else
            np.zeros(0, np.uint32),
            qp_lqpn=lqpn,
            qp_rqpn=rqpn,
            qp_sport=np.full(len(lqpn), -1, dtype=np.int64),
            collectives=self.collectives,
            legs=SharedLegs.concat(self._legs),
        )


def _of_conn(column: np.ndarray, conn: np.ndarray) -> np.ndarray:
    """``column`` of every connection of ``conn``, -1 where there is none (intra-server)."""
    out = np.full(len(conn), -1, dtype=np.int64)
    net = conn >= 0
    out[net] = column[conn[net]]
    return out


class _Table:
    """Columns of the given dtypes (the hops', the connections'): blocks of arrays as bulk
    calls gave them, and the rows added one at a time since the last block (Python lists
    of a million hops' ints cost several times the arrays' memory)."""

    def __init__(self, dtypes: tuple):
        self.dtypes = dtypes
        self.blocks: list[tuple[np.ndarray, ...]] = []
        self.rows: list[tuple] = []
        self.in_blocks = 0  # rows in ``blocks``

    @property
    def count(self) -> int:
        return self.in_blocks + len(self.rows)

    def _flush(self) -> None:
        if self.rows:
            cols = list(zip(*self.rows))
            self.blocks.append(tuple(np.array(c, dtype=t) for c, t in zip(cols, self.dtypes)))
            self.in_blocks += len(self.rows)
            self.rows = []

    def add_block(self, *cols: np.ndarray) -> None:
        self._flush()
        self.blocks.append(cols)
        self.in_blocks += len(cols[0])

    def columns(self) -> tuple[np.ndarray, ...]:
        """Every column over all rows, in the order they were added."""
        self._flush()
        if not self.blocks:
            return tuple(np.zeros(0, dtype=t) for t in self.dtypes)
        return tuple(np.concatenate(c).astype(t, copy=False)
                     for c, t in zip(zip(*self.blocks), self.dtypes))


class _KeyTable:
    """Connection keys of one prefix as sorted codes and their connection ids."""

    def __init__(self):
        self.code = np.zeros(0, dtype=np.int64)
        self.ids = np.zeros(0, dtype=np.int64)

    def find(self, code: np.ndarray) -> np.ndarray:
        """The connection of every code (-1: none yet)."""
        out = np.full(len(code), -1, dtype=np.int64)
        if len(self.code):
            pos = np.minimum(np.searchsorted(self.code, code), len(self.code) - 1)
            hit = self.code[pos] == code
            out[hit] = self.ids[pos[hit]]
        return out

    def add(self, code: np.ndarray, ids: np.ndarray) -> None:
        """Add sorted distinct ``code`` (none of them present yet)."""
        merge = len(self.code) and len(code) and code[0] < self.code[-1]
        code, ids = np.concatenate([self.code, code]), np.concatenate([self.ids, ids])
        if merge:  # (past the last code they stay in order appended)
            order = np.argsort(code, kind="stable")
            code, ids = code[order], ids[order]
        self.code, self.ids = code, ids


def _allocate_qpns(src_nic, dst_nic, seed, base):
    """Deterministic QP numbers: each NIC hands out increasing QPNs from a seeded random
    start (real NICs allocate QPNs sequentially from a per-device counter; the start depends
    on everything the host did before — we draw it from ``seed``)."""
    rng = np.random.default_rng(seed)
    nics = np.union1d(src_nic, dst_nic)
    # one start per NIC, in NIC order: the same numbers as one draw per NIC (tested), in
    # one call (a draw per NIC was a second of a 1,024-GPU run's 100 ECMP draws)
    start = base + rng.integers(0, 1 << 16, size=len(nics), dtype=np.int64)
    # QP i takes the next number of its source NIC, then of its destination NIC: number
    # the 2q requests in that order per NIC (a stable sort keeps it).
    ev = np.stack([src_nic, dst_nic], axis=1).ravel().astype(np.int64)
    if len(ev) == 0:
        return ev[0::2], ev[1::2]
    table = np.zeros(int(nics[-1]) + 1, dtype=np.int64)
    table[nics] = np.arange(len(nics))
    nic = table[ev]  # every request's NIC among ``nics``
    # a stable sort by NIC (a radix sort of 16-bit keys where the NICs fit: 8 M QPs' 16 M
    # requests took seconds as int64), then each request's place among its NIC's
    order = np.argsort(nic.astype(np.uint16) if len(nics) <= 1 << 16 else nic, kind="stable")
    count = np.bincount(nic, minlength=len(nics))
    nth = np.empty(len(ev), dtype=np.int64)
    nth[order] = np.arange(len(ev)) - (np.cumsum(count) - count)[nic[order]]
    qpn = start[nic] + nth
    return qpn[0::2] & 0xFFFFFF, qpn[1::2] & 0xFFFFFF


@dataclass(frozen=True)
class SharedLegs:
    """Network hops whose data reaches their source NIC over legs shared by a group.

    Hop ``hop[i]`` (which starts at its source NIC: no server path of its own) belongs to
    group ``group[i]``; leg ``j`` of group ``leg_group[j]`` carries ``leg_weight[j]`` of the
    rate of the flow of every hop of the group from accelerator ``leg_src[j]`` to NIC
    ``leg_nic[j]`` (the source NIC of those hops). Per flow that is what a hop per leg from
    ``leg_src`` at ``leg_weight``, all sharing the network path, would carry."""

    hop: np.ndarray
    group: np.ndarray
    leg_group: np.ndarray
    leg_src: np.ndarray
    leg_nic: np.ndarray
    leg_weight: np.ndarray

    @classmethod
    def empty(cls) -> SharedLegs:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z, z, np.zeros(0))

    @property
    def n_groups(self) -> int:
        return int(max(self.group.max(initial=-1), self.leg_group.max(initial=-1))) + 1

    def shifted(self, by: int) -> SharedLegs:
        return replace(self, group=self.group + by, leg_group=self.leg_group + by)

    @classmethod
    def concat(cls, parts: list[SharedLegs]) -> SharedLegs:
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts])
                     for f in fields(cls)))

    def hop_group(self, n_hops: int) -> np.ndarray:
        """The group of every hop (-1: its own server path)."""
        out = np.full(n_hops, -1, dtype=np.int64)
        out[self.hop] = self.group
        return out

    def group_legs(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``(indptr, legs)`` of the legs of every group."""
        order = np.argsort(self.leg_group, kind="stable")
        return indptr_from_lengths(np.bincount(self.leg_group, minlength=self.n_groups)), \
            order


@dataclass
class Workload:
    """Frozen tables of one workload (see module docstring)."""

    flow_size_bytes: np.ndarray
    flow_deps: list[list[int]]
    flow_start_ns: np.ndarray
    flow_latency_ns: np.ndarray
    flow_collective: np.ndarray
    hop_flow: np.ndarray
    hop_src: np.ndarray
    hop_dst: np.ndarray
    hop_src_nic: np.ndarray
    hop_dst_nic: np.ndarray
    hop_weight: np.ndarray
    hop_conn: np.ndarray
    conn_src_nic: np.ndarray
    conn_dst_nic: np.ndarray
    conn_job: list[str]
    qp_conn: np.ndarray
    qp_src_nic: np.ndarray
    qp_dst_nic: np.ndarray
    qp_src_ip: np.ndarray
    qp_dst_ip: np.ndarray
    qp_lqpn: np.ndarray
    qp_rqpn: np.ndarray
    qp_sport: np.ndarray  # source port a host reported (-1: the kernel derives it)
    collectives: list[CollectiveCall]
    legs: SharedLegs = field(default_factory=SharedLegs.empty)

    @property
    def n_flows(self) -> int:
        return len(self.flow_size_bytes)

    @property
    def n_qps(self) -> int:
        return len(self.qp_conn)

    @property
    def n_conns(self) -> int:
        return len(self.conn_src_nic)

    def sports(self) -> np.ndarray:
        """The source port every QP uses unless a policy sets one: the one its host
        reported, else the kernel's, derived from the QP numbers."""
        derived = default_sports(self.qp_lqpn, self.qp_rqpn).astype(np.int64)
        return np.where(self.qp_sport >= 0, self.qp_sport, derived)

    def with_qpns(self, seed: int) -> Workload:
        """This workload with its QP numbers drawn anew from ``seed``, as a new
        communicator would get them (source ports a host reported are kept)."""
        lq, rq = _allocate_qpns(self.qp_src_nic, self.qp_dst_nic, seed, QPN_BASE)
        return replace(self, qp_lqpn=lq, qp_rqpn=rq)

    def conn_qps(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (indptr, qp ids) of the QPs of every connection (QPs are contiguous)."""
        counts = np.bincount(self.qp_conn, minlength=self.n_conns)
        indptr = np.zeros(self.n_conns + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return indptr, np.arange(self.n_qps, dtype=np.int64)

    def digest(self, *, numbers: bool = True) -> str:
        """A digest of every column; with ``numbers=False`` of all but the QP numbers and
        the source ports hosts reported (the workload's shape: what its QPs are, not what
        their NICs numbered them)."""
        h = hashlib.sha256()
        for f in fields(self):
            if not numbers and f.name in ("qp_lqpn", "qp_rqpn", "qp_sport"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, SharedLegs):  # (none: the digest of a workload without legs)
                if len(v.hop) or len(v.leg_group):
                    for g in fields(v):
                        h.update(getattr(v, g.name).tobytes())
                continue
            h.update(f.name.encode())
            if isinstance(v, np.ndarray):
                h.update(f"{v.dtype.str}{v.shape}".encode())
                h.update(np.ascontiguousarray(v).tobytes())
            else:
                h.update(repr(v).encode())
        return h.hexdigest()

    def summary(self) -> dict:
        return {"collectives": len(self.collectives), "flows": self.n_flows,
                "hops": len(self.hop_flow), "connections": self.n_conns, "qps": self.n_qps}
