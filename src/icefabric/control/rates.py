"""ICE global active congestion control: per-flow / per-QP rates from the global view.

Before traffic starts, the controller knows every QP's planned path and which QPs run at
the same time (a *phase*: the collectives that the jobs run concurrently). It gives every
coupled flow its weighted max-min fair share over the planned paths, with heterogeneous link
and NIC speeds and per-job weights, and the NIC pacer of each QP is set to
``flow rate x QP share`` (minus a small headroom so queues stay empty). DCQCN stays enabled
underneath as the safety net.

References
----------
.. [1] D. Bertsekas, R. Gallager, *Data Networks*, 2nd ed., §6.5.2 (max-min fairness).
.. [2] Y. Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015
   (DCQCN, the reactive baseline ICE keeps as a fallback).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from icefabric.dataplane.fairness import maxmin_rates


def dag_phases(deps: list[list[int]]) -> np.ndarray:
    """Phase of every flow = its depth in the dependency DAG (longest chain of predecessors).

    Flows of the same depth are the ones that run concurrently when every job proceeds in
    lock-step (all jobs' first collectives, then their second ...), the controller's view of
    a phase. Raises ValueError on a dependency cycle.
    """
    n = len(deps)
    indeg = np.fromiter((len(d) for d in deps), np.int64, n)
    children: list[list[int]] = [[] for _ in range(n)]
    for f, ds in enumerate(deps):
        for d in ds:
            children[d].append(f)
    phase = np.zeros(n, dtype=np.int64)
    stack = [f for f in range(n) if indeg[f] == 0]
    seen = 0
    while stack:
        f = stack.pop()
        seen += 1
        for c in children[f]:
            phase[c] = max(phase[c], phase[f] + 1)
            indeg[c] -= 1
            if indeg[c] == 0:
                stack.append(c)
    if seen != n:
        raise ValueError("dependency cycle among flows")
    return phase


def allocate_rates(incidence: sp.csr_matrix, capacity_bps: np.ndarray, phase: np.ndarray, *,
                   weight: np.ndarray | None = None, headroom: float = 0.02) -> np.ndarray:
    """Weighted max-min rate of every flow among the flows of its phase.

    Parameters
    ----------
    incidence : sparse (L, F) — link-by-flow coefficients over the *planned* paths (a
        coupled ring channel crosses many links; a QP split in k has coefficients 1/k).
    capacity_bps : (L,) — link capacities (heterogeneous NIC and fabric speeds).
    phase : (F,) int — concurrency group of every flow (see :func:`dag_phases`).
    weight : (F,), optional — job weights: a flow of weight w gets w times the share of a
        weight-1 flow on a common bottleneck (scaling the coefficients by 1/w).
    headroom : float — fraction left unallocated on every link so queues stay near empty.

    Returns
    -------
    (F,) float — pacing rate of every flow in bits/s.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 1.0]]))
    >>> allocate_rates(A, np.array([100.0, 30.0]), np.array([0, 0]), headroom=0).tolist()
    [70.0, 30.0]
    """
    A = sp.csc_matrix(incidence, dtype=np.float64)
    F = A.shape[1]
    w = np.ones(F) if weight is None else np.asarray(weight, dtype=np.float64)
    if np.any(w <= 0):
        raise ValueError("job weights must be positive")
    cap = np.asarray(capacity_bps, dtype=np.float64) * (1.0 - headroom)
    rate = np.zeros(F)
    for ph in np.unique(phase):
        idx = np.flatnonzero(phase == ph)
        # weighted max-min: grow w_f * t for every flow -> coefficients a_lf * w_f on t
        sub = A[:, idx] @ sp.diags(w[idx])
        t = maxmin_rates(sub.tocsr(), cap)
        rate[idx] = t * w[idx]
    return rate
