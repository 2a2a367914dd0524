"""The exact parameter tensors of ``app/bench/model.py``, in module order, so the runner's ``numel`` and
the FSDP2 state bytes agree with :func:`app.domain.model.counts.parameter_counts` exactly.
"""

from __future__ import annotations

from app.domain.model.architecture import Architecture
from app.domain.model.counts import kv_dim, q_dim
from app.domain.provenance import Frozen

# -- parameter shapes: the exact tensors of app/bench/model.py, in module order ---------------------------


class ParamShape(Frozen):
    """One parameter tensor of the reference module tree (torchtitan naming)."""

    name: str
    shape: tuple[int, ...]


def parameter_shapes(arch: Architecture) -> tuple[ParamShape, ...]:
    """Every parameter, name and shape, in ``named_parameters()`` order of ``app.bench.model.Transformer``.

    A tied output head shares ``tok_embeddings.weight`` and is not listed again. The element counts add up
    to :func:`parameter_counts` ``.total``; FSDP2's per-rank shard sizes follow from the shapes
    (``app.domain.estimator.sharding``).
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
