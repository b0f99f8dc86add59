"""``icefab catalog``, ``icefab scenario docs`` and where ``icefab validate`` finds its data."""

import json
from pathlib import Path

from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.cli.validate import resolve_dir
from icefabric.topology.catalog import SERVERS, SWITCHES

ROOT = Path(__file__).resolve().parents[2]


def test_catalog_lists_servers_nics_and_switches():
    r = CliRunner().invoke(app, ["catalog"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    for name in [*SERVERS, *SWITCHES, "ConnectX-7", "Ascend integrated RoCE"]:
        assert name in r.output
    assert "8 x 400G" in r.output and "128 x 400G" in r.output
    doc = json.loads(CliRunner().invoke(app, ["catalog", "--json"]).output)
    h100 = next(s for s in doc["servers"] if s["name"] == "hgx-h100")
    assert (h100["nics"], h100["nic_gbps"], h100["library"]) == (8, 400, "nccl")
    assert {n["nic"] for n in doc["nics"]} >= {"ConnectX-7", "ConnectX-6"}
    assert {s["name"] for s in doc["switches"]} == set(SWITCHES)


def test_scenario_docs_prints_the_page():
    r = CliRunner().invoke(app, ["scenario", "docs"])
    assert r.exit_code == 0 and r.output == (ROOT / "docs" / "scenarios.md").read_text()


def test_validate_defaults_to_the_vendored_set_in_the_repository():
    path, is_default = resolve_dir(None)
    assert is_default and path == ROOT / "data" / "validation"
    assert len(list(path.glob("*.json"))) == 11


def test_validate_names_a_missing_folder():
    r = CliRunner().invoke(app, ["validate", "/nonexistent/validation"])
    assert r.exit_code == 2 and "validation folder not found: /nonexistent/validation" in r.output
