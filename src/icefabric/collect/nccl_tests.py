"""nccl-tests / rccl-tests output reader: run header, device lines and the result table.

Format source: nccl-tests ``src/common.cu`` / ``src/util.cu`` (https://github.com/NVIDIA/nccl-tests):
header ``# nThread %d nGpus %d minBytes %ld maxBytes %ld step: ...``, device lines
``#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s`` (older: no Group,
``[0x%02x]``), rows ``"%12li  %12li  %8s  %6s  %6s"`` (size, count, type, redop, root) then per
half ``"  %7s  %6s  %6s  %6g"`` (time us, algbw, busbw, #wrong). Releases up to ~2.10 print an
``error`` column instead of ``#wrong``, and the oldest have neither ``redop`` nor ``root``
(NVIDIA/nccl#340, ROCm/rccl#929). Several runs may follow each other in one file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icefabric.collect._text import looks_garbled, numbered_lines, read_text, to_text, warn
from icefabric.collect.infer import printed_placement
from icefabric.schemas import CommunicatorReport, ParseWarning, RankInfo

_MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z_]\w*\s")
_DEVICE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]+)\]\s+(?P<model>.*?)\s*$"
)
_PARAMS = re.compile(r"^#\s*nThread\s+\d+")
_PARAM_ITEMS = {
    "nThread": re.compile(r"\bnThread (\d+)"),
    "nGpus": re.compile(r"\bnGpus (\d+)"),
    "minBytes": re.compile(r"\bminBytes (\d+)"),
    "maxBytes": re.compile(r"\bmaxBytes (\d+)"),
    "warmup_iters": re.compile(r"\bwarmup iters: (\d+)"),
    "iters": re.compile(r"(?<!warmup )(?<!agg )\biters: (\d+)"),
    "agg_iters": re.compile(r"\bagg iters: (\d+)"),
    "validation": re.compile(r"\bvalidation: (\d+)"),
    "graph": re.compile(r"\bgraph: (\d+)"),
}
_STEP = re.compile(r"\bstep: (\S+)")
_COLUMNS = re.compile(r"^#\s+size\s+count\s+type\b")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>[-+\d.eE]+|nan|inf)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<s>\w+)")
_VERSION = re.compile(r"^#\s*nccl-tests version (?P<v>\S+)(?: \((?P<commit>\w+)\))?(?P<rest>.*)$")
_STARTING = re.compile(r"^#\s*Collective test (?:starting|concluded): (?P<name>\w+)")
_COMMAND = re.compile(r"(?:^|[\s/])(?P<name>\w+_perf)(?:\s|$)")
_ENV_ASSIGN = re.compile(
    r"\b(?P<k>(?:NCCL|RCCL|HCCL|UCX|OMPI)_[A-Z0-9_]+)=(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<v>\S*))"
)


@dataclass
class NcclTestsRun:
    """One nccl-tests invocation: command, header, devices, rows and summary."""

    command: str | None = None
    collective: str | None = None
    version: str | None = None
    nccl_library: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    header_columns: list[str] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    # Each row's fields exactly as printed (for display; versions differ in number formats).
    printed_rows: list[list[str]] = field(default_factory=list)
    avg_bus_bandwidth_GBps: float | None = None
    out_of_bounds: dict[str, Any] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.command or self.params or self.devices or self.rows
                    or self.header_columns or self.avg_bus_bandwidth_GBps is not None)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (keys as in the corpus' ``nccl_tests`` convention)."""
        out: dict[str, Any] = {"rows": self.rows}
        for key in ("command", "collective", "version", "nccl_library", "header_columns",
                    "avg_bus_bandwidth_GBps", "out_of_bounds"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.devices:
            out["devices"] = self.devices
        if self.params:
            out["params"] = self.params
        if self.env:
            out["env"] = self.env
        return out


@dataclass
class NcclTestsOutput:
    """All runs found in one output, plus warnings naming line numbers."""

    runs: list[NcclTestsRun] = field(default_factory=list)
    warnings: list[ParseWarning] = field(default_factory=list)

    def usable(self) -> bool:
        return any(r.rows for r in self.runs)

    def first_with_rows(self) -> NcclTestsRun | None:
        return next((r for r in self.runs if r.rows), None)


def _num(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def _wrong(tok: str) -> int | str:
    return int(tok) if tok.isdigit() else tok


def _half(toks: list[str], error_col: bool) -> dict[str, Any] | None:
    if len(toks) < 4:
        return None
    t, alg, bus = _num(toks[0]), _num(toks[1]), _num(toks[2])
    # "N/A" is printed for halves an op does not run (e.g. in-place of some collectives).
    if any(v is None and tok != "N/A" for v, tok in zip((t, alg, bus), toks[:3], strict=True)):
        return None
    out: dict[str, Any] = {"time_us": t, "algbw_GBps": alg, "busbw_GBps": bus}
    if error_col:
        out["error"] = toks[3]
    else:
        out["wrong"] = _wrong(toks[3])
    return out


def parse_row(line: str, columns: list[str] | None = None) -> dict[str, Any] | None:
    """Read one table row; ``columns`` (the ``# size count type ...`` header) fixes the layout.

    Without a header the layout is inferred from the number of fields (13: redop and root,
    12: one of them, 11: neither). Returns None when the line is not a complete row.
    """
    toks = line.split()
    if len(toks) < 11 or not toks[0].isdigit() or not toks[1].isdigit():
        return None
    lead = 3
    has_redop = has_root = False
    if columns:
        has_redop = "redop" in columns
        has_root = "root" in columns
        error_col = "error" in columns
    else:
        extra = len(toks) - 11
        if extra >= 2:
            has_redop = has_root = True
        elif extra == 1:
            has_root = bool(re.fullmatch(r"-?\d+", toks[3]))
            has_redop = not has_root
        error_col = not re.fullmatch(r"\d+|N/A", toks[-1])
    row: dict[str, Any] = {"size": int(toks[0]), "count": int(toks[1]), "type": toks[2]}
    if has_redop:
        row["redop"] = toks[lead]
        lead += 1
    if has_root:
        if not re.fullmatch(r"-?\d+", toks[lead]):
            return None
        row["root"] = int(toks[lead])
        lead += 1
    rest = toks[lead:]
    if len(rest) != 8:
        return None
    oop, inp = _half(rest[:4], error_col), _half(rest[4:], error_col)
    if oop is None or inp is None:
        return None
    row["out_of_place"] = oop
    row["in_place"] = inp
    return row


def parse_nccl_tests(text: str | bytes, source: str | None = None, *,
                     after: NcclTestsRun | None = None) -> NcclTestsOutput:
    """Read nccl-tests (or rccl-tests) output, possibly mixed with NCCL INFO lines.

    Parameters
    ----------
    text : str or bytes
        Output of one or more ``*_perf`` runs; Open MPI ``[1,0]<stdout>:`` tags are stripped.
    source : str, optional
        Name used in warnings.
    after : NcclTestsRun, optional
        The run an earlier excerpt ended in: rows before this text's first header continue it
        (and are read with its column layout). It is returned first when it gained anything.

    Returns
    -------
    NcclTestsOutput
        Runs in order; a run starts at a command line, a ``# nThread`` header or a
        ``Collective test starting`` line. Row-like lines that do not fit the layout become
        warnings with their line number.
    """
    out = NcclTestsOutput()
    run = after if after is not None else NcclTestsRun()
    out.runs.append(run)

    def new_run() -> NcclTestsRun:
        nonlocal run
        if not run.empty():
            run = NcclTestsRun()
            out.runs.append(run)
        return run

    for lineno, raw in numbered_lines(to_text(text), source, out.warnings):
        try:
            line = _MPI_TAG.sub("", raw)
            if looks_garbled(line):
                out.warnings.append(warn("unreadable bytes in line", lineno, source))
                continue
            s = line.strip()
            if not s:
                continue
            if s.startswith("#"):
                _header_line(s, run, new_run)
                continue
            if _ROW_START.match(line):
                row = parse_row(line, run.header_columns)
                if row is None:
                    out.warnings.append(warn("incomplete or malformed result row", lineno, source))
                else:
                    run.rows.append(row)
                    run.printed_rows.append(line.split())
                continue
            if " NCCL " in s or " RCCL " in s:
                continue
            c = _COMMAND.search(s)
            if c and not s.startswith(("NCCL", "RCCL")):
                if run.command or run.rows or run.params:
                    new_run()
                run.command = s.lstrip("$ ").strip()
                run.collective = c["name"]
                run.env.update({m["k"]: next(v for v in (m["dq"], m["sq"], m["v"]) if v is not None)
                                for m in _ENV_ASSIGN.finditer(s)})
        except Exception as exc:  # noqa: BLE001 - never crash on odd input
            out.warnings.append(warn(f"could not read line ({type(exc).__name__})", lineno, source))
    out.runs = [r for r in out.runs if not r.empty()]
    return out


def parse_nccl_tests_files(texts: list[tuple[str | None, str | bytes]]) -> NcclTestsOutput:
    """Read several files of nccl-tests output as one, in order.

    Excerpts of one run posted apart (the header in one, more rows in the next) are read as the
    same run: rows before a file's first header continue the previous file's last run.
    """
    out = NcclTestsOutput()
    for source, text in texts:
        last = out.runs[-1] if out.runs else None
        part = parse_nccl_tests(text, source, after=last)
        out.warnings += part.warnings
        out.runs += [r for r in part.runs if r is not last]
    return out


def _header_line(s: str, run: NcclTestsRun, new_run) -> None:
    if _PARAMS.match(s):
        if run.params or run.rows:
            run = new_run()
        run.params = {k: int(m[1]) for k, p in _PARAM_ITEMS.items() if (m := p.search(s))}
        st = _STEP.search(s)
        if st:
            run.params["step"] = st[1]
        return
    m = _VERSION.match(s)
    if m:
        if run.rows or run.params:
            run = new_run()
        run.version = m["v"]
        lib = re.search(r"nccl-library=(\d+)", m["rest"] or "")
        if lib:
            run.nccl_library = nccl_version_from_code(int(lib[1]))
        return
    m = _STARTING.match(s)
    if m:
        if "starting" in s and (run.rows or run.params):
            run = new_run()
        run.collective = run.collective or m["name"]
        return
    m = _DEVICE.match(s)
    if m:
        if run.rows:
            run = new_run()
        dev = {"rank": int(m["rank"]), "pid": int(m["pid"]), "host": m["host"],
               "device": int(m["dev"]), "busid": m["bus"], "model": m["model"]}
        if m["group"] is not None:
            dev["group"] = int(m["group"])
        run.devices.append(dev)
        return
    if _COLUMNS.match(s):
        run.header_columns = s.lstrip("#").split()
        return
    m = _AVG.match(s)
    if m:
        run.avg_bus_bandwidth_GBps = _num(m["v"])
        return
    m = _OOB.match(s)
    if m:
        run.out_of_bounds = {"count": int(m["n"]), "status": m["s"]}


def nccl_version_from_code(code: int) -> str:
    """``NCCL_VERSION_CODE`` to a version string (src/nccl.h.in: 2.9+ encode
    ``major*10000 + minor*100 + patch``, older ``major*1000 + minor*100 + patch``)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def read_nccl_tests(path: str | Path) -> NcclTestsOutput:
    """Read an nccl-tests output file (see :func:`parse_nccl_tests`)."""
    return parse_nccl_tests(read_text(path), source=str(path))


def measured_busbw(run: NcclTestsRun, *, in_place: bool = False) -> list[tuple[int, float]]:
    """(size_bytes, busbw GB/s) pairs of a run, the series ``compare nccl-tests`` plots."""
    half = "in_place" if in_place else "out_of_place"
    return [(r["size"], r[half]["busbw_GBps"]) for r in run.rows]


def measured_table(run: NcclTestsRun) -> dict[str, Any]:
    """What ``icefab compare nccl-tests`` needs from one measured run.

    Returns
    -------
    dict
        ``{"collective": "all_reduce" | ... | None, "nranks": int | None, "hosts": [...],
        "sizes_bytes": [...], "time_us": [...], "algbw_GBps": [...], "busbw_GBps": [...],
        "in_place_busbw_GBps": [...]}`` (out-of-place columns unless named otherwise).
        ``nranks`` comes from the ``# Rank`` device lines (else nGpus x nThread when the run
        is single-process); ``collective`` from the command or header (``all_reduce_perf``).
    """
    coll = run.collective[:-5] if run.collective and run.collective.endswith("_perf") else (
        run.collective)
    nranks = len(run.devices) or None
    if nranks is None and run.params.get("nGpus") and run.params.get("nThread"):
        nranks = run.params["nGpus"] * run.params["nThread"]
    return {
        "collective": coll,
        "nranks": nranks,
        "hosts": list(dict.fromkeys(d["host"] for d in run.devices)),
        "sizes_bytes": [r["size"] for r in run.rows],
        "time_us": [r["out_of_place"]["time_us"] for r in run.rows],
        "algbw_GBps": [r["out_of_place"]["algbw_GBps"] for r in run.rows],
        "busbw_GBps": [r["out_of_place"]["busbw_GBps"] for r in run.rows],
        "in_place_busbw_GBps": [r["in_place"]["busbw_GBps"] for r in run.rows],
    }


def communicator_from_devices(devices: list[dict[str, Any]],
                              library: str = "nccl") -> CommunicatorReport:
    """The communicator an nccl-tests run's ``# Rank r Group g Pid p on HOST device d``
    lines show (``src/common.cu`` prints one line per rank before the table): ranks with
    their hosts and local devices, nothing more. ``devices`` is :attr:`NcclTestsRun.devices`
    or the ``devices`` list of ``icefab collect nccl-tests --json``."""
    ranks = [RankInfo(rank=d["rank"], host=d.get("host"), device=d.get("device"),
                      pid=d.get("pid")) for d in devices]
    hosts = {r.host for r in ranks if r.host is not None}
    return CommunicatorReport(library=library, nranks=len(ranks) or None,
                              nnodes=len(hosts) or None, ranks=ranks,
                              hosts_ranks=printed_placement(ranks))

