"""Size budgets are checked from the file, before anything is built."""

from __future__ import annotations

import time

import pytest

from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.budget import MEMORY_LIMIT_ENV, Budget, check_budget, estimate
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import ScenarioError, builtin_names, load, loads
from icefabric.units import UnitError

BIG = """\
name: big
fabric: {{kind: leaf-spine, servers_per_leaf: 16, spines: 64}}
pools:
  - {{name: h, server: hgx-h100, count: {count}}}
jobs:
  - name: j
    pools: [h]
    collectives: [{{kind: {kind}}}]
sizes: [1M]
"""


@pytest.mark.parametrize("name", builtin_names())
def test_estimate_counts_what_the_builders_build(name):
    ls = load(name)
    size = estimate(ls)
    fabric = build_fabric(ls)
    assert size.servers == len(fabric.servers)
    assert size.switches == len(fabric.switches)
    assert size.links >= fabric.n_links
    if ls.scenario.jobs:
        wl = scenario_workload(ls, fabric, ls.scenario.size_list()[0]).workload
        assert size.qps >= wl.n_qps
    assert size.memory_bytes < Budget().memory_bytes


def test_too_many_servers_over_pools_is_refused_before_building():
    pools = "\n".join(f"  - {{name: p{i}, server: hgx-h100, count: 131072}}"
                      for i in range(2))
    text = BIG.format(count=1, kind="all_reduce").replace(
        "  - {name: h, server: hgx-h100, count: 1}", pools)
    t0 = time.process_time()
    with pytest.raises(ScenarioError) as e:
        build_fabric(loads(text, "big.yaml"))
    assert str(e.value) == ("big.yaml:3: pools: the scenario builds about 262,144 servers, "
                            "more than the budget of 131,072")
    assert time.process_time() - t0 < 5  # refused from the file: nothing was built


def test_alltoall_over_32768_ranks_names_its_job():
    with pytest.raises(ScenarioError, match=r"big.yaml:6: jobs\[0\]: the scenario builds "
                       r"about 1,073,709,056 QPs \(transfers of one size\), more than the "
                       r"budget of 67,108,864"):
        build_fabric(loads(BIG.format(count=4096, kind="alltoall"), "big.yaml"))


def test_memory_guard_and_its_override(monkeypatch):
    ls = loads(BIG.format(count=512, kind="alltoall"), "big.yaml")  # 4,096 ranks
    need = estimate(ls).memory_bytes
    assert need > Budget().memory_bytes
    with pytest.raises(ScenarioError, match=r"big.yaml:6: jobs\[0\]: the run needs about "
                       r"64.3 GiB of memory, more than the limit of 4.0 GiB "
                       rf"\({MEMORY_LIMIT_ENV}=64GiB raises it on a bigger machine\)"):
        check_budget(ls)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "128GiB")
    assert check_budget(ls).memory_bytes == need
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(UnitError, match=f"{MEMORY_LIMIT_ENV}: cannot parse size 'lots'"):
        check_budget(ls)


def test_draws_count_in_the_memory_estimate():
    ls = load("homog-small")
    one, many = estimate(ls, 1), estimate(ls, 100)
    assert many.memory_bytes - one.memory_bytes == 128 * 100 * one.qps
