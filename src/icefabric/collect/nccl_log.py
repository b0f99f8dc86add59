"""NCCL / RCCL debug-log reader (``NCCL_DEBUG=INFO``, any ``NCCL_DEBUG_SUBSYS`` mix).

Format sources
--------------
* Line prefix ``"%s:%d:%d [%d] NCCL INFO "`` (host:pid:tid [cudaDev]) -- NCCL ``src/debug.cc``.
* ``NET/IB : Using [i]name:port/LINK ... [RO]; OOB if:ip<0>`` -- ``src/transport/net_ib*.cc``;
  the one-NIC-per-line form ``NET/IB: [i] name:port/IB`` of NCCL <= 2.3 (NVIDIA/nccl#179).
* Ring order ``Channel cc/NN :  r0 r1 ...`` -- ``src/graph/rings.cc`` (``Channel cc :`` <= 2.6);
  per-rank ``Ring cc : prev -> me -> next`` -- ``src/graph/connect.cc``.
* ``Trees [c] d0/d1/d2->r->up`` -- ``src/init.cc``; NCCL 2.5 printed two trees per channel
  joined by ``|`` (``d/d/d->r->up|up->r->d/d/d``).
* Connections ``Channel cc/s : a[x] -> b[y] [send|receive] via NET/<plugin>/<dev>[(<proxy>)]
  [/GDRDMA][/Shared]`` (2.12+), ``Channel cc : ...`` (2.7-2.11), ``Ring cc : ...`` (<= 2.6) --
  ``src/transport/net.cc``, ``p2p.cc``, ``shm.cc``. The brackets hold a PCI busId (2.7-2.18)
  or a device index (<= 2.5 and >= 2.19).
* ``comm %p rank %d nranks %d cudaDev %d [nvmlDev %d] [busId %lx] [commId 0x%llx] - Init
  START|COMPLETE`` and ``comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d``
  -- ``src/init.cc``.
* RCCL's multi-line banner (``RCCL version : ...``) -- ROCm/rccl-tests#163.

The corpus under ``shared/reference/ccl-logs`` (real logs from public issues) is the test bed.
Unreadable lines never raise: they become :class:`~icefabric.schemas.ParseWarning` entries that
name the line number.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icefabric.collect._text import (
    GARBLED,
    MAX_RANK,
    looks_garbled,
    numbered_lines,
    read_text,
    to_text,
    warn,
)
from icefabric.collect.infer import (
    RULE_BUS_ID,
    RULE_EDGES,
    RULE_RING_DUMP,
    RULE_RING_LINKS,
    At,
    LocalRankLine,
    Placement,
    PrintedRank,
    Seen,
    contradiction,
    infer_devices,
    place_ranks,
    ring_edges,
)
from icefabric.schemas import (
    CommunicatorReport,
    Connection,
    HostNics,
    InferredFact,
    Nic,
    ParseWarning,
    QueuePair,
    RankInfo,
    Ring,
    RingEdge,
    TreeNode,
)

# Open MPI's --tag-output prefix ``[1,0]<stdout>:`` and similar launcher tags are stripped first.
_MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
# Hostnames may be redacted (``<cluster_name>``) or empty (``:22901:22901 [0]``).
# WARN lines carry the source location before the level: "host:pid:tid [dev] file.cc:123 NCCL
# WARN ..." (src/debug.cc).
# The host starts a token ((?<![^\s:])): a search from inside a long run of other characters
# would rescan the run from every position (quadratic), and the leftmost match is the same.
_PREFIX = re.compile(
    r"(?<![^\s:])(?P<host>[^\s:]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:[\w./-]+:\d+ )?"
    r"(?:NCCL|RCCL) (?P<level>INFO|WARN|TRACE|ABORT) ?"
)
# The host:pid:tid [dev] part alone, at a word start (a prefix cut before "NCCL INFO").
_HOST_PID = re.compile(r"(?:^|(?<=\s))([^\s:]+):\d+:\d+ \[\d+\] ")
_BARE_PREFIX = re.compile(r"(?:^|\s)(?:NCCL|RCCL) (?P<level>INFO|WARN|TRACE) ")
_WARN_PREFIX = re.compile(
    r"^\[(?P<dev>\d+)\] (?P<where>\S+) \((?P<host>[^)]*)\) (?:NCCL|RCCL) WARN (?P<msg>.*)$"
)

# nccl-tests prints where each rank runs (src/common.cu) -- the only complete rank -> host map
# when NCCL's own INFO lines were printed by a few ranks only.
_TEST_DEVICE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]+)\]"
)
_VERSION = re.compile(r"\b(?P<lib>NCCL|RCCL) version :? ?(?P<v>\d+\.\d+\.\d+\S*)")
_VERSION_HINT = re.compile(r"\bnccl==(?P<v>\d+\.\d+\.\d+\S*)")
_BANNER = re.compile(
    r"^(?P<key>RCCL version|HIP version|ROCm version|Hostname|Librccl path)\s*: (?P<val>.*?)$"
)
_NETIB = re.compile(
    r"^NET/IB ?: Using(?P<devs>.*?) ?(?P<ro>\[RO\])? ?; OOB (?P<oob>\S+)"
)
_NETIB_DEV = re.compile(
    r"\[(?P<idx>\d+)\](?P<name>[^\s:\[\]]+):(?P<port>\d+)(?::(?P<rail>\d*))?(?::(?P<plane>\d+))?"
    r"/(?P<ll>[A-Za-z]+(?:/[A-Za-z]+)?)"
)
# NCCL <= 2.3 printed one NIC per line; newer NCCL prints a per-NIC detail line of this shape.
_NETIB_ONE = re.compile(
    r"^NET/IB ?: ?\[(?P<idx>\d+)\] ?(?P<name>[^\s:]+):(?:(?P<base>[^\s:]+):)?(?P<port>\d+)"
    r"/(?P<ll>[A-Za-z]+(?:/[A-Za-z]+)?)(?:.*?\bspeed=(?P<speed>\d+))?"
)
_NET_SOCKET = re.compile(r"^NET/Socket ?: Using (?:\[\d+\])?(?P<if>\S+)")
_SIDEBAND = re.compile(r"^NET/IB ?: Using interface (?P<if>\S+) for sideband")
_NET_IFACE = re.compile(r"^NET ?: Using interface (?P<if>\S+)")
_BOOTSTRAP = re.compile(r"^Bootstrap ?: Using (?:\[\d+\])?(?P<if>\S+)")
_NETWORK = re.compile(r"^Using (?:internal )?[Nn]etwork (?P<net>.+?)$")
_ASSIGNED = re.compile(r"^Assigned NET plugin (?P<net>.+?) to comm$")
_OFI = re.compile(r"^NET/OFI Selected Provider is (?P<p>\S+)")
_ENV = re.compile(r"^(?P<k>[A-Z][A-Z0-9_]+) set by environment to (?P<v>.*?)\.?$")
# Messages are stripped before they are matched, so patterns end in "$", not "\s*$": a lazy
# group followed by "\s*$" rescans every run of spaces inside a line (quadratic).
# Older releases (2.3/2.4) print "comm %p rank %d nranks %d - COMPLETE" without cudaDev.
_INIT = re.compile(
    r"^(?:\[Rank \d+\] )?(?:(?P<fn>\w+) )?comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) "
    r"nranks (?P<n>\d+)"
    r"(?: cudaDev (?P<cuda>\d+))?(?P<rest>.*?) - (?:Init )?(?P<phase>START|COMPLETE)\s*$"
)
# Other lifecycle lines of a communicator ("comm 0x.. rank 3 nRanks 8 - Destroy COMPLETE",
# "... - Abort COMPLETE"; src/init.cc): legitimate, nothing to extract for the report.
_COMM_LIFECYCLE = re.compile(r"^(?:\w+ )?comm 0x[0-9a-fA-F]+ .*- ?\w+ (?:START|COMPLETE)\s*$")
_INIT_OLD = re.compile(r"^rank (?P<rank>\d+) nranks (?P<n>\d+)\s*$")
_COMM_TOPO = re.compile(
    r"^comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<n>\d+) nNodes (?P<nn>\d+) "
    r"localRanks (?P<lr>\d+) localRank (?P<l>\d+)"
)
# NCCL <= 2.3 printed the ring order as "Ring %02d : r0 r1 ..." (init.cc), later "Channel".
_RING_ORDER = re.compile(r"^(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<nch>\d+))? :(?P<ranks>(?: +\d+)+)"
                         r"(?P<cut> ?\.\.\.)?\s*$")
_RING_RANK = re.compile(
    r"^Ring (?P<ch>\d+) : (?P<prev>-?\d+) -> (?P<me>\d+) -> (?P<next>-?\d+)\s*$"
)
# Per-rank tree line of NCCL 2.5-2.7 (graph/connect.cc, NCCL_GRAPH): up -> rank -> d0/d1/d2.
_TREE_RANK = re.compile(
    r"^Tree (?P<ch>\d+) : (?P<up>-?\d+) -> (?P<r>\d+) -> "
    r"(?P<d0>-?\d+)/(?P<d1>-?\d+)/(?P<d2>-?\d+)\s*$"
)
_TREES = re.compile(r"^Trees(?P<body>(?: \[\d+\] \S+)*)\s*$")
_TREE_ITEM = re.compile(
    r"\[(?P<ch>\d+)\] (?P<d0>-?\d+)/(?P<d1>-?\d+)/(?P<d2>-?\d+)->(?P<r>-?\d+)->(?P<up>-?\d+)"
    r"(?:\|(?P<up2>-?\d+)->(?P<r2>-?\d+)->(?P<e0>-?\d+)/(?P<e1>-?\d+)/(?P<e2>-?\d+))?$"
)
# NCCL 2.4 printed one tree per channel the other way round: up->rank->d0/d1/d2.
_TREE_ITEM_24 = re.compile(
    r"\[(?P<ch>\d+)\] (?P<up>-?\d+)->(?P<r>-?\d+)->(?P<d0>-?\d+)/(?P<d1>-?\d+)/(?P<d2>-?\d+)$"
)
# NCCL 2.4 printed network connections without device brackets
# ("Ring 00 : 35 -> 34 [send] via NET/Socket/0", NVIDIA/nccl#226).
_CONN = re.compile(
    r"^(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<sub>\d+))? : "
    r"(?P<a>\d+)(?:\[(?P<adev>[0-9a-fA-Fx:.]+)\])? -> (?P<b>\d+)(?:\[(?P<bdev>[0-9a-fA-Fx:.]+)\])?"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)$"
)
_VIA_NET = re.compile(
    r"^(?:NET|COLLNET)/(?P<plugin>.+?)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<flags>(?:/\w+|\(\w+\))*)$"
)
_CHANNEL_COUNTS = re.compile(
    r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?"
    r"(?:(?P<nvls>\d+) nvls channels, )?(?P<p2p>\d+) p2p channels, "
    r"(?P<pp>\d+) p2p channels per peer"
)
# QP creation lines of the IB transport (NCCL_DEBUG_SUBSYS=NET; src/transport/net_ib/connect.cc):
#   "NET/IB: ncclIbConnect: NCCL Dev %d IbDev %d Port %d qp_num %d mtu %d GID %ld (%lX/%lX) ..."
#   "NET/IB: ncclIbConnect: NCCL Dev %d IbDev %d Port %d qp_num %d mtu %d LID %d ..."
#   "NET/IB: %s: QP created: port=%d dev=%d devName=%s ndevs=%d nmdevs=%d qp_num=%u ..."
_QP_NUM = re.compile(r"\bqp_num[ =](?P<qpn>\d+)")
_QP_FUNC = re.compile(r"^NET/IB ?: ?(?P<func>\w+):")
_CUDA_DRIVER = re.compile(r"^cudaDriverVersion (?P<v>\d+)")
_CHUNKSIZE = re.compile(r"^P2P Chunksize set to (?P<v>\d+)")
_CONNECTED = re.compile(r"^Connected all (?P<what>rings|trees)")
_NVLS_HEAD = re.compile(r"^NVLS Head +(?P<h>\d+): *(?P<ranks>(?:\d+ *)+)$")
_SYSTEM = re.compile(r"^=== System : maxBw (?P<max>[\d.]+) totalBw (?P<total>[\d.]+) ===")
_TOPO_NODE_LINE = re.compile(
    r"^(?:\+ \w+\[[\d.]+\] - )?(?P<node>[A-Z]+/[0-9a-fA-F\-]+)(?: \(|\s*$)"
)
_TOPO_NODE_INDENT = re.compile(r"^\s+\+ \w+\[[\d.]+\] - (?P<node>[A-Z]+/[0-9a-fA-F\-]+)")
_PATHS = re.compile(
    r"^(?P<src>[A-Z]+/[0-9a-fA-F\-]+) :(?P<body>(?:[A-Z]+/\S+ \(\d+/[\d.]+/\w+\) ?)+)$"
)
_PATH_ITEM = re.compile(
    r"(?P<node>[A-Z]+/[0-9a-fA-F\-]+) \((?P<hops>\d+)/(?P<bw>[\d.]+)/(?P<t>\w+)\)"
)
# RCCL appends the communicator to many INFO lines ("Trees%s comm %p nRanks %02d busId %lx",
# "Ring %d : ... comm %p nRanks %02d busId %lx", connection lines) -- ROCm/rccl src/init.cc.
_RCCL_SUFFIX = re.compile(
    r" comm (?P<comm>0x[0-9a-fA-F]+) nRanks (?P<n>\d+)(?: busId (?P<bus>[0-9a-fA-F]+))?\s*$"
)
# Any other line that names a rank count: "Init timings: rank %d nranks %d ..." (init.cc),
# RCCL's "... comm %p nRanks %02d" suffix on lines read elsewhere is handled by _RCCL_SUFFIX.
_NRANKS_FIELD = re.compile(r"(?:\brank (?P<rank>\d+) )?\bn[Rr]anks (?P<n>\d+)\b")
# Strings only RCCL/ROCm builds print: the RCCL banner and env vars, librccl, HIP/ROCm paths and
# the "+hip" suffix older RCCL versions carried (ROCm/rccl src/init.cc VERSION_STRING).
_RCCL_MARK = re.compile(r"\bRCCL|librccl|/opt/rocm|\brocm-\d|\+hip\d|\bHIP version|\bROCm version")
# Messages whose keyword promises a structured line; if none of the patterns read it, warn.
_STRUCTURED_KEYWORDS = ("Channel ", "Ring ", "Tree", "NET/IB : Using", "comm 0x")


@dataclass
class LineRef:
    """Where a record came from: source file, 1-based line, and the printing process."""

    source: str | None
    line: int
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    comm: str | None = None
    nranks: int | None = None
    bus_id: str | None = None


@dataclass
class NcclLog:
    """Everything :func:`parse_nccl_log` read, record by record, in order of appearance.

    Records are plain dicts using the log's own field names (``rank``, ``nranks``, ``busId``
    ...) plus a ``ref`` (:class:`LineRef`). :func:`build_reports` turns them into normalized
    :class:`~icefabric.schemas.CommunicatorReport` objects.
    """

    sources: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    rccl_versions: list[str] = field(default_factory=list)
    version_hints: list[str] = field(default_factory=list)
    banner: dict[str, str] = field(default_factory=dict)
    net_ib: list[dict[str, Any]] = field(default_factory=list)
    nic_lines: list[dict[str, Any]] = field(default_factory=list)
    socket_ifs: list[dict[str, Any]] = field(default_factory=list)
    bootstrap_ifs: list[dict[str, Any]] = field(default_factory=list)
    sideband_ifs: list[dict[str, Any]] = field(default_factory=list)
    networks: list[dict[str, Any]] = field(default_factory=list)
    ofi_providers: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    init_lines: list[dict[str, Any]] = field(default_factory=list)
    comm_topology_lines: list[dict[str, Any]] = field(default_factory=list)
    ring_orders: list[dict[str, Any]] = field(default_factory=list)
    ring_ranks: list[dict[str, Any]] = field(default_factory=list)
    trees: list[dict[str, Any]] = field(default_factory=list)
    tree_ranks: list[dict[str, Any]] = field(default_factory=list)
    qps: list[dict[str, Any]] = field(default_factory=list)
    connections: list[dict[str, Any]] = field(default_factory=list)
    channel_counts: list[dict[str, Any]] = field(default_factory=list)
    nvls_heads: list[dict[str, Any]] = field(default_factory=list)
    systems: list[dict[str, Any]] = field(default_factory=list)
    topo_nodes: list[str] = field(default_factory=list)
    paths: list[dict[str, Any]] = field(default_factory=list)
    nccl_warn_lines: list[dict[str, Any]] = field(default_factory=list)
    test_devices: list[dict[str, Any]] = field(default_factory=list)
    nranks_fields: list[dict[str, Any]] = field(default_factory=list)
    rccl_markers: list[dict[str, Any]] = field(default_factory=list)
    hosts_seen: list[str] = field(default_factory=list)
    misc: dict[str, Any] = field(default_factory=dict)
    nccl_lines: int = 0
    warnings: list[ParseWarning] = field(default_factory=list)

    def usable(self) -> bool:
        """True when at least one CCL fact was read (what the CLI requires)."""
        return bool(
            self.versions or self.rccl_versions or self.net_ib or self.nic_lines or self.init_lines
            or self.comm_topology_lines or self.ring_orders or self.ring_ranks or self.trees
            or self.tree_ranks or self.connections or self.channel_counts or self.paths
            or self.systems or self.nranks_fields
            or self.test_devices
        )

    def has_debug_lines(self) -> bool:
        """True when the text holds NCCL/RCCL debug output, not only nccl-tests device lines."""
        return bool(self.nccl_lines or self.versions or self.rccl_versions or self.banner)


def _segments(line: str, known_hosts: list[str]) -> list[tuple[dict[str, str] | None, str]]:
    """Split a line into (prefix fields, message) pieces.

    Two processes writing at once can glue their lines together; every NCCL prefix found
    starts a new piece, so the second line's facts are still read. A glued prefix swallows the
    tail of the previous message into its host name (``...via P2P/IPChost-a:12:34 [1]``), or
    the rest of a prefix cut short (``h:1:2 [1] NCCh:1:3 [3] NCCL INFO``, modelscope/ms-swift
    #3934), so when a host seen before or earlier on the line ends that name, the split is
    moved to where that host starts.
    """
    line = _MPI_TAG.sub("", line)
    found = list(_PREFIX.finditer(line))
    if not found:
        # Posters sometimes strip the host:pid:tid [dev] part ("NCCL INFO Channel 00 : ...",
        # NVIDIA/nccl#527); the message is still worth reading, without a host.
        bare = _BARE_PREFIX.search(line)
        if bare:
            return [({"host": None, "pid": None, "tid": None, "dev": None,
                      "level": bare["level"]}, line[bare.end():].rstrip())]
        return [(None, line)]
    if len(found) == 1 and found[0].start() == 0:
        return [(found[0].groupdict(), line[found[0].end():].rstrip())]
    # Hosts a glued name may end with: those of the prefixes (whole or cut after "[dev] ", as
    # in "h:1:2 [1] NCCh:1:3 [3] NCCL INFO ...") earlier on this line, and, when the line holds
    # two whole prefixes, the hosts seen before. A lone prefix after other text (a timestamp)
    # keeps its host.
    cut = [(m.start(), m[1]) for m in _HOST_PID.finditer(line)]
    known = set(known_hosts) if len(found) > 1 else set()
    cuts: list[tuple[int, int, dict[str, str]]] = []
    for m in found:
        fields = m.groupdict()
        start = m.start()
        if start > 0:
            host = m["host"]
            hosts = sorted(known | {h for at, h in cut if at < start}, key=len, reverse=True)
            for h in hosts:
                if h and host != h and host.endswith(h):
                    start = m.start() + len(host) - len(h)
                    fields["host"] = h
                    break
        cuts.append((start, m.end(), fields))
    out: list[tuple[dict[str, str] | None, str]] = []
    for i, (_start, msg_start, fields) in enumerate(cuts):
        end = cuts[i + 1][0] if i + 1 < len(cuts) else len(line)
        out.append((fields, line[msg_start:end].rstrip()))
    return out


def _int(s: str | None) -> int | None:
    return int(s) if s not in (None, "") else None


def is_dev_index(s: str | None) -> bool:
    """Bracket content is a device index (small decimal) rather than a PCI busId (hex)."""
    return s is not None and s.isdigit() and int(s) < 256


def parse_nccl_log(text: str | bytes, source: str | None = None) -> NcclLog:
    """Read an NCCL or RCCL ``NCCL_DEBUG=INFO`` log.

    Parameters
    ----------
    text : str or bytes
        Log text; several processes' output may be interleaved, other programs' lines may be
        mixed in, and the text may be cut at either end. Undecodable bytes are replaced.
    source : str, optional
        Name recorded in warnings and line references (usually the file name).

    Returns
    -------
    NcclLog
        All records read, in order, plus warnings that name line numbers. Never raises on
        malformed content.

    Notes
    -----
    Formats: NCCL ``src/debug.cc``, ``src/init.cc``, ``src/graph/rings.cc``,
    ``src/transport/net.cc`` and ``net_ib.cc`` (2.3 to 2.30); RCCL banner from
    https://github.com/ROCm/rccl-tests/issues/163. See the module docstring.
    """
    log = NcclLog()
    if source:
        log.sources.append(source)
    _parse_into(log, to_text(text), source)
    return log


def read_nccl_log(path: str | Path) -> NcclLog:
    """Read an NCCL/RCCL log file (see :func:`parse_nccl_log`)."""
    return parse_nccl_log(read_text(path), source=str(path))


def parse_nccl_logs(texts: list[tuple[str | None, str | bytes]]) -> NcclLog:
    """Read several logs (e.g. one per host) into one :class:`NcclLog`, in the given order."""
    log = NcclLog()
    for source, text in texts:
        if source:
            log.sources.append(source)
        _parse_into(log, to_text(text), source)
    return log


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Fields checked against MAX_RANK before any record sizes something.
_RANK_KEYS = ("rank", "nranks", "nRanks", "nNodes", "localRanks", "localRank", "prev", "next",
              "up", "down", "from", "to", "proxy_rank", "channel", "nchannels", "head",
              "ranks", "coll", "collnet", "nvls", "p2p", "p2p_per_peer")
_RANKED_RECORDS = ("init_lines", "comm_topology_lines", "ring_orders", "ring_ranks", "trees",
                   "tree_ranks", "connections", "channel_counts", "nvls_heads", "test_devices",
                   "nranks_fields")


def _out_of_range(rec: dict[str, Any]) -> str | None:
    """The first rank, count or channel of ``rec`` beyond :data:`MAX_RANK` (``key value``)."""
    ref = rec.get("ref")
    fields = [(k, rec.get(k)) for k in _RANK_KEYS] + [("nRanks", getattr(ref, "nranks", None))]
    for key, v in fields:
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, int) and abs(x) > MAX_RANK:
                return f"{key} {x}"
    return None


def _drop_out_of_range(log: NcclLog) -> None:
    for name in _RANKED_RECORDS:
        kept = []
        for rec in getattr(log, name):
            bad = _out_of_range(rec)
            if bad is None:
                kept.append(rec)
            else:
                log.warnings.append(warn(f"{bad} is beyond any job ({MAX_RANK:,}); line "
                                         "ignored", rec["ref"].line, rec["ref"].source))
        setattr(log, name, kept)


def _parse_into(log: NcclLog, text: str, source: str | None) -> None:
    for lineno, raw in numbered_lines(text, source, log.warnings):
        if "\x1b" in raw:
            # Colour codes from frameworks' loggers are presentation, not damage.
            raw = _ANSI.sub("", raw)
        if looks_garbled(raw):
            log.warnings.append(warn("unreadable bytes in line; read what was legible",
                                     lineno, source))
            raw = GARBLED.sub("", raw)
        try:
            for m, msg in _segments(raw, log.hosts_seen):
                _parse_segment(log, m, msg, lineno, source)
        except Exception as exc:  # noqa: BLE001 - a collector must never crash on bad input
            log.warnings.append(warn(f"could not read line ({type(exc).__name__}: {exc})",
                                     lineno, source))
    _drop_out_of_range(log)


def _parse_segment(log: NcclLog, m: dict[str, str] | None, msg: str, lineno: int,
                   source: str | None) -> None:
    ref = LineRef(source, lineno)
    if m is not None:
        ref.host = m["host"]
        ref.pid, ref.tid, ref.dev = _int(m["pid"]), _int(m["tid"]), _int(m["dev"])
        log.nccl_lines += 1
        if ref.host is not None and ref.host not in log.hosts_seen:
            log.hosts_seen.append(ref.host)
        if m["level"] == "WARN":
            log.nccl_warn_lines.append({"message": msg, "ref": ref})
            return
    stripped = msg.strip()
    mark = _RCCL_MARK.search(stripped)
    if mark:
        log.rccl_markers.append({"what": mark[0], "ref": ref})

    # Lines that need no NCCL prefix (version banners are printed with plain printf).
    if m is None:
        b = _BANNER.match(stripped)
        if b:
            log.banner[b["key"]] = b["val"]
            if b["key"] == "RCCL version":
                log.rccl_versions.append(b["val"])
            return
    v = _VERSION.search(msg)
    if v:
        (log.rccl_versions if v["lib"] == "RCCL" else log.versions).append(v["v"])
        return
    v = _VERSION_HINT.search(msg)
    if v:
        log.version_hints.append(v["v"])
        return
    if m is None:
        td = _TEST_DEVICE.match(stripped)
        if td:
            log.test_devices.append({"rank": int(td["rank"]), "pid": int(td["pid"]),
                                     "host": td["host"], "device": int(td["dev"]), "ref": ref})
            return
        w = _WARN_PREFIX.match(stripped)
        if w:
            log.nccl_warn_lines.append({"message": w["msg"], "ref": ref})
            return
        # Unprefixed lines from other programs are expected in real logs; only a line that
        # looks like a mangled NCCL line is worth a warning.
        if "NCCL INFO" in msg or "NCCL WARN" in msg:
            log.warnings.append(warn("NCCL line without a readable host:pid:tid [dev] prefix",
                                     lineno, source))
        return

    stripped = _strip_rccl_suffix(log, stripped, ref)
    if _parse_message(log, stripped, ref):
        return
    nr = _NRANKS_FIELD.search(stripped)
    if nr and not _COMM_LIFECYCLE.match(stripped):
        log.nranks_fields.append({"rank": _int(nr["rank"]), "nranks": int(nr["n"]), "ref": ref})
        return
    if stripped.startswith(_STRUCTURED_KEYWORDS):
        log.warnings.append(warn(f"unrecognized or truncated line: {stripped[:80]!r}",
                                 lineno, source))


def _strip_rccl_suffix(log: NcclLog, msg: str, ref: LineRef) -> str:
    """The message without RCCL's ``comm %p nRanks %02d [busId %lx]`` suffix, whose fields go
    to ``ref`` (and mark the log as RCCL's)."""
    sfx = _RCCL_SUFFIX.search(msg)
    if not sfx or msg.startswith("comm "):
        return msg
    ref.comm, ref.nranks, ref.bus_id = sfx["comm"], int(sfx["n"]), sfx["bus"]
    log.rccl_markers.append({"what": "comm %p nRanks %02d suffix", "ref": ref})
    log.nranks_fields.append({"rank": None, "nranks": ref.nranks, "ref": ref})
    return msg[: sfx.start()].rstrip()


def _parse_message(log: NcclLog, msg: str, ref: LineRef) -> bool:
    """Try every message pattern; True when one read the line.

    A line with one of the ring and tree prefixes is read by that prefix's patterns or
    not at all; any other line by the first pattern of :data:`_MESSAGES` that matches
    (NET/IB QP lines first, the topology print of ``=== System`` last)."""
    for prefixes, table in _PREFIXED:
        if msg.startswith(prefixes):
            return _first_match(table, log, msg, ref)
    if msg.startswith("NET/IB") and "qp_num" in msg and "query_ece" not in msg:
        q = _QP_NUM.search(msg)
        if q:
            log.qps.append(_qp_record(msg, int(q["qpn"]), ref))
            return True
    if _first_match(_MESSAGES, log, msg, ref):
        return True
    if log.systems:
        # Topology print that follows "=== System" (NCCL_DEBUG_SUBSYS=GRAPH).
        g = _TOPO_NODE_INDENT.match(msg) or _TOPO_NODE_LINE.match(msg)
        if g and g["node"].split("/")[0] in {"CPU", "PCI", "NIC", "NET", "GPU", "NVS"}:
            log.topo_nodes.append(g["node"])
            return True
    return False


_Handler = Callable[[NcclLog, re.Match[str], LineRef], None]


def _first_match(table: tuple[tuple[re.Pattern[str], _Handler], ...], log: NcclLog, msg: str,
                 ref: LineRef) -> bool:
    """Read ``msg`` with the handler of the first pattern of ``table`` that matches it."""
    for pattern, handle in table:
        g = pattern.match(msg)
        if g:
            handle(log, g, ref)
            return True
    return False


def _ring_order(log: NcclLog, r: re.Match[str], ref: LineRef) -> None:
    log.ring_orders.append({
        "channel": int(r["ch"]), "nchannels": _int(r["nch"]),
        "ranks": [int(x) for x in r["ranks"].split()], "complete": not r["cut"], "ref": ref,
    })


def _ring_rank(log: NcclLog, r: re.Match[str], ref: LineRef) -> None:
    log.ring_ranks.append({"channel": int(r["ch"]), "prev": int(r["prev"]),
                           "rank": int(r["me"]), "next": int(r["next"]), "ref": ref})


def _tree_rank(log: NcclLog, t: re.Match[str], ref: LineRef) -> None:
    log.tree_ranks.append({"rank": int(t["r"]), "channel": int(t["ch"]),
                           "down": [int(t["d0"]), int(t["d1"]), int(t["d2"])],
                           "up": int(t["up"]), "tree": 0, "ref": ref})


def _trees(log: NcclLog, t: re.Match[str], ref: LineRef) -> None:
    items = t["body"].split()
    ok = len(items) % 2 == 0
    for ch_tok, val in zip(items[::2], items[1::2], strict=False):
        it = _TREE_ITEM.match(f"{ch_tok} {val}") or _TREE_ITEM_24.match(f"{ch_tok} {val}")
        if not it:
            ok = False
            continue
        ch, rank = int(it["ch"]), int(it["r"])
        log.trees.append({"rank": rank, "channel": ch,
                          "down": [int(it["d0"]), int(it["d1"]), int(it["d2"])],
                          "up": int(it["up"]), "tree": 0, "ref": ref})
        if it.re is _TREE_ITEM and it["up2"] is not None:
            log.trees.append({"rank": int(it["r2"]), "channel": ch,
                              "down": [int(it["e0"]), int(it["e1"]), int(it["e2"])],
                              "up": int(it["up2"]), "tree": 1, "ref": ref})
    if not ok:
        log.warnings.append(warn("Trees line partly unreadable (cut?); read the rest",
                                 ref.line, ref.source))


def _net_ib(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    nics = [
        {"index": int(d["idx"]), "name": d["name"], "port": int(d["port"]), "link": d["ll"],
         "rail": _int(d["rail"])}
        for d in _NETIB_DEV.finditer(g["devs"])
    ]
    log.net_ib.append({"host": ref.host, "nics": nics, "oob": g["oob"],
                       "relaxed_ordering": bool(g["ro"]), "ref": ref})


def _nic_line(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.nic_lines.append({"host": ref.host, "index": int(g["idx"]), "name": g["name"],
                          "port": int(g["port"]), "link": g["ll"],
                          "speed_mbps": _int(g["speed"]), "ref": ref})


def _init(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    rest = g["rest"]
    rec: dict[str, Any] = {"host": ref.host, "comm": g["comm"], "rank": int(g["rank"]),
                           "nranks": int(g["n"]), "cudaDev": _int(g["cuda"])}
    nv = re.search(r"\bnvmlDev (\d+)", rest)
    if nv:
        rec["nvmlDev"] = int(nv[1])
    bus = re.search(r"\bbusId ([0-9a-fA-F]+)", rest)
    if bus:
        rec["busId"] = bus[1]
    cid = re.search(r"\bcommId (0x[0-9a-fA-F]+)", rest)
    if cid:
        rec["commId"] = cid[1]
    rec["phase"] = g["phase"]
    rec["ref"] = ref
    log.init_lines.append(rec)


def _comm_topo(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.comm_topology_lines.append({
        "host": ref.host, "comm": g["comm"], "rank": int(g["rank"]), "nRanks": int(g["n"]),
        "nNodes": int(g["nn"]), "localRanks": int(g["lr"]), "localRank": int(g["l"]),
        "ref": ref})


def _init_old(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.init_lines.append({"host": ref.host, "rank": int(g["rank"]), "nranks": int(g["n"]),
                           "cudaDev": ref.dev, "phase": None, "ref": ref})


def _interface(sink: str) -> _Handler:
    """A handler that adds the line's interface to the list ``sink`` of the log."""
    def handle(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
        getattr(log, sink).append({"host": ref.host, "if": g["if"], "ref": ref})
    return handle


def _env(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.env[g["k"]] = g["v"]


def _first_number(key: str) -> _Handler:
    """A handler that keeps the first number printed for ``key`` in ``log.misc``."""
    def handle(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
        log.misc.setdefault(key, int(g["v"]))
    return handle


def _connected(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.misc[f"connected_all_{g['what']}"] = True


def _network(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.networks.append({"host": ref.host, "network": g["net"], "ref": ref})


def _channel_counts(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.channel_counts.append({
        "coll": int(g["coll"]), "collnet": _int(g["collnet"]), "nvls": _int(g["nvls"]),
        "p2p": int(g["p2p"]), "p2p_per_peer": int(g["pp"]), "ref": ref})


def _nvls_head(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.nvls_heads.append({"head": int(g["h"]), "ranks": [int(x) for x in g["ranks"].split()],
                           "ref": ref})


def _system(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    log.systems.append({"maxBw": float(g["max"]), "totalBw": float(g["total"]), "ref": ref})


def _paths(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    peers = {p["node"]: [int(p["hops"]), float(p["bw"]), p["t"]]
             for p in _PATH_ITEM.finditer(g["body"])}
    log.paths.append({"node": g["src"], "peers": peers, "ref": ref})


def _skip(log: NcclLog, g: re.Match[str], ref: LineRef) -> None:
    """A line known to carry nothing we keep."""


# Lines starting with one of these prefixes are read by the prefix's patterns or not at all.
_PREFIXED: tuple[tuple[tuple[str, ...], tuple[tuple[re.Pattern[str], _Handler], ...]], ...] = (
    (("Channel ", "Ring "), (
        (_CONN, lambda log, c, ref: log.connections.append(_connection(c, ref))),
        (_RING_ORDER, _ring_order),
        (_RING_RANK, _ring_rank),
    )),
    (("Tree ",), ((_TREE_RANK, _tree_rank),)),
    (("Trees",), ((_TREES, _trees),)),
)

# The other lines: the first pattern that matches reads the line.
_MESSAGES: tuple[tuple[re.Pattern[str], _Handler], ...] = (
    (_NETIB, _net_ib),
    (_NETIB_ONE, _nic_line),
    (_INIT, _init),
    (_COMM_TOPO, _comm_topo),
    (_COMM_LIFECYCLE, _skip),
    (_INIT_OLD, _init_old),
    (_SIDEBAND, _interface("sideband_ifs")),
    (_NET_SOCKET, _interface("socket_ifs")),
    (_NET_IFACE, _interface("socket_ifs")),
    (_BOOTSTRAP, _interface("bootstrap_ifs")),
    (_NETWORK, _network),
    (_ASSIGNED, _network),
    (_OFI, lambda log, g, ref: log.ofi_providers.append(g["p"])),
    (_ENV, _env),
    (_CHANNEL_COUNTS, _channel_counts),
    (_CUDA_DRIVER, _first_number("cudaDriverVersion")),
    (_CHUNKSIZE, _first_number("p2p_chunksize")),
    (_CONNECTED, _connected),
    (_NVLS_HEAD, _nvls_head),
    (_SYSTEM, _system),
    (_PATHS, _paths),
)


def _qp_record(msg: str, qpn: int, ref: LineRef) -> dict[str, Any]:
    def num(pattern: str) -> int | None:
        m = re.search(pattern, msg)
        return int(m[1]) if m else None

    func = _QP_FUNC.match(msg)
    fname = func["func"] if func else ""
    if "Flush QP" in msg:
        role = "flush"
    elif "Receiver" in fname or "Accept" in fname or "Recv" in fname:
        role = "recv"
    elif "Connect" in fname or "Sender" in fname or "Send" in fname:
        role = "send"
    else:
        role = None
    name = re.search(r"\bdevName=(\S+)", msg)
    link = "RoCE" if re.search(r"\bGID \d+", msg) else ("IB" if " LID " in msg else None)
    return {"host": ref.host, "pid": ref.pid, "qp_num": qpn,
            "ib_dev": num(r"\bIbDev (\d+)") if "IbDev" in msg else num(r"\bdev=(\d+)"),
            "port": num(r"\bPort (\d+)") if "Port " in msg else num(r"\bport=(\d+)"),
            "dev_name": name[1] if name else None, "role": role, "link": link,
            "gid_index": num(r"\bGID (\d+)"), "mtu": num(r"\bmtu (\d+)"), "ref": ref}


def _connection(c: re.Match[str], ref: LineRef) -> dict[str, Any]:
    via = c["via"]
    kind = via.split("/", 1)[0].upper()
    if kind not in {"P2P", "SHM", "NET", "COLLNET", "NVLS"}:
        kind = "OTHER"
    rec: dict[str, Any] = {
        "channel": int(c["ch"]), "conn_index": _int(c["sub"]),
        "from": int(c["a"]), "to": int(c["b"]), "from_dev": c["adev"], "to_dev": c["bdev"],
        "direction": c["dir"], "via": via, "kind": kind, "ref": ref,
    }
    if kind in {"NET", "COLLNET"}:
        n = _VIA_NET.match(via)
        if n:
            rec["net_plugin"] = n["plugin"]
            rec["net_dev"] = int(n["dev"])
            rec["proxy_rank"] = _int(n["proxy"])
            rec["gdrdma"] = "GDRDMA" in n["flags"]
    return rec


# ------------------------------------------------------------------------------------------------
# Derived views
# ------------------------------------------------------------------------------------------------


def library_of(log: NcclLog) -> str:
    """``"rccl"`` when an RCCL version line or another RCCL/ROCm marker is present, else
    ``"nccl"`` (RCCL keeps NCCL's ``NCCL INFO`` prefix, so the prefix alone decides nothing)."""
    if log.rccl_versions or log.rccl_markers:
        return "rccl"
    return "nccl"


def local_endpoint(conn: dict[str, Any]) -> tuple[int, str] | None:
    """(rank, bracket) of the side of a connection that lives on the printing host.

    Intra-node transports have both ends local (the sender is returned); a NET ``send`` line
    is printed by the sender, a ``receive`` line by the receiver.
    """
    if conn["kind"] == "NET" or conn["kind"] == "COLLNET":
        if conn["direction"] == "send":
            return conn["from"], conn["from_dev"]
        if conn["direction"] == "receive":
            return conn["to"], conn["to_dev"]
        return None
    return conn["from"], conn["from_dev"]


def rank_devices(log: NcclLog, conflicts: list[ParseWarning] | None = None,
                 ) -> dict[int, dict[str, Any]]:
    """Per rank: host, local device, nvml device, busId, pid, as far as the log shows.

    The first value seen for a field wins; a line that does not show a value (a prefix-less
    line has no host) never blocks a later line that does. ``host_at``/``device_at`` hold the
    (source, line) of the host and device kept; a later line showing another host or device
    for the rank adds a warning naming both lines to ``conflicts``.
    """
    out: dict[int, dict[str, Any]] = defaultdict(dict)
    order = {s: i for i, s in enumerate(log.sources)}

    def earlier(ref: LineRef, at: At) -> bool:
        return (order.get(ref.source, 0), ref.line) < (order.get(at[0], 0), at[1])

    def put(rank: int, ref: LineRef, **values: Any) -> None:
        d = out[rank]
        for k, v in values.items():
            if v is None:
                continue
            if d.get(k) is None:
                d[k] = v
                if k in ("host", "device"):
                    d[f"{k}_at"] = (ref.source, ref.line)
            elif k not in ("host", "device"):
                continue
            elif d[k] == v and earlier(ref, d[f"{k}_at"]):
                d[f"{k}_at"] = (ref.source, ref.line)  # cite the first line showing it
            elif d[k] != v and conflicts is not None:
                conflicts.append(contradiction(f"rank {rank}: {k}", (d[k], d[f"{k}_at"]),
                                               (v, (ref.source, ref.line))))

    for rec in log.init_lines:
        put(rec["rank"], rec["ref"], host=rec["host"], device=rec.get("cudaDev"),
            nvml_device=rec.get("nvmlDev"), bus_id=rec.get("busId"), pid=rec["ref"].pid)
    for rec in log.comm_topology_lines:
        put(rec["rank"], rec["ref"], host=rec["host"])
    for rec in log.nranks_fields:
        if rec["rank"] is not None:
            put(rec["rank"], rec["ref"], host=rec["ref"].host)
    for rec in log.test_devices:
        put(rec["rank"], rec["ref"], host=rec["host"], device=rec["device"], pid=rec["pid"])
    for rec in log.trees:
        if rec["tree"] == 0 and rec["ref"].host is not None:
            put(rec["rank"], rec["ref"], host=rec["ref"].host)
    for rec in log.ring_ranks:
        put(rec["rank"], rec["ref"], host=rec["ref"].host)
    for conn in log.connections:
        _put_connection(conn, put)
    return dict(out)


def _put_connection(conn: dict[str, Any], put) -> None:
    """What one connection line shows of its ranks: busIds, and the host and device of the
    end(s) living on the printing host (both ends of an intra-node connection)."""
    ref = conn["ref"]
    for rank, dev in ((conn["from"], conn["from_dev"]), (conn["to"], conn["to_dev"])):
        if dev is not None and not is_dev_index(dev):
            put(rank, ref, bus_id=dev)
    ends = [local_endpoint(conn)]
    if conn["kind"] in {"P2P", "SHM"}:
        # Both ends of an intra-node connection share the printing host.
        ends.append((conn["to"], conn["to_dev"]))
    for end in ends:
        if end is not None:
            put(end[0], ref, host=ref.host,
                device=int(end[1]) if is_dev_index(end[1]) else None)


def seen_placement(read: dict[int, dict[str, Any]]) -> Seen:
    """The hosts and devices :func:`rank_devices` read, with their lines."""
    seen = Seen()
    for r, d in read.items():
        if d.get("host") is not None:
            seen.hosts[r], seen.host_at[r] = d["host"], d["host_at"]
        if d.get("device") is not None:
            seen.devices[r], seen.device_at[r] = d["device"], d["device_at"]
    return seen


def host_nics(log: NcclLog) -> dict[str, dict[str, Any]]:
    """Per host: NIC list, OOB interface and relaxed-ordering flag (first complete listing)."""
    out: dict[str, dict[str, Any]] = {}
    for rec in log.net_ib:
        host = rec["host"] or ""
        if host not in out or (not out[host]["nics"] and rec["nics"]):
            out[host] = {"nics": [dict(n) for n in rec["nics"]], "oob": rec["oob"],
                         "relaxed_ordering": rec["relaxed_ordering"]}
    for rec in log.nic_lines:
        host = rec["host"] or ""
        entry = out.setdefault(host, {"nics": [], "oob": None, "relaxed_ordering": None})
        known = {n["index"]: n for n in entry["nics"]}
        if rec["index"] in known:
            if rec.get("speed_mbps"):
                known[rec["index"]]["speed_mbps"] = rec["speed_mbps"]
            continue
        entry["nics"].append({k: rec[k] for k in ("index", "name", "port", "link", "speed_mbps")})
    for rec in log.sideband_ifs:
        entry = out.get(rec["host"] or "")
        if entry is not None and entry["oob"] is None:
            entry["oob"] = rec["if"]
    return out


def network_transport(log: NcclLog) -> str | None:
    """The network transport a log's job ran on, from NCCL's own lines, or None when the
    log does not say: ``"RoCE"``, ``"InfiniBand"`` (``"InfiniBand and RoCE"`` when the
    NICs mix), ``"EFA/Libfabric (<provider>)"`` or ``"Libfabric (<provider>)"``, or
    ``"sockets"``.

    Sources: the NIC list ``NET/IB : Using [i]name:port/<IB|RoCE>``
    (``src/transport/net_ib.cc``, ``ncclIbInit``), ``Using network <name>`` (``src/init.cc``:
    ``IB``, ``Socket``, a plugin's name such as ``AWS Libfabric``), the aws-ofi-nccl
    plugin's ``NET/OFI Selected Provider is <provider>``, ``NET/Socket : Using``
    (``src/transport/net_socket.cc``) and connections ``via NET/Socket/<dev>``.
    """
    nets = {n["network"].lower() for n in log.networks}
    if log.ofi_providers or any("libfabric" in n or "ofi" in n for n in nets):
        prov = log.ofi_providers[0] if log.ofi_providers else "provider not printed"
        return f"{'EFA/' if prov == 'efa' else ''}Libfabric ({prov})"
    links = {n.get("link") for e in host_nics(log).values() for n in e["nics"]} - {None}
    if links == {"RoCE"}:
        return "RoCE"
    if "IB" in links:
        return "InfiniBand and RoCE" if "RoCE" in links else "InfiniBand"
    plugins = {c.get("net_plugin") for c in log.connections}
    if "socket" in nets or "Socket" in plugins or (log.socket_ifs and not links):
        return "sockets"
    return None


def printed_ranks(log: NcclLog, bus_rank: dict[tuple[str | None, str], int] | None = None,
                  ) -> list[PrintedRank]:
    """Lines printed by one rank's own thread during init, in the order of the text.

    ``comm ... rank R nRanks``, ``Trees``/``Tree``, per-rank ``Ring cc : p -> R -> n``,
    ``Init timings: rank R``, and connection lines (a NET ``send`` line is printed by the
    sender, ``receive`` by the receiver, P2P/SHM by the sender; src/transport/*.cc) name the
    printing rank. Ring orders name none, but NCCL prints them on rank 0 only
    (:data:`~icefabric.collect.infer.RULE_RING_DUMP`); RCCL's ``... busId %lx`` suffix names
    the printing GPU, which ``bus_rank`` ((host, busId) -> rank) turns into its rank.
    """
    out: list[tuple[tuple[int, int], PrintedRank]] = []
    order = {s: i for i, s in enumerate(log.sources)}

    def add(rank: int, ref: LineRef, rule: str | None = None) -> None:
        out.append(((order.get(ref.source, 0), ref.line),
                    PrintedRank(rank, ref.host, ref.dev, ref.source, ref.line, rule)))

    for rec in log.comm_topology_lines + log.ring_ranks + log.tree_ranks:
        add(rec["rank"], rec["ref"])
    for rec in log.trees:
        if rec["tree"] == 0:
            add(rec["rank"], rec["ref"])
    for rec in log.nranks_fields:
        ref = rec["ref"]
        by_bus = (bus_rank or {}).get((ref.host, ref.bus_id or ""))
        if rec["rank"] is not None:
            add(rec["rank"], ref)
        elif by_bus is not None:
            add(by_bus, ref, RULE_BUS_ID)
    for rec in log.ring_orders:
        add(0, rec["ref"], RULE_RING_DUMP)
    for conn in log.connections:
        loc = local_endpoint(conn)
        if loc is not None:
            add(loc[0], conn["ref"])
    return [p for _, p in sorted(out, key=lambda kv: kv[0])]


def local_rank_lines(log: NcclLog) -> list[LocalRankLine]:
    """The ``comm ... nNodes M localRanks L localRank l`` lines as :class:`LocalRankLine`."""
    return [LocalRankLine(r["rank"], r["localRank"], r["localRanks"], r["nNodes"], r["host"],
                          r["ref"].source, r["ref"].line) for r in log.comm_topology_lines]


def implied_placement(log: NcclLog, nranks: int | None, nnodes: int | None,
                      read: dict[int, dict[str, Any]] | None = None) -> Placement:
    """Devices and hosts of the ranks: what the log prints plus what it implies.

    Parameters
    ----------
    log : NcclLog
        One communicator's records (or a whole log with one communicator).
    nranks, nnodes : int or None
        The communicator's size and host count when known.
    read : dict, optional
        :func:`rank_devices` of ``log`` (computed when not given).

    Returns
    -------
    Placement
        See :mod:`icefabric.collect.infer`; ``inferred`` lists every added value with its rule
        and line.
    """
    read = rank_devices(log) if read is None else read
    bus_rank = {(d.get("host"), d["bus_id"]): r for r, d in read.items() if d.get("bus_id")}
    printed = printed_ranks(log, bus_rank)
    devices = infer_devices(printed, seen_placement(read))
    return place_ranks(nranks, nnodes, devices, local_rank_lines(log), printed)


def rings_by_channel(log: NcclLog, nranks: int | None = None,
                     facts: list[InferredFact] | None = None) -> dict[int, list[int]]:
    """Ring order per channel from ``Channel cc/NN :`` lines (first complete print wins).

    Without one, the ring comes from the per-rank ``Ring cc : prev -> me -> next`` lines
    (NCCL_DEBUG_SUBSYS=GRAPH), each giving two links: a closed cycle of links is the ring, and
    with ``nranks`` known, links forming one path over all ranks but at most one are closed
    through the rank left out (``RULE_RING_LINKS``; the ring is added to ``facts``). Rings
    start at their lowest rank.
    """
    rings: dict[int, list[int]] = {}
    for rec in log.ring_orders:
        ch = rec["channel"]
        if ch not in rings or (rec["complete"] and len(rec["ranks"]) > len(rings[ch])):
            rings[ch] = rec["ranks"]
    links: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for rec in log.ring_ranks:
        links[rec["channel"]].append(rec)
    for ch, recs in links.items():
        if ch in rings:
            continue
        succ: dict[int, int] = {}
        for rec in recs:
            for a, b in ((rec["prev"], rec["rank"]), (rec["rank"], rec["next"])):
                if a < 0 or b < 0 or succ.setdefault(a, b) != b:
                    break
            else:
                continue
            break  # two successors for one rank: not one ring
        else:
            found = _ring_from_links(succ, nranks)
            if found is None:
                continue
            rings[ch], closed = found
            if closed and facts is not None:
                ref = recs[0]["ref"]
                facts.append(InferredFact(
                    fact="ring", ranks=sorted(rings[ch]),
                    value=f"channel {ch}: " + " ".join(map(str, rings[ch])),
                    rule=RULE_RING_LINKS, source=ref.source, line=ref.line))
    return dict(sorted(rings.items()))


def _ring_from_links(succ: dict[int, int], nranks: int | None,
                     ) -> tuple[list[int], bool] | None:
    """The ring the links ``a -> succ[a]`` show, starting at its lowest rank, and whether it
    had to be closed through ranks no link shows; None when the links do not fix it."""
    preds = set(succ.values())
    starts = [a for a in succ if a not in preds]
    if len(starts) > 1:
        return None
    start = starts[0] if starts else min(succ)
    path, cur = [start], succ[start]
    while cur in succ and cur != start and len(path) <= len(succ):
        path.append(cur)
        cur = succ[cur]
    if cur != start:
        path.append(cur)  # the path's last rank, which no link leaves
    nodes = set(succ) | preds
    if len(path) != len(set(path)) or set(path) != nodes:
        return None  # a repeated rank or links off the path
    closed = cur != start
    if closed:
        missing = sorted(set(range(nranks)) - nodes) if nranks else None
        if missing is None or len(missing) > 1 or not nodes <= set(range(nranks)):
            return None
        path += missing
    elif nranks is not None and len(path) != nranks:
        return None
    low = path.index(min(path))
    return path[low:] + path[:low], closed


def whole_rings(log: NcclLog, nranks: int | None) -> dict[int, list[int]]:
    """The rings of :func:`rings_by_channel` known to be whole: not cut ('...') and, when the
    communicator size is known, holding every rank."""
    cut = {r["channel"] for r in log.ring_orders if not r["complete"]} - {
        r["channel"] for r in log.ring_orders if r["complete"]}
    return {c: ring for c, ring in rings_by_channel(log, nranks).items()
            if c not in cut and (nranks is None or len(ring) == nranks)}


def _comm_groups(log: NcclLog) -> list[dict[str, Any]]:
    """Communicators seen, keyed by commId (else by nranks), with the (host, pid, tid) threads
    that printed their init lines or any other line naming the rank count (RCCL's
    ``comm %p nRanks %02d`` suffix, ``Init timings``); other lines are attributed through those
    threads."""
    groups: dict[str, dict[str, Any]] = {}
    for rec in log.init_lines + log.comm_topology_lines + log.nranks_fields:
        n = rec.get("nranks", rec.get("nRanks"))
        key = rec.get("commId") or f"n{n}"
        g = groups.setdefault(key, {"comm_id": rec.get("commId"), "nranks": n, "threads": set(),
                                    "comms": set()})
        ref = rec["ref"]
        comm = rec.get("comm") or ref.comm
        if comm:
            g["comms"].add((ref.host, comm))
        g["threads"].add((ref.host, ref.pid, ref.tid))
    # Lines without commId that share a comm pointer, or a printing thread and the rank count,
    # with a commId group belong to it.
    for key in [k for k in groups if k.startswith("n")]:
        g = groups[key]
        for other_key, other in groups.items():
            if other_key == key or other_key.startswith("n"):
                continue
            if g["comms"] & other["comms"] or (
                    g["threads"] & other["threads"] and g["nranks"] == other["nranks"]):
                other["threads"] |= g["threads"]
                del groups[key]
                break
    return list(groups.values())


def build_reports(log: NcclLog) -> list[CommunicatorReport]:
    """Normalized communicator reports from a parsed log.

    Parameters
    ----------
    log : NcclLog
        Output of :func:`parse_nccl_log`.

    Returns
    -------
    list of CommunicatorReport
        One per communicator found (by ``commId``; logs without init lines give one report).
        Lines that cannot be tied to a communicator by their printing thread go to the
        largest one. Empty when the log held no NCCL facts.
    """
    if not log.usable():
        return []
    groups = _comm_groups(log) or [{"comm_id": None, "nranks": None, "threads": set()}]
    groups.sort(key=lambda g: -(g["nranks"] or 0))
    if len(groups) == 1:
        return [_report(log, groups[0], lambda ref: True)]
    thread_owner = {t: i for i, g in enumerate(groups) for t in g["threads"]}

    def picker(i: int):
        return lambda ref: thread_owner.get((ref.host, ref.pid, ref.tid), 0) == i

    return [_report(log, g, picker(i)) for i, g in enumerate(groups)]


def _report(log: NcclLog, group: dict[str, Any], mine) -> CommunicatorReport:
    sub = NcclLog(sources=log.sources, versions=log.versions, banner=log.banner,
                  rccl_versions=log.rccl_versions,
                  net_ib=log.net_ib, nic_lines=log.nic_lines, networks=log.networks,
                  env=log.env, test_devices=log.test_devices)
    for name in ("init_lines", "comm_topology_lines", "ring_orders", "ring_ranks", "trees",
                 "tree_ranks", "connections", "nranks_fields"):
        setattr(sub, name, [r for r in getattr(log, name)
                            if mine(r["ref"]) and _same_comm(r, group)])
    nranks = group["nranks"]
    if nranks is None and sub.ring_orders:
        nranks = max((len(r["ranks"]) for r in sub.ring_orders if r["complete"]), default=0) or None
    nnodes = next((r["nNodes"] for r in sub.comm_topology_lines), None)
    conflicts: list[ParseWarning] = []
    read = rank_devices(sub, conflicts)
    placement = implied_placement(sub, nranks, nnodes, read)
    nics = host_nics(log)
    rank_nic, conn_nic = _connection_nics(sub, nics)
    ring_models, ring_facts = _rings(sub, nranks, placement, conflicts)
    # "N coll channels" is the count NCCL settled on (init.cc); ring-order lines come next.
    nch = [c["coll"] for c in log.channel_counts if mine(c["ref"])] or \
        [r["nchannels"] for r in sub.ring_orders if r["nchannels"]]
    networks = [n["network"] for n in log.networks]
    return CommunicatorReport(
        library=library_of(log),
        version=(log.rccl_versions or log.versions or log.version_hints or [None])[0],
        comm_id=group["comm_id"],
        nranks=nranks,
        nnodes=nnodes if nnodes is not None else placement.nnodes,
        ranks=_rank_infos(read, placement, rank_nic),
        nchannels=max(nch) if nch else (len(ring_models) or None),
        rings=ring_models,
        trees=[TreeNode(**{k: t[k] for k in ("rank", "channel", "down", "up", "tree")})
               for t in (sub.trees or sub.tree_ranks)],
        connections=[
            Connection(**{k: v for k, v in c.items() if k != "ref"}, host=c["ref"].host,
                       nic=nic, link=link)
            for c, (nic, link) in zip(sub.connections, conn_nic, strict=True)
        ],
        nics=[HostNics(host=h, nics=[Nic(**{k: v for k, v in n.items() if v is not None})
                                     for n in e["nics"]],
                       oob=e["oob"], relaxed_ordering=e["relaxed_ordering"])
              for h, e in nics.items()],
        qps=[QueuePair(**{k: v for k, v in q.items() if k != "ref"}) for q in log.qps],
        network=Counter(networks).most_common(1)[0][0] if networks else None,
        env=dict(log.env),
        sources=list(log.sources),
        warnings=list(log.warnings) + conflicts + placement.warnings,
        inferred=library_inference(log) + placement.inferred + ring_facts,
        hosts_ranks=placement.hosts_ranks(),
    )


def _connection_nics(sub: NcclLog, nics: dict[str, dict[str, Any]]):
    """Per rank the NIC its NET lines use, and per connection (NIC name, link layer)."""
    rank_nic: dict[int, str] = {}
    conn_nic: list[tuple[str | None, str | None]] = []
    for conn in sub.connections:
        loc = local_endpoint(conn)
        nic = None
        if conn["kind"] == "NET" and conn.get("net_dev") is not None:
            host_list = nics.get(conn["ref"].host or "", {}).get("nics", [])
            nic = next((n for n in host_list if n["index"] == conn["net_dev"]), None)
            if nic is not None and loc is not None:
                rank_nic.setdefault(loc[0], nic["name"])
        conn_nic.append((nic["name"], nic["link"]) if nic else (None, None))
    return rank_nic, conn_nic


def _rank_infos(read: dict[int, dict[str, Any]], placement: Placement,
                rank_nic: dict[int, str]) -> list[RankInfo]:
    ranks = sorted(set(read) | set(placement.group_of) | set(placement.device_of))
    return [
        RankInfo(rank=r, host=placement.host_of(r), device=placement.device_of.get(r),
                 nvml_device=read.get(r, {}).get("nvml_device"),
                 bus_id=read.get(r, {}).get("bus_id"), pid=read.get(r, {}).get("pid"),
                 nic=rank_nic.get(r), node=placement.node_of.get(r),
                 host_from=placement.host_from(r), device_from=placement.device_from(r))
        for r in ranks
    ]


def connection_links(log: NcclLog) -> dict[int, dict[tuple[int, int], tuple[bool, At]]]:
    """Per channel, (from, to) -> (goes over the network, line) of its connection lines
    (NET/COLLNET cross, P2P/SHM stay on the host; the first line of a pair wins)."""
    out: dict[int, dict[tuple[int, int], tuple[bool, At]]] = defaultdict(dict)
    for c in log.connections:
        if c["kind"] in ("NET", "COLLNET", "P2P", "SHM"):
            out[c["channel"]].setdefault((c["from"], c["to"]), (
                c["kind"] in ("NET", "COLLNET"), (c["ref"].source, c["ref"].line)))
    return out


def ring_edge_map(log: NcclLog, nranks: int | None, placement: Placement,
                  warnings: list[ParseWarning] | None = None,
                  ) -> dict[int, list[RingEdge] | None]:
    """Channel -> cross-host edges of each whole ring (None when unknown), each seen on a
    connection line or inferred from the hosts (:func:`~icefabric.collect.infer.ring_edges`);
    contradictions go to ``warnings``."""
    links = connection_links(log)
    # The line a ring comes from: its ring-dump line, else its first per-rank Ring line.
    line_of: dict[int, At] = {}
    for r in log.ring_orders + log.ring_ranks:
        line_of.setdefault(r["channel"], (r["ref"].source, r["ref"].line))
    whole = whole_rings(log, nranks)
    out: dict[int, list[RingEdge] | None] = {}
    for c, order in rings_by_channel(log, nranks).items():
        if c not in whole:
            out[c] = None
            continue
        out[c], found = ring_edges(order, links.get(c, {}), placement, line_of.get(c))
        if warnings is not None:
            warnings += found
    return out


def _rings(sub: NcclLog, nranks: int | None, placement: Placement,
           warnings: list[ParseWarning]) -> tuple[list[Ring], list[InferredFact]]:
    """Ring models with their cross-host edges, and one inferred fact per ring whose edges
    (some of them) were inferred rather than seen."""
    facts: list[InferredFact] = []
    rings = rings_by_channel(sub, nranks, facts)
    complete = {r["channel"]: r["complete"] for r in sub.ring_orders}
    edge_map = ring_edge_map(sub, nranks, placement, warnings)
    models = []
    for c, order in rings.items():
        edges = edge_map[c]
        models.append(Ring(channel=c, ranks=order, complete=complete.get(c, True),
                           cross_node_edges=None if edges is None else [(e.a, e.b)
                                                                        for e in edges],
                           edges=edges))
        guessed = [e for e in edges or [] if e.status == "inferred"]
        if guessed:
            ends = sorted({r for e in guessed for r in (e.a, e.b)})
            facts.append(InferredFact(
                fact="ring_cross_node_edges", ranks=ends,
                value=f"channel {c}: " + " ".join(f"{e.a}->{e.b}" for e in guessed),
                rule=RULE_EDGES, source=guessed[0].source, line=guessed[0].line))
    return models, facts


def library_inference(log: NcclLog) -> list[InferredFact]:
    """RCCL implied by a marker line (no RCCL version line printed): the inferred fact, or []."""
    if log.rccl_versions or not log.rccl_markers:
        return []
    ref = log.rccl_markers[0]["ref"]
    return [InferredFact(fact="library", value="rccl", rule=(
        f"'{log.rccl_markers[0]['what']}' is printed only by RCCL/ROCm builds (ROCm/rccl "
        "src/init.cc: the comm/nRanks/busId suffix, RCCL version string, librccl path)"),
        source=ref.source, line=ref.line)]


def _same_comm(rec: dict[str, Any], group: dict[str, Any]) -> bool:
    n = rec.get("nranks", rec.get("nRanks", rec["ref"].nranks))
    if n is not None and group["nranks"] is not None and n != group["nranks"]:
        return False
    cid = rec.get("commId")
    return not (cid and group["comm_id"] and cid != group["comm_id"])


def parse_reports(text: str | bytes, source: str | None = None) -> list[CommunicatorReport]:
    """Shortcut: :func:`parse_nccl_log` then :func:`build_reports`."""
    return build_reports(parse_nccl_log(text, source))
