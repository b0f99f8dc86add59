"""The HTML report in a real headless Chromium: it loads offline with no console error, its
images decode, and its tables say exactly what the result JSON says."""

import json

import pytest
import yaml

from icefabric.experiment.calibration import load_outcomes
from icefabric.experiment.runner import Execution, ExperimentResult, run_scenario
from icefabric.reports.html import ReportInput, render, render_sweep
from icefabric.scenario.loader import builtin_text, loads
from icefabric.sweeps.run import run_sweep
from icefabric.sweeps.spec import parse_sweep
from icefabric.units import format_size
from tests.reports.chromium import open_page


@pytest.fixture(scope="module")
def fluid_run():
    ls = loads(builtin_text("homog-small"))
    res = run_scenario(ls, policies=["ecmp", "ecmp-tuned", "spray", "ice", "ideal"],
                       sizes=[1 << 20, 4 << 20], engine="fluid", how=Execution(trace=True))
    return ls, res


def _pct(text: str) -> float:
    return float(text.rstrip("%")) / 100


def _check_offline_and_clean(page):
    assert page.errors == []
    assert page.title.startswith("ice-fabric")
    assert [u for u in page.requests if not u.startswith("data:")] == [page.url]
    assert page.images_ok and all(page.images_ok)


def test_report_opens_in_chromium_and_its_tables_equal_the_json(fluid_run, tmp_path):
    ls, res = fluid_run
    path = render([ReportInput(res, "test", ls.text, res.runs)], tmp_path / "r.html",
                  command="icefab simulate homog-small --report r.html")
    doc = json.loads(res.to_json())  # the JSON the tables came from
    page = open_page(path, tmp_path / "profile")
    _check_offline_and_clean(page)
    # fabric + busbw + heat map + one time-series figure per traced policy
    assert len(page.images_ok) == 3 + len([r for r in res.runs.values()
                                           if r.timeseries.get("t_us")])
    largest = {(r["job"], r["collective"], r["policy"]): r for r in doc["rows"]
               if r["size_bytes"] == doc["sizes"][-1]}
    summary = page.tables["summary-0"]
    assert summary["head"][3:] == ["busbw (GB/s)", "of ideal", "vs ecmp-tuned (deployed)",
                                   "vs ecmp (NCCL default)"]
    assert "gains-0" not in page.tables  # the gains are the summary's columns, once
    shown = summary["rows"]
    assert sorted(tuple(c[:3]) for c in shown) == sorted(largest)
    for cells in shown:
        r = largest[tuple(cells[:3])]
        assert cells[3] == f"{r['busbw_GBps']:.1f}"  # one decimal
        assert _pct(cells[4]) == pytest.approx(r["frac_of_ideal"], abs=5e-4)
        for cell, base, key in ((cells[5], "ecmp-tuned", "gain_vs_deployed"),
                                (cells[6], "ecmp", "gain_vs_ecmp")):
            if r["policy"] == base:
                assert cell == "–"
            else:
                assert _pct(cell) == pytest.approx(r[key], abs=5e-4)
    busbw = page.tables["busbw-0-0"]
    assert busbw["head"] == ["size"] + doc["policies"]
    for cells, size in zip(busbw["rows"], doc["sizes"]):
        want = {r["policy"]: r["busbw_GBps"] for r in doc["rows"] if r["size_bytes"] == size}
        assert cells[0] == format_size(size)
        assert cells[1:] == [f"{want[p]:.1f}" for p in doc["policies"]]
    cong = page.tables["congestion-0"]["rows"]
    assert [c[0] for c in cong] == [c["policy"] for c in doc["congestion"]]
    assert [float(c[4]) for c in cong] == [c["max_queue_KB"] for c in doc["congestion"]]
    plan = page.tables["plan-0"]["rows"]
    assert [(c[0], int(c[1]), int(c[4]), float(c[5])) for c in plan] == [
        (s["policy"], s["uplinks"], s["idle_links"], s["max_qps_on_link"])
        for s in doc["link_summary"]]
    facts = dict(page.tables["facts-0"]["rows"])
    assert facts["scenario"] == "homog-small" and facts["engine"] == "fluid"
    # the headline: ICE's gain over the deployed ECMP first, NCCL's default beside it
    head = page.blocks["headline"]
    ice = largest[("job0", "all_reduce", "ice")]
    assert (f"ICE {ice['busbw_GBps']:.1f} GB/s, {ice['gain_vs_deployed'] * 100:+.1f}% over "
            f"ecmp-tuned (ECMP as deployed), {ice['gain_vs_ecmp'] * 100:+.1f}% over ecmp "
            "(NCCL's default)") in head
    assert f"at {format_size(doc['sizes'][-1])}" in head and "fluid engine" in head
    # the trust note: from the kept calibration run, stated once at the top
    outcomes = load_outcomes()
    tuned = [o.case.measured / o.p50 for o in outcomes if o.case.policy == "ecmp-tuned"]
    assert page.blocks["trust"].startswith("trust: the model's ECMP against")
    assert f"measured = {min(tuned):.2f}-{max(tuned):.2f}x our median" in page.blocks["trust"]


def test_ranges_appear_when_rows_carry_quantiles(fluid_run, tmp_path):
    ls, res = fluid_run
    d = json.loads(res.to_json())
    for r in d["rows"]:
        r.update(busbw_GBps_p10=r["busbw_GBps"] - 1, busbw_GBps_p90=r["busbw_GBps"] + 2,
                 gain_vs_ecmp_p10=-0.25, gain_vs_ecmp_p90=0.5)
    drawn = ExperimentResult.from_json(json.dumps(d))
    text = render([ReportInput(drawn, "test")], tmp_path / "r.html").read_text()
    r = d["rows"][-1]
    assert f"{r['busbw_GBps']:.1f} ({r['busbw_GBps'] - 1:.1f} – {r['busbw_GBps'] + 2:.1f})" in text
    assert "(-25.0% – +50.0%)" in text


def test_a_drawn_run_shows_its_ranges_and_the_box_plot(tmp_path):
    ls = loads(builtin_text("homog-small"))
    res = run_scenario(ls, policies=["ecmp", "ice"], sizes=[1 << 24], draws=5)
    text = render([ReportInput(res, "test", ls.text)], tmp_path / "r.html").read_text()
    r = next(r for r in res.rows if r["policy"] == "ecmp")
    assert f"{r['busbw_GBps']:.1f} ({r['busbw_GBps_p10']:.1f} – {r['busbw_GBps_p90']:.1f})" in text
    assert "busbw over the ECMP draws" in text and "over 5 draws" in text


def test_sweep_report_in_chromium_shows_medians_over_seeds(tmp_path):
    base = yaml.safe_load(builtin_text("homog-small"))
    spec = parse_sweep({"name": "t", "base": base,
                        "set": {"sizes": ["16MiB"], "policies": ["ecmp", "spray", "ice"]},
                        "axes": {"fabric.links_per_spine": [2, 4]}, "seeds": [1, 2, 3]})
    run_sweep(spec, tmp_path / "sw", jobs=1)
    path = render_sweep(tmp_path / "sw", tmp_path / "s.html")
    page = open_page(path, tmp_path / "profile")
    _check_offline_and_clean(page)
    assert len(page.images_ok) == 1  # one (job, collective, size) group
    recs = [json.loads(p.read_text()) for p in (tmp_path / "sw" / "points").glob("*.json")]
    for cells in page.tables["sweep-summary"]["rows"]:
        lps, policy = cells[0], cells[1]
        gains = sorted(r["gain_vs_ecmp"] for rec in recs for r in rec["result"]["rows"]
                       if rec["labels"]["fabric.links_per_spine"] == lps
                       and r["policy"] == policy)
        assert int(cells[5]) == len(gains) == 3
        assert _pct(cells[6]) == pytest.approx(gains[1], abs=5e-4)  # median of three
        assert gains[0] - 5e-4 <= _pct(cells[7]) <= _pct(cells[8]) <= gains[2] + 5e-4
    busbw = page.tables["sweep-busbw"]
    assert busbw["head"][-2:] == ["busbw (GB/s)", "vs ecmp"]
    assert {c[1] for c in busbw["rows"]} == {"ecmp", "spray", "ice"}
    for cells in busbw["rows"]:
        lps, policy = cells[0], cells[1]
        bws = sorted(r["busbw_GBps"] for rec in recs for r in rec["result"]["rows"]
                     if rec["labels"]["fabric.links_per_spine"] == lps
                     and r["policy"] == policy)
        assert cells[5].startswith(f"{bws[1]:.1f} (")  # the absolute median over seeds
        assert (cells[6] == "–") == (policy == "ecmp")
    assert "trust: " in page.blocks["trust"]
