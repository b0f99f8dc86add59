"""Policy interface and registry.

A policy is a named strategy that decides, for every QP of a workload, its fabric path(s),
source port and backup port (ICE's pacing rates follow from its paths:
:mod:`icefabric.pipeline.plans`). Policies are compared on the same workload and engine.
``ice`` plugs in here like the baselines.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.control.hashing import fabric_hash_configs
from icefabric.control.plan import PathPlan
from icefabric.dataplane.ecmp import HashConfig
from icefabric.errors import IceFabricError
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing


class PolicyError(IceFabricError, ValueError):
    """Base of the policy layer's errors: an unknown policy or an option it rejects."""


class UnknownOptionError(PolicyError):
    """Options a policy does not take (``options``: their names)."""

    def __init__(self, message: str, options: list[str]):
        super().__init__(message)
        self.options = options


@dataclass
class PlanContext:
    """Everything a policy may look at."""

    fabric: Fabric
    workload: Workload
    routing: Routing
    seed: int = 0
    hash_configs: dict[int, HashConfig] = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    @classmethod
    def create(cls, fabric: Fabric, workload: Workload, *, seed: int = 0, down_links=(),
               **options) -> PlanContext:
        return cls(fabric, workload, Routing(fabric, down_links), seed,
                   fabric_hash_configs(fabric), options)

    def after_failure(self, down_links) -> PlanContext:
        return PlanContext(self.fabric, self.workload, Routing(self.fabric, down_links),
                           self.seed, self.hash_configs, self.options)


class Policy(ABC):
    """Base class of named strategies."""

    name: str = ""
    description: str = ""
    #: time from a link failure until this policy's traffic uses working paths again
    reroute_delay_ns: int = 0
    #: pace every QP at its share of the global max-min rate before traffic starts (ICE
    #: active congestion control; the rates are computed from the plan's paths,
    #: :func:`icefabric.pipeline.plans.qp_rates`)
    proactive_rates: bool = False
    #: engine this policy must run on regardless of the scenario (``ideal`` is a bound:
    #: non-blocking and perfectly fair, so it always uses the max-min flow engine)
    engine_override: str | None = None
    #: whether the outcome depends on the QP numbers and switch hash seeds (drawn anew at
    #: every communicator creation / switch boot): such a policy runs over N draws
    #: (:mod:`icefabric.experiment.draws`). Its plan must depend on the workload's QPs
    #: only, not on message sizes, so one plan per draw serves every size.
    randomised: bool = False

    def qps_per_connection(self, default: int, library: str = "nccl") -> int:
        """QPs per connection this policy wants a communicator of ``library`` built with,
        given the communicator's own setting ``default`` (a :data:`~icefabric.ccl.
        communicator.QpsRule`)."""
        return default

    @abstractmethod
    def plan(self, ctx: PlanContext) -> PathPlan:
        """Paths, source ports (and backup ports) for every QP of ``ctx.workload``."""

    def replan(self, ctx: PlanContext, previous: PathPlan) -> PathPlan:
        """Plan after links failed (``ctx.routing`` excludes them). Must keep the route
        structure of ``previous`` (same ``route_qp`` and weights) so the engine can swap
        route link lists in place."""
        return self.plan(ctx)

    def extend(self, ctx: PlanContext, previous: PathPlan, kept: np.ndarray) -> PathPlan:
        """Plan a changed workload under the same links as ``previous``: ``kept[q]`` is the
        index in ``previous`` of QP ``q`` of ``ctx.workload`` (-1: a new QP). A policy that
        sets ports keeps the kept QPs' paths and ports, so a job starting or ending does
        not move other jobs' QPs; the default plans afresh (a policy whose ports are the
        kernel's derives them from the QP numbers: they stay as they were)."""
        return self.plan(ctx)

    def ideal_fabric(self, fabric: Fabric) -> Fabric:
        """The fabric the policy runs on (``ideal`` replaces it by a non-blocking one)."""
        return fabric


_REGISTRY: dict[str, type[Policy]] = {}


def register_policy(name: str):
    def deco(cls):
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return deco


def available_policies() -> dict[str, str]:
    _load_builtin()
    return {k: v.description for k, v in sorted(_REGISTRY.items())}


def get_policy(name: str, **options) -> Policy:
    _load_builtin()
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise PolicyError(f"unknown policy {name!r}; available: {sorted(_REGISTRY)}") from None
    known = option_names(cls)
    unknown = sorted(set(options) - known)
    if unknown:
        raise UnknownOptionError(
            f"policy {name!r} has no option {', '.join(map(repr, unknown))}; "
            f"its options: {', '.join(sorted(known)) or 'none'}", unknown)
    return cls(**options)


def option_names(cls: type[Policy]) -> set[str]:
    """Keyword options of a policy class: its ``__init__`` parameters and, where it
    forwards ``**kw``, those of the classes it forwards to (along the MRO)."""
    names: set[str] = set()
    for k in cls.__mro__:
        init = k.__dict__.get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]  # without self
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def _load_builtin():
    import importlib

    for mod in ("baselines", "ice"):
        try:
            importlib.import_module(f"icefabric.policies.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"icefabric.policies.{mod}":
                raise
