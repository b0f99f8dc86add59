"""The HTML report of a training-only scenario: the iteration table from the result's
``training`` report, its figures, and a reproduce command without message sizes."""

from icefabric.experiment.runner import run_scenario
from icefabric.reports.html import ReportInput, render, reproduce_command
from icefabric.scenario.loader import load


def test_training_report(tmp_path):
    ls = load("training-hetero")
    res = run_scenario(ls, policies=["ecmp", "ice"])
    page = render([ReportInput(res, "test", ls.text, res.runs)], tmp_path / "r.html")
    html = page.read_text()
    assert "training llama: llama3-8b · tp 8 × pp 2 × dp 4" in html
    ice = next(r for r in res.training["results"] if r["policy"] == "ice")
    assert f"{ice['iteration_ms']:.1f}" in html and f"{ice['gain_vs_ecmp']:+.1%}" in html
    assert "training timeline" in html and "training breakdown" in html
    assert "Summary at" not in html  # no collective jobs, so no busbw tables
    cmd = reproduce_command(res)
    assert "--sizes" not in cmd and cmd.startswith("icefab simulate training-hetero")
