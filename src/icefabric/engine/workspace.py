"""Zeroed work arrays whose memory outlives one engine run (issue 26).

An engine run takes its state arrays from a :class:`Workspace` and gives them back when its
result is built. Fresh arrays cost more than their size suggests: on this project's
machines (VMs) a page fault costs ~4 µs, numpy asks for huge pages above 4 MiB (each fault
then zeroes 2 MiB), and glibc unmaps large blocks when they are freed, so every run faulted
its arrays in again (~7 % of the validation set's DCQCN runs). Many runs in one process
(``icefab validate``, sweeps, draws) reuse the pages instead: a returned array is zeroed as
far as its user says it wrote (``used``), which is usually far less than a page fault per
4 kB costs.

Safety: an array is in the pool only while nobody holds it (a run takes it out, gives it
back after copying what its result keeps), every pooled array is all zero, and the pool is
bounded (``max_bytes``; the arrays given back last are kept). Threads may share a workspace.
"""

from __future__ import annotations

import math
import threading
import weakref

import numpy as np


class Workspace:
    """A bounded pool of zeroed flat buffers handed out as arrays of any shape.

    The bound counts what a buffer holds in memory: the elements its users said they
    wrote (the pages past them were never touched, so a large array that a run uses the
    head of, such as the CNP delay line, costs only its head). Arrays under ``min_bytes``
    are plain ``np.zeros`` (the allocator keeps small blocks itself, and the bookkeeping
    would cost more than it saves).

    Examples
    --------
    >>> ws = Workspace(max_bytes=2**20, min_bytes=0)
    >>> a = ws.zeros((2, 3), np.float64)
    >>> a[1, 2] = 5.0
    >>> ws.give_back(a)
    >>> b = ws.zeros((3, 2), np.float64)   # the same memory, zeroed
    >>> bool(np.shares_memory(a, b)), float(b.sum())
    (True, 0.0)
    """

    def __init__(self, max_bytes: int, min_bytes: int = 64 * 2**10, max_buffers: int = 32):
        self.max_bytes, self.min_bytes, self.max_buffers = max_bytes, min_bytes, max_buffers
        #: all-zero flat buffers and how many of their elements were ever written, the one
        #: given back last at the end
        self._free: list[tuple[np.ndarray, int]] = []
        self._held = 0  # bytes written of the pooled buffers (what the bound counts)
        #: buffers handed out and not back yet: id -> (weak reference, elements written)
        self._out: dict[int, tuple[weakref.ref, int]] = {}
        self._lock = threading.RLock()  # a buffer dying under it calls _forget

    def zeros(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        """A C-contiguous zero array of ``shape``: a view of the smallest pooled buffer that
        holds it, else of a fresh one."""
        dtype = np.dtype(dtype)
        n = math.prod(shape)
        if n * dtype.itemsize < self.min_bytes:
            return np.zeros(shape, dtype)
        buf, hw = None, 0
        with self._lock:
            best = -1
            for j, (b, _) in enumerate(self._free):
                if b.dtype == dtype and b.size >= n and (best < 0 or
                                                         b.size < self._free[best][0].size):
                    best = j
            if best >= 0:
                buf, hw = self._drop(best)
        if buf is None:
            buf = np.zeros(n, dtype)
        key = id(buf)
        with self._lock:  # forgotten if the buffer dies without coming back
            self._out[key] = (weakref.ref(buf, lambda _: self._forget(key)), hw)
        return buf.reshape(shape) if buf.size == n else buf[:n].reshape(shape)

    def _forget(self, key: int) -> None:
        with self._lock:
            self._out.pop(key, None)

    def give_back(self, arr: np.ndarray, used: int | None = None) -> None:
        """Return ``arr`` (from :meth:`zeros`) to the pool; only its first ``used`` elements
        (in memory order; default all) may be non-zero. An array the pool did not hand out
        is ignored."""
        buf = arr.base
        if buf is None:
            return
        with self._lock:
            ref, hw = self._out.get(id(buf), (None, 0))
            if ref is None or ref() is not buf:
                return
            del self._out[id(buf)]
        used = arr.size if used is None else used
        hw = max(hw, used)
        if hw * buf.itemsize > self.max_bytes:
            return
        buf[:used] = 0
        with self._lock:
            self._free.append((buf, hw))
            self._held += hw * buf.itemsize
            while len(self._free) > self.max_buffers or self._held > self.max_bytes:
                self._drop(0)

    def _drop(self, j: int) -> tuple[np.ndarray, int]:
        buf, hw = self._free.pop(j)
        self._held -= hw * buf.itemsize
        return buf, hw

    def clear(self) -> None:
        """Drop every pooled buffer (their memory goes back to the allocator)."""
        with self._lock:
            self._free.clear()
            self._held = 0
