"""docs/sweeps.md is generated from the sweep parser's own fields and kept up to date."""

from pathlib import Path

import pytest

from icefabric.sweeps.docs import sweep_docs
from icefabric.sweeps.spec import FIELDS, SweepError, builtin_sweeps, parse_sweep

DOC = Path(__file__).resolve().parents[2] / "docs" / "sweeps.md"


def test_committed_page_is_up_to_date():
    assert DOC.read_text() == sweep_docs(), (
        "docs/sweeps.md is stale: run icefab scenario docs --sweeps --out docs/sweeps.md")


def test_every_field_the_parser_takes_is_documented_and_no_other():
    text = sweep_docs()
    for name in FIELDS:
        assert f"| `{name}` |" in text, name
    with pytest.raises(SweepError, match="a sweep has name, description, base, set, axes, "
                                         "seeds"):
        parse_sweep({"base": "homog-small", "axis": {}})
    assert all(f"## Built-in sweep `{n}`" in text for n in builtin_sweeps())
