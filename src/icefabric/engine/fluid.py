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
  its threshold (``outflow + (threshold − use)/τ``), released below XON (as in ns-3, a port
  is checked for pause only when bytes arrive on it, for resume only when its bytes
  leave). Throttling a switch port makes its own queue grow, which pauses *its* upstream
  ports in turn, so pauses spread hop by hop and stall innocent flows that share a paused
  transmitter.
  Pause time is the throttled fraction of time; pause episodes are estimated from the
  hysteresis gap (one XOFF→XON→XOFF cycle per gap drained and refilled).
* **ECN/DCQCN.** Switch egress queues mark with RED on the instantaneous queue
  (:mod:`icefabric.dataplane.ecn`). Marked bytes of each route, divided by the packet
  size, reach the sender when ns-3 delivers them: the path latency from the marking hop
  on and back, plus the queue wait at every later hop and on the reverse path (CNPs ride
  ACKs, which share the data FIFO; ``fluid_kernel._marks``); the QP sees a CNP in a step
  with probability ``1 − exp(−marked packets)`` (drawn from a seeded generator, so a run is
  reproducible), and the DCQCN kernel (:mod:`icefabric.dataplane.dcqcn`) updates its rate.
* **Completion.** A flow finishes when every route delivered its bytes, plus
  ``flow_latency_ns`` (the ACK of the last byte, as ``SimProblem`` defines) plus the
  ACK's queueing delay on the reverse path; dependants start then.
* **Failures.** Links go down at ``t_ns``; rerouted routes resend what they still had in
  the network (go-back-N).

Stepping is adaptive: ``dt_ns`` while queues move, marks are in flight or rate cuts are
pending. When departures are unchanged, every queue evolves linearly, so a step runs to the
next event (flow start/end, DCQCN timer, failure, sample) or until a queue
empties or reaches a PFC threshold or Kmin — at most ``dt_quiet_max_ns``
(``dt_pfc_max_ns`` while a port is paused), and at least ``dt_ns`` unless a failure or a
sample ends it. Events inside a step happen at their own time: a DCQCN timer fires at the
step's end; a flow starts and stops injecting inside it, its demand on its NIC being its
rate limit times the part of the step it is active and at most its remaining bytes, so its
bytes are exact and its rate is its mean over the step; its start is its due time and its
end, for the completion, the moment its last byte left (at the rate the NIC gave it) plus
the queue wait on its path. While the fabric is free-flowing (no queue holds more than a
packet, no QP has seen a CNP) a step whose rates changed because flows started or ended
still counts as steady; its quiet successor ends before any queue grows past a packet and
lasts at least ``dt_free_ns`` (4 µs) when a flow event would end it. An uncontended
collective costs about one step per flow event or per ``dt_free_ns``, whichever is fewer.

References
----------
.. [1] Y. Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015.
.. [2] IEEE 802.1Qbb-2011, Priority-based Flow Control.
.. [3] Y. Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019 (its ns-3
   code is the DCQCN/PFC reference of the validation set).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from icefabric.csr import indptr_from_lengths
from icefabric.dataplane.dcqcn import N_DCQCN_ROWS, DcqcnParams, initial_matrix, params_vector
from icefabric.dataplane.ecn import RedParams
from icefabric.dataplane.endside import EV_FALLBACK, EndSideState, endside_step
from icefabric.dataplane.pfc import PfcParams
from icefabric.engine import fluid_kernel as fk
from icefabric.engine.problem import LINK_INTRA, EngineError, SimProblem
from icefabric.engine.registry import register_engine
from icefabric.engine.result import CollectiveResult, SimResult
from icefabric.engine.workspace import Workspace
from icefabric.topology.model import reverse_links

_BYTES_PER_NS = 8e9  # bits/s -> bytes/ns
_FB_BW = 250.0  # ns per bucket of the CNP feedback delay line
#: the CNP delay line's length: at most the slots a dense line of slots x routes x 8 bytes
#: holds in this much memory; a longer feedback delay is clamped to its last slot
#: (FluidSim._feedback_slots; the kernel keeps only the pending slots, in a node pool)
_FB_MAX_BYTES = 128 * 2**20
#: nodes of the CNP delay line's pool beyond one step's marks to start with (it doubles
#: when the pending CNPs need more: ``fluid_kernel.CNP_FULL``; the AllToAll validation
#: run holds ~31,000 at once)
_CNP_SLACK = 32768
#: the runs' state arrays, kept between runs in a process (engine/workspace.py): what a run
#: wrote of them, up to this much, stays mapped for the next run
_WORKSPACE = Workspace(max_bytes=128 * 2**20)


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
        rates differ by more than this fraction of the fastest link, or when the fabric is
        free-flowing: no queue holds more than a packet and no QP has seen a CNP (then a
        quiet step ends before a queue grows past a packet).
    dt_free_ns : float — shortest quiet step while free-flowing that a flow's start or end
        ends (it starts or ends inside the step).
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
    dt_free_ns: float = 4000.0
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


def _link_levels(n_links: int, src: np.ndarray, dst: np.ndarray, links: np.ndarray,
                 hop: np.ndarray) -> np.ndarray:
    """Topological level of every link in the "next hop" graph of all routes: ``src[i]``
    is followed by ``dst[i]`` on some route (``links``, ``hop``: every entry's link and
    hop index, for a cycle).

    Level 0 for links that are only first hops; otherwise 1 + max level of a predecessor.
    A cyclic route graph (possible with loops of switches) falls back to the hop index,
    which keeps the sweep correct up to a one-step lag on the cycle. The relaxation runs
    over the distinct pairs: routes share them (a ring's thousands of routes cross a few
    hundred), and every pass visited each route's copy.
    """
    key = src * n_links + dst
    if n_links * n_links <= 8 * len(key) + 4096:  # distinct keys by a mask, not a sort
        seen = np.zeros(n_links * n_links, bool)
        seen[key] = True
        key = np.flatnonzero(seen)
    else:
        key = np.unique(key)
    src, dst = key // n_links, key % n_links
    level = np.zeros(n_links, dtype=np.int64)
    level[dst] = 1
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


class _Routes:
    """Per-entry (route, hop) arrays of the current routing (rebuilt on reroutes)."""

    def __init__(self, n_links: int, indptr: np.ndarray, links: np.ndarray,
                 link_intra: np.ndarray | None = None):
        self.indptr = np.ascontiguousarray(indptr, np.int64)
        self.links = np.ascontiguousarray(links, np.int64)
        lengths = np.diff(self.indptr)
        self.lengths = lengths
        self.route = np.repeat(np.arange(len(lengths)), lengths)  # each entry's route
        self.hop = np.arange(len(links)) - self.indptr[self.route]
        nxt = np.flatnonzero(self.hop > 0)  # entries past their route's first hop
        prev, after = self.links[nxt - 1], self.links[nxt]
        self.level = _link_levels(n_links, prev, after, self.links, self.hop)
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
        self.queue_link[after] = True
        self.ingress_link = np.zeros(n_links, bool)
        self.ingress_link[prev] = True


# --------------------------------------------------------------------------------------
# engine
# --------------------------------------------------------------------------------------


class FluidSim:
    """One run of the fluid model; use :func:`run`."""

    def __init__(self, problem: SimProblem, cfg: FluidConfig):
        problem.validate()
        problem.require_own_routes("fluid")
        self.p = problem
        self.cfg = cfg
        L, F, K = problem.n_links, problem.n_flows, problem.n_routes
        self.L, self.F, self.K = L, F, K
        self.cap = problem.link_capacity_bps / _BYTES_PER_NS  # wire bytes per ns
        self.link_intra = (problem.link_kind == LINK_INTRA if problem.link_kind is not None
                           else None)
        self.routes = _Routes(L, problem.route_indptr, problem.route_links, self.link_intra)
        self.w = problem.route_weight.astype(np.float64)
        self.size_w = problem.flow_size_bytes * cfg.wire_overhead
        self.flow_cap = problem.flow_rate_cap_bps / _BYTES_PER_NS
        # routes of each flow (CSR by flow)
        self.r_order = problem.route_flow.argsort(kind="stable")
        self.f_rptr = indptr_from_lengths(np.bincount(problem.route_flow, minlength=F))
        # dependants (reverse CSR) and remaining-dep counters
        self.dptr, self.dependants = problem.dependents()
        self.n_deps_left = problem.dep_indptr[1:] - problem.dep_indptr[:-1]
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
        self.dp = (cfg.dcqcn if isinstance(cfg.dcqcn, DcqcnParams)
                   else DcqcnParams.profile(cfg.dcqcn))
        # end-side rules run on the routes (QPs) of paced flows, once per CNP window
        self.es_state = EndSideState.initial(K) if cfg.endside is not None else None
        self.endside_fallbacks = 0
        self.rng = np.random.default_rng(cfg.seed)
        # the other direction of every link's cable (its ACK path); -1 when simplex
        self.rev = reverse_links(problem.link_src, problem.link_dst)
        self.ack_ratio = cfg.ack_bytes / max(cfg.packet_bytes * cfg.wire_overhead, 1.0)
        self.ack_queue = cfg.ack_queueing
        self.fb_lat = self._feedback_latency(self.routes)

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

    def _feedback_latency(self, R: _Routes) -> np.ndarray:
        """Per (route, hop) entry: the time from a mark made at that hop (as the packet
        leaves its queue) to the ACK carrying the CNP back at the sender, queueing aside:
        the data packet's serialisation and propagation over this hop and every later one,
        then the ACK's over the whole route back (``_marks`` in fluid_kernel.py adds the
        queue waits)."""
        d = self.p.link_delay_ns.astype(np.float64)  # per link, then per entry
        fwd = (d + self.cfg.packet_bytes * self.cfg.wire_overhead / self.cap)[R.links]
        back = (d + self.cfg.ack_bytes / self.cap)[R.links]
        route = R.route
        c = np.zeros(len(fwd) + 1)
        np.cumsum(fwd, out=c[1:])  # c[e]: forward latency before entry e
        rest = c[R.indptr[1:]][route] - c[:-1]  # this entry's hop and the later ones
        return rest + np.bincount(route, back, minlength=len(R.lengths))[route]

    def _feedback_slots(self) -> tuple[int, int]:
        """Slots of the CNP delay line: (to start with, at most). It starts with what the
        unqueued path latency needs and doubles in the kernel when a delay needs more, up
        to the longest feedback delay the switch buffers allow (path latency, plus a full
        buffer at line rate at every later hop and every reverse hop) within
        ``_FB_MAX_BYTES`` of a dense line. Longer delays (queues past a buffer with PFC off)
        are clamped. Both are powers of two."""
        R = self.routes
        wait = self.pfc.buffer_bytes / self.cap
        if self.ack_queue:
            wait = wait + np.where(self.rev >= 0, wait[self.rev], 0.0)
        lat = float(self.fb_lat.max(initial=0.0))
        bound = lat + float(np.bincount(R.route, wait[R.links], minlength=1).max(initial=0.0))
        first = 1 << int(np.ceil(lat / _FB_BW) + 8 - 1).bit_length()
        most = first
        while most < np.ceil(bound / _FB_BW) + 8 and 2 * most * 8 * self.K <= _FB_MAX_BYTES:
            most *= 2
        return first, most

    # ---------------- kernel inputs ----------------
    def _cfg_vector(self) -> np.ndarray:
        cfg, pf, dcqcn = self.cfg, self.pfc, self.cc == "dcqcn"
        values = {
            fk.C_DT: cfg.dt_ns, fk.C_DT_QUIET: cfg.dt_quiet_max_ns,
            fk.C_DT_PFC: cfg.dt_pfc_max_ns, fk.C_TAU: cfg.pfc_tau_ns,
            fk.C_QUIET_TOL: cfg.quiet_tol, fk.C_COALESCE: cfg.coalesce_ns,
            fk.C_MAX_TIME: cfg.max_time_ns, fk.C_MAX_STEPS: cfg.max_steps,
            fk.C_ACK_RATIO: self.ack_ratio, fk.C_PKT_WIRE: cfg.packet_bytes * cfg.wire_overhead,
            fk.C_FB_BW: _FB_BW, fk.C_PFC_ON: self.pfc_on, fk.C_PFC_DYN: pf.mode == "dynamic",
            fk.C_RESERVE: pf.reserve_bytes, fk.C_RESUME: pf.resume_offset_bytes,
            fk.C_XOFF: pf.xoff_bytes, fk.C_XON: pf.xon_bytes, fk.C_DCQCN: dcqcn,
            fk.C_ACK_QUEUE: self.ack_queue, fk.C_CAP_MAX: float(self.cap.max()),
            fk.C_ABOVE: self.p_above, fk.C_WO: cfg.wire_overhead,
            fk.C_CNP_INT: self.dp.cnp_interval_ns if dcqcn else 0.0,
            fk.C_ES_ON: cfg.endside is not None and dcqcn,
            fk.C_SAMPLE_INT: cfg.sample_interval_ns, fk.C_DT_FREE: cfg.dt_free_ns}
        v = np.zeros(fk.N_CFG)
        for i, x in values.items():
            v[i] = x
        return v

    def _net(self) -> fk.Net:
        p, R = self.p, self.routes
        cols = {"cap": self.cap, "kmin": self.kmin, "kmax": self.kmax, "pmax": self.pmax,
                "pfc_alpha": self.pfc_alpha, "pfc_gap": self.pfc_gap,
                "ingress_sw": self.ingress_sw, "rev": self.rev, "sw_of": self.pfc_sw_of,
                "level": R.level, "fb_lat": self.fb_lat, "w": self.w,
                "first_link": R.first_link,
                "size_w": self.size_w, "lat": p.flow_latency_ns,
                "flow_start": p.flow_start_ns, "f_rptr": self.f_rptr, "dptr": self.dptr,
                "links": R.links, "hop": R.hop}
        return fk.Net(
            **_banks("net", cols, self._width()),
            dims=np.array([self.L, self.F, R.level.max(initial=0)], np.int64),
            indptr=R.indptr,
            r_order=self.r_order.astype(np.int64, copy=False),
            dependants=self.dependants.astype(np.int64, copy=False),
            pfc_pool=np.asarray(self.pfc_pool, np.float64),
            rec_links=np.array([p.link_names.index(n) for n in self.cfg.record_links],
                               np.int64),
            rec_flows=np.array([p.flow_names.index(n) for n in self.cfg.record_flows],
                               np.int64),
            dcqcn=params_vector(self.dp), cfg=self._cfg_vector())

    def _state(self, net: fk.Net) -> fk.State:
        L, F, Kr = self.L, self.F, self.K
        sf = np.zeros(fk.N_SF)
        sf[fk.F_MARKS_UNTIL] = -np.inf
        sampling = len(net.rec_links) or len(net.rec_flows)
        sf[fk.F_NEXT_SAMPLE] = 0.0 if sampling else np.inf
        sf[fk.F_ES_NEXT] = self.cfg.endside.cnp_window_ns if self.cfg.endside else np.inf
        sf[fk.F_FAIL_T] = np.inf
        si = np.zeros(fk.N_SI, np.int64)
        si[fk.I_FB_LAST] = -1
        line = self.cap[self.routes.first_link] * _BYTES_PER_NS
        fb_first, fb_rows = self._feedback_slots()
        si[fk.I_FB_ROWS], si[fk.I_FB_MAX], si[fk.I_CNP_TOP] = fb_first, fb_rows, 1
        # the CNP delay line's node pool: a step's new marks (at most one per entry) and
        # the pending ones; the kernel writes a node before it reads it, so only the nodes
        # in use touch memory (and are zeroed when the pool goes back to the workspace)
        n_cnp = len(self.routes.links) + _CNP_SLACK if self.cc == "dcqcn" else 1
        cols = {"n_deps_left": self.n_deps_left, "flow_cap": self.flow_cap}
        n_smp = 1024 if sampling else 0
        zeros = _WORKSPACE.zeros
        st = fk.State(
            sf=sf, si=si, **_banks("st", cols, self._width()),
            cc=initial_matrix(line, out=zeros((N_DCQCN_ROWS, Kr), np.float64)),
            cnp_node=zeros((n_cnp, 4), np.int64), cnp_val=zeros((n_cnp,), np.float64),
            smp=zeros((n_smp, 1 + len(net.rec_links) + 2 * len(net.rec_flows)), np.float64))
        st.f[fk.S_UP, :L] = 1.0
        st.f[fk.S_PFC_ALLOW, :L] = np.inf
        st.f[fk.S_START:fk.S_FINISH + 1, :F] = -1.0
        st.f[fk.S_LAST_CNP, :Kr] = -np.inf
        # flows without prerequisites wait in the start heap: in (time, flow) order, which
        # a binary heap with these keys pops in whatever its layout, and a sorted array is one
        ready = (self.n_deps_left == 0).nonzero()[0]
        t0 = self.p.flow_start_ns[ready].astype(np.float64)
        order = t0.argsort(kind="stable")  # ties in flow order (``ready`` ascends)
        st.f[fk.S_HEAP_T, :len(ready)] = t0[order]
        st.i[fk.S_HEAP_F, :len(ready)] = ready[order]
        st.si[fk.I_HEAP] = len(ready)
        return st

    def _width(self) -> int:
        """Width of the kernel's banks: the widest row (links + 1, flows + 1, routes,
        (route, hop) entries, switch buffer pools)."""
        return max(self.L + 1, self.F + 1, self.K, len(self.routes.links),
                   len(self.pfc_pool), 1)

    # ---------------- main loop ----------------
    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        net = self._net()
        st = self._state(net)
        st = self._advance(net, st)
        res = self._result(st, time.perf_counter() - wall0)
        _give_back(net, st)  # the result holds copies (a run that raised drops its arrays)
        return res

    def _advance(self, net: fk.Net, st: fk.State) -> fk.State:
        """Run the kernel to the end, acting on what it hands back (failures, end-side
        windows, a full sample buffer); returns the final state."""
        fails = self._fail_events()
        while True:
            st.sf[fk.F_FAIL_T] = fails[0][0] if fails else np.inf
            code = fk.advance(net, st, self.rng)
            if code == fk.FAIL_DUE:
                while fails and fails[0][0] <= st.sf[fk.F_T] + 1e-9:
                    _, kind, fl = fails.pop(0)
                    net, st = self._apply_failure(kind, fl, net, st)
                st.si[fk.I_REBUILD] = 1
            elif code == fk.ENDSIDE_DUE:
                self._endside(st)
            elif code == fk.SAMPLES_FULL:
                st = st._replace(smp=np.concatenate([st.smp, np.zeros_like(st.smp)]))
            elif code == fk.CNP_FULL:
                st = st._replace(cnp_node=_doubled(st.cnp_node), cnp_val=_doubled(st.cnp_val))
            elif code == fk.MAX_STEPS:
                raise EngineError(f"fluid engine exceeded max_steps={self.cfg.max_steps} at "
                                  f"t={st.sf[fk.F_T] / 1e3:.1f} us")
            else:
                return st

    def _fail_events(self) -> list:
        out = []
        for fl in sorted(self.p.failures, key=lambda x: x.t_ns):
            out.append((float(fl.t_ns), "down", fl))
            if len(fl.reroute_route) or fl.flow_rate_cap_bps is not None:
                out.append((float(fl.t_ns + fl.reroute_delay_ns), "reroute", fl))
        out.sort(key=lambda x: x[0])
        return out

    def _endside(self, st: fk.State) -> None:
        """End of a CNP window: paced QPs whose CNPs persist fall back to DCQCN alone."""
        es = self.cfg.endside
        paced = np.isfinite(self.p.flow_rate_cap_bps[self.p.route_flow])
        cnps = st.f[fk.S_ES_CNPS, :self.K]
        self.es_state, ev = endside_step(self.es_state, np.where(paced, cnps, 0),
                                         np.zeros(self.K, bool), 0, es)
        fell = ev == EV_FALLBACK
        if fell.any():
            st.f[fk.S_FLOW_CAP, self.p.route_flow[fell]] = np.inf
            self.endside_fallbacks += int(fell.sum())
        cnps[:] = 0
        st.sf[fk.F_ES_NEXT] = st.sf[fk.F_T] + float(es.cnp_window_ns)
        st.si[fk.I_ES_DUE] = 0

    def _repace(self, cap_bps: np.ndarray, st: fk.State) -> None:
        """Pacers set to a re-plan's rates; a flow the end-side rules handed back to DCQCN
        stays unpaced (its agent already saw the plan contradicted)."""
        cap = st.f[fk.S_FLOW_CAP, :self.F]
        released = np.isinf(cap) & np.isfinite(self.flow_cap)
        self.flow_cap = np.asarray(cap_bps, np.float64) / _BYTES_PER_NS
        cap[:] = np.where(released, np.inf, self.flow_cap)

    def _apply_failure(self, kind: str, fl, net: fk.Net, st: fk.State):
        """Links go down (or up); affected routes move to their new links.

        Content queued on a failed link, and everything a rerouted route still had in the
        network, is resent from the source (go-back-N after the receiver sees the gap).
        """
        if kind == "down":
            st.f[fk.S_UP, np.asarray(fl.links, np.int64)] = 1.0 if fl.up else 0.0
            return net, st
        if fl.flow_rate_cap_bps is not None:
            self._repace(fl.flow_rate_cap_bps, st)
        if not len(fl.reroute_route):
            return net, st
        R = self.routes
        lists = [R.links[R.indptr[k]:R.indptr[k + 1]] for k in range(self.K)]
        old_q = [st.f[fk.S_Q, R.indptr[k]:R.indptr[k + 1]] for k in range(self.K)]
        for i, k in enumerate(np.asarray(fl.reroute_route, np.int64)):
            lists[k] = np.asarray(fl.new_route(i), np.int64)
            lost = float(old_q[k].sum())
            f = self.p.route_flow[k]
            w = self.w[k]
            if w > 0:
                st.f[fk.S_INJ, f] = max(st.f[fk.S_INJ, f] - lost / w, 0.0)
            st.f[fk.S_DELIV, k] = min(st.f[fk.S_DELIV, k], st.f[fk.S_INJ, f] * w)
            old_q[k] = np.zeros(len(lists[k]))
        lengths = np.array([len(x) for x in lists])
        indptr = np.concatenate(([0], np.cumsum(lengths)))
        self.routes = R = _Routes(self.L, indptr, np.concatenate(lists), self.link_intra)
        self.fb_lat = self._feedback_latency(R)
        q = np.concatenate(old_q)
        E = len(q)
        # the entry rows start afresh (the kernel rebuilds its lists); wider banks if the
        # new routes have more entries
        net = net._replace(f=_widened(net.f, E), i=_widened(net.i, E), indptr=R.indptr)
        st = st._replace(f=_widened(st.f, E), i=_widened(st.i, E))
        net.i[fk.N_LEVEL, :self.L] = R.level
        net.dims[fk.D_MAX_LV] = R.level.max(initial=0)
        net.f[fk.N_FB_LAT] = 0.0
        net.f[fk.N_FB_LAT, :E] = self.fb_lat
        net.i[fk.N_FIRST_LINK, :self.K] = R.first_link
        net.i[[fk.N_LINKS, fk.N_HOP]] = 0
        net.i[fk.N_LINKS, :E], net.i[fk.N_HOP, :E] = R.links, R.hop
        st.f[fk.S_Q:fk.S_WNEW + 1] = 0.0
        st.f[fk.S_Q, :E] = q
        st.i[fk.S_AE:fk.S_P_ROUTE + 1] = 0
        return net, st

    def _link_stats(self, st: fk.State) -> tuple[dict, dict, dict, dict]:
        """Per link name: the largest switch queue (above a byte), PFC pause time and
        episodes, and the ECN-marked fraction of its bytes (DCQCN runs)."""
        names, L = self.p.link_names, self.L
        max_q, pause_ns, pause_cnt = (st.f[fk.S_MAX_Q, :L], st.f[fk.S_PAUSE_NS, :L],
                                      st.f[fk.S_PAUSE_CNT, :L])
        idx = np.flatnonzero(self.egress_sw & (max_q > 1.0))
        maxq = dict(zip([names[i] for i in idx.tolist()], max_q[idx].tolist()))
        paused = np.flatnonzero(pause_ns > 0.5)
        pn = [names[i] for i in paused.tolist()]
        pause = {n: int(round(x)) for n, x in zip(pn, pause_ns[paused].tolist())}
        pcnt = {n: int(max(1, round(x))) for n, x in zip(pn, pause_cnt[paused].tolist())}
        ecn = {}
        if self.cc == "dcqcn":
            marked = np.flatnonzero(st.f[fk.S_MARKED_BYTES, :L] > 0)
            ecn = {names[i]: m / max(b, 1.0) for i, m, b in zip(
                marked.tolist(), st.f[fk.S_MARKED_BYTES, marked].tolist(),
                st.f[fk.S_LINK_BYTES, marked].tolist())}
        return maxq, pause, pcnt, ecn

    def _flow_name(self, f: int) -> str:
        """Flow ``f``'s name (read one at a time: a problem's names may be made when read)."""
        return self.p.flow_names[f] if len(self.p.flow_names) else f"flow{f}"

    def _cnp_counts(self, st: fk.State) -> dict:
        """CNPs seen per QP (``qp<id>``; a route without a QP id by its flow's name and its
        index), in route order. Lists, not numpy scalars, and one comprehension when the
        QPs are distinct (the usual case): the runs' QPs with CNPs number in the hundreds."""
        p = self.p
        ks = np.flatnonzero(st.cc[-1] > 0)
        qps, counts = p.route_qp[ks].tolist(), st.cc[-1, ks].astype(np.int64).tolist()
        if (not qps or min(qps) >= 0) and len(set(qps)) == len(qps):
            return dict(zip([f"qp{qp}" for qp in qps], counts))
        cnps = {}
        for k, qp, n in zip(ks.tolist(), qps, counts):
            key = f"qp{qp}" if qp >= 0 else f"{self._flow_name(p.route_flow[k])}#r{k}"
            cnps[key] = cnps.get(key, 0) + n
        return cnps

    def _timeseries(self, st: fk.State) -> dict:
        n = int(st.si[fk.I_NSMP])
        if n == 0:
            return {}
        cfg = self.cfg
        m, nl, nf = st.smp[:n], len(cfg.record_links), len(cfg.record_flows)
        return {"t_us": m[:, 0].tolist(),
                "queue_bytes": {nm: m[:, 1 + i].tolist()
                                for i, nm in enumerate(cfg.record_links)},
                "rate_gbps": {nm: m[:, 1 + nl + i].tolist()
                              for i, nm in enumerate(cfg.record_flows)},
                "send_gbps": {nm: m[:, 1 + nl + nf + i].tolist()
                              for i, nm in enumerate(cfg.record_flows)}}

    def _result(self, st: fk.State, wall: float) -> SimResult:
        p, cfg = self.p, self.cfg
        names = list(p.link_names)
        F = self.F
        finish, start = st.f[fk.S_FINISH, :F], st.f[fk.S_START, :F]
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
        maxq, pause, pcnt, ecn = self._link_stats(st)
        cnps = self._cnp_counts(st) if self.cc == "dcqcn" else {}
        steps = int(st.si[fk.I_STEPS])
        return SimResult(
            engine="fluid", policy=cfg.policy, scenario=cfg.scenario, seed=cfg.seed,
            makespan_ns=int(fin_ns.max(initial=0)), flow_start_ns=st_ns, flow_finish_ns=fin_ns,
            collectives=colls, link_names=names,
            link_capacity_bps=p.link_capacity_bps.copy(),
            link_bytes=st.f[fk.S_LINK_BYTES, :self.L] / cfg.wire_overhead,
            link_peak_util=np.minimum(st.f[fk.S_PEAK_UTIL, :self.L], 1.0),
            wall_s=wall, events=steps, link_max_queue_bytes=maxq, link_pfc_pause_ns=pause,
            link_pfc_pause_count=pcnt, link_ecn_marked_frac=ecn, qp_cnp_count=cnps,
            timeseries=self._timeseries(st),
            meta={"cc": self.cc, "pfc": self.pfc.mode, "steps": steps,
                  "endside_fallbacks": self.endside_fallbacks,
                  "wire_overhead": cfg.wire_overhead,
                  "unfinished_flows": int(np.sum(fin_ns < 0))})


def _banks(kind: str, cols: dict, width: int) -> dict:
    """Stack named columns into the banks (``f``, ``i``, ``b``) of ``width`` columns of
    the kernel's ``kind`` of arrays, "net" or "st" (unnamed rows and the slots past a
    column's length start at zero)."""
    out = {bank: _WORKSPACE.zeros((len(names), width), _BANK_DTYPES[bank])
           for bank, names in _LAYOUTS[kind].items()}
    rows = _ROWS[kind]
    for name, col in cols.items():
        bank, row = rows[name]
        out[bank][row, :len(col)] = col
    return out


def _doubled(pool: np.ndarray) -> np.ndarray:
    """``pool`` with twice its rows (the new ones not initialised)."""
    out = np.empty((2 * len(pool), *pool.shape[1:]), pool.dtype)
    out[:len(pool)] = pool
    return out


_BANK_DTYPES = {"f": np.float64, "b": np.bool_, "i": np.int64}
_LAYOUTS = {"net": fk.NET_BANKS, "st": fk.ST_BANKS}
#: each layout's rows by name: (bank, row)
_ROWS = {kind: {n: (bank, row) for bank, names in layout.items()
                for row, n in enumerate(names)}
         for kind, layout in _LAYOUTS.items()}


def _give_back(net: fk.Net, st: fk.State) -> None:
    """The run's arrays back to the workspace: all of the banks, and of the CNP delay
    line's node pool the nodes taken (the kernel takes them in order from
    ``si[I_CNP_TOP]``, node 0 unused). Arrays a failure, the sampler or a grown pool
    replaced are not the workspace's (it ignores them)."""
    top = int(st.si[fk.I_CNP_TOP])
    _WORKSPACE.give_back(st.cnp_node, top * st.cnp_node.shape[1])
    _WORKSPACE.give_back(st.cnp_val, top)
    for a in (net.f, net.i, net.b, st.f, st.i, st.b, st.cc, st.smp):
        _WORKSPACE.give_back(a)


def _widened(bank: np.ndarray, width: int) -> np.ndarray:
    """``bank`` with at least ``width`` columns (new ones zero)."""
    if bank.shape[1] >= width:
        return bank
    out = np.zeros((bank.shape[0], width), bank.dtype)
    out[:, :bank.shape[1]] = bank
    return out


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
