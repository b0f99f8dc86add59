"""The spine every front end runs through: jobs -> workload -> plan -> engine problem -> run.

``icefab simulate`` (``experiment.runner``), the controller, the digital twin, ``icefab
plan`` and the validation call these, and nothing else assembles the steps:

* :mod:`.jobs` — :class:`JobSpec` from a scenario, from agents' reports or from a log's
  scenario; :func:`build_workload`;
* :mod:`.plans` — :func:`plan` -> :class:`Plan` (per QP: source port, backup port, pacing
  rate, routes), re-plans at link events;
* :mod:`.problem` — the engines' :class:`~icefabric.engine.problem.SimProblem` of a plan;
* :mod:`.simulation` — :func:`simulate` a plan with :class:`EngineOptions`;
* :mod:`.recipe` — :class:`RunSpec`: one policy's run of a scenario (the fabric it runs on,
  its QPs per connection, the failures it sees, its engine options), which the runner, the
  training iteration, the draws and the twin hand to the steps above.

A plan as the per-host wire plans agents apply, and back, is :mod:`icefabric.wire`.
"""

from icefabric.engine.options import EngineOptions
from icefabric.pipeline.jobs import JobError, JobSpec, PipelineError, build_workload
from icefabric.pipeline.plans import Plan, plan, scenario_policy, with_link_events
from icefabric.pipeline.recipe import RunSpec
from icefabric.pipeline.simulation import simulate

__all__ = ["EngineOptions", "JobError", "JobSpec", "PipelineError", "Plan", "RunSpec",
           "build_workload", "plan", "scenario_policy", "simulate", "with_link_events"]
