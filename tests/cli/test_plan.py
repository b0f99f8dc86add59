import json

from typer.testing import CliRunner

from icefabric.cli.app import app

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
