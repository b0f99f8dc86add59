"""Roofline compute times: hand-computed kernels and Narayanan et al.'s FLOP count."""

import pytest

from icefabric.topology.catalog import AcceleratorProfile
from icefabric.training.compute import (
    ADAM_BYTES_PER_PARAM,
    Roofline,
    head_times,
    layer_times,
    optimizer_seconds,
)
from icefabric.training.model import model_preset
from icefabric.training.spec import ParallelSpec

# an accelerator whose memory never limits: every kernel takes FLOPs / peak
FLOPS_ONLY = AcceleratorProfile("test", "test", peak_flops=1e15, hbm_bytes_per_s=1e30,
                                hbm_bytes=1)


def test_gemm_is_compute_or_memory_bound():
    roof = Roofline(flops=1e12, bytes_per_s=1e12)
    assert roof.gemm(1024, 1024, 1024, 2) == pytest.approx(2 * 1024**3 / 1e12)
    assert roof.gemm(1, 4096, 4096, 2) == pytest.approx(2 * (4096 + 4096**2 + 4096) / 1e12)
    assert Roofline.of(FLOPS_ONLY, 0.5, 1.0).flops == 0.5e15


@pytest.mark.parametrize("tp", [1, 8])
def test_gpt_layer_flops_match_narayanan(tp):
    # Narayanan et al. (SC'21) §5.1: a GPT layer's forward is 24 b s h^2 + 4 b s^2 h FLOPs
    m = model_preset("gpt3-175b")
    b, s, h = 2, 2048, m.hidden
    par = ParallelSpec(tp=tp, micro_batch=b, global_batch=b, flash_attention=False)
    lt = layer_times(m, 0, par, s, Roofline.of(FLOPS_ONLY, 1.0, 1.0))
    assert lt.attn_fwd + lt.mlp_fwd == pytest.approx((24 * b * s * h**2 + 4 * b * s**2 * h)
                                                     / tp / 1e15)
    assert lt.attn_bwd + lt.mlp_bwd == pytest.approx(2 * (lt.attn_fwd + lt.mlp_fwd))
    assert lt.recompute("full") == lt.attn_fwd + lt.mlp_fwd
    assert lt.recompute("selective") == lt.core_fwd == pytest.approx(4 * b * s**2 * h / tp
                                                                     / 1e15)
    assert lt.recompute("none") == 0
    fwd, bwd = head_times(m, par, s, Roofline.of(FLOPS_ONLY, 1.0, 1.0))
    assert fwd == pytest.approx(2 * b * s * h * m.vocab / tp / 1e15) and bwd == 2 * fwd


def test_fused_causal_attention_halves_the_score_flops():
    m = model_preset("llama3-8b")
    roof = Roofline.of(FLOPS_ONLY, 1.0, 1.0)
    full = layer_times(m, 0, ParallelSpec(global_batch=1, flash_attention=False), 8192, roof)
    flash = layer_times(m, 0, ParallelSpec(global_batch=1), 8192, roof)
    assert flash.core_fwd == pytest.approx(full.core_fwd / 2)


def test_experts_compute_top_k_tokens_per_rank():
    m = model_preset("mixtral-8x7b")
    roof = Roofline.of(FLOPS_ONLY, 1.0, 1.0)
    par = ParallelSpec(ep=8, global_batch=1)
    moe = layer_times(m, 0, par, 4096, roof)
    dense = layer_times(m.with_overrides(experts=0, top_k=0, moe_ffn_hidden=0), 0, par, 4096,
                        roof)
    router = 2 * 4096 * m.hidden * m.experts / 1e15
    assert moe.mlp_fwd - router == pytest.approx(2 * dense.mlp_fwd)  # top-2, same width


def test_optimizer_is_memory_bound():
    roof = Roofline(1e15, 1e12)
    assert optimizer_seconds(1e9, roof) == pytest.approx(ADAM_BYTES_PER_PARAM * 1e9 / 1e12)
