"""Compressed-sparse-row helpers for lists of integer arrays (paths, dependencies)."""

from __future__ import annotations

import numpy as np


def csr_from_lists(lists) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` from a sequence of integer lists or arrays."""
    lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    indptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    if indptr[-1]:
        indices = np.concatenate([np.asarray(x, dtype=np.int64) for x in lists])
    else:
        indices = np.zeros(0, dtype=np.int64)
    return indptr, indices
