"""The run recipe: a policy's rules for a run (its fabric, QPs per connection, which
failures it sees, its engine options) decided in one place, and the draws planning
through it as every other front end does."""

import numpy as np
import pytest

from icefabric.engine.problem import EngineError
from icefabric.experiment.draws import draw_fabrics, draw_plans, draw_seeds
from icefabric.pipeline.plans import scenario_link_changes, scenario_workload
from icefabric.pipeline.recipe import RunSpec
from icefabric.pipeline.simulation import simulate_batch
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load

SIZE = 16 << 20


@pytest.fixture(scope="module")
def failing():
    """8 servers, one leaf-spine cable pair failing 200 µs in (flow engine)."""
    ls = load("suite-link-failure")
    return ls, build_fabric(ls)


def test_ideal_runs_on_its_twin_without_the_failures_on_the_flow_engine(failing):
    ls, fabric = failing
    ideal = RunSpec.of(ls, fabric, "ideal", engine="fluid")
    assert ideal.run_fabric is not fabric
    assert ideal.run_fabric.describe()["nodes"] != fabric.describe()["nodes"]
    assert ideal.link_changes == ()  # the twin has no leaf0-spine3 cables to fail
    assert ideal.options.engine == "flow"  # a bound of the max-min flow engine
    p = ideal.size_plan(SIZE)
    assert p.fabric is ideal.run_fabric and p.events == ()


def test_a_policy_on_the_real_fabric_re_plans_at_the_scenario_failures(failing):
    ls, fabric = failing
    ice = RunSpec.of(ls, fabric, "ice", engine="fluid", trace=True)
    want = scenario_link_changes(ls, fabric)
    assert [(c.t_ns, c.links.tolist()) for c in ice.link_changes] == \
        [(c.t_ns, c.links.tolist()) for c in want] and want
    assert ice.options.engine == "fluid" and ice.options.trace
    p = ice.size_plan(SIZE)
    assert [e.t_ns for e in p.events] == [c.t_ns for c in want]
    assert np.isfinite(p.paths.rate_bps).all()  # ICE paces every QP
    assert RunSpec.of(ls, fabric, "ice", failures=False).size_plan(SIZE).events == ()


def test_the_policy_sets_the_qps_per_connection(failing):
    ls, fabric = failing
    plain = scenario_workload(ls, fabric, SIZE).workload
    for name, k in (("ecmp", 1), ("ecmp-tuned", 2), ("ecmp-multiqp", 4)):
        wl = RunSpec.of(ls, fabric, name).workload(SIZE).workload
        assert wl.n_qps == k * plain.n_qps, name


def test_the_draws_plan_each_draw_as_the_recipe_plans_it(failing):
    """ECMP hashes all draws in one walk; each draw's plan, its failure re-plans included,
    is the one the recipe gives that draw's QPs on its own."""
    ls, fabric = failing
    spec = RunSpec.of(ls, fabric, "ecmp")
    seeds = draw_seeds(ls.scenario.seed, 3)
    fabrics = draw_fabrics(ls, fabric, seeds)
    assert all(f is fabric for f in fabrics)  # fixed hash seeds: the one-walk branch
    wl = spec.workload(SIZE).workload
    drawn = draw_plans(spec, fabrics, wl, seeds)
    for p, s in zip(drawn, seeds, strict=True):
        one = spec.plan(p.workload, seed=s)
        assert len(p.events) == len(one.events) == 1
        for a, b in [(p.paths, one.paths), (p.events[0].paths, one.events[0].paths)]:
            for name in ("sport", "route_indptr", "route_links", "rate_bps"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert len({p.paths.route_links.tobytes() for p in drawn}) > 1  # the draws differ
    assert not spec.batchable  # the batched engine has no link events
    with pytest.raises(EngineError, match="without link events"):
        simulate_batch(drawn)
