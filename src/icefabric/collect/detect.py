"""Which ``icefab collect`` reader fits a text: a reader that finds nothing of its kind names
the one that would.

Each kind is tested with its own parser's ``usable()``, so the answer never disagrees with
what that reader would find.
"""

from __future__ import annotations

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
