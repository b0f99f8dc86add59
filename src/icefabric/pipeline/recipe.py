"""A run recipe: one policy's run of a scenario, as every front end hands it to the spine.

``icefab simulate`` and ``icefab plan`` (:mod:`icefabric.experiment.runner`), the training
iteration, the ECMP draws, calibration and sweeps (through the runner) and the digital
twin's in-process reference build a :class:`RunSpec` and ask it for the workload, the plan
and the run. The policy's rules for a run are applied here and nowhere else:

* the fabric it runs on (:meth:`~icefabric.policies.base.Policy.ideal_fabric`: ``ideal``
  runs on the non-blocking twin of the scenario's fabric);
* the QPs per connection it builds communicators with
  (:meth:`~icefabric.policies.base.Policy.qps_per_connection`, applied by
  :meth:`~icefabric.ccl.communicator.Communicator.under`);
* the scenario's link failures happen on the real fabric only (not on ``ideal``'s twin),
  as link events the policy re-plans after;
* the engine options (:func:`~icefabric.pipeline.simulation.run_options`: the policy's
  engine override, the scenario's or the caller's engine, tracing).

Pacing is part of every plan (:func:`~icefabric.pipeline.plans.planned`).

The controller plans without a recipe: it has no scenario (its jobs come from the agents'
reports with the QPs the hosts created, and its link state is what was reported down), so
it calls :func:`~icefabric.pipeline.plans.plan` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from icefabric.ccl.communicator import QpsRule
from icefabric.ccl.workload import Workload
from icefabric.control.plan import PathPlan
from icefabric.engine.options import EngineOptions
from icefabric.engine.result import SimResult
from icefabric.pipeline.plans import (
    LinkChange,
    Plan,
    ScenarioWorkload,
    plan,
    planned,
    scenario_link_changes,
    scenario_policy,
    scenario_workload,
    with_link_events,
)
from icefabric.pipeline.simulation import run_options, simulate
from icefabric.policies.base import Policy
from icefabric.scenario.build import build_training
from icefabric.scenario.loader import LoadedScenario
from icefabric.topology.model import Fabric
from icefabric.training.tasks import TrainingWorkload


@dataclass(frozen=True, eq=False)
class RunSpec:
    """One policy's run of a scenario.

    Attributes
    ----------
    scenario : LoadedScenario — jobs, training job, failures, seed, engine and engine
        options (errors point into its file).
    fabric : Fabric — the scenario's fabric (:func:`~icefabric.scenario.build.build_fabric`);
        the policy may run on another (:attr:`run_fabric`).
    policy : Policy — with the scenario's ``policy_options`` (:meth:`of`).
    engine : str, optional — ``flow`` or ``fluid`` instead of the scenario's.
    trace : bool — record fluid-engine queues and rates for plots.
    failures : bool — re-plan at the scenario's link failures (``icefab plan`` shows the
        plan before any).
    """

    scenario: LoadedScenario
    fabric: Fabric
    policy: Policy
    engine: str | None = None
    trace: bool = False
    failures: bool = True

    @classmethod
    def of(cls, ls: LoadedScenario, fabric: Fabric, policy: str | Policy, **kw) -> RunSpec:
        """The recipe of policy ``policy`` (a name takes the scenario's options for it)."""
        pol = scenario_policy(ls, policy) if isinstance(policy, str) else policy
        return cls(ls, fabric, pol, **kw)

    @property
    def seed(self) -> int:
        return self.scenario.scenario.seed

    @cached_property
    def run_fabric(self) -> Fabric:
        """The fabric the policy runs on (``ideal``: the non-blocking twin)."""
        return self.policy.ideal_fabric(self.fabric)

    @property
    def qps_rule(self) -> QpsRule:
        """The QPs per connection the policy builds communicators with."""
        self.run_fabric  # noqa: B018 — ICE's ``qps: auto`` sizes its split from that fabric
        return self.policy.qps_per_connection

    @cached_property
    def link_changes(self) -> tuple[LinkChange, ...]:
        """The scenario's link failures and recoveries the policy re-plans at: none on a
        fabric other than the scenario's (``ideal``'s twin has none), none without
        :attr:`failures`."""
        if not (self.failures and self.scenario.scenario.failures
                and self.run_fabric is self.fabric):
            return ()
        return tuple(scenario_link_changes(self.scenario, self.fabric))

    @cached_property
    def options(self) -> EngineOptions:
        """The engine options of the run."""
        scn = self.scenario.scenario
        return run_options(self.policy, scn.engine_options, engine=self.engine or scn.engine,
                           trace=self.trace)

    @property
    def batchable(self) -> bool:
        """Whether plans of this run (ECMP draws) can run together in the batched flow
        engine (:func:`~icefabric.pipeline.simulation.simulate_batch`: no link events)."""
        return self.options.engine == "flow" and not self.link_changes

    def workload(self, size_bytes: int) -> ScenarioWorkload:
        """The scenario's jobs at ``size_bytes`` as the policy runs them, on its fabric."""
        return scenario_workload(self.scenario, self.run_fabric, size_bytes, self.qps_rule)

    def training(self) -> TrainingWorkload:
        """One iteration of the scenario's training job as the policy runs it."""
        return build_training(self.scenario, self.run_fabric, qps_rule=self.qps_rule)

    def plan(self, workload: Workload, *, fabric: Fabric | None = None,
             seed: int | None = None) -> Plan:
        """The policy's plan of ``workload`` on its fabric, with its re-plans at the link
        changes. ``fabric`` and ``seed`` replace the run's for one ECMP draw (the same
        fabric with other switch hash seeds; :mod:`icefabric.experiment.draws`)."""
        p = plan(fabric or self.run_fabric, workload, self.policy,
                 seed=self.seed if seed is None else seed)
        return self.with_failures(p)

    def planned(self, paths: PathPlan, workload: Workload, fabric: Fabric, seed: int
                ) -> Plan:
        """The plan of paths the policy made in bulk (every ECMP draw in one walk), as
        :meth:`plan` would give it."""
        return self.with_failures(planned(fabric, workload, self.policy, paths, seed))

    def with_failures(self, p: Plan) -> Plan:
        """``p`` with the policy's re-plans at the run's :attr:`link_changes`."""
        return with_link_events(p, self.link_changes) if self.link_changes else p

    def size_plan(self, size_bytes: int) -> Plan:
        """The plan of the scenario's jobs at ``size_bytes``."""
        return self.plan(self.workload(size_bytes).workload)

    def simulate(self, p: Plan) -> SimResult:
        """Run ``p`` with the run's engine options."""
        return simulate(p, self.options, scenario=self.scenario.scenario.name)
