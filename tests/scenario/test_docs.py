"""docs/scenarios.md is generated from the schema and kept up to date."""

from pathlib import Path

from icefabric.scenario.docs import _all_models, _fields, scenario_docs

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"


def test_committed_page_is_up_to_date():
    assert DOC.read_text() == scenario_docs(), (
        "docs/scenarios.md is stale: run icefab scenario docs --out docs/scenarios.md")


def test_every_field_of_every_section_is_documented():
    text = scenario_docs()
    names = [m.__name__ for m in _all_models()]
    assert names[:3] == ["Scenario", "FabricSpec", "PoolSpec"]
    assert {"ScenarioJob", "SizesSpec", "EngineOptions", "PfcParams"} <= set(names)
    for m in _all_models():
        section = text.split(f"## {m.__name__}\n", 1)[1].split("\n## ", 1)[0]
        for f in _fields(m):
            assert f"| `{f.name}` |" in section, (m.__name__, f.name)


def test_rows_carry_unit_default_limits_and_example():
    text = scenario_docs()
    row = next(line for line in text.splitlines() if line.startswith("| `host_delay_ns` |"))
    assert row.split(" | ")[2:5] == ["`500`", "ns", "≥ 0, ≤ 10000000"]
    spines = next(line for line in text.splitlines() if line.startswith("| `spines` |"))
    assert "`8`" in spines  # the built-in default's value as the example
    nic = next(line for line in text.splitlines() if line.startswith("| `nic_gbps` |"))
    assert "Gb/s" in nic and "override the profile's NIC speed" in nic
