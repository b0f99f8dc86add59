"""One iteration through the flow engine, against hand-computed times: compute only,
communication only, gradient buckets hidden behind the backward pass (or not), a 1F1B
pipeline; the analytic model's plans end to end."""

import math

import numpy as np
import pytest

from icefabric.pipeline import EngineOptions, plan
from icefabric.pipeline import simulate as run
from icefabric.policies.base import get_policy
from icefabric.topology.model import ACCEL
from icefabric.training.breakdown import device_times, mean_time
from icefabric.training.compute import ADAM_BYTES_PER_PARAM
from icefabric.training.iteration import build_iteration
from icefabric.training.mapping import TrainingError
from icefabric.training.passes import Segment, StagePasses
from icefabric.training.spec import TrainingSpec

from .conftest import fabric

H100_ADAM_NS_PER_PARAM = ADAM_BYTES_PER_PARAM / (3.35e12 * 0.8) * 1e9  # default efficiency
NIC_BPS = 400e9
SAME_LEAF_DELAY_NS = 2 * 500  # NIC -> leaf -> NIC, 500 ns each
STEP_NS = 1000  # per-step software overhead


def spec(**parallel):
    parallel.setdefault("global_batch", 1)
    return TrainingSpec.model_validate({"pools": ["h100"], "model": "llama3-8b",
                                        "parallel": parallel})


def simulate(fab, tw, policy="ecmp"):
    return run(plan(fab, tw.workload, get_policy(policy)), EngineOptions())


def gpus(fab, per_server):
    return [a for s in fab.servers for a in s.accels[:per_server]]


def opt_ns(params):
    return int(round(params * H100_ADAM_NS_PER_PARAM))


def dp_allreduce_ns(params):
    """Two ranks on one leaf, fp32 gradients, 2 ring channels sharing the 400G NIC: each
    channel moves half the buffer at 200 Gb/s; 2 ring steps of latency."""
    return math.ceil(4 * params * 8e9 / NIC_BPS) + 2 * (SAME_LEAF_DELAY_NS + STEP_NS)


def test_compute_only():
    fab = fabric(("hgx-h100", 1, "h100"))
    passes = [StagePasses([Segment(1e-3)], [Segment(2e-3, dense_params=1e6)], (1e6, 0.0))]
    tw = build_iteration(fab, gpus(fab, 1), spec(global_batch=4), passes=passes)
    res = simulate(fab, tw)
    assert res.makespan_ns == 4 * (1_000_000 + 2_000_000) + opt_ns(1e6)
    (t,) = device_times(tw.tasks, res.flow_start_ns, res.flow_finish_ns, res.makespan_ns)
    assert t.compute_s * 1e9 == pytest.approx(res.makespan_ns) and t.exposed_s == {}


def test_communication_only():
    fab = fabric(("hgx-h100", 2, "h100"))
    P = 25e6
    passes = [StagePasses([], [Segment(0.0, dense_params=P)], (P, 0.0))]
    tw = build_iteration(fab, gpus(fab, 1), spec(global_batch=2, zero=0,
                                                 overlap_grad_reduce=False), passes=passes)
    res = simulate(fab, tw)
    assert res.makespan_ns == dp_allreduce_ns(P) + opt_ns(P)
    t = mean_time(device_times(tw.tasks, res.flow_start_ns, res.flow_finish_ns,
                               res.makespan_ns))
    assert t.exposed_s["dp"] * 1e9 == pytest.approx(dp_allreduce_ns(P))


@pytest.mark.parametrize("c2_ms", [3.0, 0.5])
def test_gradient_bucket_overlaps_the_backward_pass(c2_ms):
    fab = fabric(("hgx-h100", 2, "h100"))
    P1, P2 = 25e6, 12.5e6  # 2 ms and 1 ms of all-reduce
    f, c1, c2 = 1e-3, 1e-3, c2_ms * 1e-3
    passes = [StagePasses([Segment(f)], [Segment(c1, dense_params=P1),
                                         Segment(c2, dense_params=P2)], (P1 + P2, 0.0))]
    tw = build_iteration(fab, gpus(fab, 1), spec(global_batch=2, zero=0, bucket_params=P1),
                         passes=passes)
    res = simulate(fab, tw)
    t1, t2 = dp_allreduce_ns(P1), dp_allreduce_ns(P2)
    # bucket 2 starts when its gradients exist and bucket 1 is done
    end = int(1e9 * (f + c1)) + max(int(c2 * 1e9), t1) + t2
    assert res.makespan_ns == end + opt_ns(P1 + P2)


def test_1f1b_pipeline_of_two_stages():
    fab = fabric(("hgx-h100", 1, "h100"))
    f, b = 1e-3, 2e-3
    stage = StagePasses([Segment(f)], [Segment(b, dense_params=1e6)], (1e6, 0.0))
    tw = build_iteration(fab, gpus(fab, 2), spec(pp=2, global_batch=2),
                         passes=[stage, stage])
    res = simulate(fab, tw)
    # activations of one micro-batch (8192 x 4096 bf16) over NVLink (3.6 Tb/s), plus the
    # scale-up hops' and the step's latency
    c = math.ceil(8192 * 4096 * 2 * 8e9 / 3.6e12 - 1e-6) + 2 * 500 + STEP_NS
    # stage 0 runs F0 F1 B0 B1; B0 waits for stage 1's F0 B0 and the sends between:
    # 3 forward, 3 backward and 3 transfers on the critical path
    assert res.makespan_ns == 3 * (1_000_000 + 2_000_000) + 3 * c + opt_ns(1e6)
    times = device_times(tw.tasks, res.flow_start_ns, res.flow_finish_ns, res.makespan_ns)
    for t in times:
        total = t.compute_s + t.exposed_total_s + t.bubble_s
        assert total * 1e9 == pytest.approx(res.makespan_ns)
    assert times[0].compute_s * 1e9 == pytest.approx(2 * 3_000_000 + opt_ns(1e6))


def test_layer_and_stage_granularity_agree(h100x4):
    fab = h100x4
    out = {}
    for g in ("stage", "layer"):
        s = TrainingSpec.model_validate({
            "pools": ["h100"], "model": {"preset": "llama3-8b", "layers": 4},
            "parallel": {"tp": 8, "pp": 2, "global_batch": 4}, "granularity": g})
        tw = build_iteration(fab, fab.nodes_of_kind(ACCEL), s)
        out[g] = simulate(fab, tw).makespan_ns, tw.workload.n_flows
    assert out["layer"][1] > out["stage"][1]
    assert out["layer"][0] == pytest.approx(out["stage"][0], rel=1e-5)  # ns rounding


def test_moe_with_expert_parallelism(h100x4):
    fab = h100x4
    s = TrainingSpec.model_validate({
        "pools": ["h100"], "model": {"preset": "mixtral-8x7b", "layers": 2},
        "parallel": {"tp": 8, "ep": 2, "global_batch": 4, "zero": 1}})
    tw = build_iteration(fab, fab.nodes_of_kind(ACCEL), s)
    kinds = {tw.tasks.kind_name(i) for i in range(tw.tasks.n_tasks)}
    assert {"ep", "dp", "tp", "forward", "backward", "optimizer"} <= kinds
    # expert gradients reduce over the 2 replicas that hold the same experts
    jobs = {c.job for c in tw.workload.collectives}
    assert any(j.startswith("train/edp/") for j in jobs)
    assert simulate(fab, tw).makespan_ns > 0


def test_plan_errors(h100x4):
    fab = h100x4
    acc = fab.nodes_of_kind(ACCEL)
    with pytest.raises(TrainingError, match="global_batch 6 is not a multiple of micro_batch "
                       r"x dp = 4"):
        build_iteration(fab, acc, spec(tp=8, global_batch=6))
    with pytest.raises(TrainingError, match="ep 2 on a dense model"):
        build_iteration(fab, acc, spec(tp=8, ep=2, global_batch=4))
    with pytest.raises(TrainingError, match="1 stage passes given for 2 stages"):
        build_iteration(fab, acc, spec(tp=8, pp=2, global_batch=2),
                        passes=[StagePasses([], [], (0.0, 0.0))])


def test_heterogeneous_pipeline_crosses_vendors(hetero):
    s = TrainingSpec.model_validate({
        "pools": ["h100", "ascend"], "model": "llama3-8b", "stage_layers": "balanced",
        "parallel": {"tp": 8, "pp": 2, "global_batch": 4}})
    tw = build_iteration(hetero, hetero.nodes_of_kind(ACCEL), s)
    st = tw.summary["stages"]
    assert [x["accelerator"] for x in st] == ["H100 SXM", "Ascend 910B"]
    assert st[0]["layers"] > st[1]["layers"]  # the faster accelerator takes more layers
    libs = {c.library for c in tw.workload.collectives}
    assert {"nccl", "hccl"} <= libs
    # pipeline transfers go GPU NIC -> NPU port
    wl = tw.workload
    pp = np.flatnonzero(np.isin(wl.conn_job, [j for j in set(wl.conn_job) if "/pp/" in j]))
    assert len(pp)
