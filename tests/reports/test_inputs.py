import json

import pytest

from icefabric.reports.html import ReportError
from icefabric.reports.inputs import load_inputs


def _result(tmp_path, engine="flow"):
    from icefabric.experiment.runner import Execution, run_scenario
    from icefabric.scenario.loader import load

    res = run_scenario(load("homog-small"), policies=["ecmp", "ice"], sizes=[1 << 20],
                       engine=engine, how=Execution(trace=engine == "fluid"))
    return res


def test_simulate_out_folder_brings_scenario_and_traced_runs(tmp_path):
    res = _result(tmp_path, "fluid")
    res.to_json(tmp_path / "result.json")
    (tmp_path / "scenario.yaml").write_text("name: x\n")
    (tmp_path / "runs").mkdir()
    res.runs["ice"].to_json(tmp_path / "runs" / "ice.json")
    inputs, sweeps = load_inputs([tmp_path])
    assert sweeps == [] and len(inputs) == 1
    assert inputs[0].scenario_text == "name: x\n"
    assert list(inputs[0].runs) == ["ice"] and inputs[0].runs["ice"].timeseries["t_us"]


def test_sweep_point_carries_its_scenario(tmp_path):
    res = _result(tmp_path)
    point = {"key": "k", "index": 0, "labels": {"a": "1"}, "scenario": {"name": "pt"},
             "result": json.loads(res.to_json()), "version": "0.1.0"}
    (tmp_path / "k.json").write_text(json.dumps(point))
    inputs, _ = load_inputs([tmp_path / "k.json"])
    assert inputs[0].scenario_text == "name: pt\n"
    assert inputs[0].recorded == {"version": "0.1.0"}
    assert inputs[0].result.rows == res.rows


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "a JSON object is expected"),
    ("{oops", "not JSON"),
    ('{"a": 1}', "not an icefab result, engine run or sweep point"),
    ('{"makespan_ns": 1}', "an engine run must follow the result it belongs to"),
    ('{"rows": [], "link_stats": []}', "not a readable icefab result"),
])
def test_unreadable_inputs_say_why(tmp_path, content, message):
    (tmp_path / "x.json").write_text(content)
    with pytest.raises(ReportError, match=message):
        load_inputs([tmp_path / "x.json"])


def test_missing_paths_and_empty_folders(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        load_inputs([tmp_path / "nope.json"])
    with pytest.raises(ReportError, match="holds neither result.json nor sweep.json"):
        load_inputs([tmp_path])
