"""``icefab simulate`` with a training job: the iteration table, JSON and plots."""

import json

from typer.testing import CliRunner

from icefabric.cli.app import app

runner = CliRunner()


def test_simulate_training_hetero(tmp_path):
    r = runner.invoke(app, ["simulate", "training-hetero", "-p", "ecmp,ice", "-o",
                            str(tmp_path)], env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.output
    assert "training llama: llama3-8b · tp 8 × pp 2 × dp 4 · 8 micro-batches" in r.output
    for row in ("iteration", "vs ecmp", "exposed dp", "bubble", "busbw dp"):
        assert row in r.output
    doc = json.loads((tmp_path / "result.json").read_text())
    gain = doc["training"]["results"][1]["gain_vs_ecmp"]
    assert f"{gain:+.1%}" in r.output
    for png in ("training_timeline.png", "training_breakdown.png", "link_utilization.png"):
        assert (tmp_path / png).stat().st_size > 10_000
    assert not (tmp_path / "busbw.png").exists()  # no collective jobs to plot


def test_simulate_training_json():
    r = runner.invoke(app, ["simulate", "training-hetero", "-p", "ecmp", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # progress goes to stderr
    assert doc["rows"] == [] and doc["training"]["results"][0]["policy"] == "ecmp"
