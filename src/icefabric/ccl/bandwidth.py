"""nccl-tests bandwidth formulas (algbw and busbw).

Source: NVIDIA/nccl-tests ``src/*.cu`` ``*GetBw()`` and ``doc/PERFORMANCE.md`` (see
../shared/reference/domain-facts.md §6). ``size_bytes`` is the value nccl-tests prints in its
``size`` column: the whole buffer for all_reduce/broadcast/reduce/sendrecv, and
``count*eltsize*nranks`` for all_gather/reduce_scatter/alltoall (count = per-rank count), so in
every case ``algbw = size_bytes / t``. ``busbw = algbw * factor(n)``.
GB is 10^9 bytes.
"""

from __future__ import annotations

BUSBW_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
}


def busbw_factor(kind: str, nranks: int) -> float:
    """The nccl-tests bus-bandwidth correction factor for collective ``kind`` on ``nranks``."""
    try:
        return BUSBW_FACTORS[kind](nranks)
    except KeyError:
        raise ValueError(f"unknown collective {kind!r}; known: {sorted(BUSBW_FACTORS)}") from None


def algbw_GBps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 B/s), as nccl-tests prints it."""
    return size_bytes / time_s / 1e9


def busbw_GBps(kind: str, size_bytes: float, nranks: int, time_s: float) -> float:
    """Bus bandwidth in GB/s: ``algbw * busbw_factor(kind, nranks)``."""
    return algbw_GBps(size_bytes, time_s) * busbw_factor(kind, nranks)
