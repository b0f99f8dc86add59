import pytest
import yaml

from icefabric.scenario.loader import builtin_text
from icefabric.sweeps.spec import (
    SweepError,
    builtin_sweeps,
    load_sweep,
    parse_sweep,
    points,
    set_path,
)

BASE = yaml.safe_load(builtin_text("hetero-default"))


def test_set_path_reaches_mappings_and_list_items_and_adds_new_keys():
    d = {"fabric": {"oversub": 1}, "pools": [{"count": 4}, {"count": 2}]}
    set_path(d, "fabric.oversub", 4)
    set_path(d, "pools[1].count", 8)
    set_path(d, "pools[0].nic_gbps", 100)
    assert d == {"fabric": {"oversub": 4}, "pools": [{"count": 4, "nic_gbps": 100},
                                                     {"count": 8}]}


@pytest.mark.parametrize("path, message", [
    ("pools[5].count", r"pools\[5\].count: the base scenario has no item \[5\]"),
    ("fabric..oversub", "bad field path"),
    ("fabric.oversub[0]", r"no item \[0\]"),
])
def test_set_path_errors_name_the_path(path, message):
    with pytest.raises(SweepError, match=message):
        set_path({"fabric": {"oversub": 1}, "pools": []}, path, 1)


def test_grid_is_row_major_with_named_axes_and_seeds():
    spec = parse_sweep({"name": "s", "base": BASE, "axes": {
        "fabric.oversub": [1, 2],
        "mix": {"fast": {"pools[1].nic_gbps": 400}, "slow": {"pools[1].nic_gbps": 100}}},
        "seeds": 2})
    grid = points(spec)
    assert spec.axis_names == ["fabric.oversub", "mix", "seed"]
    assert [tuple(p.labels.values()) for p in grid[:3]] == [("1", "fast", "7"),
                                                            ("1", "fast", "8"),
                                                            ("1", "slow", "7")]
    p = grid[-1]
    assert p.scenario["fabric"]["oversub"] == 2 and p.scenario["seed"] == 8
    assert p.scenario["pools"][1]["nic_gbps"] == 100
    assert len({q.key for q in grid}) == len(grid) == 8


def test_point_key_follows_the_resolved_scenario_only():
    a = points(parse_sweep({"base": BASE, "axes": {"fabric.oversub": [1, 2]}}))
    b = points(parse_sweep({"name": "other", "base": BASE, "axes": {"fabric.oversub": [2]}}))
    assert a[1].key == b[0].key and a[0].key != a[1].key


def test_a_bad_value_names_its_point_and_field():
    with pytest.raises(SweepError, match=r"fabric.oversub=0.*fabric.oversub: Input should be "
                       r"greater than 0"):
        parse_sweep({"name": "s", "base": BASE, "axes": {"fabric.oversub": [1, 0]}})


@pytest.mark.parametrize("data, message", [
    ({"axes": {}}, "base: missing"),
    ({"base": "no-such-scenario"}, "no scenario file or built-in scenario named"),
    ({"base": "hetero-default", "axes": {"fabric.oversub": []}}, "non-empty list"),
    ({"base": "hetero-default", "axes": {"m": {"a": 1}}}, "each label maps to fields"),
    ({"base": "hetero-default", "seeds": "many"}, "seeds: give a count or a list"),
    ({"base": "hetero-default", "axis": {}}, r"unknown field\(s\) \['axis'\]"),
])
def test_bad_sweep_files_get_clear_messages(data, message):
    with pytest.raises(SweepError, match=message):
        parse_sweep(data, "f.yaml")


def test_builtin_paper_sweep_is_ice_vs_baselines_over_oversub_and_nic_mix():
    assert "oversub-nicmix" in builtin_sweeps()
    spec = load_sweep("oversub-nicmix")
    assert spec.axis_names == ["fabric.oversub", "nic_mix", "seed"]
    grid = points(spec)
    assert len(grid) == 3 * 3 * 3
    scn = grid[0].scenario
    assert scn["name"] == "hetero-default"
    assert scn["policies"][:5] == ["ecmp", "ecmp-tuned", "ecmp-multiqp", "spray", "ice"]
    speeds = {p.labels["nic_mix"]: [pool.get("nic_gbps") for pool in p.scenario["pools"]]
              for p in grid}
    assert speeds == {"400G+200G": [None, None], "400G+100G": [None, 100],
                      "200G+200G": [200, None]}


def test_sweep_file_base_path_is_relative_to_the_file(tmp_path):
    (tmp_path / "base.yaml").write_text(builtin_text("homog-small"))
    (tmp_path / "s.yaml").write_text("base: base.yaml\naxes: {fabric.spines: [2, 4]}\n")
    spec = load_sweep(tmp_path / "s.yaml")
    assert spec.name == "s" and [p.scenario["fabric"]["spines"] for p in points(spec)] == [2, 4]
