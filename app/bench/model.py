"""The torch reference model the benchmark runner trains: a decoder-only transformer built from an Architecture.

Module tree (torchtitan naming, so FSDP2 ``fully_shard`` per block and then on the root works as in torchtitan)::

    tok_embeddings                      nn.Embedding(V, h)
    pos_embeddings                      nn.Embedding(max_position_embeddings, h)   (position "learned" only)
    embedding_norm                      (arch.embedding_norm only)
    layers[i]: TransformerBlock
        attention_norm
        attention: wq, wk, wv, wo       (+ q_norm, k_norm with qk_norm)
                   MLA: wq | wq_a, q_norm, wq_b; wkv_a, kv_norm, wkv_b; wo
        ffn_norm
        feed_forward: w1, w2, w3        (dense layer; GELU has no w3)
        moe: router.gate, experts.{w1,w2,w3}, shared_experts[j].{w1,w2,w3}, shared_expert_gate   (MoE layer)
    norm
    output                              nn.Linear(h, V, bias=False), weight tied to tok_embeddings when asked

Every parameter that :func:`app.domain.model.counts.parameter_counts` counts exists here with the same shape
(``app.domain.model.torch_shapes.parameter_shapes`` lists them in module order), so ``numel`` agrees exactly.

Compute: pre-norm residual blocks (``parallel_residual`` reads both branches from the block input, NeoX style);
rotary embedding on the first ``rotary_fraction`` of each head, real-valued (rotate-half) against fp32 cos/sin
*buffers*, so autograd saves nothing for it but those buffers; attention through
``F.scaled_dot_product_attention(is_causal=True, enable_gqa=True)`` (no K/V repetition: on CPU in torch 2.13 the
fused ``_scaled_dot_product_flash_attention_for_cpu`` kernel runs for bf16 and fp32 and handles GQA natively);
SwiGLU ``w2(silu(w1 x) · w3 x)`` or GELU ``w2(gelu(w1 x))``; no dropout. MoE layers route each token to its
top-k experts (softmax over the router logits in fp32, top-k weights renormalised only when k > 1 — the
Mixtral convention) and run the experts one after the other on their gathered tokens.

Activation checkpointing (``torch.utils.checkpoint``, non-reentrant): ``"full"`` recomputes each whole block
from its input during backward; ``"selective"`` recomputes only the attention core (the SDPA call), the
Korthikanti et al. 2022 selective scheme. Both are applied *inside* ``TransformerBlock.forward`` so the module
tree and parameter names do not change.

ALiBi is not implemented (it needs an explicit attention bias, which sends SDPA to a different kernel).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from app.bench.scaling import layer_scale, scaled_arch  # noqa: F401  (re-exported)
from app.domain.model.architecture import Architecture

CheckpointMode = Literal["none", "selective", "full"]
CHECKPOINT_MODES: tuple[CheckpointMode, ...] = ("none", "selective", "full")

NORM_EPS = 1e-5
ROPE_THETA = 10_000.0
DEFAULT_MAX_SEQ_LEN = 4096


# -- helpers ------------------------------------------------------------------------------------------------


class _RMSNormFunction(torch.autograd.Function):
    """RMSNorm that saves exactly what a fused kernel saves: the input and the fp32 ``rstd`` per row.

    ``nn.RMSNorm`` on CPU decomposes into fp32 ops and autograd then keeps an fp32 copy of the input and an
    fp32 normalised tensor (10 bytes per bf16 element instead of 2), while the fused CUDA kernel keeps input +
    rstd. Writing the function out makes the saved set the same on every device, so one activation formula
    holds for CPU ground truth and GPU runs. Arithmetic is in fp32, the output in the input's dtype.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        return (xf * rstd * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # type: ignore[override]
        x, rstd, weight = ctx.saved_tensors
        xhat = x.float() * rstd
        dyf = dy.float()
        dw = (dyf * xhat).sum(dim=tuple(range(dy.dim() - 1)))
        g = dyf * weight.float()
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx.to(x.dtype), dw.to(weight.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = NORM_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFunction.apply(x, self.weight, self.eps)


def _norm(arch: Architecture, width: int) -> nn.Module:
    if arch.norm == "layernorm":
        return nn.LayerNorm(width, eps=NORM_EPS, bias=arch.norm_bias)
    return RMSNorm(width)


def rotary_dim(arch: Architecture, head_dim: int) -> int:
    """Channels of a head that are rotated (even), per ``rotary_fraction``."""
    return int(head_dim * arch.rotary_fraction) // 2 * 2


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` channels of ``x`` (b, s, heads, d); ``cos``/``sin`` are (s, rot).

    ``cos``/``sin`` are buffers and need no grad, so autograd saves only them (not ``x``) for this.
    """
    rot = cos.shape[-1]
    if rot == 0:
        return x
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    if rot == x.shape[-1]:
        return (x * c + _rotate_half(x) * s).to(x.dtype)
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    return torch.cat(((x_rot * c + _rotate_half(x_rot) * s).to(x.dtype), x_pass), dim=-1)


def rope_tables(
    rot: int, max_seq_len: int, *, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 (max_seq_len, rot) cos and sin tables, rotate-half layout."""
    if rot == 0:
        empty = torch.zeros(max_seq_len, 0, device=device)
        return empty, empty.clone()
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, rot, 2, device=device, dtype=torch.float32) / rot))
    t = torch.arange(max_seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


# -- attention ----------------------------------------------------------------------------------------------


class Attention(nn.Module):
    """GQA/MHA/MQA self-attention: wq, wk, wv, wo (+ per-head q_norm/k_norm)."""

    def __init__(self, arch: Architecture, checkpoint_core: bool) -> None:
        super().__init__()
        h, hd = arch.hidden_size, arch.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = arch.n_heads, arch.n_kv_heads, hd
        self.checkpoint_core = checkpoint_core
        self.wq = nn.Linear(h, arch.n_heads * hd, bias=arch.qkv_bias)
        self.wk = nn.Linear(h, arch.n_kv_heads * hd, bias=arch.qkv_bias)
        self.wv = nn.Linear(h, arch.n_kv_heads * hd, bias=arch.qkv_bias)
        self.wo = nn.Linear(arch.n_heads * hd, h, bias=arch.attn_out_bias)
        self.qk_norm = arch.qk_norm
        if arch.qk_norm:
            self.q_norm = _norm(arch, hd)
            self.k_norm = _norm(arch, hd)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = attention_core(q, k, v, self.checkpoint_core)
        return self.wo(out.reshape(b, s, -1))


class LatentAttention(nn.Module):
    """DeepSeek multi-head latent attention (MLA): low-rank q (optional) and kv, shared rotary key."""

    def __init__(self, arch: Architecture, checkpoint_core: bool) -> None:
        super().__init__()
        h, nh = arch.hidden_size, arch.n_heads
        self.n_heads = nh
        self.nope, self.rope = arch.qk_nope_head_dim, arch.qk_rope_head_dim
        self.v_head = arch.v_head_dim
        self.kv_lora = arch.kv_lora_rank
        self.checkpoint_core = checkpoint_core
        qk_head = self.nope + self.rope
        if arch.q_lora_rank is None:
            self.wq = nn.Linear(h, nh * qk_head, bias=False)
        else:
            self.wq_a = nn.Linear(h, arch.q_lora_rank, bias=arch.qkv_bias)
            self.q_norm = _norm(arch, arch.q_lora_rank)
            self.wq_b = nn.Linear(arch.q_lora_rank, nh * qk_head, bias=False)
        self.wkv_a = nn.Linear(h, self.kv_lora + self.rope, bias=arch.qkv_bias)
        self.kv_norm = _norm(arch, self.kv_lora)
        self.wkv_b = nn.Linear(self.kv_lora, nh * (self.nope + self.v_head), bias=False)
        self.wo = nn.Linear(nh * self.v_head, h, bias=arch.attn_out_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        nh = self.n_heads
        q = self.wq(x) if hasattr(self, "wq") else self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(b, s, nh, self.nope + self.rope)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        kv, k_pe = self.wkv_a(x).split([self.kv_lora, self.rope], dim=-1)
        k_pe = apply_rotary(k_pe.unsqueeze(2), cos, sin)
        kv = self.wkv_b(self.kv_norm(kv)).view(b, s, nh, self.nope + self.v_head)
        k_nope, v = kv.split([self.nope, self.v_head], dim=-1)
        q = torch.cat((q_nope, apply_rotary(q_pe, cos, sin)), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(b, s, nh, self.rope)), dim=-1)
        qk_head = self.nope + self.rope
        if self.v_head != qk_head:
            # the fused SDPA kernels want one head width; pad V (zeros) and drop the padding after
            v = F.pad(v, (0, qk_head - self.v_head))
        out = attention_core(q, k, v, self.checkpoint_core)[..., : self.v_head]
        return self.wo(out.reshape(b, s, -1))


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, recompute: bool) -> torch.Tensor:
    """Causal SDPA on (b, s, heads, d) inputs; returns (b, s, heads, d_v). ``recompute``: selective checkpoint."""
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if recompute and torch.is_grad_enabled():
        out = checkpoint(_sdpa, q, k, v, use_reentrant=False)
    else:
        out = _sdpa(q, k, v)
    return out.transpose(1, 2)


# -- MLPs ----------------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    """SwiGLU ``w2(silu(w1 x) * w3 x)`` or GELU ``w2(gelu(w1 x))``."""

    def __init__(self, arch: Architecture, width: int) -> None:
        super().__init__()
        h = arch.hidden_size
        self.gated = arch.activation == "swiglu"
        self.w1 = nn.Linear(h, width, bias=arch.mlp_bias)
        self.w2 = nn.Linear(width, h, bias=arch.mlp_bias)
        if self.gated:
            self.w3 = nn.Linear(h, width, bias=arch.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class Router(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.gate = nn.Linear(arch.hidden_size, arch.n_experts, bias=arch.router_bias)
        if arch.router_score_correction_bias:
            # DeepSeek-V3 e_score_correction_bias: shifts expert *selection* only, so it never gets a gradient.
            self.expert_bias = nn.Parameter(torch.zeros(arch.n_experts))


class Experts(nn.Module):
    """``n_experts`` MLPs as stacked weights (E, out, in), run one expert at a time."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        e, h, f = arch.n_experts, arch.hidden_size, arch.expert_ffn_hidden_size
        self.gated = arch.activation == "swiglu"
        self.w1 = nn.Parameter(torch.empty(e, f, h))
        self.w2 = nn.Parameter(torch.empty(e, h, f))
        if self.gated:
            self.w3 = nn.Parameter(torch.empty(e, f, h))
        self.has_bias = arch.mlp_bias
        if arch.mlp_bias:
            self.b1 = nn.Parameter(torch.zeros(e, f))
            self.b2 = nn.Parameter(torch.zeros(e, h))
            if self.gated:
                self.b3 = nn.Parameter(torch.zeros(e, f))

    def expert(self, i: int, x: torch.Tensor) -> torch.Tensor:
        def lin(name: str, inp: torch.Tensor) -> torch.Tensor:
            bias = getattr(self, "b" + name[1:])[i] if self.has_bias else None
            return F.linear(inp, getattr(self, name)[i], bias)

        if self.gated:
            return lin("w2", F.silu(lin("w1", x)) * lin("w3", x))
        return lin("w2", F.gelu(lin("w1", x)))


class MoE(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.top_k = arch.experts_top_k
        self.n_experts = arch.n_experts
        self.router = Router(arch)
        self.experts = Experts(arch)
        if arch.n_shared_experts:
            self.shared_experts = nn.ModuleList(
                FeedForward(arch, arch.shared_expert_ffn_hidden_size)  # type: ignore[arg-type]
                for _ in range(arch.n_shared_experts)
            )
            if arch.shared_expert_gate:
                self.shared_expert_gate = nn.Linear(arch.hidden_size, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        k = self.top_k
        flat = x.reshape(b * s, h)
        scores = F.softmax(self.router.gate(flat).float(), dim=-1)
        select = scores.detach()
        if hasattr(self.router, "expert_bias"):
            select = select + self.router.expert_bias.detach().float()
        top_idx = torch.topk(select, k, dim=-1).indices
        top_w = scores.gather(-1, top_idx)
        if k > 1:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        # dispatch: token slots sorted by expert, one gather; each expert runs on its contiguous chunk
        flat_idx = top_idx.reshape(-1)
        order = torch.argsort(flat_idx, stable=True)
        x_sorted = flat[order // k]
        counts = torch.bincount(flat_idx, minlength=self.n_experts).tolist()
        outs = [self.experts.expert(i, chunk) for i, chunk in enumerate(x_sorted.split(counts)) if counts[i]]
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        y = torch.cat(outs)[inverse].view(b * s, k, h)
        out = (y * top_w.to(x.dtype).unsqueeze(-1)).sum(dim=1)
        if hasattr(self, "shared_experts"):
            shared = self.shared_experts[0](flat)
            for extra in self.shared_experts[1:]:
                shared = shared + extra(flat)
            if hasattr(self, "shared_expert_gate"):
                shared = torch.sigmoid(self.shared_expert_gate(flat)) * shared
            out = out + shared
        return out.view(b, s, h)


# -- block and model ----------------------------------------------------------------------------------------


class TransformerBlock(nn.Module):
    def __init__(self, arch: Architecture, index: int, checkpoint_mode: CheckpointMode) -> None:
        super().__init__()
        self.index = index
        self.checkpoint_mode = checkpoint_mode
        self.parallel_residual = arch.parallel_residual
        self.is_moe = arch.is_moe_layer(index)
        attn_cls = LatentAttention if arch.attention == "mla" else Attention
        self.attention_norm = _norm(arch, arch.hidden_size)
        self.attention = attn_cls(arch, checkpoint_core=checkpoint_mode == "selective")
        self.ffn_norm = _norm(arch, arch.hidden_size)
        if self.is_moe:
            self.moe = MoE(arch)
        else:
            self.feed_forward = FeedForward(arch, arch.ffn_hidden_size)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.moe(x) if self.is_moe else self.feed_forward(x)

    def _forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.parallel_residual:
            return x + self.attention(self.attention_norm(x), cos, sin) + self._mlp(self.ffn_norm(x))
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self._mlp(self.ffn_norm(h))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.checkpoint_mode == "full" and torch.is_grad_enabled():
            return checkpoint(self._forward, x, cos, sin, use_reentrant=False)
        return self._forward(x, cos, sin)


class Transformer(nn.Module):
    """Decoder-only LM: ``forward(tokens (b, s) int64) -> logits (b, s, V)`` in the parameters' dtype."""

    def __init__(
        self, arch: Architecture, *, checkpoint_mode: CheckpointMode = "none", max_seq_len: int | None = None
    ) -> None:
        super().__init__()
        if arch.position == "alibi":
            raise NotImplementedError("ALiBi positions are not implemented in the bench model")
        if checkpoint_mode not in CHECKPOINT_MODES:
            raise ValueError(f"checkpoint must be one of {CHECKPOINT_MODES}, got {checkpoint_mode!r}")
        self.arch = arch
        self.checkpoint_mode = checkpoint_mode
        self.max_seq_len = max_seq_len or min(arch.max_context, DEFAULT_MAX_SEQ_LEN)
        h = arch.hidden_size
        self.tok_embeddings = nn.Embedding(arch.vocab_size, h)
        if arch.position == "learned":
            self.pos_embeddings = nn.Embedding(arch.max_position_embeddings, h)  # type: ignore[arg-type]
        if arch.embedding_norm:
            self.embedding_norm = _norm(arch, h)
        self.layers = nn.ModuleList(TransformerBlock(arch, i, checkpoint_mode) for i in range(arch.n_layers))
        self.norm = _norm(arch, h)
        self.output = nn.Linear(h, arch.vocab_size, bias=False)
        if arch.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        rot_head = arch.qk_rope_head_dim if arch.attention == "mla" else arch.head_dim
        self.rot = rotary_dim(arch, rot_head) if arch.position == "rotary" else 0  # type: ignore[arg-type]
        cos, sin = rope_tables(self.rot, self.max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Deterministic init (normal 0.02, norms to 1, biases to 0) and rotary tables; call after ``to_empty``."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        for name, p in self.named_parameters():
            if p.is_meta:
                continue
            leaf = name.rsplit(".", 1)[-1]
            if p.dim() == 1 and (leaf == "weight" and "norm" in name):
                p.fill_(1.0)
            elif p.dim() == 1 or leaf.startswith("b") or leaf == "expert_bias":
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * 0.02)
        if not self.rope_cos.is_meta:
            cos, sin = rope_tables(self.rot, self.max_seq_len, device=self.rope_cos.device)
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        if s > self.max_seq_len:
            raise ValueError(f"sequence length {s} exceeds max_seq_len {self.max_seq_len}")
        x = self.tok_embeddings(tokens)
        if hasattr(self, "pos_embeddings"):
            x = x + self.pos_embeddings(torch.arange(s, device=tokens.device))
        if hasattr(self, "embedding_norm"):
            x = self.embedding_norm(x)
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy on fp32 logits (the upcast every recipe uses; see ``logits_bytes``)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def build_model(
    arch: Architecture,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    checkpoint: CheckpointMode = "none",
    max_seq_len: int | None = None,
    seed: int = 0,
) -> Transformer:
    """Build, initialise (unless on ``meta``) and cast the reference model. Rotary tables stay fp32."""
    with torch.device(device):
        model = Transformer(arch, checkpoint_mode=checkpoint, max_seq_len=max_seq_len)
    model.init_weights(seed)
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
