"""ECN marking at a switch egress queue (RED/WRED with ``ecn: ecn_all``).

The congestion point of DCQCN marks CE on ECT packets with a probability that grows
linearly with the egress-queue length between ``Kmin`` and ``Kmax`` (Zhu et al., SIGCOMM
2015, §3; NVIDIA DOCA "DCQCN CC Algorithm"); SONiC/SAI expose the same knob as a WRED
profile (``*_min_threshold``, ``*_max_threshold``, ``*_drop_probability`` in percent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RedParams:
    """RED/ECN marking profile of one egress queue.

    Parameters
    ----------
    kmin_bytes : float — queue length below which nothing is marked.
    kmax_bytes : float — queue length at which the probability reaches ``pmax``.
    pmax : float — marking probability at ``kmax_bytes`` (0..1).
    above_kmax : float — probability above ``kmax_bytes``: 1.0 in the DCQCN paper's fluid
        model and in HPCC ns-3 (``mark with probability 1``); some ASICs keep ``pmax``.

    Notes
    -----
    Presets: :meth:`dcqcn_paper` (Kmin 5 KB, Kmax 200 KB, Pmax 1 %, [UNCONFIRMED against the
    PDF], domain-facts §1.1), :meth:`sonic_azure_lossless` (1 MiB / 2 MiB / 5 %, SONiC
    ``qos_config.j2``), :meth:`per_gbps` (HPCC ns-3: Kmin 4 KB/Gb/s, Kmax 16 KB/Gb/s,
    Pmax 0.2 — the validation set's ``config.ecn``).
    """

    kmin_bytes: float
    kmax_bytes: float
    pmax: float
    above_kmax: float = 1.0

    @classmethod
    def dcqcn_paper(cls) -> RedParams:
        return cls(5_000.0, 200_000.0, 0.01)

    @classmethod
    def sonic_azure_lossless(cls) -> RedParams:
        return cls(1_048_576.0, 2_097_152.0, 0.05)

    @classmethod
    def per_gbps(cls, rate_bps: float, kmin_bytes_per_gbps: float = 4000.0,
                 kmax_bytes_per_gbps: float = 16000.0, pmax: float = 0.2) -> RedParams:
        """Thresholds that scale with the port speed, as the HPCC ns-3 scripts set them."""
        g = rate_bps / 1e9
        return cls(kmin_bytes_per_gbps * g, kmax_bytes_per_gbps * g, pmax)


def red_mark_probability(q_bytes: np.ndarray, kmin_bytes: np.ndarray, kmax_bytes: np.ndarray,
                         pmax: np.ndarray, above_kmax: np.ndarray | float = 1.0) -> np.ndarray:
    """Vectorised RED marking probability ``p(q)`` (domain-facts §1.1).

    ``0`` for ``q <= Kmin``, ``(q - Kmin)/(Kmax - Kmin) * Pmax`` up to ``Kmax``,
    ``above_kmax`` beyond. ``kmin_bytes = inf`` disables marking on a queue.
    """
    q = np.asarray(q_bytes, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        span = np.maximum(kmax_bytes - kmin_bytes, 1e-9)
        p = np.clip((q - kmin_bytes) / span, 0.0, 1.0) * pmax
    p = np.where(q > kmax_bytes, above_kmax, p)
    return np.where(q > kmin_bytes, p, 0.0)
