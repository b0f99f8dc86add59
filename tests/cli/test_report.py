"""``icefab report``, ``icefab simulate --report`` and ``icefab sweep`` from the command line."""

import json

import yaml
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.scenario.loader import builtin_text

runner = CliRunner()


def test_simulate_report_and_report_from_its_out_folder(tmp_path):
    r = runner.invoke(app, ["simulate", "homog-small", "--engine", "fluid", "--sizes", "1M",
                            "-p", "ecmp,ice", "--out", str(tmp_path / "o"),
                            "--report", str(tmp_path / "a.html")])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert f"report {tmp_path / 'a.html'}" in flat
    # progress on stderr while the figures are drawn: fabric, busbw, heat map, two series
    assert f"drawing the report {tmp_path / 'a.html'}: 0/5 next fabric;" in flat
    assert f"drawing the report {tmp_path / 'a.html'}: 5/5 done in" in flat
    direct = (tmp_path / "a.html").read_text()
    assert "simulate homog-small --engine fluid" in direct  # the command that made it
    assert (tmp_path / "o" / "scenario.yaml").read_text() == builtin_text("homog-small")
    r = runner.invoke(app, ["report", str(tmp_path / "o"), "-o", str(tmp_path / "b.html")])
    assert r.exit_code == 0, r.output
    assert "report written to" in r.output
    assert f"drawing the report {tmp_path / 'b.html'}: 5/5 done in" in " ".join(r.output.split())
    later = (tmp_path / "b.html").read_text()
    # fabric, busbw, heat map, and the queue/rate series of both fluid runs
    assert direct.count("<img") == later.count("<img") == 5
    assert "icefab simulate homog-small --engine fluid --policies ecmp,ice --sizes 1MiB" in later


def test_report_of_several_results_has_one_section_each(tmp_path):
    for name in ("homog-small", "pfc-victim"):
        r = runner.invoke(app, ["simulate", name, "--sizes", "1M", "-p", "ecmp,ice",
                                "--engine", "flow", "--json"])
        assert r.exit_code == 0, r.output
        (tmp_path / f"{name}.json").write_text(r.stdout)
    r = runner.invoke(app, ["report", str(tmp_path / "homog-small.json"),
                            str(tmp_path / "pfc-victim.json"), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "r.html").read_text()
    assert 'id="result-0"' in page and 'id="result-1"' in page and "<nav>" in page


def test_report_errors_are_one_line(tmp_path):
    r = runner.invoke(app, ["report", str(tmp_path / "nope.json")])
    assert r.exit_code == 2
    assert r.output.strip() == f"error: no such file: {tmp_path / 'nope.json'}"


def test_sweep_command_writes_points_table_and_report(tmp_path):
    sweep = {"base": yaml.safe_load(builtin_text("homog-small")),
             "set": {"sizes": ["4MiB"], "policies": ["ecmp", "ice"]},
             "axes": {"fabric.links_per_spine": [2, 4]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    r = runner.invoke(app, ["sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"),
                            "-j", "1", "--report", str(tmp_path / "s.html")])
    assert r.exit_code == 0, r.output
    assert "sweep s: 2 points on 1 local processes" in r.output
    assert "[2/2] fabric.links_per_spine=" in r.output  # plain progress when not a TTY
    assert "2 points run, 0 reused, 0 failed" in r.output
    assert len(list((tmp_path / "o" / "points").glob("*.json"))) == 2
    assert json.loads((tmp_path / "o" / "sweep.json").read_text())["name"] == "s"
    assert 'id="sweep-summary"' in (tmp_path / "s.html").read_text()
    r = runner.invoke(app, ["report", str(tmp_path / "o"), "-o", str(tmp_path / "t.html")])
    assert r.exit_code == 0 and (tmp_path / "t.html").exists()


def test_sweep_errors_are_one_line(tmp_path):
    r = runner.invoke(app, ["sweep", "no-such-sweep", "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert "error: no sweep file or built-in sweep named 'no-such-sweep'; built-ins: " \
           "oversub-nicmix" in r.output


def test_unwritable_report_path_is_one_line(tmp_path):
    r = runner.invoke(app, ["simulate", "homog-small", "--sizes", "1M", "-p", "ecmp",
                            "--report", str(tmp_path / "missing-dir" / "r.html")])
    assert r.exit_code == 2
    assert f"error: cannot write {tmp_path / 'missing-dir' / 'r.html'}: No such file or " \
           "directory" in " ".join(r.output.split())
