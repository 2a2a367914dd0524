"""LLM architectures: the catalog record, exact parameter counts, and Hugging Face ``config.json`` import.

An :class:`Architecture` holds every structural choice that changes the parameter count (biases, norm kind,
tied embeddings, GQA/MLA, MoE layout), so :func:`parameter_counts` is exact, not an approximation like
``12·l·h²``. Counts are per component, per layer kind (dense vs MoE), total and active per token, so the
memory model can split layers over pipeline stages and the compute model can take ``6·N_active``.

Layer layout for MoE models: layer ``i`` (0-based) is an MoE layer iff ``n_experts > 0`` and
``i >= first_k_dense_layers`` and ``(i - first_k_dense_layers) % moe_layer_freq == 0``; all others are dense.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from app.domain.catalog.clock import today
from app.domain.catalog.toml_io import CatalogError
from app.domain.provenance import CatalogEntry, Confidence, Frozen

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
        counts: dict[tuple[int, ...], int] = {}
        for p in parameter_shapes(self):
            counts[p.shape] = counts.get(p.shape, 0) + 1
        return tuple(counts.items())

    @property
    def n_moe_layers(self) -> int:
        return sum(1 for k in self.layer_kinds() if k == "moe")

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers


# -- shape helpers the memory / FLOPs models use ---------------------------------------------------------


def q_dim(arch: Architecture) -> int:
    """Width of the query projection output (all heads)."""
    return arch.n_heads * arch.head_dim


def kv_dim(arch: Architecture) -> int:
    """Width of the key (= value for GQA) projection output per token, all KV heads.

    For MLA this is the key width after up-projection (``n_heads · (qk_nope + qk_rope)``), which is what the
    attention kernel reads; the cached latent is :func:`kv_cache_width`.
    """
    return arch.n_kv_heads * arch.head_dim


def v_dim(arch: Architecture) -> int:
    """Width of the value projection output per token, all heads that carry values."""
    return arch.n_kv_heads * arch.value_head_dim


def kv_cache_width(arch: Architecture) -> int:
    """Elements per token per layer that a KV cache (or a CP ring exchange of K/V) holds."""
    if arch.attention == "mla":
        return arch.kv_lora_rank + arch.qk_rope_head_dim  # type: ignore[operator]
    return 2 * arch.n_kv_heads * arch.head_dim


def norm_parameters(arch: Architecture, width: int) -> int:
    return 2 * width if arch.norm == "layernorm" and arch.norm_bias else width


def _linear(fan_in: int, fan_out: int, bias: bool) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def attention_projection_weights(arch: Architecture) -> int:
    """Weights (no biases, no norms) of one layer's attention projections: the GEMM parameters."""
    h = arch.hidden_size
    if arch.attention == "mla":
        qk = arch.n_heads * arch.head_dim
        q = h * arch.q_lora_rank + arch.q_lora_rank * qk if arch.q_lora_rank else h * qk
        kv_a = h * (arch.kv_lora_rank + arch.qk_rope_head_dim)  # type: ignore[operator]
        kv_b = arch.kv_lora_rank * arch.n_heads * (arch.qk_nope_head_dim + arch.v_head_dim)  # type: ignore[operator]
        o = arch.n_heads * arch.v_head_dim * h  # type: ignore[operator]
        return q + kv_a + kv_b + o
    return h * q_dim(arch) + 2 * h * kv_dim(arch) + q_dim(arch) * h


def attention_parameters(arch: Architecture) -> int:
    """Parameters of one layer's attention projections, biases included (its norms are in :func:`layer_norm_parameters`)."""
    h = arch.hidden_size
    biases = 0
    if arch.attention == "mla":
        # HF DeepseekV3Attention: q_a_proj and kv_a_proj_with_mqa take the attention bias, q_b/kv_b never do.
        if arch.qkv_bias:
            biases += (arch.q_lora_rank or 0) + arch.kv_lora_rank + arch.qk_rope_head_dim  # type: ignore[operator]
    elif arch.qkv_bias:
        biases += q_dim(arch) + 2 * kv_dim(arch)
    if arch.attn_out_bias:
        biases += h
    return attention_projection_weights(arch) + biases


def mlp_weights(arch: Architecture, ffn_hidden_size: int) -> int:
    """GEMM weights of one MLP of the given intermediate width (SwiGLU: gate, up, down; GELU: up, down)."""
    matrices = 3 if arch.activation == "swiglu" else 2
    return matrices * arch.hidden_size * ffn_hidden_size


def mlp_parameters(arch: Architecture, ffn_hidden_size: int) -> int:
    """Parameters of one MLP of the given intermediate width, biases included when ``mlp_bias``."""
    biases = 0
    if arch.mlp_bias:
        up_outputs = 2 * ffn_hidden_size if arch.activation == "swiglu" else ffn_hidden_size
        biases = up_outputs + arch.hidden_size
    return mlp_weights(arch, ffn_hidden_size) + biases


def expert_parameters(arch: Architecture) -> int:
    """One routed expert."""
    if not arch.is_moe:
        return 0
    return mlp_parameters(arch, arch.expert_ffn_hidden_size)  # type: ignore[arg-type]


def shared_expert_parameters(arch: Architecture) -> int:
    """All shared experts of one MoE layer, with the shared-expert gate if any."""
    if not arch.n_shared_experts:
        return 0
    gate = arch.hidden_size if arch.shared_expert_gate else 0
    return arch.n_shared_experts * mlp_parameters(arch, arch.shared_expert_ffn_hidden_size) + gate  # type: ignore[arg-type]


def router_parameters(arch: Architecture) -> int:
    if not arch.is_moe:
        return 0
    extra = (arch.n_experts if arch.router_bias else 0) + (
        arch.n_experts if arch.router_score_correction_bias else 0
    )
    return arch.hidden_size * arch.n_experts + extra


def layer_norm_parameters(arch: Architecture) -> int:
    """Norm parameters inside one layer: the two pre-norms, q/k norms, MLA latent norms."""
    total = 2 * norm_parameters(arch, arch.hidden_size)
    if arch.qk_norm:
        total += 2 * norm_parameters(arch, arch.head_dim)
    if arch.attention == "mla":
        total += norm_parameters(arch, arch.kv_lora_rank)  # type: ignore[arg-type]
        if arch.q_lora_rank:
            total += norm_parameters(arch, arch.q_lora_rank)
    return total


# -- counts ------------------------------------------------------------------------------------------------


class LayerParameterCounts(Frozen):
    """One transformer layer of a given kind. ``active`` = parameters a single token touches."""

    kind: LayerKind
    attention: int
    mlp: int
    experts: int
    expert: int
    shared_experts: int
    router: int
    norms: int
    total: int
    active: int
    matmul_weights_active: int = Field(
        description="GEMM weights a token multiplies through (2 FLOPs each, fwd)"
    )


class ParameterCounts(Frozen):
    """Exact parameter counts of an architecture. Components add up to ``total``."""

    total: int
    active: int = Field(description="per token: all non-expert parameters + top-k routed + shared experts")
    embedding: int
    position: int
    attention: int
    mlp_dense: int
    experts: int
    shared_experts: int
    router: int
    norms: int
    output_head: int = Field(description="0 when tied to the embedding")
    n_dense_layers: int
    n_moe_layers: int
    dense_layer: LayerParameterCounts | None
    moe_layer: LayerParameterCounts | None
    pre_layers: int = Field(
        description="held by the first pipeline stage: embedding, positions, embedding norm"
    )
    post_layers: int = Field(description="held by the last pipeline stage: final norm and output head")
    matmul_weights_active: int = Field(
        description="GEMM weights per token, output head included (tied or not), embedding lookups excluded"
    )

    @property
    def non_embedding(self) -> int:
        """Total without the token and position embeddings and the untied output head."""
        return self.total - self.embedding - self.position - self.output_head

    def layer(self, kind: LayerKind) -> LayerParameterCounts:
        found = self.dense_layer if kind == "dense" else self.moe_layer
        if found is None:
            raise ValueError(f"this architecture has no {kind} layers")
        return found


def layer_parameter_counts(arch: Architecture, kind: LayerKind) -> LayerParameterCounts:
    attention = attention_parameters(arch)
    norms = layer_norm_parameters(arch)
    attn_matmul = attention_projection_weights(arch)
    if kind == "dense":
        mlp = mlp_parameters(arch, arch.ffn_hidden_size)
        total = attention + norms + mlp
        return LayerParameterCounts(
            kind="dense",
            attention=attention,
            mlp=mlp,
            experts=0,
            expert=0,
            shared_experts=0,
            router=0,
            norms=norms,
            total=total,
            active=total,
            matmul_weights_active=attn_matmul + mlp_weights(arch, arch.ffn_hidden_size),
        )
    if not arch.is_moe:
        raise ValueError("a dense architecture has no MoE layers")
    expert = expert_parameters(arch)
    experts = arch.n_experts * expert
    shared = shared_expert_parameters(arch)
    router = router_parameters(arch)
    total = attention + norms + experts + shared + router
    active = total - (arch.n_experts - arch.experts_top_k) * expert
    matmul = (
        attn_matmul
        + arch.experts_top_k * mlp_weights(arch, arch.expert_ffn_hidden_size)  # type: ignore[arg-type]
        + (arch.n_shared_experts * mlp_weights(arch, arch.shared_expert_ffn_hidden_size) if shared else 0)  # type: ignore[arg-type]
        + (arch.hidden_size if arch.shared_expert_gate else 0)
        + arch.hidden_size * arch.n_experts
    )
    return LayerParameterCounts(
        kind="moe",
        attention=attention,
        mlp=0,
        experts=experts,
        expert=expert,
        shared_experts=shared,
        router=router,
        norms=norms,
        total=total,
        active=active,
        matmul_weights_active=matmul,
    )


def parameter_counts(arch: Architecture) -> ParameterCounts:
    """Exact parameter counts (total, active per token, by component and by layer kind)."""
    h = arch.hidden_size
    n_moe = arch.n_moe_layers
    n_dense = arch.n_layers - n_moe
    dense = layer_parameter_counts(arch, "dense") if n_dense else None
    moe = layer_parameter_counts(arch, "moe") if n_moe else None
    layers = [(dense, n_dense), (moe, n_moe)]

    def over_layers(attr: str) -> int:
        return sum(getattr(lc, attr) * n for lc, n in layers if lc is not None)

    embedding = arch.vocab_size * h
    position = arch.max_position_embeddings * h if arch.position == "learned" else 0  # type: ignore[operator]
    outer_norms = norm_parameters(arch, h) * (2 if arch.embedding_norm else 1)
    output_head = 0 if arch.tied_embeddings else arch.vocab_size * h
    pre_layers = embedding + position + (norm_parameters(arch, h) if arch.embedding_norm else 0)
    post_layers = norm_parameters(arch, h) + output_head
    total = pre_layers + over_layers("total") + post_layers
    active = pre_layers + over_layers("active") + post_layers
    return ParameterCounts(
        total=total,
        active=active,
        embedding=embedding,
        position=position,
        attention=over_layers("attention"),
        mlp_dense=over_layers("mlp"),
        experts=over_layers("experts"),
        shared_experts=over_layers("shared_experts"),
        router=over_layers("router"),
        norms=over_layers("norms") + outer_norms,
        output_head=output_head,
        n_dense_layers=n_dense,
        n_moe_layers=n_moe,
        dense_layer=dense,
        moe_layer=moe,
        pre_layers=pre_layers,
        post_layers=post_layers,
        matmul_weights_active=over_layers("matmul_weights_active") + arch.vocab_size * h,
    )


def stage_parameter_count(
    arch: Architecture,
    first_layer: int,
    n_layers: int,
    *,
    is_first: bool,
    is_last: bool,
    tied_copy_on_last_stage: bool = True,
) -> int:
    """Parameters held by one pipeline stage owning layers ``[first_layer, first_layer + n_layers)``.

    With tied embeddings and more than one stage, Megatron-style pipelines keep a copy of the embedding on the
    last stage for the output head (``tied_copy_on_last_stage``); a single stage holds it once.
    """
    if n_layers < 0 or first_layer < 0 or first_layer + n_layers > arch.n_layers:
        raise ValueError(f"layers [{first_layer}, {first_layer + n_layers}) outside 0..{arch.n_layers}")
    counts = parameter_counts(arch)
    total = sum(counts.layer(arch.layer_kinds()[i]).total for i in range(first_layer, first_layer + n_layers))
    if is_first:
        total += counts.pre_layers
    if is_last:
        total += counts.post_layers
        if arch.tied_embeddings and tied_copy_on_last_stage and not is_first:
            total += counts.embedding
    return total


def architecture_by_slug(architectures: tuple[Architecture, ...], slug: str) -> Architecture:
    for arch in architectures:
        if arch.slug == slug:
            return arch
    known = ", ".join(a.slug for a in architectures)
    raise KeyError(f"unknown architecture {slug!r}; known: {known}")


# -- Hugging Face config.json import ---------------------------------------------------------------------
#
# Policy: sizes (hidden, layers, heads, FFN widths, vocab, expert counts, latent ranks, context) are REQUIRED
# even where the HF config class has a default, because those class defaults describe one particular model
# size and taking them for a config that omits the key would be a silent guess. Switches (biases, tying,
# activation, layer-pattern knobs) and derived widths take the default the HF class itself defines; each is
# commented with the class it comes from.

SUPPORTED_HF_MODEL_TYPES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gpt2",
    "gpt_neox",
    "deepseek_v3",
    "deepseek_v2",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "phimoe",
    "olmo",
    "olmo2",
    "granite",
    "cohere",
    "cohere2",
    "starcoder2",
    "falcon",
    "internlm2",
)

_FAMILY = {
    "llama": "llama",
    "mistral": "mistral",
    "mixtral": "mixtral",
    "qwen2": "qwen",
    "qwen2_moe": "qwen",
    "qwen3": "qwen",
    "qwen3_moe": "qwen",
    "gpt2": "gpt",
    "gpt_neox": "gpt-neox",
    "deepseek_v3": "deepseek",
    "deepseek_v2": "deepseek",
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3_text": "gemma",
    "phi3": "phi",
    "phimoe": "phi",
    "olmo": "olmo",
    "olmo2": "olmo",
    "granite": "granite",
    "cohere": "cohere",
    "cohere2": "cohere",
    "starcoder2": "starcoder",
    "falcon": "falcon",
    "internlm2": "internlm",
}

_FAMILY_TITLE = {
    "llama": "Llama", "mistral": "Mistral", "mixtral": "Mixtral", "qwen": "Qwen", "gpt": "GPT-2",
    "gpt-neox": "GPT-NeoX", "deepseek": "DeepSeek", "gemma": "Gemma", "phi": "Phi", "olmo": "OLMo",
    "granite": "Granite", "cohere": "Command (Cohere)", "starcoder": "StarCoder2", "falcon": "Falcon",
    "internlm": "InternLM2",
}  # fmt: skip

IMPORT_AS_KEY = "capplan_import_as"
"""A config.json key the user (or the planner's "import as llama-style" button) adds to read an unknown
``model_type`` whose fields are llama-shaped as a Llama: the value is ``"llama"``."""

LLAMA_STYLE_ASSUMPTIONS = (
    "gated SiLU MLP (SwiGLU: gate, up, down)",
    "RMSNorm before attention and before the MLP",
    "rotary positions",
    "no biases unless attention_bias / mlp_bias say so",
    "num_key_value_heads absent = num_attention_heads",
    "head_dim absent = hidden_size / num_attention_heads",
    "untied embeddings unless tie_word_embeddings is true",
)
"""What importing an unknown model_type as llama-style assumes (said wherever it is offered or used)."""

_LLAMA_SHAPE_KEYS = (
    "hidden_size",
    "num_attention_heads",
    "num_hidden_layers",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)


def llama_shaped(config: Any) -> bool:
    """Whether a config of an unknown model_type carries every size a llama-style import needs (as integers)."""
    return isinstance(config, dict) and all(
        isinstance(config.get(k), int) and not isinstance(config.get(k), bool) for k in _LLAMA_SHAPE_KEYS
    )


class ArchitectureImportError(ValueError):
    """A config.json we cannot turn into an :class:`Architecture`; the message names the type and field."""

    def __init__(self, model_type: str | None, field: str | None, reason: str) -> None:
        self.model_type = model_type
        self.field = field
        self.reason = reason
        where = f"model_type {model_type!r}" if model_type is not None else "config"
        if field:
            where += f", field {field!r}"
        super().__init__(f"{where}: {reason} (supported model_type: {', '.join(SUPPORTED_HF_MODEL_TYPES)})")


class _Cfg:
    """Typed, read-only access to a config dict; every miss or wrong type names the field."""

    def __init__(self, config: dict[str, Any], model_type: str) -> None:
        self.config = config
        self.model_type = model_type

    def fail(self, field: str | None, reason: str) -> ArchitectureImportError:
        return ArchitectureImportError(self.model_type, field, reason)

    def integer(self, key: str, default: int | None = None, *, allow_zero: bool = False) -> int:
        value = self.config.get(key)
        if value is None:
            if default is None:
                raise self.fail(key, "required field is missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {value!r}")
        if value < 0 or (value == 0 and not allow_zero):
            raise self.fail(key, f"expected a positive integer, got {value}")
        return value

    def nullable_integer(self, key: str) -> int | None:
        """A key that must be present but may be null (e.g. DeepSeek ``q_lora_rank``)."""
        if key not in self.config:
            raise self.fail(key, "required field is missing (use null to disable it)")
        return None if self.config[key] is None else self.integer(key)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true/false, got {value!r}")
        return value

    def string(self, key: str, default: str) -> str:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.config.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"expected a number, got {value!r}")
        return float(value)

    def integer_list(self, key: str) -> list[int]:
        value = self.config.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.fail(key, f"expected a list of integers, got {value!r}")
        return value


def _gated_activation(cfg: _Cfg) -> Activation:
    # LlamaConfig/MistralConfig/MixtralConfig/Qwen*Config/DeepseekV3Config: hidden_act defaults to "silu";
    # their MLPs are always gated (gate_proj · act · up_proj), so silu means SwiGLU.
    act = cfg.string("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise cfg.fail(
            "hidden_act", f"gated MLP with activation {act!r} is not modelled (only silu → SwiGLU)"
        )
    return "swiglu"


def _plain_gelu(cfg: _Cfg, key: str, default: str) -> Activation:
    act = cfg.string(key, default)
    if not act.startswith("gelu"):
        raise cfg.fail(key, f"activation {act!r} is not modelled (only GELU variants)")
    return "gelu"


def _head_dim(cfg: _Cfg, hidden: int, heads: int, class_default: int | None = None) -> int:
    # Llama/Mistral/Mixtral/Qwen2/Qwen2-MoE/Qwen3-MoE: head_dim None → hidden_size // num_attention_heads.
    # Qwen3Config: head_dim defaults to 128 (class_default).
    if cfg.config.get("head_dim") is not None:
        return cfg.integer("head_dim")
    if class_default is not None:
        return class_default
    if hidden % heads:
        raise cfg.fail("head_dim", f"missing and hidden_size {hidden} is not divisible by {heads} heads")
    return hidden // heads


def _moe_layout(cfg: _Cfg, n_layers: int, moe_indices: set[int]) -> tuple[int, int]:
    """Express a set of MoE layer indices as (first_k_dense_layers, moe_layer_freq), or fail."""
    if not moe_indices:
        raise cfg.fail("mlp_only_layers", "no layer is an MoE layer; import it as a dense model instead")
    first = min(moe_indices)
    for freq in range(1, n_layers + 1):
        if {i for i in range(first, n_layers) if (i - first) % freq == 0} == moe_indices:
            return first, freq
    raise cfg.fail(
        "mlp_only_layers", f"MoE layer pattern {sorted(moe_indices)} is not 'first k dense, then every n-th'"
    )


def _rotary_fraction(cfg: _Cfg, key: str, default: float) -> float:
    rope = cfg.config.get("rope_parameters") or cfg.config.get("rope_scaling") or {}
    if isinstance(rope, dict) and rope.get("partial_rotary_factor") is not None and key not in cfg.config:
        return float(rope["partial_rotary_factor"])
    return cfg.number(key, default)


def _from_llama_like(cfg: _Cfg) -> dict[str, Any]:
    mt = cfg.model_type
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    if mt == "llama":
        # LlamaConfig: num_key_value_heads None → num_attention_heads (plain MHA).
        kv_heads = cfg.integer("num_key_value_heads", heads)
    else:
        kv_heads = cfg.integer("num_key_value_heads")
    fields: dict[str, Any] = {
        "n_layers": cfg.integer("num_hidden_layers"),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "head_dim": _head_dim(cfg, hidden, heads, 128 if mt == "qwen3" else None),
        "activation": _gated_activation(cfg),
        "vocab_size": cfg.integer("vocab_size"),
        # every supported HF config class here defaults tie_word_embeddings to False
        "tied_embeddings": cfg.boolean("tie_word_embeddings", False),
        "position": "rotary",
        "max_context": cfg.integer("max_position_embeddings"),
        "rotary_fraction": _rotary_fraction(cfg, "partial_rotary_factor", 1.0),
        "norm": "rmsnorm",
    }
    if mt == "llama":
        # LlamaConfig: attention_bias=False (q, k, v and o), mlp_bias=False.
        bias = cfg.boolean("attention_bias", False)
        fields |= {"qkv_bias": bias, "attn_out_bias": bias, "mlp_bias": cfg.boolean("mlp_bias", False)}
    elif mt in ("qwen2", "qwen2_moe"):
        # Qwen2Attention hard-codes bias=True on q/k/v and False on o_proj; Qwen2MoeConfig.qkv_bias defaults True.
        fields |= {
            "qkv_bias": True if mt == "qwen2" else cfg.boolean("qkv_bias", True),
            "attn_out_bias": False,
        }
    elif mt in ("qwen3", "qwen3_moe"):
        # Qwen3Config/Qwen3MoeConfig: attention_bias=False (q, k, v, o); q_norm/k_norm RMSNorm(head_dim) always.
        bias = cfg.boolean("attention_bias", False)
        fields |= {"qkv_bias": bias, "attn_out_bias": bias, "qk_norm": True}
    # mistral / mixtral: MistralAttention and MixtralAttention have no bias anywhere.

    if mt in ("llama", "mistral", "qwen2", "qwen3"):
        fields["ffn_hidden_size"] = cfg.integer("intermediate_size")
        return fields

    if mt == "mixtral":
        expert_ffn = cfg.integer("intermediate_size")
        return fields | {
            "ffn_hidden_size": expert_ffn,
            "n_experts": cfg.integer("num_local_experts"),
            "experts_top_k": cfg.integer("num_experts_per_tok"),
            "expert_ffn_hidden_size": expert_ffn,
        }

    # qwen2_moe / qwen3_moe: layer i is sparse iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
    # (Qwen2MoeDecoderLayer); decoder_sparse_step defaults to 1 and mlp_only_layers to [] in both config classes.
    n_layers = fields["n_layers"]
    step = cfg.integer("decoder_sparse_step", 1)
    dense_only = set(cfg.integer_list("mlp_only_layers"))
    n_experts = cfg.integer("num_experts")
    moe_indices = {i for i in range(n_layers) if i not in dense_only and (i + 1) % step == 0}
    first_k, freq = _moe_layout(cfg, n_layers, moe_indices)
    fields |= {
        "n_experts": n_experts,
        "experts_top_k": cfg.integer("num_experts_per_tok"),
        "expert_ffn_hidden_size": cfg.integer("moe_intermediate_size"),
        "first_k_dense_layers": first_k,
        "moe_layer_freq": freq,
    }
    has_dense = len(moe_indices) < n_layers
    # intermediate_size only shapes dense layers; a config without dense layers may omit it and then we use the
    # class default (Qwen2MoeConfig 5632, Qwen3MoeConfig 6144) purely to fill the field: it counts nothing.
    fields["ffn_hidden_size"] = cfg.integer(
        "intermediate_size", None if has_dense else (5632 if mt == "qwen2_moe" else 6144)
    )
    if mt == "qwen2_moe":
        # Qwen2MoeSparseMoeBlock always has one shared expert and a shared_expert_gate Linear(hidden, 1, bias=False).
        fields |= {
            "n_shared_experts": 1,
            "shared_expert_ffn_hidden_size": cfg.integer("shared_expert_intermediate_size"),
            "shared_expert_gate": True,
        }
    return fields


def _from_deepseek_v3(cfg: _Cfg) -> dict[str, Any]:
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    n_layers = cfg.integer("num_hidden_layers")
    nope = cfg.integer("qk_nope_head_dim")
    rope = cfg.integer("qk_rope_head_dim")
    first_k = cfg.integer("first_k_dense_replace", allow_zero=True)
    # moe_layer_freq is not a DeepseekV3Config field (HF ignores it); DeepSeek's own modeling code defaults it to 1
    # and makes layer i sparse iff i >= first_k_dense_replace and i % moe_layer_freq == 0.
    freq = cfg.integer("moe_layer_freq", 1)
    moe_indices = {i for i in range(n_layers) if i >= first_k and i % freq == 0}
    first, freq = _moe_layout(cfg, n_layers, moe_indices)
    bias = cfg.boolean("attention_bias", False)  # DeepseekV3Config: attention_bias=False
    n_shared = cfg.integer("n_shared_experts", allow_zero=True)
    expert_ffn = cfg.integer("moe_intermediate_size")
    return {
        "n_layers": n_layers,
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": heads,
        "head_dim": nope + rope,
        "ffn_hidden_size": cfg.integer("intermediate_size"),
        "activation": _gated_activation(cfg),
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean("tie_word_embeddings", False),  # DeepseekV3Config default False
        "position": "rotary",
        "max_context": cfg.integer("max_position_embeddings"),
        "norm": "rmsnorm",
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "attention": "mla",
        "q_lora_rank": cfg.nullable_integer("q_lora_rank"),
        "kv_lora_rank": cfg.integer("kv_lora_rank"),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": cfg.integer("v_head_dim"),
        "n_experts": cfg.integer("n_routed_experts"),
        "experts_top_k": cfg.integer("num_experts_per_tok"),
        "expert_ffn_hidden_size": expert_ffn,
        # DeepseekV3MoE builds ONE shared MLP of width moe_intermediate_size · n_shared_experts; with no biases that
        # holds exactly as many parameters as n_shared_experts experts of width moe_intermediate_size.
        "n_shared_experts": n_shared,
        "shared_expert_ffn_hidden_size": expert_ffn if n_shared else None,
        "first_k_dense_layers": first,
        "moe_layer_freq": freq,
        # DeepseekV3TopkRouter: weight (n_routed_experts, hidden) and an e_score_correction_bias per expert.
        "router_score_correction_bias": True,
    }


def _from_gpt2(cfg: _Cfg) -> dict[str, Any]:
    hidden = cfg.integer("n_embd")
    heads = cfg.integer("n_head")
    positions = cfg.integer("n_positions")
    if hidden % heads:
        raise cfg.fail("n_head", f"n_embd {hidden} is not divisible by n_head {heads}")
    return {
        "n_layers": cfg.integer("n_layer"),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": heads,
        "head_dim": hidden // heads,
        "ffn_hidden_size": cfg.integer("n_inner", 4 * hidden),  # GPT2Config: n_inner None → 4 · n_embd
        "activation": _plain_gelu(cfg, "activation_function", "gelu_new"),  # GPT2Config default "gelu_new"
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean(
            "tie_word_embeddings", True
        ),  # PretrainedConfig default True; GPT-2 ties
        "position": "learned",
        "max_position_embeddings": positions,
        "max_context": positions,
        "norm": "layernorm",
        "norm_bias": True,
        # GPT2Attention c_attn/c_proj and GPT2MLP c_fc/c_proj are Conv1D layers, always with bias.
        "qkv_bias": True,
        "attn_out_bias": True,
        "mlp_bias": True,
    }


def _from_gpt_neox(cfg: _Cfg) -> dict[str, Any]:
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    if hidden % heads:
        raise cfg.fail("num_attention_heads", f"hidden_size {hidden} is not divisible by {heads} heads")
    bias = cfg.boolean(
        "attention_bias", True
    )  # GPTNeoXConfig: attention_bias=True (query_key_value and dense)
    return {
        "n_layers": cfg.integer("num_hidden_layers"),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": heads,
        "head_dim": hidden // heads,
        "ffn_hidden_size": cfg.integer("intermediate_size"),
        "activation": _plain_gelu(cfg, "hidden_act", "gelu"),  # GPTNeoXConfig default "gelu"
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean(
            "tie_word_embeddings", False
        ),  # GPTNeoXConfig default False (embed_out)
        "position": "rotary",
        "max_context": cfg.integer("max_position_embeddings"),
        "rotary_fraction": _rotary_fraction(cfg, "rotary_pct", 0.25),  # GPTNeoXConfig: rotary_pct=0.25
        "norm": "layernorm",
        "norm_bias": True,
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "mlp_bias": True,  # GPTNeoXMLP dense_h_to_4h / dense_4h_to_h always have bias
        "parallel_residual": cfg.boolean("use_parallel_residual", True),  # GPTNeoXConfig default True
    }


# -- more families. Where the HF module has a structure Architecture does not describe, the nearest exact-shape
# choice is taken and the note says what differs (a few norm vectors: under 0.01 % of any published count).

_GEMMA3_TEXT_DEFAULTS = {
    # Gemma3TextConfig class defaults; the multimodal gemma-3 configs' text_config lists only what differs
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262_208,
    "max_position_embeddings": 131_072,
}  # fmt: skip


def _gated_any(cfg: _Cfg, keys: tuple[str, ...], default: str) -> tuple[Activation, str | None]:
    """A gated MLP: SiLU → SwiGLU; GELU variants (GeGLU) have the same three matrices, counted as SwiGLU."""
    key = next((k for k in keys if cfg.config.get(k) is not None), keys[0])
    act = cfg.string(key, default)
    if act in ("silu", "swish"):
        return "swiglu", None
    if act.startswith("gelu"):
        return (
            "swiglu",
            f"GeGLU ({act}) is modelled as a gated MLP with SwiGLU's shapes (same three matrices)",
        )
    raise cfg.fail(key, f"gated MLP with activation {act!r} is not modelled (only SiLU and GELU)")


def _dense_core(cfg: _Cfg, *, kv_default: int | None, tie_default: bool, head_dim_required: bool = False,
                head_dim_default: int | None = None) -> dict[str, Any]:  # fmt: skip
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    kv_heads = cfg.integer("num_key_value_heads", heads if kv_default is None else kv_default)
    if head_dim_required and cfg.config.get("head_dim") is None and head_dim_default is None:
        raise cfg.fail("head_dim", "required field is missing")
    return {
        "n_layers": cfg.integer("num_hidden_layers"),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "head_dim": _head_dim(cfg, hidden, heads, head_dim_default),
        "ffn_hidden_size": cfg.integer("intermediate_size"),
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean("tie_word_embeddings", tie_default),
        "position": "rotary",
        "max_context": cfg.integer("max_position_embeddings"),
        "rotary_fraction": _rotary_fraction(cfg, "partial_rotary_factor", 1.0),
        "norm": "rmsnorm",
    }


def _from_more(cfg: _Cfg) -> tuple[dict[str, Any], list[str]]:
    """Families beyond the first ten; returns the fields and what the import approximated or assumed."""
    mt = cfg.model_type
    notes: list[str] = []
    if mt in ("gemma", "gemma2", "gemma3_text"):
        # GemmaConfig/Gemma2Config/Gemma3TextConfig: tie_word_embeddings=True, attention_bias=False, GeGLU MLP.
        fields = _dense_core(cfg, kv_default=None, tie_default=True, head_dim_required=True)
        act, note = _gated_any(cfg, ("hidden_activation", "hidden_act"), "gelu_pytorch_tanh")
        bias = cfg.boolean("attention_bias", False)
        fields |= {"activation": act, "qkv_bias": bias, "attn_out_bias": bias}
        notes += [note] if note else []
        if mt == "gemma3_text":
            fields["qk_norm"] = True  # Gemma3Attention: q_norm/k_norm RMSNorm(head_dim)
        if mt != "gemma":
            notes.append("the extra post-attention and post-MLP norms (2 × hidden per layer) are not counted")
        return fields, notes
    if mt in ("phi3", "granite", "internlm2", "olmo", "olmo2"):
        # Phi3Config/GraniteConfig/InternLM2Config/OlmoConfig/Olmo2Config: num_key_value_heads None → heads,
        # tie_word_embeddings=False; fused qkv / gate_up projections (Phi-3, InternLM2) hold the same weights.
        fields = _dense_core(cfg, kv_default=None, tie_default=False)
        fields["activation"] = _gated_activation(cfg)
        if mt == "internlm2":
            bias = cfg.boolean("bias", False)  # InternLM2: wqkv and wo take config.bias
            fields |= {"qkv_bias": bias, "attn_out_bias": bias}
        elif mt != "phi3":
            bias = cfg.boolean("attention_bias", False)
            fields |= {"qkv_bias": bias, "attn_out_bias": bias}
            if mt == "granite":
                fields["mlp_bias"] = cfg.boolean("mlp_bias", False)
                notes.append("embedding/residual/attention/logit multipliers change no parameter count")
        if mt == "olmo":
            notes.append("OLMo's LayerNorm has no weights; counted as RMSNorm weights (2 × hidden per layer)")
        if mt == "olmo2":
            # Olmo2Attention: q_norm/k_norm RMSNorm over all heads; the norms sit after attention and MLP.
            fields["qk_norm"] = True
            notes.append("q/k norms over the full projection width are counted per head (head_dim)")
        return fields, notes
    if mt in ("cohere", "cohere2"):
        # CohereConfig/Cohere2Config: tie_word_embeddings=True, attention_bias=False; one LayerNorm (no bias) feeds
        # attention and MLP in parallel.
        fields = _dense_core(cfg, kv_default=None, tie_default=True)
        bias = cfg.boolean("attention_bias", False)
        fields |= {"activation": _gated_activation(cfg), "norm": "layernorm", "norm_bias": False,
                   "parallel_residual": True, "qkv_bias": bias, "attn_out_bias": bias}  # fmt: skip
        if cfg.boolean("use_qk_norm", False):
            fields["qk_norm"] = True
            notes.append("Command R+'s per-head q/k LayerNorms are counted as one head_dim vector each")
        notes.append("its single norm per layer is counted as two (hidden extra parameters per layer)")
        return fields, notes
    if mt == "starcoder2":
        # Starcoder2Config: use_bias=True (q, k, v, o, c_fc, c_proj), norm_type "layer_norm" (with bias), plain GELU MLP.
        fields = _dense_core(cfg, kv_default=None, tie_default=True)
        bias = cfg.boolean("use_bias", True)
        fields |= {"activation": _plain_gelu(cfg, "hidden_act", "gelu_pytorch_tanh"), "norm": "layernorm",
                   "norm_bias": True, "qkv_bias": bias, "attn_out_bias": bias, "mlp_bias": bias}  # fmt: skip
        return fields, notes
    if mt == "falcon":
        return _from_falcon(cfg)
    if mt == "phimoe":
        # PhiMoEConfig: LayerNorm with bias, attention_bias=False, lm_head_bias=False, Mixtral-style experts.
        fields = _dense_core(cfg, kv_default=None, tie_default=False)
        bias = cfg.boolean("attention_bias", False)
        expert_ffn = fields["ffn_hidden_size"]
        fields |= {"activation": _gated_activation(cfg), "norm": "layernorm", "norm_bias": True, "qkv_bias": bias,
                   "attn_out_bias": bias, "n_experts": cfg.integer("num_local_experts"),
                   "experts_top_k": cfg.integer("num_experts_per_tok"), "expert_ffn_hidden_size": expert_ffn}  # fmt: skip
        if cfg.boolean("lm_head_bias", False):
            notes.append(f"the output head's bias ({fields['vocab_size']:,} parameters) is not counted")
        return fields, notes
    raise cfg.fail("model_type", "unsupported model_type")  # pragma: no cover - guarded by the caller


def _from_falcon(cfg: _Cfg) -> tuple[dict[str, Any], list[str]]:
    # FalconConfig: attribute_map n_layer/n_head; multi_query=True, new_decoder_architecture=False, parallel_attn=True,
    # bias=False, alibi=False, activation "gelu", ffn_hidden_size None → 4·hidden, max_position_embeddings 2048,
    # tie_word_embeddings True (PretrainedConfig default; FalconForCausalLM ties lm_head to word_embeddings).
    notes: list[str] = []
    c = cfg.config
    layers_key = "num_hidden_layers" if "num_hidden_layers" in c else "n_layer"
    heads_key = "num_attention_heads" if "num_attention_heads" in c else "n_head"
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer(heads_key)
    if hidden % heads:
        raise cfg.fail(heads_key, f"hidden_size {hidden} is not divisible by {heads} heads")
    if cfg.boolean("new_decoder_architecture", False):
        kv_heads = cfg.integer("num_kv_heads", heads)
    elif cfg.boolean("multi_query", True):
        kv_heads = 1
    else:
        kv_heads = heads
    alibi = cfg.boolean("alibi", False)
    if "max_position_embeddings" not in c:
        notes.append("max_position_embeddings absent: FalconConfig's default 2,048 tokens assumed")
    bias = cfg.boolean("bias", False)
    parallel = cfg.boolean("parallel_attn", True) or cfg.boolean("new_decoder_architecture", False)
    if parallel and not cfg.boolean("new_decoder_architecture", False):
        notes.append("its single input LayerNorm per layer is counted as two (2 × hidden extra per layer)")
    fields = {
        "n_layers": cfg.integer(layers_key),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "head_dim": hidden // heads,
        "ffn_hidden_size": cfg.integer("ffn_hidden_size", 4 * hidden),
        "activation": _plain_gelu(cfg, "activation", "gelu"),
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean("tie_word_embeddings", True),
        "position": "alibi" if alibi else "rotary",
        "max_context": cfg.integer("max_position_embeddings", 2048),
        "norm": "layernorm",
        "norm_bias": True,
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "mlp_bias": bias,
        "parallel_residual": parallel,
    }
    return fields, notes


# -- size bounds, checked before anything reads the config: a config.json is user input, and the sizes in it
# drive work (the estimator loops per layer, the search per expert-parallel degree), so every one is capped
# well above any published model; nesting, integer digits, element count and string length are capped too.

HF_MAX_DEPTH = 20
HF_MAX_INT_DIGITS = 18
HF_MAX_ELEMENTS = 50_000
HF_MAX_STRING_CHARS = 100_000
HF_SIZE_LIMITS: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), 1024),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), 262_144),
    **dict.fromkeys(("num_attention_heads", "num_key_value_heads", "n_head"), 4096),
    **dict.fromkeys(
        ("head_dim", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
        65_536,
    ),
    **dict.fromkeys(
        ("intermediate_size", "n_inner", "moe_intermediate_size", "shared_expert_intermediate_size"),
        1_048_576,
    ),
    "vocab_size": 4_194_304,
    **dict.fromkeys(
        ("num_local_experts", "num_experts", "n_routed_experts", "n_shared_experts", "num_experts_per_tok"),
        4096,
    ),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "n_ctx"), 16_777_216),
    **dict.fromkeys(("first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step"), 1024),
}


def check_hf_config_bounds(config: Any) -> None:
    """Refuse a config.json whose size would make work: nesting over ``HF_MAX_DEPTH``, an integer of more than
    ``HF_MAX_INT_DIGITS`` digits, more than ``HF_MAX_ELEMENTS`` values, a string over ``HF_MAX_STRING_CHARS``
    or holding a NUL character, or a model size over ``HF_SIZE_LIMITS``. Iterative (no recursion), O(size)."""
    if not isinstance(config, dict):
        return
    stack: list[tuple[Any, int, str]] = [(config, 1, "")]
    seen = 0
    while stack:
        value, depth, where = stack.pop()
        seen += 1
        if seen > HF_MAX_ELEMENTS:
            raise ArchitectureImportError(None, None, f"more than {HF_MAX_ELEMENTS:,} values (limit)")
        if isinstance(value, dict | list):
            if depth > HF_MAX_DEPTH:
                raise ArchitectureImportError(
                    None, where or None, f"nested deeper than {HF_MAX_DEPTH} levels (limit)"
                )
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and (len(key) > HF_MAX_STRING_CHARS or "\x00" in key):
                    raise ArchitectureImportError(
                        None, where or None, "a key is too long or holds a NUL character"
                    )
                stack.append((item, depth + 1, f"{where}.{key}" if where else str(key)))
        elif isinstance(value, str):
            if len(value) > HF_MAX_STRING_CHARS:
                raise ArchitectureImportError(
                    None, where, f"string longer than {HF_MAX_STRING_CHARS:,} characters (limit)"
                )
            if "\x00" in value:
                raise ArchitectureImportError(None, where, "string holds a NUL character")
        elif isinstance(value, int) and abs(value) >= 10**HF_MAX_INT_DIGITS:
            raise ArchitectureImportError(None, where, f"integer over {HF_MAX_INT_DIGITS} digits (limit)")
    for key, limit in HF_SIZE_LIMITS.items():
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > limit:
            raise ArchitectureImportError(
                config.get("model_type") if isinstance(config.get("model_type"), str) else None,
                key,
                f"{value:,} is over the limit of {limit:,}",
            )


def _slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9.\-]+", "-", text.lower()).strip("-.")
    return slug[:64].rstrip("-.") or "imported"


def _rope_router_fields(config: dict[str, Any]) -> dict[str, Any]:
    """RoPE base and scaling, and the MoE router's scoring, from a config.json (keys absent = defaults).

    Only what launch files need (Megatron's --rotary-base, --use-rope-scaling / YaRN flags, router flags);
    none of it changes a parameter count. Values of the wrong type are left to pydantic to reject."""
    out: dict[str, Any] = {}
    if config.get("rope_theta") is not None:
        out["rope_theta"] = config["rope_theta"]
    scaling = config.get("rope_scaling")
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind in ("llama3", "yarn"):
            out["rope_scaling"] = kind
            out["rope_scaling_factor"] = scaling.get("factor")
            out["rope_original_context"] = scaling.get("original_max_position_embeddings")
    if config.get("scoring_func") in ("softmax", "sigmoid"):
        out["router_score_function"] = config["scoring_func"]
    for key, field in (("routed_scaling_factor", "router_topk_scaling_factor"), ("n_group", "router_num_groups"),
                       ("topk_group", "router_group_topk")):  # fmt: skip
        if config.get(key) is not None and config.get("n_routed_experts", config.get("num_local_experts")):
            out[field] = config[key]
    return out


def architecture_from_hf_config(
    config: dict,
    *,
    slug: str | None = None,
    name: str | None = None,
    as_of: str | None = None,
) -> Architecture:
    """Build an :class:`Architecture` from a Hugging Face ``config.json`` already parsed into a dict.

    The dict is read as data only. Raises :class:`ArchitectureImportError` for an unsupported ``model_type``,
    a missing or mistyped field, or a config that describes an inconsistent model.
    """
    if not isinstance(config, dict):
        raise ArchitectureImportError(None, None, f"expected a JSON object, got {type(config).__name__}")
    check_hf_config_bounds(config)
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise ArchitectureImportError(None, "model_type", "required field is missing or not a string")
    extra_notes: list[str] = []
    read_as = model_type
    if model_type not in SUPPORTED_HF_MODEL_TYPES:
        if config.get(IMPORT_AS_KEY) == "llama" and llama_shaped(config):
            read_as = "llama"
            extra_notes.append(
                f"model_type {model_type!r} is not one capplan knows: imported as llama-style, assuming "
                + "; ".join(LLAMA_STYLE_ASSUMPTIONS)
            )
        elif llama_shaped(config):
            raise ArchitectureImportError(
                model_type, "model_type",
                f"unsupported model_type, but its fields are llama-shaped: it can be imported as llama-style "
                f"(add \"{IMPORT_AS_KEY}\": \"llama\")",
            )  # fmt: skip
        else:
            raise ArchitectureImportError(model_type, "model_type", "unsupported model_type")
    source_config = config
    if model_type == "gemma3":
        text = config.get("text_config")
        if not isinstance(text, dict):
            raise ArchitectureImportError(
                model_type, "text_config", "required field is missing or not an object"
            )
        defaulted = [k for k in _GEMMA3_TEXT_DEFAULTS if text.get(k) is None]
        source_config = {**text, **{k: _GEMMA3_TEXT_DEFAULTS[k] for k in defaulted}}
        read_as = "gemma3_text"
        extra_notes.append("the language model only: the vision tower and projector are not counted")
        if defaulted:
            extra_notes.append("text_config omits " + ", ".join(f"{k} (Gemma3TextConfig default "
                               f"{_GEMMA3_TEXT_DEFAULTS[k]:,})" for k in defaulted))  # fmt: skip
    cfg = _Cfg(source_config, read_as)
    if read_as == "gpt2":
        fields = _from_gpt2(cfg)
    elif read_as == "gpt_neox":
        fields = _from_gpt_neox(cfg)
    elif read_as in ("deepseek_v3", "deepseek_v2"):
        fields = _from_deepseek_v3(cfg)
        if read_as == "deepseek_v2":
            fields["router_score_correction_bias"] = (
                False  # DeepSeek-V2's gate has no e_score_correction_bias
            )
    elif read_as in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        fields = _from_llama_like(cfg)
    else:
        fields, more = _from_more(cfg)
        extra_notes += more
    origin = config.get("_name_or_path") if isinstance(config.get("_name_or_path"), str) else None
    origin = origin.strip() or None if origin else None
    notes = f"Imported from a Hugging Face config.json (model_type {model_type})"
    if model_type in ("deepseek_v3", "deepseek_v2") and config.get("num_nextn_predict_layers"):
        notes += (
            f"; the {config['num_nextn_predict_layers']} multi-token-prediction module(s) are not counted"
        )
    if extra_notes:
        notes += "; " + "; ".join(extra_notes)
    family = _FAMILY.get(model_type, "llama-style")
    try:
        arch = Architecture(
            slug=slug or "imported",
            name=name or "imported",
            source=USER_CONFIG_SOURCE,
            as_of=as_of or today().isoformat(),
            confidence=Confidence.high,
            notes=notes + ".",
            family=family,
            hf_model_type=model_type,
            **fields,
            **_rope_router_fields(source_config),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or None
        raise ArchitectureImportError(model_type, loc, first["msg"]) from None
    if slug and name:
        return arch
    auto_name, auto_slug = _imported_name(config, arch, origin)
    return arch.model_copy(update={"slug": slug or auto_slug, "name": name or auto_name})


def _size_words(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 0.95e9 else f"{n / 1e6:.0f}M"


def _imported_name(config: dict[str, Any], arch: Architecture, origin: str | None) -> tuple[str, str]:
    """A name and slug for an imported config: its ``_name_or_path`` (the Hugging Face id) when present, else
    the family, size and ``architectures`` class (e.g. "Mistral 7.2B (MistralForCausalLM)")."""
    if origin:
        return origin[:200], _slugify(origin)
    counts = parameter_counts(arch)
    size = _size_words(counts.total)
    if arch.is_moe:
        size += f"-A{_size_words(counts.active)}"
    title = _FAMILY_TITLE.get(arch.family or "", "Llama-style")
    classes = config.get("architectures")
    cls = classes[0] if isinstance(classes, list) and classes and isinstance(classes[0], str) else None
    name = f"{title} {size}" + (f" ({cls[:80]})" if cls else "")
    return name, _slugify(f"{arch.family or 'imported'}-{size}")


__all__ = [
    "Architecture",
    "ArchitectureImportError",
    "CatalogError",
    "LayerParameterCounts",
    "ParameterCounts",
    "SUPPORTED_HF_MODEL_TYPES",
    "architecture_by_slug",
    "architecture_from_hf_config",
    "check_hf_config_bounds",
    "IMPORT_AS_KEY",
    "LLAMA_STYLE_ASSUMPTIONS",
    "llama_shaped",
    "attention_parameters",
    "attention_projection_weights",
    "expert_parameters",
    "kv_cache_width",
    "kv_dim",
    "layer_norm_parameters",
    "layer_parameter_counts",
    "mlp_parameters",
    "mlp_weights",
    "norm_parameters",
    "parameter_counts",
    "q_dim",
    "router_parameters",
    "shared_expert_parameters",
    "stage_parameter_count",
    "v_dim",
]


# -- parameter shapes: the exact tensors of app/bench/model.py, in module order ---------------------------


class ParamShape(Frozen):
    """One parameter tensor of the reference module tree (torchtitan naming)."""

    name: str
    shape: tuple[int, ...]


def parameter_shapes(arch: Architecture) -> tuple[ParamShape, ...]:
    """Every parameter, name and shape, in ``named_parameters()`` order of ``app.bench.model.Transformer``.

    A tied output head shares ``tok_embeddings.weight`` and is not listed again. The element counts add up
    to :func:`parameter_counts` ``.total``; FSDP2's per-rank shard sizes follow from the shapes
    (``app.domain.sharding``).
    """
    h = arch.hidden_size
    out: list[ParamShape] = []

    def add(name: str, *shape: int) -> None:
        out.append(ParamShape(name=name, shape=tuple(shape)))

    def norm(prefix: str, width: int) -> None:
        add(f"{prefix}.weight", width)
        if arch.norm == "layernorm" and arch.norm_bias:
            add(f"{prefix}.bias", width)

    def linear(prefix: str, fan_in: int, fan_out: int, bias: bool) -> None:
        add(f"{prefix}.weight", fan_out, fan_in)
        if bias:
            add(f"{prefix}.bias", fan_out)

    def mlp(prefix: str, width: int) -> None:
        linear(f"{prefix}.w1", h, width, arch.mlp_bias)
        linear(f"{prefix}.w2", width, h, arch.mlp_bias)
        if arch.activation == "swiglu":
            linear(f"{prefix}.w3", h, width, arch.mlp_bias)

    add("tok_embeddings.weight", arch.vocab_size, h)
    if arch.position == "learned":
        add("pos_embeddings.weight", arch.max_position_embeddings, h)  # type: ignore[arg-type]
    if arch.embedding_norm:
        norm("embedding_norm", h)
    for i in range(arch.n_layers):
        p = f"layers.{i}"
        norm(f"{p}.attention_norm", h)
        a = f"{p}.attention"
        if arch.attention == "mla":
            qk = arch.n_heads * arch.head_dim
            if arch.q_lora_rank is None:
                linear(f"{a}.wq", h, qk, False)
            else:
                linear(f"{a}.wq_a", h, arch.q_lora_rank, arch.qkv_bias)
                norm(f"{a}.q_norm", arch.q_lora_rank)
                linear(f"{a}.wq_b", arch.q_lora_rank, qk, False)
            linear(f"{a}.wkv_a", h, arch.kv_lora_rank + arch.qk_rope_head_dim, arch.qkv_bias)  # type: ignore[operator]
            norm(f"{a}.kv_norm", arch.kv_lora_rank)  # type: ignore[arg-type]
            kv_up = arch.n_heads * (arch.qk_nope_head_dim + arch.v_head_dim)  # type: ignore[operator]
            linear(f"{a}.wkv_b", arch.kv_lora_rank, kv_up, False)  # type: ignore[arg-type]
            linear(f"{a}.wo", arch.n_heads * arch.v_head_dim, h, arch.attn_out_bias)  # type: ignore[operator]
        else:
            linear(f"{a}.wq", h, q_dim(arch), arch.qkv_bias)
            linear(f"{a}.wk", h, kv_dim(arch), arch.qkv_bias)
            linear(f"{a}.wv", h, kv_dim(arch), arch.qkv_bias)
            linear(f"{a}.wo", q_dim(arch), h, arch.attn_out_bias)
            if arch.qk_norm:
                norm(f"{a}.q_norm", arch.head_dim)
                norm(f"{a}.k_norm", arch.head_dim)
        norm(f"{p}.ffn_norm", h)
        if arch.is_moe_layer(i):
            m = f"{p}.moe"
            e, f = arch.n_experts, arch.expert_ffn_hidden_size
            if arch.router_score_correction_bias:  # a direct parameter: listed before the gate submodule
                add(f"{m}.router.expert_bias", e)
            linear(f"{m}.router.gate", h, e, arch.router_bias)
            add(f"{m}.experts.w1", e, f, h)  # type: ignore[arg-type]
            add(f"{m}.experts.w2", e, h, f)  # type: ignore[arg-type]
            if arch.activation == "swiglu":
                add(f"{m}.experts.w3", e, f, h)  # type: ignore[arg-type]
            if arch.mlp_bias:
                add(f"{m}.experts.b1", e, f)  # type: ignore[arg-type]
                add(f"{m}.experts.b2", e, h)
                if arch.activation == "swiglu":
                    add(f"{m}.experts.b3", e, f)  # type: ignore[arg-type]
            for j in range(arch.n_shared_experts):
                mlp(f"{m}.shared_experts.{j}", arch.shared_expert_ffn_hidden_size)  # type: ignore[arg-type]
            if arch.n_shared_experts and arch.shared_expert_gate:
                add(f"{m}.shared_expert_gate.weight", 1, h)
        else:
            mlp(f"{p}.feed_forward", arch.ffn_hidden_size)
    norm("norm", h)
    if not arch.tied_embeddings:
        add("output.weight", arch.vocab_size, h)
    return tuple(out)
