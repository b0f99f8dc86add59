import re

import pytest
from rich.console import Console

from icefabric.experiment.runner import run_scenario
from icefabric.reports.tables import fabric_summary, render, short_name
from icefabric.scenario.loader import load

POLICIES = ["ecmp", "ecmp-multiqp", "static-disjoint", "spray", "ice", "ideal"]


@pytest.fixture(scope="module")
def res():
    return run_scenario(load("homog-small"), policies=POLICIES, sizes=[1 << 20, 1 << 30])


def _text(res, width, detail=False) -> str:
    con = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)
    for r in render(res, width, detail=detail):
        con.print(r)
    return con.export_text()


@pytest.mark.parametrize("width", [50, 80, 120, 200])
def test_tables_fit_the_width_and_never_cut_a_name(res, width):
    text = _text(res, width)
    assert "…" not in text
    # every line fits (rich pads, so strip the right side)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    legend = dict(re.findall(r"(\w+) = ([\w-]+)", text.split("short names:")[-1])) \
        if "short names:" in text else {}
    for p in POLICIES:  # each policy is named in full somewhere, or in the legend
        assert re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", text) or p in legend.values()
    for short, full in legend.items():
        assert short_name(full) == short


def test_summary_comes_first_and_ideal_is_explained(res):
    text = _text(res, 100)
    first = text.index("Summary at 1GiB")
    assert first < text.index("job0 · all_reduce · ring") < text.index("Fabric links")
    assert "ideal = the same jobs on a non-blocking fabric" in text
    # a 1:1 fabric: the capacity bound equals ideal, so no bound column or note
    assert "bound =" not in text and "of\nbound" not in text


def test_narrow_tables_are_split_with_key_columns_repeated(res):
    text = " ".join(_text(res, 40).split())  # headings wrap at 40 columns
    part = text.index("job0 · all_reduce · ring · 32 ranks: busbw GB/s (1/")
    parts = text[part:text.index("Fabric links")].split("job0 · all_reduce")[1:]
    assert len(parts) >= 2
    for p in parts:  # the key column (message size) is in every part
        assert "size" in p and "1MiB" in p and "1GiB" in p


def test_detail_is_one_table_per_policy(res):
    text = _text(res, 80, detail=True)
    for p in POLICIES:
        assert f"job0 · all_reduce · ring · 32 ranks · {p}" in text
    assert "time us" in text and "algbw" in text


def test_oversubscribed_fabric_shows_the_capacity_bound():
    ls = load("homog-small")  # an AllToAll across two leaves on a 2:1 fabric
    ls.scenario.fabric.oversub = 2.0
    ls.scenario.jobs[0].collectives[0].kind = "alltoall"
    r = run_scenario(ls, policies=["ecmp", "spray", "ideal"], sizes=[1 << 30])
    text = _text(r, 100)
    assert "bound = what this fabric's cuts allow" in text
    spray = next(x for x in r.rows if x["policy"] == "spray")
    # spraying reaches the cut bound of a 2:1 fabric, far below the non-blocking ideal
    assert spray["frac_of_bound"] > 0.99 and spray["frac_of_ideal"] < 0.8


def test_fabric_summary_names_the_kind():
    assert fabric_summary({"builder": "leaf_spine", "rail_optimized": True, "oversub": 2.0,
                           "servers": 4, "nodes": {"accel": 32}, "leaves": 8,
                           "spines": 4}).startswith(
        "fabric: rail-optimized leaf-spine, 2:1 oversubscribed; 4 servers")
    assert "fat-tree, non-blocking (1:1)" in fabric_summary(
        {"builder": "fat_tree", "oversub": 1.0, "pods": 2, "cores": 4, "nodes": {}})
