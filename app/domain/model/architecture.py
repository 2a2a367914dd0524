"""An LLM architecture: the catalog record (:class:`Architecture`) and lookup by slug.

An :class:`Architecture` holds every structural choice that changes the parameter count (biases, norm kind,
tied embeddings, GQA/MLA, MoE layout), so :func:`app.domain.model.counts.parameter_counts` is exact, not
an approximation like ``12·l·h²``. Counts are per component, per layer kind (dense vs MoE), total and active per token, so the
memory model can split layers over pipeline stages and the compute model can take ``6·N_active``.

Layer layout for MoE models: layer ``i`` (0-based) is an MoE layer iff ``n_experts > 0`` and
``i >= first_k_dense_layers`` and ``(i - first_k_dense_layers) % moe_layer_freq == 0``; all others are dense.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field, model_validator

from app.domain.provenance import CatalogEntry

ARCHITECTURES_FILE = "architectures.toml"
ARCHITECTURES_TABLE = "architecture"
USER_CONFIG_SOURCE = "user-config"

Activation = Literal["gelu", "swiglu"]
PositionKind = Literal["rotary", "learned", "alibi"]
NormKind = Literal["layernorm", "rmsnorm"]
AttentionKind = Literal["gqa", "mla"]
RopeScalingKind = Literal["llama3", "yarn"]
RouterScoreFunction = Literal["softmax", "sigmoid"]
LayerKind = Literal["dense", "moe"]

_MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


class Architecture(CatalogEntry):
    """A decoder-only transformer, described exactly enough to count every parameter.

    ``attention = "gqa"`` covers MHA (``n_kv_heads == n_heads``), GQA and MQA (``n_kv_heads == 1``).
    ``attention = "mla"`` is DeepSeek's multi-head latent attention: queries optionally through a low-rank
    ``q_lora_rank`` bottleneck, keys/values through ``kv_lora_rank`` plus a shared rotary key of
    ``qk_rope_head_dim``; there ``head_dim = qk_nope_head_dim + qk_rope_head_dim`` and ``n_kv_heads = n_heads``.
    """

    family: str | None = Field(default=None, max_length=40, description="e.g. llama, gpt, mixtral, deepseek")
    hf_model_type: str | None = Field(default=None, max_length=40)

    n_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0, description="query/key width per head")
    ffn_hidden_size: int = Field(gt=0, description="dense MLP intermediate width")
    activation: Activation
    vocab_size: int = Field(gt=0)
    tied_embeddings: bool

    position: PositionKind
    max_position_embeddings: int | None = Field(default=None, gt=0, description="learned position table rows")
    max_context: int = Field(gt=0, description="longest sequence the model supports, tokens")
    rotary_fraction: float = Field(default=1.0, gt=0, le=1, description="share of head_dim rotated (NeoX)")
    rope_theta: float = Field(default=10_000.0, gt=0, description="RoPE base (config.json rope_theta)")
    rope_scaling: RopeScalingKind | None = Field(default=None, description="rope_scaling.rope_type")
    rope_scaling_factor: float | None = Field(default=None, gt=0, description="rope_scaling.factor")
    rope_original_context: int | None = Field(
        default=None, gt=0, description="rope_scaling.original_max_position_embeddings (pre-training context)"
    )

    norm: NormKind
    norm_bias: bool = False
    qkv_bias: bool = False
    attn_out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = Field(default=False, description="per-head norm on q and k (Qwen3)")
    embedding_norm: bool = Field(default=False, description="norm right after the token embedding (BLOOM)")
    parallel_residual: bool = Field(default=False, description="attention and MLP read the same input (NeoX)")

    attention: AttentionKind = "gqa"
    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    qk_nope_head_dim: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)

    n_experts: int = Field(default=0, ge=0, description="routed experts per MoE layer; 0 = dense model")
    experts_top_k: int = Field(default=0, ge=0)
    expert_ffn_hidden_size: int | None = Field(default=None, gt=0)
    n_shared_experts: int = Field(default=0, ge=0)
    shared_expert_ffn_hidden_size: int | None = Field(default=None, gt=0)
    shared_expert_gate: bool = Field(default=False, description="sigmoid gate hidden→1 on the shared expert")
    moe_layer_freq: int = Field(default=1, gt=0)
    first_k_dense_layers: int = Field(default=0, ge=0)
    router_bias: bool = False
    router_score_correction_bias: bool = Field(
        default=False, description="per-expert routing bias (DeepSeek-V3 e_score_correction_bias)"
    )
    router_score_function: RouterScoreFunction = Field(
        default="softmax", description="config.json scoring_func"
    )
    router_topk_scaling_factor: float | None = Field(
        default=None, gt=0, description="routed_scaling_factor (DeepSeek-V3: 2.5)"
    )
    router_num_groups: int | None = Field(default=None, gt=0, description="n_group: device-limited routing")
    router_group_topk: int | None = Field(default=None, gt=0, description="topk_group")

    @model_validator(mode="after")
    def _check_consistency(self) -> Architecture:
        problems: list[str] = []
        if self.n_heads % self.n_kv_heads:
            problems.append(
                f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads}) "
                "so each KV head serves a whole group of query heads"
            )
        if self.attention == "mla":
            missing = [f for f in _MLA_FIELDS if f != "q_lora_rank" and getattr(self, f) is None]
            if missing:
                problems.append(f"attention 'mla' needs {', '.join(missing)}")
            elif self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                problems.append(
                    f"with attention 'mla' head_dim ({self.head_dim}) must equal qk_nope_head_dim + "
                    f"qk_rope_head_dim ({self.qk_nope_head_dim} + {self.qk_rope_head_dim})"
                )
            if self.n_kv_heads != self.n_heads:
                problems.append(
                    "with attention 'mla' every head has its own K/V: n_kv_heads must equal n_heads"
                )
        else:
            extra = [f for f in _MLA_FIELDS if getattr(self, f) is not None]
            if extra:
                problems.append(f"{', '.join(extra)} only apply to attention 'mla'")
        if self.position == "learned":
            if self.max_position_embeddings is None:
                problems.append(
                    "position 'learned' needs max_position_embeddings (rows of the position table)"
                )
            elif self.max_context > self.max_position_embeddings:
                problems.append(
                    f"max_context ({self.max_context}) exceeds the learned position table "
                    f"({self.max_position_embeddings})"
                )
        elif self.max_position_embeddings is not None:
            problems.append("max_position_embeddings is the learned position table; use max_context instead")
        if self.rotary_fraction != 1.0 and self.position != "rotary":
            problems.append("rotary_fraction only applies to position 'rotary'")
        if (self.rope_scaling is None) != (self.rope_scaling_factor is None):
            problems.append("rope_scaling and rope_scaling_factor go together")
        if self.norm_bias and self.norm != "layernorm":
            problems.append("norm_bias needs norm 'layernorm' (RMSNorm has no bias)")
        problems.extend(self._moe_problems())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _moe_problems(self) -> list[str]:
        problems: list[str] = []
        if self.n_experts == 0:
            set_fields = [f for f in ("experts_top_k", "n_shared_experts") if getattr(self, f) != 0] + [
                f
                for f in ("expert_ffn_hidden_size", "shared_expert_ffn_hidden_size")
                if getattr(self, f) is not None
            ]
            if self.shared_expert_gate or self.router_bias or self.router_score_correction_bias:
                set_fields.append("router/shared-expert switches")
            if self.first_k_dense_layers or self.moe_layer_freq != 1:
                set_fields.append("first_k_dense_layers/moe_layer_freq")
            if set_fields:
                problems.append(f"{', '.join(set_fields)} need n_experts > 0 (this is a dense model)")
            return problems
        if not 1 <= self.experts_top_k <= self.n_experts:
            problems.append(
                f"experts_top_k ({self.experts_top_k}) must be between 1 and n_experts ({self.n_experts})"
            )
        if self.expert_ffn_hidden_size is None:
            problems.append("an MoE model needs expert_ffn_hidden_size")
        if self.n_shared_experts and self.shared_expert_ffn_hidden_size is None:
            problems.append("n_shared_experts > 0 needs shared_expert_ffn_hidden_size")
        if not self.n_shared_experts and (
            self.shared_expert_ffn_hidden_size is not None or self.shared_expert_gate
        ):
            problems.append("shared_expert_ffn_hidden_size/shared_expert_gate need n_shared_experts > 0")
        if self.first_k_dense_layers >= self.n_layers:
            problems.append(
                f"first_k_dense_layers ({self.first_k_dense_layers}) leaves no MoE layer in {self.n_layers}"
            )
        return problems

    # -- derived shapes -------------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head in the attention scores."""
        return self.head_dim

    @property
    def value_head_dim(self) -> int:
        """Width of one value head (differs from head_dim only for MLA)."""
        return self.v_head_dim if self.attention == "mla" else self.head_dim  # type: ignore[return-value]

    def is_moe_layer(self, index: int) -> bool:
        if not 0 <= index < self.n_layers:
            raise IndexError(f"layer {index} out of range 0..{self.n_layers - 1}")
        return (
            self.n_experts > 0
            and index >= self.first_k_dense_layers
            and (index - self.first_k_dense_layers) % self.moe_layer_freq == 0
        )

    @cached_property
    def _layer_kinds(self) -> tuple[LayerKind, ...]:
        return tuple("moe" if self.is_moe_layer(i) else "dense" for i in range(self.n_layers))

    def layer_kinds(self) -> tuple[LayerKind, ...]:
        return self._layer_kinds

    @cached_property
    def shape_counts(self) -> tuple[tuple[tuple[int, ...], int], ...]:
        """Distinct parameter shapes with how many tensors have each (for fast exact FSDP2 sharding)."""
        from app.domain.model.torch_shapes import parameter_shapes  # torch_shapes imports this module

        counts: dict[tuple[int, ...], int] = {}
        for p in parameter_shapes(self):
            counts[p.shape] = counts.get(p.shape, 0) + 1
        return tuple(counts.items())

    @cached_property  # read for every layer of every plan the search evaluates: counted once
    def n_moe_layers(self) -> int:
        return sum(1 for k in self.layer_kinds() if k == "moe")

    @cached_property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers


def architecture_by_slug(architectures: tuple[Architecture, ...], slug: str) -> Architecture:
    for arch in architectures:
        if arch.slug == slug:
            return arch
    known = ", ".join(a.slug for a in architectures)
    raise KeyError(f"unknown architecture {slug!r}; known: {known}")
