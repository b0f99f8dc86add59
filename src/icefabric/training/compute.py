"""Compute time of transformer layers on an accelerator: a roofline per kernel.

Every kernel of a layer is a (FLOPs, bytes) pair; its time is
``max(FLOPs / (peak_flops x compute_efficiency), bytes / (hbm_bandwidth x
memory_efficiency))`` — matrix multiplications are compute-bound at training sizes,
norms, residual additions and activations memory-bound. FLOP counts follow Narayanan et al.
(SC'21, §5.1: ``2 m k n`` per GEMM, backward twice the forward) and Korthikanti et al.
(arXiv 2205.05198: sequence parallelism shards the non-tensor-parallel kernels; selective
recomputation re-runs only the attention core, full recomputation the whole forward).
Per tensor-parallel rank, a layer's GEMMs are ``1/tp`` of the layer's; experts run on the
tokens routed to the rank (balanced routing: ``tokens x top_k`` expert tokens per rank).
"""

from __future__ import annotations

from dataclasses import dataclass

from icefabric.topology.catalog import AcceleratorProfile
from icefabric.training.model import ModelSpec
from icefabric.training.spec import ParallelSpec

#: bytes moved per locally-held parameter by a mixed-precision Adam step: read fp32
#: gradient, master weight, first and second moment (16 B), write master and moments back
#: and the bf16 copy (14 B)
ADAM_BYTES_PER_PARAM = 30


@dataclass(frozen=True)
class Roofline:
    """Achievable FLOP/s and bytes/s of one accelerator."""

    flops: float
    bytes_per_s: float

    @classmethod
    def of(cls, dev: AcceleratorProfile, compute_efficiency: float,
           memory_efficiency: float) -> Roofline:
        return cls(dev.peak_flops * compute_efficiency, dev.hbm_bytes_per_s * memory_efficiency)

    def seconds(self, flops: float, nbytes: float) -> float:
        return max(flops / self.flops, nbytes / self.bytes_per_s)

    def gemm(self, m: float, k: float, n: float, elt: int) -> float:
        """``(m x k) @ (k x n)`` in ``elt``-byte elements."""
        return self.seconds(2.0 * m * k * n, elt * (m * k + k * n + m * n))


@dataclass(frozen=True)
class LayerTimes:
    """Seconds per micro-batch of one layer on one rank: forward attention and MLP (or MoE)
    blocks, their backward, and what recomputation re-runs in the backward pass."""

    attn_fwd: float
    mlp_fwd: float
    attn_bwd: float
    mlp_bwd: float
    core_fwd: float  # attention scores/softmax/context only (selective recomputation)

    def recompute(self, mode: str) -> float:
        if mode == "full":
            return self.attn_fwd + self.mlp_fwd
        return self.core_fwd if mode == "selective" else 0.0


def layer_times(model: ModelSpec, layer: int, par: ParallelSpec, seq: int,
                roof: Roofline) -> LayerTimes:
    """Per-rank compute of ``layer`` for one micro-batch (see module docstring)."""
    tp, elt = par.tp, par.param_bytes
    T = par.micro_batch * seq  # tokens per micro-batch
    sp = par.sequence_parallel and tp > 1
    t_loc = T / tp if sp else T  # tokens a rank holds outside the tensor-parallel GEMMs
    h = model.hidden
    # attention: projections, core (QK^T, softmax, PV), output projection
    if model.attn_proj_params:
        width = model.attn_proj_params / h / tp
        proj = roof.gemm(T, h, width * 0.75, elt) + roof.gemm(T, width * 0.25, h, elt)
    else:
        q = model.heads * model.qk_dim / tp
        kv = model.kv_heads * model.qk_dim / tp
        proj = roof.gemm(T, h, q + 2 * kv, elt) + roof.gemm(T, model.heads * model.v_dim / tp,
                                                               h, elt)
    heads = model.heads / tp
    span = seq / 2 if par.flash_attention else seq  # fused causal kernels skip the masked half
    core_flops = 2.0 * T * span * heads * (model.qk_dim + model.v_dim)
    io = elt * T * heads * (2 * model.qk_dim + 2 * model.v_dim)
    if not par.flash_attention:  # scores written, softmaxed, dropped out and read back
        io += 4 * elt * par.micro_batch * heads * seq * seq
    core = roof.seconds(core_flops, io)
    elementwise = roof.seconds(0.0, elt * 6 * t_loc * h)  # norm, residual, dropout
    # MLP or experts
    if model.is_moe_layer(layer):
        k = model.top_k
        f = model.moe_ffn_hidden
        n_in = 2 * f if model.gated_mlp else f
        tokens = T / tp  # MoE with tensor parallelism needs sequence parallelism
        mlp = roof.gemm(tokens, h, model.experts, elt)  # router
        mlp += roof.gemm(tokens * k, h, n_in, elt) + roof.gemm(tokens * k, f, h, elt)
        if model.shared_experts:
            fs = f * model.shared_experts
            mlp += roof.gemm(tokens, h, 2 * fs if model.gated_mlp else fs, elt)
            mlp += roof.gemm(tokens, fs, h, elt)
        act = roof.seconds(0.0, elt * 3 * tokens * k * f)
    else:
        f = model.ffn_hidden / tp
        mlp = roof.gemm(T, h, 2 * f if model.gated_mlp else f, elt) + roof.gemm(T, f, h, elt)
        act = roof.seconds(0.0, elt * 3 * T * f)
    attn_fwd = proj + core + elementwise
    mlp_fwd = mlp + act + elementwise
    # backward: data and weight gradients of every GEMM, gradients of the core and of every
    # element-wise kernel (twice the forward)
    return LayerTimes(attn_fwd, mlp_fwd, 2 * attn_fwd, 2 * mlp_fwd, core)


def head_times(model: ModelSpec, par: ParallelSpec, seq: int, roof: Roofline
               ) -> tuple[float, float]:
    """(forward, backward) seconds of the output layer and loss on the last stage."""
    T = par.micro_batch * seq
    v = model.vocab / par.tp
    fwd = roof.gemm(T, model.hidden, v, par.param_bytes)
    fwd += roof.seconds(0.0, 3 * par.param_bytes * T * v)  # softmax cross-entropy
    return fwd, 2 * fwd


def optimizer_seconds(local_params: float, roof: Roofline) -> float:
    """One Adam step over the parameters a rank updates (memory-bound)."""
    return roof.seconds(0.0, ADAM_BYTES_PER_PARAM * local_params)
