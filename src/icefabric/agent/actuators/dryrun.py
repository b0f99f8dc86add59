"""Dry run: print the verbs / mlx5dv calls a real NIC actuator would make, change nothing.

A live RC QP in RTS gets its source port from ``mlx5dv_modify_qp_udp_sport`` (RTS->RTS,
rdma-core mlx5dv; domain-facts §4.2) and its pacing rate from ``ibv_modify_qp_rate_limit``
(rate in kbit/s). QPs not yet connected would instead get the GRH flow label at INIT->RTR
that maps to the wanted port (``fl = sport & 0x3FFF``, or ``0x4001`` for 0xC000).
"""

from __future__ import annotations

import sys
from typing import TextIO

from icefabric.agent.actuators.base import Actuator, ApplyResult
from icefabric.dataplane.roce import flow_label_for_sport
from icefabric.qpid import QpId
from icefabric.schemas_service import HostPlan, QpPlan
from icefabric.wire import rate_kbps


class DryRunActuator(Actuator):
    name = "dry-run"

    def __init__(self, stream: TextIO | None = None):
        super().__init__()
        self.stream = stream or sys.stdout
        self.calls: list[str] = []

    def _emit(self, line: str) -> None:
        self.calls.append(line)
        print(line, file=self.stream)

    def _calls_for(self, q: QpPlan, sport: int | None, rate_bps) -> None:
        if sport is not None:
            fl = int(flow_label_for_sport(sport))
            self._emit(f"mlx5dv_modify_qp_udp_sport(qp=0x{q.lqpn:06x} /* {q.src_ip}->"
                       f"{q.dst_ip} */, udp_sport={sport})  # or flow_label=0x{fl:05x} at "
                       "INIT->RTR")
        kbps = rate_kbps(rate_bps, unset=0)
        self._emit(f"ibv_modify_qp_rate_limit(qp=0x{q.lqpn:06x}, "
                   f"{{.rate_limit={kbps}, .max_burst_sz=0, .typical_pkt_sz=0}})"
                   + ("  # unlimited: DCQCN only" if kbps == 0 else ""))

    def _apply(self, plan: HostPlan, changed: list[QpPlan]) -> ApplyResult:
        self._emit(f"# plan v{plan.version} ({plan.policy}) for {plan.host}: "
                   f"{len(changed)} of {len(plan.qps)} QPs change")
        bad = set()
        for q in changed:
            try:
                self._calls_for(q, q.sport, q.rate_bps)
            except ValueError as e:
                self._emit(f"# skipped: {e}")
                bad.add(q.qp_id)
        return ApplyResult(0, bad)

    def _set_one(self, qp: QpId, sport: int, rate_bps) -> bool:
        q = self.planned.get(qp)
        if q is None:
            return False
        try:
            self._calls_for(q, sport, rate_bps)
        except ValueError:
            return False
        return True
