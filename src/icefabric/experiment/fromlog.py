"""Scenarios from real artefacts: replace a scenario's pools, jobs and sizes with the job a
CCL log (or an nccl-tests output) shows, keeping the scenario's fabric, policies and engine."""

from __future__ import annotations

from pathlib import Path

import yaml

from icefabric.collect.to_job import JobInferenceError, job_from_log, scenario_fragment
from icefabric.scenario.loader import LoadedScenario, ScenarioError, loads


def scenario_from_log(base: LoadedScenario, paths: list[str | Path], *,
                      server: str = "hgx-h100", sizes: list[int] | None = None
                      ) -> tuple[LoadedScenario, dict]:
    """The base scenario with the log-derived job in place of its pools and jobs.

    Returns the new scenario and the job description (with its ``inferred`` values and
    ``warnings``). Raises ScenarioError when the logs do not show a usable job.
    """
    try:
        job = job_from_log([str(p) for p in paths])
    except JobInferenceError as e:
        raise ScenarioError(f"no usable job in {', '.join(map(str, paths))}: {e}") from None
    frag = scenario_fragment(job, server=server)
    data = yaml.safe_load(base.text)
    data["name"] = f"{data['name']}+{job['name']}"
    data["description"] = (f"job {job['name']} ({job['nranks']} ranks on {len(job['hosts'])} "
                           f"hosts, from {', '.join(Path(p).name for p in paths)}) on the fabric "
                           f"of {base.scenario.name}")
    data["pools"] = frag["pools"]
    data["jobs"] = frag["jobs"]
    data.pop("failures", None)
    if sizes is not None:
        data["sizes"] = list(sizes)
    elif "sizes" in frag:
        data["sizes"] = frag["sizes"]
    return loads(yaml.safe_dump(data, sort_keys=False), f"<from-log {Path(paths[0]).name}>"), job
