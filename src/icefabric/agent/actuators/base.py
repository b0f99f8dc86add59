"""The actuator interface: apply per-QP source ports and pacing rates on one host."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

from icefabric.qpid import QpId
from icefabric.schemas_service import HostPlan, QpPlan


@dataclass
class ApplyResult:
    """What an apply did: ``failed`` names the QPs whose settings did not take (they are
    retried by the next plan, even an identical one), ``messages`` say why."""

    applied: int = 0
    failed: set[QpId] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class InForce:
    """What an actuator put in force on a QP: its source port and rate, on the QP numbers
    the plan named (a plan that names the QP by other numbers is a change: the controller
    found which live QP it is)."""

    lqpn: int
    rqpn: int
    sport: int | None
    rate_bps: float | None

    @classmethod
    def of(cls, q: QpPlan) -> InForce:
        return cls(q.lqpn, q.rqpn, q.sport, q.rate_bps)


class Actuator(ABC):
    """Applies plans; remembers what it applied (``state``) so it can skip unchanged QPs.

    ``state`` maps a QP (its :class:`~icefabric.qpid.QpId`) to what is :class:`InForce` on
    it: only what applied is recorded, so a QP whose apply failed stays "changed" and the
    next plan retries it. ``planned`` maps each QP of the last plan to its entry (a
    :class:`~icefabric.schemas_service.HostPlan` names each QP once); it is replaced whole,
    never changed in place, so a reader without a lock sees one plan or the next.
    """

    name = ""

    def __init__(self):
        self.state: dict[QpId, InForce] = {}
        self.planned: dict[QpId, QpPlan] = {}

    def apply(self, plan: HostPlan) -> ApplyResult:
        """Bring every QP of ``plan`` to its planned source port and rate."""
        self.planned = {q.qp_id: q for q in plan.qps}
        changed = {i: q for i, q in self.planned.items() if self.state.get(i) != InForce.of(q)}
        try:
            res = self._apply(plan, list(changed.values()))
        except OSError as e:
            return ApplyResult(0, set(changed), [f"{type(e).__name__}: {e}"])
        for i, q in changed.items():
            if i not in res.failed:
                self.state[i] = InForce.of(q)
        # QPs the plan no longer names (ended jobs) are forgotten, so a plan naming one
        # again applies it again.
        self.state = {k: v for k, v in self.state.items() if k in self.planned}
        res.applied = len(plan.qps) - len(res.failed)
        return res

    def set_sport(self, qp: QpId, sport: int) -> bool:
        """Change one QP's source port now (autonomous backup switch)."""
        old = self.state.get(qp)
        if old is None:
            return False
        ok = self._set_one(qp, sport, old.rate_bps)
        if ok:
            self.state[qp] = replace(old, sport=sport)
        return ok

    def set_rate(self, qp: QpId, rate_bps: float | None) -> bool:
        old = self.state.get(qp)
        if old is None:
            return False
        ok = self._set_one(qp, old.sport, rate_bps)
        if ok:
            self.state[qp] = replace(old, rate_bps=rate_bps)
        return ok

    @abstractmethod
    def _apply(self, plan: HostPlan, changed: list[QpPlan]) -> ApplyResult:
        """Apply the changed QPs (the full plan is given for file-based actuators;
        ``planned`` already holds it)."""

    def _set_one(self, qp: QpId, sport: int, rate_bps: float | None) -> bool:
        return True
