"""Which ``icefab collect`` reader fits a text: a reader that finds nothing of its kind names
the one that would.

Each kind is tested with its own parser's ``usable()``, so the answer never disagrees with
what that reader would find.
"""

from __future__ import annotations

import re

from icefabric.collect._text import numbered_lines
from icefabric.collect.hccl_log import parse_hccl_log
from icefabric.collect.nccl_log import parse_nccl_log
from icefabric.collect.nccl_tests import parse_nccl_tests
from icefabric.collect.nccl_topo import is_topology_xml, parse_nccl_topo
from icefabric.collect.ranktable import parse_ranktable


def readers_for(text: str) -> list[str]:
    """Names of the readers (``icefab collect <name>``) that find something in ``text``.

    Order: ``topo``, ``ranktable`` (whole-file formats), then ``nccl-log`` (only when NCCL/RCCL
    debug lines are present, not just nccl-tests' device list), ``nccl-tests``, ``hccl-log``.
    """
    if is_topology_xml(text):
        return ["topo"] if parse_nccl_topo(text).usable() else []
    if text.lstrip().startswith(("{", "[")):
        if parse_ranktable(text).ranks:
            return ["ranktable"]
    out = []
    log = parse_nccl_log(text)
    if log.usable() and log.has_debug_lines():
        out.append("nccl-log")
    if parse_nccl_tests(text).usable():
        out.append("nccl-tests")
    if parse_hccl_log(text).usable():
        out.append("hccl-log")
    return out


# "NCCL version 2.22.3+cuda12.6" (src/init.cc) or RCCL's banner "RCCL version : 2.21.5-HEAD"
_VERSION_LINE = re.compile(r"\b(?P<lib>NCCL|RCCL) version :? ?(?P<v>\d+\.\d+\.\d+)")


def ccl_sections(text: str) -> dict[str, int]:
    """The libraries whose output ``text`` holds -> the first line showing each: ``NCCL
    <version>`` per NCCL release printed, ``RCCL`` (its banner or ROCm marks) and ``HCCL``
    (plog or framework lines)."""
    out: dict[str, int] = {}
    for n, line in numbered_lines(text, None, []):
        m = _VERSION_LINE.search(line)
        if m:
            out.setdefault("RCCL" if m["lib"] == "RCCL" else f"NCCL {m['v']}", n)
    rccl = [r["ref"].line for r in parse_nccl_log(text).rccl_markers]
    if rccl:
        out["RCCL"] = min(rccl + [out.get("RCCL", rccl[0])])
    hccl = parse_hccl_log(text)
    lines = [r.get("line") for r in hccl.records] + [e.line for e in hccl.errors]
    lines = [n for n in lines + [x.line for x in hccl.links] if n is not None]
    if lines:
        out["HCCL"] = min(lines)
    return out


def mixed_sections(text: str) -> str | None:
    """Why ``text`` is not one job's log (the output of several libraries or NCCL releases
    concatenated), or None."""
    found = sorted(ccl_sections(text).items(), key=lambda kv: kv[1])
    if len(found) < 2:
        hosts = list(dict.fromkeys(
            ", ".join(sorted({d["host"] for d in r.devices})) or "hosts it does not name"
            for r in parse_nccl_tests(text).runs if r.rows))
        if len(hosts) > 1:
            return (f"it holds nccl-tests runs of different jobs (on {hosts[0]}, and on "
                    f"{hosts[1]}); give each job's log in a file of its own")
        return None
    parts = [f"{lib} (line {n})" for lib, n in found]
    return (f"it holds the output of {', '.join(parts[:-1])} and {parts[-1]}; give each "
            "job's log in a file of its own")
