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
