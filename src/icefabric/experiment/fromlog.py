"""Scenarios from real artefacts: replace a scenario's pools, jobs and sizes with the job a
CCL log (or an nccl-tests output) shows, keeping the scenario's fabric, policies and engine.

The job keeps what the log showed: its hosts, ranks per host, library, channel count, QPs
per connection and the ring order of every channel (``rings``), so the CCL models run the
rings the library built instead of re-inventing them. The scenario is built as a model (no
text round trip); its YAML (``LoadedScenario.text``) reproduces the run.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from icefabric.collect.to_job import JobInferenceError, job_from_log, scenario_fragment
from icefabric.scenario.loader import LoadedScenario, ScenarioError
from icefabric.scenario.schema import Scenario


def scenario_from_log(base: LoadedScenario, paths: list[str | Path], *,
                      server: str = "hgx-h100", sizes: list[int] | None = None
                      ) -> tuple[LoadedScenario, dict]:
    """The base scenario with the log-derived job in place of its pools and jobs.

    Returns the new scenario and the job description (with its ``inferred`` values and
    ``warnings``). Raises :class:`~icefabric.collect.errors.CollectError` when the logs do
    not show a usable job.
    """
    try:
        job = job_from_log([str(p) for p in paths])
    except JobInferenceError as e:
        raise JobInferenceError(f"no usable job in {', '.join(map(str, paths))}: {e}") from None
    frag = scenario_fragment(job, server=server)
    rings = [job["rings"][c] for c in sorted(job["rings"])]
    if rings:
        frag["jobs"][0]["rings"] = rings
    if not _blockwise(job):
        job["warnings"] = [
            "the log places ranks out of host-by-host order; the replay places rank r on "
            f"host r // {job['gpus_per_host']}, device r % {job['gpus_per_host']}",
            *job.get("warnings", [])]
    # the scenario's own fields (engine_options.engine is the top-level 'engine')
    plain = {"engine_options": {"engine"}}
    data = base.scenario.model_dump(mode="json", exclude={"failures": True, **plain})
    data.update(name=f"{data['name']}+{job['name']}",
                description=(f"job {job['name']} ({job['nranks']} ranks on {len(job['hosts'])} "
                             f"hosts, from {', '.join(Path(p).name for p in paths)}) on the "
                             f"fabric of {base.scenario.name}"),
                pools=frag["pools"], jobs=frag["jobs"])
    if sizes is not None:
        data["sizes"] = list(sizes)
    elif "sizes" in frag:
        data["sizes"] = frag["sizes"]
    source = f"<from-log {Path(paths[0]).name}>"
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"the job of the log does not fit: {e.errors()[0]['msg']}",
                            source) from None
    text = yaml.safe_dump(scn.model_dump(mode="json", exclude_defaults=True, exclude=plain),
                          sort_keys=False, default_flow_style=None)
    return LoadedScenario(scn, source, {}, text), job


def _blockwise(job: dict) -> bool:
    """Whether rank r sits on host r // g, device r % g (how a scenario places ranks)."""
    g = job["gpus_per_host"]
    return all(h == r // g and d == r % g for r, (h, d) in
               enumerate(zip(job["rank_host"], job["rank_device"], strict=True)))
