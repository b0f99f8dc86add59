"""Units: integer-nanosecond time, bits per second, bytes.

All unit conversions live here (htsim's typed ``simtime_picosec``/``linkspeed_bps`` idea).
Names elsewhere carry their unit: ``t_ns``, ``rate_bps``, ``size_bytes``, ``delay_ns``.
"""

from __future__ import annotations

import math

from icefabric.errors import IceFabricError

Ns = int
"""Simulation time in integer nanoseconds."""

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
BITS_PER_BYTE = 8

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40


def us(x: float) -> Ns:
    """Microseconds to integer nanoseconds (rounded)."""
    return int(round(x * NS_PER_US))


def ms(x: float) -> Ns:
    """Milliseconds to integer nanoseconds (rounded)."""
    return int(round(x * NS_PER_MS))


def seconds(x: float) -> Ns:
    """Seconds to integer nanoseconds (rounded)."""
    return int(round(x * NS_PER_S))


def ns_to_us(t_ns: float) -> float:
    return t_ns / NS_PER_US


def ns_to_s(t_ns: float) -> float:
    return t_ns / NS_PER_S


def gbps(x: float) -> float:
    """Gigabits per second (10^9 bit/s) to bits per second."""
    return float(x) * 1e9


def bps_to_gbps(rate_bps: float) -> float:
    return rate_bps / 1e9


def bps_to_kbps(rate_bps: float) -> int:
    """A rate in bit/s as whole kbit/s, the unit of verbs' ``ibv_qp_rate_limit_attr.
    rate_limit``: rounded to the nearest, and at least 1 (0 there means "no limit", which
    a tiny planned rate is not)."""
    return max(1, round(rate_bps / 1000))


def bytes_to_bits(size_bytes: float) -> float:
    return size_bytes * BITS_PER_BYTE


def bps_to_GBps(rate_bps: float) -> float:
    """Bits per second to gigabytes (10^9 B) per second, the nccl-tests unit."""
    return rate_bps / BITS_PER_BYTE / 1e9


def transfer_time_ns(size_bytes: float, rate_bps: float) -> Ns:
    """Time to serialize ``size_bytes`` at ``rate_bps``, rounded up to whole ns."""
    if rate_bps <= 0:
        raise ValueError(f"rate_bps must be positive, got {rate_bps}")
    return int(math.ceil(size_bytes * BITS_PER_BYTE * NS_PER_S / rate_bps))


class UnitError(IceFabricError, ValueError):
    """A quantity that cannot be read (a size such as ``64K``)."""


_SIZE_SUFFIX = {"": 1, "B": 1, "K": KiB, "KB": KiB, "KIB": KiB, "M": MiB, "MB": MiB,
                "MIB": MiB, "G": GiB, "GB": GiB, "GIB": GiB, "T": TiB, "TB": TiB, "TIB": TiB}


def parse_size(text: str | int) -> int:
    """Parse ``"1MiB"``, ``"64K"``, ``"1G"`` or an integer into bytes (binary multiples,
    as nccl-tests' ``-b/-e`` flags do)."""
    if isinstance(text, int) and text >= 0:
        return text
    s = str(text).strip().upper().replace(" ", "")
    num = s.rstrip("KMGTIB")
    suffix = s[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if not (0 <= value < math.inf) or suffix not in _SIZE_SUFFIX:  # nan fails too
        raise UnitError(f"cannot parse size {text!r}; use e.g. 1048576, 1MiB, 64K, 1G")
    return int(value * _SIZE_SUFFIX[suffix])


def format_size(size_bytes: int) -> str:
    """Human size with binary suffix: 1048576 -> '1MiB'."""
    for unit, mult in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if size_bytes >= mult and size_bytes % mult == 0:
            return f"{size_bytes // mult}{unit}"
    return f"{size_bytes}B"


def ipv4_str(ip: int) -> str:
    """Dotted form of an IPv4 address held as an integer (``fabric.node_ip``)."""
    ip = int(ip)
    return f"{ip >> 24 & 255}.{ip >> 16 & 255}.{ip >> 8 & 255}.{ip & 255}"


def ipv4_int(text: str) -> int:
    """Integer form of a dotted IPv4 address (the inverse of :func:`ipv4_str`)."""
    a, b, c, d = (int(x) for x in text.split("."))
    return a << 24 | b << 16 | c << 8 | d
