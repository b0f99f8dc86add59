"""Writer of HCCL's per-QP source-port file ``MultiQpSrcPort.cfg``.

HCCL reads ``$HCCL_RDMA_QP_PORT_CONFIG_PATH/MultiQpSrcPort.cfg`` with one line per NIC pair
``srcIP,dstIP=srcPort0,srcPort1,...``: the number of ports is the number of QPs between the
pair and port ``i`` is QP ``i``'s UDP source port (≤ 32 per pair, ≤ 131,072 lines; see
domain-facts §7.2). HCCL has no per-QP pacing knob, so rates are not applied here (DCQCN
stays in charge). The file is replaced atomically (write + rename).

The file is not HCCL's first choice: the CANN environment-variable reference
(``HCCL_RDMA_QPS_PER_CONNECTION``, "QP configuration priority") ranks the management
plane's multi-QP configuration (``hccn_tool ... -s multi_qp``) above the NSLB's QP
configuration (``hccn_tool ... -t nslb-dp``), both above ``HCCL_RDMA_QP_PORT_CONFIG_PATH``
and that above ``HCCL_RDMA_QPS_PER_CONNECTION``. A NIC pair configured by a higher source
keeps that source's ports whatever the file says, so the actuator takes the higher sources
in force (:class:`HigherSetting`, e.g. an ``hccn_tool`` query the operator names) and
reports the QPs of those pairs as not steered instead of acking them.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from icefabric.agent.actuators.base import Actuator, ApplyResult
from icefabric.schemas_service import HostPlan, QpPlan

FILE_NAME = "MultiQpSrcPort.cfg"
MAX_PORTS_PER_PAIR = 32
MAX_LINES = 131_072


def render_cfg(qps: list[QpPlan]) -> tuple[str, list[str]]:
    """The file text for ``qps`` (pairs in first-seen order, ports by QP ordinal), and
    warnings for what could not be written."""
    pairs: dict[tuple[str, str], list[QpPlan]] = {}
    warnings = []
    for q in qps:
        if q.sport is None:
            warnings.append(f"{q.src_ip}->{q.dst_ip} qpn {q.lqpn}: no source port planned")
            continue
        pairs.setdefault((q.src_ip, q.dst_ip), []).append(q)
    lines = []
    for (s, d), lst in pairs.items():
        lst.sort(key=lambda q: q.ordinal)
        if len(lst) > MAX_PORTS_PER_PAIR:
            warnings.append(f"{s},{d}: {len(lst)} QPs, HCCL takes at most "
                            f"{MAX_PORTS_PER_PAIR}; extra QPs keep their default ports")
            lst = lst[:MAX_PORTS_PER_PAIR]
        lines.append(f"{s},{d}=" + ",".join(str(q.sport) for q in lst))
    if len(lines) > MAX_LINES:
        warnings.append(f"{len(lines)} NIC pairs; HCCL reads at most {MAX_LINES}")
        lines = lines[:MAX_LINES]
    return "".join(x + "\n" for x in lines), warnings


@dataclass(frozen=True)
class HigherSetting:
    """A per-QP port source HCCL reads before ``MultiQpSrcPort.cfg``: ``argv`` prints the
    NIC pairs it configures, one ``srcIP,dstIP[=ports]`` line each (``0.0.0.0`` = any
    address, as in the file). Which ``hccn_tool`` query prints them depends on the CANN
    version, so the operator names the command (``icefab agent --hccl-higher``)."""

    name: str
    argv: tuple[str, ...]

    def pairs(self) -> set[tuple[str, str]]:
        """The NIC pairs this source sets now (none if the command fails or is absent)."""
        try:
            out = subprocess.run(self.argv, capture_output=True, text=True, timeout=10,
                                 check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return set()
        return {(s, d) for s, d in (_pair(x) for x in out.splitlines()) if s and d}


def _pair(line: str) -> tuple[str, str]:
    pair = line.strip().partition("=")[0]
    s, _, d = pair.partition(",")
    return s.strip(), d.strip()


def overridden(q: QpPlan, pairs: set[tuple[str, str]]) -> bool:
    """Whether a higher source's ``pairs`` cover QP ``q``'s NIC pair (``0.0.0.0`` = any)."""
    any_ip = "0.0.0.0"
    return any((s in (q.src_ip, any_ip)) and (d in (q.dst_ip, any_ip)) for s, d in pairs)


def parse_cfg(text: str) -> dict[tuple[str, str], list[int]]:
    """Read a ``MultiQpSrcPort.cfg`` back (for tests and operators)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pair, _, ports = line.partition("=")
        s, _, d = pair.partition(",")
        out[(s.strip(), d.strip())] = [int(p) for p in ports.split(",") if p.strip()]
    return out


class HcclCfgActuator(Actuator):
    """Writes the whole host plan into ``directory/MultiQpSrcPort.cfg`` on every change."""

    name = "hccl-cfg"

    def __init__(self, directory: str | Path = ".", higher: Sequence[HigherSetting] = ()):
        super().__init__()
        self.directory = Path(directory)
        self.higher = tuple(higher)
        self.path = self.directory / FILE_NAME

    def _apply(self, plan: HostPlan, changed: list[QpPlan]) -> ApplyResult:
        text, warnings = render_cfg(plan.qps)
        self._write(text)
        failed = {q.qp_id for q in plan.qps if q.sport is None}
        for h in self.higher:
            pairs = h.pairs()
            lost = {q.qp_id for q in plan.qps if q.sport is not None and overridden(q, pairs)}
            if lost:
                warnings.append(f"{len(lost)} QP(s) not steered: {h.name} sets their NIC "
                                "pairs' ports and HCCL reads it before MultiQpSrcPort.cfg")
            failed |= lost
        return ApplyResult(0, failed, warnings)

    def _write(self, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".MultiQpSrcPort.", dir=self.directory)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())  # the rename must not land before the bytes
            os.chmod(tmp, 0o644)  # HCCL's processes read it (mkstemp makes it 0600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _set_one(self, key, sport, rate_bps) -> bool:
        # HCCL reads the file when it (re)connects QPs; the next full apply rewrites it.
        return False
