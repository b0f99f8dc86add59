"""End-side autonomous rules: what an agent does on its own, immediately, between plans.

1. **Link failure on a planned path** -> move the QP to its precomputed backup source port
   (if the plan gave one) and report the failure; the controller re-plans globally.
2. **Unexpected congestion** (CNP rate above a threshold on a paced QP) -> drop the pacer and
   let DCQCN take over for that QP until the next plan.
3. **Controller unreachable** -> keep the last plan (nothing is undone).

Rules are pure functions over the applied plan and observations, so they are unit-tested
without a NIC; the runner executes the actions they return through the actuator.
"""

from __future__ import annotations

from dataclasses import dataclass

from icefabric.agent.actuators.base import QpKey, qp_key
from icefabric.schemas_service import HostPlan


@dataclass(frozen=True)
class SwitchPort:
    key: QpKey
    sport: int
    reason: str


@dataclass(frozen=True)
class DropPacing:
    key: QpKey
    reason: str


@dataclass(frozen=True)
class Rules:
    """Thresholds of the local rules.

    cnp_rate_threshold : float — CNPs per second on a paced QP above which pacing is
        considered wrong and DCQCN takes over (a few hundred CNP/s means the queue keeps
        building; [UNCONFIRMED] default, configurable).
    """

    cnp_rate_threshold: float = 500.0


def on_links_down(plan: HostPlan | None, down_link_ids: set[int]) -> list[SwitchPort]:
    """Backup-port switches for QPs whose planned route uses a failed link."""
    if plan is None or not down_link_ids:
        return []
    out = []
    for q in plan.qps:
        hit = any(l in down_link_ids for r in q.routes for l in r)
        if hit and q.backup_sport is not None and q.backup_sport != q.sport:
            out.append(SwitchPort(qp_key(q), q.backup_sport, "planned path lost a link"))
    return out


def on_cnp_rates(plan: HostPlan | None, cnp_per_s: dict[QpKey, float],
                 rules: Rules = Rules()) -> list[DropPacing]:
    """Unpace QPs that see persistent congestion despite their planned rate."""
    if plan is None:
        return []
    out = []
    for q in plan.qps:
        k = qp_key(q)
        if q.rate_bps is not None and cnp_per_s.get(k, 0.0) > rules.cnp_rate_threshold:
            out.append(DropPacing(k, f"{cnp_per_s[k]:.0f} CNP/s > "
                                     f"{rules.cnp_rate_threshold:.0f}"))
    return out
