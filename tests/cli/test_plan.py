import json

from scipy.optimize import OptimizeResult
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.control import planning
from icefabric.scenario.loader import builtin_text

runner = CliRunner()


def test_plan_json():
    r = runner.invoke(app, ["plan", "suite-ring-homog", "--json", "--size", "16M"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["policy"] == "ice" and doc["n_qps"] > 0
    assert doc["meta"]["verified_frac"] == 1.0
    qp = doc["jobs"]["llm"][0]
    assert {"path", "sport", "backup_sport", "rate_gbps"} <= set(qp)
    assert all(0 < x["util"] <= 1.0 + 1e-9 for x in doc["links"])


def test_plan_table_and_probe_mode():
    r = runner.invoke(app, ["plan", "hetero-default", "--size", "1M", "--sport-mode", "probe",
                            "--max-qps", "2"])
    assert r.exit_code == 0, r.output
    assert "predicted fabric link load" in r.output and "job gpt" in r.output


def test_plan_bad_scenario():
    r = runner.invoke(app, ["plan", "no-such-scenario"])
    assert r.exit_code != 0


def test_plan_milp_without_solution_is_one_line(monkeypatch, tmp_path):
    """The MILP planner ending without a solution (HiGHS at its time limit) stops the
    command with one line that gives the solver's reason and the way out, not a traceback."""
    stopped = OptimizeResult(x=None, status=1, message="Time limit reached.")
    monkeypatch.setattr(planning._Milp, "solve", lambda self, time_limit: stopped)
    scn = tmp_path / "milp.yaml"
    scn.write_text(builtin_text("suite-ring-homog") + "policy_options: {ice: {method: milp}}\n")
    r = runner.invoke(app, ["plan", str(scn), "--size", "16M"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: the MILP planner found no path assignment (Time limit reached.); use the "
        "greedy or auto method instead"]
