"""Edge colouring of bipartite multigraphs with the optimal number of colours.

Every leaf-to-leaf QP of a phase is an edge between its source leaf (left side) and its
destination leaf (right side); a colour is an uplink slot (a spine, or a spine and one of
its parallel links). A proper colouring puts at most one QP of a leaf on each slot at
both ends, so with ``Δ`` colours folded onto ``U`` uplinks every uplink and every
downlink carries at most ``ceil(Δ / U)`` QPs — the lower bound, hence an optimal plan
for uniform demand. Kőnig's theorem guarantees ``Δ`` colours always suffice for a
bipartite multigraph.
"""

from __future__ import annotations

import numpy as np

from icefabric.control.coloring_kernel import color_edges

__all__ = ["bipartite_edge_coloring", "coloring_reference", "is_proper_coloring",
           "max_degree"]

#: Largest (vertices x colours) table entries the compiled kernel allocates (512 MiB).
_DENSE_MAX = 1 << 26


def max_degree(u, v) -> int:
    """Largest vertex degree of the bipartite multigraph with edges ``(u[i], v[i])``."""
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    if len(u) == 0:
        return 0
    return int(max(np.bincount(u).max(), np.bincount(v).max()))


def bipartite_edge_coloring(u, v) -> np.ndarray:
    """Colour the edges of a bipartite multigraph with exactly ``Δ`` colours.

    Parameters
    ----------
    u, v : array of int (m,)
        Left and right endpoint of every edge (two separate vertex index spaces; parallel
        edges allowed).

    Returns
    -------
    numpy.ndarray of int64 (m,)
        Colour of every edge in ``[0, Δ)``; edges sharing an endpoint get distinct colours.

    Notes
    -----
    Alternating-path (Kempe chain) algorithm, the constructive proof of Kőnig's theorem:
    insert edges one by one; if no colour is free at both ends, take ``a`` free at ``u``
    and ``b`` free at ``v``, swap ``a``/``b`` along the ``a/b`` path from ``v`` (it cannot
    reach ``u`` in a bipartite graph), then use ``a``. Free colours are kept as bitmasks,
    so the common case (a colour free at both ends) is O(Δ/64); the worst case is
    O(m·n). The loop is compiled (:mod:`icefabric.control.coloring_kernel`, same colours
    as :func:`coloring_reference`). Alon's divide-and-conquer algorithm [2]_ and
    Cole–Ost–Schirra [3]_ reach O(m log Δ); in the fabrics we plan (tens to hundreds of
    leaves) alternating paths are short and the simple method is faster in practice.

    References
    ----------
    .. [1] D. Kőnig, "Gráfok és alkalmazásuk a determinánsok és a halmazok elméletére",
       Matematikai és Természettudományi Értesítő 34, 1916.
    .. [2] N. Alon, "A simple algorithm for edge-coloring bipartite multigraphs",
       Information Processing Letters 85(6), 2003.
    .. [3] R. Cole, K. Ost, S. Schirra, "Edge-coloring bipartite multigraphs in
       O(E log D) time", Combinatorica 21(1), 2001.

    Examples
    --------
    >>> c = bipartite_edge_coloring([0, 0, 1, 1], [0, 1, 0, 1])
    >>> sorted(c.tolist()), is_proper_coloring([0, 0, 1, 1], [0, 1, 0, 1], c)
    ([0, 0, 1, 1], True)
    """
    u = np.asarray(u, dtype=np.int64).ravel()
    v = np.asarray(v, dtype=np.int64).ravel()
    if u.shape != v.shape:
        raise ValueError("u and v must have the same length")
    if len(u) == 0:
        return np.full(0, -1, dtype=np.int64)
    if u.min() < 0 or v.min() < 0:
        raise ValueError("vertex ids must be non-negative")
    delta = max_degree(u, v)
    nu, nv = int(u.max()) + 1, int(v.max()) + 1
    if (nu + nv) * delta > _DENSE_MAX:
        return coloring_reference(u, v)
    return color_edges(u, v, nu, nv, delta)


def coloring_reference(u, v) -> np.ndarray:
    """:func:`bipartite_edge_coloring` in pure Python, with sparse per-vertex tables: the
    reference the compiled kernel is tested against, and the fallback where the kernel's
    dense (vertex x colour) tables would not fit."""
    u = np.asarray(u, dtype=np.int64).ravel()
    v = np.asarray(v, dtype=np.int64).ravel()
    m = len(u)
    colors = np.full(m, -1, dtype=np.int64)
    if m == 0:
        return colors
    delta = max_degree(u, v)
    nu, nv = int(u.max()) + 1, int(v.max()) + 1
    # at[side][vertex]: colour -> edge; used[side][vertex]: bitmask of used colours.
    at_u: list[dict[int, int]] = [{} for _ in range(nu)]
    at_v: list[dict[int, int]] = [{} for _ in range(nv)]
    used_u = [0] * nu
    used_v = [0] * nv
    full = (1 << delta) - 1
    col = [-1] * m
    ul, vl = u.tolist(), v.tolist()
    for e in range(m):
        x, y = ul[e], vl[e]
        common = full & ~(used_u[x] | used_v[y])
        if common:
            c = (common & -common).bit_length() - 1
        else:
            fa = full & ~used_u[x]
            fb = full & ~used_v[y]
            a = (fa & -fa).bit_length() - 1
            b = (fb & -fb).bit_length() - 1
            # Collect the a/b alternating path starting at y with colour a.
            path = []
            side, node, want = 1, y, a
            while True:
                d = at_v[node] if side else at_u[node]
                f = d.get(want)
                if f is None:
                    break
                path.append(f)
                node = ul[f] if side else vl[f]
                side ^= 1
                want = b if want == a else a
            for f in path:  # remove, then re-add with swapped colours
                cf = col[f]
                del at_u[ul[f]][cf]
                del at_v[vl[f]][cf]
                used_u[ul[f]] ^= 1 << cf
                used_v[vl[f]] ^= 1 << cf
            for f in path:
                cf = b if col[f] == a else a
                col[f] = cf
                at_u[ul[f]][cf] = f
                at_v[vl[f]][cf] = f
                used_u[ul[f]] |= 1 << cf
                used_v[vl[f]] |= 1 << cf
            c = a
        col[e] = c
        at_u[x][c] = e
        at_v[y][c] = e
        used_u[x] |= 1 << c
        used_v[y] |= 1 << c
    colors[:] = col
    return colors


def is_proper_coloring(u, v, colors) -> bool:
    """True when no two edges sharing an endpoint have the same colour."""
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    c = np.asarray(colors, dtype=np.int64)
    if np.any(c < 0):
        return False
    for side in (u, v):
        key = side * (int(c.max(initial=0)) + 1) + c
        if len(np.unique(key)) != len(key):
            return False
    return True
