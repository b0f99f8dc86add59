"""A scenario's training job: one iteration per policy, its breakdown and gains; errors
that point into the scenario file."""

import pytest

from icefabric.experiment.runner import ExperimentResult, run_scenario
from icefabric.scenario.loader import ScenarioError, load, loads


@pytest.fixture(scope="module")
def hetero_result():
    return run_scenario(load("training-hetero"), policies=["ecmp", "ice"])


def test_training_hetero_reports_iteration_time_per_policy(hetero_result):
    tr = hetero_result.training
    s = tr["summary"]
    assert (s["tp"], s["pp"], s["dp"]) == (8, 2, 4)
    assert [st["accelerator"] for st in s["stages"]] == ["H100 SXM", "Ascend 910B"]
    by = {r["policy"]: r for r in tr["results"]}
    e, i = by["ecmp"], by["ice"]
    assert i["iteration_ms"] < e["iteration_ms"]
    assert i["gain_vs_ecmp"] == pytest.approx(e["iteration_ms"] / i["iteration_ms"] - 1,
                                              abs=1e-4)
    # the gain comes from the network groups: same compute, less exposed communication
    assert i["breakdown"]["compute_ms"] == pytest.approx(e["breakdown"]["compute_ms"])
    assert i["breakdown"]["exposed_ms"]["dp"] < e["breakdown"]["exposed_ms"]["dp"]
    assert i["collectives"]["dp"]["busbw_GBps"] > e["collectives"]["dp"]["busbw_GBps"]
    for r in tr["results"]:
        b = r["breakdown"]
        assert b["compute_ms"] + b["exposed_total_ms"] + b["bubble_ms"] == pytest.approx(
            r["iteration_ms"], rel=1e-4)
        assert len(r["stages"]) == 2 and 0 < r["mfu"] < 1
    tl = tr["timeline"]["ice"]
    assert tl["devices"] == ["s0/d0", "s1/d0"]
    assert {k for _, k, _, _ in tl["tasks"]} >= {"forward", "backward", "tp", "pp", "dp"}
    # a training-only scenario reports the fabric links of its iteration
    assert {s.policy for s in hetero_result.link_stats} == {"ecmp", "ice"}


def test_drawn_policies_report_their_median_draw_whole(hetero_result):
    """ECMP over draws: its column is the median draw's whole run (the batched draws'
    iteration time equals that draw run alone), with the range; ICE's gains are over
    ECMP's median and its lucky p10 draw."""
    from icefabric.reports.training import iteration_rows

    res = run_scenario(load("training-hetero"), policies=["ecmp", "ice"], draws=5)
    by = {r["policy"]: r for r in res.training["results"]}
    e, i = by["ecmp"], by["ice"]
    ms = e["iteration_ms_draws"]
    assert e["draws"] == 5 and len(set(ms)) > 1
    # draw 0 is the single-draw run
    assert ms[0] == hetero_result.training["results"][0]["iteration_ms"]
    assert e["iteration_ms"] == sorted(ms)[2] == ms[e["median_draw"]]
    b = e["breakdown"]
    assert b["compute_ms"] + b["exposed_total_ms"] + b["bubble_ms"] == pytest.approx(
        e["iteration_ms"], rel=1e-4)
    assert e["iteration_ms_p10"] <= e["iteration_ms_p50"] <= e["iteration_ms_p90"]
    assert "draws" not in i  # ICE's plan does not depend on the draw
    assert i["gain_vs_ecmp"] == pytest.approx(e["iteration_ms"] / i["iteration_ms"] - 1,
                                              abs=1e-4)
    assert i["gain_vs_ecmp_lucky"] == pytest.approx(
        e["iteration_ms_p10"] / i["iteration_ms"] - 1, abs=1e-4)
    rows = dict(iteration_rows(res))
    assert rows["p10-p90"] == [f"{e['iteration_ms_p10']:.1f}-{e['iteration_ms_p90']:.1f}", ""]
    assert rows["vs lucky ecmp"][1] == f"{i['gain_vs_ecmp_lucky']:+.1%}"


def test_training_table_fits_the_width(hetero_result):
    """The iteration table lays out like the collective tables: no cut policy names."""
    import dataclasses

    from rich.console import Console

    from icefabric.reports.tables import render

    res = dataclasses.replace(hetero_result, training={
        **hetero_result.training,
        "results": [{**r, "policy": p} for r, p in zip(hetero_result.training["results"],
                                                        ["static-disjoint", "ecmp-multiqp"])]})
    for width in (80, 40):
        con = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))
        for part in render(res, width):
            con.print(part)
        text = con.export_text()
        assert "…" not in text and "iteration" in text
        assert "static-disjoint" in text.replace("\n", "")
    # at 40 columns: short names, spelt out in the legend
    assert "sdisj" in text and "short names:" in text and "static-disjoint" in text


def test_training_json_roundtrip(hetero_result):
    back = ExperimentResult.from_json(hetero_result.to_json())
    assert back.training["results"] == hetero_result.training["results"]


BASE = """
name: t
fabric: {kind: leaf-spine, servers_per_leaf: 2, spines: 2}
pools:
  - {name: h100, server: hgx-h100, count: 2}
  - {name: ascend, server: atlas-800t-a2, count: 2}
"""


def error(text):
    with pytest.raises(ScenarioError) as e:
        run_scenario(loads(BASE + text, "t.yaml"), policies=["ecmp"])
    return str(e.value)


def test_scenario_errors_point_at_the_training_job():
    msg = error("""training:
  pools: [h100, ascend]
  model: llama3-8b
  parallel: {tp: 8, global_batch: 4}
""")
    assert msg.startswith("t.yaml:7: training: pipeline stage 0 spans pools")
    with pytest.raises(ScenarioError, match="t.yaml:9: training.model: unknown model "
                       "'llama9'; presets: deepseek-v3"):
        loads(BASE + """training:
  pools: [h100]
  model: llama9
  parallel: {tp: 8, global_batch: 4}
""", "t.yaml")
    msg = error("""jobs:
  - {name: j, servers: [h100-0], collectives: [{kind: all_reduce}]}
training:
  pools: [h100]
  model: llama3-8b
  parallel: {tp: 8, global_batch: 4}
""")
    assert "accelerator h100-0/acc0 is also used by job 'j'" in msg
    with pytest.raises(ScenarioError, match="a scenario needs 'jobs' or a 'training' job"):
        loads(BASE, "t.yaml")
    with pytest.raises(ScenarioError, match="'chakra' traces replace 'model' and 'parallel'"):
        loads(BASE + "training: {pools: [h100], model: llama3-8b, chakra: [x.et], "
              "parallel: {global_batch: 1}}\n", "t.yaml")
