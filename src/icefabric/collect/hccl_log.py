"""HCCL (Ascend) logs: plog lines, torch_npu / CANN error reports and transport links.

Format sources
--------------
* CANN plog ``[LEVEL] MODULE(pid,process):YYYY-MM-DD-hh:mm:ss.mmm.uuu [file:line][tid][tag]...
  message`` (Ascend "log reference"; real sample in https://github.com/gpustack/gpustack/issues/2021),
  with ``errNo[0x...]`` before the message on HCCL errors. Framework lines (MindIE runners) add
  ``rank:<r>, rankSize:<n>``.
* torch_npu error header ``[ERROR] <time> (PID:<pid>, Device:<dev>, RankID:<rank>) ERR<mm><cc>
  <SUBMODULE> <text>`` -- Ascend/pytorch ``torch_npu/csrc/core/npu/NPUException.cpp``
  (``formatErrorCode``; RankID is the job's ``RANK``, -1 when unset).
* torch_npu ``<func>:<file>:<line> HCCL function error: <call>, error code is <HcclResult>``
  (``torch_npu/csrc/distributed/HCCLUtils.hpp`` ``HCCL_CHECK_ERROR``; ``OPS function error`` for
  operator calls) followed by the CANN error message ``<code>: [PID: <pid>] <time> <text>``
  (older: ``<code>: <time> <text>``; newer: ``[PID: <pid>] <time> <Name>(<code>): <text>``).
  HcclResult values: ``hccl_types.h`` (CANN). A CANN message states its cause after
  ``Reason:`` and is followed by an indented ``Solution: <text>`` line (EI0009, EJ0001 in
  https://github.com/vllm-project/vllm-ascend/issues/3162, hiyouga/LlamaFactory#3839).
* Transport errors name both ends of the failed link: ``Transport init error. Reason:
  [Create][DestLink]Create Dest error! createLink para:rank[r]-localUserrank[u]-localIpAddr[ip],
  dst_rank[d]-remoteUserrank[v]-remote_ip_addr[ip]`` (``creakLink`` in older CANN), as posted in
  https://github.com/vllm-project/vllm-ascend/issues/3162 and #2643.
* Line prefixes added by the frameworks: PyTorch's ``[rank<N>]:`` (global rank) and vLLM's
  ``(<Worker> ... pid=<pid>) LEVEL mm-dd hh:mm:ss [file:line]``.

Unreadable lines never raise; a line that announces one of these records but does not fit its
format becomes a :class:`~icefabric.schemas.ParseWarning` naming the line.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from icefabric.collect._text import numbered_lines, to_text, warn
from icefabric.schemas import CclError, CommunicatorReport, ParseWarning, RankInfo

_PLOG = re.compile(
    r"^\[(?P<level>ERROR|WARNING|WARN|INFO|DEBUG|EVENT|TRACE)\] (?P<module>[A-Z_]+)"
    r"\((?P<pid>\d+),(?P<process>[^)]*)\):(?P<ts>\S+) \[(?P<src>[^\]]+)\]\[(?P<tid>\d+)\]"
    r"(?P<tags>(?:\[[^\]]*\])*)(?:errNo\[(?P<err>[^\]]+)\])?(?P<msg>.*?)\s*$"
)
_RANK = re.compile(r"\brank\s*[:=\[]\s*(?P<r>\d+)\]?,?\s*rank_?[Ss]ize\s*[:=\[]\s*(?P<n>\d+)")
_RANK_REV = re.compile(
    r"\brank_?[Ss]ize\s*[:=\[]\s*(?P<n>\d+)\]?,?\s*(?:user)?[Rr]ank(?:Id)?\s*[:=\[]\s*(?P<r>\d+)"
)
_TORCH_RANK = re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")
_WORKER = re.compile(
    r"^\((?:[^()]*?\s)?pid=(?P<pid>\d+)(?:,[^)]*)?\)\s*"
    r"(?:[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\]\s*)?"
)
_NPU_HEADER = re.compile(
    r"\[ERROR\] (?P<time>\d{4}-\d\d-\d\d-[\d:.]+) \(PID:(?P<pid>\d+), Device:(?P<dev>-?\d+), "
    r"RankID:(?P<rank>-?\d+)\)\.? (?P<code>ERR\d+) (?P<msg>.*?)\s*$"
)
_CODE = r"E[A-Z0-9]\d{4}"
_CANN = re.compile(
    rf"^(?:RuntimeError: )?(?P<code>{_CODE}): (?:\[PID: (?P<pid>\d+)\] )?"
    r"(?:(?P<time>\d{4}-\d\d-\d\d-[\d:.]+) )?(?P<msg>.*?)\s*$"
)
_CANN_NAMED = re.compile(
    rf"^(?:RuntimeError: )?\[PID: (?P<pid>\d+)\] (?P<time>\d{{4}}-\d\d-\d\d-[\d:.]+) "
    rf"(?P<name>\w+)\((?P<code>{_CODE})\): (?P<msg>.*?)\s*$"
)
_FUNCTION = re.compile(
    r"(?<!\S)(?P<where>\S+) (?P<lib>HCCL|OPS) function error: (?P<call>.+?), "
    r"error code is (?P<code>\d+)"
)
_LINK = re.compile(
    r"\bcre\w*Link para:rank\[(?P<rank>\d+)\]-localUserrank\[(?P<urank>\d+)\]-"
    r"localIpAddr\[(?P<lip>[^\]]*)\], dst_rank\[(?P<drank>\d+)\]-remoteUserrank\[(?P<durank>\d+)\]"
    r"-remote_ip_addr\[(?P<rip>[^\]]*)\]"
)
_REASON = " Reason: "
_MAX_TEXT = 4096
_SOLUTION = "Solution:"
# Substrings that announce a record: a line holding one whose record was not read is damaged
# (cut, garbled) and worth a warning.
_ANNOUNCES = {"Link para:": "link", "function error:": "function", "RankID:": "torch_npu"}

# HcclResult (CANN inc/hccl/hccl_types.h).
HCCL_RESULT = {
    0: "HCCL_SUCCESS", 1: "HCCL_E_PARA", 2: "HCCL_E_PTR", 3: "HCCL_E_MEMORY",
    4: "HCCL_E_INTERNAL", 5: "HCCL_E_NOT_SUPPORT", 6: "HCCL_E_NOT_FOUND", 7: "HCCL_E_UNAVAIL",
    8: "HCCL_E_SYSCALL", 9: "HCCL_E_TIMEOUT", 10: "HCCL_E_OPEN_FILE_FAILURE",
    11: "HCCL_E_TCP_CONNECT", 12: "HCCL_E_ROCE_CONNECT", 13: "HCCL_E_TCP_TRANSFER",
    14: "HCCL_E_ROCE_TRANSFER", 15: "HCCL_E_RUNTIME", 16: "HCCL_E_DRV", 17: "HCCL_E_PROFILING",
    18: "HCCL_E_CCE", 19: "HCCL_E_NETWORK", 20: "HCCL_E_AGAIN", 21: "HCCL_E_REMOTE",
    22: "HCCL_E_SUSPENDING",
}


#: One error report (the collectors' wire model; ``kind`` "cann" | "torch_npu" | "function" |
#: "plog"; for function errors ``code`` is the HcclResult number, named in ``name``).
HcclError = CclError


@dataclass
class HcclLink:
    """A link HCCL failed to set up: both ends' ranks and IP addresses (``createLink para``)."""

    rank: int
    local_ip: str
    remote_rank: int
    remote_ip: str
    user_rank: int | None = None
    remote_user_rank: int | None = None
    code: str | None = None
    pid: int | None = None
    time: str | None = None
    source: str | None = None
    line: int | None = None


@dataclass
class HcclLog:
    """What an HCCL log holds: plog records, errors, failed links, and the job's rank facts."""

    records: list[dict[str, Any]] = field(default_factory=list)
    errors: list[HcclError] = field(default_factory=list)
    links: list[HcclLink] = field(default_factory=list)
    rank: int | None = None
    rank_size: int | None = None
    sources: list[str] = field(default_factory=list)
    warnings: list[ParseWarning] = field(default_factory=list)
    # The last CANN message and torch_npu header read, with their line: a ``Solution:`` line
    # belongs to the message above it, and the message to the header above it.
    _last_cann: tuple[CclError, int] | None = field(default=None, repr=False)
    _last_header: tuple[CclError, int] | None = field(default=None, repr=False)

    def plog_errors(self) -> list[dict[str, Any]]:
        """The plog records of level ERROR."""
        return [r for r in self.records if r["level"] == "ERROR"]

    def usable(self) -> bool:
        return bool(self.records or self.errors or self.links or self.rank_size)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (the shape of ``icefab collect hccl-log --json``)."""
        return {"rank": self.rank, "rank_size": self.rank_size,
                "errors": [e.model_dump() for e in self.errors],
                "links": [asdict(k) for k in self.links],
                "plog_lines": len(self.records), "sources": list(self.sources),
                "warnings": [w.model_dump() for w in self.warnings]}


def parse_hccl_log(text: str | bytes, source: str | None = None) -> HcclLog:
    """Read HCCL plog lines, torch_npu/CANN error reports, failed links and rank facts.

    Parameters
    ----------
    text : str or bytes
        Log text (plog, or a framework's output that embeds these lines).
    source : str, optional
        Name used in warnings and records.

    Returns
    -------
    HcclLog
        Never raises; lines that are not HCCL lines are ignored.
    """
    return parse_hccl_logs([(source, text)])


def parse_hccl_logs(texts: list[tuple[str | None, str | bytes]]) -> HcclLog:
    """Read several HCCL logs (e.g. one per rank) into one :class:`HcclLog`, in order."""
    out = HcclLog()
    for source, text in texts:
        if source:
            out.sources.append(source)
        for lineno, raw in numbered_lines(to_text(text), source, out.warnings):
            try:
                _parse_line(out, raw, source, lineno)
            except Exception as exc:  # noqa: BLE001 - a collector must never crash on bad input
                out.warnings.append(warn(f"could not read line ({type(exc).__name__})", lineno,
                                         source))
    return out


def _parse_line(out: HcclLog, raw: str, source: str | None, lineno: int) -> None:
    msg, rank, pid = _strip_prefixes(raw.strip())
    where = {"source": source, "line": lineno}
    if _solution(out, msg, source, lineno):
        return
    read = set()
    if _plog(out, msg, where):
        read.add("plog")
    elif _npu_header(out, msg, rank, where):
        read.add("torch_npu")
        out._last_header = (out.errors[-1], lineno)
    code = None
    err = None if read else _cann(msg, rank, pid, where)
    if err is not None:
        _from_header(out, err, lineno)
        out.errors.append(err)
        out._last_cann = (err, lineno)
        code, pid = err.code, err.pid or pid
    f = _FUNCTION.search(msg)
    if f:
        name = HCCL_RESULT.get(int(f["code"])) if f["lib"] == "HCCL" else None
        out.errors.append(HcclError(kind="function", code=f["code"], name=name, rank=rank,
                                    pid=pid, function=f["call"].split("(", 1)[0],
                                    message=_cap(msg[f.start():].strip()), **where))
        read.add("function")
    link = _LINK.search(msg)
    if link:
        out.links.append(HcclLink(
            rank=int(link["rank"]), user_rank=int(link["urank"]), local_ip=link["lip"],
            remote_rank=int(link["drank"]), remote_user_rank=int(link["durank"]),
            remote_ip=link["rip"], code=code, pid=pid, time=err.time if err else None, **where))
        read.add("link")
    r = _RANK.search(raw) or _RANK_REV.search(raw)
    if r and out.rank_size is None:
        out.rank, out.rank_size = int(r["r"]), int(r["n"])
    missed = [kind for text, kind in _ANNOUNCES.items() if text in msg and kind not in read]
    if missed and "plog" not in read:
        out.warnings.append(warn(f"unreadable or cut {missed[0]} record: {msg[:80]!r}", lineno,
                                 source))


def _strip_prefixes(line: str) -> tuple[str, int | None, int | None]:
    """The message without PyTorch's ``[rankN]:`` / vLLM's worker prefix, and their rank/pid."""
    rank = pid = None
    w = _WORKER.match(line)
    if w:
        pid, line = int(w["pid"]), line[w.end():]
    t = _TORCH_RANK.match(line)
    if t:
        rank, line = int(t["rank"]), line[t.end():]
    return line.strip(), rank, pid


def _plog(out: HcclLog, msg: str, where: dict[str, Any]) -> bool:
    m = _PLOG.match(msg)
    if not m:
        return False
    rec: dict[str, Any] = {
        "level": m["level"], "module": m["module"], "pid": int(m["pid"]),
        "process": m["process"], "timestamp": m["ts"], "src": m["src"], "tid": int(m["tid"]),
        "tags": re.findall(r"\[([^\]]*)\]", m["tags"] or ""), "message": m["msg"],
    }
    if m["err"]:
        rec["errNo"] = m["err"]
    out.records.append(rec)
    if m["level"] == "ERROR":
        out.errors.append(HcclError(kind="plog", code=m["err"] or "-", message=_cap(m["msg"]),
                                    pid=rec["pid"], time=m["ts"], **where))
    return True


def _npu_header(out: HcclLog, msg: str, rank: int | None, where: dict[str, Any]) -> bool:
    m = _NPU_HEADER.search(msg)
    if not m:
        return False
    rank_id = int(m["rank"])
    out.errors.append(HcclError(
        kind="torch_npu", code=m["code"], message=_cap(m["msg"]),
        rank=rank_id if rank_id >= 0 else rank, pid=int(m["pid"]),
        device=int(m["dev"]) if int(m["dev"]) >= 0 else None, time=m["time"], **where))
    return True


def _cann(msg: str, rank: int | None, pid: int | None,
          where: dict[str, Any]) -> HcclError | None:
    m = _CANN_NAMED.match(msg) or _CANN.match(msg)
    if not m:
        return None
    groups = m.groupdict()
    _, cut, reason = m["msg"].partition(_REASON)
    return HcclError(kind="cann", code=m["code"], message=_cap(m["msg"]), rank=rank,
                     pid=int(m["pid"]) if m["pid"] else pid, time=m["time"],
                     name=groups.get("name"), reason=_cap(reason.strip()) if cut else None,
                     **where)


def _cap(text: str) -> str:
    """Text cut to the longest message a report carries (``CclError.message``)."""
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def _solution(out: HcclLog, msg: str, source: str | None, lineno: int) -> bool:
    """A ``Solution:`` line: the CANN message printed on the line just above it gets it
    (CANN error messages are "<code>: <text>" then an indented "Solution: <text>" line)."""
    if not msg.startswith(_SOLUTION) or out._last_cann is None:
        return False
    err, at = out._last_cann
    if err.source != source or lineno != at + 1 or err.solution is not None:
        return False
    err.solution = _cap(msg[len(_SOLUTION):].strip()) or None
    return True


def _from_header(out: HcclLog, err: HcclError, lineno: int) -> None:
    """Rank, device and PID of a CANN message from the torch_npu header printed on the line
    just above it (or above the CANN lines between them): torch_npu raises one error text,
    the ``(PID, Device, RankID) ERRmmcc`` header followed by CANN's messages
    (``NPUException.cpp``), so they are one process's."""
    if out._last_header is None:
        return
    head, at = out._last_header
    if head.source != err.source or lineno != at + 1:
        return
    if err.pid is not None and head.pid is not None and err.pid != head.pid:
        return
    err.rank = err.rank if err.rank is not None else head.rank
    err.pid = err.pid if err.pid is not None else head.pid
    err.device = err.device if err.device is not None else head.device
    out._last_header = (head, lineno)  # the next CANN line continues the same error text


def hccl_report(log: HcclLog) -> CommunicatorReport:
    """The communicator report of an HCCL log: its errors, and the ranks they name with their
    device and PID (what a controller needs to tell that the job is failing, and where)."""
    ranks: dict[int, RankInfo] = {}
    for e in log.errors:
        if e.rank is None or e.rank < 0:
            continue
        r = ranks.setdefault(e.rank, RankInfo(rank=e.rank))
        r.device = r.device if r.device is not None else e.device
        r.pid = r.pid if r.pid is not None else e.pid
    return CommunicatorReport(library="hccl", nranks=log.rank_size,
                              ranks=[ranks[r] for r in sorted(ranks)],
                              sources=list(log.sources), warnings=list(log.warnings),
                              errors=list(log.errors))
