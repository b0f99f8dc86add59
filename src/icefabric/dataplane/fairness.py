"""Weighted max-min fair rates by progressive filling, vectorized over a sparse incidence.

This is the rate vector an ideally fair data plane converges to; the flow engine uses it
between events, and ICE's controller uses it to set per-QP rates before traffic starts.

``A[l, f]`` is the fraction of flow ``f``'s rate that crosses link ``l`` (coupled pipelined
flows and multi-QP splits give fractional or >1 entries). All unfrozen flows grow at the
same speed; when a link saturates, every flow crossing it freezes; a flow also freezes at
its own rate cap (a NIC pacer). The result is computed without growing level by level: each
round freezes every link that is already known to be a bottleneck (see
:func:`maxmin_rates`), so it costs O(nnz) per round and few rounds.

References
----------
.. [1] D. Bertsekas, R. Gallager, *Data Networks*, 2nd ed., §6.5.2 (max-min fairness,
   progressive filling), 1992.
.. [2] D. Nace, M. Pióro, "Max-min fairness and its applications to routing and
   load-balancing in communication networks: a tutorial", IEEE Communications Surveys &
   Tutorials 10(4), 2008 (bottleneck links, water-filling).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

_REL_EPS = 1e-9


def maxmin_rates(incidence: sp.spmatrix, capacity_bps: np.ndarray,
                 rate_cap_bps: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rate of every flow (column of ``incidence``).

    Parameters
    ----------
    incidence : scipy.sparse matrix, shape (L, F) — non-negative link-by-flow coefficients
        (CSC avoids a conversion).
    capacity_bps : ndarray, shape (L,) — link capacities in bits/s (> 0).
    rate_cap_bps : ndarray, shape (F,), optional — per-flow caps (``inf`` = none).

    Returns
    -------
    ndarray, shape (F,) — rates in bits/s. A flow that crosses no link and has no cap gets
    ``inf`` (it is not limited by the network).

    Notes
    -----
    Each round computes every link's fair share ``x_l = rem_l / s_l`` (remaining capacity
    over the summed coefficients of its unfrozen flows) and, per flow, the smallest share
    on its path ``m_f`` (or its cap). A link whose share is not above ``m_f`` of any of
    its flows is a bottleneck: progressive filling would saturate it at exactly ``x_l``,
    because a link's share never falls while flows elsewhere freeze below it. All
    bottleneck links and binding caps freeze in the same round, so the rounds follow the
    depth of the bottleneck chain, not the number of distinct rate levels.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))
    >>> maxmin_rates(A, np.array([10.0, 4.0])).tolist()
    [8.0, 2.0, 2.0]
    """
    A = sp.csc_matrix(incidence, dtype=np.float64)
    F = A.shape[1]
    if F == 0:
        return np.zeros(0)
    A.sum_duplicates()
    fcap = np.full(F, np.inf) if rate_cap_bps is None else rate_cap_bps
    return maxmin_entries(A.indices, np.repeat(np.arange(F), np.diff(A.indptr)), A.data,
                          capacity_bps, fcap)


def maxmin_entries(link: np.ndarray, flow: np.ndarray, coef: np.ndarray,
                   capacity_bps: np.ndarray, rate_cap_bps: np.ndarray) -> np.ndarray:
    """:func:`maxmin_rates` of an incidence given as entries ``(link, flow, coef)``
    grouped by flow (no duplicate pairs; flows ``0..len(rate_cap_bps)-1``), for callers
    that already hold them. (The batched flow engine's compiled copy,
    ``engine/batch_kernel._maxmin``, follows it operation by operation.)"""
    cap = np.asarray(capacity_bps, dtype=np.float64)
    fcap = np.asarray(rate_cap_bps, dtype=np.float64)
    L, F = len(cap), len(fcap)
    rate = np.zeros(F)
    # Entries (link, flow, coefficient) sorted by flow; frozen flows' entries are dropped.
    keep = coef > 0
    link, flow, coef = link[keep].astype(np.int64), flow[keep], coef[keep]
    on_links = np.zeros(F, dtype=bool)
    on_links[flow] = True
    rate[~on_links] = fcap[~on_links]
    rem = cap.copy()
    while len(flow):
        s = np.bincount(link, coef, minlength=L)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(s > 0, rem / s, np.inf)
        # smallest share on each flow's path (entries are grouped by flow)
        first = np.flatnonzero(np.r_[True, flow[1:] != flow[:-1]])
        f = flow[first]
        path_min = np.minimum.reduceat(share[link], first)
        m = np.zeros(F)
        m[f] = np.minimum(path_min, fcap[f])
        # a link is a bottleneck unless one of its flows is held lower elsewhere
        below = m[flow] < share[link] * (1 - _REL_EPS)
        bottleneck = np.bincount(link[below], minlength=L) == 0
        freeze = np.zeros(F, dtype=bool)
        freeze[flow[bottleneck[link]]] = True
        freeze[f[fcap[f] <= path_min * (1 + _REL_EPS)]] = True
        rate[freeze] = m[freeze]
        done = freeze[flow]
        rem -= np.bincount(link[done], coef[done] * rate[flow[done]], minlength=L)
        np.maximum(rem, 0.0, out=rem)
        link, flow, coef = link[~done], flow[~done], coef[~done]
    return rate
