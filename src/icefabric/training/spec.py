"""The ``training:`` job of a scenario: model, parallelism plan, where it runs, how detailed.

Pydantic models, validated like the rest of the scenario (unknown fields are errors). The
defaults follow Megatron-LM's:

* rank order ``tp-cp-ep-dp-pp`` (tensor parallel fastest, pipeline slowest), so a tensor
  group sits inside a server and pipeline stages follow the servers' order
  (``megatron/core/parallel_state.py``);
* data-parallel gradients reduced in fp32 for bf16 training (``arguments.py``: "bfloat16
  requires gradient accumulation and all-reduce to be done in fp32"), parameters gathered
  in bf16 by the distributed optimizer;
* gradient buckets of ``max(40,000,000, 1,000,000 x dp)`` parameters, launched as the last
  micro-batch's backward produces them when ``overlap_grad_reduce`` is on, one bucket after
  the backward otherwise (``megatron/core/distributed/distributed_data_parallel.py``);
* pipeline point-to-point over 2 NCCL channels per peer (``ncclTopoGetNchannels``, NET
  branch, ``nNetChannels = 2`` up to NCCL 2.28) and data-parallel rings of one rank per
  server over 2 channels (the ``N coll channels`` NCCL logs for such communicators, e.g.
  ``../shared/reference/ccl-logs/vllm-8447``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from icefabric.training.model import PRESETS, ModelSpec, model_preset


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelChoice(_Strict):
    """A preset (``preset``) with optional field overrides, or a full description."""

    preset: str | None = None
    name: str | None = None
    layers: int | None = Field(None, ge=1)
    hidden: int | None = Field(None, ge=1)
    ffn_hidden: int | None = Field(None, ge=1)
    heads: int | None = Field(None, ge=1)
    kv_heads: int | None = Field(None, ge=1)
    vocab: int | None = Field(None, ge=1)
    seq_len: int | None = Field(None, ge=1)
    gated_mlp: bool | None = None
    head_dim: int | None = Field(None, ge=0)
    v_head_dim: int | None = Field(None, ge=0)
    attn_proj_params: int | None = Field(None, ge=0)
    experts: int | None = Field(None, ge=0)
    top_k: int | None = Field(None, ge=0)
    moe_ffn_hidden: int | None = Field(None, ge=0)
    shared_experts: int | None = Field(None, ge=0)
    dense_layers: int | None = Field(None, ge=0)
    tied_embeddings: bool | None = None

    def resolve(self) -> ModelSpec:
        fields = {k: v for k, v in self.model_dump().items()
                  if v is not None and k != "preset"}
        if self.preset is not None:
            return model_preset(self.preset).with_overrides(**fields)
        fields.setdefault("name", "custom")
        return ModelSpec(**fields)


class ParallelSpec(_Strict):
    """Parallelism plan and training-step settings (Megatron-LM names in parentheses)."""

    tp: int = Field(1, ge=1, description="tensor parallel size (--tensor-model-parallel-size)")
    pp: int = Field(1, ge=1, description="pipeline stages (--pipeline-model-parallel-size)")
    dp: int | None = Field(None, ge=1, description="data-parallel replicas; default: the "
                           "job's accelerators / (tp x pp)")
    ep: int = Field(1, ge=1, description="expert parallel size (--expert-model-parallel-size)"
                    "; carved out of the data-parallel ranks")
    micro_batch: int = Field(1, ge=1, description="sequences per micro-batch")
    global_batch: int = Field(description="sequences per iteration (--global-batch-size)",
                              ge=1)
    seq_len: int | None = Field(None, ge=1, description="default: the model's")
    schedule: Literal["1f1b", "gpipe"] = "1f1b"
    zero: Literal[0, 1, 2] = Field(
        1, description="0: all-reduce gradients, full optimizer on every replica; 1/2: "
        "distributed optimizer (reduce-scatter gradients, update a 1/dp shard, all-gather "
        "parameters); stage 2 moves the same bytes as 1")
    sequence_parallel: bool = Field(True, description="Megatron sequence parallelism (tensor "
                                    "all-gather/reduce-scatter instead of all-reduce)")
    recompute: Literal["none", "selective", "full"] = "none"
    flash_attention: bool = Field(True, description="fused causal attention (half the "
                                  "score FLOPs, no score matrix in memory)")
    overlap_grad_reduce: bool = True
    bucket_params: int | None = Field(None, ge=1, description="parameters per gradient "
                                      "bucket; default max(4e7, 1e6 x dp)")
    grad_bytes: int = Field(4, ge=1, description="bytes per gradient element reduced")
    param_bytes: int = Field(2, ge=1, description="bytes per parameter/activation element")
    pp_channels: int = Field(2, ge=1, le=64)
    dp_channels: int = Field(2, ge=1, le=64)


class TrainingSpec(_Strict):
    """One training job: where it runs, the model, the plan, and the device efficiency."""

    name: str = Field("train", pattern=r"^[A-Za-z][\w.-]*$")
    servers: list[str] | None = None
    pools: list[str] | None = None
    ranks_per_server: int | None = Field(None, ge=1)
    model: str | ModelChoice | None = Field(
        None, description=f"preset name ({', '.join(sorted(PRESETS))}) or a mapping with "
        "'preset' and overrides")
    parallel: ParallelSpec | None = None
    stage_layers: list[int] | Literal["even", "balanced"] = Field(
        "even", description="layers per pipeline stage: a list, 'even', or 'balanced' "
        "(proportional to each stage's accelerator throughput)")
    compute_efficiency: float = Field(
        0.75, gt=0, le=1, description="fraction of the accelerator's peak FLOP/s that matrix "
        "multiplications reach [UNCONFIRMED default: typical large-GEMM efficiency]")
    memory_efficiency: float = Field(0.8, gt=0, le=1, description="fraction of the HBM "
                                     "bandwidth memory-bound kernels reach")
    granularity: Literal["stage", "layer"] = Field(
        "stage", description="'layer': one compute step and one collective per layer "
        "block; 'stage': one per pipeline pass with the same bytes and summed latencies")
    chakra: list[str] | None = Field(
        None, description="Chakra ET files (one per rank) that drive the job instead of the "
        "analytic model: compute nodes become delays, communication nodes transfers")

    @field_validator("model")
    @classmethod
    def _known_model(cls, v):
        if v is not None:
            model_preset(v) if isinstance(v, str) else v.resolve()  # raises with the reason
        return v

    @model_validator(mode="after")
    def _where(self):
        if (self.servers is None) == (self.pools is None):
            raise ValueError("give exactly one of 'servers' or 'pools'")
        if self.chakra is None and (self.model is None or self.parallel is None):
            raise ValueError("give 'model' and 'parallel' (or 'chakra' traces)")
        if self.chakra is not None and (self.model is not None or self.parallel is not None):
            raise ValueError("'chakra' traces replace 'model' and 'parallel'; give one or "
                             "the other")
        return self

    def model_spec(self) -> ModelSpec:
        if isinstance(self.model, str):
            return model_preset(self.model)
        return self.model.resolve()
