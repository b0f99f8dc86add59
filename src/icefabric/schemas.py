"""Wire models shared by controller, agents and collectors (pydantic, versioned).

May import only ``icefabric.units`` and pydantic (import-layer contract, pyproject.toml).
Each section below is owned by one part of the system; keep them delimited.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# =================================================================================================
# Collectors: normalized communicator report (issue 6, ``icefabric.collect``)
# -------------------------------------------------------------------------------------------------
# One ``CommunicatorReport`` describes one CCL communicator as far as an artefact (NCCL/RCCL debug
# log, HCCL rank table ...) reveals it. Every field that the artefact did not show stays ``None``
# or empty: collectors never invent facts. Field names follow NCCL's own vocabulary
# (rank, busId, channel, via) so that a report can be checked against the log by eye.
# =================================================================================================

# 1.1 added RankInfo.node, Ring.cross_node_edges and CommunicatorReport.inferred (additive).
# 1.2 added RankInfo.host_from/device_from, Ring.edges, CommunicatorReport.hosts and .errors
# (additive).
COLLECT_SCHEMA_VERSION = "1.2"

FactStatus = Literal["seen", "inferred"]

ConnectionKind = Literal["P2P", "SHM", "NET", "COLLNET", "NVLS", "OTHER"]


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class ParseWarning(_Model):
    """Something a collector could not read; ``line`` is 1-based in ``source``."""

    message: str
    line: int | None = None
    source: str | None = None


class FactSource(_Model):
    """Where one value of a report comes from: ``seen`` on a line that prints it, or
    ``inferred`` by ``rule`` from the line ``source``:``line`` (a rule over several lines cites
    the first)."""

    status: FactStatus
    source: str | None = None
    line: int | None = None
    rule: str | None = None


class RankInfo(_Model):
    """Where one rank lives: host, local device index, PCI bus id and NIC (if shown)."""

    rank: int
    host: str | None = None
    device: int | None = Field(None, description="local CUDA/HIP device index (cudaDev)")
    nvml_device: int | None = None
    bus_id: str | None = Field(None, description="PCI bus id as printed by the library (hex)")
    pid: int | None = None
    nic: str | None = Field(None, description="name of the NIC the rank's NET traffic uses")
    node: int | None = Field(
        None, description="index of the rank's host in NCCL's order (hosts numbered by their "
                          "lowest rank); set only when every rank of the communicator is placed")
    host_from: FactSource | None = Field(
        None, description="how the rank's host (or node) is known; None when it is not")
    device_from: FactSource | None = None


class RingEdge(_Model):
    """Two consecutive ranks of a ring on different hosts, and how that is known: ``seen`` on
    a NET connection line between them, or ``inferred`` from the hosts of both ranks."""

    a: int
    b: int
    status: FactStatus
    source: str | None = None
    line: int | None = None


class Ring(_Model):
    """Ring order of one channel (``Channel cc/NN :  r0 r1 ...``)."""

    channel: int
    ranks: list[int]
    complete: bool = Field(True, description="False when the log line was cut ('...')")
    cross_node_edges: list[tuple[int, int]] | None = Field(
        None, description="consecutive ranks (a, b) of the ring that sit on different hosts; "
                          "None when some rank's host is unknown (never an empty guess)")
    edges: list[RingEdge] | None = Field(
        None, description="cross_node_edges, each marked seen or inferred with its line")


class TreeNode(_Model):
    """One rank's position in one channel's tree (``Trees [c] d0/d1/d2->r->up``).

    ``tree`` is 0, or 1 for the second tree NCCL 2.5 printed after ``|``. ``-1`` means none.
    """

    rank: int
    channel: int
    down: list[int]
    up: int
    tree: int = 0


class Connection(_Model):
    """One transport connection ``a[x] -> b[y] [send|receive] via T`` of one channel."""

    channel: int
    conn_index: int | None = Field(None, description="sub-index after '/' (NCCL >= 2.12)")
    from_rank: int = Field(alias="from")
    to_rank: int = Field(alias="to")
    from_dev: str | None = None
    to_dev: str | None = None
    direction: Literal["send", "receive"] | None = None
    via: str
    kind: ConnectionKind
    net_plugin: str | None = None
    net_dev: int | None = Field(None, description="index of the NIC in the NET/IB device list")
    proxy_rank: int | None = Field(None, description="PXN proxy rank, NET/<p>/<dev>(<proxy>)")
    gdrdma: bool | None = None
    nic: str | None = Field(None, description="NIC name behind net_dev on the printing host")
    link: str | None = Field(None, description="that NIC's link layer: IB, RoCE ...")
    host: str | None = Field(None, description="host whose process printed the line")


class Nic(_Model):
    """One NIC a host's CCL uses (``NET/IB : Using [i]name:port/LINK``)."""

    index: int
    name: str
    port: int | None = None
    link: str | None = Field(None, description="link layer as printed: IB, RoCE, IB/SHARP")
    speed_mbps: int | None = None
    rail: int | None = None


class HostNics(_Model):
    """The NIC list of one host plus its out-of-band (bootstrap) interface."""

    host: str
    nics: list[Nic] = Field(default_factory=list)
    oob: str | None = None
    relaxed_ordering: bool | None = None


class QueuePair(_Model):
    """One RDMA queue pair NCCL reported creating (``NCCL_DEBUG_SUBSYS=NET``).

    The QP number is what the RoCEv2 source port derives from (domain-facts §4.1), so these
    records are the bridge from a communicator to the flows ICE steers.
    """

    host: str | None = None
    pid: int | None = None
    qp_num: int
    ib_dev: int | None = Field(None, description="index into the host's NET/IB device list")
    port: int | None = None
    dev_name: str | None = None
    role: Literal["send", "recv", "flush"] | None = None
    link: str | None = Field(None, description="RoCE when a GID is printed, IB when a LID is")
    gid_index: int | None = None
    mtu: int | None = None


InferredKind = Literal["host", "node", "nnodes", "device", "ring", "ring_cross_node_edges",
                       "library"]


class InferredFact(_Model):
    """A fact the artefact implies without printing it, with the rule and the line it came from.

    ``rule`` names the library behaviour relied on (with its source file); ``source``/``line``
    point at the line that implied it, so a reader can check every inference by eye.
    """

    fact: InferredKind
    ranks: list[int] = Field(default_factory=list, description="ranks the fact is about")
    value: str = Field(description="what was inferred, in words (host name, device index ...)")
    rule: str
    source: str | None = None
    line: int | None = None


class HostRanks(_Model):
    """The full rank set of one host: the ranks a line of their own shows on it (``seen``) and
    the ranks a rule places there (``inferred``). ``host`` is None for a host the log never
    names; ``node`` is NCCL's index of the host when every rank is placed."""

    host: str | None = None
    node: int | None = None
    ranks: list[int]
    seen: list[int] = Field(default_factory=list)
    inferred: list[int] = Field(default_factory=list)


CclErrorKind = Literal["cann", "torch_npu", "function", "plog"]


class CclError(_Model):
    """One error report a CCL or its framework printed: a CANN message (``EI0009: [PID: n]
    <time> <message>`` with its ``Solution:`` line), a torch_npu header (``ERR02200``), an
    HCCL/OPS function error (``error code is N``, HcclResult ``name``) or a plog ERROR line.

    ``rank`` is the job rank (the ``[rankN]:`` prefix or the header's ``RankID``), ``reason``
    the text after ``Reason:``; ``source``/``line`` point at the line that printed it.
    """

    kind: CclErrorKind
    code: str = Field(max_length=64)
    message: str = Field(max_length=4096)
    reason: str | None = Field(None, max_length=4096)
    solution: str | None = Field(None, max_length=4096)
    rank: int | None = None
    pid: int | None = None
    device: int | None = None
    time: str | None = Field(None, max_length=64)
    name: str | None = Field(None, max_length=64)
    function: str | None = Field(None, max_length=256)
    source: str | None = None
    line: int | None = None


class CommunicatorReport(_Model):
    """Normalized view of one communicator, whatever library and artefact it came from."""

    schema_version: str = COLLECT_SCHEMA_VERSION
    library: Literal["nccl", "rccl", "hccl", "unknown"] = "unknown"
    version: str | None = None
    comm_id: str | None = None
    nranks: int | None = None
    nnodes: int | None = None
    ranks: list[RankInfo] = Field(default_factory=list)
    nchannels: int | None = None
    rings: list[Ring] = Field(default_factory=list)
    trees: list[TreeNode] = Field(default_factory=list)
    connections: list[Connection] = Field(default_factory=list)
    nics: list[HostNics] = Field(default_factory=list)
    qps: list[QueuePair] = Field(
        default_factory=list,
        description="QPs the log shows; proxy threads print them, so with several "
                    "communicators in one log every report lists all of them")
    network: str | None = Field(None, description="net plugin in use: IB, Socket, IBext_v8 ...")
    env: dict[str, str] = Field(default_factory=dict)
    sources: list[str] = Field(default_factory=list)
    warnings: list[ParseWarning] = Field(default_factory=list)
    inferred: list[InferredFact] = Field(
        default_factory=list,
        description="values above that were completed from what the log implies, not read")
    hosts_ranks: list[HostRanks] = Field(
        default_factory=list, description="every host's full rank set, hosts by lowest rank")
    errors: list[CclError] = Field(
        default_factory=list, description="error reports the artefact holds (a failing job)")

    def hosts(self) -> list[str]:
        """Hosts in order of their lowest rank."""
        seen: dict[str, int] = {}
        for r in sorted(self.ranks, key=lambda r: r.rank):
            if r.host is not None and r.host not in seen:
                seen[r.host] = r.rank
        return list(seen)

    def ring_orders(self, nranks: int) -> dict[int, list[int]]:
        """Channel -> rank order of every ring printed whole (all ``nranks`` ranks)."""
        return {r.channel: list(r.ranks) for r in self.rings
                if r.complete and len(r.ranks) == nranks}

    def net_connections(self) -> list[Connection]:
        """Only the connections that cross the network."""
        return [c for c in self.connections if c.kind == "NET"]


# ====================================== end of collectors ========================================
