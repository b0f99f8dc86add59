"""ICE end-side autonomous control: what every host does on its own, at once.

The controller pushes a plan (per QP: source port, backup source port, pacing rate). The host
keeps it while local signals agree and reacts without a controller round-trip when they do
not (ICE's third part; DESIGN.md):

* **planned** mode: the NIC pacer holds the planned rate; DCQCN stays enabled underneath but
  sporadic CNPs are expected noise (a plan is computed with headroom, not for zero marks).
* CNPs that **persist** above the plan — at least ``cnp_threshold`` CNPs in each of
  ``persist_windows`` consecutive windows — mean reality departed from the plan (unknown
  traffic, a wrong demand estimate): the QP falls back to **dcqcn** mode (pacer released,
  DCQCN governs) and the host reports it.
* A **path failure** seen locally (link-down on the NIC, a port-down trap, retransmission
  timeouts) moves the QP to its precomputed **backup** source port immediately, then reports.
* **Controller unreachable**: nothing changes — the last plan stays in force.
* A **new plan** (version bump) resets the QP to planned mode on the plan's primary port.

The step function is vectorized over all QPs of a host (or of a whole simulated fabric).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PLANNED, DCQCN = 0, 1
EV_FALLBACK, EV_BACKUP_PORT, EV_REPLANNED = 1, 2, 3


@dataclass(frozen=True)
class EndSideParams:
    """Thresholds of the local rules (configurable; no vendor default exists).

    cnp_window_ns : int — CNP counting window (default 50 µs, the DCQCN paper's CNP interval).
    cnp_threshold : int — CNPs per window that count as a "hot" window.
    persist_windows : int — consecutive hot windows before falling back to DCQCN.
    """

    cnp_window_ns: int = 50_000
    cnp_threshold: int = 2
    persist_windows: int = 3


@dataclass
class EndSideState:
    """Per-QP state: mode, hot-window streak, whether the backup port is in use, plan version."""

    mode: np.ndarray  # int8 PLANNED / DCQCN
    streak: np.ndarray  # int32 consecutive hot windows
    on_backup: np.ndarray  # bool
    plan_version: np.ndarray  # int64

    @classmethod
    def initial(cls, n_qps: int, plan_version: int = 0) -> EndSideState:
        return cls(np.zeros(n_qps, np.int8), np.zeros(n_qps, np.int32),
                   np.zeros(n_qps, bool), np.full(n_qps, plan_version, np.int64))


def endside_step(state: EndSideState, cnps_in_window: np.ndarray, path_down: np.ndarray,
                 plan_version: np.ndarray | int, p: EndSideParams = EndSideParams()
                 ) -> tuple[EndSideState, np.ndarray]:
    """Advance every QP by one CNP window.

    Parameters
    ----------
    cnps_in_window : (Q,) int — CNPs received by each QP in the window just ended.
    path_down : (Q,) bool — the QP's current path is known broken locally.
    plan_version : int or (Q,) — the newest plan version the host holds for each QP (equal
        to the state's when the controller is unreachable: the last plan stays in force).

    Returns
    -------
    (new_state, events) — ``events[q]`` is 0 or one of EV_FALLBACK, EV_BACKUP_PORT,
    EV_REPLANNED for the host to report to the controller.
    """
    q = len(state.mode)
    version = np.broadcast_to(np.asarray(plan_version, dtype=np.int64), (q,))
    events = np.zeros(q, np.int8)
    mode, streak = state.mode.copy(), state.streak.copy()
    on_backup = state.on_backup.copy()
    replanned = version > state.plan_version
    mode[replanned] = PLANNED
    streak[replanned] = 0
    on_backup[replanned] = False
    events[replanned] = EV_REPLANNED
    hot = np.asarray(cnps_in_window) >= p.cnp_threshold
    streak = np.where(hot, streak + 1, 0).astype(np.int32)
    fall = (mode == PLANNED) & (streak >= p.persist_windows)
    mode[fall] = DCQCN
    events[fall] = EV_FALLBACK
    move = np.asarray(path_down, dtype=bool) & ~on_backup
    on_backup |= move
    events[move] = EV_BACKUP_PORT
    return EndSideState(mode, streak, on_backup, np.maximum(state.plan_version, version)), events


def effective_rate(planned_bps: np.ndarray, dcqcn_bps: np.ndarray, mode: np.ndarray
                   ) -> np.ndarray:
    """Sending rate: in planned mode the pacer caps DCQCN's rate (DCQCN still cuts below the
    plan when it must: the safety net); in dcqcn mode DCQCN alone decides."""
    return np.where(mode == PLANNED, np.minimum(planned_bps, dcqcn_bps), dcqcn_bps)
