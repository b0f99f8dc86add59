"""Every numeric field of a scenario has a domain: the mutants of issue 23 that crashed,
hung or ate memory are refused with one line naming the file position, field and limit."""

from __future__ import annotations

import copy

import pytest
import yaml

from icefabric.scenario.loader import ScenarioError, builtin_text, loads
from icefabric.scenario.schema import message_size
from icefabric.units import UnitError

BASE = yaml.safe_load(builtin_text("homog-small"))


def mutant(section: str | None, **fields) -> str:
    d = copy.deepcopy(BASE)
    target = d if section is None else (d["pools"][0] if section == "pool" else d[section])
    target.update(fields)
    return yaml.safe_dump(d, sort_keys=False)


@pytest.mark.parametrize("section, fields, says", [
    (None, {"seed": -1}, "seed: Input should be greater than or equal to 0"),
    (None, {"sizes": {"min": "1GiB", "max": "1MiB"}}, "sizes: sizes.min 1GiB exceeds "
     "sizes.max 1MiB"),
    (None, {"sizes": {"min": -4, "max": "1MiB"}}, "sizes.min: cannot parse size -4"),
    (None, {"sizes": {"min": 0, "max": "1MiB"}}, "sizes.min: message size 0 must be "
     "between 1 B and 1TiB"),
    (None, {"sizes": [8, "2TiB"]}, "sizes: message size '2TiB' must be between 1 B"),
    (None, {"sizes": list(range(1, 100))}, "sizes: 99 sizes listed; give 1 to 64"),
    ("fabric", {"oversub": float("inf")}, "fabric.oversub: Input should be a finite number"),
    ("fabric", {"host_delay_ns": 10**12}, "fabric.host_delay_ns: Input should be less than "
     "or equal to 10000000"),
    ("fabric", {"links_per_spine": 2**70}, "fabric.links_per_spine: Input should be less "
     "than or equal to 64"),
    ("fabric", {"spines": 10**12}, "fabric.spines: Input should be less than or equal to "
     "16384"),
    ("pool", {"count": 10**12}, "pools[0].count: Input should be less than or equal to "
     "131072"),
    ("pool", {"nic_gbps": float("inf")}, "pools[0].nic_gbps: Input should be a finite "
     "number"),
    ("pool", {"nic_gbps": float("nan")}, "pools[0].nic_gbps: Input should be a finite "
     "number"),
])
def test_issue_23_mutants_are_refused_naming_field_and_limit(section, fields, says):
    with pytest.raises(ScenarioError) as e:
        loads(mutant(section, **fields), "bad.yaml")
    msg = str(e.value)
    assert msg.startswith("bad.yaml:") and says in msg, msg
    assert "\n" not in msg


def test_engine_options_refuse_non_finite_numbers():
    text = mutant(None, engine_options={"packet_bytes": float("inf")})
    with pytest.raises(ScenarioError, match="engine_options.packet_bytes: Input should be a "
                       "finite number"):
        loads(text, "bad.yaml")


@pytest.mark.parametrize("value, size", [(8, 8), ("1K", 1024), ("1TiB", 1 << 40)])
def test_message_size_domain(value, size):
    assert message_size(value) == size


@pytest.mark.parametrize("value", [0, -1, "nan", "inf", "1e400", "2TiB"])
def test_message_size_outside_domain(value):
    with pytest.raises(UnitError):
        message_size(value)


def test_tiny_sizes_are_valid():
    assert loads(mutant(None, sizes=[1, 8]), "t.yaml").scenario.size_list() == [1, 8]
