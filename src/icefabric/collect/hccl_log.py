"""HCCL (Ascend) plog lines and the rank facts that framework logs print around them.

Format source: CANN plog ``[LEVEL] MODULE(pid,process):YYYY-MM-DD-hh:mm:ss.mmm.uuu
[file:line][tid][tag]...message`` (Ascend "log reference"; real sample in
https://github.com/gpustack/gpustack/issues/2021), with ``errNo[0x...]`` before the message on
HCCL errors. Framework lines (MindIE runners) add ``rank:<r>, rankSize:<n>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from icefabric.collect._text import lines_of, to_text
from icefabric.schemas import ParseWarning

_PLOG = re.compile(
    r"^\[(?P<level>ERROR|WARNING|WARN|INFO|DEBUG|EVENT|TRACE)\] (?P<module>[A-Z_]+)"
    r"\((?P<pid>\d+),(?P<process>[^)]*)\):(?P<ts>\S+) \[(?P<src>[^\]]+)\]\[(?P<tid>\d+)\]"
    r"(?P<tags>(?:\[[^\]]*\])*)(?:errNo\[(?P<err>[^\]]+)\])?(?P<msg>.*?)\s*$"
)
_RANK = re.compile(r"\brank\s*[:=\[]\s*(?P<r>\d+)\]?,?\s*rank_?[Ss]ize\s*[:=\[]\s*(?P<n>\d+)")
_RANK_REV = re.compile(
    r"\brank_?[Ss]ize\s*[:=\[]\s*(?P<n>\d+)\]?,?\s*(?:user)?[Rr]ank(?:Id)?\s*[:=\[]\s*(?P<r>\d+)"
)


@dataclass
class HcclLog:
    """Plog records (dicts with pid, process, timestamp, src, tid, errNo, message) and ranks."""

    records: list[dict[str, Any]] = field(default_factory=list)
    rank: int | None = None
    rank_size: int | None = None
    warnings: list[ParseWarning] = field(default_factory=list)

    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["level"] == "ERROR"]

    def usable(self) -> bool:
        return bool(self.records or self.rank_size)


def parse_hccl_log(text: str | bytes, source: str | None = None) -> HcclLog:
    """Read HCCL plog lines and ``rank:<r>, rankSize:<n>`` facts from any log text.

    Parameters
    ----------
    text : str or bytes
        Log text (plog or a framework log that embeds it).
    source : str, optional
        Name used in warnings.

    Returns
    -------
    HcclLog
        Never raises; lines that are not HCCL lines are ignored.
    """
    out = HcclLog()
    for raw in lines_of(to_text(text)):
        m = _PLOG.match(raw.strip())
        if m:
            rec: dict[str, Any] = {
                "level": m["level"], "module": m["module"], "pid": int(m["pid"]),
                "process": m["process"], "timestamp": m["ts"], "src": m["src"],
                "tid": int(m["tid"]),
                "tags": re.findall(r"\[([^\]]*)\]", m["tags"] or ""),
                "message": m["msg"],
            }
            if m["err"]:
                rec["errNo"] = m["err"]
            out.records.append(rec)
        r = _RANK.search(raw) or _RANK_REV.search(raw)
        if r and out.rank_size is None:
            out.rank, out.rank_size = int(r["r"]), int(r["n"])
    return out
