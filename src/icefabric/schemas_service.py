"""Wire models of the ICE controller service and its host agents (pydantic, versioned).

These are the only coupling between ``icefabric.controller`` and ``icefabric.agent`` (STYLE
G8). Every top-level message carries ``schema_version``; a receiver rejects a major version
it does not know with 400.

Split by layer: :mod:`icefabric.schemas` holds what an artefact shows (the collectors'
normalized :class:`~icefabric.schemas.CommunicatorReport`); this module holds what the
service exchanges, built on it (a :class:`CommReport` embeds the collector's report it came
from). Host plans are these models on the wire: the controller serializes them, agents
validate them. May import only pydantic, the standard library and ``icefabric.schemas``
(layer contract, pyproject.toml).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from icefabric.qpid import QpId
from icefabric.schemas import CclError, CommunicatorReport

SERVICE_SCHEMA_VERSION = "1.0"
#: most CCL errors one CommReport carries (a failing job prints a handful per rank)
MAX_REPORT_ERRORS = 256

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.:/-]*$")]
Ipv4 = Annotated[str, Field(min_length=7, max_length=15, description="dotted IPv4 address")]
Qpn = Annotated[int, Field(ge=0, le=0xFFFFFF, description="24-bit QP number")]
Port = Annotated[int, Field(ge=0, le=0xFFFF)]
#: a rate in bits/s: finite, non-negative, at most 10 Tb/s (no NIC comes near)
RateBps = Annotated[float, Field(ge=0, le=1e13, allow_inf_nan=False)]
#: a plan or fabric version (what a JSON number and the database's BIGINT both hold)
Version = Annotated[int, Field(ge=0, le=2**62)]
#: bounds of a host plan: QPs per host (16 NICs x 4,096 QPs; an 8-rank host in an
#: all-to-all of 2,048 ranks with 4 QPs per connection needs 65,504; checking that many
#: takes an agent about a second), ECMP routes of one QP (a spraying NIC's paths) and
#: hops of one route
MAX_PLAN_QPS = 65_536
MAX_QP_ROUTES = 4096
MAX_ROUTE_HOPS = 64


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Message(_Model):
    schema_version: str = Field(SERVICE_SCHEMA_VERSION, max_length=16,
                                description="major.minor; the major must match")

    @field_validator("schema_version")
    @classmethod
    def _major(cls, v: str) -> str:
        if v.split(".")[0] != SERVICE_SCHEMA_VERSION.split(".")[0]:
            raise ValueError(f"unsupported schema_version {v!r}; this service speaks "
                             f"{SERVICE_SCHEMA_VERSION}")
        return v


# Dotted quad without leading zeros (what ipaddress.IPv4Address accepts), many times faster
# than it: a plan may carry 65,536 QPs.
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")


def _check_ip(v: str) -> str:
    if not _IPV4.fullmatch(v):
        raise ValueError(f"not an IPv4 address: {v!r}")
    return v


# -- errors ---------------------------------------------------------------------------------
class ErrorBody(_Model):
    """Every 4xx/5xx response body."""

    error: str = Field(description="short machine-readable code")
    message: str = Field(description="what was wrong, for humans")
    details: list[dict[str, Any]] = Field(default_factory=list)


# -- fabric ---------------------------------------------------------------------------------
#: One of the parallel cables between two nodes: cable ``k`` is ``a->b/k`` (and ``b->a/k``)
#: of ``/v1/links`` and of the simulator's link names (0: the first, named without ``/0``).
CableIndex = Annotated[int, Field(ge=0, le=1023)]


class LinkRef(_Model):
    """The cables between two named nodes (both directions): every one, or ``cable``."""

    a: Name
    b: Name
    cable: CableIndex | None = None


class LinkState(_Model):
    a: Name
    b: Name
    cable: CableIndex | None = None
    up: bool


class FabricUpload(_Message):
    """Replace the fabric: topology document (``icefabric.topology`` format, with each
    switch's hash model), the links currently down, and the planner's seed."""

    topology: dict[str, Any]
    down_links: list[LinkRef] = Field(default_factory=list, max_length=100_000)
    plan_seed: int = Field(0, ge=0, le=2**31 - 1)


class LinkStatesUpdate(_Message):
    links: list[LinkState] = Field(min_length=1, max_length=100_000)


class FabricInfo(_Message):
    name: str
    version: int
    nodes: int
    links: int
    servers: int
    down_links: list[LinkRef]
    plan_seed: int


# -- agents ---------------------------------------------------------------------------------
class NicInfo(_Model):
    name: Name
    ip: Ipv4
    speed_bps: float | None = Field(None, ge=0)

    _ip = field_validator("ip")(_check_ip)


class AgentEnrol(_Message):
    """An agent announces its host and NICs; answered with the host's agent token."""

    host: Name
    nics: list[NicInfo] = Field(default_factory=list, max_length=256)
    agent_version: str = Field("", max_length=64)
    actuator: str = Field("", max_length=64)


class AgentEnrolled(_Message):
    host: str
    token: str = Field(description="per-host bearer token; shown once, stored hashed")
    fabric_version: int


class AgentView(_Message):
    host: str
    nics: list[NicInfo]
    agent_version: str
    actuator: str
    enrolled_at: float
    last_seen: float
    applied_version: int
    plan_version: int = Field(0, description="version of the host's current plan document "
                              "(0: none yet); applied_version equals it once applied")
    connected: bool


# -- communicator reports ---------------------------------------------------------------------
class RankEntry(_Model):
    rank: int = Field(ge=0, le=1_000_000)
    host: Name
    device: int = Field(ge=0, le=1024, description="local accelerator index")
    nic: str | None = Field(None, max_length=128)


class QpEntry(_Model):
    """One QP created on the reporting host: its 5-tuple and numbers.

    ``ordinal`` numbers the job's data QPs between the same NIC pair in connection order;
    with the job and the pair it names the QP across reports and plans
    (:class:`icefabric.qpid.QpId`). ``side`` is ``receive`` for a QP the host knows is a
    connection's receive side (it takes no ordinal); ``init_rtr_ns`` its INIT->RTR time on
    the host's clock; the controller pairs the two ends of each connection with them
    (:mod:`icefabric.pipeline.pairing`). ``rate_kbps``/``rate_via``: the pacing rate in
    force and the mechanism that set it (``static_rate`` at INIT->RTR, ``rate_limit`` live;
    None = not paced).
    """

    src_ip: Ipv4
    dst_ip: Ipv4
    sport: Port | None = None
    dport: Port = 4791
    lqpn: Qpn
    rqpn: Qpn
    ordinal: int = Field(0, ge=0, le=1_000_000)
    rate_kbps: int | None = Field(None, ge=1, le=2**32 - 1)
    rate_via: Literal["static_rate", "rate_limit"] | None = None
    side: Literal["receive"] | None = None
    init_rtr_ns: int | None = Field(None, ge=0, le=10**13)

    _sip = field_validator("src_ip")(_check_ip)
    _dip = field_validator("dst_ip")(_check_ip)


class CollectiveEntry(_Model):
    kind: Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"]
    algorithm: str | None = Field(None, max_length=64)


class CommReport(_Message):
    """What a host knows about one job's communicator (the normalized collector report
    plus the QPs seen on this host). ``job_order`` is the job's launch order."""

    job: Name
    job_order: int = Field(0, ge=0, le=1_000_000)
    comm_id: str | None = Field(None, max_length=128)
    library: Literal["nccl", "rccl", "hccl", "cross"]
    collectives: list[CollectiveEntry] = Field(min_length=1, max_length=64)
    size_bytes: int = Field(ge=1, le=1 << 44)
    channels: int | None = Field(None, ge=1, le=64)
    qps_per_connection: int = Field(1, ge=1, le=128)
    step_overhead_ns: int = Field(1000, ge=0, le=10**9)
    ranks: list[RankEntry] = Field(min_length=2, max_length=100_000)
    # a host's plan holds at most MAX_PLAN_QPS QPs: no more data QPs may be reported for
    # one job, each with its connection's other end (a receive side, for pairing)
    qps: list[QpEntry] = Field(default_factory=list, max_length=2 * MAX_PLAN_QPS)
    collector: CommunicatorReport | None = Field(
        None, description="the collector's report this one was made from (rings, QPs ...)")
    errors: list[CclError] = Field(
        default_factory=list, max_length=MAX_REPORT_ERRORS,
        description="errors this host's CCL printed for the job (HCCL EI0009, EJ0001 ...): "
                    "any error marks the job failing")


class ReportAccepted(_Message):
    job: str
    host: str
    hosts_reported: int
    hosts_expected: int
    complete: bool
    failing: bool = Field(False, description="some host reported CCL errors for the job")


# -- plans ----------------------------------------------------------------------------------
class QpPlan(_Model):
    """The plan of one QP: source port to set, pacing rate (None = line rate / DCQCN), the
    backup port for local fail-over, and the fabric route(s) it is expected to take (link
    ids of ``fabric_version``).

    Every field is checked as it arrives: an agent writes these values into files and
    NICs, so a plan with an address that is not an IPv4 address, a port outside 0-65535,
    a rate that is negative or not finite, or more routes than a NIC has paths is refused
    whole (an agent keeps its last good plan). Strict: a number must come as a number
    (``"80"`` is not a port)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    src_ip: Ipv4
    dst_ip: Ipv4
    lqpn: Qpn
    rqpn: Qpn
    job: Name
    ordinal: int = Field(ge=0, le=1_000_000)
    sport: Port | None = Field(description="UDP source port; None = leave as is (a "
                               "spraying NIC); required, so an absent port is an error")
    rate_bps: RateBps | None = None
    routes: list[Annotated[list[Annotated[int, Field(ge=0, le=2**31)]],
                           Field(max_length=MAX_ROUTE_HOPS)]] = Field(max_length=MAX_QP_ROUTES)
    weights: list[Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]] = Field(
        max_length=MAX_QP_ROUTES, description="share of the QP's traffic on each route")
    backup_sport: Port | None = None

    _sip = field_validator("src_ip")(_check_ip)
    _dip = field_validator("dst_ip")(_check_ip)

    @model_validator(mode="after")
    def _one_weight_per_route(self) -> QpPlan:
        if len(self.weights) != len(self.routes):
            raise ValueError(f"{len(self.routes)} routes but {len(self.weights)} weights")
        return self

    @property
    def qp_id(self) -> QpId:
        """The data QP this entry plans, its one name (matched with live QPs before they
        connect; ``lqpn``/``rqpn`` name it on its NIC once the controller knows them)."""
        return QpId.of(self.job, self.src_ip, self.dst_ip, self.ordinal)


#: a list of QP plans (how a host's QPs are stored and checked)
QP_PLANS = TypeAdapter(list[QpPlan])


class HostPlan(_Message):
    """One host's plan. Checked whole on arrival: at most :data:`MAX_PLAN_QPS` QPs, each
    QP (its :class:`~icefabric.qpid.QpId`) at most once and each QP's numbers on a NIC pair
    at most once (a NIC's QP has one plan); an agent also refuses a plan for another host.

    ``version`` is the plan version that last changed this host's document (its QP plans,
    the fabric version or the policy): a host is sent a new document only when its own
    QPs changed, and ``created_at`` is that version's time. The link state a version was
    planned under is in its :class:`PlanSummary`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    host: Name
    version: Version
    fabric_version: Version
    policy: str = Field(max_length=64)
    created_at: float = Field(ge=0, allow_inf_nan=False)
    qps: list[QpPlan] = Field(max_length=MAX_PLAN_QPS)

    @model_validator(mode="after")
    def _unique_qps(self) -> HostPlan:
        ids: set[QpId] = set()
        numbers: set[tuple[str, str, int, int]] = set()
        for i, q in enumerate(self.qps):
            qid, qpn = q.qp_id, (q.src_ip, q.dst_ip, q.lqpn, q.rqpn)  # qp_id parses the IPs
            if qid in ids or qpn in numbers:
                what = (f"ordinal {q.ordinal} of job {q.job!r}" if qid in ids else
                        f"lqpn {q.lqpn} rqpn {q.rqpn}")
                raise ValueError(f"qps[{i}]: QP {q.src_ip}->{q.dst_ip} {what} is planned twice")
            ids.add(qid)
            numbers.add(qpn)
        return self


class PlanAck(_Message):
    version: Version
    applied: int = Field(ge=0, le=10**9, description="QPs applied")
    failed: int = Field(0, ge=0, le=10**9)
    message: str = Field("", max_length=1024)


class NoPath(_Model):
    """A job left out of a plan because some of its QPs have no working path: none of
    its QPs is in the plan (they keep their hosts' defaults) until a path comes back."""

    job: str
    qps: int = Field(description="QPs of the job without a working path")
    examples: list[str] = Field(description="a few of them, as 'src_ip->dst_ip'")
    reason: str


class PlanSummary(_Message):
    version: int
    policy: str
    created_at: float
    reason: str
    planning_ms: float
    jobs: list[str]
    qps: int
    hosts: int
    down_links: list[LinkRef]
    fabric_version: int
    no_path: list[NoPath] = Field(default_factory=list)
    hosts_changed: int = Field(0, description="hosts whose plan document this version "
                               "changed (the agents it wakes)")


# -- events and telemetry --------------------------------------------------------------------
class Event(_Model):
    """Something a host or an operator observed. ``link_down``/``link_up`` need ``link``
    (an agent may report only links of its own host); ``plan_rejected`` says an agent
    refused a plan it was served (``message``: why) and keeps its last good one."""

    kind: Literal["link_down", "link_up", "port_counters", "cnp_rate", "plan_rejected",
                  "note"]
    link: LinkRef | None = None
    nic: str | None = Field(None, max_length=128)
    t_ns: int | None = Field(None, ge=0)
    counters: dict[str, float] = Field(default_factory=dict, max_length=64)
    message: str = Field("", max_length=1024)


class EventBatch(_Message):
    events: list[Event] = Field(min_length=1, max_length=1000)


class EventsAccepted(_Message):
    accepted: int
    replan: bool
    plan_version: int


class JobCreate(_Message):
    """Register a job (its scheduler or the admin): the hosts its ranks run on. Only these
    hosts may report it."""

    hosts: list[Name] = Field(min_length=1, max_length=100_000)


class JobError(_Model):
    """One CCL error of a job, with the host that reported it."""

    host: str
    error: CclError


class JobView(_Message):
    """A registered job; ``job_order``, ``library`` and ``size_bytes`` come from its
    reports (0 and "" before the first)."""

    job: str
    job_order: int = 0
    library: str = ""
    hosts_expected: list[str]
    hosts_reported: list[str]
    complete: bool
    qps: int
    size_bytes: int = 0
    failing: bool = Field(False, description="some host reported CCL errors for the job")
    errors: list[JobError] = Field(default_factory=list)


class LinkView(_Message):
    """One direction of a cable: ``name`` is ``a->b`` or ``a->b/cable``."""

    id: int
    name: str
    a: str
    b: str
    cable: int
    kind: str
    capacity_bps: float
    up: bool
    planned_qps: int


class Health(_Message):
    status: Literal["ok"]
    policy: str
    fabric_version: int
    plan_version: int
    database: str
