"""DCQCN reaction point (sender NIC) as a vectorised kernel over arrays of queue pairs.

Three parameter profiles (all frozen, sources below and in domain-facts §1):

* :meth:`DcqcnParams.paper` — Zhu et al., "Congestion Control for Large-Scale RDMA
  Deployments", SIGCOMM 2015 (40 GbE values as reproduced by the public fluid-model code:
  g = 1/256, timers 55 µs, byte counter 10 MB, F = 5, R_AI 40 Mb/s; R_HAI 200 Mb/s from
  the author's ns-3 config; [UNCONFIRMED against the PDF]).
* :meth:`DcqcnParams.nvidia_firmware` — ConnectX NVConfig defaults (NVIDIA DOCA "DCQCN CC
  Parameters", mlxconfig dumps, isekai ``rdma_roce_cc_dcqcn.h``): DCE_TCP_G 1019/1024,
  DCE_TCP_RTT 1 µs, INITIAL_ALPHA_VALUE 1023/1024, RATE_REDUCE_MONITOR_PERIOD 4 µs,
  RPG_TIME_RESET 300 µs, RPG_BYTE_RESET 32767 (unit [UNCONFIRMED]), RPG_THRESHOLD 1,
  RPG_AI_RATE 5 Mb/s, RPG_HAI_RATE 50 Mb/s, RPG_MIN_RATE 1 Mb/s, RPG_MIN_DEC_FAC 50 %,
  CLAMP_TGT_RATE 0, CLAMP_TGT_RATE_AFTER_TIME_INC 1.
* :meth:`DcqcnParams.hpcc_ns3_100g` — the HPCC ns-3 "Mellanox" DCQCN (``rdma-hw.cc``,
  ``cc_mode 1``) with the validation set's ``config.dcqcn``: g = 1/256, α every 1 µs,
  α = 1 on the first CNP, decrease checked every 4 µs, increase timer 300 µs, F = 1,
  AI 20 Mb/s, HAI 200 Mb/s, min rate 1 Gb/s, no byte counter, no target clamp.

Firmware algorithm (HPCC ns-3 ``cnp_received_mlx``/``UpdateAlphaMlx``/
``CheckRateDecreaseMlx``/``RateIncEventTimerMlx``; isekai ``HandleAlphaUpdateTimer`` …):

* CNP: latch ``alpha_cnp`` and ``dec_cnp``. First CNP: ``alpha = alpha_on_first_cnp``,
  start the α timer and the decrease timer (first check one decrease interval later);
  ``Rc = Rt = rate_on_first_cnp * Rc``.
* α timer: ``alpha = (1-g) alpha + g`` if a CNP was latched, else ``(1-g) alpha``.
* decrease timer: if ``dec_cnp``: ``Rt = Rc`` when clamping applies, ``Rc = max(min_rate,
  Rc (1 - alpha/2))`` (reduction capped at ``max_decrease_fraction``), reset the stage
  counters and restart the increase timer.
* increase timer / byte counter: fast recovery ``Rc = (Rc+Rt)/2`` below the threshold F,
  additive (``Rt += AI``) at it, hyper (``Rt += HAI``, paper: ``i·HAI``) above; ``Rt`` capped
  at line rate.

The paper variant cuts on every CNP (``rate_decrease_interval_ns = 0``) and its CNPs are
paced by the NP (``cnp_interval_ns`` = 50 µs). Its α "every K µs without CNP" rule is
modelled by the same α timer with ``K`` = 55 µs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from icefabric.dataplane.cc import register_cc

INF = np.inf


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN parameters (times in ns, rates in bit/s). See the module docstring."""

    g: float = 1.0 / 256
    alpha_update_interval_ns: float = 1_000.0
    alpha_on_first_cnp: float = 1.0
    rate_decrease_interval_ns: float = 4_000.0
    rate_on_first_cnp: float = 1.0
    clamp_target_rate: bool = False
    clamp_after_increase: bool = True
    rate_increase_timer_ns: float = 300_000.0
    byte_counter_bytes: float | None = None
    fast_recovery_steps: int = 1
    rate_ai_bps: float = 20e6
    rate_hai_bps: float = 200e6
    min_rate_bps: float = 1e9
    max_decrease_fraction: float = 0.5
    hyper_multiplier: bool = False  # paper/ns3-rdma: Rt += i * HAI, i = min(T,B) - F + 1
    cnp_interval_ns: float = 0.0  # NP pacing: at most one CNP per interval (0 = per mark)
    name: str = "custom"

    @classmethod
    def hpcc_ns3_100g(cls) -> DcqcnParams:
        """HPCC ns-3 Mellanox DCQCN at 100G, exactly the validation ``config.dcqcn``."""
        return cls(name="hpcc_ns3_100g")

    @classmethod
    def nvidia_firmware(cls) -> DcqcnParams:
        """ConnectX NVConfig defaults (domain-facts §1.2 table)."""
        return cls(g=(1024 - 1019) / 1024, alpha_update_interval_ns=1_000.0,
                   alpha_on_first_cnp=1023 / 1024, rate_decrease_interval_ns=4_000.0,
                   rate_on_first_cnp=1.0, clamp_target_rate=False, clamp_after_increase=True,
                   rate_increase_timer_ns=300_000.0, byte_counter_bytes=32767.0,
                   fast_recovery_steps=1, rate_ai_bps=5e6, rate_hai_bps=50e6,
                   min_rate_bps=1e6, max_decrease_fraction=0.5, name="nvidia_firmware")

    @classmethod
    def paper(cls) -> DcqcnParams:
        """Zhu et al. SIGCOMM 2015 values (domain-facts §1.1, [UNCONFIRMED vs PDF])."""
        return cls(g=1.0 / 256, alpha_update_interval_ns=55_000.0, alpha_on_first_cnp=1.0,
                   rate_decrease_interval_ns=0.0, rate_on_first_cnp=1.0,
                   clamp_target_rate=True, clamp_after_increase=False,
                   rate_increase_timer_ns=55_000.0, byte_counter_bytes=10e6,
                   fast_recovery_steps=5, rate_ai_bps=40e6, rate_hai_bps=200e6,
                   min_rate_bps=10e6, max_decrease_fraction=0.5, hyper_multiplier=True,
                   cnp_interval_ns=50_000.0, name="paper")

    @classmethod
    def profile(cls, name: str) -> DcqcnParams:
        try:
            return {"hpcc_ns3_100g": cls.hpcc_ns3_100g, "nvidia_firmware": cls.nvidia_firmware,
                    "paper": cls.paper}[name]()
        except KeyError:
            raise ValueError(f"unknown DCQCN profile {name!r}; use hpcc_ns3_100g, "
                             "nvidia_firmware or paper") from None

    @classmethod
    def from_validation_config(cls, cfg: dict) -> DcqcnParams:
        """Read a validation file's ``config.dcqcn`` group (µs, Mb/s)."""
        base = cls.hpcc_ns3_100g()
        bc = cfg.get("byte_counter_bytes")
        cnp = cfg.get("cnp_interval_us")
        return replace(
            base,
            g=float(cfg.get("alpha_gain_g", base.g)),
            alpha_update_interval_ns=float(cfg.get("alpha_update_interval_us", 1.0)) * 1e3,
            alpha_on_first_cnp=float(cfg.get("alpha_on_first_cnp", 1.0)),
            rate_decrease_interval_ns=float(cfg.get("rate_decrease_interval_us", 4.0)) * 1e3,
            rate_on_first_cnp=float(cfg.get("rate_on_first_cnp_fraction", 1.0)),
            clamp_target_rate=bool(cfg.get("clamp_target_rate", False)),
            rate_increase_timer_ns=float(cfg.get("rate_increase_timer_us", 300.0)) * 1e3,
            byte_counter_bytes=None if bc is None else float(bc),
            fast_recovery_steps=int(cfg.get("fast_recovery_steps", 1)),
            rate_ai_bps=float(cfg.get("rate_ai_mbps", 20)) * 1e6,
            rate_hai_bps=float(cfg.get("rate_hai_mbps", 200)) * 1e6,
            min_rate_bps=float(cfg.get("min_rate_mbps", 1000)) * 1e6,
            cnp_interval_ns=0.0 if cnp is None else float(cnp) * 1e3,
            name="validation")

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class DcqcnState:
    """Per-QP reaction-point state (structure of arrays, one entry per QP)."""

    line_bps: np.ndarray
    rc_bps: np.ndarray
    rt_bps: np.ndarray
    alpha: np.ndarray
    started: np.ndarray  # first CNP seen
    alpha_cnp: np.ndarray
    dec_cnp: np.ndarray
    time_stage: np.ndarray
    byte_stage: np.ndarray
    byte_count: np.ndarray
    t_alpha_ns: np.ndarray  # next timer expiries (inf = not running)
    t_dec_ns: np.ndarray
    t_inc_ns: np.ndarray
    cnp_count: np.ndarray

    def take(self, idx: np.ndarray) -> DcqcnState:
        return DcqcnState(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def put(self, idx: np.ndarray, other: DcqcnState) -> None:
        for f in fields(self):
            getattr(self, f.name)[idx] = getattr(other, f.name)


def dcqcn_init(line_rate_bps: np.ndarray, p: DcqcnParams) -> DcqcnState:
    """Fresh QPs: start at line rate (``initial_rate``), no CNP seen, timers idle."""
    line = np.asarray(line_rate_bps, dtype=np.float64).copy()
    n = len(line)
    return DcqcnState(
        line_bps=line, rc_bps=line.copy(), rt_bps=line.copy(), alpha=np.ones(n),
        started=np.zeros(n, bool), alpha_cnp=np.zeros(n, bool), dec_cnp=np.zeros(n, bool),
        time_stage=np.zeros(n, np.int64), byte_stage=np.zeros(n, np.int64),
        byte_count=np.zeros(n), t_alpha_ns=np.full(n, INF), t_dec_ns=np.full(n, INF),
        t_inc_ns=np.full(n, INF), cnp_count=np.zeros(n, np.int64))


def _increase(s: DcqcnState, m: np.ndarray, p: DcqcnParams) -> None:
    """One rate-increase event for the QPs in mask ``m`` (stage counters read before)."""
    if not m.any():
        return
    f = p.fast_recovery_steps
    t = s.time_stage[m]
    b = s.byte_stage[m] if p.byte_counter_bytes else t
    lo, hi = np.minimum(t, b), np.maximum(t, b)
    if p.hyper_multiplier:  # paper / ns3-rdma: FR if max<F, AI if min<F<=max, HAI if min>=F
        hyper = lo >= f
        additive = (hi >= f) & ~hyper
        inc = np.where(hyper, (lo - f + 1) * p.rate_hai_bps, np.where(additive, p.rate_ai_bps, 0))
    else:  # firmware / HPCC ns-3: HAI if min>F, AI if max>=F, else fast recovery
        hyper = lo > f
        additive = (hi >= f) & ~hyper
        inc = np.where(hyper, p.rate_hai_bps, np.where(additive, p.rate_ai_bps, 0.0))
    rt = np.minimum(s.rt_bps[m] + inc, s.line_bps[m])
    s.rt_bps[m] = rt
    s.rc_bps[m] = 0.5 * (s.rc_bps[m] + rt)


def dcqcn_update(s: DcqcnState, cnp: np.ndarray, t_ns: float, p: DcqcnParams,
                 sent_bytes: np.ndarray | None = None) -> DcqcnState:
    """Apply CNPs that arrived by ``t_ns`` and fire every timer due at or before ``t_ns``.

    Parameters
    ----------
    s : DcqcnState — modified in place and returned.
    cnp : bool array — QPs that received at least one CNP since the previous call.
    t_ns : float — current time; the caller steps time so that at most one decrease and
        one increase expiry fall in a step (α expiries are applied in closed form).
    p : DcqcnParams
    sent_bytes : array, optional — bytes sent since the previous call (byte counter).
    """
    cnp = np.asarray(cnp, dtype=bool)
    if cnp.any():
        s.cnp_count += cnp
        first = cnp & ~s.started
        s.alpha_cnp |= cnp
        s.dec_cnp |= cnp
        if first.any():
            s.started |= first
            s.alpha[first] = p.alpha_on_first_cnp
            s.alpha_cnp[first] = False  # ns-3 clears it: the first α update is a decay
            s.rc_bps[first] *= p.rate_on_first_cnp
            s.rt_bps[first] = s.rc_bps[first]
            s.t_alpha_ns[first] = t_ns + p.alpha_update_interval_ns
            # +1 ns: the decrease check follows the α update (ns-3 ScheduleDecreaseRateMlx)
            s.t_dec_ns[first] = t_ns + p.rate_decrease_interval_ns + 1.0
    # α timer: first expiry uses the latched flag, the rest decay (closed form).
    due = s.t_alpha_ns <= t_ns
    if due.any():
        n = np.floor((t_ns - s.t_alpha_ns[due]) / p.alpha_update_interval_ns) + 1.0
        a = s.alpha[due]
        a = np.where(s.alpha_cnp[due], (1 - p.g) * a + p.g, (1 - p.g) * a)
        s.alpha[due] = a * (1 - p.g) ** (n - 1)
        s.alpha_cnp[due] = False
        s.t_alpha_ns[due] += n * p.alpha_update_interval_ns
    # decrease check
    if p.rate_decrease_interval_ns <= 0:
        dec = s.dec_cnp.copy()
        s.t_dec_ns[:] = INF
    else:
        dued = s.t_dec_ns <= t_ns
        dec = dued & s.dec_cnp
        if dued.any():
            n = np.floor((t_ns - s.t_dec_ns[dued]) / p.rate_decrease_interval_ns) + 1.0
            s.t_dec_ns[dued] += n * p.rate_decrease_interval_ns
    if dec.any():
        clamp = np.full(int(dec.sum()), p.clamp_target_rate)
        if p.clamp_after_increase:
            clamp |= (s.time_stage[dec] > 0) | (s.byte_stage[dec] > 0)
        rc = s.rc_bps[dec]
        s.rt_bps[dec] = np.where(clamp, rc, s.rt_bps[dec])
        cut = np.minimum(s.alpha[dec] / 2.0, p.max_decrease_fraction)
        s.rc_bps[dec] = np.maximum(p.min_rate_bps, rc * (1.0 - cut))
        s.time_stage[dec] = 0
        s.byte_stage[dec] = 0
        s.byte_count[dec] = 0.0
        s.dec_cnp[dec] = False
        s.t_inc_ns[dec] = t_ns + p.rate_increase_timer_ns
    # increase timer (at most a few expiries per call; loop for safety)
    for _ in range(64):
        inc = s.t_inc_ns <= t_ns
        if not inc.any():
            break
        _increase(s, inc, p)
        s.time_stage[inc] += 1
        s.t_inc_ns[inc] += p.rate_increase_timer_ns
    if p.byte_counter_bytes and sent_bytes is not None:
        s.byte_count += np.where(s.started, sent_bytes, 0.0)
        binc = s.byte_count >= p.byte_counter_bytes
        if binc.any():
            _increase(s, binc, p)
            s.byte_stage[binc] += 1
            s.byte_count[binc] -= p.byte_counter_bytes
    return s


def dcqcn_next_event_ns(s: DcqcnState) -> float:
    """Earliest timer that can change a rate (increase, or a pending decrease)."""
    t = np.min(s.t_inc_ns, initial=INF)
    if s.dec_cnp.any():
        t = min(t, float(np.min(s.t_dec_ns[s.dec_cnp])))
    return float(t)


register_cc("dcqcn", init=dcqcn_init, update=dcqcn_update, next_event_ns=dcqcn_next_event_ns,
            params=DcqcnParams)
