"""PFC (IEEE 802.1Qbb) ingress thresholds: static XOFF/XON or a dynamic shared-buffer limit.

A switch accounts every buffered packet to the ingress port (priority group) it arrived on.
When that port's use crosses XOFF, the switch sends PAUSE to the upstream transmitter; when
it falls back to XON it sends RESUME (pause value 0). See domain-facts §2.1–2.3: SAI
``XOFF_TH``/``XON_TH``/``XON_OFFSET_TH`` and ``SHARED_DYNAMIC_TH`` (Choudhury–Hahne dynamic
threshold: a PG may grow while ``use < alpha * (pool - pool_use)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PfcParams:
    """PFC threshold model of every switch ingress port.

    Parameters
    ----------
    mode : {"dynamic", "static", "off"}
        ``dynamic``: HPCC ns-3 MMU — PAUSE when the port's shared use
        ``>= alpha * (buffer - sum(headroom) - sum(reserve) - total_shared_used)``,
        RESUME when ``shared use + resume_offset <= threshold``.
        ``static``: htsim lossless input queue — PAUSE at ``xoff_bytes``, RESUME at
        ``xon_bytes``.
    buffer_bytes : float — shared buffer per switch (ns-3 validation: 16 MiB).
    alpha_by_gbps : tuple of (gbps, alpha) — dynamic-threshold alpha per port speed;
        ports faster than the largest key double alpha per doubling of speed
        (validation ``alpha_rule``).
    alpha_default : float — alpha for speeds not listed (1/8 in the validation set).
    reserve_bytes : float — per-port guaranteed (non-shared) buffer (4 KB).
    resume_offset_bytes : float — XON hysteresis below the dynamic threshold (3 KB).
    headroom_rtts : float — headroom = ``headroom_rtts * rate * link_delay`` (3 in ns-3).
    xoff_bytes, xon_bytes : float — static thresholds (htsim: 256 / 253 packets of 4 KiB).
    pause_delay : bool — PAUSE/RESUME frames take the link delay to act (ns-3) or act
        instantly (htsim).
    """

    mode: str = "dynamic"
    buffer_bytes: float = 16 * 1024 * 1024
    alpha_by_gbps: tuple[tuple[float, float], ...] = ((100.0, 0.125),)
    alpha_default: float = 0.125
    reserve_bytes: float = 4096.0
    resume_offset_bytes: float = 3072.0
    headroom_rtts: float = 3.0
    xoff_bytes: float = 1_048_576.0
    xon_bytes: float = 1_036_288.0
    pause_delay: bool = True

    @classmethod
    def hpcc_ns3(cls) -> PfcParams:
        """The HPCC ns-3 shared-buffer MMU of the validation set (``config.pfc_ns3``)."""
        return cls(mode="dynamic")

    @classmethod
    def htsim_static(cls) -> PfcParams:
        """htsim's static lossless input queue (``config.pfc_htsim``)."""
        return cls(mode="static", pause_delay=False)

    @classmethod
    def off(cls) -> PfcParams:
        return cls(mode="off")

    def port_alpha(self, rate_bps: np.ndarray) -> np.ndarray:
        """Dynamic-threshold alpha of each port from its speed."""
        gb = np.asarray(rate_bps, dtype=np.float64) / 1e9
        out = np.full(gb.shape, self.alpha_default)
        if self.alpha_by_gbps:
            table = sorted((float(k), float(v)) for k, v in self.alpha_by_gbps)
            for k, v in table:
                # np.isclose's test (rtol 1e-5, atol 1e-8) without its overhead: this runs
                # once per fluid engine run
                out = np.where(np.abs(gb - k) <= 1e-8 + 1e-5 * abs(k), v, out)
            top, a_top = table[-1]
            # "doubled per doubling of port rate above it" (validation alpha_rule)
            out = np.where(gb > top * (1 + 1e-9), a_top * gb / top, out)
        return out

    def headroom_bytes(self, rate_bps: np.ndarray, delay_ns: np.ndarray) -> np.ndarray:
        return self.headroom_rtts * np.asarray(rate_bps) / 8.0 * np.asarray(delay_ns) * 1e-9


def dynamic_threshold_bytes(alpha: np.ndarray, free_bytes: np.ndarray) -> np.ndarray:
    """Choudhury–Hahne threshold ``alpha * free`` (SAI ``SHARED_DYNAMIC_TH``)."""
    return alpha * np.maximum(free_bytes, 0.0)
