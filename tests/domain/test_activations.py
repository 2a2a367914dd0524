"""Activation-memory formula: Korthikanti et al. 2022 closed forms by hand, and the generalisations.

The ground truth against real torch (what autograd saves, measured on CPU) is in
tests/bench/test_activation_ground_truth.py; here the formula is checked against numbers worked out by hand.
"""

from __future__ import annotations

import pytest

from app.domain.estimator.activations import framework_style_for, layer_activation_bytes
from app.domain.estimator.head_activations import (
    embedding_activation_bytes,
    fused_linear_chunk_tokens,
    head_activation_bytes,
    logits_bytes,
    loss_peak_bytes,
)
from app.domain.estimator.plan import Recompute
from app.domain.model.architecture import Architecture

# GPT-3 175B layer as in the paper: h = 12288, a = 96 heads of 128, f = 4h, GELU, LayerNorm, learned positions.
GPT3 = Architecture(
    slug="gpt3-like",
    name="GPT-3-like",
    source="test",
    as_of="2020",
    n_layers=96,
    hidden_size=12288,
    n_heads=96,
    n_kv_heads=96,
    head_dim=128,
    ffn_hidden_size=49152,
    activation="gelu",
    vocab_size=50257,
    tied_embeddings=True,
    position="learned",
    max_position_embeddings=2048,
    max_context=2048,
    norm="layernorm",
    norm_bias=True,
    qkv_bias=True,
    attn_out_bias=True,
    mlp_bias=True,
)

LLAMA31_8B = Architecture(
    slug="llama31-8b-like",
    name="Llama 3.1 8B-like",
    source="test",
    as_of="2024",
    n_layers=32,
    hidden_size=4096,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    ffn_hidden_size=14336,
    activation="swiglu",
    vocab_size=128256,
    tied_embeddings=False,
    position="rotary",
    max_context=131072,
    norm="rmsnorm",
)

MIXTRAL_LIKE = LLAMA31_8B.model_copy(
    update={"slug": "moe-like", "n_experts": 8, "experts_top_k": 2, "expert_ffn_hidden_size": 14336}
)

S, B_, H, A = 2048, 1, 12288, 96
SBH = S * B_ * H  # 2048 · 12288 = 25,165,824


def megatron(**kw):
    args = dict(micro_batch=B_, seq_len=S, framework_style="megatron", flash_attention=False)
    args.update(kw)
    return layer_activation_bytes(GPT3, "dense", **args)


# -- Korthikanti et al. 2022, Table 2 -----------------------------------------------------------------------


def test_korthikanti_no_parallelism_no_recompute():
    """s·b·h·(34 + 5·a·s/h): 5·96·2048/12288 = 80, so 25,165,824 · 114 = 2,868,903,936 B (2.67 GiB)."""
    assert 5 * A * S / H == 80
    terms = megatron()
    assert terms.saved_bytes == SBH * (34 + 80) == 2_868_903_936
    # 11sbh + 5as²b attention (+1 sbh of its dropout mask booked separately), 19sbh MLP (18 + mask), 4sbh norms
    assert terms.by_component == {
        "norms": 4 * SBH,
        "attention": 10 * SBH + 5 * A * S * S * B_,
        "dropout_masks": 2 * SBH,
        "mlp": 18 * SBH,
    }
    assert sum(terms.by_component.values()) == terms.saved_bytes


def test_korthikanti_tensor_parallel_without_sp():
    """s·b·h·(10 + 24/t + 5·a·s/(h·t)) at t=8: 10 + 3 + 10 = 23 → 25,165,824 · 23 = 578,813,952 B."""
    assert megatron(tp=8).saved_bytes == SBH * (10 + 24 // 8 + 80 // 8) == 578_813_952


def test_korthikanti_tensor_and_sequence_parallel():
    """s·b·h·(34/t + 5·a·s/(h·t)) at t=8: 4.25 + 10 = 14.25 → 358,612,992 B."""
    assert megatron(tp=8, sequence_parallel=True).saved_bytes == SBH * 114 // 8 == 358_612_992


def test_korthikanti_selective_recompute():
    """TP + selective: s·b·h·(10 + 24/t) = 13·sbh = 327,155,712 B; TP + SP + selective: 34·s·b·h/t =
    25,165,824 · 34 / 8 = 106,954,752 B (102 MiB, vs 2.67 GiB with nothing)."""
    assert megatron(tp=8, recompute=Recompute.selective).saved_bytes == SBH * 13 == 327_155_712
    sp_sel = megatron(tp=8, sequence_parallel=True, recompute=Recompute.selective)
    assert sp_sel.saved_bytes == 34 * SBH // 8 == 106_954_752


def test_korthikanti_full_recompute():
    """Only the layer input: 2·s·b·h = 50,331,648 B; ÷8 with SP = 6,291,456 B. The peak re-materialises one
    whole layer (its no-recompute bytes) plus gradients."""
    full = megatron(recompute=Recompute.full)
    assert full.saved_bytes == 2 * SBH == 50_331_648
    assert full.by_component == {"layer_input": 2 * SBH}
    assert full.peak_extra_bytes > megatron().saved_bytes
    assert (
        megatron(tp=8, sequence_parallel=True, recompute=Recompute.full).saved_bytes
        == 2 * SBH // 8
        == 6_291_456
    )
    # without SP the layer input is replicated on every TP rank
    assert megatron(tp=8, recompute=Recompute.full).saved_bytes == 2 * SBH


def test_flash_attention_drops_the_s_squared_term():
    """Flash: the 5·a·s²·b scores/softmax/dropout disappear; an fp32 logsumexp (4·s·b·a) appears.
    GPT-3 layer: 34·sbh + 4·2048·96 = 855,638,016 + 786,432 = 856,424,448 B."""
    flash = megatron(flash_attention=True)
    assert flash.saved_bytes == 34 * SBH + 4 * S * B_ * A == 856_424_448
    sel = megatron(flash_attention=True, recompute=Recompute.selective)
    assert sel.saved_bytes == 34 * SBH  # selective now only drops the logsumexp


def test_no_dropout_for_swiglu_models_and_explicit_override():
    """Megatron convention, Llama 3.1 8B, b=1, s=8192, flash: per token 4h (norm inputs) + 2h (qkv input) +
    2·a·d (q) + 2·2·g·d (k, v) + 2·a·d (out) + 4a (lse) + 2h (fc1 input) + 6f (gate‖up + product)
    = 16384 + 8192 + 8192 + 4096 + 8192 + 128 + 8192 + 86016 = 139,392 B → ×8192 = 1,141,899,264 B."""
    terms = layer_activation_bytes(
        LLAMA31_8B, "dense", micro_batch=1, seq_len=8192, framework_style="megatron"
    )
    assert terms.saved_bytes == 139_392 * 8192 == 1_141_899_264
    assert "dropout_masks" not in terms.by_component
    with_masks = layer_activation_bytes(
        LLAMA31_8B, "dense", micro_batch=1, seq_len=8192, framework_style="megatron", dropout=True
    )
    assert with_masks.saved_bytes - terms.saved_bytes == 2 * 8192 * 4096  # two 1-byte s·b·h masks
    with pytest.raises(ValueError, match="no dropout"):
        layer_activation_bytes(LLAMA31_8B, "dense", micro_batch=1, seq_len=8192, dropout=True)


# -- torch convention ---------------------------------------------------------------------------------------


def test_torch_convention_llama31_8b_by_hand():
    """What autograd keeps for one bench-model block, b=1, s=8192, bf16, fused attention. Per token:
    2·(2h + 4) norm inputs + fp32 rstd = 16,392; qkv input 2h = 8,192; q 2·a·d = 8,192; k, v 2·2·g·d = 4,096;
    attention output (= wo input) 8,192; logsumexp 4a = 128; MLP input 8,192; SwiGLU w1 out, silu out,
    w3 out, product 4·2f = 114,688 → 168,072 B/token · 8192 = 1,376,845,824 B (1.28 GiB) per layer."""
    terms = layer_activation_bytes(LLAMA31_8B, "dense", micro_batch=1, seq_len=8192)
    assert terms.saved_bytes == 168_072 * 8192 == 1_376_845_824
    assert terms.by_component == {
        "norms": 16_392 * 8192,
        "attention": (8192 + 8192 + 4096 + 8192 + 128) * 8192,
        "mlp": (8192 + 114_688) * 8192,
    }
    assert "logsumexp[T·(a/t)·4=" in terms.formula


def test_torch_no_flash_has_the_math_kernel_s_squared_term():
    """Math kernel: + a·s²·b·B softmax probabilities, scaled q and k and v expanded to all a heads."""
    b, s = 1, 4096
    flash = layer_activation_bytes(LLAMA31_8B, "dense", micro_batch=b, seq_len=s)
    math_ = layer_activation_bytes(LLAMA31_8B, "dense", micro_batch=b, seq_len=s, flash_attention=False)
    a, g, d = 32, 8, 128
    expected = (
        a * s * s * b * 2
        + 3 * b * s * a * d * 2
        - (b * s * a * d * 2 + 2 * b * s * g * d * 2)
        - b * s * a * 4
    )
    assert math_.saved_bytes - flash.saved_bytes == expected


def test_selective_and_full_in_torch_convention():
    kw = dict(micro_batch=2, seq_len=4096)
    none = layer_activation_bytes(LLAMA31_8B, "dense", **kw)
    sel = layer_activation_bytes(LLAMA31_8B, "dense", recompute=Recompute.selective, **kw)
    full = layer_activation_bytes(LLAMA31_8B, "dense", recompute=Recompute.full, **kw)
    assert none.saved_bytes - sel.saved_bytes == 2 * 4096 * 32 * 4  # the fp32 logsumexp only
    assert sel.peak_extra_bytes > none.peak_extra_bytes  # the core's output is recomputed
    assert full.saved_bytes == 2 * 4096 * 4096 * 2
    assert full.peak_extra_bytes == none.saved_bytes + none.peak_extra_bytes


@pytest.mark.parametrize("style", ["torch", "megatron"])
def test_tp_sp_cp_divisions(style):
    kw = dict(micro_batch=1, seq_len=8192, framework_style=style)
    base = layer_activation_bytes(LLAMA31_8B, "dense", **kw).saved_bytes
    # CP divides every token-proportional tensor (flash: no s² term)
    assert layer_activation_bytes(LLAMA31_8B, "dense", cp=4, **kw).saved_bytes * 4 == base
    # TP + SP divides everything
    assert (
        layer_activation_bytes(LLAMA31_8B, "dense", tp=4, sequence_parallel=True, **kw).saved_bytes * 4
        == base
    )
    # TP alone leaves the replicated part: norm inputs (+stats) and the two linear inputs
    tp = layer_activation_bytes(LLAMA31_8B, "dense", tp=4, **kw)
    replicated = 8192 * (4 * 4096 + 4 * 4096 + (8 if style == "torch" else 0))
    assert tp.saved_bytes == replicated + (base - replicated) // 4
    # KV heads replicate once t exceeds them: 8 KV heads at t=16 keep one per rank
    t16 = layer_activation_bytes(LLAMA31_8B, "dense", tp=16, sequence_parallel=True, **kw)
    assert t16.saved_bytes > base // 16


def test_moe_layer_scales_with_top_k():
    kw = dict(micro_batch=1, seq_len=4096)
    top2 = layer_activation_bytes(MIXTRAL_LIKE, "moe", **kw)
    top1 = layer_activation_bytes(MIXTRAL_LIKE.model_copy(update={"experts_top_k": 1}), "moe", **kw)
    dense = layer_activation_bytes(MIXTRAL_LIKE, "dense", **kw)
    assert {"router", "experts"} <= set(top2.by_component)
    # each extra routed slot costs the dispatched token, the expert output and the four SwiGLU tensors
    per_slot = 2 * 4096 * 2 + 4 * 14336 * 2 + 3 * 8 + 2
    assert top2.by_component["experts"] - top1.by_component["experts"] == 4096 * (
        2 * 4096 * 2 + 4 * 14336 * 2
    )
    assert (
        top2.saved_bytes - top1.saved_bytes == 4096 * (per_slot + 4 + 4) + 4096 * 4
    )  # + fp32 renormalisation
    assert top1.saved_bytes > dense.saved_bytes
    with pytest.raises(ValueError, match="no MoE"):
        layer_activation_bytes(LLAMA31_8B, "moe", **kw)


def test_components_add_up_and_formula_states_the_terms():
    for style in ("torch", "megatron"):
        for rc in Recompute:
            for arch, kind in ((LLAMA31_8B, "dense"), (MIXTRAL_LIKE, "moe"), (GPT3, "dense")):
                t = layer_activation_bytes(
                    arch, kind, micro_batch=2, seq_len=2048, tp=2, recompute=rc, framework_style=style
                )
                assert sum(t.by_component.values()) == t.saved_bytes
                assert t.peak_extra_bytes > 0
                assert style in t.formula and "T=4096" in t.formula


def test_embedding_head_and_logits():
    """Embedding: int64 token ids 8·b·s (+ position ids for learned positions in torch; Megatron adds a
    1-byte s·b·h dropout mask for GPT-style). Logits: b·s·V·(2 + 4) — Llama 3 at s=8192:
    8192·128256·6 = 6,304,038,912 B (5.87 GiB); vocab-parallel t=8 → 788,004,864 B."""
    assert embedding_activation_bytes(LLAMA31_8B, micro_batch=2, seq_len=4096) == 8 * 2 * 4096
    assert embedding_activation_bytes(GPT3, micro_batch=1, seq_len=2048) == 8 * 2048 + 8 * 2048
    assert embedding_activation_bytes(GPT3, micro_batch=1, seq_len=2048, framework_style="megatron") == (
        8 * 2048 + SBH
    )
    assert logits_bytes(LLAMA31_8B, micro_batch=1, seq_len=8192) == 6_304_038_912
    assert logits_bytes(LLAMA31_8B, micro_batch=1, seq_len=8192, tp=8) == 788_004_864
    assert logits_bytes(LLAMA31_8B, micro_batch=1, seq_len=8192, logits_dtype_bytes=2) == 8192 * 128256 * 4
    # final-norm input + rstd, output-GEMM input, int64 targets
    assert head_activation_bytes(LLAMA31_8B, micro_batch=1, seq_len=8192) == 8192 * (2 * 4096 * 2 + 4 + 8)


def test_validation_and_framework_mapping():
    with pytest.raises(ValueError):
        layer_activation_bytes(LLAMA31_8B, "dense", micro_batch=0, seq_len=8)
    with pytest.raises(ValueError):
        layer_activation_bytes(LLAMA31_8B, "dense", micro_batch=1, seq_len=8, act_bytes=3)
    assert framework_style_for("megatron") == "megatron"
    assert framework_style_for("fsdp2") == "torch"
    assert framework_style_for("deepspeed") == "torch"


def test_per_op_selective_recompute_keeps_every_other_matmul_output(catalog) -> None:
    """torchtitan's op SAC on a Llama 3.1 8B block (h 4096, 32 heads / 8 KV heads of 128, f 14336), micro-batch 2
    × 8192 tokens = T 16384, bf16, no TP. Saved per layer: input T·h·2 = 128 MiB; wq out T·4096·2 = 128 MiB and
    wv out T·1024·2 = 32 MiB (matmuls 1 and 3); attention output T·4096·2 + logsumexp T·32·4 = 130 MiB; w1 out
    T·14336·2 = 448 MiB and w2 out T·4096·2 = 128 MiB (matmuls 5 and 7) — 994 MiB, against 2,626 MiB with no
    recompute and 128 MiB with full recompute."""
    arch = catalog.architecture("llama3.1-8b")
    kw = dict(micro_batch=2, seq_len=8192)
    op = layer_activation_bytes(arch, "dense", recompute=Recompute.selective_op, **kw)
    assert op.saved_bytes == 994 * 2**20
    none = layer_activation_bytes(arch, "dense", recompute=Recompute.none, **kw)
    full = layer_activation_bytes(arch, "dense", recompute=Recompute.full, **kw)
    assert full.saved_bytes < op.saved_bytes < none.saved_bytes
    assert op.peak_extra_bytes == full.peak_extra_bytes  # the backward re-materialises the layer either way
    # with TP 2 (sequence parallel) the head and FFN tensors halve and the two reduce-scatter outputs are kept
    tp2 = layer_activation_bytes(
        arch, "dense", recompute=Recompute.selective_op, tp=2, sequence_parallel=True, **kw
    )
    t = 16384
    assert tp2.saved_bytes == (t // 2 * 4096 * 2 + t * (2048 + 512) * 2 + t * (2048 * 2 + 16 * 4)
                               + 2 * (t // 2) * 4096 * 2 + t * (7168 + 4096) * 2)  # fmt: skip


def test_fused_linear_cross_entropy_keeps_its_gradients_and_holds_one_chunk_of_logits_while_it_runs():
    """Liger-Kernel's FusedLinearCrossEntropy at b=1, s=262,144 on Llama 3.1 8B (V=128,256, h=4,096). It computes
    the gradients in the forward and keeps them for the backward: grad_input 262144·4096·2 = 2,147,483,648 B and
    grad_weight 128256·4096·2 = 1,050,673,152 B (no logits are saved). While the loss runs it holds one chunk of
    next_pow2(ceil(262144 / ceil(128256/4096))) = next_pow2(262144/32) = 8,192 tokens' bf16 logits, overwritten in
    place by their gradient: 8192·128256·2 = 2,101,346,304 B — instead of the whole 262144·128256·6 = 201.7 GB."""
    fused = logits_bytes(LLAMA31_8B, micro_batch=1, seq_len=262_144, fused_linear=True)
    assert fused == 262_144 * 4096 * 2 + 128_256 * 4096 * 2
    peak = loss_peak_bytes(LLAMA31_8B, micro_batch=1, seq_len=262_144, fused_linear=True, eager=True)
    assert peak == fused + 8192 * 128_256 * 2
    assert fused_linear_chunk_tokens(LLAMA31_8B, 262_144) == 8192
    assert logits_bytes(LLAMA31_8B, micro_batch=1, seq_len=262_144) == 262_144 * 128256 * 6
    # 16 tokens: ceil(16/32) = 1-token chunks (Liger's formula): 16·4096·2 + 128256·4096·2 saved, + 1·128256·2
    assert fused_linear_chunk_tokens(LLAMA31_8B, 16) == 1
    assert logits_bytes(LLAMA31_8B, micro_batch=1, seq_len=16, fused_linear=True) == 1_050_804_224
    assert loss_peak_bytes(LLAMA31_8B, micro_batch=1, seq_len=16, fused_linear=True) == 1_051_060_736
    # vocab-parallel over TP 2: the weight gradient and the chunk's logits halve
    tp2 = logits_bytes(LLAMA31_8B, micro_batch=1, seq_len=16, tp=2, fused_linear=True)
    assert tp2 == 16 * 4096 * 2 + 64_128 * 4096 * 2


def test_a_run_with_liger_kernel_is_estimated_with_fused_cross_entropy(catalog):
    from app.domain.estimator.validation import run_plan

    runs = {r.slug: r for r in catalog.published_runs}
    assert run_plan(runs["mleng-llama3.1-8b-8gpu-h200-zero3-seq256k"])[0].fused_cross_entropy
    assert not run_plan(runs["torchtitan-llama3.1-8b-8gpu-fsdp"])[0].fused_cross_entropy


def test_fused_swiglu_saves_gate_and_up_and_writes_their_gradients_in_place() -> None:
    """Liger-Kernel's SwiGLU (LigerSiLUMulFunction) in a PyTorch Llama 3.1 8B layer, b 1 × s 8192, t 1, bf16:
    the MLP keeps gate out, up out and the product, 3·T·f·B = 3·8192·14336·2 = 704,643,072 B, instead of eager
    PyTorch's 4 (silu out as well): 234,881,024 B less. Its backward writes the gate and up gradients into those
    tensors, so the MLP's gradient working set is the product's gradient alone, T·f·B = 234,881,024 B, below
    attention's T·(2·4096 + 2·1024)·2 + T·4096·4 = 301,989,888 B; with the two residual-stream gradients
    (2·T·h·B = 134,217,728 B) the peak's gradient term is 436,207,616 B instead of 704,643,072 + 134,217,728 =
    838,860,800 B. Megatron's convention (already 3 tensors, a fresh gradient) ignores the flag."""
    shape = dict(micro_batch=1, seq_len=8192, framework_style="torch")
    eager = layer_activation_bytes(LLAMA31_8B, "dense", **shape)
    fused = layer_activation_bytes(LLAMA31_8B, "dense", **shape, fused_swiglu=True)
    assert eager.saved_bytes - fused.saved_bytes == 8192 * 14336 * 2
    assert eager.peak_extra_bytes == 838_860_800 and fused.peak_extra_bytes == 436_207_616
    full_eager = layer_activation_bytes(LLAMA31_8B, "dense", **shape, recompute=Recompute.full)
    full_fused = layer_activation_bytes(
        LLAMA31_8B, "dense", **shape, recompute=Recompute.full, fused_swiglu=True
    )
    assert full_eager.saved_bytes == full_fused.saved_bytes  # only the layer input is kept
    # full recompute re-materialises the whole layer: the silu output and the two gradients fewer
    assert full_eager.peak_extra_bytes - full_fused.peak_extra_bytes == 234_881_024 + (
        838_860_800 - 436_207_616
    )
    megatron = dict(micro_batch=1, seq_len=8192, framework_style="megatron")
    assert layer_activation_bytes(
        LLAMA31_8B, "dense", **megatron, fused_swiglu=True
    ) == layer_activation_bytes(LLAMA31_8B, "dense", **megatron)


def test_dtensor_tensor_parallel_keeps_the_gathered_attention_and_mlp_inputs_whole():
    """PyTorch DTensor TP (torchtitan) all-gathers the sequence-parallel shard before wq/wk/wv and w1/w3 and
    autograd keeps the gathered tensor; Megatron / Transformer Engine keep the shard and gather again in the
    backward. Llama 3.1 8B, b = 1, s = 8192, tp 8 with SP: the shards are 2 · 1024 · 4096 · 2 = 16,777,216 B, the
    gathered inputs 2 · 8192 · 4096 · 2 = 134,217,728 B — 117,440,512 B (112 MiB) more per layer; the output GEMM's
    input adds 8192 · 4096 · 2 − 1024 · 4096 · 2 = 58,720,256 B on the last stage. Without TP nothing changes.
    (Measured against torch on a fake 2-rank mesh in tests/bench/test_activation_ground_truth.py.)"""
    from app.domain.estimator.memory import layer_terms
    from app.domain.estimator.plan import Framework, Plan

    kw = dict(micro_batch=1, seq_len=8192, tp=8, sequence_parallel=True)
    sharded = layer_activation_bytes(LLAMA31_8B, "dense", **kw)
    gathered = layer_activation_bytes(LLAMA31_8B, "dense", **kw, gathered_tp_inputs=True)
    assert gathered.saved_bytes - sharded.saved_bytes == 117_440_512
    assert "qkv input[T·h·B=" in gathered.formula and "mlp input[T·h·B=" in gathered.formula
    full = dict(
        kw, recompute=Recompute.full
    )  # full recompute re-materialises the whole layer in the backward
    assert (
        layer_activation_bytes(LLAMA31_8B, "dense", **full, gathered_tp_inputs=True).peak_extra_bytes
        - layer_activation_bytes(LLAMA31_8B, "dense", **full).peak_extra_bytes
        == 117_440_512
    )
    head = dict(micro_batch=1, seq_len=8192, tp=8, sequence_parallel=True)
    assert (
        head_activation_bytes(LLAMA31_8B, **head, gathered_tp_inputs=True)
        - head_activation_bytes(LLAMA31_8B, **head)
        == 58_720_256
    )
    no_tp = dict(micro_batch=1, seq_len=8192)
    assert (
        layer_activation_bytes(LLAMA31_8B, "dense", **no_tp, gathered_tp_inputs=True).saved_bytes
        == layer_activation_bytes(LLAMA31_8B, "dense", **no_tp).saved_bytes
    )
    # the estimator applies it to FSDP2 (torchtitan) plans only
    plans = {
        fw: Plan(
            tp=8, dp=1, micro_batch=1, global_batch=1, seq_len=8192, sequence_parallel=True, framework=fw
        )
        for fw in (Framework.fsdp2, Framework.deepspeed)
    }
    saved = {fw: layer_terms(LLAMA31_8B, plan)["dense"].saved_bytes for fw, plan in plans.items()}
    assert saved[Framework.fsdp2] - saved[Framework.deepspeed] == 117_440_512
