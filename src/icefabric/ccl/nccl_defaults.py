"""What a job's NCCL version and ``NCCL_*`` environment fix: ring channels, QPs per
connection and how a message is spread over those QPs.

Every rule below was read in NVIDIA/nccl at the release tags named (git tags ``v2.X.Y-1``);
line numbers are those of the file at that tag.

Channels (multi-node communicators)
-----------------------------------
1. *Search* (``src/graph/search.cc``, ``ncclTopoCompute``): the ring search starts at the
   fastest entry of the architecture's inter-node speed ladder (``speedArrayInter``,
   ``sm90SpeedArrayInter``) that does not exceed the GPU's path bandwidth to its NIC
   (``system->maxBw``: the smaller of the NIC, ``bw = speed_Mbps / 8000`` GB/s in
   ``src/graph/topo.cc``, and the PCIe link, ``width * gen / 80`` GB/s with Gen4 = 120 and
   Gen5 = 240 in ``kvDictPciGen``, e.g. 48 GB/s for Gen5 x16 — the ``maxBw 48.0`` that H100/
   H200 logs print, NVIDIA/nccl-tests#256). On servers with one NIC per GPU each ring enters
   and leaves a server through one NIC (``NCCL_CROSS_NIC`` 2, rail-aligned) and one ring at
   that speed fills the NIC, so the search finds one channel per NIC (a slower speed with two
   rings per NIC never carries more, and the search keeps the first of equal graphs).
2. *Search duplication*: before 2.18.3 (v2.17.1 ``search.cc:897``, v2.18.1 ``:954``) the
   search doubles its channels when ``(cc <= 80 and bw >= 25) or (cc <= 90 and bw >= 50)``;
   from 2.18.3 on (v2.18.3 ``search.cc:970-971``, v2.19.4 ``ncclTopoDupChannels``
   ``:826-827``, v2.27.3 ``:890-891``) unless ``bw < 25`` or ``cc > 80 and bw < 50 and
   nChannels > 4``. Doubling halves the per-channel bandwidth; ``ringGraph.maxChannels`` is
   ``MAXCHANNELS/2`` = 32 (``src/init.cc``).
3. *Ring duplication* (``src/graph/connect.cc``, ``ncclTopoPostset``, every release):
   ``nChannels = min(MAXCHANNELS, nChannels*2)`` (v2.19.4 ``:396``, v2.27.3 ``:452``).
4. *"Use 4 compute channels per search channel to reach peak BW on <8 PPN"* (same
   function): absent in 2.17; 2.18.1-2.19.x double again when ``minCompCap == 90 and
   nNodes > 1 and bwIntra > 45 and 2*nChannels <= MAXCHANNELS`` (v2.18.1 ``:403``, v2.19.4
   ``:410``); 2.20-2.24 only while ``nChannels < 16`` (v2.20.3 ``:456``, v2.24.3 ``:469``);
   2.25 on for ``minCompCap >= 90`` (v2.25.1 ``:466``, v2.27.3 ``:466``, v2.30.7 ``:481``).
5. ``NCCL_MAX_NCHANNELS`` caps and ``NCCL_MIN_NCHANNELS`` raises the result (same
   function, ``ncclMaxNchannels()`` / ``copyChannels(..., ncclMinNchannels())``; both
   default -2 = unset).

So an 8 x 400G HGX H100 (Gen5 x16, bw 48, cc 90) runs 8 search channels -> 16 -> 32 in
2.18-2.19 and 16 from 2.20 on; 8 x 200G A100 (bw 24, cc 80) runs 16 in every release. The
tree graph is assumed to find at least as many channels as the ring (the communicator keeps
the smaller count, ``src/init.cc``). A log's own ``N coll channels`` always wins.

QPs and data split (``src/transport/net_ib.cc``; ``net_ib/`` from 2.30)
---------------------------------------------------------------------
``NCCL_IB_QPS_PER_CONNECTION`` defaults to 1 in every release read (v2.17.1 ``:481``,
v2.19.4 ``:501``, v2.20.3 ``:635``, v2.27.3 ``:1117``). Up to 2.17 every message is split
evenly over all QPs (v2.17.1 ``:1003-1005``, no parameter); 2.18-2.19 add
``NCCL_IB_SPLIT_DATA_ON_QPS`` with default 1 = split (v2.18.1 ``:966``, v2.19.4 ``:1005``);
from 2.20 the default is 0 = each message goes whole on the next QP, round-robin
(v2.20.3 ``:1301``, v2.27.3 ``:1974``, v2.30.7 ``net_ib/common.cc:22``). Both spread a
connection's bytes evenly over its QPs — round-robin one message at a time, with up to
``NCCL_STEPS`` = 8 messages in flight — and a connection's steps complete in order, so at
flow level each QP carries ``1/k`` of the bytes and the connection runs at ``k`` times its
slowest QP either way; the split is recorded, not a different rate model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MAXCHANNELS = 64
"""``src/include/device.h``."""

NCCL_ENV_KEYS = ("NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_SPLIT_DATA_ON_QPS",
                 "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_NET_SHARED_COMMS")
"""The ``NCCL_*`` variables this model honours (others do not change the fabric's traffic
in the model and are rejected, so a typo never passes silently)."""

OLDEST_MODELLED = (2, 17, 0)
NEWEST_READ = (2, 30, 7)
DEFAULT_NCCL_VERSION = "2.27.7"
"""Version assumed when a job names none: a recent release (its 8-NIC H100 result, 16
channels, holds for every release from 2.20 to 2.30.7)."""

# Inter-node speed ladders (GB/s), keyed by the first release they were read in.
_LADDERS: dict[str, tuple[tuple[tuple[int, int, int], tuple[float, ...]], ...]] = {
    "sm80": (  # speedArrayInter
        ((2, 17, 0), (48.0, 30.0, 28.0, 24.0, 22.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0,
                      5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)),  # v2.17.1 search.cc:730
        ((2, 18, 0), (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0,
                      5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)),  # v2.18.1 :777 ... v2.30.7
    ),
    "sm90": (  # sm90SpeedArrayInter, used for compute capability >= 9.0
        ((2, 17, 0), (48.0, 45.0, 30.0, 24.0, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
                      0.12)),  # v2.17.1 :735
        ((2, 18, 0), (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                      0.24, 0.12)),  # v2.18.1 :782
        ((2, 18, 3), (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                      2.4, 1.2, 0.24, 0.12)),  # v2.18.3 ... v2.19.1
        ((2, 19, 3), (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                      3.0, 2.4, 1.2, 0.24, 0.12)),  # v2.19.3 ... v2.30.7
    ),
}


class NcclModelError(ValueError):
    """A version or environment the NCCL defaults model cannot answer for."""


def parse_version(text: str) -> tuple[int, int, int]:
    """``"2.19"``, ``"2.19.3"``, ``"v2.19.3-1"`` or ``"2.19.3+cuda12.3"`` -> ``(2, 19, 3)``."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?", str(text).strip())
    if not m:
        raise NcclModelError(f"not an NCCL version: {text!r} (expected e.g. 2.19.3)")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def _env_int(env: Mapping[str, str | int], key: str, lo: int, hi: int) -> int | None:
    if key not in env:
        return None
    try:
        v = int(str(env[key]).strip())
    except ValueError:
        raise NcclModelError(f"{key}={env[key]!r} is not an integer") from None
    if v == -2 and key.endswith("NCHANNELS"):  # NCCL's "unset"
        return None
    if not lo <= v <= hi:
        raise NcclModelError(f"{key}={v} is outside [{lo}, {hi}]")
    return v


@dataclass(frozen=True)
class NcclSettings:
    """A job's NCCL version and the ``NCCL_*`` variables the model honours, resolved.

    Attributes
    ----------
    version : tuple of int — (major, minor, patch).
    qps_per_connection : int — ``NCCL_IB_QPS_PER_CONNECTION`` (default 1).
    split_data_on_qps : bool — ``NCCL_IB_SPLIT_DATA_ON_QPS`` as the version sets it
        (always True before 2.18, default True in 2.18-2.19, False from 2.20).
    min_channels, max_channels : int or None — ``NCCL_MIN_NCHANNELS`` /
        ``NCCL_MAX_NCHANNELS`` (None = unset).
    net_shared_comms : bool — ``NCCL_NET_SHARED_COMMS`` (default 1, ``src/transport/net.cc``
        ``NCCL_PARAM(NetSharedComms, "NET_SHARED_COMMS", 1)``): a PXN proxy sends for all
        its local GPUs over one network connection per remote rank and channel
        (:func:`icefabric.ccl.nccl.alltoall`).
    """

    version: tuple[int, int, int]
    qps_per_connection: int = 1
    split_data_on_qps: bool = False
    min_channels: int | None = None
    max_channels: int | None = None
    net_shared_comms: bool = True

    @classmethod
    def resolve(cls, version: str | None = None,
                env: Mapping[str, str | int] | None = None) -> NcclSettings:
        """Settings of ``version`` (default :data:`DEFAULT_NCCL_VERSION`) under ``env``."""
        env = dict(env or {})
        unknown = sorted(k for k in env if k not in NCCL_ENV_KEYS)
        if unknown:
            raise NcclModelError(f"NCCL variables {unknown} are not modelled; known: "
                                 f"{', '.join(NCCL_ENV_KEYS)}")
        v = parse_version(version or DEFAULT_NCCL_VERSION)
        split = v < (2, 20, 0)
        s = _env_int(env, "NCCL_IB_SPLIT_DATA_ON_QPS", 0, 1)
        if s is not None:
            if v < (2, 18, 0):
                raise NcclModelError(f"NCCL_IB_SPLIT_DATA_ON_QPS does not exist in NCCL "
                                     f"{'.'.join(map(str, v))} (added in 2.18)")
            split = bool(s)
        qps = _env_int(env, "NCCL_IB_QPS_PER_CONNECTION", 1, 128)  # NCCL_IB_MAX_QPS
        lo = _env_int(env, "NCCL_MIN_NCHANNELS", 1, MAXCHANNELS)
        hi = _env_int(env, "NCCL_MAX_NCHANNELS", 1, MAXCHANNELS)
        shared = _env_int(env, "NCCL_NET_SHARED_COMMS", 0, 1)
        return cls(v, qps or 1, split, lo, hi, shared != 0)

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


@dataclass(frozen=True)
class NcclServerView:
    """A server as NCCL's topology search sees it (one NIC per GPU, rail-aligned).

    Attributes
    ----------
    cuda_sm : int — compute capability x 10 (80 = A100, 90 = H100/H200).
    n_nics : int — scale-out NICs.
    nic_GBps : float — NCCL's NET bandwidth, ``speed_Mbps / 8000``.
    pcie_GBps : float — NCCL's GPU<->NIC PCIe bandwidth, ``width * gen / 80``.
    """

    cuda_sm: int
    n_nics: int
    nic_GBps: float
    pcie_GBps: float


def server_view(cuda_sm: int | None, n_nics: int, nic_bps: float, pcie_bps: float
                ) -> NcclServerView | None:
    """The view of a catalog server, or None when NCCL's search is not modelled for it
    (no CUDA compute capability, or 10.0 and newer, whose ladders change from release to
    release). NCCL counts a PCIe lane at 75 % of its signalling rate (Gen5: 240 x 100 Mb/s
    per lane for 32 GT/s), so ``pcie_GBps = pcie_bps / 8e9 * 0.75``."""
    if cuda_sm is None or cuda_sm >= 100 or n_nics < 1:
        return None
    return NcclServerView(int(cuda_sm), int(n_nics), nic_bps / 8e9, pcie_bps / 8e9 * 0.75)


def _ladder(cuda_sm: int, v: tuple[int, int, int]) -> tuple[float, ...]:
    eras = _LADDERS["sm90" if cuda_sm >= 90 else "sm80"]
    return [speeds for since, speeds in eras if v >= since][-1]


def ring_channels(settings: NcclSettings, server: NcclServerView, n_nodes: int) -> int:
    """Ring channels NCCL ``settings.version`` opens on ``server`` (see module docstring).

    Parameters
    ----------
    settings : NcclSettings
    server : NcclServerView
    n_nodes : int — servers in the communicator (the model covers ``n_nodes > 1``).

    Returns
    -------
    int — ``N coll channels`` as the log would print it.

    Examples
    --------
    >>> h100 = NcclServerView(cuda_sm=90, n_nics=8, nic_GBps=50.0, pcie_GBps=48.0)
    >>> [ring_channels(NcclSettings.resolve(v), h100, 2) for v in ("2.18.6", "2.19.4",
    ...                                                              "2.20.3", "2.27.7")]
    [32, 32, 16, 16]
    """
    v, cc = settings.version, server.cuda_sm
    if v < OLDEST_MODELLED:
        raise NcclModelError(f"NCCL {settings.version_text}: channel defaults are modelled "
                             f"from 2.17 on; give the job's channels")
    if n_nodes < 2:
        raise NcclModelError("the channel model covers multi-node communicators")
    path = min(server.nic_GBps, server.pcie_GBps)
    ladder = _ladder(cc, v)
    bw = next((s for s in ladder if s <= path), ladder[-1])
    search = min(server.n_nics, MAXCHANNELS // 2)
    if v < (2, 18, 3):
        dup = (cc <= 80 and bw >= 25.0) or (cc <= 90 and bw >= 50.0)
    else:
        dup = bw >= 25.0 and not (cc > 80 and bw < 50.0 and search > 4)
    if dup:
        doubled = min(2 * search, MAXCHANNELS // 2)
        bw /= -(-doubled // search)
        search = doubled
    channels = min(MAXCHANNELS, 2 * search)
    if (2, 18, 0) <= v < (2, 20, 0):
        if cc == 90 and bw > 45.0 and 2 * channels <= MAXCHANNELS:
            channels *= 2
    elif v >= (2, 20, 0):
        sm_ok = cc >= 90 if v >= (2, 25, 0) else cc == 90
        if sm_ok and bw > 45.0 and channels < 16:
            channels *= 2
    if settings.max_channels is not None:
        channels = min(channels, settings.max_channels)
    if settings.min_channels is not None:
        channels = max(channels, settings.min_channels)
    return channels
