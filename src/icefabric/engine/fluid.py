"""Fluid engine: egress queues, RED/ECN, DCQCN and PFC over a :class:`SimProblem`.

Model
-----
Time advances in steps. Everything moves in **wire bytes** (payload × ``wire_overhead``):
link capacities, queues and PFC/ECN thresholds are wire quantities, as on hardware.

* **Sources.** A route is fed by its sender NIC: its first link that is not
  server-internal (NVLink/PCIe hops before it are pass-through). Each route asks for
  ``min(line rate, CC rate limit, weight × pacer cap)``; the NIC shares its capacity
  max-min among its active QPs (round-robin NIC scheduler, as in HPCC ns-3, or htsim's
  per-host fair queue). A flow's rate is the minimum over its routes of ``alloc / weight``
  (a coupled, pipelined flow runs at its slowest hop) and every route injects
  ``weight × rate``. ACKs of delivered packets (``ack_bytes`` each) take their share of the
  reverse links (a NIC sends ACKs ahead of data).
* **Queues.** Every (route, hop ≥ 1) pair holds content ``q`` in the egress queue of that
  hop's link. A link serves ``min(C · dt, Q + A · dt)`` bytes per step (``Q`` content,
  ``A`` arrivals), FIFO: the present content leaves first, in proportion to each entry's
  share of it, then the step's arrivals in proportion to theirs. Content whose source has
  stopped is spread through the FIFO, so it drains linearly at its last departure rate.
  Links are swept in topological order of the route graph, so a departure reaches the next
  hop within the same step (propagation is added as ``flow_latency_ns`` instead).
* **PFC** (802.1Qbb; thresholds :mod:`icefabric.dataplane.pfc`). Switch buffer use is
  charged to the ingress port (the link a packet arrived on). When a port reaches XOFF the
  upstream transmitter is paused. In the fluid limit the on/off pause train is replaced by
  its time average: the paused transmitter is throttled to the rate that holds the port at
  its threshold (``outflow + (threshold − use)/τ``), released below XON. Throttling a
  switch port makes its own queue grow, which pauses *its* upstream ports in turn, so
  pauses spread hop by hop and stall innocent flows that share a paused transmitter.
  Pause time is the throttled fraction of time; pause episodes are estimated from the
  hysteresis gap (one XOFF→XON→XOFF cycle per gap drained and refilled).
* **ECN/DCQCN.** Switch egress queues mark with RED on the instantaneous queue
  (:mod:`icefabric.dataplane.ecn`). Marked bytes of each route, divided by the packet
  size, reach the sender one round trip later plus the queueing delay of the reverse
  path (CNPs ride ACKs, which share the data FIFO); the QP sees a CNP in a step with
  probability ``1 − exp(−marked packets)`` (drawn from a seeded generator, so a run is
  reproducible), and the DCQCN kernel (:mod:`icefabric.dataplane.dcqcn`) updates its rate.
* **Completion.** A flow finishes when every route delivered its bytes, plus
  ``flow_latency_ns`` (the ACK of the last byte, as ``SimProblem`` defines) plus the
  ACK's queueing delay on the reverse path; dependants start then.
* **Failures.** Links go down at ``t_ns``; rerouted routes resend what they still had in
  the network (go-back-N).

Stepping is adaptive: ``dt_ns`` while queues move, marks are in flight or rate cuts are
pending. When departures are unchanged, every queue evolves linearly, so a step runs to the
next event (flow start/end, DCQCN increase timer, failure, sample) or until a queue
empties or reaches a PFC threshold or Kmin — at most ``dt_quiet_max_ns``
(``dt_pfc_max_ns`` while a port is paused). An uncontended collective costs one step per
flow event.

References
----------
.. [1] Y. Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015.
.. [2] IEEE 802.1Qbb-2011, Priority-based Flow Control.
.. [3] Y. Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019 (its ns-3
   code is the DCQCN/PFC reference of the validation set).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from icefabric.dataplane.cc import get_cc
from icefabric.dataplane.dcqcn import DcqcnParams
from icefabric.dataplane.ecn import RedParams, red_mark_probability
from icefabric.dataplane.endside import EV_FALLBACK, EndSideState, endside_step
from icefabric.dataplane.pfc import PfcParams
from icefabric.engine.problem import LINK_INTRA, EngineError, SimProblem
from icefabric.engine.registry import register_engine
from icefabric.engine.result import CollectiveResult, SimResult

_BYTES_PER_NS = 8e9  # bits/s -> bytes/ns
_TINY = 1e-12


@dataclass(frozen=True)
class FluidConfig:
    """Options of the fluid engine (all keyword arguments of :func:`run`).

    Parameters
    ----------
    cc : {"none", "dcqcn"} — sender congestion control; ``none`` sends at line rate (or
        the pacer cap) and relies on PFC alone.
    dcqcn : DcqcnParams or profile name — reaction-point parameters.
    red : RedParams, dict or None — ECN marking; a ``RedParams`` applies to every switch
        egress; a dict ``{"kmin_bytes_per_gbps", "kmax_bytes_per_gbps", "pmax"}`` scales
        with the port speed (HPCC ns-3). Default: HPCC ns-3 per-Gb/s values.
    pfc : PfcParams or {"dynamic", "static", "off"}.
    wire_overhead : float — wire bytes per payload byte (headers); 4132/4096 in ns-3.
    packet_bytes : float — payload per packet (turns marked bytes into CNP counts).
    ack_bytes : float — wire bytes of the ACK each data packet returns (60 in HPCC ns-3, 64
        in htsim; 0 ignores ACK load). ACKs flow back over the reverse links at the
        delivery rate and take that share of their capacity (a NIC sends ACKs ahead of
        data), which is what slows both directions of a ring by ~1.5 %.
    ack_queueing : bool — ACKs (and the CNPs they carry) share the switches' data FIFO, so
        a flow completes, and DCQCN feedback arrives, only after the ACK crossed the
        reverse path's queues (HPCC ns-3 and htsim both queue ACKs with data).
    dt_ns : float — step while queues or DCQCN feedback are active (2 µs: half the
        4 µs DCQCN decrease period; α updates inside a step are applied in closed form).
    dt_quiet_max_ns : float — longest step when nothing changes.
    pfc_tau_ns : float — relaxation time of the fluid PFC throttle.
    dt_pfc_max_ns : float — longest step while some port is paused.
    coalesce_ns : float — flows due to start within this much of now start now (merges
        near-simultaneous ring steps into one event; error ≤ this per step).
    quiet_tol : float — a step counts as steady when no queue entry's arrival and departure
        rates differ by more than this fraction of the fastest link.
    seed : int — seeds the CNP draws.
    record_links, record_flows : names whose queue / rate are sampled every
        ``sample_interval_ns`` into ``SimResult.timeseries``.
    """

    cc: str = "none"
    dcqcn: DcqcnParams | str = "hpcc_ns3_100g"
    red: RedParams | dict | None = None
    pfc: PfcParams | str = "dynamic"
    wire_overhead: float = 1.0
    packet_bytes: float = 4096.0
    ack_bytes: float = 0.0
    ack_queueing: bool = True
    dt_ns: float = 2000.0
    dt_quiet_max_ns: float = 200_000.0
    pfc_tau_ns: float = 1000.0
    quiet_tol: float = 1e-3
    dt_pfc_max_ns: float = 20_000.0
    coalesce_ns: float = 20.0
    seed: int = 0
    record_links: tuple[str, ...] = ()
    #: ICE end-side autonomous rules (``EndSideParams``) for paced flows: a QP whose CNPs
    #: persist above its plan releases its pacer and DCQCN alone governs it
    #: (``dataplane/endside.py``); None = pacers are fixed.
    endside: object = None
    record_flows: tuple[str, ...] = ()
    sample_interval_ns: float = 10_000.0
    max_steps: int = 20_000_000
    max_time_ns: float = 60e9
    policy: str = ""
    scenario: str = ""


# --------------------------------------------------------------------------------------
# static structure
# --------------------------------------------------------------------------------------


def _link_levels(n_links: int, indptr: np.ndarray, links: np.ndarray) -> np.ndarray:
    """Topological level of every link in the "next hop" graph of all routes.

    Level 0 for links that are only first hops; otherwise 1 + max level of a predecessor.
    A cyclic route graph (possible with loops of switches) falls back to the hop index,
    which keeps the sweep correct up to a one-step lag on the cycle.
    """
    lengths = np.diff(indptr)
    hop = np.arange(len(links)) - np.repeat(indptr[:-1], lengths)
    nxt = hop > 0
    src = links[np.flatnonzero(nxt) - 1]
    dst = links[nxt]
    level = np.zeros(n_links, dtype=np.int64)
    level[np.unique(dst)] = 1
    for _ in range(n_links + 1):
        new = level.copy()
        np.maximum.at(new, dst, level[src] + 1)
        if np.array_equal(new, level):
            return level
        level = new
    # cycle: use the largest hop index at which a link appears
    level = np.zeros(n_links, dtype=np.int64)
    np.maximum.at(level, links, hop)
    return level


def _waterfill(demand: np.ndarray, group: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Max-min share of ``cap[g]`` among the demands of group ``g`` (progressive filling).

    Exact: sort demands per group; the fair level is the first ``(cap − Σ smaller) / n_rest``
    that does not exceed the next demand.
    """
    n_groups = len(cap)
    tot = np.bincount(group, demand, minlength=n_groups)
    if np.all(tot <= cap * (1 + 1e-12)):
        return demand
    order = np.lexsort((demand, group))
    d = demand[order]
    g = group[order]
    counts = np.bincount(g, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    cs = np.concatenate(([0.0], np.cumsum(d)))
    before = cs[:-1] - cs[starts[g]]
    n_rest = counts[g] - (np.arange(len(d)) - starts[g])
    hit = before + n_rest * d >= cap[g]
    level = np.full(n_groups, np.inf)
    if hit.any():
        gi, first = np.unique(g[hit], return_index=True)
        pos = np.flatnonzero(hit)[first]
        level[gi] = (cap[gi] - before[pos]) / n_rest[pos]
    out = np.empty_like(demand)
    out[order] = np.minimum(d, np.maximum(level[g], 0.0))
    return out


class _Routes:
    """Per-entry (route, hop) arrays of the current routing (rebuilt on reroutes)."""

    def __init__(self, n_links: int, indptr: np.ndarray, links: np.ndarray,
                 link_intra: np.ndarray | None = None):
        self.indptr = indptr.astype(np.int64)
        self.links = links.astype(np.int64)
        lengths = np.diff(self.indptr)
        self.lengths = lengths
        self.hop = np.arange(len(links)) - np.repeat(self.indptr[:-1], lengths)
        self.level = _link_levels(n_links, self.indptr, self.links)
        # The sender NIC is the route's first link that is not server-internal (a GPU's
        # NVLink/PCIe hops before it are not where RoCE rate limiters, DCQCN and PFC act).
        first = self.links[self.indptr[:-1]]
        if link_intra is not None and len(links) and link_intra.any():
            ext = ~link_intra[self.links]
            pos = np.where(ext, np.arange(len(links)), len(links))
            fe = np.minimum.reduceat(pos, self.indptr[:-1]) if len(lengths) else pos[:0]
            ok = (fe < self.indptr[1:]) & (lengths > 0)
            first = np.where(ok, self.links[np.minimum(fe, len(links) - 1)], first)
        self.first_link = first
        # a link is a queueing (switch-egress) hop if some route uses it past its first hop
        self.queue_link = np.zeros(n_links, bool)
        self.queue_link[self.links[self.hop > 0]] = True
        self.ingress_link = np.zeros(n_links, bool)
        idx = np.flatnonzero(self.hop > 0)
        self.ingress_link[self.links[idx - 1]] = True


# --------------------------------------------------------------------------------------
# engine
# --------------------------------------------------------------------------------------


class FluidSim:
    """One run of the fluid model; use :func:`run`."""

    def __init__(self, problem: SimProblem, cfg: FluidConfig):
        problem.validate()
        self.p = problem
        self.cfg = cfg
        L, F, K = problem.n_links, problem.n_flows, problem.n_routes
        self.L, self.F, self.K = L, F, K
        self.cap = problem.link_capacity_bps / _BYTES_PER_NS  # wire bytes per ns
        self.up = np.ones(L)
        self._pos = np.zeros(L, np.int64)
        self.link_intra = (problem.link_kind == LINK_INTRA if problem.link_kind is not None
                           else None)
        self.routes = _Routes(L, problem.route_indptr, problem.route_links, self.link_intra)
        self.w = problem.route_weight.astype(np.float64)
        self.size_w = problem.flow_size_bytes * cfg.wire_overhead
        self.flow_cap = problem.flow_rate_cap_bps / _BYTES_PER_NS
        # routes of each flow (CSR by flow)
        self.r_order = np.argsort(problem.route_flow, kind="stable")
        cnt = np.bincount(problem.route_flow, minlength=F)
        self.f_rptr = np.concatenate(([0], np.cumsum(cnt)))
        # dependants (reverse CSR) and remaining-dep counters
        nd = np.diff(problem.dep_indptr)
        dep_of = np.repeat(np.arange(F), nd)
        order = np.argsort(problem.dep_indices, kind="stable")
        self.dependants = dep_of[order]
        c2 = np.bincount(problem.dep_indices, minlength=F)
        self.dptr = np.concatenate(([0], np.cumsum(c2)))
        self.n_deps_left = nd.copy()
        # switch structure for PFC/ECN
        if problem.node_is_switch is not None:
            sw = np.asarray(problem.node_is_switch, bool)
            self.egress_sw = sw[problem.link_src]
            self.ingress_sw = sw[problem.link_dst]
        else:
            self.egress_sw = self.routes.queue_link.copy()
            self.ingress_sw = self.routes.ingress_link.copy()
        if problem.link_kind is not None:
            intra = problem.link_kind == LINK_INTRA
            self.egress_sw &= ~intra
            self.ingress_sw &= ~intra
        self._setup_pfc()
        self._setup_ecn()
        self.cc = cfg.cc
        if self.cc not in ("none", "dcqcn"):
            raise ValueError(f"unknown cc {self.cc!r}; use 'none' or 'dcqcn'")
        if self.cc == "dcqcn":
            self.ccm = get_cc("dcqcn")
            self.dp = (cfg.dcqcn if isinstance(cfg.dcqcn, DcqcnParams)
                       else DcqcnParams.profile(cfg.dcqcn))
        self.rng = np.random.default_rng(cfg.seed)
        # per-route feedback delay: the mark is made at dequeue; the CNP rides the ACK back
        self.rtt_ns = 2.0 * problem.route_delay_ns().astype(np.float64)
        # reverse direction of every link (ACK path); -1 when the cable is simplex
        lut = {(int(a), int(b)): i for i, (a, b) in
               enumerate(zip(problem.link_src, problem.link_dst, strict=True))}
        self.rev = np.array([lut.get((int(b), int(a)), -1) for a, b in
                             zip(problem.link_src, problem.link_dst, strict=True)], np.int64)
        self.ack_ratio = cfg.ack_bytes / max(cfg.packet_bytes * cfg.wire_overhead, 1.0)
        self.ack_queue = cfg.ack_queueing

    # ---------------- setup ----------------
    def _setup_pfc(self) -> None:
        cfg = self.cfg
        pf = cfg.pfc
        if isinstance(pf, str):
            pf = {"dynamic": PfcParams.hpcc_ns3(), "static": PfcParams.htsim_static(),
                  "off": PfcParams.off()}[pf]
        self.pfc = pf
        p = self.p
        self.pfc_on = pf.mode != "off" and bool(self.ingress_sw.any())
        node_dst = p.link_dst
        n_nodes = int(max(p.link_src.max(initial=0), p.link_dst.max(initial=0))) + 1
        self.n_nodes = n_nodes
        # every port of a switch: the links arriving at it (its ingress ports)
        sw_port = self.ingress_sw
        head = pf.headroom_bytes(p.link_capacity_bps, p.link_delay_ns)
        self.pfc_sw_of = node_dst
        self.pfc_alpha = pf.port_alpha(p.link_capacity_bps)
        h_tot = np.bincount(node_dst[sw_port], head[sw_port], minlength=n_nodes)
        n_ports = np.bincount(node_dst[sw_port], minlength=n_nodes)
        self.pfc_pool = pf.buffer_bytes - h_tot - n_ports * pf.reserve_bytes  # per node
        self.pfc_reg = np.zeros(self.L, bool)
        self.pfc_allow = np.full(self.L, np.inf)
        self.pause_ns = np.zeros(self.L)
        self.pause_cnt = np.zeros(self.L)
        # hysteresis gap (bytes) that one pause episode drains and refills
        gap = (np.full(self.L, pf.resume_offset_bytes) if pf.mode == "dynamic"
               else np.full(self.L, max(pf.xoff_bytes - pf.xon_bytes, 1.0)))
        if pf.pause_delay:  # bytes still sent while PAUSE travels, and silence while RESUME does
            gap = gap + 2 * self.cap * p.link_delay_ns
        self.pfc_gap = np.maximum(gap, 1.0)

    def _setup_ecn(self) -> None:
        red = self.cfg.red
        rate = self.p.link_capacity_bps
        if red is None:
            red = {"kmin_bytes_per_gbps": 4000.0, "kmax_bytes_per_gbps": 16000.0, "pmax": 0.2}
        if isinstance(red, RedParams):
            kmin = np.full(self.L, red.kmin_bytes)
            kmax = np.full(self.L, red.kmax_bytes)
            pmax = np.full(self.L, red.pmax)
            above = red.above_kmax
        else:
            g = rate / 1e9
            kmin = float(red["kmin_bytes_per_gbps"]) * g
            kmax = float(red["kmax_bytes_per_gbps"]) * g
            pmax = np.full(self.L, float(red.get("pmax", 0.2)))
            above = float(red.get("above_kmax", 1.0))
        self.kmin = np.where(self.egress_sw, kmin, np.inf)
        self.kmax = np.where(self.egress_sw, kmax, np.inf)
        self.pmax = pmax
        self.p_above = above

    # ---------------- active set ----------------
    def _compress(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sorted unique link ids, index of each id in them) without sorting."""
        mark = np.zeros(self.L, bool)
        mark[ids] = True
        ul = np.flatnonzero(mark)
        self._pos[ul] = np.arange(len(ul))
        return ul, self._pos[ids]

    def _store_active(self) -> None:
        """Write the running flows' working arrays back to the full per-route state."""
        self.q[self.a_e] = self.aq
        self.arr[self.a_e] = self.aarr
        self.drain[self.a_e] = self.adrain
        self.dep[self.a_e] = self.adep
        if self.cc == "dcqcn":
            self.cc_state.put(self.a_r, self.acs)

    def _rebuild(self) -> None:
        """Gather the arrays of the running flows (called when that set changes)."""
        R = self.routes
        if hasattr(self, "a_r") and len(self.a_r):
            self._store_active()
        fl = np.flatnonzero(self.running)
        self.a_f = fl
        if len(fl) == 0:
            self.a_r = np.zeros(0, np.int64)
            self.a_e = np.zeros(0, np.int64)
            return
        nr = self.f_rptr[fl + 1] - self.f_rptr[fl]
        rsel = np.repeat(self.f_rptr[fl], nr) + (np.arange(nr.sum()) - np.repeat(
            np.cumsum(nr) - nr, nr))
        a_r = self.r_order[rsel]
        self.a_r = a_r
        self.a_rflow = np.repeat(np.arange(len(fl)), nr)  # local flow of each route
        self.a_fstart = np.cumsum(nr) - nr  # reduceat offsets
        ne = R.lengths[a_r]
        estart = np.cumsum(ne) - ne
        a_e = np.repeat(R.indptr[a_r], ne) + (np.arange(ne.sum()) - np.repeat(estart, ne))
        self.a_e = a_e
        self.ae_route = np.repeat(np.arange(len(a_r)), ne)
        self.ae_link = R.links[a_e]
        hop = R.hop[a_e]
        self.ae_hop0 = np.flatnonzero(hop == 0)
        self.ae_last = estart + ne - 1
        self.ae_prev = np.arange(len(a_e)) - 1  # valid where hop > 0
        lvl = R.level[self.ae_link]
        self.levels = []
        qi = np.flatnonzero(hop > 0)
        self.ae_q = qi
        self.ae_ing = self.ae_link[qi - 1]  # ingress port (arrival link) of each queued entry
        lq = lvl[qi]
        for v in range(1, int(lq.max(initial=0)) + 1):
            idx = qi[lq == v]
            if len(idx):
                ul, inv = self._compress(self.ae_link[idx])
                self.levels.append((idx, self.ae_prev[idx], ul, inv))
        self.a_first = R.first_link[a_r]
        self.a_w = self.w[a_r]
        self.aq = self.q[a_e].copy()
        self.aarr = self.arr[a_e].copy()
        self.adrain = self.drain[a_e].copy()
        self.adep = self.dep[a_e].copy()
        if self.cc == "dcqcn":
            self.acs = self.cc_state.take(a_r)
        self.a_rtt = self.rtt_ns[a_r]
        ul, inv = self._compress(self.a_first)
        self.a_nic, self.a_nic_inv = ul, inv
        self.a_nic_single = len(ul) == len(self.a_first)
        self.a_line = self.cap[self.a_first]
        rl = self.rev[self.ae_link]
        self.ae_rok = np.flatnonzero(rl >= 0)
        self.ae_rlink = rl[self.ae_rok]

    # ---------------- main loop ----------------
    def run(self) -> SimResult:
        # masked divisions (0/0 where a queue or a rate is empty) are expected here
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._run()

    def _run(self) -> SimResult:
        cfg, p = self.cfg, self.p
        wall0 = time.perf_counter()
        F, K, L = self.F, self.K, self.L
        R = self.routes
        self.q = np.zeros(len(R.links))
        self.arr = np.zeros(len(R.links))
        self.drain = np.zeros(len(R.links))
        self.dep = np.zeros(len(R.links))
        self.inj = np.zeros(F)
        self.deliv = np.zeros(K)
        self.running = np.zeros(F, bool)
        self.done = np.zeros(F, bool)
        start = np.full(F, -1.0)
        finish = np.full(F, -1.0)
        if self.cc == "dcqcn":
            line = self.cap[R.first_link] * _BYTES_PER_NS
            self.cc_state = self.ccm.init(line, self.dp)
        link_bytes = np.zeros(L)
        peak_util = np.zeros(L)
        max_q = np.zeros(L)
        marked_bytes = np.zeros(L)
        # CNP feedback delay line: time buckets x routes of marked packets due to arrive
        self._fb_bw = 250.0
        self._fb_rows = int(np.ceil(float(self.rtt_ns.max(initial=0.0)) * 4 / self._fb_bw)) + 8
        self._fb = np.zeros((self._fb_rows, K))
        self._fb_last = -1
        last_cnp = np.full(K, -np.inf)
        # end-side rules run on the routes (QPs) of paced flows, once per CNP window
        es_on = self.cfg.endside is not None and self.cc == "dcqcn"
        if es_on:
            es_state = EndSideState.initial(K)
            es_cnps = np.zeros(K)
            es_next = float(self.cfg.endside.cnp_window_ns)
            es_paced = np.isfinite(self.flow_cap[p.route_flow])
        self.endside_fallbacks = 0
        ts: dict = {"t_us": [], "queue_bytes": {n: [] for n in cfg.record_links},
                    "rate_gbps": {n: [] for n in cfg.record_flows},
                    "send_gbps": {n: [] for n in cfg.record_flows}}
        rec_l = [p.link_names.index(n) for n in cfg.record_links]
        fnames = list(p.flow_names)
        rec_f = [fnames.index(n) for n in cfg.record_flows]
        next_sample = 0.0 if (rec_l or rec_f) else np.inf
        # start events
        heap: list[tuple[float, int]] = []
        for f in np.flatnonzero(self.n_deps_left == 0):
            heapq.heappush(heap, (float(p.flow_start_ns[f]), int(f)))
        failures = sorted(p.failures, key=lambda x: x.t_ns)
        fail_events = []
        for fl in failures:
            fail_events.append((float(fl.t_ns), "down", fl))
            if len(fl.reroute_route):
                fail_events.append((float(fl.t_ns + fl.reroute_delay_ns), "reroute", fl))
        fail_events.sort(key=lambda x: x[0])
        self.a_r = np.zeros(0, np.int64)
        self._rebuild()
        t = 0.0
        steps = 0
        n_done = 0
        need_rebuild = False
        quiet = 0.0  # allowed length of the next step when the state is steady (0: not)
        cap_max = float(self.cap.max())
        marks_until = -np.inf  # last time a mark is still travelling back
        while n_done < F:
            # --- events at t: failures, starts ---
            while fail_events and fail_events[0][0] <= t + 1e-9:
                _, kind, fl = fail_events.pop(0)
                self._apply_failure(kind, fl)
                need_rebuild = True
            while heap and heap[0][0] <= t + cfg.coalesce_ns:
                _, f = heapq.heappop(heap)
                start[f] = t
                if self.size_w[f] <= 0:
                    finish[f] = t + p.flow_latency_ns[f]
                    self.done[f] = True
                    n_done += 1
                    self._release(f, finish[f], heap)
                    continue
                self.running[f] = True
                rr = self.r_order[self.f_rptr[f]:self.f_rptr[f + 1]]
                if self.cc == "dcqcn":
                    fresh = self.ccm.init(self.cap[R.first_link[rr]] * _BYTES_PER_NS, self.dp)
                    self.cc_state.put(rr, fresh)
                need_rebuild = True
            if need_rebuild:
                self._rebuild()
                need_rebuild = False
                quiet = 0.0
            if len(self.a_r) == 0:
                nxt = min(heap[0][0] if heap else np.inf,
                          fail_events[0][0] if fail_events else np.inf)
                if not np.isfinite(nxt):
                    break  # nothing can ever start (a dependency cycle or an unrouted flow)
                t = max(t, nxt)
                continue
            steps += 1
            if t > cfg.max_time_ns:
                break  # stalled (e.g. a failed link with no reroute): report unfinished flows
            if steps > cfg.max_steps:
                raise EngineError(f"fluid engine exceeded max_steps={cfg.max_steps} at "
                                  f"t={t / 1e3:.1f} us")
            # --- service capacities and NIC injection ---
            serv = self.cap * self.up
            if self.ack_ratio > 0:
                # ACKs of last step's deliveries ride the reverse links of each route
                ack = self.ack_ratio * self.adep[self.ae_last][self.ae_route[self.ae_rok]]
                serv = np.maximum(serv - np.bincount(self.ae_rlink, ack, minlength=L), 0.0)
            serv_eff = np.minimum(serv, self.pfc_allow)
            af = self.a_f
            rem_f = self.size_w[af] - self.inj[af]
            sending = rem_f > 1e-9 * np.maximum(self.size_w[af], 1.0)
            dem = self.a_line
            if self.cc == "dcqcn":
                dem = np.minimum(dem, self.acs.rc_bps / _BYTES_PER_NS)
            dem = np.minimum(dem, self.a_w * self.flow_cap[af][self.a_rflow])
            dem = np.where(sending[self.a_rflow], dem, 0.0)
            if self.a_nic_single:  # one QP per NIC: nothing to share
                alloc = np.minimum(dem, serv_eff[self.a_first])
            else:
                alloc = _waterfill(dem, self.a_nic_inv, serv_eff[self.a_nic])
            per = np.where(self.a_w > 0, alloc / self.a_w, np.inf)
            rf = np.minimum.reduceat(per, self.a_fstart) if len(per) else per
            rf = np.where(np.isfinite(rf), rf, 0.0)
            rf = np.where(sending, rf, 0.0)
            x = self.a_w * rf[self.a_rflow]
            self.cur_rf = rf
            # --- step size ---
            dt = max(quiet, cfg.dt_ns) if quiet else cfg.dt_ns
            t_end_inj = np.where(rf > 0, rem_f / rf, np.inf)
            dt = min(dt, float(t_end_inj.min(initial=np.inf)))
            if heap:
                dt = min(dt, heap[0][0] - t)
            if fail_events:
                dt = min(dt, fail_events[0][0] - t)
            if self.cc == "dcqcn" and quiet:
                # in active steps timers fire at the step end (<= dt_ns late); a quiet
                # jump must not skip a rate increase
                dt = min(dt, self.ccm.next_event_ns(self.acs) - t)
            dt = min(dt, next_sample - t)
            dt = max(dt, 1e-3)
            # --- sweep the queues in topological order ---
            ne = len(self.a_e)
            dep = np.zeros(ne)
            dep[self.ae_hop0] = x[self.ae_route[self.ae_hop0]]
            aq, aarr, adrain, adep = self.aq, self.aarr, self.adrain, self.adep
            for idx, prev, ul, inv in self.levels:
                a_in = dep[prev]
                aarr[idx] = a_in
                qv = aq[idx]
                in_b = a_in * dt
                asum = np.bincount(inv, in_b, minlength=len(ul))
                if not qv.any() and np.all(asum <= serv_eff[ul] * dt):
                    # nothing queued and no link overloaded: pure pass-through (same result
                    # as the FIFO below, for a fraction of the operations)
                    adrain[idx] = np.where(in_b > 0, 0.0, adrain[idx])
                    dep[idx] = a_in
                    continue
                # An entry whose arrivals stopped (its source finished) is spread through
                # the FIFO, so it drains linearly at its last departure rate, not
                # exponentially as a content-proportional split would have it.
                dr = adrain[idx]
                dr = np.where(in_b > 0, 0.0, np.where((dr <= 0) & (qv > 0), adep[idx], dr))
                adrain[idx] = dr
                take = np.minimum(qv, dr * dt)
                qsum = np.bincount(inv, qv, minlength=len(ul))
                tsum = np.bincount(inv, take, minlength=len(ul))
                served = np.minimum(serv_eff[ul] * dt, qsum + asum)
                tscale = np.where(tsum > served, served / tsum, 1.0)
                take = take * tscale[inv]
                tsum = np.minimum(tsum, served)
                rest = served - tsum
                qrem = qv - take
                qrsum = qsum - tsum
                # FIFO: the head of the queue (present content) leaves first, then arrivals
                from_q = np.minimum(rest, qrsum)
                fq = np.where(qrsum > _TINY, from_q / qrsum, 0.0)
                fa = np.where(asum > _TINY, (rest - from_q) / asum, 0.0)
                out_b = take + qrem * fq[inv] + in_b * fa[inv]
                dep[idx] = out_b / dt
                aq[idx] = np.maximum(qv + in_b - out_b, 0.0)
            ddep = float(np.abs(dep - adep).max(initial=0.0))
            adep[:] = dep
            moved = dep * dt
            lb = np.bincount(self.ae_link, moved, minlength=L)
            link_bytes += lb
            np.maximum(peak_util, lb / (self.cap * dt + _TINY), out=peak_util)
            qlink = np.bincount(self.ae_link[self.ae_q], aq[self.ae_q], minlength=L)
            np.maximum(max_q, qlink, out=max_q)
            # --- progress ---
            self.inj[af] += rf * dt
            deliv_step = dep[self.ae_last] * dt
            self.deliv[self.a_r] += deliv_step
            t_new = t + dt
            # --- ECN marks and DCQCN ---
            any_marks = False
            if self.cc == "dcqcn":
                pl = red_mark_probability(qlink, self.kmin, self.kmax, self.pmax, self.p_above)
                if np.any(pl > 0):
                    pe = pl[self.ae_link]
                    mb = moved * pe
                    marked_bytes += np.bincount(self.ae_link, mb, minlength=L)
                    npk = np.bincount(self.ae_route, mb, minlength=len(self.a_r)) / (
                        cfg.packet_bytes * cfg.wire_overhead)
                    if npk.any():
                        # CNPs ride ACKs: base RTT plus the reverse path's queueing delay
                        rev_delay = (self._rev_delay(qlink) if self.ack_queue
                                     else np.zeros(L))
                        rq = np.bincount(self.ae_route, rev_delay[self.ae_link],
                                         minlength=len(self.a_r))
                        arrive_b = ((t_new + self.a_rtt + rq) // self._fb_bw).astype(np.int64)
                        arrive_b = np.maximum(arrive_b, int(t_new // self._fb_bw) + 1)
                        self._fb[arrive_b % self._fb_rows, self.a_r] += npk
                        marks_until = max(marks_until, t_new + float(self.a_rtt.max()))
                        any_marks = True
                # marks reach the sender one round trip later: collect the buckets due now
                cur_b = int(t_new // self._fb_bw)
                if cur_b > self._fb_last:
                    nb = min(cur_b - self._fb_last, self._fb_rows)
                    rows = (np.arange(self._fb_last + 1, self._fb_last + 1 + nb)
                            % self._fb_rows)
                    cnp_n = self._fb[rows][:, self.a_r].sum(axis=0)
                    self._fb[rows] = 0.0
                    self._fb_last = cur_b
                else:
                    cnp_n = np.zeros(len(self.a_r))
                prob = 1.0 - np.exp(-cnp_n)
                cnp = self.rng.random(len(cnp_n)) < prob if cnp_n.any() else np.zeros(
                    len(cnp_n), bool)
                if cnp.any() and self.dp.cnp_interval_ns > 0:
                    ok = t_new - last_cnp[self.a_r] >= self.dp.cnp_interval_ns
                    cnp &= ok
                    last_cnp[self.a_r[cnp]] = t_new
                self.ccm.update(self.acs, cnp, t_new, self.dp, x * dt)
                if es_on:
                    es_cnps[self.a_r[cnp]] += 1
                    if t_new >= es_next:
                        es_state, ev = endside_step(es_state, np.where(es_paced, es_cnps, 0),
                                                    np.zeros(K, bool), 0, self.cfg.endside)
                        fell = ev == EV_FALLBACK
                        if fell.any():
                            self.flow_cap[p.route_flow[fell]] = np.inf
                            self.endside_fallbacks += int(fell.sum())
                        es_cnps[:] = 0
                        es_next = t_new + float(self.cfg.endside.cnp_window_ns)
            # --- PFC ---
            if self.pfc_on and (self.pfc_reg.any() or not hasattr(self, "_pfc_xoff")
                                or float(qlink.max(initial=0.0)) > 0.0):
                self._pfc_update(dt, aq, dep, serv, dem, alloc)
            # --- samples ---
            if t_new >= next_sample - 1e-6:
                self._sample(ts, t_new, rec_l, rec_f, qlink)
                next_sample += cfg.sample_interval_ns
            # --- completions ---
            inj_done = ~sending | (self.size_w[af] - self.inj[af] <= 1e-6 * np.maximum(
                self.size_w[af], 1.0))
            backlog = self.a_w * self.inj[af][self.a_rflow] - self.deliv[self.a_r]
            bl = np.maximum.reduceat(backlog, self.a_fstart)
            fin = inj_done & (bl <= 1e-6 * np.maximum(self.size_w[af], 1.0) + 1e-6) & \
                self.running[af]
            # steady: departures unchanged, no marks in flight, no pending rate cuts. Then
            # every queue moves linearly and the next step may run until a queue empties
            # or crosses a PFC/ECN threshold (or the next event).
            # (a source that just stopped while its bytes still queue somewhere changes the
            # next step's arrivals: not steady)
            stopped = sending & inj_done
            if stopped.any() and len(self.ae_q):
                rq = np.bincount(self.ae_route[self.ae_q], aq[self.ae_q],
                                 minlength=len(self.a_r))
                stopped_q = bool(np.any(stopped[self.a_rflow] & (rq > 1.0)))
            else:
                stopped_q = False
            steady = (ddep < cfg.quiet_tol * cap_max) and (t_new > marks_until) and \
                not stopped_q and \
                not any_marks and not (self.cc == "dcqcn" and bool(self.acs.dec_cnp.any()))
            quiet = steady and self._horizon(aq, aarr, dep, qlink) or 0.0
            t = t_new
            if fin.any():
                rd_fin = self._rev_delay(qlink) if self.ack_queue else None
                for f in af[fin]:
                    self.running[f] = False
                    self.done[f] = True
                    n_done += 1
                    # the ACK of the last byte queues behind data on the reverse path
                    finish[f] = t + p.flow_latency_ns[f] + self._ack_queue_ns(f, rd_fin)
                    self._release(f, finish[f], heap)
                # Finished flows stay in the active arrays (idle, no bytes) until the next
                # start rebuilds them: one rebuild per event instead of two.
                if not self.running[af].any():
                    need_rebuild = True
        if len(self.a_r):
            self._rebuild()
        wall = time.perf_counter() - wall0
        return self._result(start, finish, link_bytes, peak_util, max_q, marked_bytes, ts,
                            steps, wall)

    # ---------------- helpers ----------------
    def _release(self, f: int, t_fin: float, heap: list) -> None:
        for g in self.dependants[self.dptr[f]:self.dptr[f + 1]]:
            self.n_deps_left[g] -= 1
            if self.n_deps_left[g] == 0:
                heapq.heappush(heap, (max(t_fin, float(self.p.flow_start_ns[g])), int(g)))

    def _pfc_update(self, dt, aq, dep, serv, dem, alloc) -> None:
        """Fluid PFC: throttle each upstream transmitter so its ingress port holds XOFF."""
        pf = self.pfc
        L = self.L
        qi = self.ae_q
        use = np.bincount(self.ae_ing, aq[qi], minlength=L)
        out = np.bincount(self.ae_ing, dep[qi], minlength=L)
        ports = self.ingress_sw
        if pf.mode == "dynamic":
            shared = np.maximum(use - pf.reserve_bytes, 0.0) * ports
            sw_shared = np.bincount(self.pfc_sw_of, shared, minlength=self.n_nodes)
            free = self.pfc_pool[self.pfc_sw_of] - sw_shared[self.pfc_sw_of]
            thr = self.pfc_alpha * np.maximum(free, 0.0)
            xoff = pf.reserve_bytes + thr
            xon = pf.reserve_bytes + thr - pf.resume_offset_bytes
        else:
            xoff = np.full(L, pf.xoff_bytes)
            xon = np.full(L, pf.xon_bytes)
        self._pfc_use, self._pfc_xoff, self._pfc_xon = use, xoff, xon
        # time-average of the pause train during the step that just ended
        reg = self.pfc_reg
        if reg.any():
            allow = np.minimum(self.pfc_allow, serv)
            nic_dem = np.bincount(self.a_first, dem, minlength=L)
            qlink = np.bincount(self.ae_link[qi], aq[qi], minlength=L)
            wants = (qlink > 1.0) | (nic_dem > allow * (1 + 1e-9))
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(serv > 0, 1.0 - allow / serv, 0.0)
            frac = np.clip(frac, 0.0, 1.0) * (reg & wants)
            self.pause_ns += frac * dt
            o = np.minimum(out, serv)
            with np.errstate(divide="ignore", invalid="ignore"):
                period = self.pfc_gap / np.maximum(o, _TINY) + self.pfc_gap / np.maximum(
                    serv - o, _TINY)
            self.pause_cnt += np.where((frac > 1e-6) & (o > _TINY), dt / period, 0.0)
        enter = ports & ~reg & (use >= xoff)
        leave = reg & (use <= xon)
        self.pause_cnt += enter
        reg = (reg | enter) & ~leave
        self.pfc_reg = reg
        tau = max(dt, self.cfg.pfc_tau_ns)
        self.pfc_allow = np.where(reg, np.maximum(out + (xoff - use) / tau, 0.0), np.inf)

    def _rev_delay(self, qlink: np.ndarray) -> np.ndarray:
        """Queueing delay (ns) an ACK meets on the reverse direction of each link."""
        ok = self.rev >= 0
        out = np.zeros(self.L)
        rv = self.rev[ok]
        out[ok] = qlink[rv] / np.maximum(self.cap[rv] * self.up[rv], _TINY)
        return np.where(ok, np.minimum(out, 1e9), 0.0)

    def _ack_queue_ns(self, f: int, rd: np.ndarray | None) -> float:
        if rd is None:
            return 0.0
        R = self.routes
        best = 0.0
        for k in self.r_order[self.f_rptr[f]:self.f_rptr[f + 1]]:
            best = max(best, float(rd[R.links[R.indptr[k]:R.indptr[k + 1]]].sum()))
        return best

    def _horizon(self, aq, aarr, dep, qlink) -> float:
        """Longest step over which constant rates keep the model exact: until a queue
        entry empties, a PFC port crosses XOFF/XON, or a queue reaches Kmin (DCQCN)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._horizon_(aq, aarr, dep, qlink)

    def _horizon_(self, aq, aarr, dep, qlink) -> float:
        qi = self.ae_q
        h = self.cfg.dt_quiet_max_ns
        if len(qi) == 0:
            return h
        g = aarr[qi] - dep[qi]
        q = aq[qi]
        neg = (g < -_TINY) & (q > 0)
        if neg.any():
            h = min(h, float(np.min(q[neg] / -g[neg])))
        if self.pfc_on and self.pfc_reg.any():
            # a paused port's share of its egress FIFO settles over ~Q/C; long steps would
            # freeze whatever shares the last event left (see FluidConfig.dt_pfc_max_ns)
            h = min(h, self.cfg.dt_pfc_max_ns)
        if self.pfc_on and hasattr(self, "_pfc_use"):
            L = self.L
            gp = np.bincount(self.ae_ing, g, minlength=L)
            use = self._pfc_use
            up = ~self.pfc_reg & self.ingress_sw & (gp > _TINY)
            if up.any():
                if self.pfc.mode == "dynamic":
                    gs = np.bincount(self.pfc_sw_of, np.where(self.ingress_sw, gp, 0.0),
                                     minlength=self.n_nodes)[self.pfc_sw_of]
                    a = self.pfc_alpha
                    tt = (self._pfc_xoff - use) / (gp + a * np.maximum(gs, 0.0))
                else:
                    tt = (self._pfc_xoff - use) / np.maximum(gp, _TINY)
                h = min(h, float(np.min(np.maximum(tt[up], 0.0))))
            down = self.pfc_reg & (gp < -_TINY)
            if down.any():
                tt = (use - self._pfc_xon) / -gp
                h = min(h, float(np.min(np.maximum(tt[down], 0.0))))
        if self.cc == "dcqcn":
            if np.any(qlink >= self.kmin * (1 - 1e-9)):
                return 0.0  # marking: DCQCN dynamics, no long steps
            gl = np.bincount(self.ae_link[qi], g, minlength=self.L)
            m = (gl > _TINY) & (qlink < self.kmin)
            if m.any():
                # +1 ns: land just above Kmin so that marking starts
                h = min(h, float(np.min((self.kmin[m] - qlink[m]) / gl[m])) + 1.0)
        return h

    def _apply_failure(self, kind: str, fl) -> None:
        """Links go down (or up); affected routes move to their new links.

        Content queued on a failed link, and everything a rerouted route still had in the
        network, is resent from the source (go-back-N after the receiver sees the gap).
        """
        if kind == "down":
            self.up[np.asarray(fl.links, np.int64)] = 1.0 if fl.up else 0.0
            return
        if len(getattr(self, "a_r", [])):
            self._store_active()
            self.a_r = np.zeros(0, np.int64)
        R = self.routes
        lists = [R.links[R.indptr[k]:R.indptr[k + 1]] for k in range(self.K)]
        old_q = [self.q[R.indptr[k]:R.indptr[k + 1]] for k in range(self.K)]
        for i, k in enumerate(np.asarray(fl.reroute_route, np.int64)):
            lists[k] = np.asarray(fl.new_route(i), np.int64)
            lost = float(old_q[k].sum())
            f = self.p.route_flow[k]
            w = self.w[k]
            if w > 0:
                self.inj[f] = max(self.inj[f] - lost / w, 0.0)
            self.deliv[k] = min(self.deliv[k], self.inj[f] * w)
            old_q[k] = np.zeros(len(lists[k]))
        lengths = np.array([len(x) for x in lists])
        indptr = np.concatenate(([0], np.cumsum(lengths)))
        self.routes = _Routes(self.L, indptr, np.concatenate(lists), self.link_intra)
        self.q = np.concatenate(old_q) if old_q else np.zeros(0)
        self.arr = np.zeros(len(self.q))
        self.drain = np.zeros(len(self.q))
        self.dep = np.zeros(len(self.q))
        self.rtt_ns = 2.0 * np.add.reduceat(self.p.link_delay_ns[self.routes.links],
                                            indptr[:-1]).astype(np.float64)

    def _sample(self, ts, t, rec_l, rec_f, qlink) -> None:
        ts["t_us"].append(t / 1e3)
        for n, li in zip(self.cfg.record_links, rec_l, strict=False):
            ts["queue_bytes"][n].append(float(qlink[li]))
        for n, f in zip(self.cfg.record_flows, rec_f, strict=False):
            rr = self.r_order[self.f_rptr[f]:self.f_rptr[f + 1]]
            if self.running[f] and self.cc == "dcqcn":
                pos = np.flatnonzero(np.isin(self.a_r, rr))
                v = float(self.acs.rc_bps[pos].min()) / 1e9 if len(pos) else 0.0
            elif self.running[f]:
                v = float(self.cap[self.routes.first_link[rr]].min() * _BYTES_PER_NS / 1e9)
            else:
                v = 0.0
            ts["rate_gbps"][n].append(v)
            pos = np.flatnonzero(self.a_f == f)
            ts["send_gbps"][n].append(float(self.cur_rf[pos[0]]) * _BYTES_PER_NS / 1e9 /
                                      self.cfg.wire_overhead if len(pos) else 0.0)

    def _result(self, start, finish, link_bytes, peak_util, max_q, marked_bytes, ts, steps,
                wall) -> SimResult:
        p, cfg = self.p, self.cfg
        names = list(p.link_names)
        fin_ns = np.where(finish >= 0, np.round(finish), -1).astype(np.int64)
        st_ns = np.where(start >= 0, np.round(start), -1).astype(np.int64)
        colls = []
        for c in p.collectives:
            fl = np.asarray(c.flows, np.int64)
            ok = fin_ns[fl] >= 0
            s0 = int(st_ns[fl][ok].min()) if ok.any() else 0
            f1 = int(fin_ns[fl].max()) if ok.all() and len(fl) else -1
            colls.append(CollectiveResult(c.name, c.job, c.kind, c.size_bytes, c.nranks, s0,
                                          f1, c.algorithm))
        eg = self.egress_sw
        maxq = {names[i]: float(max_q[i]) for i in np.flatnonzero(eg & (max_q > 1.0))}
        pause = {names[i]: int(round(self.pause_ns[i])) for i in
                 np.flatnonzero(self.pause_ns > 0.5)}
        pcnt = {names[i]: int(max(1, round(self.pause_cnt[i]))) for i in
                np.flatnonzero(self.pause_ns > 0.5)}
        ecn = {}
        if self.cc == "dcqcn":
            for i in np.flatnonzero(marked_bytes > 0):
                ecn[names[i]] = float(marked_bytes[i] / max(link_bytes[i], 1.0))
        cnps = {}
        if self.cc == "dcqcn":
            fnames = list(p.flow_names) or [f"flow{i}" for i in range(self.F)]
            for k in np.flatnonzero(self.cc_state.cnp_count > 0):
                qp = int(p.route_qp[k])
                key = f"qp{qp}" if qp >= 0 else f"{fnames[p.route_flow[k]]}#r{k}"
                cnps[key] = cnps.get(key, 0) + int(self.cc_state.cnp_count[k])
        return SimResult(
            engine="fluid", policy=cfg.policy, scenario=cfg.scenario, seed=cfg.seed,
            makespan_ns=int(fin_ns.max(initial=0)), flow_start_ns=st_ns, flow_finish_ns=fin_ns,
            collectives=colls, link_names=names,
            link_capacity_bps=p.link_capacity_bps.copy(),
            link_bytes=link_bytes / cfg.wire_overhead, link_peak_util=np.minimum(peak_util, 1.0),
            wall_s=wall, events=steps, link_max_queue_bytes=maxq, link_pfc_pause_ns=pause,
            link_pfc_pause_count=pcnt, link_ecn_marked_frac=ecn, qp_cnp_count=cnps,
            timeseries=ts if ts["t_us"] else {},
            meta={"cc": self.cc, "pfc": self.pfc.mode, "steps": steps,
                  "endside_fallbacks": self.endside_fallbacks,
                  "wire_overhead": cfg.wire_overhead,
                  "unfinished_flows": int(np.sum(fin_ns < 0))})


@register_engine("fluid")
def run(problem: SimProblem, **options) -> SimResult:
    """Run the fluid engine on ``problem``; ``options`` are :class:`FluidConfig` fields.

    Examples
    --------
    >>> from icefabric.engine.problem import build_problem
    >>> prob = build_problem(link_capacity_bps=[100e9], link_delay_ns=[1000],
    ...                      flow_size_bytes=[1_250_000], routes=[[0]], route_flow=[0])
    >>> run(prob).flow_finish_ns[0]   # 10 Mbit at 100 Gb/s
    100000
    """
    known = set(FluidConfig.__dataclass_fields__)
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"unknown fluid engine option(s): {sorted(unknown)}")
    cfg = FluidConfig(**{k: (tuple(v) if k in ("record_links", "record_flows") else v)
                         for k, v in options.items()})
    return FluidSim(problem, cfg).run()


__all__ = ["FluidConfig", "FluidSim", "run"]
