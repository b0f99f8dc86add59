"""One entry point for all collective models: pick the library model by the
communicator's library (or ``cross`` when a job spans pools of different libraries)."""

from __future__ import annotations

from icefabric.ccl import crossvendor, hccl, nccl
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import WorkloadBuilder

LIBRARIES = {
    "nccl": (nccl.ALGORITHMS, nccl.DEFAULT_ALGORITHM),
    "rccl": (nccl.ALGORITHMS, nccl.DEFAULT_ALGORITHM),  # RCCL keeps NCCL's algorithms
    "hccl": (hccl.ALGORITHMS, hccl.DEFAULT_ALGORITHM),
    "cross": (crossvendor.ALGORITHMS, crossvendor.DEFAULT_ALGORITHM),
}
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")


def algorithms(library: str) -> dict[str, list[str]]:
    table, _ = LIBRARIES[library]
    out: dict[str, list[str]] = {}
    for kind, algo in table:
        out.setdefault(kind, []).append(algo)
    return out


def add_collective(wb: WorkloadBuilder, comm: Communicator, kind: str, size_bytes: int, *,
                   algorithm: str | None = None, after=(), name: str = "") -> list[int]:
    """Append one collective call to ``wb``; returns the flows a successor must wait for."""
    try:
        table, defaults = LIBRARIES[comm.library]
    except KeyError:
        raise ValueError(f"unknown library {comm.library!r}; known: {sorted(LIBRARIES)}") \
            from None
    algo = algorithm or defaults.get(kind)
    fn = table.get((kind, algo))
    if fn is None:
        raise ValueError(f"{comm.library} has no {algorithm or 'default'} algorithm for "
                         f"{kind!r}; available: {algorithms(comm.library)}")
    return fn(wb, comm, size_bytes, after=list(after), name=name)
