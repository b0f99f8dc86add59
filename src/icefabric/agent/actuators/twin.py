"""The digital twin's NICs: applying a plan records each QP's source port, rate and the
plan's routes, which the twin's data plane then uses (it re-hashes the port through every
switch's ECMP model, as real switches would)."""

from __future__ import annotations

import threading

from icefabric.agent.actuators.base import Actuator, ApplyResult
from icefabric.qpid import QpId
from icefabric.schemas_service import HostPlan, QpPlan


class TwinNicActuator(Actuator):
    """Records applied QP settings; ``applied`` holds the full :class:`QpPlan` per QP."""

    name = "twin"

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.applied: dict[QpId, QpPlan] = {}
        self.version = 0

    def _apply(self, plan: HostPlan, changed: list[QpPlan]) -> ApplyResult:
        with self.lock:  # the plan's QPs, as named in it (QP numbers too)
            self.applied = dict(self.planned)
            self.version = plan.version
        return ApplyResult()

    def _set_one(self, qp: QpId, sport: int, rate_bps: float | None) -> bool:
        with self.lock:
            q = self.applied.get(qp)
            if q is not None:
                self.applied[qp] = q.model_copy(update={"sport": sport, "rate_bps": rate_bps})
        return True
