"""The calibration data file (benchmarks/calibration/points.yaml) stays well-formed."""

from pathlib import Path

import yaml

POINTS = Path(__file__).resolve().parents[1] / "benchmarks" / "calibration" / "points.yaml"


def test_every_point_quotes_its_source_and_says_if_it_can_be_reproduced():
    doc = yaml.safe_load(POINTS.read_text())
    ids = [p["id"] for p in doc["points"]]
    assert len(ids) == len(set(ids)) >= 5
    for p in doc["points"]:
        assert p["source"].startswith("https://"), p["id"]
        assert len(p["quote"]) > 40 and p["measured"]["metric"], p["id"]
        assert p["reproducible"] in ("yes", "partial", "no"), p["id"]
        if p["reproducible"] != "yes":
            assert p.get("assume") or p["reproducible"] == "no" or p.get("note"), p["id"]
        assert "our" not in p  # our figures: docs/calibration.md, by icefab calibrate
        for c in p.get("reproduce") or []:
            assert (POINTS.parent / c["scenario"]).exists(), (p["id"], c["scenario"])


def test_every_case_records_the_nccl_setting_its_policy_runs():
    """A case's ``assume`` names the QPs per connection, and its policy runs exactly that."""
    import re

    from icefabric.policies.base import get_policy

    doc = yaml.safe_load(POINTS.read_text())
    cases = [c for p in doc["points"] for c in p.get("reproduce") or []]
    assert {c["policy"] for c in cases} >= {"ecmp", "ecmp-tuned"}
    for c in cases:
        m = re.search(r"NCCL_IB_QPS_PER_CONNECTION=(\d+)", c["assume"])
        if c["policy"].startswith("ecmp"):
            assert m, c
            assert get_policy(c["policy"]).qps_per_connection(1) == int(m[1]), c
