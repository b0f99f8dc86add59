"""Demand model: which QPs are active at the same time, how fast they want to go, and how
many bytes they move.

A workload (:mod:`icefabric.ccl.workload`) is a DAG of flows; every network hop of a flow
rides a connection, and a connection's QPs split its data evenly. ICE plans paths per
*communication phase*: within a phase the QPs run concurrently and must not share a link
beyond its capacity; successive phases of one job never overlap (a dependency separates
them), while phases of different jobs may overlap arbitrarily (jobs are not synchronised).

Phases are the dependency levels of a job's flows (level = longest chain of dependencies
from a root). A pipelined ring channel is one coupled flow, so all its hops share a level;
an AllToAll's point-to-point flows share a level; a pairwise/halving-doubling step is one
level. The QP's *rate* in a phase is its share of the slower of its two NICs:

``rate = share * min(nic_bps[src] / T_src, nic_bps[dst] / T_dst)``

where ``share`` is the QP's fraction of its hop (``hop_weight / qps_per_connection``) and
``T_x`` is the summed share of every QP of that phase on NIC ``x`` (transmit side for the
source, receive side for the destination). With 400G and 200G NICs in one job the rate of
a cross-pool QP is limited by the 200G side, which is what the planner must weigh.

The link load that matters for planning is then, per link,
``sum over jobs of max over that job's phases of the summed QP rates`` — a job's
phases are sequential, other jobs may overlap with any of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.csr import gather, unique_inverse
from icefabric.topology.model import LINK_HOST, NIC, Fabric

__all__ = ["Demand", "demand_from_pairs", "nic_bps", "workload_demand"]


@dataclass(frozen=True, eq=False)
class Demand:
    """Per-QP demand, with a sparse QP x phase rate table.

    Attributes
    ----------
    src_nic, dst_nic : ndarray[int64] (Q,) — NIC node ids of each QP.
    src_leaf, dst_leaf : ndarray[int64] (Q,) — leaf switches of those NICs.
    job : ndarray[int64] (Q,) — job index of each QP (into ``job_names``).
    conn : ndarray[int64] (Q,) — workload connection of each QP (-1 if synthetic).
    size_bytes : ndarray[float64] (Q,) — bytes the QP moves over the whole workload.
    src_nic_bps, dst_nic_bps : ndarray[float64] (Q,) — line rates of the two NICs.
    ent_qp, ent_phase : ndarray[int64] (E,) — QP and phase of every (QP, phase) entry,
        sorted by QP.
    ent_rate_bps : ndarray[float64] (E,) — rate the QP wants in that phase.
    phase_job : ndarray[int64] (P,) — job of every phase.
    job_names, phase_names : tuple of str
    """

    src_nic: np.ndarray
    dst_nic: np.ndarray
    src_leaf: np.ndarray
    dst_leaf: np.ndarray
    job: np.ndarray
    conn: np.ndarray
    size_bytes: np.ndarray
    src_nic_bps: np.ndarray
    dst_nic_bps: np.ndarray
    ent_qp: np.ndarray
    ent_phase: np.ndarray
    ent_rate_bps: np.ndarray
    phase_job: np.ndarray
    job_names: tuple[str, ...]
    phase_names: tuple[str, ...]

    @property
    def n_qps(self) -> int:
        return len(self.src_nic)

    @property
    def n_phases(self) -> int:
        return len(self.phase_job)

    def ent_ptr(self) -> np.ndarray:
        """CSR pointer over QPs into the entry arrays."""
        ptr = np.zeros(self.n_qps + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.ent_qp, minlength=self.n_qps), out=ptr[1:])
        return ptr

    def entry_spans(self, qps: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        """First entry and entry count of each QP of ``qps``, or of the one QP ``qps``
        (entries are sorted by QP: two binary searches, no QP-sized table)."""
        lo = np.searchsorted(self.ent_qp, qps)
        return lo, np.searchsorted(self.ent_qp, qps, side="right") - lo

    def entries(self, qps: np.ndarray) -> np.ndarray:
        """Entry indices of QPs ``qps``, in entry order."""
        return gather(*self.entry_spans(np.sort(np.asarray(qps, dtype=np.int64))))

    def peak_rates(self, qps: np.ndarray) -> np.ndarray:
        """:meth:`peak_rate_bps` of QPs ``qps`` only, in their order (no QP-sized table)."""
        lo, n = self.entry_spans(np.asarray(qps, dtype=np.int64))
        out = np.zeros(len(lo))
        has = np.flatnonzero(n > 0)
        if len(has):
            lo, n = lo[has], n[has]
            out[has] = np.maximum(np.maximum.reduceat(
                self.ent_rate_bps[gather(lo, n)], np.cumsum(n) - n), 0.0)
        return out

    def peak_rate_bps(self, qps: np.ndarray | None = None) -> np.ndarray:
        """Largest rate of each QP over its phases (0 for a QP in no phase); with ``qps``,
        of those QPs only (the others 0: a re-plan of a few QPs of a million)."""
        out = np.zeros(self.n_qps)
        if qps is not None:
            qps = np.asarray(qps, dtype=np.int64)
            out[qps] = self.peak_rates(qps)
            return out
        if len(self.ent_qp) == 0:
            return out
        # entries sorted by QP (see the class): one reduction per QP's run, no ufunc.at
        first = np.flatnonzero(np.r_[True, self.ent_qp[1:] != self.ent_qp[:-1]])
        out[self.ent_qp[first]] = np.maximum(
            np.maximum.reduceat(self.ent_rate_bps, first), 0.0)
        return out

    def is_uniform(self, rtol: float = 1e-9) -> bool:
        """True when every entry asks for the same rate (edge colouring is then exact)."""
        r = self.ent_rate_bps
        return len(r) == 0 or float(np.ptp(r)) <= rtol * float(np.max(r))

    def inter_leaf(self) -> np.ndarray:
        """Mask of QPs that cross the fabric (source and destination on different leaves)."""
        return self.src_leaf != self.dst_leaf

    def subset(self, qps: np.ndarray) -> Demand:
        """The demand of the given QPs only (renumbered 0..len(qps)-1, phases kept)."""
        qps = np.asarray(qps, dtype=np.int64)
        new = np.full(self.n_qps, -1, dtype=np.int64)
        new[qps] = np.arange(len(qps))
        keep = new[self.ent_qp] >= 0
        eq = new[self.ent_qp[keep]]
        order = np.argsort(eq, kind="stable")
        return Demand(self.src_nic[qps], self.dst_nic[qps], self.src_leaf[qps],
                      self.dst_leaf[qps], self.job[qps], self.conn[qps], self.size_bytes[qps],
                      self.src_nic_bps[qps], self.dst_nic_bps[qps], eq[order],
                      self.ent_phase[keep][order], self.ent_rate_bps[keep][order],
                      self.phase_job, self.job_names, self.phase_names)

    def concat(self, other: Demand) -> Demand:
        """This demand followed by ``other`` (QPs of ``other`` numbered after ours; jobs
        and phases matched by name, new ones appended)."""
        jobs = list(self.job_names)
        jmap = np.array([_index(jobs, n) for n in other.job_names], dtype=np.int64)
        names = list(self.phase_names)
        pjob = list(self.phase_job.tolist())
        pmap = []
        for p, n in enumerate(other.phase_names):
            if n in names:
                pmap.append(names.index(n))
            else:
                names.append(n)
                pjob.append(int(jmap[other.phase_job[p]]))
                pmap.append(len(names) - 1)
        pmap_a = np.asarray(pmap, dtype=np.int64)
        cat = np.concatenate
        return Demand(cat([self.src_nic, other.src_nic]), cat([self.dst_nic, other.dst_nic]),
                      cat([self.src_leaf, other.src_leaf]), cat([self.dst_leaf, other.dst_leaf]),
                      cat([self.job, jmap[other.job]]), cat([self.conn, other.conn]),
                      cat([self.size_bytes, other.size_bytes]),
                      cat([self.src_nic_bps, other.src_nic_bps]),
                      cat([self.dst_nic_bps, other.dst_nic_bps]),
                      cat([self.ent_qp, other.ent_qp + self.n_qps]),
                      cat([self.ent_phase, pmap_a[other.ent_phase]]),
                      cat([self.ent_rate_bps, other.ent_rate_bps]),
                      np.asarray(pjob, dtype=np.int64), tuple(jobs), tuple(names))


def _index(lst: list, x) -> int:
    if x not in lst:
        lst.append(x)
    return lst.index(x)


def _first_seen_ids(names: list[str]) -> tuple[list[str], np.ndarray]:
    """Distinct names in order of first appearance, and each entry's index among them
    (``_index`` over a whole list, without its scan per entry)."""
    ids = {n: i for i, n in enumerate(dict.fromkeys(names))}
    if len(ids) == 1:  # one job: no per-entry lookups
        return list(ids), np.zeros(len(names), dtype=np.int64)
    return list(ids), np.fromiter(map(ids.__getitem__, names), dtype=np.int64,
                                  count=len(names))


def nic_bps(fabric: Fabric) -> np.ndarray:
    """Line rate of every NIC node (its host link's capacity; 0 for other nodes)."""
    out = np.zeros(fabric.n_nodes)
    up = (fabric.link_kind == LINK_HOST) & (fabric.node_kind[fabric.link_src] == NIC)
    out[fabric.link_src[up]] = fabric.link_capacity_bps[up]
    return out


def flow_levels(workload: Workload) -> np.ndarray:
    """Dependency level of every flow (0 for roots; 1 + the deepest dependency).

    Flows only depend on earlier flows (the builder appends them in order), so one pass
    in index order suffices.
    """
    lev = np.zeros(workload.n_flows, dtype=np.int64)
    for f, deps in enumerate(workload.flow_deps):
        if deps:
            lev[f] = 1 + max(int(lev[d]) for d in deps)
    return lev


def workload_demand(fabric: Fabric, workload: Workload) -> Demand:
    """The demand of every QP of ``workload`` on ``fabric`` (see module docstring).

    Parameters
    ----------
    fabric : Fabric
    workload : Workload

    Returns
    -------
    Demand
        One entry per (QP, phase) in which the QP carries data; phases are
        ``"<job>:L<level>"``.
    """
    W = workload
    f_ = fabric
    lev = flow_levels(W)
    jobs, conn_job = _first_seen_ids(W.conn_job)
    qp, e_share, e_flow, e_conn = _hop_entries(W)
    e_job = conn_job[e_conn]
    del e_conn
    # Phases: (job, level).
    nlev = int(lev.max(initial=0)) + 1
    ukeys, e_phase = unique_inverse(e_job * nlev + lev[e_flow], len(jobs) * nlev)
    phase_job = (ukeys // nlev).astype(np.int64)
    phase_names = tuple(f"{jobs[j]}:L{int(key % nlev)}"
                        for j, key in zip(phase_job, ukeys, strict=True))
    # Bytes per QP over the whole workload.
    size = np.bincount(qp, weights=W.flow_size_bytes[e_flow] * e_share, minlength=W.n_qps)
    del e_flow
    # NIC share per phase: T[phase, nic], tx at source, rx at destination.
    bps = nic_bps(f_)
    sn, dn = W.qp_src_nic.astype(np.int64), W.qp_dst_nic.astype(np.int64)
    P = len(ukeys)
    rate = np.minimum(_nic_share(bps, sn[qp], e_phase, e_share, P),
                      _nic_share(bps, dn[qp], e_phase, e_share, P))
    rate *= e_share
    del e_share
    qp_job = np.zeros(W.n_qps, dtype=np.int64)
    qp_job[qp] = e_job
    del e_job
    # Merge duplicate (QP, phase) entries (a QP used twice in one level): rates add.
    ucode, inv = unique_inverse(qp * P + e_phase, W.n_qps * P)
    del qp, e_phase
    urate = np.bincount(inv, weights=rate, minlength=len(ucode))
    del inv, rate
    # A QP cannot exceed its NICs' line rate.
    uq, up = ucode // P, ucode % P
    urate = np.minimum(urate, np.minimum(bps[sn[uq]], bps[dn[uq]]))
    return Demand(src_nic=sn, dst_nic=dn, src_leaf=f_.nic_leaf[sn], dst_leaf=f_.nic_leaf[dn],
                  job=qp_job, conn=W.qp_conn.astype(np.int64), size_bytes=size,
                  src_nic_bps=bps[sn], dst_nic_bps=bps[dn], ent_qp=uq.astype(np.int64),
                  ent_phase=up.astype(np.int64), ent_rate_bps=urate, phase_job=phase_job,
                  job_names=tuple(jobs), phase_names=phase_names)


def _hop_entries(W: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """QP, share, flow and connection of every (network hop, QP) entry: a hop rides its
    connection's ``k`` QPs, each with ``1 / k`` of the hop's weight. Where every
    connection has one QP (NCCL's rings at scale) there is nothing to expand: at 1 M QPs
    the expansion's temporaries are ~100 MB of fresh pages a first plan pays for."""
    conn_ptr, _ = W.conn_qps()
    net = np.flatnonzero(W.hop_conn >= 0)
    c = W.hop_conn[net].astype(np.int64, copy=False)
    k = np.diff(conn_ptr)[c]
    share = W.hop_weight[net] / k
    flow = W.hop_flow[net].astype(np.int64, copy=False)
    if np.all(k == 1):
        return conn_ptr[c], share, flow, c
    rep = np.repeat(np.arange(len(net)), k)
    return gather(conn_ptr[c], k), share[rep], flow[rep], c[rep]


def _nic_share(bps: np.ndarray, nic: np.ndarray, phase: np.ndarray, share: np.ndarray,
               P: int) -> np.ndarray:
    """Per entry: its NIC's line rate over ``T``, the summed share of every entry of that
    phase on that NIC (``nic``: each entry's source NIC for the transmit side, destination
    NIC for the receive side)."""
    at = phase * len(bps)
    at += nic
    T = np.bincount(at, weights=share, minlength=P * len(bps))
    return bps[nic] / T[at]


def demand_from_pairs(fabric: Fabric, src_nic, dst_nic, *, rate_bps=None, phase=None,
                      job=None, size_bytes=None) -> Demand:
    """A demand from explicit QPs (tests, benchmarks, the controller's API).

    Parameters
    ----------
    src_nic, dst_nic : array of int (Q,) — NIC node ids.
    rate_bps : float or array (Q,), optional — default: the slower NIC's line rate.
    phase : array of int (Q,), optional — phase per QP (default: one phase per job).
    job : array of int (Q,), optional — job per QP (default: all job 0).
    size_bytes : float or array, optional — default 0.

    Examples
    --------
    >>> from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
    >>> from icefabric.topology.catalog import server_profile
    >>> fab = leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h")],
    ...                  LeafSpineSpec(servers_per_leaf=1, n_spines=2))
    >>> nics = [s.nics[0] for s in fab.servers]
    >>> d = demand_from_pairs(fab, [nics[0]], [nics[1]])
    >>> d.n_qps, float(d.ent_rate_bps[0]) / 1e9
    (1, 400.0)
    """
    sn = np.asarray(src_nic, dtype=np.int64).ravel()
    dn = np.asarray(dst_nic, dtype=np.int64).ravel()
    q = len(sn)
    bps = nic_bps(fabric)
    rate = (np.minimum(bps[sn], bps[dn]) if rate_bps is None
            else np.broadcast_to(np.asarray(rate_bps, dtype=np.float64), (q,)).copy())
    jb = np.zeros(q, np.int64) if job is None else np.asarray(job, dtype=np.int64).ravel()
    if phase is None:
        ph = jb.copy()
    else:
        ph = np.asarray(phase, dtype=np.int64).ravel()
    uph, ent_phase = np.unique(jb * (int(ph.max(initial=0)) + 1) + ph, return_inverse=True)
    pjob = uph // (int(ph.max(initial=0)) + 1)
    njobs = int(jb.max(initial=-1)) + 1
    size = np.zeros(q) if size_bytes is None else np.broadcast_to(
        np.asarray(size_bytes, dtype=np.float64), (q,)).copy()
    return Demand(sn, dn, fabric.nic_leaf[sn], fabric.nic_leaf[dn], jb, np.full(q, -1),
                  size, bps[sn], bps[dn], np.arange(q, dtype=np.int64),
                  ent_phase.astype(np.int64), rate, pjob.astype(np.int64),
                  tuple(f"job{j}" for j in range(njobs)),
                  tuple(f"job{j}:P{int(u)}" for j, u in zip(pjob, uph, strict=True)))
