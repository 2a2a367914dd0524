"""Exact parameter counts of an :class:`Architecture`: the shape helpers the memory and FLOPs models use
(projection widths, KV cache width, per-module parameters), counts per layer kind, total and active per
token, and per pipeline stage.
"""

from __future__ import annotations

from pydantic import Field

from app.domain.model.architecture import Architecture, LayerKind
from app.domain.provenance import Frozen

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


def mtp_module_matmul_weights(arch: Architecture) -> int:
    """GEMM weights a token multiplies through in one multi-token prediction module (DeepSeek-V3 §2.2): a layer of
    the model's last kind, the shared output head once more (V·h) and the module's 2h→h projection."""
    layer = layer_parameter_counts(arch, arch.layer_kinds()[-1]).matmul_weights_active
    h = arch.hidden_size
    return layer + arch.vocab_size * h + 2 * h * h


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
