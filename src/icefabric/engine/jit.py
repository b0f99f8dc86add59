"""Whether a numba-compiled kernel is ready, so the CLI can say when a run compiles it."""

from __future__ import annotations


def compiled_or_cached(dispatcher) -> bool:
    """Whether the ``@njit(cache=True)`` function ``dispatcher`` is compiled in this process
    or in numba's cache for its current source (reads the cache's small index file; True
    when unsure): otherwise its first call compiles it, which takes a while."""
    if dispatcher.overloads:
        return True
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception:  # numba's internals moved: say nothing rather than guess
        return True
