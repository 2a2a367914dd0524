"""Activation memory: the bytes one transformer layer keeps between forward and backward, per rank.

Structure after Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(Table 2 and §4), generalised to GQA/MQA and MLA, SwiGLU, RMSNorm, no-dropout Llama-style blocks, MoE with
top-k routed tokens, FlashAttention, tensor (``t``), sequence (SP) and context (``c``) parallelism, and
selective / full recompute. Every term is ``tokens × width × bytes`` for one saved tensor, so the result is
exact bytes, not a fitted constant.

Two accounting conventions (``framework_style``):

``"megatron"`` — Korthikanti's accounting, used when comparing with published Megatron runs: 16-bit
    activations, 1-byte dropout masks (when ``dropout``; default on for GELU/GPT-style models, off for
    SwiGLU/Llama-style), norm statistics ignored, fc1 output stored gate‖up for SwiGLU (``6·s·b·f``). For a
    GPT-3 layer it reproduces the paper's closed forms exactly (see ``tests/domain/test_activations.py``).

``"torch"`` — what eager PyTorch autograd saves for ``app/bench/model.py``'s blocks, checked within 5 % (in
    practice exactly, up to LayerNorm statistics) against ``torch.autograd.graph.saved_tensors_hooks`` on CPU:
    norm input + fp32 ``rstd`` (RMSNorm; LayerNorm keeps mean and rstd, fp32 on CUDA — the CPU kernel keeps
    them in the input dtype), the linear inputs, the post-rotary Q and K, V, and for fused attention the
    output plus an fp32 log-sum-exp per head and token, SwiGLU's four ``f``-wide tensors (w1 out, silu out,
    w3 out, product), GELU's two, no dropout. On CPU (torch 2.13) ``scaled_dot_product_attention`` runs
    ``_scaled_dot_product_flash_attention_for_cpu`` for bf16 and fp32 causal attention without a mask; it saves
    q, k, v, out and an fp32 logsumexp (b, heads, s), handles GQA natively (K/V stay ``g·d`` wide) and writes
    its output in (b, s, heads, d) layout, so the ``wo`` input is the same storage as the saved output.
    ``flash_attention=False`` models the math kernel (``SDPBackend.MATH``): Q and K scaled, K and V expanded
    to all ``a`` heads, the ``a·s²`` softmax probabilities, and a separate contiguous ``wo`` input.

Notation in ``formula`` strings: ``T`` tokens of the micro-batch on this rank (``b·s/c``), ``T/t`` with SP,
``h`` hidden, ``a``/``g`` query/KV heads, ``d`` head dim, ``f`` FFN width, ``B`` bytes per activation
element, ``t`` TP degree (``a/t``, ``f/t`` rounded up per rank).

Recompute: ``selective`` drops what the attention core alone keeps (flash: the logsumexp — the output stays,
it is the ``wo`` input; math kernel: the ``s²`` probabilities and the scaled/expanded copies, while the core's
inputs Q, K, V stay as checkpoint inputs); ``full`` keeps only each layer's input (``T·h·B``, ÷t with SP) and
re-materialises one whole layer during its backward (``peak_extra_bytes``).
"""

from __future__ import annotations

from app.domain.estimator.activation_terms import (
    FP32_BYTES,
    INDEX_BYTES,
    MASK_BYTES,
    ActivationTerms,
    FrameworkStyle,
    Shape,
    Terms,
    check_sizes,
    default_dropout,
)
from app.domain.estimator.plan import Recompute
from app.domain.estimator.saved_rows import (
    NVFP4_ELEMENT_B,
    drop_recomputed,
    fp8_attention_inputs,
    quantized_linear_inputs,
)
from app.domain.model.architecture import Architecture, LayerKind


def _norm_terms(
    terms: Terms, sh: Shape, style: FrameworkStyle, n_inputs: int, n_norms: int, width_label: str = "h"
) -> None:
    """Pre-norm inputs (the residual stream) and, for torch, the per-row statistics."""
    arch = sh.arch
    terms.add(
        "norms",
        "norm inputs",
        f"{n_inputs}·{sh.tr}·{width_label}·B",
        n_inputs * sh.tokens_rep * arch.hidden_size * sh.B,
    )
    if style == "torch":
        stat = 2 * FP32_BYTES if arch.norm == "layernorm" else FP32_BYTES
        terms.add("norms", "norm stats", f"{n_norms}·{sh.tr}·{stat}", n_norms * sh.tokens_rep * stat)


def _attention_terms(
    terms: Terms, sh: Shape, style: FrameworkStyle, recompute: Recompute, flash: bool, dropout: bool
) -> None:
    arch = sh.arch
    T, B = sh.tokens, sh.B
    terms.add("attention", "qkv input", f"{sh.tin}·h·B", sh.tokens_in * arch.hidden_size * B)
    if arch.attention == "mla":
        _mla_terms(terms, sh, style, recompute, flash)
        return
    d = arch.head_dim
    a_l, g_l = sh.heads, sh.kv_heads
    selective = recompute is Recompute.selective
    if style == "torch" and arch.qk_norm:
        terms.add("attention", "q/k norm inputs", "T·(a/t + g/t)·d·B", T * (a_l + g_l) * d * B)
        terms.add("attention", "q/k norm stats", "T·(a/t + g/t)·4", T * (a_l + g_l) * FP32_BYTES)
    s_kv = sh.s_full  # keys seen by the local queries (all of them for causal CP)
    if flash or selective or style == "megatron":
        # Q (post-rotary), K, V as the fused kernel's (or the checkpointed core's) inputs
        terms.add("attention", "q", "T·(a/t)·d·B", T * a_l * d * B)
        terms.add("attention", "k, v", "2·T·(g/t)·d·B", 2 * T * g_l * d * B)
    if flash:
        terms.add("attention", "attention output = wo input", "T·(a/t)·d·B", T * a_l * d * B)
        if not selective:
            terms.add("attention", "logsumexp", "T·(a/t)·4", T * a_l * FP32_BYTES)
    else:
        if style == "torch" and not selective:
            # math kernel: q·√scale and k·√scale (k expanded to all heads) for QKᵀ, v expanded for P·V
            terms.add("attention", "scaled q, expanded k, v", "3·T·(a/t)·d·B", 3 * T * a_l * d * B)
        if not selective:
            terms.add("attention", "softmax output", "(a/t)·b·(s/c)·s·B", sh.b * a_l * sh.s_local * s_kv * B)
            if style == "megatron" and dropout:
                terms.add(
                    "attention", "attention dropout mask + output", "(a/t)·b·(s/c)·s·(1+B)",
                    sh.b * a_l * sh.s_local * s_kv * (MASK_BYTES + B),
                )  # fmt: skip
        terms.add("attention", "wo input", "T·(a/t)·d·B", T * a_l * d * B)
    if style == "megatron" and dropout:
        terms.add(
            "dropout_masks",
            "attention-out dropout mask",
            f"{sh.tr}·h·1",
            sh.tokens_rep * arch.hidden_size * MASK_BYTES,
        )


def _mla_terms(terms: Terms, sh: Shape, style: FrameworkStyle, recompute: Recompute, flash: bool) -> None:
    """Multi-head latent attention: latent projections replicated over TP, heads sharded."""
    arch = sh.arch
    T, B, a_l = sh.tokens, sh.B, sh.heads
    qk = arch.head_dim
    v = arch.value_head_dim
    kvl, rope = arch.kv_lora_rank, arch.qk_rope_head_dim
    stats = style == "torch"
    stat = (2 * FP32_BYTES if arch.norm == "layernorm" else FP32_BYTES) if stats else 0
    if arch.q_lora_rank:
        ql = arch.q_lora_rank
        terms.add(
            "attention",
            "q latent (norm input, wq_b input)",
            f"2·{sh.tr}·q_lora·B",
            2 * sh.tokens_rep * ql * B,
        )
        terms.add("attention", "q latent norm stats", f"{sh.tr}·{stat}", sh.tokens_rep * stat)
    terms.add(
        "attention",
        "kv latent + rope key (norm input)",
        f"{sh.tr}·(kv_lora+rope)·B",
        sh.tokens_rep * (kvl + rope) * B,
    )  # type: ignore[operator]
    terms.add("attention", "kv latent norm out (wkv_b input)", f"{sh.tr}·kv_lora·B", sh.tokens_rep * kvl * B)  # type: ignore[operator]
    terms.add("attention", "kv latent norm stats", f"{sh.tr}·{stat}", sh.tokens_rep * stat)
    selective = recompute is Recompute.selective
    # torch pads V to the q/k head width for the fused kernel; Megatron's fused attention takes V as is
    v_core = qk if style == "torch" and flash else v
    terms.add("attention", "q, k (qk_head wide)", "2·T·(a/t)·d_qk·B", 2 * T * a_l * qk * B)
    if style == "torch" and v_core == v:
        # V is a view of the whole kv up-projection output (k_nope ‖ v), which it keeps alive
        terms.add(
            "attention",
            "v (whole wkv_b output)",
            "T·(a/t)·(d_nope+d_v)·B",
            T * a_l * (arch.qk_nope_head_dim + v) * B,
        )  # type: ignore[operator]
    else:
        terms.add("attention", "v", "T·(a/t)·d_v·B", T * a_l * v_core * B)
    shared_out = v_core == v
    if flash:
        if not selective:
            if not shared_out:
                terms.add("attention", "attention output (padded)", "T·(a/t)·d_qk·B", T * a_l * v_core * B)
            terms.add("attention", "logsumexp", "T·(a/t)·4", T * a_l * FP32_BYTES)
    else:
        if not selective:
            terms.add(
                "attention", "softmax output", "(a/t)·b·(s/c)·s·B", sh.b * a_l * sh.s_local * sh.s_full * B
            )
    terms.add("attention", "wo input", "T·(a/t)·d_v·B", T * a_l * v * B)


def _fused_swiglu(style: FrameworkStyle, fused_swiglu: bool) -> bool:
    """A fused SwiGLU kernel in a PyTorch model (Liger-Kernel's ``LigerSiLUMulFunction``, source LIGER-SWIGLU):
    it saves only the gate and up projections' outputs, recomputes silu in the backward and writes the two input
    gradients into those saved tensors. Megatron's own fused SwiGLU is its convention already (3 f-wide
    tensors, a fresh gradient)."""
    return fused_swiglu and style == "torch"


def _mlp_terms(
    terms: Terms,
    sh: Shape,
    style: FrameworkStyle,
    width: int,
    component: str,
    *,
    with_input: bool,
    fused_swiglu: bool = False,
) -> None:
    """One dense MLP over all T tokens: SwiGLU saves 4 f-wide tensors in torch (3 in Megatron: fc1 out
    gate‖up + product; 3 in torch with a fused SwiGLU kernel: gate out, up out, product), GELU saves 2 (GELU
    input, fc2 input)."""
    arch = sh.arch
    f_l = sh.sharded(width)
    if with_input:
        terms.add(component, "mlp input", f"{sh.tin}·h·B", sh.tokens_in * arch.hidden_size * sh.B)
    if arch.activation == "swiglu" and _fused_swiglu(style, fused_swiglu):
        n, what = 3, "gate out, up out, product (fused SwiGLU)"
    elif arch.activation == "swiglu":
        n = 4 if style == "torch" else 3
        what = "w1 out, silu out, w3 out, product" if style == "torch" else "fc1 out (gate‖up), product"
    else:
        n, what = 2, "gelu input, fc2 input"
    terms.add(component, what, f"{n}·T·(f/t)·B", n * sh.tokens * f_l * sh.B)


def _moe_terms(terms: Terms, sh: Shape, style: FrameworkStyle, fused_swiglu: bool = False) -> None:
    """Router + top-k routed tokens through the experts + shared experts.

    Averaged over expert-parallel ranks, each rank's experts process ``T·k`` token slots (the sum of the
    per-expert counts is exactly ``T·k`` without EP). Expert FFNs are split ``f_e/t`` (expert TP = TP); with an
    expert-TP degree e < t (MoE parallel folding) a rank's experts take ``T·e/t·k`` slots of width ``f_e/e``.
    torch (app/bench/model.py): fp32 router probabilities (T·E·4), top-k indices, dispatch/combine indices
    (int64), the fp32 renormalised weights (k > 1) and their bf16 copy, the gathered tokens (T·k·h·B), the
    expert MLP tensors and the expert outputs before the weighted sum (T·k·h·B).
    """
    arch = sh.arch
    T, B, k, E, h = sh.tokens, sh.B, arch.experts_top_k, arch.n_experts, arch.hidden_size
    Te, te, fe = sh.expert_tokens, sh.te, sh.fe  # noqa: N806
    terms.add("router", "router input", f"{sh.tr}·h·B", sh.tokens_rep * h * B)
    terms.add("router", "router probabilities (fp32)", "T·E·4", T * E * FP32_BYTES)
    if style == "torch":
        per_slot = 3 * INDEX_BYTES + B + (FP32_BYTES if k > 1 else 0)
        terms.add(
            "router", "top-k/dispatch/combine indices + weights", f"T·k·{per_slot}" + (" + T·4" if k > 1 else ""),
            T * k * per_slot + (T * FP32_BYTES if k > 1 else 0),
        )  # fmt: skip
        terms.add("experts", "dispatched tokens + expert outputs", f"2·{te}·k·h·B", 2 * Te * k * h * B)
    else:
        terms.add("router", "routing map + weights", "T·k·(8 + 4)", T * k * (INDEX_BYTES + FP32_BYTES))
        terms.add(
            "experts", "permuted tokens (fc1 input) + unpermute input", f"2·{te}·k·h·B", 2 * Te * k * h * B
        )
    f_e = sh.expert_sharded(arch.expert_ffn_hidden_size)  # type: ignore[arg-type]
    n = (4 if style == "torch" else 3) if arch.activation == "swiglu" else 2
    if arch.activation == "swiglu" and _fused_swiglu(style, fused_swiglu):
        n = 3
    if style == "torch":
        terms.add("experts", "expert mlp tensors", f"{n}·{te}·k·({fe})·B", n * Te * k * f_e * B)
    else:  # fc1 output (gate‖up for SwiGLU) and the activation's output (fc2 input, what moe_act re-runs)
        terms.add("experts", "expert fc1 output", f"{n - 1}·{te}·k·({fe})·B", (n - 1) * Te * k * f_e * B)
        terms.add("experts", "expert activation output", f"{te}·k·({fe})·B", Te * k * f_e * B)
    if arch.n_shared_experts:
        f_s = sh.sharded(arch.shared_expert_ffn_hidden_size)  # type: ignore[arg-type]
        terms.add(
            "shared_experts", "shared expert mlp tensors", f"{arch.n_shared_experts}·{n}·T·(f_s/t)·B",
            arch.n_shared_experts * n * T * f_s * B,
        )  # fmt: skip
        if arch.shared_expert_gate:
            terms.add(
                "shared_experts",
                "gated shared output + sigmoid",
                f"{sh.tr}·(h+1)·B",
                sh.tokens_rep * (h + 1) * B,
            )


def _layer_terms(
    sh: Shape,
    style: FrameworkStyle,
    kind: LayerKind,
    recompute: Recompute,
    flash: bool,
    dropout: bool,
    fused_swiglu: bool = False,
) -> Terms:
    """What one layer saves with no recompute or selective recompute (``recompute`` only changes the
    attention core): norms, attention, the MLP or MoE block, Megatron's MLP-out dropout mask."""
    arch = sh.arch
    terms = Terms()
    _norm_terms(terms, sh, style, 1 if arch.parallel_residual else 2, 2)
    _attention_terms(terms, sh, style, recompute, flash, dropout)
    if kind == "moe":
        _moe_terms(terms, sh, style, fused_swiglu)
    else:
        _mlp_terms(terms, sh, style, arch.ffn_hidden_size, "mlp", with_input=True, fused_swiglu=fused_swiglu)
    if style == "megatron" and dropout:
        terms.add(
            "dropout_masks",
            "mlp-out dropout mask",
            f"{sh.tr}·h·1",
            sh.tokens_rep * arch.hidden_size * MASK_BYTES,
        )
    return terms


def _selective_op_terms(sh: Shape, kind: LayerKind) -> Terms:
    """torchtitan's per-op selective activation checkpointing (``selective_ac_option = "op"``).

    Its policy saves the outputs of every *odd* matmul of a block (the 1st, 3rd, 5th… ``aten.mm`` in forward
    order), of the attention kernel (output and logsumexp) and of TP's reduce-scatters, and recomputes every other
    op; the block's input is kept as the checkpoint's input. Llama block, forward order wq, wk, wv, wo, w1, w3, w2:
    saved wq out (T·a/t·d), wv out (T·g/t·d), attention out (T·a/t·d) + logsumexp (T·a/t·4), w1 out (T·f/t),
    w2 out (T·h), input (T·h); with TP the two reduce-scatter outputs (2·T/t·h) too. MLA blocks (wq_a, wq_b,
    wkv_a, wkv_b, wo): wq_a out, wkv_a out, wo out. MoE blocks: the router GEMM is the first matmul, then each
    expert's w1/w3/w2 (grouped): router logits, w3 out and the dispatched tokens' w1… pattern averaged as
    half the expert MLP tensors.
    """
    arch = sh.arch
    T, B, h = sh.tokens, sh.B, arch.hidden_size
    kept = Terms()
    kept.add("layer_input", "layer input", f"{sh.tr}·h·B", sh.tokens_rep * h * B)
    if arch.attention == "mla":
        ql = arch.q_lora_rank or 0
        kept.add(
            "attention",
            "wq_a out, wkv_a out",
            "T·(q_lora + kv_lora + rope)·B",
            T * (ql + arch.kv_lora_rank + arch.qk_rope_head_dim) * B,
        )  # type: ignore[operator]
        mm_after_attention = 5 if ql else 4  # wo's position among the block's matmuls
    else:
        a_l, g_l, d = sh.heads, sh.kv_heads, arch.head_dim
        kept.add("attention", "wq out (mm 1), wv out (mm 3)", "T·(a/t + g/t)·d·B", T * (a_l + g_l) * d * B)
        mm_after_attention = 4
    a_l = sh.heads
    kept.add(
        "attention",
        "attention output + logsumexp",
        "T·(a/t)·(d_v·B + 4)",
        T * a_l * (arch.value_head_dim * B + FP32_BYTES),
    )
    if mm_after_attention % 2 == 1:
        kept.add("attention", "wo out", f"{sh.tr}·h·B", sh.tokens_rep * h * B)
    if sh.t > 1:
        kept.add("attention", "TP reduce-scatter outputs", "2·(T/t)·h·B", 2 * sh.tokens_rep * h * B)
    # the MLP's matmuls continue the count: first MLP matmul is mm (mm_after_attention + 1)
    first_saved = (mm_after_attention + 1) % 2 == 1
    if kind == "moe":
        f_e, Te = sh.expert_sharded(arch.expert_ffn_hidden_size), sh.expert_tokens  # type: ignore[arg-type]  # noqa: N806
        k = arch.experts_top_k
        kept.add(
            "router",
            "router logits (fp32) + routing",
            "T·E·4 + T·k·12",
            T * arch.n_experts * FP32_BYTES + T * k * (INDEX_BYTES + FP32_BYTES),
        )
        n = 3 if arch.activation == "swiglu" else 2
        kept.add(
            "experts",
            "dispatched tokens + every other expert matmul output",
            f"{sh.te}·k·h·B + {sh.te}·k·(n/2)·({sh.fe})·B",
            Te * k * h * B + int(Te * k * f_e * B * n / 2),
        )
    else:
        f_l = sh.sharded(arch.ffn_hidden_size)
        widths = (f_l, f_l, h) if arch.activation == "swiglu" else (f_l, h)  # w1, w3, w2 / up, down
        saved = [w for i, w in enumerate(widths) if (i % 2 == 0) == first_saved]
        kept.add(
            "mlp",
            "every other MLP matmul output",
            "T·(" + " + ".join("f/t" if w == f_l else "h" for w in saved) + ")·B",
            T * sum(saved) * B,
        )
    return kept


def _grad_working_set(arch: Architecture, kind: LayerKind, sh: Shape, fused_swiglu: bool = False) -> int:
    """Gradient tensors alive at once inside one layer's backward (estimate).

    The larger of the MLP's (SwiGLU: 3 f-wide grads — 1, the product's, when a fused SwiGLU kernel writes the
    gate and up gradients into its saved inputs; GELU: 2) and attention's (dq, dk, dv, d_out + fp32 dq
    accumulator) working set, plus the incoming and outgoing residual-stream gradients (2·T·h·B).
    """
    T, B, h = sh.tokens, sh.B, arch.hidden_size
    rows = T
    if kind == "moe":
        f = sh.expert_sharded(arch.expert_ffn_hidden_size) * arch.experts_top_k  # type: ignore[operator]
        rows = sh.expert_tokens
    else:
        f = sh.sharded(arch.ffn_hidden_size)
    n_f = (1 if fused_swiglu else 3) if arch.activation == "swiglu" else 2
    mlp = n_f * rows * f * B
    qd = sh.heads * arch.head_dim
    kvd = sh.kv_heads * arch.head_dim if arch.attention == "gqa" else qd
    attn = T * (2 * qd + 2 * kvd) * B + T * qd * FP32_BYTES
    return max(mlp, attn) + 2 * T * h * B


def _core_recompute_bytes(sh: Shape, style: FrameworkStyle, flash: bool, dropout: bool) -> int:
    """What re-running the attention core materialises during a selective-recompute backward."""
    arch = sh.arch
    T, B, a_l = sh.tokens, sh.B, sh.heads
    d_v = arch.head_dim if arch.attention == "mla" and style == "torch" else arch.value_head_dim
    if flash:
        return T * a_l * d_v * B + T * a_l * FP32_BYTES
    scores = sh.b * a_l * sh.s_local * sh.s_full
    per_score = B + (MASK_BYTES + B if style == "megatron" and dropout else 0)
    copies = 3 * T * a_l * arch.head_dim * B if style == "torch" else 0
    return scores * per_score + copies + T * a_l * d_v * B


def layer_activation_bytes(
    arch: Architecture,
    kind: LayerKind,
    *,
    micro_batch: int,
    seq_len: int,
    tp: int = 1,
    cp: int = 1,
    sequence_parallel: bool = False,
    recompute: Recompute = Recompute.none,
    flash_attention: bool = True,
    act_bytes: int = 2,
    framework_style: FrameworkStyle = "torch",
    dropout: bool | None = None,
    recompute_modules: frozenset[str] | None = None,
    fp8_linear_inputs: bool = False,
    fused_swiglu: bool = False,
    expert_tp: int | None = None,
    gathered_tp_inputs: bool = False,
    fp4_linear_inputs: bool = False,
    fp8_attention: bool = False,
) -> ActivationTerms:
    """Bytes one ``kind`` layer keeps between forward and backward for one micro-batch, on one rank.

    ``tp`` divides the head- and FFN-sharded tensors; norms, residual stream and linear inputs are replicated
    over TP unless ``sequence_parallel`` (then everything is ÷t). ``cp`` divides every sequence dimension
    (the ``s²`` scores keep all keys: ``(s/c)·s``). ``dropout`` (Megatron style only) adds 1-byte masks;
    ``None`` = on for GELU models, off for SwiGLU ones. ``gathered_tp_inputs`` (PyTorch DTensor TP, i.e.
    torchtitan): the attention and dense-MLP inputs are all-gathered over TP and kept whole (T·h·B each) even
    with SP, where Megatron keeps the T/t shard and gathers it again in the backward. (The router input keeps
    T/t: torchtitan 0.3 has no expert TP — FSDP2 plans run every expert whole on T/t tokens, ``Plan.etp`` = 1 —
    and torchtitan redistributes the MoE input to Replicate only when the experts are TP-sharded.)

    Examples (GPT-3 layer, h=12288, a=96, s=2048, b=1, Megatron style, no flash) — see
    ``tests/domain/test_activations.py`` for the hand-worked numbers.
    """
    layer = LayerActivations(
        arch, kind, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, sequence_parallel=sequence_parallel,
        flash_attention=flash_attention, act_bytes=act_bytes, framework_style=framework_style, dropout=dropout,
        recompute_modules=recompute_modules, fp8_linear_inputs=fp8_linear_inputs, fused_swiglu=fused_swiglu,
        expert_tp=expert_tp, gathered_tp_inputs=gathered_tp_inputs, fp4_linear_inputs=fp4_linear_inputs,
        fp8_attention=fp8_attention,
    )  # fmt: skip
    sh = layer.sh
    kept, again = layer.kept(recompute)
    legend = (
        f"[{layer.style}; T={sh.tokens} (b={micro_batch}·s={seq_len}/c={cp}), t={tp}, SP={sequence_parallel}, "
        f"h={arch.hidden_size}, a={arch.n_heads}, g={arch.n_kv_heads}, d={arch.head_dim}, "
        f"f={arch.ffn_hidden_size}, B={act_bytes}, flash={flash_attention}, dropout={layer.dropout}]"
    )
    formula = _FORMULAS[recompute].format(kept=kept.render(), again=again, grads=layer.grads)
    if recompute is Recompute.selective and recompute_modules is not None:
        named = ", ".join(sorted(recompute_modules))
        formula = formula.replace("selective recompute:", f"selective recompute ({named}):", 1)
    return ActivationTerms(
        saved_bytes=kept.total(),
        peak_extra_bytes=again + layer.grads,
        by_component=kept.by_component(),
        formula=f"{formula} {legend}",
    )


class LayerActivations:
    """One layer kind's activation terms for one shape (the arguments of :func:`layer_activation_bytes` but the
    recompute), built once: :meth:`totals` gives each recompute mode's (saved, peak extra) bytes — what the plan
    search reads for every key of its space, without the formula and its split."""

    def __init__(
        self,
        arch: Architecture,
        kind: LayerKind,
        *,
        micro_batch: int,
        seq_len: int,
        tp: int = 1,
        cp: int = 1,
        sequence_parallel: bool = False,
        flash_attention: bool = True,
        act_bytes: int = 2,
        framework_style: FrameworkStyle = "torch",
        dropout: bool | None = None,
        recompute_modules: frozenset[str] | None = None,
        fp8_linear_inputs: bool = False,
        fused_swiglu: bool = False,
        expert_tp: int | None = None,
        gathered_tp_inputs: bool = False,
        fp4_linear_inputs: bool = False,
        fp8_attention: bool = False,
    ) -> None:
        self.sh, self.style, self.dropout = _setup(
            arch, kind, micro_batch, seq_len, tp, cp, sequence_parallel, act_bytes, framework_style, dropout,
            expert_tp, gathered_tp_inputs,
        )  # fmt: skip
        self.kind, self.flash, self.modules = kind, flash_attention, recompute_modules
        # Transformer Engine's FP8 / NVFP4 linears save their quantized inputs: (bytes a value, label) or None
        self.quantized = (
            None if self.style != "megatron"
            else (1.0, "fp8") if fp8_linear_inputs
            else (NVFP4_ELEMENT_B, "nvfp4") if fp4_linear_inputs
            else None
        )  # fmt: skip
        # Transformer Engine's FP8 attention keeps its FP8 Q, K, V for the backward (Megatron only)
        self.fp8_attention = fp8_attention and self.style == "megatron"
        self.fused_swiglu = _fused_swiglu(self.style, fused_swiglu)
        self.full = self._layer(Recompute.none)
        self.grads = _grad_working_set(arch, kind, self.sh, self.fused_swiglu)

    def mlp_bytes(self) -> int:
        """The MLP (or MoE) side of the layer with nothing recomputed: what the layer's MLP backward has freed, or
        not yet re-materialised, by the time its attention backward runs (the backward visits the MLP first)."""
        return sum(v for k, v in self.full.by_component().items() if k in MLP_COMPONENTS)

    def totals(self, recompute: Recompute) -> tuple[int, int]:
        """(saved_bytes, peak_extra_bytes) of :func:`layer_activation_bytes` with ``recompute``."""
        kept, again = self.kept(recompute)
        return kept.total(), again + self.grads

    def kept(self, recompute: Recompute) -> tuple[Terms, int]:
        """What the layer keeps under ``recompute`` and what its backward re-materialises besides the
        gradients: every term (full and per-op selective recompute), the attention core (selective), nothing
        (no recompute)."""
        sh, full = self.sh, self.full
        if recompute is Recompute.full:
            kept = Terms()
            kept.add("layer_input", "layer input", f"{sh.tr}·h·B", sh.tokens_rep * sh.arch.hidden_size * sh.B)
            return kept, full.total()
        if recompute is Recompute.selective_op:
            return _selective_op_terms(sh, self.kind), full.total()
        if recompute is Recompute.selective:
            # Megatron's recompute modules (None: the attention core alone, its default); a module re-runs one
            # layer at a time in backward, so what it dropped re-materialises on top of the gradients
            modules = frozenset({"core_attn"}) if self.modules is None else self.modules
            with_core = "core_attn" in modules
            layer = self._layer(Recompute.selective if with_core else Recompute.none)
            kept_rows, dropped = drop_recomputed(layer.rows, modules)
            terms = Terms()
            terms.rows = kept_rows
            core = _core_recompute_bytes(sh, self.style, self.flash, self.dropout) if with_core else 0
            return terms, core + dropped
        return full, 0

    def _layer(self, recompute: Recompute) -> Terms:
        terms = _layer_terms(
            self.sh, self.style, self.kind, recompute, self.flash, self.dropout, self.fused_swiglu
        )
        if self.quantized:
            terms.rows = quantized_linear_inputs(terms.rows, *self.quantized)
        if self.fp8_attention:
            terms.rows = fp8_attention_inputs(terms.rows, self.sh.B)
        return terms


def _setup(
    arch: Architecture,
    kind: LayerKind,
    micro_batch: int,
    seq_len: int,
    tp: int,
    cp: int,
    sp: bool,
    act_bytes: int,
    style: FrameworkStyle,
    dropout: bool | None,
    expert_tp: int | None = None,
    gathered_tp_inputs: bool = False,
) -> tuple[Shape, FrameworkStyle, bool]:
    """The checked arguments of :func:`layer_activation_bytes`: the rank's shape, the style and the dropout."""
    check_sizes(micro_batch, seq_len, tp, cp, act_bytes)
    if kind == "moe" and not arch.is_moe:
        raise ValueError(f"{arch.slug} has no MoE layers")
    if dropout is None:
        dropout = default_dropout(arch, style)
    elif dropout and style == "torch":
        raise ValueError("the torch reference model has no dropout; use framework_style='megatron'")
    if expert_tp is not None and (expert_tp < 1 or tp % expert_tp):
        raise ValueError(f"expert_tp must divide tp ({tp}), got {expert_tp}")
    shape = Shape(
        arch, micro_batch, seq_len, tp, cp, sp, act_bytes, expert_tp, gathered_inputs=gathered_tp_inputs
    )
    return shape, style, dropout


MLP_COMPONENTS = frozenset({"mlp", "router", "experts", "shared_experts"})

_FORMULAS = {
    Recompute.full: "full recompute: {kept}; peak re-materialises {again} + grads {grads}",
    Recompute.selective_op: "per-op selective recompute: {kept}; peak re-materialises {again} + grads {grads}",
    Recompute.selective: "selective recompute: {kept}; core recomputed {again} + grads {grads}",
    Recompute.none: "no recompute: {kept}; grads {grads}",
}


def framework_style_for(framework: str) -> FrameworkStyle:
    """Megatron-LM runs follow the Megatron convention; FSDP2 and DeepSpeed run eager PyTorch blocks."""
    return "megatron" if framework == "megatron" else "torch"
