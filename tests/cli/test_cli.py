import json

from typer.testing import CliRunner

from icefabric.cli.app import app

runner = CliRunner()


def test_help_lists_commands():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for cmd in ("simulate", "scenarios", "scenario"):
        assert cmd in r.output


def test_simulate_json(tmp_path):
    r = runner.invoke(app, ["simulate", "homog-small", "--sizes", "1M,64M", "--json",
                            "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # progress goes to stderr, the document alone to stdout
    assert doc["provenance"]["version"] and "scenario_text" in doc
    assert {row["policy"] for row in doc["rows"]} == {"ecmp", "ecmp-multiqp", "static-disjoint",
                                                       "spray", "ice", "ideal"}
    assert (tmp_path / "result.json").exists()
    assert (tmp_path / "busbw.png").stat().st_size > 1000
    assert (tmp_path / "link_utilization.png").stat().st_size > 1000


def test_simulate_table():
    r = runner.invoke(app, ["simulate", "homog-small", "--sizes", "16M", "-p",
                            "ecmp,ecmp-tuned,ice,ideal", "-n", "3"])
    assert r.exit_code == 0, r.output
    assert "busbw" in r.output and "Summary" in r.output
    # ICE's gain over the deployed ECMP first, over NCCL's default beside it
    flat = " ".join(r.output.split())
    assert "(ecmp-tuned = ECMP as deployed, 2 QPs per NCCL connection, first;" in flat
    assert "busbw GB/s (gain over ecmp-tuned)" in flat
    # the trust line, from the kept calibration run, under the tables
    from icefabric.experiment.calibration import trust_line

    assert " ".join(trust_line().split()) in flat


def test_scenarios_list_and_show():
    r = runner.invoke(app, ["scenarios"])
    assert r.exit_code == 0 and "hetero-default" in r.output
    r = runner.invoke(app, ["scenario", "show", "homog-small"])
    assert r.exit_code == 0 and r.output.startswith("#")


def test_bad_input_is_one_clear_error_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfabric: {kind: leaf-spine, spines: 2, wings: 3}\n"
                   "pools: [{name: h, server: hgx-h100, count: 1}]\n"
                   "jobs: [{name: j, pools: [h], collectives: [{kind: all_reduce}]}]\n")
    r = runner.invoke(app, ["simulate", str(bad)])
    assert r.exit_code == 2
    assert "bad.yaml:2" in r.output and "fabric.wings" in r.output
    assert "Traceback" not in r.output
    r = runner.invoke(app, ["simulate", "homog-small", "-p", "nope"])
    assert r.exit_code == 2 and "unknown policy" in r.output


CORPUS = __import__("pathlib").Path(__file__).resolve().parents[1] / "collect" / "corpus" / \
    "reference"
OCI = CORPUS / "ncclt-oci-h100-roce-2.21.5.log"


def test_simulate_from_log_replays_the_logged_job():
    r = runner.invoke(app, ["simulate", "homog-small", "--from-log", str(OCI), "--sizes", "64M",
                            "-p", "ecmp,ideal", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert {row["nranks"] for row in doc["rows"]} == {16}
    assert {row["collective"] for row in doc["rows"]} == {"all_reduce"}


def test_compare_nccl_tests_sets_measured_beside_simulated():
    r = runner.invoke(app, ["compare", "nccl-tests", str(OCI), "homog-small", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # progress goes to stderr, the document alone to stdout
    assert doc["provenance"]["version"] and "scenario_text" in doc
    assert doc["collective"] == "all_reduce" and doc["nranks"] == 16
    first = doc["rows"][0]
    assert first["size_bytes"] == 1 << 30 and first["measured_busbw_GBps"] > 400
    # 2 hosts with 16 x 200G ports (NCCL_IB_HCA) on the fabric: the ring bound is 400 GB/s
    assert doc["server"] == "bm-gpu-h100-8"
    assert 0.8 < first["ideal_vs_measured"] < 0.95
    # every default policy of the scenario ran
    assert all(f"{p}_busbw_GBps" in first for p in ("ecmp", "ice", "ideal"))
    above = next(n for n in doc["notes"] if "above every simulated policy" in n)
    assert "including ideal" in above and "NVLS" in above


def test_compare_says_when_the_measurement_is_far_from_the_models_ecmp_and_how_far_to_trust():
    r = runner.invoke(app, ["compare", "nccl-tests", str(OCI), "homog-small", "-p",
                            "ecmp-tuned,ice", "-n", "4", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    # nccl-tests output with NCCL_IB_HCA only: no NIC list, so the transport is unknown
    assert doc["transport"] is None
    assert doc["notes"][0].startswith("the log does not show its network transport")
    hi = max(row["ecmp-tuned_busbw_GBps_p90"] for row in doc["rows"])
    worst = max(row["measured_busbw_GBps"] for row in doc["rows"]) / hi
    assert worst > 1.5  # 464.6 GB/s measured against a p90 of about 180
    far = next(n for n in doc["notes"] if n.startswith("measured busbw is far above the "
                                                      "model's ecmp-tuned range"))
    assert f"up to {worst:.1f}x above" in far and "give the real fabric" in far
    assert doc["trust"].startswith("trust: the model's ECMP against")
    r = runner.invoke(app, ["compare", "nccl-tests", str(OCI), "homog-small", "-p",
                            "ecmp-tuned,ice", "-n", "4"])
    assert r.exit_code == 0, r.output
    assert doc["trust"].split(":")[0] + ":" in r.stdout and "our median" in r.stdout


def test_from_log_warns_when_the_log_is_not_roce():
    efa = CORPUS / "efa-aws-efa-eks-16r-2.9.9.log"
    r = runner.invoke(app, ["simulate", "homog-small", "--from-log", str(efa), "--sizes", "16M",
                            "-p", "ecmp,ice", "-n", "1", "-q"])
    assert r.exit_code == 0, r.output
    assert ("warning: the log's transport is EFA/Libfabric (efa), not RoCE" in r.stderr
            and "SRD" in r.stderr)


def test_from_log_errors_are_clear(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_text("nothing to see here\n")
    r = runner.invoke(app, ["simulate", "--from-log", str(junk)])
    assert r.exit_code == 2 and "error" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["simulate", "--from-log", str(tmp_path / "missing.log")])
    assert r.exit_code == 2 and "no such log file" in r.output
    r = runner.invoke(app, ["compare", "nccl-tests", str(junk)])
    assert r.exit_code == 2 and "no nccl-tests result rows" in r.output


def test_plan_from_log():
    r = runner.invoke(app, ["plan", "homog-small", "--from-log", str(OCI), "--size", "64M",
                            "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert doc["n_qps"] > 0 and doc["policy"] == "ice"


def test_fluid_run_plots_time_series(tmp_path):
    r = runner.invoke(app, ["simulate", "pfc-victim", "-p", "ecmp,ice", "--json",
                            "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    for name in ("timeseries_ecmp.png", "timeseries_ice.png", "busbw.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_python_dash_m_entry_point():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "icefabric", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "simulate" in r.stdout


def test_unrecoverable_failure_is_reported_not_a_traceback(tmp_path):
    # the only spine link of leaf0 fails: no policy can route around it
    text = runner.invoke(app, ["scenario", "show", "homog-small"]).output
    text = text.replace("spines: 4", "spines: 1").replace("links_per_spine: 4",
                                                          "links_per_spine: 1")
    text = text.replace("sizes: {min: 1MiB, max: 256MiB, factor: 4}", "sizes: [16MiB]")
    text += "failures:\n  - {at_us: 10, link: [leaf0, spine0]}\n"
    f = tmp_path / "cut.yaml"
    f.write_text(text)
    r = runner.invoke(app, ["simulate", str(f), "-p", "ecmp"])
    assert r.exit_code == 2, r.output
    assert "error" in r.output and "Traceback" not in r.output


def _scenario(tmp_path, extra: str, name="s.yaml"):
    text = runner.invoke(app, ["scenario", "show", "homog-small"]).output
    text = text.replace("sizes: {min: 1MiB, max: 256MiB, factor: 4}", "sizes: [4MiB]")
    f = tmp_path / name
    f.write_text(text + extra)
    return f


def _one_error_line(r, *parts):
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    for p in parts:
        assert p in lines[0], lines[0]


def test_a_misspelt_engine_option_is_one_line_naming_it(tmp_path):
    f = _scenario(tmp_path, "engine_options: {dcqnc: paper}\n")
    n = f.read_text().count("\n")
    r = runner.invoke(app, ["simulate", str(f), "-p", "ecmp", "-e", "fluid"])
    _one_error_line(r, f"s.yaml:{n}", "engine_options.dcqnc: unknown field")


def test_a_misspelt_policy_option_is_one_line_naming_it(tmp_path):
    f = _scenario(tmp_path, "policy_options: {ice: {qsp: 2}}\n")
    n = f.read_text().count("\n")
    r = runner.invoke(app, ["simulate", str(f), "-p", "ecmp,ice"])
    _one_error_line(r, f"s.yaml:{n}", "policy_options.ice.qsp: policy 'ice' has no option "
                    "'qsp'; its options: agent_failover_ns,")


def test_an_engine_stall_is_one_line(tmp_path):
    f = _scenario(tmp_path, "engine_options: {max_steps: 3}\n")
    r = runner.invoke(app, ["simulate", str(f), "-p", "ecmp", "-e", "fluid", "-q"])
    _one_error_line(r, "fluid engine exceeded max_steps=3")
    f = _scenario(tmp_path, "engine_options: {max_time_ns: 1000}\n", "t.yaml")
    r = runner.invoke(app, ["simulate", str(f), "-p", "ecmp", "-e", "fluid", "-q"])
    _one_error_line(r, "fluid engine stopped with 16 of 16 flows unfinished (e.g. job0:")


def test_a_log_without_a_job_is_one_line(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_text("nothing to see here\n")
    r = runner.invoke(app, ["simulate", "homog-small", "--from-log", str(junk)])
    _one_error_line(r, "no usable job in", "junk.log", "no NCCL/RCCL communicator found")


def test_scenario_check_names_a_bad_policy_and_describes_a_training_scenario(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfabric: {kind: leaf-spine, spines: 2}\n"
                   "pools: [{name: h, server: hgx-h100, count: 2}]\n"
                   "jobs: [{name: j, pools: [h], collectives: [{kind: all_reduce}]}]\n"
                   "policies: [ecmp, icee]\n")
    r = runner.invoke(app, ["scenario", "check", str(bad)])
    assert r.exit_code == 2 and "bad.yaml:5: policies[1]: unknown policy 'icee'" in r.output
    r = runner.invoke(app, ["scenario", "check", "training-hetero"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "training llama: llama3-8b · tp 8 × pp 2 × dp 4" in flat
    assert "'flows': 0" not in flat and "'qps': 224" in flat
