"""Stage passes: the collectives a layer runs, merging, gradient buckets."""

import pytest

from icefabric.topology.catalog import ACCELERATORS
from icefabric.training.compute import Roofline
from icefabric.training.model import model_preset
from icefabric.training.passes import (
    Comm,
    Segment,
    StageSpan,
    bucket_groups,
    merge,
    stage_passes,
)
from icefabric.training.spec import ParallelSpec

ROOF = Roofline.of(ACCELERATORS["H100 SXM"], 0.75, 0.8)


def kinds(segments):
    return [(c.group, c.kind) for s in segments for c in s.comms]


def test_tensor_collectives_per_layer():
    m = model_preset("llama3-8b")
    act = 8192 * m.hidden * 2
    sp = stage_passes(m, ParallelSpec(tp=8, global_batch=1), 8192,
                      StageSpan(range(0, 2), True, False), ROOF)
    # embedding reduce-scatter, then per layer and block: all-gather + reduce-scatter
    assert kinds(sp.forward) == [("tp", "reduce_scatter")] + [("tp", "all_gather"),
                                                              ("tp", "reduce_scatter")] * 4
    assert kinds(sp.backward) == [("tp", "all_gather"), ("tp", "reduce_scatter")] * 4
    assert {c.size_bytes for s in sp.forward for c in s.comms} == {act}
    no_sp = stage_passes(m, ParallelSpec(tp=8, global_batch=1, sequence_parallel=False), 8192,
                         StageSpan(range(0, 2), False, False), ROOF)
    assert kinds(no_sp.forward) == [("tp", "all_reduce")] * 4
    full = stage_passes(m, ParallelSpec(tp=8, global_batch=1, sequence_parallel=False,
                                        recompute="full"), 8192,
                        StageSpan(range(0, 2), False, True), ROOF)
    assert kinds(full.backward) == [("tp", "all_reduce")] * 8  # recomputed forward too
    assert kinds(stage_passes(m, ParallelSpec(global_batch=1), 8192,
                              StageSpan(range(2), True, True), ROOF).forward) == []


def test_expert_all_to_all_and_gradients():
    m = model_preset("mixtral-8x7b").with_overrides(layers=2)
    sp = stage_passes(m, ParallelSpec(tp=1, ep=4, global_batch=1), 4096,
                      StageSpan(range(2), True, True), ROOF)
    assert kinds(sp.forward) == [("ep", "alltoall")] * 4
    a2a = {c.size_bytes for s in sp.forward for c in s.comms}
    assert a2a == {4096 * m.top_k * m.hidden * 2}
    dense = sum(s.dense_params for s in sp.backward)
    expert = sum(s.expert_params for s in sp.backward)
    assert expert == 2 * m.experts * m.expert_params / 4
    assert dense + expert == pytest.approx(sum(sp.optimizer_params))
    assert sum(sp.optimizer_params) * 1 == pytest.approx(
        sum(sum(m.layer_params(i)) for i in range(2)) - 2 * m.experts * m.expert_params * 3 / 4
        + 2 * m.embedding_params)


def test_merge_sums_work_and_counts_collectives():
    a = Segment(1.0, (Comm("tp", "all_reduce", 10.0),), dense_params=5)
    b = Segment(2.0, (Comm("tp", "all_reduce", 30.0), Comm("ep", "alltoall", 7.0)))
    m = merge([a, b])
    assert m.compute_s == 3.0 and m.dense_params == 5
    assert m.comms == (Comm("tp", "all_reduce", 40.0, 2), Comm("ep", "alltoall", 7.0, 1))


def test_bucket_groups_close_when_full():
    segs = [Segment(1, dense_params=p) for p in (3, 3, 3, 0, 5)] + [Segment(1)]
    groups = bucket_groups(segs, 6)
    assert [len(g) for g in groups] == [2, 4]
    assert [sum(s.dense_params for s in g) for g in groups] == [6, 8]
    assert bucket_groups(segs, float("inf")) == [segs]
