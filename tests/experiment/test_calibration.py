"""docs/calibration.md's table of measured figures beside our distribution is what the
calibration command computes now (every case recomputed, not copied)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.experiment.calibration import (
    CalibrationError,
    calibrate,
    documented_table,
    load_outcomes,
    read_cases,
    render_table,
    save_outcomes,
    trust_line,
    write_table,
)

ROOT = Path(__file__).resolve().parents[2]
POINTS = ROOT / "benchmarks" / "calibration" / "points.yaml"
DOC = ROOT / "docs" / "calibration.md"


def _documented_draws() -> int:
    line = next(x for x in documented_table(DOC).splitlines() if x.startswith("Draws per"))
    return int(line.split(":", 1)[1].split()[0])


@pytest.fixture(scope="module")
def outcomes():
    return calibrate(POINTS, _documented_draws())


def test_every_reproducible_point_has_a_documented_row(outcomes):
    rows = [x for x in documented_table(DOC).splitlines() if x.startswith("| [")]
    cases = read_cases(POINTS)
    assert len(rows) == len(cases) == len(outcomes) >= 5
    assert {c.point for c in cases} >= {"nccl-tests-169-a100-6-servers",
                                        "huawei-nslb-tolly-64-h100"}


def test_documented_ranges_and_verdicts_are_recomputed(outcomes):
    """Each point's measured figure against the range it was documented with: the table
    in the docs equals the one computed now, cell by cell."""
    documented = [x for x in documented_table(DOC).splitlines() if x.startswith("| [")]
    computed = [x for x in render_table(outcomes).splitlines() if x.startswith("| [")]
    for doc_row, row, o in zip(documented, computed, outcomes):
        assert doc_row == row, (o.case.point, o.case.label)
        cells = [c.strip() for c in doc_row.split("|")[1:-1]]
        assert cells[3] == o.case.assume  # the NCCL settings the case assumes, shown
        p10, p50, p90 = (float(v) for v in cells[5].split(" / "))
        assert p10 <= p50 <= p90
        assert cells[6].startswith("yes" if o.inside else "no")
        tol = o.case.tolerance
        assert o.inside == (p10 * (1 - tol) - 0.05 <= o.case.measured <= p90 * (1 + tol) + 0.05)


def test_write_replaces_only_between_the_markers(tmp_path, outcomes):
    doc = tmp_path / "c.md"
    doc.write_text("head\n<!-- calibration:begin -->\nold\n<!-- calibration:end -->\ntail\n")
    write_table(doc, outcomes[:1])
    text = doc.read_text()
    assert text.startswith("head\n") and text.endswith("tail\n") and "old" not in text
    assert outcomes[0].case.label in text
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    with pytest.raises(CalibrationError, match="markers"):
        write_table(plain, outcomes)


def test_calibrate_command(tmp_path):
    bad = tmp_path / "points.yaml"
    bad.write_text("points:\n  - {id: x, source: s, reproduce: [{label: a}]}\n")
    r = CliRunner().invoke(app, ["calibrate", "--points", str(bad), "-q"])
    assert r.exit_code == 2 and "lacks 'scenario'" in r.output
    r = CliRunner().invoke(app, ["calibrate", "--points", str(tmp_path / "none.yaml")])
    assert r.exit_code == 2 and "no such points file" in r.output


def test_the_kept_run_is_the_documented_one_and_the_trust_line_says_what_it_shows(tmp_path):
    """The run kept with the package (the trust lines' source) renders the documented
    table, and the trust line's ranges and counts are those of the table's cells."""
    kept = load_outcomes()
    assert render_table(kept) == documented_table(DOC)
    line = trust_line(kept)
    rows = [[c.strip() for c in x.split("|")[1:-1]] for x in documented_table(DOC).splitlines()
            if x.startswith("| [")]
    for policy in ("ecmp-tuned", "ecmp"):
        mine = [r for r in rows if r[2] == policy]
        ratios = [float(r[7]) for r in mine]
        inside = sum(r[6].startswith("yes") for r in mine)
        assert (f"{policy}, " in line and f"{min(ratios):.2f}-{max(ratios):.2f}x our median, "
                f"{inside} of {len(mine)} inside" in line), (policy, line)
    assert "5 published figures from 2 sources" in line
    save_outcomes(kept[:1], tmp_path / "one.json")  # round trip; a run without ECMP cases
    assert load_outcomes(tmp_path / "one.json") == kept[:1]
    assert trust_line([o for o in kept if o.case.policy == "ice"]).startswith(
        "trust: no calibration run is recorded")
