"""``icefab collect ...`` through typer's CliRunner on real files."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.schemas import COLLECT_SCHEMA_VERSION

from .conftest import corpus_file

runner = CliRunner()


def test_nccl_log_table():
    f = corpus_file("efa-aws-efa-eks-16r-2.9.9.log")
    res = runner.invoke(app, ["collect", "nccl-log", str(f)])
    assert res.exit_code == 0, res.output
    assert "rings" in res.stdout and "network connections" in res.stdout
    assert "AWS Libfabric" in res.stdout


def test_nccl_log_json_is_the_report():
    f = corpus_file("nccl-tests-252-ibext-8r-trees.log")
    res = runner.invoke(app, ["collect", "nccl-log", "--json", str(f)])
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.stdout)
    assert rep["schema_version"] == COLLECT_SCHEMA_VERSION and rep["nranks"] == 8
    net = [c for c in rep["connections"] if c["kind"] == "NET"]
    assert net[0]["from"] == 3 and net[0]["gdrdma"] is True


def test_nothing_usable_exits_2_with_message(tmp_path):
    f = tmp_path / "empty.log"
    f.write_text("just some text\n")
    res = runner.invoke(app, ["collect", "nccl-log", str(f)])
    assert res.exit_code == 2
    assert "no NCCL/RCCL communicator" in res.stderr


def test_missing_file_exits_2(tmp_path):
    res = runner.invoke(app, ["collect", "nccl-log", str(tmp_path / "nope.log")])
    assert res.exit_code == 2 and "cannot read" in res.stderr


def test_warnings_go_to_stderr(tmp_path):
    f = tmp_path / "cut.log"
    f.write_text("h:1:2 [0] NCCL INFO Channel 00/02 :    0   1\n"
                 "h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] ->\n")
    res = runner.invoke(app, ["collect", "nccl-log", str(f)])
    assert res.exit_code == 0
    assert "line 2" in res.stderr and "line 2" not in res.stdout


def test_nccl_tests_json():
    res = runner.invoke(app, ["collect", "nccl-tests", "--json",
                              str(corpus_file("ncclt-232-h100-2nodes-4nic-tree.log"))])
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)
    assert len(run["rows"]) == 5 and run["env"]["NCCL_ALGO"] == "Tree"


def test_nccl_tests_table_and_empty():
    old = corpus_file("ncclt-340-2.6.4-oldformat.log")
    res = runner.invoke(app, ["collect", "nccl-tests", str(old)])
    assert res.exit_code == 0 and "134217728" in res.stdout
    no_rows = corpus_file("nccl-179-ib-2.3.7-oldformat.log")
    res = runner.invoke(app, ["collect", "nccl-tests", str(no_rows)])
    assert res.exit_code == 2 and "no nccl-tests result rows" in res.stderr


def test_ranktable(tmp_path):
    f = tmp_path / "rank_table.json"
    f.write_text(json.dumps({"version": "1.0", "server_list": [
        {"server_id": "s1",
         "device": [{"device_id": "0", "device_ip": "10.0.0.1", "rank_id": "0"}]}]}))
    res = runner.invoke(app, ["collect", "ranktable", str(f)])
    assert res.exit_code == 0 and "10.0.0.1" in res.stdout
    res = runner.invoke(app, ["collect", "ranktable", "--json", str(f)])
    assert json.loads(res.stdout)["library"] == "hccl"
    f.write_text("{}")
    res = runner.invoke(app, ["collect", "ranktable", str(f)])
    assert res.exit_code == 2


def test_topo_command():
    xml = corpus_file("xml-ncclt-256-h200-vm-topo.xml")
    res = runner.invoke(app, ["collect", "topo", str(xml)])
    assert res.exit_code == 0 and "mlx5_0" in res.stdout
    assert "truncated" in res.stderr
    res = runner.invoke(app, ["collect", "topo", "--json", str(xml)])
    assert json.loads(res.stdout)["gpu_nic_affinity"] == {"0000:18:00.0": "mlx5_0"}


def test_chakra_command(tmp_path):
    from .test_chakra import sample

    files = []
    for r in range(2):
        f = tmp_path / f"et.{r}.et"
        f.write_bytes(sample(r))
        files.append(str(f))
    res = runner.invoke(app, ["collect", "chakra", *files])
    assert res.exit_code == 0 and "ALL_REDUCE" in res.stdout
    (tmp_path / "bad.et").write_bytes(b"\xff\xff")
    res = runner.invoke(app, ["collect", "chakra", str(tmp_path / "bad.et")])
    assert res.exit_code == 2 and "byte 0" in res.stderr
