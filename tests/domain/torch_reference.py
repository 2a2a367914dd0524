"""Test-only reference: build an Architecture as a real torch module tree on the meta device and count numel.

This is deliberately written from the model code's point of view (module by module, the way the Hugging Face
implementations lay them out), not from the closed-form formulas in ``app.domain.model.counts``, so that
agreement between the two is evidence and not a tautology. ``device='meta'`` allocates no memory, so even
DeepSeek-V3 (671B) builds in seconds.

Conventions that mirror the reference implementations:
- tied embeddings share one Parameter between ``embed_tokens`` and ``lm_head`` (counted once, as
  ``named_parameters()`` de-duplicates);
- routed experts are fused tensors like ``MixtralExperts`` (``gate_up_proj`` (E, 2f, h), ``down_proj`` (E, h, f));
- DeepSeek-V3's ``e_score_correction_bias`` is an ``nn.Parameter`` as in DeepSeek's own model code (HF keeps it as
  a buffer; it is in the checkpoint and in the published 671B count either way).

Import this module only after ``pytest.importorskip("torch")``.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from app.domain.model.architecture import Architecture


def _norm(arch: Architecture, width: int) -> nn.Module:
    if arch.norm == "layernorm":
        return nn.LayerNorm(width, bias=arch.norm_bias)
    return nn.RMSNorm(width)


class GroupedQueryAttention(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        h, hd = arch.hidden_size, arch.head_dim
        self.q_proj = nn.Linear(h, arch.n_heads * hd, bias=arch.qkv_bias)
        self.k_proj = nn.Linear(h, arch.n_kv_heads * hd, bias=arch.qkv_bias)
        self.v_proj = nn.Linear(h, arch.n_kv_heads * hd, bias=arch.qkv_bias)
        self.o_proj = nn.Linear(arch.n_heads * hd, h, bias=arch.attn_out_bias)
        if arch.qk_norm:
            self.q_norm = _norm(arch, hd)
            self.k_norm = _norm(arch, hd)


class MultiHeadLatentAttention(nn.Module):
    """DeepseekV3Attention's parameters."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        h, nh = arch.hidden_size, arch.n_heads
        qk_head = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        if arch.q_lora_rank is None:
            self.q_proj = nn.Linear(h, nh * qk_head, bias=False)
        else:
            self.q_a_proj = nn.Linear(h, arch.q_lora_rank, bias=arch.qkv_bias)
            self.q_a_layernorm = _norm(arch, arch.q_lora_rank)
            self.q_b_proj = nn.Linear(arch.q_lora_rank, nh * qk_head, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, arch.kv_lora_rank + arch.qk_rope_head_dim, bias=arch.qkv_bias)
        self.kv_a_layernorm = _norm(arch, arch.kv_lora_rank)
        self.kv_b_proj = nn.Linear(
            arch.kv_lora_rank, nh * (arch.qk_nope_head_dim + arch.v_head_dim), bias=False
        )
        self.o_proj = nn.Linear(nh * arch.v_head_dim, h, bias=arch.attn_out_bias)


class FeedForward(nn.Module):
    def __init__(self, arch: Architecture, width: int) -> None:
        super().__init__()
        h = arch.hidden_size
        if arch.activation == "swiglu":
            self.gate_proj = nn.Linear(h, width, bias=arch.mlp_bias)
            self.up_proj = nn.Linear(h, width, bias=arch.mlp_bias)
            self.down_proj = nn.Linear(width, h, bias=arch.mlp_bias)
        else:
            self.fc_in = nn.Linear(h, width, bias=arch.mlp_bias)
            self.fc_out = nn.Linear(width, h, bias=arch.mlp_bias)


class FusedExperts(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        e, h, f = arch.n_experts, arch.hidden_size, arch.expert_ffn_hidden_size
        up_rows = 2 * f if arch.activation == "swiglu" else f
        self.gate_up_proj = nn.Parameter(torch.empty(e, up_rows, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, f))
        if arch.mlp_bias:
            self.gate_up_bias = nn.Parameter(torch.empty(e, up_rows))
            self.down_bias = nn.Parameter(torch.empty(e, h))


class Router(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(arch.n_experts, arch.hidden_size))
        if arch.router_bias:
            self.bias = nn.Parameter(torch.empty(arch.n_experts))
        if arch.router_score_correction_bias:
            self.e_score_correction_bias = nn.Parameter(torch.empty(arch.n_experts))


class SparseMoeBlock(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.gate = Router(arch)
        self.experts = FusedExperts(arch)
        if arch.n_shared_experts:
            self.shared_experts = nn.ModuleList(
                FeedForward(arch, arch.shared_expert_ffn_hidden_size) for _ in range(arch.n_shared_experts)
            )
            if arch.shared_expert_gate:
                self.shared_expert_gate = nn.Linear(arch.hidden_size, 1, bias=False)


class DecoderLayer(nn.Module):
    def __init__(self, arch: Architecture, index: int) -> None:
        super().__init__()
        self.input_layernorm = _norm(arch, arch.hidden_size)
        self.self_attn = (
            MultiHeadLatentAttention(arch) if arch.attention == "mla" else GroupedQueryAttention(arch)
        )
        self.post_attention_layernorm = _norm(arch, arch.hidden_size)
        moe = (
            arch.n_experts > 0
            and index >= arch.first_k_dense_layers
            and (index - arch.first_k_dense_layers) % arch.moe_layer_freq == 0
        )
        self.mlp = SparseMoeBlock(arch) if moe else FeedForward(arch, arch.ffn_hidden_size)


class ReferenceModel(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size)
        if arch.position == "learned":
            self.embed_positions = nn.Embedding(arch.max_position_embeddings, arch.hidden_size)
        if arch.embedding_norm:
            self.embed_layernorm = _norm(arch, arch.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(arch, i) for i in range(arch.n_layers))
        self.final_norm = _norm(arch, arch.hidden_size)
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)
        if arch.tied_embeddings:
            self.lm_head.weight = self.embed_tokens.weight


def build_reference_model(arch: Architecture) -> ReferenceModel:
    with torch.device("meta"):
        return ReferenceModel(arch)


def _component(name: str) -> str:
    leaf_module = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else name
    if "norm" in leaf_module:
        return "norms"
    if name.startswith("embed_tokens."):
        return "embedding"
    if name.startswith("embed_positions."):
        return "position"
    if name.startswith("lm_head."):
        return "output_head"
    if ".self_attn." in name:
        return "attention"
    if ".mlp.experts." in name:
        return "experts"
    if ".mlp.shared_expert" in name:
        return "shared_experts"
    if ".mlp.gate." in name:
        return "router"
    if ".mlp." in name:
        return "mlp_dense"
    raise AssertionError(f"unclassified parameter {name}")


def reference_counts(arch: Architecture) -> dict[str, object]:
    """numel of the meta-device model: ``total``, per component, and per layer index."""
    model = build_reference_model(arch)
    components: Counter[str] = Counter()
    per_layer: Counter[int] = Counter()
    total = 0
    for name, param in model.named_parameters():  # de-duplicates the tied lm_head weight
        n = param.numel()
        total += n
        components[_component(name)] += n
        if name.startswith("layers."):
            per_layer[int(name.split(".")[1])] += n
    return {"total": total, "components": dict(components), "per_layer": dict(per_layer)}
