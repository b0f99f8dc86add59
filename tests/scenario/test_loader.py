import pytest

from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric, build_training
from icefabric.scenario.loader import ScenarioError, builtin_names, builtin_text, load, loads

GOOD = """\
name: t
fabric:
  kind: leaf-spine
  servers_per_leaf: 2
  spines: 2
pools:
  - {name: h, server: hgx-h100, count: 2}
jobs:
  - name: j
    pools: [h]
    collectives:
      - {kind: all_reduce}
sizes: [1M]
"""


def test_builtins_load_and_build():
    assert {"hetero-default", "homog-small"} <= set(builtin_names())
    for name in builtin_names():
        ls = load(name)
        f = build_fabric(ls)
        if ls.scenario.jobs:
            w = scenario_workload(ls, f, ls.scenario.size_list()[0]).workload
        else:  # a training-only scenario
            w = build_training(ls, f).workload
        assert w.n_flows > 0


def test_good_scenario():
    ls = loads(GOOD, "t.yaml")
    assert ls.scenario.size_list() == [1 << 20]


@pytest.mark.parametrize("text,line,field,msg", [
    (GOOD.replace("  spines: 2", "  spines: 2\n  spine: 3"), 6, "fabric.spine",
     "unknown field"),
    (GOOD.replace("count: 2", "count: two"), 7, "pools[0].count", "valid integer"),
    (GOOD.replace("kind: all_reduce", "kind: allsort"), 12, "jobs[0].collectives[0].kind",
     "Input should be"),
    (GOOD.replace("  spines: 2\n", ""), 2, "fabric", "needs 'spines'"),
    ("name: [unclosed", 1, "", "invalid YAML"),
])
def test_schema_errors_name_field_and_line(text, line, field, msg):
    with pytest.raises(ScenarioError) as e:
        loads(text, "t.yaml")
    err = e.value
    assert err.line == line and err.field == field and msg in str(err)
    assert str(err).startswith(f"t.yaml:{line}: ")


def test_more_servers_than_leaf_ports():
    ls = loads(GOOD.replace("count: 2", "count: 40").replace("servers_per_leaf: 2",
                                                              "servers_per_leaf: 40"), "t.yaml")
    with pytest.raises(ScenarioError, match=r"t.yaml:2: fabric: .*radix"):
        build_fabric(ls)


def test_job_on_missing_server():
    text = GOOD.replace("    pools: [h]", "    servers: [h-0, h-7]")
    ls = loads(text, "t.yaml")
    f = build_fabric(ls)
    with pytest.raises(ScenarioError) as e:
        scenario_workload(ls, f, 1 << 20)
    assert e.value.field == "jobs[0].servers[1]" and e.value.line == 10
    assert "'h-7' does not exist" in str(e.value)


def test_unknown_profile_and_overlapping_jobs():
    ls = loads(GOOD.replace("hgx-h100", "dgx-h900"), "t.yaml")
    with pytest.raises(ScenarioError, match="pools\\[0\\].server: unknown server profile"):
        build_fabric(ls)
    two = GOOD + "  - name: k\n    pools: [h]\n    collectives: [{kind: all_gather}]\n"
    two = two.replace("sizes: [1M]\n", "") + "sizes: [1M]\n"
    ls = loads(two, "t.yaml")
    with pytest.raises(ScenarioError, match="also used by job 'j'"):
        scenario_workload(ls, build_fabric(ls), 1 << 20)


def test_missing_file_and_unknown_name():
    with pytest.raises(ScenarioError, match="cannot read"):
        load("/nonexistent/x.yaml")
    with pytest.raises(ScenarioError, match="built-ins"):
        load("no-such-scenario")


def test_builtin_text_is_valid_yaml_for_copy_and_edit():
    assert "name: hetero-default" in builtin_text("hetero-default")
