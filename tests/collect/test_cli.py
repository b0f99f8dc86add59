"""``icefab collect ...`` through typer's CliRunner on real files."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.schemas import COLLECT_SCHEMA_VERSION

from .conftest import PROJECT_CORPUS, corpus_dir, corpus_file, project_file

runner = CliRunner()

ONEHOST = [str(project_file("nccl-1412a-16r-onehost-ringdump.log")),
           str(project_file("nccl-1412b-16r-onehost-initcomplete.log"))]
READERS = ("nccl-log", "nccl-tests", "hccl-log", "ranktable", "topo")


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


def test_text_report_shows_trees_inferred_facts_and_cross_host_edges():
    res = runner.invoke(app, ["collect", "nccl-log", *ONEHOST])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "trees (-1: none)" in out and "0,2-4,6-7" in out  # rank 1's channels, merged
    assert "inferred (implied by the log, not printed)" in out
    assert "a host the log does not name" in out and "nccl-1412a-16r-onehost-ringdump.log:1" in out
    assert "the [dev] prefix" in out  # log text is not eaten as rich markup
    assert "1->8 inferred nccl-1412a-16r-onehost-ringdump.log:5, 9->0 inferred" in out
    assert "commId" in out and "0x49bbd7790311d5eb" in out


def test_text_report_shows_each_host_s_ranks_seen_and_inferred():
    # NVIDIA/nccl#629: 3 of 8 ranks of one host, 5 of 8 of the other print their own lines
    res = runner.invoke(app, ["collect", "nccl-log",
                              str(project_file("nccl-629-16r-initcomplete-partial.log"))])
    assert res.exit_code == 0, res.output
    rows = [" ".join(line.split("│")[1:-1][i].strip() for i in range(5))
            for line in res.stdout.splitlines() if line.count("│") == 6]
    assert "A03-R28-I49-2-6000166 0 0-7 2,4-5 0-1,3,6-7" in rows
    assert "A03-R28-I49-3-9000018 1 8-15 8-9,12,14-15 10-11,13" in rows
    assert "inferred 10" in res.stdout and "seen 12" in res.stdout


def test_json_report_marks_hosts_devices_and_edges_seen_or_inferred():
    f = corpus_file("efa-aws-efa-eks-16r-2.9.9.log")
    (rep,) = json.loads(runner.invoke(app, ["collect", "nccl-log", "--json", str(f)]).stdout)
    assert {e["status"] for r in rep["rings"] for e in r["edges"]} == {"seen"}
    assert all(r["host_from"]["status"] == "seen" for r in rep["ranks"])
    assert [h["ranks"] for h in rep["hosts_ranks"]] == [list(range(8)), list(range(8, 16))]


def test_json_report_carries_nodes_edges_and_inferred_lines():
    res = runner.invoke(app, ["collect", "nccl-log", "--json", *ONEHOST])
    (rep,) = json.loads(res.stdout)
    assert [r["node"] for r in rep["ranks"]] == [0] * 8 + [1] * 8
    assert [r["host"] for r in rep["ranks"][7:9]] == ["swat1-04", None]
    assert rep["rings"][2]["cross_node_edges"] == [[7, 14], [15, 6]]
    node = next(f for f in rep["inferred"] if f["fact"] == "node")
    assert node["ranks"] == list(range(8, 16)) and node["line"] == 1
    assert "src/init.cc" in node["rule"]


def _all_corpus_files():
    files = sorted(p for p in PROJECT_CORPUS.iterdir() if p.suffix in (".log", ".xml"))
    d = corpus_dir()
    if d.is_dir():
        files += sorted(p for p in d.iterdir() if p.suffix in (".log", ".xml"))
    return files


@pytest.mark.parametrize("reader", READERS)
def test_no_reader_ever_prints_none(reader):
    for f in _all_corpus_files():
        res = runner.invoke(app, ["collect", reader, str(f)])
        assert res.exit_code in (0, 2), (f, res.output)
        assert "None" not in res.stdout and "None" not in res.stderr, (reader, f.name)


def test_nothing_usable_exits_2_with_message(tmp_path):
    f = tmp_path / "empty.log"
    f.write_text("just some text\n")
    res = runner.invoke(app, ["collect", "nccl-log", str(f)])
    assert res.exit_code == 2
    assert "no NCCL/RCCL communicator" in res.stderr and "no NCCL_DEBUG=INFO lines" in res.stderr


@pytest.mark.parametrize(("reader", "path", "fits"), [
    ("nccl-log", "ncclt-oci-h100-roce-2.21.5.log", "nccl-tests"),
    ("nccl-tests", "nccl-1412a-16r-onehost-ringdump.log", "nccl-log"),
    ("hccl-log", "xml-ncclt-256-h200-vm-topo.xml", "topo"),
    ("topo", "hccl-vllm-ascend-486-socket-timeout.log", "hccl-log"),
    ("ranktable", "rccl-1026a-mi250x-8r-trees.log", "nccl-log"),
])
def test_wrong_reader_names_the_one_that_fits(reader, path, fits):
    f = project_file(path) if (PROJECT_CORPUS / path).exists() else corpus_file(path)
    res = runner.invoke(app, ["collect", reader, str(f)])
    assert res.exit_code == 2
    assert "error: no " in res.stderr and f"try `icefab collect {fits} {f}`" in res.stderr


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


def test_nccl_tests_columns_and_numbers_as_printed():
    old = runner.invoke(app, ["collect", "nccl-tests",
                              str(corpus_file("rccl-929-mi250x-16r-rccltests.log"))])
    assert old.exit_code == 0
    header = old.stdout.split("┡")[0]
    assert "error" in header and "#wrong" not in header and "root" not in header
    assert "4e-07" in old.stdout
    new = runner.invoke(app, ["collect", "nccl-tests",
                              str(corpus_file("ncclt-oci-h100-roce-2.21.5.log"))])
    header = new.stdout.split("┡")[0]
    assert "#wrong" in header and "root" in header and "in-place" in header
    assert "   4511.2 │" in new.stdout and " 237.50 │" in new.stdout  # as the tool printed


def test_nccl_tests_table_and_empty():
    old = corpus_file("ncclt-340-2.6.4-oldformat.log")
    res = runner.invoke(app, ["collect", "nccl-tests", str(old)])
    assert res.exit_code == 0 and "134217728" in res.stdout
    no_rows = corpus_file("nccl-179-ib-2.3.7-oldformat.log")
    res = runner.invoke(app, ["collect", "nccl-tests", str(no_rows)])
    assert res.exit_code == 2 and "no nccl-tests result rows" in res.stderr


def test_two_excerpts_of_one_nccl_tests_run(tmp_path):
    lines = corpus_file("ncclt-oci-h100-roce-2.21.5.log").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.lstrip().startswith("2147483648"))
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("".join(lines[:cut]))
    b.write_text("".join(lines[cut:]))
    res = runner.invoke(app, ["collect", "nccl-tests", "--json", str(a), str(b)])
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)
    assert [r["size"] for r in run["rows"]] == [1 << 30, 1 << 31, 1 << 32, 1 << 33, 1 << 34]
    assert all(r["root"] == -1 for r in run["rows"]) and run["avg_bus_bandwidth_GBps"] == 458.452


def test_hccl_log_reads_torch_npu_errors_and_links_from_several_files():
    files = [str(project_file("hccl-vllm-ascend-486-socket-timeout.log")),
             str(project_file("hccl-vllm-ascend-3162-transport-init.log"))]
    res = runner.invoke(app, ["collect", "hccl-log", *files])
    assert res.exit_code == 0, res.output
    assert "EI0006" in res.stdout and "ERR01100" in res.stdout and "172.16.0.114" in res.stdout
    assert "solution" in res.stdout and "Check other NPUs" in res.stdout
    res = runner.invoke(app, ["collect", "hccl-log", "--json", *files])
    data = json.loads(res.stdout)
    assert [e["code"] for e in data["errors"]] == ["6", "ERR01100", "EI0006", "EI0009"]
    assert data["errors"][3]["rank"] == 1 and data["errors"][3]["reason"].startswith(
        "[Create][DestLink]") and data["errors"][3]["solution"].startswith("Check other NPUs")
    assert data["links"][0]["remote_rank"] == 0 and data["sources"] == files


def _ranktable(server: str, ranks: list[int]) -> str:
    return json.dumps({"version": "1.0", "server_list": [
        {"server_id": server, "device": [{"device_id": str(i), "device_ip": f"10.0.{i}.{r}",
                                          "rank_id": str(r)} for i, r in enumerate(ranks)]}]})


def test_ranktable(tmp_path):
    f = tmp_path / "rank_table.json"
    f.write_text(_ranktable("s1", [0]))
    res = runner.invoke(app, ["collect", "ranktable", str(f)])
    assert res.exit_code == 0 and "10.0.0.0" in res.stdout
    res = runner.invoke(app, ["collect", "ranktable", "--json", str(f)])
    assert json.loads(res.stdout)["library"] == "hccl"
    f.write_text("{}")
    res = runner.invoke(app, ["collect", "ranktable", str(f)])
    assert res.exit_code == 2 and "no ranks of an HCCL rank table" in res.stderr


def test_rank_tables_of_two_servers_merge(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(_ranktable("s1", [0, 1]))
    b.write_text(_ranktable("s2", [2, 3]))
    res = runner.invoke(app, ["collect", "ranktable", "--json", str(a), str(b)])
    rep = json.loads(res.stdout)
    assert rep["nranks"] == 4 and rep["nnodes"] == 2 and rep["ranks"][3]["host"] == "s2"


def test_topo_command():
    xml = corpus_file("xml-ncclt-256-h200-vm-topo.xml")
    res = runner.invoke(app, ["collect", "topo", str(xml)])
    assert res.exit_code == 0 and "mlx5_0" in res.stdout
    assert "truncated" in res.stderr
    res = runner.invoke(app, ["collect", "topo", "--json", str(xml), str(xml)])
    tops = json.loads(res.stdout)
    assert len(tops) == 2 and tops[1]["source"] == str(xml)
    assert tops[0]["gpu_nic_affinity"] == {"0000:18:00.0": "mlx5_0"}


def test_chakra_command(tmp_path):
    from .test_chakra import sample

    files = []
    for r in range(2):
        f = tmp_path / f"et.{r}.et"
        f.write_bytes(sample(r))
        files.append(str(f))
    res = runner.invoke(app, ["collect", "chakra", *files])
    assert res.exit_code == 0 and "ALL_REDUCE" in res.stdout
    assert "None" not in res.stdout
    (tmp_path / "bad.et").write_bytes(b"\xff\xff")
    res = runner.invoke(app, ["collect", "chakra", str(tmp_path / "bad.et")])
    assert res.exit_code == 2 and "byte 0" in res.stderr
