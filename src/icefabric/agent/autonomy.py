"""End-side autonomous rules on a host: the agent runs the same step function as the
simulator's end-side model (:mod:`icefabric.dataplane.endside`), over its plan's QPs.

1. **Path failure seen locally** (a link of a QP's planned route is down) -> the QP moves to
   its precomputed backup source port at once; the failure is reported and the controller
   re-plans globally.
2. **Persistent congestion** (CNPs above the threshold in ``persist_windows`` consecutive
   windows on a QP) -> the pacer is released and DCQCN governs that QP until the next plan.
3. **Controller unreachable** -> nothing changes; the last plan stays in force.
4. **New plan version** -> every QP returns to planned mode on its primary port.

The runner executes the actions returned here through its actuator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icefabric.dataplane.endside import (
    EV_BACKUP_PORT,
    EV_FALLBACK,
    EndSideParams,
    EndSideState,
    endside_step,
)
from icefabric.qpid import QpId
from icefabric.schemas_service import HostPlan


@dataclass(frozen=True)
class SwitchPort:
    qp: QpId
    sport: int
    reason: str


@dataclass(frozen=True)
class DropPacing:
    qp: QpId
    reason: str


class LocalRules:
    """End-side state of one host's QPs under its current plan.

    Parameters
    ----------
    params : EndSideParams — CNP window, threshold and persistence.
    """

    def __init__(self, params: EndSideParams = EndSideParams()):
        self.params = params
        self.plan: HostPlan | None = None
        self.qps: list[QpId] = []
        self.index: dict[QpId, int] = {}
        self.state = EndSideState.initial(0)

    def on_plan(self, plan: HostPlan) -> None:
        """A new plan: QPs restart in planned mode on their primary ports."""
        self.plan = plan
        self.qps = [q.qp_id for q in plan.qps]
        self.index = {k: i for i, k in enumerate(self.qps)}
        self.state = EndSideState.initial(len(self.qps), plan.version)

    def step(self, *, cnps_in_window: dict[QpId, int] | None = None,
             down_link_ids: set[int] | frozenset = frozenset()
             ) -> tuple[list[SwitchPort], list[DropPacing]]:
        """One CNP window with the local observations; returns the actions to take."""
        if self.plan is None or not self.qps:
            return [], []
        n = len(self.qps)
        cnps = np.zeros(n, dtype=np.int64)
        for k, c in (cnps_in_window or {}).items():
            i = self.index.get(k)
            if i is not None:
                cnps[i] = c
        down = np.zeros(n, dtype=bool)
        if down_link_ids:
            for i, q in enumerate(self.plan.qps):
                down[i] = any(l in down_link_ids for r in q.routes for l in r)
        self.state, events = endside_step(self.state, cnps, down, self.plan.version,
                                          self.params)
        ports, unpace = [], []
        for i in np.flatnonzero(events == EV_BACKUP_PORT).tolist():
            q = self.plan.qps[i]
            if q.backup_sport is not None and q.backup_sport != q.sport:
                ports.append(SwitchPort(self.qps[i], q.backup_sport,
                                        "planned path lost a link"))
        for i in np.flatnonzero(events == EV_FALLBACK).tolist():
            if self.plan.qps[i].rate_bps is not None:
                unpace.append(DropPacing(self.qps[i], f"CNPs in {self.params.persist_windows}"
                                         f" consecutive windows: DCQCN takes over"))
        return ports, unpace


def on_links_down(plan: HostPlan | None, down_link_ids: set[int]) -> list[SwitchPort]:
    """Backup-port switches for QPs whose planned route uses a failed link (stateless)."""
    if plan is None:
        return []
    rules = LocalRules()
    rules.on_plan(plan)
    return rules.step(down_link_ids=down_link_ids)[0]
