"""Weighted max-min fair rates by progressive filling, vectorized over a sparse incidence.

This is the rate vector an ideally fair data plane converges to; the flow engine uses it
between events, and ICE's controller uses it to set per-QP rates before traffic starts.

``A[l, f]`` is the fraction of flow ``f``'s rate that crosses link ``l`` (coupled pipelined
flows and multi-QP splits give fractional or >1 entries). All unfrozen flows grow at the
same speed; when a link saturates, every flow crossing it freezes; a flow also freezes at
its own rate cap (a NIC pacer). Each round costs O(nnz); the number of rounds is the number
of distinct bottleneck levels.

References
----------
.. [1] D. Bertsekas, R. Gallager, *Data Networks*, 2nd ed., §6.5.2 (max-min fairness,
   progressive filling), 1992.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

_REL_EPS = 1e-9


def maxmin_rates(incidence: sp.csr_matrix, capacity_bps: np.ndarray,
                 rate_cap_bps: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rate of every flow (column of ``incidence``).

    Parameters
    ----------
    incidence : scipy.sparse matrix, shape (L, F) — non-negative link-by-flow coefficients.
    capacity_bps : ndarray, shape (L,) — link capacities in bits/s (> 0).
    rate_cap_bps : ndarray, shape (F,), optional — per-flow caps (``inf`` = none).

    Returns
    -------
    ndarray, shape (F,) — rates in bits/s. A flow that crosses no link and has no cap gets
    ``inf`` (it is not limited by the network).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))
    >>> maxmin_rates(A, np.array([10.0, 4.0])).tolist()
    [8.0, 2.0, 2.0]
    """
    A = sp.coo_matrix(incidence, dtype=np.float64)
    A.sum_duplicates()  # row-major order, as a CSR matrix-vector product sums
    return maxmin_coo(A.row, A.col, A.data, capacity_bps, rate_cap_bps, n_flows=A.shape[1])


def maxmin_coo(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
               capacity_bps: np.ndarray, rate_cap_bps: np.ndarray | None = None, *,
               n_flows: int) -> np.ndarray:
    """:func:`maxmin_rates` on the incidence's non-zero entries ``(rows, cols, vals)``
    (link, flow, coefficient): the same progressive filling with plain numpy, for callers
    that solve many small instances (the flow engine's active flows, event after event).

    Examples
    --------
    >>> import numpy as np
    >>> maxmin_coo(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 2]), np.ones(4),
    ...            np.array([10.0, 4.0]), n_flows=3).tolist()
    [8.0, 2.0, 2.0]
    """
    F = n_flows
    cap = np.asarray(capacity_bps, dtype=np.float64)
    L = len(cap)
    fcap = (np.full(F, np.inf) if rate_cap_bps is None
            else np.asarray(rate_cap_bps, dtype=np.float64).copy())
    rate = np.zeros(F)
    if F == 0:
        return rate
    uses_link = np.bincount(cols, minlength=F) > 0
    frozen = np.zeros(F, dtype=bool)
    # Flows on no link: only their cap limits them.
    free = ~uses_link
    rate[free] = fcap[free]
    frozen |= free
    rem = cap.copy()
    for _ in range(F + L + 1):
        if frozen.all():
            break
        # total coefficient of growing flows on each link
        s = np.bincount(rows, weights=vals * ~frozen[cols], minlength=L)
        active_links = s > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            d_link = np.where(active_links, rem / np.where(active_links, s, 1.0), np.inf)
        grow = ~frozen
        d = min(d_link.min(initial=np.inf), (fcap[grow] - rate[grow]).min(initial=np.inf))
        d = max(d, 0.0)
        rate[~frozen] += d
        rem -= s * d
        sat = active_links & (rem <= _REL_EPS * cap)
        rem[sat] = 0.0
        hit = np.bincount(cols, weights=sat[rows], minlength=F) > 0
        capped = rate >= fcap * (1 - _REL_EPS)
        newly = ~frozen & (hit | capped)
        if not newly.any():  # numerical guard: freeze the flows on the tightest link
            tight = (d_link <= d * (1 + 1e-12))[rows]
            newly = ~frozen & (np.bincount(cols, weights=tight, minlength=F) > 0)
            if not newly.any():
                break
        frozen |= newly
    return rate
