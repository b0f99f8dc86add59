"""The actuator interface: apply per-QP source ports and pacing rates on one host."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from icefabric.schemas_service import HostPlan, QpKey, QpPlan


def qp_key(q: QpPlan) -> QpKey:
    return q.key


@dataclass
class ApplyResult:
    """What an apply did: ``failed`` names the QPs whose settings did not take (they are
    retried by the next plan, even an identical one), ``messages`` say why."""

    applied: int = 0
    failed: set[QpKey] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)


class Actuator(ABC):
    """Applies plans; remembers what it applied (``state``) so it can skip unchanged QPs.

    ``state`` maps a QP key to ``(sport, rate_bps)`` currently in force: only what applied
    is recorded, so a QP whose apply failed stays "changed" and the next plan retries it.
    """

    name = ""

    def __init__(self):
        self.state: dict[QpKey, tuple[int | None, float | None]] = {}

    def apply(self, plan: HostPlan) -> ApplyResult:
        """Bring every QP of ``plan`` to its planned source port and rate."""
        changed = [q for q in plan.qps if self.state.get(qp_key(q)) != (q.sport, q.rate_bps)]
        try:
            res = self._apply(plan, changed)
        except OSError as e:
            return ApplyResult(0, {qp_key(q) for q in changed}, [f"{type(e).__name__}: {e}"])
        for q in changed:
            if qp_key(q) not in res.failed:
                self.state[qp_key(q)] = (q.sport, q.rate_bps)
        # QPs the plan no longer names (ended jobs; modelled numbers replaced by reported
        # ones) are forgotten, so a plan naming one again applies it again.
        keys = {qp_key(q) for q in plan.qps}
        self.state = {k: v for k, v in self.state.items() if k in keys}
        res.applied = len(plan.qps) - len(res.failed)
        return res

    def set_sport(self, key: QpKey, sport: int) -> bool:
        """Change one QP's source port now (autonomous backup switch)."""
        old = self.state.get(key)
        if old is None:
            return False
        ok = self._set_one(key, sport, old[1])
        if ok:
            self.state[key] = (sport, old[1])
        return ok

    def set_rate(self, key: QpKey, rate_bps: float | None) -> bool:
        old = self.state.get(key)
        if old is None:
            return False
        ok = self._set_one(key, old[0], rate_bps)
        if ok:
            self.state[key] = (old[0], rate_bps)
        return ok

    @abstractmethod
    def _apply(self, plan: HostPlan, changed: list[QpPlan]) -> ApplyResult:
        """Apply the changed QPs (the full plan is given for file-based actuators)."""

    def _set_one(self, key: QpKey, sport: int, rate_bps: float | None) -> bool:
        return True
