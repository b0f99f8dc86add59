"""HCCL rank table (Ascend ``RANK_TABLE_FILE``) -> ranks, servers, devices and device IPs.

Format source: Ascend "Configuring the rank table file" (CANN / MindSpore docs,
https://www.hiascend.com/document/detail/en/canncommercial/80RC1/developmentguide/hccl/hcclug/hcclug_000014.html
and https://www.mindspore.cn/docs/en/master/model_train/parallel/rank_table.html):

* version 1.0 / 1.2: ``{"version", "server_count", "server_list": [{"server_id", "host_ip"?,
  "device": [{"device_id", "device_ip", "rank_id", "super_device_id"?}]}], "status",
  "super_pod_list"? }``;
* the older "group" layout: ``{"group_count", "group_list": [{"group_name", "device_count",
  "instance_list": [{"server_id", "rank_id", "devices": [{"device_id", "device_ip"}]}]}]}``.

Numbers are written as strings in both; the reader accepts strings or integers. Ranks without
``rank_id`` take their position in the file (HCCL's own rule for the group layout).
"""

from __future__ import annotations

import ipaddress
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icefabric.collect._text import MAX_RANK, read_text, to_text, warn
from icefabric.collect.infer import printed_placement
from icefabric.schemas import CommunicatorReport, HostNics, Nic, ParseWarning, RankInfo


@dataclass
class RankEntry:
    """One rank of the table: its server, NPU and the NPU NIC's IP."""

    rank: int
    server_id: str
    device_id: int
    device_ip: str | None = None
    host_ip: str | None = None
    super_device_id: str | None = None
    super_pod_id: str | None = None


@dataclass
class RankTable:
    """Parsed rank table (``ranks`` sorted by rank)."""

    version: str | None = None
    status: str | None = None
    ranks: list[RankEntry] = field(default_factory=list)
    warnings: list[ParseWarning] = field(default_factory=list)

    def servers(self) -> list[str]:
        return list(dict.fromkeys(r.server_id for r in self.ranks))


def _as_int(v: Any) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


def _list(v: Any) -> list[Any]:
    """A JSON array, or nothing: a wrong-typed field must not stop the reading."""
    return v if isinstance(v, list) else []


def _as_str(v: Any) -> str | None:
    return None if v is None else str(v)


#: NPUs per server: an Atlas 800 holds 8, a SuperPoD node 16; 4,096 leaves room for any.
MAX_DEVICE = 4096


def _entry_error(rank: int | None, device_id: int | None, dev: dict[str, Any]) -> str | None:
    """Why a rank table entry cannot be a rank (a number out of range, a bad IP), or None."""
    if device_id is None:
        return "has no device_id"
    if not 0 <= device_id < MAX_DEVICE:
        return f"device_id {device_id} is not a device number (0 to {MAX_DEVICE - 1})"
    if rank is not None and not 0 <= rank <= MAX_RANK:
        return f"rank_id {rank} is not a rank (0 to {MAX_RANK:,})"
    ip = dev.get("device_ip")
    if ip is not None:
        try:
            ipaddress.ip_address(str(ip))
        except ValueError:
            return f"device_ip {str(ip)[:40]!r} is not an IP address"
    return None


def parse_ranktable(text: str | bytes, source: str | None = None) -> RankTable:
    """Read an HCCL rank table JSON.

    Parameters
    ----------
    text : str or bytes
        The JSON text.
    source : str, optional
        Name used in warnings.

    Returns
    -------
    RankTable
        Never raises on bad content: invalid JSON or entries without a device id become
        warnings (with the JSON error's line number when there is one).
    """
    table = RankTable()
    data = _load_json(table, text, source)
    if data is None:
        return table
    table.version = str(data["version"]) if "version" in data else None
    table.status = data.get("status")
    count = data.get("server_count")
    if count is not None and not 0 <= (_as_int(count) or -1) <= MAX_RANK:
        table.warnings.append(warn(f"server_count {str(count)[:20]!r} is not a count",
                                   None, source))
    entries = _device_entries(data)
    _add_ranks(table, entries, _super_pods(data), source)
    table.ranks.sort(key=lambda r: r.rank)
    dup = len(table.ranks) - len({r.rank for r in table.ranks})
    if dup:
        table.warnings.append(warn(f"{dup} duplicate rank_id value(s)", None, source))
    if not entries:
        table.warnings.append(warn("no server_list/group_list devices found", None, source))
    return table


def _load_json(table: RankTable, text: str | bytes, source: str | None
               ) -> dict[str, Any] | None:
    """The rank table's JSON object, or None with a warning saying why there is none."""
    try:
        data = json.loads(to_text(text))
    except json.JSONDecodeError as exc:
        table.warnings.append(warn(f"not valid JSON: {exc.msg}", exc.lineno, source))
        return None
    except RecursionError:  # a rank table nests 4 deep; the C decoder stops at this limit
        table.warnings.append(warn(f"JSON nested deeper than {sys.getrecursionlimit():,} "
                                   "levels; not a rank table", None, source))
        return None
    if not isinstance(data, dict):
        table.warnings.append(warn("rank table is not a JSON object", None, source))
        return None
    return data


def _super_pods(data: dict[str, Any]) -> dict[str, str]:
    """Server id -> super pod id, from ``super_pod_list``."""
    pod_of: dict[str, str] = {}
    for pod in _list(data.get("super_pod_list")):
        if isinstance(pod, dict):
            for srv in _list(pod.get("server_list")):
                if isinstance(srv, dict) and "server_id" in srv:
                    pod_of[str(srv["server_id"])] = str(pod.get("super_pod_id"))
    return pod_of


_Entry = tuple[int | None, dict[str, Any], dict[str, Any]]  # (rank id, server, device)


def _device_entries(data: dict[str, Any]) -> list[_Entry]:
    """Every device of ``server_list`` (rank table 1.0) then of ``group_list`` (0.x), with
    its rank id (an instance's own when its one device has none) and its server."""
    entries: list[_Entry] = []
    if isinstance(data.get("server_list"), list):
        for srv in data["server_list"]:
            if not isinstance(srv, dict):
                continue
            for dev in _list(srv.get("device") or srv.get("devices")):
                if isinstance(dev, dict):
                    entries.append((_as_int(dev.get("rank_id")), srv, dev))
    for group in _list(data.get("group_list")):
        if not isinstance(group, dict):
            continue
        for inst in _list(group.get("instance_list")):
            if not isinstance(inst, dict):
                continue
            devs = [d for d in _list(inst.get("devices")) if isinstance(d, dict)]
            for dev in devs:
                rank = _as_int(dev.get("rank_id"))
                if rank is None and len(devs) == 1:
                    rank = _as_int(inst.get("rank_id"))
                entries.append((rank, inst, dev))
    return entries


def _add_ranks(table: RankTable, entries: list[_Entry], pod_of: dict[str, str],
               source: str | None) -> None:
    """A RankEntry per valid entry (a warning per invalid one); entries without a rank id
    take the lowest ids no entry uses."""
    used: set[int] = {r for r, _, _ in entries if r is not None}
    next_free = 0
    for pos, (rank, srv, dev) in enumerate(entries):
        device_id = _as_int(dev.get("device_id"))
        why = _entry_error(rank, device_id, dev)
        if why is not None:
            table.warnings.append(warn(f"entry {pos} {why}; skipped", None, source))
            continue
        if rank is None:
            while next_free in used:
                next_free += 1
            rank = next_free
            used.add(rank)
        server = str(srv.get("server_id", srv.get("pod_name", f"server{pos}")))
        table.ranks.append(RankEntry(
            rank=rank, server_id=server, device_id=device_id,
            device_ip=_as_str(dev.get("device_ip")),
            host_ip=_as_str(srv.get("host_ip") or srv.get("host_nic_ip")),
            super_device_id=(str(dev["super_device_id"]) if "super_device_id" in dev else None),
            super_pod_id=pod_of.get(server),
        ))


def parse_ranktables(texts: list[tuple[str | None, str | bytes]]) -> RankTable:
    """Several rank tables of one job (e.g. one file per server) read as one table.

    The ranks of all files are merged (sorted by rank); the first version/status printed wins;
    a rank id found in two files is a warning.
    """
    merged = RankTable()
    for source, text in texts:
        table = parse_ranktable(text, source)
        merged.version = merged.version or table.version
        merged.status = merged.status or table.status
        merged.warnings += table.warnings
        seen = {r.rank for r in merged.ranks}
        clash = sorted({r.rank for r in table.ranks} & seen)
        if clash:
            merged.warnings.append(warn(f"rank(s) {clash} already defined by an earlier file",
                                        None, source))
        merged.ranks += table.ranks
    merged.ranks.sort(key=lambda r: r.rank)
    return merged


def read_ranktable(path: str | Path) -> RankTable:
    """Read a rank table file (see :func:`parse_ranktable`)."""
    return parse_ranktable(read_text(path), source=str(path))


def report_from_ranktable(table: RankTable) -> CommunicatorReport:
    """The rank table as a normalized communicator report (library ``hccl``).

    Each NPU has its own RoCE port, so every device becomes one NIC of its server, named by
    its IP (HCCL identifies NICs by ``device_ip``).
    """
    servers = table.servers()
    nics = [
        HostNics(host=s, nics=[Nic(index=r.device_id, name=r.device_ip or f"npu{r.device_id}",
                                   link="RoCE")
                               for r in table.ranks if r.server_id == s])
        for s in servers
    ]
    ranks = [RankInfo(rank=r.rank, host=r.server_id, device=r.device_id, nic=r.device_ip)
             for r in table.ranks]
    return CommunicatorReport(
        library="hccl",
        version=table.version,
        nranks=len(table.ranks) or None,
        nnodes=len(servers) or None,
        ranks=ranks,
        hosts_ranks=printed_placement(ranks),
        nics=nics,
        network="RoCE",
        warnings=list(table.warnings),
    )
