"""Pipeline schedules: every micro-batch once forward then once backward, Megatron's 1F1B
warm-up, GPipe's order."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefabric.training.schedule import BACKWARD, FORWARD, stage_ops


@given(st.integers(1, 8), st.integers(1, 12), st.sampled_from(["1f1b", "gpipe"]))
def test_every_micro_batch_runs_forward_then_backward(pp, m, schedule):
    for s in range(pp):
        ops = stage_ops(schedule, pp, s, m)
        assert sorted(ops) == sorted([(FORWARD, i) for i in range(m)]
                                     + [(BACKWARD, i) for i in range(m)])
        for i in range(m):
            assert ops.index((FORWARD, i)) < ops.index((BACKWARD, i))
        fwd = [i for k, i in ops if k == FORWARD]
        assert fwd == sorted(fwd)


def test_1f1b_warm_up_and_in_flight_limit():
    # stage s holds at most pp - s micro-batches' activations (Megatron's warm-up)
    for s in range(4):
        ops = stage_ops("1f1b", 4, s, 8)
        live = peak = 0
        for kind, _ in ops:
            live += 1 if kind == FORWARD else -1
            peak = max(peak, live)
        assert peak == 4 - s
    assert stage_ops("1f1b", 1, 0, 2) == [(FORWARD, 0), (BACKWARD, 0), (FORWARD, 1),
                                          (BACKWARD, 1)]
    assert stage_ops("gpipe", 2, 1, 2) == [(FORWARD, 0), (FORWARD, 1), (BACKWARD, 0),
                                           (BACKWARD, 1)]


def test_unknown_schedule():
    with pytest.raises(ValueError, match="unknown pipeline schedule 'zb'"):
        stage_ops("zb", 2, 0, 2)
