"""Compressed-sparse-row helpers for lists of integer arrays (paths, dependencies)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit


class CsrRows(Sequence):
    """Rows of integer arrays kept in one flat array: a read-only sequence of array views.

    What a list of a million small arrays (one path per QP) costs to build and to turn
    back into a CSR, this does not: rows are slices ``values[starts[i]:stops[i]]`` taken on
    access, and :func:`csr_from_lists` returns the CSR as it is. :meth:`replaced` swaps a
    few rows without copying the others' links (what re-planning after a failure does to
    a million-QP plan): the new rows go to a second, small array ``extra``, addressed past
    the end of ``values``, which stays shared with the original.
    """

    __slots__ = ("starts", "stops", "values", "extra", "_indptr")

    def __init__(self, indptr: np.ndarray, values: np.ndarray):
        self._indptr = np.asarray(indptr, dtype=np.int64)
        self.starts = self._indptr[:-1]
        self.stops = self._indptr[1:]
        self.values = values
        self.extra = values[:0]

    def __len__(self) -> int:
        return len(self.starts)

    def _row(self, a: int, b: int) -> np.ndarray:
        n = len(self.values)
        return self.values[a:b] if b <= n else self.extra[a - n:b - n]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} of {n}")
        i = int(i) % n
        return self._row(int(self.starts[i]), int(self.stops[i]))

    def __iter__(self):
        for a, b in zip(self.starts.tolist(), self.stops.tolist()):
            yield self._row(a, b)

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr, values)``; rows that :meth:`replaced` moved are gathered back in order."""
        if self._indptr is None:
            lengths = self.stops - self.starts
            both = np.concatenate([self.values, self.extra])
            self.values, self.extra = both[gather(self.starts, lengths)], both[:0]
            self._indptr = indptr_from_lengths(lengths)
            self.starts, self.stops = self._indptr[:-1], self._indptr[1:]
        return self._indptr, self.values.astype(np.int64, copy=False)

    def replaced(self, rows, new) -> CsrRows:
        """A copy with rows ``rows`` (int array) set to ``new`` (a sequence of arrays)."""
        rows = np.asarray(rows, dtype=np.int64)
        nptr, nflat = csr_from_lists(new)
        if len(nptr) - 1 != len(rows):
            raise ValueError(f"{len(rows)} rows to replace, {len(nptr) - 1} given")
        out = CsrRows.__new__(CsrRows)
        out._indptr = None
        out.values = self.values
        base = len(self.values) + len(self.extra)
        out.extra = np.concatenate([self.extra, nflat.astype(self.values.dtype)])
        out.starts, out.stops = self.starts.copy(), self.stops.copy()
        out.starts[rows] = base + nptr[:-1]
        out.stops[rows] = base + nptr[1:]
        return out


def csr_from_lists(lists) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` from a sequence of integer lists or arrays (a
    :class:`CsrRows` gives its own arrays)."""
    if isinstance(lists, CsrRows):
        return lists.csr()
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


@njit(cache=True)
def copy_slices(dst, at, src, start, length):  # pragma: no cover
    """``dst[at[i]:at[i] + length[i]] = src[start[i]:start[i] + length[i]]`` for every
    ``i``: ``dst[gather(at, length)] = src[gather(start, length)]`` without its two index
    arrays (an 8,192-rank AllToAll's routes: 50 M links, 400 MB each)."""
    for i in range(len(at)):
        a, b = at[i], start[i]
        for j in range(length[i]):
            dst[a + j] = src[b + j]


def dense_ids(keys: np.ndarray, span: int) -> np.ndarray:
    """Rank of each key among the distinct keys (``np.unique``'s inverse). Keys in
    ``[0, span)`` with ``span`` a few times their count are ranked through a table of
    the span (no sort); wider ones by one sort of the keys packed with their positions
    into 63 bits (numpy's vectorised sort, where ``np.unique``'s argsort of 1 M keys took
    ~0.15 s more), else by ``np.unique``."""
    n = keys.size
    if span <= 4 * n + 64:
        seen = np.zeros(span, dtype=bool)
        seen[keys] = True
        rank = np.cumsum(seen, dtype=np.int32 if span < 1 << 31 else np.int64)
        return (rank[keys] - 1).astype(np.int64)
    pb = max(n - 1, 1).bit_length()
    if (span - 1).bit_length() + pb > 63:
        return np.unique(keys, return_inverse=True)[1].ravel().astype(np.int64)
    packed = keys.astype(np.int64) << pb
    packed |= np.arange(n)
    packed.sort()
    k = packed >> pb
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(k[1:], k[:-1], out=new[1:])
    out = np.empty(n, dtype=np.int64)
    out[packed & ((1 << pb) - 1)] = np.cumsum(new) - 1
    return out


def unique_inverse(keys: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of keys in ``[0, span)``, through
    :func:`dense_ids` (no sort where the span allows)."""
    inv = dense_ids(keys, span)
    uniq = np.empty(int(inv.max(initial=-1)) + 1, dtype=keys.dtype)
    uniq[inv] = keys
    return uniq, inv


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
