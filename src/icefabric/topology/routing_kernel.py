"""Compiled loops behind :class:`icefabric.topology.routing.Routing` at scale.

Hop counts to every leaf (one breadth-first search per leaf over the reversed switch
graph, htsim's ``get_bidir_paths`` idea) and a signature of every ECMP group (switch x
destination leaf), so that equal groups are stored once: a 131,072-GPU fat-tree has ~10 M
(switch, leaf) pairs but only ~10 k distinct next-hop sets (a leaf's uplinks serve every
remote leaf). Both loops are ``O(leaves x links)``; numpy's dense form of them needed
``leaves x links`` temporaries (GBs at that size) and scipy's BFS took 11 s.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def leaf_hops(in_ptr, in_src, leaf_sw, n_switches):  # pragma: no cover - compiled
    """``hops[i, s]``: switch hops from switch ``s`` to leaf ``i`` (-1: unreachable).

    ``in_ptr``/``in_src``: CSR over destination switch of the working links' sources."""
    n_leaves = len(leaf_sw)
    hops = np.full((n_leaves, n_switches), -1, dtype=np.int16)
    queue = np.empty(n_switches, dtype=np.int64)
    for i in range(n_leaves):
        h = hops[i]
        h[leaf_sw[i]] = 0
        queue[0] = leaf_sw[i]
        head, tail = 0, 1
        while head < tail:
            u = queue[head]
            head += 1
            for k in range(in_ptr[u], in_ptr[u + 1]):
                v = in_src[k]
                if h[v] < 0:
                    h[v] = h[u] + 1
                    queue[tail] = v
                    tail += 1
    return hops


@njit(cache=True)
def group_signatures(hops, out_ptr, out_dst, w1, w2):  # pragma: no cover - compiled
    """Two 64-bit sums of random link weights over the members of every group
    ``(s, i)`` (links ``s -> t`` with ``hops[i, t] == hops[i, s] - 1``), indexed
    ``s * n_leaves + i``; 0 for an empty group. Sums wrap modulo 2**64."""
    n_leaves, n_sw = hops.shape
    sig1 = np.zeros(n_sw * n_leaves, dtype=np.uint64)
    sig2 = np.zeros(n_sw * n_leaves, dtype=np.uint64)
    for i in range(n_leaves):
        h = hops[i]
        for s in range(n_sw):
            hs = h[s]
            if hs <= 0:
                continue
            a = np.uint64(0)
            b = np.uint64(0)
            for k in range(out_ptr[s], out_ptr[s + 1]):
                if h[out_dst[k]] == hs - 1:
                    a += w1[k]
                    b += w2[k]
            sig1[s * n_leaves + i] = a
            sig2[s * n_leaves + i] = b
    return sig1, sig2
