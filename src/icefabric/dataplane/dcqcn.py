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
from numba import njit

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


def params_vector(p: DcqcnParams) -> np.ndarray:
    """``p`` as the float vector the compiled kernel reads (indices ``PV_G`` … ``PV_HYPER``)."""
    return np.array([p.g, p.alpha_update_interval_ns, p.alpha_on_first_cnp,
                     p.rate_decrease_interval_ns, p.rate_on_first_cnp, p.clamp_target_rate,
                     p.clamp_after_increase, p.rate_increase_timer_ns,
                     p.byte_counter_bytes or 0.0, p.fast_recovery_steps, p.rate_ai_bps,
                     p.rate_hai_bps, p.min_rate_bps, p.max_decrease_fraction,
                     p.hyper_multiplier], dtype=np.float64)


#: indices of that vector
(PV_G, PV_A_INT, PV_A_FIRST, PV_DEC_INT, PV_R_FIRST, PV_CLAMP, PV_CLAMP_INC, PV_INC_T, PV_BC,
 PV_FR, PV_AI, PV_HAI, PV_MIN, PV_MAXDEC, PV_HYPER) = range(15)


#: rows of the compiled kernel's state matrix: the DcqcnState fields in order
(CC_LINE, CC_RC, CC_RT, CC_ALPHA, CC_STARTED, CC_ALPHA_CNP, CC_DEC_CNP, CC_TSTAGE, CC_BSTAGE,
 CC_BCOUNT, CC_T_ALPHA, CC_T_DEC, CC_T_INC, CC_CNPS) = range(14)


def state_matrix(s: DcqcnState) -> np.ndarray:
    """The state as one float matrix, a row per field (what the compiled kernel takes;
    flags and counters are exact in float64)."""
    return np.array([getattr(s, f.name) for f in fields(s)], dtype=np.float64).reshape(
        len(fields(s)), -1)


#: rows of that matrix
N_DCQCN_ROWS = CC_CNPS + 1


def initial_matrix(line_rate_bps: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``state_matrix(dcqcn_init(line_rate_bps, p))`` built in place (fresh QPs at line rate,
    timers idle): the fluid engine sets it up on every run, and stacking fourteen arrays
    cost more than the small runs' steps. ``out``: a zero array of shape
    ``(N_DCQCN_ROWS, len(line_rate_bps))`` to fill (the engine's reused memory)."""
    line = np.asarray(line_rate_bps, dtype=np.float64)
    m = np.zeros((N_DCQCN_ROWS, len(line))) if out is None else out
    m[CC_LINE] = m[CC_RC] = m[CC_RT] = line
    m[CC_ALPHA] = 1.0
    m[CC_T_ALPHA:CC_T_INC + 1] = INF
    return m


def _write_back(s: DcqcnState, m: np.ndarray) -> None:
    for row, f in enumerate(fields(s)):
        arr = getattr(s, f.name)
        arr[:] = m[row].astype(arr.dtype)


@njit(cache=True)
def _increase(s, i, pv) -> None:
    """One rate-increase event of QP ``i`` (stage counters read before they advance)."""
    f = pv[PV_FR]
    t = s[CC_TSTAGE, i]
    b = s[CC_BSTAGE, i] if pv[PV_BC] > 0 else t
    lo, hi = min(t, b), max(t, b)
    if pv[PV_HYPER] > 0:  # paper / ns3-rdma: FR if max<F, AI if min<F<=max, HAI if min>=F
        hyper = lo >= f
        inc = (lo - f + 1) * pv[PV_HAI] if hyper else (pv[PV_AI] if hi >= f else 0.0)
    else:  # firmware / HPCC ns-3: HAI if min>F, AI if max>=F, else fast recovery
        hyper = lo > f
        inc = pv[PV_HAI] if hyper else (pv[PV_AI] if hi >= f else 0.0)
    r = min(s[CC_RT, i] + inc, s[CC_LINE, i])
    s[CC_RT, i] = r
    s[CC_RC, i] = 0.5 * (s[CC_RC, i] + r)


@njit(cache=True, inline="always")
def _pow_int(b, m):
    """``b ** m`` for a whole ``m >= 0`` (float): products for the few expiries of a step
    (``pow`` was a tenth of a DCQCN validation run), ``**`` beyond."""
    if m > 8:
        return b ** m
    out = 1.0
    for _ in range(int(m)):
        out *= b
    return out


@njit(cache=True, inline="always")
def _cnp_and_alpha(s, i, cnp, t_ns, pv) -> None:
    if cnp:
        s[CC_CNPS, i] += 1
        s[CC_ALPHA_CNP, i] = 1.0
        s[CC_DEC_CNP, i] = 1.0
        if not s[CC_STARTED, i]:
            s[CC_STARTED, i] = 1.0
            s[CC_ALPHA, i] = pv[PV_A_FIRST]
            s[CC_ALPHA_CNP, i] = 0.0  # ns-3 clears it: the first α update is a decay
            s[CC_RC, i] *= pv[PV_R_FIRST]
            s[CC_RT, i] = s[CC_RC, i]
            s[CC_T_ALPHA, i] = t_ns + pv[PV_A_INT]
            # +1 ns: the decrease check follows the α update (ns-3 ScheduleDecreaseRateMlx)
            s[CC_T_DEC, i] = t_ns + pv[PV_DEC_INT] + 1.0
    # α timer: first expiry uses the latched flag, the rest decay (closed form).
    if s[CC_T_ALPHA, i] <= t_ns:
        g = pv[PV_G]
        n = np.floor((t_ns - s[CC_T_ALPHA, i]) / pv[PV_A_INT]) + 1.0
        a = s[CC_ALPHA, i]
        a = (1 - g) * a + g if s[CC_ALPHA_CNP, i] else (1 - g) * a
        s[CC_ALPHA, i] = a * _pow_int(1 - g, n - 1)
        s[CC_ALPHA_CNP, i] = 0.0
        s[CC_T_ALPHA, i] += n * pv[PV_A_INT]


@njit(cache=True)
def dcqcn_update_qp(s, i, cnp, t_ns, pv, sent_bytes) -> None:
    """:func:`dcqcn_update` for QP ``i`` of state matrix ``s`` (:func:`state_matrix`;
    compiled; ``sent_bytes`` < 0: no byte count)."""
    _cnp_and_alpha(s, i, cnp, t_ns, pv)
    if pv[PV_DEC_INT] <= 0:
        dec = s[CC_DEC_CNP, i] > 0
        s[CC_T_DEC, i] = INF
    else:
        dec = s[CC_T_DEC, i] <= t_ns and s[CC_DEC_CNP, i] > 0
        if s[CC_T_DEC, i] <= t_ns:
            n = np.floor((t_ns - s[CC_T_DEC, i]) / pv[PV_DEC_INT]) + 1.0
            s[CC_T_DEC, i] += n * pv[PV_DEC_INT]
    if dec:
        clamp = pv[PV_CLAMP] > 0 or (pv[PV_CLAMP_INC] > 0 and (s[CC_TSTAGE, i] > 0
                                                           or s[CC_BSTAGE, i] > 0))
        r = s[CC_RC, i]
        if clamp:
            s[CC_RT, i] = r
        cut = min(s[CC_ALPHA, i] / 2.0, pv[PV_MAXDEC])
        s[CC_RC, i] = max(pv[PV_MIN], r * (1.0 - cut))
        s[CC_TSTAGE, i] = 0.0
        s[CC_BSTAGE, i] = 0.0
        s[CC_BCOUNT, i] = 0.0
        s[CC_DEC_CNP, i] = 0.0
        s[CC_T_INC, i] = t_ns + pv[PV_INC_T]
    for _ in range(64):  # at most a few expiries per call; bounded for safety
        if not s[CC_T_INC, i] <= t_ns:
            break
        _increase(s, i, pv)
        s[CC_TSTAGE, i] += 1
        s[CC_T_INC, i] += pv[PV_INC_T]
    if pv[PV_BC] > 0 and sent_bytes >= 0:
        s[CC_BCOUNT, i] += sent_bytes if s[CC_STARTED, i] else 0.0
        if s[CC_BCOUNT, i] >= pv[PV_BC]:
            _increase(s, i, pv)
            s[CC_BSTAGE, i] += 1
            s[CC_BCOUNT, i] -= pv[PV_BC]


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
    sent = (np.full(len(cnp), -1.0) if sent_bytes is None
            else np.asarray(sent_bytes, dtype=np.float64))
    m = state_matrix(s)
    _update_all(m, cnp, float(t_ns), params_vector(p), sent)
    _write_back(s, m)
    return s


@njit(cache=True)
def _update_all(s, cnp, t_ns, pv, sent) -> None:
    for i in range(len(cnp)):
        dcqcn_update_qp(s, i, cnp[i], t_ns, pv, sent[i])


def dcqcn_next_event_ns(s: DcqcnState) -> float:
    """Earliest timer that can change a rate (increase, or a pending decrease)."""
    t = np.min(s.t_inc_ns, initial=INF)
    if s.dec_cnp.any():
        t = min(t, float(np.min(s.t_dec_ns[s.dec_cnp])))
    return float(t)


register_cc("dcqcn", init=dcqcn_init, update=dcqcn_update, next_event_ns=dcqcn_next_event_ns,
            params=DcqcnParams)
