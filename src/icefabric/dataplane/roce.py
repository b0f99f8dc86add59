"""RoCEv2 endpoint facts: UDP source-port derivation, NIC port limits, QPNs, multi-QP splits.

A RoCEv2 packet is UDP to port 4791. Its source port is the only per-QP field a
switch can hash on (the IPs are fixed per NIC pair), so it decides the ECMP path.
Linux derives it from the GRH flow label, and when the application leaves the flow
label at 0 (NCCL does), from the product of the two QP numbers.

References
----------
.. [1] Linux ``include/rdma/ib_verbs.h``: ``rdma_calc_flow_label``,
   ``rdma_flow_label_to_udp_sport``, ``rdma_get_udp_sport``,
   ``IB_ROCE_UDP_ENCAP_VALID_PORT_MIN = 0xC000`` (M. Zhang, "RDMA/core: Add hash
   functions to calculate RoCEv2 flowlabel and UDP source port", 2020),
   https://github.com/torvalds/linux/blob/master/include/rdma/ib_verbs.h
.. [2] Linux ``drivers/infiniband/hw/mlx5/qp.c``, ``mlx5_set_path_udp_sport()``.
.. [3] rdma-core ``providers/mlx5/verbs.c``, ``mlx5dv_modify_qp_udp_sport()``
   (RTS->RTS change of a live RC/UC QP's source port).
.. [4] NCCL 2.30.7 ``src/transport/net_ib/connect.cc`` (``grh.flow_label = 0``;
   ``NCCL_IB_QPS_PER_CONNECTION``, ``NCCL_IB_SPLIT_DATA_ON_QPS``).
.. [5] Huawei CANN HCCL: ``HCCL_RDMA_QPS_PER_CONNECTION`` and
   ``HCCL_RDMA_QP_PORT_CONFIG_PATH``/``MultiQpSrcPort.cfg``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "IB_GRH_FLOWLABEL_MASK",
    "NIC_PORT_LIMITS",
    "QPN_MASK",
    "ROCE_UDP_DPORT",
    "SPORT_MAX",
    "SPORT_MIN",
    "NicPortLimits",
    "allocate_qpns",
    "default_sports",
    "flow_label_for_sport",
    "flow_label_to_udp_sport",
    "nccl_qp_for_request",
    "qps_split",
    "rdma_calc_flow_label",
    "rdma_get_udp_sport",
]

ROCE_UDP_DPORT = 4791
"""IANA UDP destination port of RoCEv2."""
SPORT_MIN = 0xC000
"""``IB_ROCE_UDP_ENCAP_VALID_PORT_MIN``: lowest kernel-derived source port (49152)."""
SPORT_MAX = 0xFFFF
IB_GRH_FLOWLABEL_MASK = 0x000FFFFF
QPN_MASK = 0xFFFFFF
"""QP numbers are 24 bits."""


def rdma_calc_flow_label(lqpn: object, rqpn: object) -> np.ndarray:
    """Flow label the kernel derives from a QP pair (``rdma_calc_flow_label``).

    ``v = lqpn * rqpn (u64); v ^= v >> 20; v ^= v >> 40; return v & 0xFFFFF``.
    Symmetric in ``(lqpn, rqpn)``, so both directions of an RC connection get the
    same label and source port.

    Parameters
    ----------
    lqpn, rqpn : int or array of int
        Local and remote 24-bit QP numbers.

    Returns
    -------
    numpy.ndarray of int64
        20-bit flow labels.

    Examples
    --------
    >>> hex(int(rdma_calc_flow_label(0x1234, 0x5678)))
    '0x60002'
    """
    v = np.asarray(lqpn).astype(np.uint64) * np.asarray(rqpn).astype(np.uint64)
    v ^= v >> np.uint64(20)
    v ^= v >> np.uint64(40)
    return (v & np.uint64(IB_GRH_FLOWLABEL_MASK)).astype(np.int64)


def flow_label_to_udp_sport(fl: object) -> np.ndarray:
    """UDP source port for a flow label (``rdma_flow_label_to_udp_sport``).

    ``fl_low = fl & 0x3FFF; fl_low ^= (fl & 0xFC000) >> 14; return fl_low | 0xC000``:
    14 bits of entropy, always in ``[0xC000, 0xFFFF]``.

    Examples
    --------
    >>> hex(int(flow_label_to_udp_sport(0x4001)))
    '0xc000'
    """
    f = np.asarray(fl).astype(np.int64)
    low = (f & 0x03FFF) ^ ((f & 0xFC000) >> 14)
    return low | SPORT_MIN


def rdma_get_udp_sport(fl: object, lqpn: object, rqpn: object) -> np.ndarray:
    """Source port a RoCEv2 QP uses (``rdma_get_udp_sport``; mlx5 at INIT->RTR).

    A zero flow label means "auto": the label is derived from the QP numbers.

    Parameters
    ----------
    fl : int or array
        GRH flow label given at INIT->RTR (0 = derive from the QPNs; NCCL passes 0).
    lqpn, rqpn : int or array
        Local and remote QP numbers.

    Returns
    -------
    numpy.ndarray of int64
        Ports in ``[0xC000, 0xFFFF]``.
    """
    f = np.asarray(fl).astype(np.int64) & IB_GRH_FLOWLABEL_MASK
    f = np.where(f == 0, rdma_calc_flow_label(lqpn, rqpn), f)
    return flow_label_to_udp_sport(f)


def default_sports(lqpn: object, rqpn: object) -> np.ndarray:
    """Kernel-derived source ports of QPs whose flow label is left at 0 (NCCL's default)."""
    return rdma_get_udp_sport(0, lqpn, rqpn)


#: ``enum ibv_rate`` (rdma-core ``libibverbs/verbs.h``) value -> Gbit/s, for the steps a
#: ConnectX takes as an RC QP's ``ah_attr.static_rate``: Linux mlx5 ``mlx5r_ib_rate()``
#: (formerly ``ib_rate_to_mlx5``, ``drivers/infiniband/hw/mlx5/qp.c``, called from
#: ``mlx5_set_path``) accepts 2.5..600 Gbit/s and maps ``IB_RATE_800_GBPS`` to 0 ("port
#: current", no limit) — so 800 is no step here.
IBV_RATE_GBPS = {2: 2.5, 5: 5.0, 3: 10.0, 11: 14.0, 6: 20.0, 15: 25.0, 19: 28.0, 4: 30.0,
                 7: 40.0, 20: 50.0, 12: 56.0, 8: 60.0, 9: 80.0, 16: 100.0, 13: 112.0,
                 10: 120.0, 14: 168.0, 17: 200.0, 18: 300.0, 21: 400.0, 22: 600.0}
IBV_RATE_MAX = 0  # "port current": no static rate
_STEP_ENUM = np.array(sorted(IBV_RATE_GBPS, key=IBV_RATE_GBPS.get), dtype=np.int64)
_STEP_BPS = np.array([IBV_RATE_GBPS[int(e)] * 1e9 for e in _STEP_ENUM])


def static_rate(rate_bps: object) -> tuple[np.ndarray, np.ndarray]:
    """The ``IBV_RATE_*`` an RC QP is given at INIT->RTR for a planned pacing rate, and the
    rate it stands for: the largest step not above the plan (the smallest, 2.5 Gbit/s,
    below it); ``inf`` (no pacing) -> ``IBV_RATE_MAX`` (0) and ``inf``.

    The verbs ``rate_limit`` is refused for RC QPs (Linux ``drivers/infiniband/core/
    verbs.c`` ``qp_state_table`` allows ``IB_QP_RATE_LIMIT`` only for RAW_PACKET QPs, so
    mlx5 answers EINVAL); the static rate of the QP's address vector is what the NIC
    applies. The kernel rounds further down to the device's ``stat_rate_support`` by
    stepping the enum (not the rate) down, so a step the device lacks can land on a
    faster one: read the rate back on a cluster (docs/verbs-shim.md).

    Examples
    --------
    >>> e, r = static_rate([392e9, 48e9, 1e9, float("inf")])
    >>> e.tolist(), (r / 1e9).tolist()
    ([18, 7, 2, 0], [300.0, 40.0, 2.5, inf])
    """
    r = np.asarray(rate_bps, dtype=np.float64)
    i = np.clip(np.searchsorted(_STEP_BPS, r, side="right") - 1, 0, len(_STEP_BPS) - 1)
    finite = np.isfinite(r)
    return (np.where(finite, _STEP_ENUM[i], IBV_RATE_MAX),
            np.where(finite, _STEP_BPS[i], np.inf))


def flow_label_for_sport(sport: object) -> np.ndarray:
    """Non-zero flow label that makes the kernel use a desired source port (inverse).

    ``fl = sport & 0x3FFF`` for ``sport`` in ``[0xC001, 0xFFFF]``; for ``0xC000`` the
    obvious label 0 would mean "auto", so ``(1 << 14) | 1 = 0x4001`` is used
    (``0x0001 ^ (0x4000 >> 14) = 0``). Set it as ``ah_attr.grh.flow_label`` with
    ``is_global = 1`` at INIT->RTR.

    Raises
    ------
    ValueError
        If a port is outside ``[0xC000, 0xFFFF]`` (unreachable through the flow label;
        ``mlx5dv_modify_qp_udp_sport`` is the only way there, if firmware accepts it).

    Examples
    --------
    >>> [hex(int(flow_label_for_sport(p))) for p in (0xC000, 0xC001, 0xFFFF)]
    ['0x4001', '0x1', '0x3fff']
    """
    s = np.asarray(sport).astype(np.int64)
    if np.any((s < SPORT_MIN) | (s > SPORT_MAX)):
        raise ValueError("flow-label steering reaches only source ports 0xC000..0xFFFF")
    return np.where(s == SPORT_MIN, (1 << 14) | 1, s & 0x3FFF)


@dataclass(frozen=True)
class NicPortLimits:
    """Range of UDP source ports a NIC/driver path accepts for a QP.

    Parameters
    ----------
    sport_min, sport_max : int
        Inclusive bounds. Default ``0xC000..0xFFFF``: what the Linux flow-label path
        can produce. ``mlx5dv_modify_qp_udp_sport`` takes any uint16, but whether
        firmware honours values below 0xC000 is [UNCONFIRMED]; HCCL's
        ``MultiQpSrcPort.cfg`` range is [UNCONFIRMED] too.
    vendor : str
        Label.
    """

    sport_min: int = SPORT_MIN
    sport_max: int = SPORT_MAX
    vendor: str = "linux-flowlabel"

    def __post_init__(self) -> None:
        if not 0 <= self.sport_min <= self.sport_max <= 0xFFFF:
            raise ValueError(f"bad source-port range {self.sport_min}..{self.sport_max}")

    @property
    def n_ports(self) -> int:
        """Number of usable ports."""
        return self.sport_max - self.sport_min + 1

    def ports(self) -> np.ndarray:
        """All usable ports, ascending (int64)."""
        return np.arange(self.sport_min, self.sport_max + 1, dtype=np.int64)

    def contains(self, sport: object) -> np.ndarray:
        """Elementwise: is the port usable?"""
        s = np.asarray(sport)
        return (s >= self.sport_min) & (s <= self.sport_max)


NIC_PORT_LIMITS: dict[str, NicPortLimits] = {
    "linux-flowlabel": NicPortLimits(),
    # ConnectX via mlx5dv_modify_qp_udp_sport: kept at the kernel range by default
    # because acceptance of other values is unconfirmed.
    "mlx5dv": NicPortLimits(vendor="mlx5dv"),
    "bnxt_re": NicPortLimits(vendor="bnxt_re"),
    "hccl-multiqp-cfg": NicPortLimits(vendor="hccl-multiqp-cfg"),
}
"""Per-vendor accepted source-port ranges (all default to 0xC000..0xFFFF)."""


def allocate_qpns(
    n: int,
    seed: int | np.random.Generator | None = 0,
    base: int = 0x100,
    *,
    start_jitter: int = 4096,
    mean_gap: float = 1.0,
) -> np.ndarray:
    """Model of the QP numbers a NIC hands out to ``n`` QPs created in sequence.

    Model assumption (not a documented NIC behaviour): a device allocates QPNs in
    increasing order; a job's first QP lands at ``base`` plus an offset left by QPs
    created earlier (other processes, earlier communicators), drawn uniformly from
    ``[0, start_jitter)``; later QPs follow with gaps >= 1 (geometric with mean
    ``mean_gap``; 1 = consecutive). With flow label 0 (NCCL) these QPNs fix the
    kernel-derived source ports through :func:`default_sports`.

    Parameters
    ----------
    n : int
        Number of QPs.
    seed : int, Generator or None
        Determinism: same seed, same QPNs.
    base : int
        Lowest QPN the model hands out (small QPNs are reserved, e.g. QP0/QP1).
    start_jitter : int
        Range of the first QPN's offset above ``base``.
    mean_gap : float
        Mean distance between consecutive QPNs (>= 1).

    Returns
    -------
    numpy.ndarray of int64
        Strictly increasing 24-bit QPNs.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if mean_gap < 1.0:
        raise ValueError("mean_gap must be >= 1")
    rng = np.random.default_rng(seed)
    first = base + int(rng.integers(0, max(1, start_jitter)))
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if mean_gap == 1.0:
        gaps = np.ones(n - 1, dtype=np.int64)
    else:
        gaps = rng.geometric(1.0 / mean_gap, size=n - 1).astype(np.int64)
    qpns = first + np.concatenate([[0], np.cumsum(gaps)])
    if qpns[-1] > QPN_MASK:
        raise ValueError("QPN space (24 bits) exhausted")
    return qpns


def qps_split(size_bytes: int, nqps: int, align_bytes: int = 128) -> np.ndarray:
    """Bytes each of ``nqps`` QPs carries when one message is split over them.

    NCCL with ``NCCL_IB_SPLIT_DATA_ON_QPS=1``: chunk
    ``= ceil(ceil(size / nqps) / 128) * 128`` bytes, QP ``i`` carries
    ``min(chunk, remaining)``; trailing QPs may carry 0. HCCL with
    ``HCCL_RDMA_QPS_PER_CONNECTION`` splits "evenly": use ``align_bytes=1``.

    Returns
    -------
    numpy.ndarray of int64, shape (nqps,)
        Sums to ``size_bytes``.

    Examples
    --------
    >>> qps_split(1000, 4).tolist()
    [256, 256, 256, 232]
    """
    if nqps < 1:
        raise ValueError("nqps must be >= 1")
    if size_bytes < 0:
        raise ValueError("size_bytes must be >= 0")
    per = -(-size_bytes // nqps)
    chunk = -(-per // align_bytes) * align_bytes
    starts = np.arange(nqps, dtype=np.int64) * chunk
    return np.clip(size_bytes - starts, 0, chunk)


def nccl_qp_for_request(req_id: object, nqps: int, n_data_qps: int = 1, i: int = 0) -> np.ndarray:
    """QP index NCCL uses for a message when data is not split (``NCCL_IB_SPLIT_DATA_ON_QPS=0``).

    ``qpIndex = (id * nDataQps + i) % nqps`` with ``nDataQps = max(local ndevs, remote
    ndevs)``: messages go round-robin over the QPs of a connection.
    """
    return (np.asarray(req_id, dtype=np.int64) * n_data_qps + i) % nqps
