"""Transformer model descriptions (dense and mixture-of-experts) and built-in presets.

A :class:`ModelSpec` holds what the compute and communication volumes of a training step
depend on: layers, hidden size, attention shape, feed-forward size, vocabulary, experts.
Parameter counts follow the layer structure (no bias terms; norms counted):

* attention projections ``h * (q + 2 kv) + q * h`` with ``q = heads * head_dim`` and
  ``kv = kv_heads * head_dim`` (grouped-query attention when ``kv_heads < heads``), or
  ``attn_proj_params`` when given (DeepSeek's multi-head latent attention);
* feed-forward ``3 h f`` for gated (SwiGLU) MLPs, ``2 h f`` otherwise;
* MoE layers: ``experts`` routed experts of ``3 h f_moe`` each, ``shared_experts`` more,
  and a router ``h * experts``; the first ``dense_layers`` layers stay dense;
* input embedding ``V h`` and output layer ``V h`` (one matrix when ``tied_embeddings``).

Every preset names the publication its figures come from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelSpec:
    """One transformer model.

    Attributes
    ----------
    layers, hidden, ffn_hidden, heads, kv_heads, vocab : int
    seq_len : int — the sequence length it was pre-trained with (a training job may override).
    gated_mlp : bool — SwiGLU-style MLP with three matrices (Llama, Mixtral, DeepSeek).
    head_dim : int — per-head query/key dimension (default ``hidden // heads``).
    v_head_dim : int — per-head value dimension (default ``head_dim``).
    attn_proj_params : int — attention projection parameters per layer when they do not
        follow the GQA formula (0 = use it).
    experts, top_k, moe_ffn_hidden, shared_experts, dense_layers : MoE shape (0 = dense).
    tied_embeddings : bool — input and output embeddings share one matrix (GPT-3).
    source : str — where the figures come from.
    """

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    seq_len: int
    gated_mlp: bool = True
    head_dim: int = 0
    v_head_dim: int = 0
    attn_proj_params: int = 0
    experts: int = 0
    top_k: int = 0
    moe_ffn_hidden: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    tied_embeddings: bool = False
    source: str = ""

    def __post_init__(self):
        for k in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len"):
            if getattr(self, k) < 1:
                raise ValueError(f"model {self.name!r}: {k} must be at least 1")
        if self.heads % self.kv_heads:
            raise ValueError(f"model {self.name!r}: heads ({self.heads}) must be a multiple "
                             f"of kv_heads ({self.kv_heads})")
        if self.experts and not (1 <= self.top_k <= self.experts and self.moe_ffn_hidden > 0):
            raise ValueError(f"model {self.name!r}: an MoE model needs 1 <= top_k <= experts "
                             "and moe_ffn_hidden > 0")
        if self.dense_layers > self.layers:
            raise ValueError(f"model {self.name!r}: dense_layers exceeds layers")

    # -- shape ------------------------------------------------------------------------------
    @property
    def qk_dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def v_dim(self) -> int:
        return self.v_head_dim or self.qk_dim

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and layer >= self.dense_layers

    # -- parameters -------------------------------------------------------------------------
    @property
    def attn_params(self) -> int:
        if self.attn_proj_params:
            return self.attn_proj_params
        q = self.heads * self.qk_dim
        kv = self.kv_heads * self.qk_dim
        return self.hidden * (q + 2 * kv) + self.heads * self.v_dim * self.hidden

    def mlp_params(self, ffn: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * ffn

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return self.mlp_params(self.moe_ffn_hidden) if self.is_moe else 0

    def layer_params(self, layer: int) -> tuple[int, int]:
        """(dense, expert) parameters of ``layer``: expert parameters are the routed experts'
        (sharded by expert parallelism); everything else is dense (norms included)."""
        norms = 2 * self.hidden
        if not self.is_moe_layer(layer):
            return self.attn_params + self.mlp_params(self.ffn_hidden) + norms, 0
        shared = self.shared_experts * self.expert_params
        router = self.hidden * self.experts
        return self.attn_params + shared + router + norms, self.experts * self.expert_params

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Total parameters."""
        body = sum(sum(self.layer_params(i)) for i in range(self.layers))
        heads = self.embedding_params * (1 if self.tied_embeddings else 2)
        return body + heads + self.hidden  # + final norm

    def with_overrides(self, **fields) -> ModelSpec:
        return replace(self, **fields)


_LLAMA3 = ("Llama 3 Herd of Models (Grattafiori et al., arXiv 2407.21783) Table 3, and the "
           "released config.json (vocab_size 128256); pre-training sequence 8,192")

PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("llama3-8b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8,
                  vocab=128256, seq_len=8192, source=_LLAMA3),
        ModelSpec("llama3-70b", layers=80, hidden=8192, ffn_hidden=28672, heads=64,
                  kv_heads=8, vocab=128256, seq_len=8192, source=_LLAMA3),
        ModelSpec("gpt3-175b", layers=96, hidden=12288, ffn_hidden=4 * 12288, heads=96,
                  kv_heads=96, vocab=50257, seq_len=2048, gated_mlp=False,
                  tied_embeddings=True,
                  source="Language Models are Few-Shot Learners (Brown et al., 2020) Table "
                  "2.1: 96 layers, d_model 12288, 96 heads of 128, context 2048; GPT-2 BPE "
                  "vocabulary of 50257; FFN 4 d_model"),
        ModelSpec("mixtral-8x7b", layers=32, hidden=4096, ffn_hidden=14336, heads=32,
                  kv_heads=8, vocab=32000, seq_len=4096, experts=8, top_k=2,
                  moe_ffn_hidden=14336, dense_layers=0,
                  source="Mixtral of Experts (Jiang et al., arXiv 2401.04088) Table 1: dim "
                  "4096, 32 layers, head_dim 128, hidden_dim 14336, 32 heads, 8 kv heads, "
                  "vocab 32000, 8 experts, top-2; sequence 4,096 is a training choice "
                  "(the context length is 32,768)"),
        ModelSpec("deepseek-v3", layers=61, hidden=7168, ffn_hidden=18432, heads=128,
                  kv_heads=128, vocab=129280, seq_len=4096, head_dim=192, v_head_dim=128,
                  attn_proj_params=(7168 * 1536 + 1536 * 128 * 192 + 7168 * (512 + 64)
                                    + 512 * 128 * (128 + 128) + 128 * 128 * 7168),
                  experts=256, top_k=8, moe_ffn_hidden=2048, shared_experts=1,
                  dense_layers=3,
                  source="DeepSeek-V3 Technical Report (arXiv 2412.19437) §4.2: 61 layers, "
                  "hidden 7168, 128 heads of 128 (+64 decoupled RoPE), MLA with KV "
                  "compression 512 and query compression 1536, first 3 layers dense "
                  "(FFN 18432), then 1 shared + 256 routed experts of 2048, 8 active; "
                  "pre-training sequence 4K; config.json vocab_size 129280; the multi-token "
                  "prediction module is not modelled"),
        ModelSpec("megatron-22b", layers=48, hidden=6144, ffn_hidden=4 * 6144, heads=64,
                  kv_heads=64, vocab=51200, seq_len=2048, gated_mlp=False,
                  tied_embeddings=True,
                  source="Reducing Activation Recomputation in Large Transformer Models "
                  "(Korthikanti et al., arXiv 2205.05198) Table 3: 64 heads, hidden 6144, "
                  "48 layers, sequence 2048, vocabulary 51200"),
        ModelSpec("megatron-1t", layers=128, hidden=25600, ffn_hidden=4 * 25600, heads=160,
                  kv_heads=160, vocab=51200, seq_len=2048, gated_mlp=False,
                  tied_embeddings=True,
                  source="Korthikanti et al. (arXiv 2205.05198) Table 3: 160 heads, hidden "
                  "25600, 128 layers, sequence 2048, vocabulary 51200"),
    )
}


def model_preset(name: str) -> ModelSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; presets: {', '.join(sorted(PRESETS))}") \
            from None
