"""Compressed-sparse-row helpers for lists of integer arrays (paths, dependencies)."""

from __future__ import annotations

import numpy as np


def csr_from_lists(lists) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` from a sequence of integer lists or arrays."""
    lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    indptr = indptr_from_lengths(lengths)
    if indptr[-1]:
        indices = np.concatenate([np.asarray(x, dtype=np.int64) for x in lists])
    else:
        indices = np.zeros(0, dtype=np.int64)
    return indptr, indices


def indptr_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """CSR index pointer ``[0, l0, l0+l1, ...]`` of rows with ``lengths``."""
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr


def within(lengths: np.ndarray) -> np.ndarray:
    """Position of every element inside its row, rows of ``lengths`` laid end to end:
    ``within([2, 3]) = [0, 1, 0, 1, 2]``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def gather(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat indices of the slices ``[starts[i], starts[i] + lengths[i])``, concatenated:
    ``values[gather(indptr[rows], lengths[rows])]`` are the entries of ``rows`` of a CSR."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.repeat(np.asarray(starts, dtype=np.int64), lengths) + within(lengths)


def replace_rows(indptr: np.ndarray, values: np.ndarray, rows: np.ndarray,
                 new_indptr: np.ndarray, new_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A CSR with ``rows`` replaced by the rows of ``(new_indptr, new_values)``."""
    lengths = np.diff(indptr)
    lengths[rows] = np.diff(new_indptr)
    out_ptr = indptr_from_lengths(lengths)
    out = np.empty(int(out_ptr[-1]), dtype=values.dtype)
    keep = np.ones(len(lengths), dtype=bool)
    keep[rows] = False
    kept = np.flatnonzero(keep)
    out[gather(out_ptr[kept], lengths[kept])] = values[gather(indptr[kept], lengths[kept])]
    out[gather(out_ptr[rows], lengths[rows])] = new_values
    return out_ptr, out
