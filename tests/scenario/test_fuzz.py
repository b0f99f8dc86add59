"""Mutants of the built-in scenarios never crash, hang or eat memory (issue 23).

Hypothesis (fixed seed: ``derandomize``) draws at least :data:`N_MUTANTS` distinct mutants:
one to three edits of a built-in scenario, each setting a field to a hostile value (huge,
negative, non-finite, of the wrong type), deleting it or repeating a list item. Every mutant
goes through ``icefab scenario check`` and every :data:`SIMULATE_EVERY`-th through a small
``icefab simulate``, in capped worker processes (:mod:`tests.fuzz`): exit 0, or exit 2 with
one ``error:`` line; never a traceback, never past 60 s or 2 GiB.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from icefabric.scenario.loader import builtin_names, builtin_text

from ..fuzz import run_cases

N_MUTANTS = 300
SIMULATE_EVERY = 10
#: the memory guard refuses what would not fit the workers' cap (icefabric.scenario.budget)
ENV = {"ICEFAB_MEMORY_LIMIT": "512MiB"}
# Values a careless user or an attacker writes: the cases and their neighbours.
HOSTILE = [0, -1, -4, 1, 2, 3, 7, 64, 65, 1000, 2**31, 2**63, 2**64, 2**70, 10**12, -10**9,
           1e12, 1e-300, 0.5, -0.0, float("inf"), float("-inf"), float("nan"), True, None,
           "", "x", "1GiB", "1MiB", "0", "-4", "1e400", "8", [], [1], {}, {"min": 0},
           {"min": "1GiB", "max": "1MiB"}, ["leaf0", "spine0"], "../../etc/passwd", "a\nb"]
EDITS = st.tuples(st.sampled_from(["set", "set", "set", "delete", "repeat"]),
                  st.integers(0, 1 << 16), st.sampled_from(HOSTILE))


def _leaves(node, path=()):
    """Paths of every value in a YAML document (mappings and sequences included)."""
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _leaves(v, path + (i,))
    return out


def mutate(name: str, edits: list[tuple[str, int, object]]) -> str:
    doc = yaml.safe_load(builtin_text(name))
    for op, at, value in edits:
        paths = [p for p in _leaves(doc) if p]
        path = paths[at % len(paths)]
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        if op == "set":
            parent[key] = copy.deepcopy(value)
        elif op == "delete":
            del parent[key]
        elif isinstance(parent[key], list) and parent[key]:
            parent[key].append(copy.deepcopy(parent[key][at % len(parent[key])]))
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def mutants(n: int) -> list[tuple[str, str]]:
    """``n`` distinct (built-in name, mutant text) pairs, the same on every run."""
    found: dict[str, str] = {}

    @settings(max_examples=3 * n, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(st.sampled_from(builtin_names()), st.lists(EDITS, min_size=1, max_size=3))
    def draw(name, edits):
        if len(found) < n:
            found.setdefault(mutate(name, edits), name)

    draw()
    return [(name, text) for text, name in found.items()]


def _flow_builtin(name: str) -> bool:
    return yaml.safe_load(builtin_text(name)).get("engine", "flow") == "flow"


@pytest.mark.slow
def test_scenario_mutants_exit_0_or_2_with_one_line(tmp_path: Path):
    found = mutants(N_MUTANTS)
    assert len(found) == N_MUTANTS
    cases = []
    for k, (name, text) in enumerate(found):
        path = tmp_path / f"m{k:03d}-{name}.yaml"
        path.write_text(text)
        cases.append(["scenario", "check", str(path)])
        if k % SIMULATE_EVERY == 0 and _flow_builtin(name):
            cases.append(["simulate", str(path), "--sizes", "64K", "-p", "ecmp,spray,ideal",
                          "-n", "2", "-q"])
    outcomes = run_cases(cases, env=ENV)
    bad = [(o.argv, o.problem()) for o in outcomes if o.problem()]
    assert not bad, "\n\n".join(f"{argv}: {why}" for argv, why in bad[:5])
    # both answers happen: the mutants are not all refused, nor all accepted
    codes = [o.exit_code for o in outcomes]
    assert codes.count(0) >= 20 and codes.count(2) >= 100, codes
    simulated = [o for o in outcomes if o.argv[0] == "simulate"]
    assert len(simulated) >= 20 and any(o.exit_code == 0 for o in simulated)
    print(f"\nscenario fuzz: {len(found)} mutants, {len(cases)} runs "
          f"({len(simulated)} simulate): exit 0 {codes.count(0)}, exit 2 {codes.count(2)}, "
          f"slowest {max(o.seconds for o in outcomes):.1f} s, peak RSS "
          f"{max(o.peak_rss for o in outcomes) / 2**30:.2f} GiB")
