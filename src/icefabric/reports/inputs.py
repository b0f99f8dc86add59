"""What ``icefab report`` accepts, recognised by content rather than by name.

* an experiment result (``icefab simulate --json`` / ``--out DIR``'s ``result.json``);
* a traced engine run (``DIR/runs/<policy>.json``): its queue and rate time series are
  attached to the experiment result given before it;
* a sweep point (``SWEEP/points/<key>.json``): its result and the scenario it ran;
* a ``simulate --out`` folder (its ``result.json``, ``runs/`` and ``scenario.yaml``);
* a sweep output folder (has ``sweep.json``): reported as a sweep.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from icefabric.engine.result import SimResult
from icefabric.experiment.runner import ExperimentResult
from icefabric.reports.html import ReportError, ReportInput

#: Provenance a result may carry; shown under "Reproduce" when present.
RECORDED_KEYS = ("version", "commit", "command", "created")


def _experiment(d: dict, source: str) -> ExperimentResult:
    known = set(ExperimentResult.__dataclass_fields__) | {"schema_version", "link_summary"}
    try:
        return ExperimentResult.from_json(json.dumps({k: v for k, v in d.items()
                                                      if k in known}))
    except (TypeError, KeyError) as e:
        raise ReportError(f"{source}: not a readable icefab result ({e})") from None


def _read(path: Path) -> dict:
    try:
        d = json.loads(path.read_text())
    except OSError as e:
        raise ReportError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(d, dict):
        raise ReportError(f"{path}: not an icefab result (a JSON object is expected)")
    return d


def _from_file(path: Path, inputs: list[ReportInput]) -> None:
    d = _read(path)
    if "result" in d and "labels" in d:  # a sweep point
        inputs.append(ReportInput(_experiment(d["result"], str(path)), str(path),
                                  yaml.safe_dump(d["scenario"], sort_keys=False),
                                  recorded={k: d[k] for k in RECORDED_KEYS if k in d}))
    elif "rows" in d and "link_stats" in d:
        inputs.append(ReportInput(_experiment(d, str(path)), str(path),
                                  d.get("scenario_text"),
                                  recorded={k: d[k] for k in RECORDED_KEYS if k in d}))
    elif "makespan_ns" in d:
        if not inputs:
            raise ReportError(f"{path}: an engine run must follow the result it belongs to")
        run = SimResult.from_dict(d)
        inputs[-1].runs[run.policy] = run
    else:
        raise ReportError(f"{path}: not an icefab result, engine run or sweep point")


def load_inputs(paths: list[Path]) -> tuple[list[ReportInput], list[Path]]:
    """Experiment results to report, and sweep folders, from the given paths in order."""
    inputs: list[ReportInput] = []
    sweeps: list[Path] = []
    for p in paths:
        if p.is_dir() and (p / "sweep.json").exists():
            sweeps.append(p)
        elif p.is_dir() and (p / "result.json").exists():
            _from_file(p / "result.json", inputs)
            if (p / "scenario.yaml").exists():
                inputs[-1].scenario_text = (p / "scenario.yaml").read_text()
            for run in sorted((p / "runs").glob("*.json")):
                _from_file(run, inputs)
        elif p.is_dir():
            raise ReportError(f"{p}: holds neither result.json nor sweep.json")
        elif not p.exists():
            raise ReportError(f"no such file: {p}")
        else:
            _from_file(p, inputs)
    return inputs, sweeps
