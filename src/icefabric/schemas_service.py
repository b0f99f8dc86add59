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

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from icefabric.schemas import CclError, CommunicatorReport

SERVICE_SCHEMA_VERSION = "1.0"
#: most CCL errors one CommReport carries (a failing job prints a handful per rank)
MAX_REPORT_ERRORS = 256

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][\w.:/-]*$")]
Ipv4 = Annotated[str, Field(min_length=7, max_length=15, description="dotted IPv4 address")]
Qpn = Annotated[int, Field(ge=0, le=0xFFFFFF, description="24-bit QP number")]
Port = Annotated[int, Field(ge=0, le=0xFFFF)]


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


def _check_ip(v: str) -> str:
    try:
        ipaddress.IPv4Address(v)
    except ValueError:
        raise ValueError(f"not an IPv4 address: {v!r}") from None
    return v


# -- errors ---------------------------------------------------------------------------------
class ErrorBody(_Model):
    """Every 4xx/5xx response body."""

    error: str = Field(description="short machine-readable code")
    message: str = Field(description="what was wrong, for humans")
    details: list[dict[str, Any]] = Field(default_factory=list)


# -- fabric ---------------------------------------------------------------------------------
class LinkRef(_Model):
    """A cable between two named nodes (both directions)."""

    a: Name
    b: Name


class LinkState(_Model):
    a: Name
    b: Name
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
    connected: bool


# -- communicator reports ---------------------------------------------------------------------
class RankEntry(_Model):
    rank: int = Field(ge=0, le=1_000_000)
    host: Name
    device: int = Field(ge=0, le=1024, description="local accelerator index")
    nic: str | None = Field(None, max_length=128)


class QpEntry(_Model):
    """One RC QP created on the reporting host: its 5-tuple and numbers.

    ``ordinal`` numbers the QPs of one communicator between the same NIC pair in creation
    order; (job, src_ip, dst_ip, ordinal) names a QP across reports and plans.
    """

    src_ip: Ipv4
    dst_ip: Ipv4
    sport: Port | None = None
    dport: Port = 4791
    lqpn: Qpn
    rqpn: Qpn
    ordinal: int = Field(0, ge=0, le=1_000_000)

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
    qps: list[QpEntry] = Field(default_factory=list, max_length=200_000)
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
#: how a NIC knows a QP: (src_ip, dst_ip, lqpn, rqpn)
QpKey = tuple[str, str, int, int]


class QpPlan(_Model):
    """The plan of one QP: source port to set, pacing rate (None = line rate / DCQCN), the
    backup port for local fail-over, and the fabric route(s) it is expected to take (link
    ids of ``fabric_version``)."""

    src_ip: str
    dst_ip: str
    lqpn: int
    rqpn: int
    job: str
    ordinal: int
    sport: int = Field(description="UDP source port; -1 = leave as is (spraying NIC)")
    rate_bps: float | None = None
    routes: list[list[int]]
    weights: list[float]
    backup_sport: int | None = None

    @property
    def key(self) -> QpKey:
        return (self.src_ip, self.dst_ip, self.lqpn, self.rqpn)


#: a list of QP plans (how a host's QPs are stored and checked)
QP_PLANS = TypeAdapter(list[QpPlan])


class HostPlan(_Message):
    host: str
    version: int
    fabric_version: int
    policy: str
    created_at: float
    down_links: list[LinkRef]
    qps: list[QpPlan]


class PlanAck(_Message):
    version: int = Field(ge=0, le=2**62)
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


# -- events and telemetry --------------------------------------------------------------------
class Event(_Model):
    kind: Literal["link_down", "link_up", "port_counters", "cnp_rate", "note"]
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


class JobError(_Model):
    """One CCL error of a job, with the host that reported it."""

    host: str
    error: CclError


class JobView(_Message):
    job: str
    job_order: int
    library: str
    hosts_expected: list[str]
    hosts_reported: list[str]
    complete: bool
    qps: int
    size_bytes: int
    failing: bool = Field(False, description="some host reported CCL errors for the job")
    errors: list[JobError] = Field(default_factory=list)


class LinkView(_Message):
    id: int
    name: str
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
