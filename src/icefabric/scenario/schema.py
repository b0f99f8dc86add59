"""Scenario schema (pydantic): fabric, server pools, placement, jobs, sizes, policies,
engine, failures, seed. Unknown fields are errors, so typos never pass silently."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from icefabric.engine.options import EngineOptions
from icefabric.training.spec import TrainingSpec
from icefabric.units import parse_size


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FabricSpec(_Strict):
    """The network. ``kind`` picks the builder; unused fields of other kinds must be left out."""

    kind: Literal["leaf-spine", "rail-optimized", "fat-tree"] = "leaf-spine"
    servers_per_leaf: int = Field(2, ge=1)
    spines: int | None = Field(None, ge=1, description="leaf-spine: number of spines")
    links_per_spine: int = Field(1, ge=1)
    oversub: float = Field(1.0, gt=0)
    pods: int | None = Field(None, ge=1)
    leaves_per_pod: int | None = Field(None, ge=1)
    aggs_per_pod: int | None = Field(None, ge=1)
    cores: int | None = Field(None, ge=1)
    core_oversub: float = Field(1.0, gt=0)
    separate_pools: bool = True
    placement: Literal["packed", "scattered"] = "packed"
    leaf_switch: str = "tomahawk5-128x400"
    spine_switch: str = "tomahawk5-128x400"
    core_switch: str = "tomahawk5-128x400"
    hash_seeds: Literal["sonic", "random", "zero"] = "sonic"
    hash_profiles: dict[Literal["leaf", "spine", "core"], str] | str | None = Field(
        None,
        description="named switch hash profile per role (one name = every role), from "
        "icefabric.dataplane.ecmp.PROFILES: 'correlated' (every tier reads the same hash "
        "bits), 'independent' (each tier its own bits), or vendor defaults such as "
        "broadcom_rtag7_fboss, spectrum_cumulus, sonic_leaf; overrides hash_seeds and the "
        "switch model's algorithm for the roles it names")
    host_delay_ns: int = Field(500, ge=0)
    fabric_delay_ns: int = Field(500, ge=0)

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

    name: str = Field(pattern=r"^[A-Za-z][\w.]*$")
    server: str
    count: int = Field(ge=1)
    nic_gbps: float | None = Field(None, gt=0, description="override the profile's NIC speed")
    hosts: list[str] | None = Field(None, description="server names (e.g. the hostnames a "
                                    "CCL log shows), one per server; default <name>-<i>")

    @model_validator(mode="after")
    def _hosts(self):
        if self.hosts is not None and len(self.hosts) != self.count:
            raise ValueError(f"hosts lists {len(self.hosts)} names for count {self.count}")
        return self


class ScenarioCollective(_Strict):
    kind: Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"]
    algorithm: str | None = None


class ScenarioJob(_Strict):
    """A job: its servers (names, or whole pools), ranks per server, library and
    collectives. ``library: auto`` uses the servers' library, ``cross`` when pools of
    different libraries are mixed."""

    name: str = Field(pattern=r"^[A-Za-z][\w.-]*$")
    servers: list[str] | None = None
    pools: list[str] | None = None
    ranks_per_server: int | None = Field(None, ge=1)
    library: Literal["auto", "nccl", "rccl", "hccl", "cross"] = "auto"
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
    nccl_env: dict[str, int] = Field(
        default_factory=dict,
        description="NCCL_* variables the job sets: NCCL_IB_QPS_PER_CONNECTION, "
        "NCCL_IB_SPLIT_DATA_ON_QPS, NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS")
    step_overhead_ns: int = Field(1000, ge=0)
    collectives: list[ScenarioCollective] = Field(min_length=1)
    rings: list[list[int]] | None = Field(
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
    (and up again at ``until_us`` if given)."""

    at_us: float = Field(ge=0)
    link: tuple[str, str]
    until_us: float | None = None


class SizesSpec(_Strict):
    min: int | str = Field("1MiB", validate_default=True)
    max: int | str = Field("1GiB", validate_default=True)
    factor: int = Field(2, ge=2)

    @field_validator("min", "max")
    @classmethod
    def _size(cls, v):
        return parse_size(v)

    def values(self) -> list[int]:
        lo, hi = int(self.min), int(self.max)
        if lo > hi:
            raise ValueError("sizes.min must not exceed sizes.max")
        out = [lo]
        while out[-1] * self.factor <= hi:
            out.append(out[-1] * self.factor)
        return out


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = 0
    draws: int | None = Field(
        None, ge=1, le=10_000,
        description="draws of QP numbers and switch hash seeds per randomised policy (the "
        "ECMP family); default icefabric.experiment.draws.DEFAULT_DRAWS; `icefab simulate "
        "--draws` wins")
    fabric: FabricSpec
    pools: list[PoolSpec] = Field(min_length=1)
    jobs: list[ScenarioJob] = Field(default_factory=list)
    training: TrainingSpec | None = Field(
        None, description="a training job: model, parallelism plan and where it runs; "
        "simulated as one iteration per policy (see docs/training.md)")
    sizes: SizesSpec | list[int | str] = Field(default_factory=SizesSpec)
    policies: list[str] = Field(default_factory=lambda: ["ecmp", "ecmp-multiqp", "spray",
                                                         "ideal"])
    policy_options: dict[str, dict] = Field(default_factory=dict)
    engine: Literal["flow", "fluid"] = "flow"
    engine_options: EngineOptions = Field(
        default_factory=EngineOptions,
        description="fluid-engine models and numerics (cc, dcqcn, red, pfc, endside, ...); "
        "see docs/fluid-engine.md")
    failures: list[FailureSpec] = Field(default_factory=list)

    def run_options(self, engine: str | None = None) -> EngineOptions:
        """The engine options of a run: ``engine`` (default: the scenario's) with the
        scenario's ``engine_options``."""
        return self.engine_options.model_copy(update={"engine": engine or self.engine})

    @field_validator("engine_options", mode="before")
    @classmethod
    def _engine_once(cls, v):
        if isinstance(v, dict) and "engine" in v:
            raise ValueError("set the engine with the top-level key 'engine'")
        return v

    def size_list(self) -> list[int]:
        if isinstance(self.sizes, SizesSpec):
            return self.sizes.values()
        return [parse_size(s) for s in self.sizes]

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
        if isinstance(self.sizes, list):
            for s in self.sizes:
                parse_size(s)
        return self
