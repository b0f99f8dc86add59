"""Scenario schema (pydantic): fabric, server pools, placement, jobs, sizes, policies,
engine, failures, seed. Unknown fields are errors, so typos never pass silently."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from icefabric.engine.options import EngineOptions
from icefabric.training.spec import TrainingSpec
from icefabric.units import TiB, UnitError, format_size, parse_size

# Domains of the scenario's numbers: far above any fabric built today (the benchmarks stop
# at 2,048 servers and 256 cores), yet no typo can ask for 10^12 of anything. Whole-scenario
# budgets (servers, switches, links, QPs, memory) are in icefabric.scenario.budget.
MAX_SERVERS = 1 << 17  # in one pool
MAX_SWITCHES = 1 << 14  # of one role (spines, cores, aggregation switches per pod ...)
MAX_PARALLEL_LINKS = 64  # cables from a leaf to one spine
MAX_OVERSUB = 64.0
MAX_DELAY_NS = 10_000_000  # 10 ms: 2,000 km of fibre
MAX_NIC_GBPS = 3200.0
MAX_OVERHEAD_NS = 1_000_000_000  # 1 s per collective step
MAX_TIME_US = 1e9  # 1,000 s of simulated time
MAX_SEED = 2**63 - 1  # numpy's seeds are unbounded, the engines keep int64
MAX_MESSAGE_BYTES = TiB
MAX_SIZES = 64
MAX_NCCL_ENV = 1 << 16  # NCCL_* counts (channels, QPs) are small integers


class _Strict(BaseModel):
    # inf and nan are never a fabric's number (pydantic accepts them in floats by default)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def message_size(value: int | str) -> int:
    """A message size in bytes (``1MiB``, ``64K``, ``8``), between 1 B and 1 TiB."""
    size = parse_size(value)
    if not 1 <= size <= MAX_MESSAGE_BYTES:
        raise UnitError(f"message size {value!r} must be between 1 B and "
                        f"{format_size(MAX_MESSAGE_BYTES)}")
    return size


class FabricSpec(_Strict):
    """The network. ``kind`` picks the builder; unused fields of other kinds must be left out."""

    kind: Literal["leaf-spine", "rail-optimized", "fat-tree"] = Field(
        "leaf-spine", description="leaf-spine (every NIC of a server on its leaf), "
        "rail-optimized (NIC i of every server on rail leaf i) or a 3-tier fat-tree")
    servers_per_leaf: int = Field(2, ge=1, le=MAX_SWITCHES,
                                  description="servers cabled to one leaf (one rail "
                                  "group when rail-optimized)")
    spines: int | None = Field(None, ge=1, le=MAX_SWITCHES,
                               description="leaf-spine, rail-optimized: number "
                               "of spines")
    links_per_spine: int = Field(1, ge=1, le=MAX_PARALLEL_LINKS,
                                 description="parallel cables from each leaf to "
                                 "each spine")
    oversub: float = Field(1.0, gt=0, le=MAX_OVERSUB,
                           description="leaf downlink : uplink capacity (2 = 2:1 "
                           "oversubscribed); uplink speed is scaled to match")
    pods: int | None = Field(None, ge=1, le=MAX_SWITCHES, description="fat-tree: pods")
    leaves_per_pod: int | None = Field(None, ge=1, le=MAX_SWITCHES,
                                       description="fat-tree: leaves per pod")
    aggs_per_pod: int | None = Field(None, ge=1, le=MAX_SWITCHES,
                                     description="fat-tree: aggregation "
                                     "switches per pod")
    cores: int | None = Field(None, ge=1, le=MAX_SWITCHES, description="fat-tree: core switches")
    core_oversub: float = Field(1.0, gt=0, le=MAX_OVERSUB,
                                description="fat-tree: aggregation down : up "
                                "capacity")
    separate_pools: bool = Field(True, description="start every pool on a fresh leaf (no "
                                 "leaf mixes vendors)")
    placement: Literal["packed", "scattered"] = Field(
        "packed", description="packed fills leaves in server order; scattered deals each "
        "pool's servers round-robin over the leaves it needs (rings cross the spines)")
    leaf_switch: str = Field("tomahawk5-128x400", description="switch profile of the "
                             "leaves (`icefab catalog`)")
    spine_switch: str = Field("tomahawk5-128x400", description="switch profile of the spines "
                              "(fat-tree: aggregation switches)")
    core_switch: str = Field("tomahawk5-128x400", description="fat-tree: switch profile of "
                             "the cores")
    hash_seeds: Literal["sonic", "random", "zero"] = Field(
        "sonic", description="ECMP hash seed per switch: SONiC's fixed seed per role (leaf "
        "0, spine 10, core 25), drawn from the scenario seed (random), or 0 everywhere")
    hash_profiles: dict[Literal["leaf", "spine", "core"], str] | str | None = Field(
        None,
        description="named switch hash profile per role (one name = every role), from "
        "icefabric.dataplane.ecmp.PROFILES: 'correlated' (every tier reads the same hash "
        "bits), 'independent' (each tier its own bits), or vendor defaults such as "
        "broadcom_rtag7_fboss, spectrum_cumulus, sonic_leaf; overrides hash_seeds and the "
        "switch model's algorithm for the roles it names")
    host_delay_ns: int = Field(500, ge=0, le=MAX_DELAY_NS,
                               description="one-way delay of a NIC-leaf cable")
    fabric_delay_ns: int = Field(500, ge=0, le=MAX_DELAY_NS,
                                 description="one-way delay of a switch-switch "
                                 "cable")

    @model_validator(mode="after")
    def _kind_fields(self):
        if self.kind in ("leaf-spine", "rail-optimized"):
            if self.spines is None:
                raise ValueError(f"fabric kind {self.kind} needs 'spines'")
            extra = [k for k in ("pods", "leaves_per_pod", "aggs_per_pod", "cores")
                     if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"fields {extra} belong to kind fat-tree, not {self.kind}")
        else:
            missing = [k for k in ("pods", "leaves_per_pod", "aggs_per_pod", "cores")
                       if getattr(self, k) is None]
            if missing:
                raise ValueError(f"fabric kind fat-tree needs {missing}")
        return self


class PoolSpec(_Strict):
    """``count`` servers of catalog profile ``server``; servers are named ``<name>-<i>``,
    or as listed in ``hosts``."""

    name: str = Field(pattern=r"^[A-Za-z][\w.]*$", description="pool name; jobs refer to "
                      "it in 'pools'")
    server: str = Field(description="server profile from the catalog (`icefab catalog`)")
    count: int = Field(ge=1, le=MAX_SERVERS, description="number of servers")
    nic_gbps: float | None = Field(None, gt=0, le=MAX_NIC_GBPS,
                                   description="override the profile's NIC speed")
    hosts: list[str] | None = Field(None, description="server names (e.g. the hostnames a "
                                    "CCL log shows), one per server; default <name>-<i>")

    @model_validator(mode="after")
    def _hosts(self):
        if self.hosts is not None and len(self.hosts) != self.count:
            raise ValueError(f"hosts lists {len(self.hosts)} names for count {self.count}")
        return self


class ScenarioCollective(_Strict):
    """One collective the job runs at every message size."""

    kind: Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"] = Field(
        description="the collective")
    algorithm: str | None = Field(None, description="library algorithm, e.g. ring or tree "
                                  "(NCCL all_reduce); default: the library model's choice")


class ScenarioJob(_Strict):
    """A job: its servers (names, or whole pools), ranks per server, library and
    collectives. ``library: auto`` uses the servers' library, ``cross`` when pools of
    different libraries are mixed."""

    name: str = Field(pattern=r"^[A-Za-z][\w.-]*$", description="job name")
    servers: list[str] | None = Field(None, description="server names (<pool>-<i>); give "
                                      "this or 'pools'")
    pools: list[str] | None = Field(None, description="every server of these pools")
    ranks_per_server: int | None = Field(None, ge=1, description="ranks on each server; "
                                         "default: one per accelerator")
    library: Literal["auto", "nccl", "rccl", "hccl", "cross"] = Field(
        "auto", description="collective library model")
    qps_per_connection: int = Field(
        1, ge=1, le=128,
        description="QPs per network connection; when left out, NCCL jobs take "
        "nccl_env.NCCL_IB_QPS_PER_CONNECTION, else the library default 1")
    channels: int | None = Field(
        None, ge=1, le=64,
        description="NCCL channels (rings), e.g. the 'N coll channels' of the job's log; "
        "wins over nccl_version and nccl_env")
    nccl_version: str | None = Field(
        None, pattern=r"^v?\d+\.\d+(\.\d+)?([-+].*)?$",
        description="NCCL release whose defaults set channels per NIC and the data split "
        "over QPs (e.g. 2.19.3; 2.18-2.19 open 32 channels on 8-NIC H100 servers, 2.20 on "
        "16); default 2.27.7. See icefabric.ccl.nccl_defaults")
    nccl_env: dict[str, Annotated[int, Field(ge=0, le=MAX_NCCL_ENV)]] = Field(
        default_factory=dict,
        description="NCCL_* variables the job sets: NCCL_IB_QPS_PER_CONNECTION, "
        "NCCL_IB_SPLIT_DATA_ON_QPS, NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, "
        "NCCL_NET_SHARED_COMMS")
    step_overhead_ns: int = Field(1000, ge=0, le=MAX_OVERHEAD_NS,
                                  description="fixed cost of every step of a "
                                  "collective (kernel launch, synchronisation)")
    collectives: list[ScenarioCollective] = Field(min_length=1, description="run one after "
                                                  "the other at each size")
    rings: list[list[Annotated[int, Field(ge=0)]]] | None = Field(
        None, description="ring order (ranks) of every channel as the library reported it "
        "(NCCL 'Channel cc/NN : r0 r1 ...'); default: the library model's rings")

    @model_validator(mode="after")
    def _where(self):
        if (self.servers is None) == (self.pools is None):
            raise ValueError("give exactly one of 'servers' or 'pools'")
        env_qps = self.nccl_env.get("NCCL_IB_QPS_PER_CONNECTION")
        if ("qps_per_connection" in self.model_fields_set and env_qps is not None
                and env_qps != self.qps_per_connection):
            raise ValueError(f"qps_per_connection {self.qps_per_connection} contradicts "
                             f"nccl_env.NCCL_IB_QPS_PER_CONNECTION {env_qps}; give one")
        return self


class FailureSpec(_Strict):
    """Link ``[a, b]`` (node names, both directions) goes down at ``at_us``
    (and up again at ``until_us`` if given): every cable between them, or ``cable``."""

    at_us: float = Field(ge=0, le=MAX_TIME_US, description="when the link goes down")
    link: tuple[str, str] = Field(description="the two node names, e.g. [leaf0, spine3]")
    cable: int | None = Field(None, ge=0, le=MAX_PARALLEL_LINKS - 1,
                              description="one of several parallel "
                              "cables between them (0 the first, as `a->b/k` in results); "
                              "default: every cable")
    until_us: float | None = Field(None, ge=0, le=MAX_TIME_US,
                                   description="when it comes back; default: never")


class SizesSpec(_Strict):
    """Message sizes min, min * factor, ... up to max (as nccl-tests' -b, -e, -f)."""

    min: int | str = Field("1MiB", validate_default=True, description="smallest size")
    max: int | str = Field("1GiB", validate_default=True, description="largest size")
    factor: int = Field(2, ge=2, le=MAX_MESSAGE_BYTES, description="ratio of successive "
                        "sizes")

    @field_validator("min", "max")
    @classmethod
    def _size(cls, v):
        return message_size(v)

    @model_validator(mode="after")
    def _order(self):
        if self.min > self.max:
            raise ValueError(f"sizes.min {format_size(self.min)} exceeds sizes.max "
                             f"{format_size(self.max)}")
        return self

    def values(self) -> list[int]:
        lo, hi = int(self.min), int(self.max)
        out = [lo]
        while out[-1] * self.factor <= hi:
            out.append(out[-1] * self.factor)
        return out


class Scenario(_Strict):
    """A whole scenario file (the top level)."""

    name: str = Field(description="scenario name (shown in results)")
    description: str = Field("", description="one or two sentences shown with the results")
    seed: int = Field(0, ge=0, le=MAX_SEED,
                      description="seeds every random choice (hash seeds, ECMP ports), "
                      "so a run is reproducible; draw 0 of the ECMP draws uses it")
    draws: int | None = Field(
        None, ge=1, le=10_000,
        description="draws of QP numbers and switch hash seeds per randomised policy (the "
        "ECMP family); default icefabric.experiment.draws.DEFAULT_DRAWS (1 on the fluid "
        "engine, above 128 servers and for an AllToAll over more than 16); `icefab simulate "
        "--draws` wins")
    fabric: FabricSpec = Field(description="the network")
    pools: list[PoolSpec] = Field(min_length=1, description="groups of identical servers")
    jobs: list[ScenarioJob] = Field(default_factory=list, description="collective jobs on "
                                    "the servers")
    training: TrainingSpec | None = Field(
        None, description="a training job: model, parallelism plan and where it runs; "
        "simulated as one iteration per policy (see docs/training.md)")
    sizes: SizesSpec | list[int | str] = Field(
        default_factory=SizesSpec, description="message sizes: a range or an explicit list "
        f"(at most {MAX_SIZES} sizes, each 1 B to {format_size(MAX_MESSAGE_BYTES)})")
    policies: list[str] = Field(default_factory=lambda: ["ecmp", "ecmp-tuned", "ecmp-multiqp",
                                                         "spray", "ideal"],
                                description="policies compared on the same workload: ecmp, "
                                "ecmp-tuned, ecmp-multiqp, static-disjoint, spray, ice, ideal")
    policy_options: dict[str, dict] = Field(default_factory=dict, description="options per "
                                            "policy, e.g. {ice: {qps: auto}}")
    engine: Literal["flow", "fluid"] = Field(
        "flow", description="flow (max-min rates, fast) or fluid (queues, ECN, DCQCN, PFC)")
    engine_options: EngineOptions = Field(
        default_factory=EngineOptions,
        description="fluid-engine models and numerics (cc, dcqcn, red, pfc, endside, ...); "
        "see docs/fluid-engine.md")
    failures: list[FailureSpec] = Field(default_factory=list, description="links that go "
                                        "down (and up) during the run")

    @field_validator("engine_options", mode="before")
    @classmethod
    def _engine_once(cls, v):
        if isinstance(v, dict) and "engine" in v:
            raise ValueError("set the engine with the top-level key 'engine'")
        return v

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v):
        if isinstance(v, list):
            if not 1 <= len(v) <= MAX_SIZES:
                raise ValueError(f"{len(v)} sizes listed; give 1 to {MAX_SIZES}")
            return [message_size(s) for s in v]
        return v

    def size_list(self) -> list[int]:
        if isinstance(self.sizes, SizesSpec):
            return self.sizes.values()
        return [message_size(s) for s in self.sizes]

    @model_validator(mode="after")
    def _refs(self):
        pools = [p.name for p in self.pools]
        if len(set(pools)) != len(pools):
            raise ValueError("pool names must be unique")
        jobs = [j.name for j in self.jobs]
        if not jobs and self.training is None:
            raise ValueError("a scenario needs 'jobs' or a 'training' job")
        if self.training is not None and self.training.name in jobs:
            raise ValueError(f"training job {self.training.name!r} has the name of a job")
        if len(set(jobs)) != len(jobs):
            raise ValueError("job names must be unique")
        return self
