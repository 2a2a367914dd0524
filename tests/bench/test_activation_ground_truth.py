"""Ground truth for the activation formula: what eager PyTorch autograd saves for app/bench/model.py on CPU.

Every point compares ``saved_activation_bytes`` (saved-tensor hooks, deduplicated by storage, weights and
buffers excluded) per transformer block with ``layer_activation_bytes(..., framework_style="torch")``; the
brief allows 5 %, the formula is in fact exact except for LayerNorm statistics, which the CPU kernel keeps
in the input dtype (bf16) while the formula uses fp32 as on CUDA (−0.1 %). Failure messages show the measured
and formula numbers side by side, the saved tensors and the formula.

Also: parameter counts of the torch model equal ``parameter_counts`` (tiny archs and every preset on the
meta device), ``parameter_shapes`` lists the model's parameters exactly, and recompute modes give the same
gradients as no recompute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from app.bench.measure import LiveBytes, saved_activation_bytes  # noqa: E402
from app.bench.model import build_model, layer_scale, lm_loss, scaled_arch  # noqa: E402
from app.domain.catalog.load import load_architectures  # noqa: E402
from app.domain.catalog.toml_io import load_sources  # noqa: E402
from app.domain.estimator.activations import layer_activation_bytes  # noqa: E402
from app.domain.estimator.head_activations import (  # noqa: E402
    embedding_activation_bytes,
    head_activation_bytes,
    logits_bytes,
    loss_peak_bytes,
)
from app.domain.estimator.plan import Recompute  # noqa: E402
from app.domain.model.architecture import Architecture, architecture_by_slug  # noqa: E402
from app.domain.model.counts import parameter_counts  # noqa: E402
from app.domain.model.torch_shapes import parameter_shapes  # noqa: E402

pytestmark = pytest.mark.torch

DATA = Path(__file__).resolve().parents[2] / "data"
TOLERANCE = 0.05
POINTS = [(1, 128), (2, 256), (4, 64)]  # (micro_batch, seq_len)
MODES = ["none", "selective", "full"]


def tiny(**overrides) -> Architecture:
    fields = dict(
        slug="tiny-llama",
        name="tiny llama",
        source="test",
        as_of="2025",
        n_layers=2,
        hidden_size=256,
        n_heads=4,
        n_kv_heads=2,
        head_dim=64,
        ffn_hidden_size=688,
        activation="swiglu",
        vocab_size=1000,
        tied_embeddings=False,
        position="rotary",
        max_context=512,
        norm="rmsnorm",
    )
    fields.update(overrides)
    return Architecture(**fields)


CONFIGS = {
    "llama-gqa2": tiny(),
    "llama-mha": tiny(n_kv_heads=4),
    "gpt-gelu-layernorm": tiny(
        activation="gelu",
        norm="layernorm",
        norm_bias=True,
        position="learned",
        max_position_embeddings=512,
        n_kv_heads=4,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
        ffn_hidden_size=1024,
        tied_embeddings=True,
    ),
}

EXTRA_CONFIGS = {
    "mqa": tiny(n_kv_heads=1),
    "moe-top2-shared-gated": tiny(
        n_experts=4,
        experts_top_k=2,
        expert_ffn_hidden_size=128,
        n_shared_experts=1,
        shared_expert_ffn_hidden_size=256,
        shared_expert_gate=True,
    ),
    "moe-top1-first-dense": tiny(
        n_layers=3, n_experts=4, experts_top_k=1, expert_ffn_hidden_size=128, first_k_dense_layers=1
    ),
    "mla-q-lora-padded-v": tiny(
        attention="mla",
        n_kv_heads=4,
        head_dim=48,
        q_lora_rank=96,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
    ),
    "mla-equal-v": tiny(
        attention="mla",
        n_kv_heads=4,
        head_dim=48,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=48,
    ),
    "qk-norm-partial-rotary": tiny(qk_norm=True, rotary_fraction=0.5),
    "neox-parallel-embnorm": tiny(
        parallel_residual=True, embedding_norm=True, norm="layernorm", activation="gelu"
    ),
}


def _compare(
    arch: Architecture,
    mode: str,
    dtype,
    *,
    flash: bool = True,
    points=POINTS,
    tolerance: float = TOLERANCE,
) -> list[str]:
    """Run every point; return failure lines (empty = all within tolerance)."""
    act_bytes = torch.finfo(dtype).bits // 8
    model = build_model(arch, dtype=dtype, checkpoint=mode, max_seq_len=512)
    gen = torch.Generator().manual_seed(0)
    failures: list[str] = []
    rows: list[str] = []
    for b, s in points:
        tokens = torch.randint(0, arch.vocab_size, (b, s), generator=gen)
        if flash:
            measured = saved_activation_bytes(model, tokens)
        else:
            with sdpa_kernel(SDPBackend.MATH):
                measured = saved_activation_bytes(model, tokens)
        for i, kind in enumerate(arch.layer_kinds()):
            terms = layer_activation_bytes(
                arch,
                kind,
                micro_batch=b,
                seq_len=s,
                recompute=Recompute(mode),
                flash_attention=flash,
                act_bytes=act_bytes,
                framework_style="torch",
            )
            got, want = measured.per_block[i], terms.saved_bytes
            err = got / want - 1
            row = f"b={b} s={s} layer {i} ({kind}): measured {got:>10,} formula {want:>10,} ({err:+.2%})"
            rows.append(row)
            if abs(err) > tolerance:
                failures.append(
                    f"{arch.slug} {mode} {dtype}: {row}\n  formula: {terms.formula}\n"
                    f"  saved tensors of block {i}:\n{measured.describe(f'block{i}')}"
                )
    if failures:
        failures.insert(0, "measured vs formula (bytes per layer):\n" + "\n".join(rows))
    return failures


def test_cpu_sdpa_runs_the_fused_flash_kernel_for_bf16():
    """torch 2.13 on CPU: bf16 causal SDPA with GQA dispatches _scaled_dot_product_flash_attention_for_cpu,
    which saves q, k (g heads), v (g heads), out and an fp32 logsumexp (b, heads, s)."""
    q = torch.randn(2, 4, 64, 32, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 2, 64, 32, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 2, 64, 32, dtype=torch.bfloat16, requires_grad=True)
    saved = []

    def pack(t):
        saved.append((tuple(t.shape), t.dtype))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert type(out.grad_fn).__name__ == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert sorted(saved, key=str) == sorted(
        [
            ((2, 4, 64, 32), torch.bfloat16),
            ((2, 2, 64, 32), torch.bfloat16),
            ((2, 2, 64, 32), torch.bfloat16),
            ((2, 4, 64, 32), torch.bfloat16),
            ((2, 4, 64), torch.float32),
        ],
        key=str,
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_torch_formula_matches_saved_bytes_bf16(name, mode):
    failures = _compare(CONFIGS[name], mode, torch.bfloat16)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", sorted(EXTRA_CONFIGS))
def test_torch_formula_matches_other_layouts(name):
    failures: list[str] = []
    for mode in MODES:
        failures += _compare(EXTRA_CONFIGS[name], mode, torch.bfloat16, points=[(2, 128)])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("mode", ["none", "selective"])
def test_torch_formula_fp32_flash_and_math_kernel(mode):
    """fp32 keeps every saved tensor in one dtype, so the math kernel (flash_attention=False: s² softmax
    probabilities, scaled Q and K, K and V expanded to all heads) is checked exactly too."""
    failures: list[str] = []
    for name in ("llama-gqa2", "gpt-gelu-layernorm"):
        failures += _compare(CONFIGS[name], mode, torch.float32, points=[(2, 128), (1, 256)])
        failures += _compare(CONFIGS[name], mode, torch.float32, flash=False, points=[(2, 128), (1, 256)])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_embedding_and_head_saved_bytes(name):
    """Outside the blocks: token (and position) ids before; final norm, output-GEMM input, fp32 log-probs
    (the logits_dtype part of logits_bytes), int64 targets and a 0-d fp32 weight total after."""
    arch = CONFIGS[name]
    model = build_model(arch, dtype=torch.bfloat16, max_seq_len=512)
    for b, s in POINTS:
        tokens = torch.randint(0, arch.vocab_size, (b, s))
        measured = saved_activation_bytes(model, tokens)
        emb = embedding_activation_bytes(arch, micro_batch=b, seq_len=s)
        head = head_activation_bytes(arch, micro_batch=b, seq_len=s) + b * s * arch.vocab_size * 4 + 4
        assert measured.before_blocks == pytest.approx(emb, rel=0.01), (measured.before_blocks, emb)
        assert measured.after_blocks == pytest.approx(head, rel=0.01), (measured.after_blocks, head)


def test_recompute_modes_give_the_same_gradients():
    arch = CONFIGS["llama-gqa2"]
    tokens = torch.randint(0, arch.vocab_size, (2, 64), generator=torch.Generator().manual_seed(3))
    grads = {}
    for mode in MODES:
        model = build_model(arch, dtype=torch.float32, checkpoint=mode, max_seq_len=128)
        lm_loss(model(tokens), torch.roll(tokens, -1, dims=1)).backward()
        grads[mode] = {n: p.grad.clone() for n, p in model.named_parameters()}
    for mode in ("selective", "full"):
        for n, g in grads["none"].items():
            torch.testing.assert_close(grads[mode][n], g, msg=f"{mode}: {n}")


def test_moe_and_mla_models_train():
    for name in ("moe-top2-shared-gated", "mla-q-lora-padded-v"):
        arch = EXTRA_CONFIGS[name]
        model = build_model(arch, dtype=torch.float32, max_seq_len=64)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        tokens = torch.randint(0, arch.vocab_size, (4, 32), generator=torch.Generator().manual_seed(1))
        losses = []
        for _ in range(5):
            loss = lm_loss(model(tokens), torch.roll(tokens, -1, dims=1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0], (name, losses)


# -- parameters ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", [*CONFIGS.values(), *EXTRA_CONFIGS.values()], ids=lambda a: a.slug)
def test_tiny_model_parameter_count_and_shapes(arch):
    model = build_model(arch, dtype=torch.float32, max_seq_len=64)
    assert sum(p.numel() for p in model.parameters()) == parameter_counts(arch).total
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == [
        (p.name, p.shape) for p in parameter_shapes(arch)
    ]


@pytest.fixture(scope="module")
def presets():
    return load_architectures(DATA, load_sources(DATA))


def test_llama31_8b_on_meta_has_exactly_the_published_parameters(presets):
    arch = architecture_by_slug(presets, "llama3.1-8b")
    model = build_model(arch, dtype=torch.bfloat16, device="meta")
    n = sum(p.numel() for p in model.parameters())
    assert n == parameter_counts(arch).total == 8_030_261_248
    names = {n for n, _ in model.named_parameters()}
    assert {
        "tok_embeddings.weight",
        "layers.0.attention.wq.weight",
        "layers.31.feed_forward.w3.weight",
    } <= names
    assert {"norm.weight", "output.weight"} <= names


def test_every_preset_on_meta_matches_parameter_shapes(presets):
    for arch in presets:
        model = build_model(arch, device="meta")
        got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
        assert got == [(p.name, p.shape) for p in parameter_shapes(arch)], arch.slug
        assert sum(p.numel() for p in model.parameters()) == parameter_counts(arch).total, arch.slug


def test_scaled_arch_records_the_scaling(presets):
    arch = architecture_by_slug(presets, "mixtral-8x7b")
    small = scaled_arch(arch, 2)
    assert small.n_layers == 2 and small.slug == "mixtral-8x7b-l2"
    assert "Scaled from 32 to 2 layers" in small.notes
    assert layer_scale(arch, small) == 16
    assert small.model_dump(exclude={"n_layers", "slug", "name", "notes"}) == arch.model_dump(
        exclude={"n_layers", "slug", "name", "notes"}
    )
    counts, small_counts = parameter_counts(arch), parameter_counts(small)
    assert counts.layer("moe") == small_counts.layer("moe")
    assert scaled_arch(arch, 32) is arch
    with pytest.raises(ValueError):
        scaled_arch(arch, 0)


def _torchtitan_op_sac_context():
    """torchtitan's per-op SAC policy (activation_checkpoint.py, selective_ac_option = "op"): save the outputs of
    the attention kernel and of every odd matmul of the block, recompute everything else. The CPU build's SDPA op
    (``_scaled_dot_product_flash_attention_for_cpu``) stands in for the CUDA kernels in torchtitan's save list."""
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ops = torch.ops.aten
    save = {
        ops.mm.default, ops._scaled_dot_product_flash_attention_for_cpu.default,
        ops._scaled_dot_product_efficient_attention.default, ops._scaled_dot_product_flash_attention.default,
    }  # fmt: skip
    counts: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == ops.mm.default:
            counts[mode] += 1
        keep = func in save and not (func == ops.mm.default and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _live_tensor_bytes(exclude: set[int]) -> tuple[int, set[int]]:
    """Bytes of every live tensor storage (found through the garbage collector), not counting ``exclude``."""
    import gc

    gc.collect()
    seen: set[int] = set()
    total = 0
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            key = storage.data_ptr()
            if key in seen or key in exclude or storage.nbytes() == 0:
                continue
            seen.add(key)
            total += storage.nbytes()
    return total, seen


@pytest.mark.parametrize(("micro_batch", "seq_len"), [(1, 128), (2, 256)])
def test_per_op_selective_recompute_matches_torch_selective_checkpointing(
    micro_batch: int, seq_len: int
) -> None:
    """``selective-op`` against torch's own ``create_selective_checkpoint_contexts`` with torchtitan's policy: the
    tensors alive after a checkpointed block's forward (minus its output) plus its input — what the backward will
    use — equal the formula's saved bytes to within 8 KiB: the CPU attention kernel's bookkeeping outputs (a
    constant ~5 KB here) that CUDA kernels do not return."""
    import warnings

    from torch.utils.checkpoint import checkpoint

    arch = tiny()
    model = build_model(arch, dtype=torch.bfloat16)
    block = model.layers[0]
    x = torch.randn(micro_batch, seq_len, arch.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.rope_cos[:seq_len], model.rope_sin[:seq_len]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # gc walks over deprecated torch.distributed aliases
        _, before = _live_tensor_bytes(set())
        out = checkpoint(
            block._forward, x, cos, sin, use_reentrant=False, context_fn=_torchtitan_op_sac_context
        )
        after, _ = _live_tensor_bytes(before)
    measured = after - out.untyped_storage().nbytes() + x.untyped_storage().nbytes()
    formula = layer_activation_bytes(
        arch, "dense", micro_batch=micro_batch, seq_len=seq_len, recompute=Recompute.selective_op
    )
    assert 0 <= measured - formula.saved_bytes <= 8192, (measured, formula.formula)
    out.float().sum().backward()  # the recompute path runs
    assert x.grad is not None


def _loss_inputs() -> tuple[Architecture, int, int, int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loss tests' inputs: the tiny model, b=2, s=256, its vocabulary V, a bf16 hidden state x (b, s, h) and
    output weight w (V, h) that take gradients, and seeded targets."""
    arch = tiny()
    b, s = 2, 256
    h, v = arch.hidden_size, arch.vocab_size
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(v, h, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, v, (b, s), generator=torch.Generator().manual_seed(0))
    return arch, b, s, v, x, w, targets


@pytest.mark.parametrize("keep_logits", [False, True])
def test_eager_cross_entropy_peaks_at_12_bytes_a_logit_in_its_backward(keep_logits: bool) -> None:
    """Eager ``lm_loss`` (fp32 upcast + cross-entropy) on bf16 logits from the output GEMM, b=2, s=256, V=1,000:
    what it holds after the forward is ``logits_bytes`` (2 B bf16 logits + 4 B fp32 log-probs = 6 B a logit),
    and its backward, started after the caller frees the logits as torchtitan does, peaks at
    ``loss_peak_bytes(eager=True)`` = 12 B a logit (log-probs + their gradient + the logits' fp32 gradient);
    a caller that keeps the logits holds 2 B more (14 B). Counted above what the GEMM itself keeps; the only
    other bytes are the int64 targets the loss keeps (counted by head_activation_bytes) and 0-d tensors."""
    arch, b, s, v, x, w, targets = _loss_inputs()
    live = LiveBytes()
    with live:
        logits = x @ w.t()
        # what the GEMM keeps besides its output (the CPU kernel's contiguous copies of its inputs; views on CUDA)
        gemm = live.current - logits.untyped_storage().nbytes()
        loss = lm_loss(logits, targets)
        after_forward = live.current - gemm
        if not keep_logits:
            del logits
        start = live.current
        live.reset_peak()
        loss.backward()
    saved = logits_bytes(arch, micro_batch=b, seq_len=s)
    small = (
        b * s * 8 + 64
    )  # int64 targets the loss keeps (head_activation_bytes counts them), 0-d loss tensors
    assert 0 <= after_forward - saved <= small, (after_forward, saved)
    peak = loss_peak_bytes(arch, micro_batch=b, seq_len=s, eager=True)
    assert peak == b * s * v * 12
    held = peak + (b * s * v * 2 if keep_logits else 0)
    assert 0 <= live.peak - gemm - held <= small, (live.peak, gemm, held, start)
    # fused / compiled losses save the 16-bit logits and hold at most their gradient beside them; fused linear
    # cross-entropy one chunk of logits more
    assert logits_bytes(arch, micro_batch=b, seq_len=s, fused_loss=True) == b * s * v * 2
    assert loss_peak_bytes(arch, micro_batch=b, seq_len=s) == b * s * v * 4
    assert loss_peak_bytes(arch, micro_batch=b, seq_len=s, fused_linear=True, eager=True) > logits_bytes(
        arch, micro_batch=b, seq_len=s, fused_linear=True
    )


def test_compiled_cross_entropy_saves_the_16_bit_logits_not_fp32_log_probabilities() -> None:
    """torch.compile's partitioner (min-cut rematerialisation, the one Inductor uses; run here with the
    ``aot_eager_decomp_partition`` backend, which partitions the same way without generating kernels) keeps for
    the backward of ``lm_loss`` the bf16 logits and two fp32 numbers a row (maximum, log-sum-exp) and recomputes
    the softmax, where eager autograd keeps the fp32 log-probabilities: 2 B a logit against 4 B. b=2, s=256,
    V=1,000: 1,024,000 B of logits saved (``logits_bytes(fused_loss=True)``) + 512·(4 + 4) B of row statistics +
    the int64 targets (4,096 B), against eager's 2,048,000 B of log-probabilities."""
    arch, b, s, v, x, w, targets = _loss_inputs()

    def saved_bytes(loss_fn) -> dict[str, int]:
        storages: dict[int, tuple[torch.dtype, int]] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storages[t.untyped_storage().data_ptr()] = (t.dtype, t.untyped_storage().nbytes())
            return t

        logits = x @ w.t()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = loss_fn(logits, targets)
        loss.backward()
        by_dtype: dict[str, int] = {}
        for dtype, nbytes in storages.values():
            by_dtype[str(dtype)] = by_dtype.get(str(dtype), 0) + nbytes
        return by_dtype

    eager = saved_bytes(lm_loss)
    compiled = saved_bytes(torch.compile(lm_loss, backend="aot_eager_decomp_partition", fullgraph=True))
    assert eager.get("torch.bfloat16", 0) == 0 and eager["torch.float32"] >= b * s * v * 4
    assert compiled["torch.bfloat16"] == logits_bytes(arch, micro_batch=b, seq_len=s, fused_loss=True)
    assert compiled["torch.float32"] <= b * s * 2 * 4 + 4  # per-row maximum and log-sum-exp, the 0-d loss
    assert compiled["torch.int64"] == b * s * 8


def test_torchtitan_loss_parallel_peaks_at_16_bytes_a_logit(tmp_path) -> None:
    """torchtitan with TP > 1 computes the loss on vocab-sharded DTensor logits (``loss_parallel``), whose kernels
    are torch.distributed.tensor.parallel.loss's ``_log_softmax`` and ``_nll_loss_and_log_softmax_backward``. Run
    on a 1-rank gloo mesh on the fp32 logits of 512 tokens × V = 1,000: the forward holds ``shifted`` and
    ``exp(shifted)`` beside its input, 8 B a logit (14 B with the input x and the 16-bit logits), and keeps the
    4 B log-probabilities; the backward builds ``zeros_like(x)``, ``exp(x)``, their sum and the product while x
    lives, 12 B a logit beyond x — 16 B, ``loss_peak_bytes(eager=True, loss_parallel=True)``, against 12 B for
    F.cross_entropy without TP."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss as tp_loss

    class Live(LiveBytes):
        def _track(self, t: torch.Tensor) -> None:  # funcol's AsyncCollectiveTensor has no storage to count
            try:
                t.untyped_storage().data_ptr()
            except RuntimeError:
                return
            super()._track(t)

    arch = tiny()
    n, v = 512, arch.vocab_size
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        x = torch.randn(n, v, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0)).float()
        forward = Live()
        with forward:
            log_probs = tp_loss._log_softmax(x, 1, False, mesh, 0)
        targets = torch.randint(0, v, (n,), generator=torch.Generator().manual_seed(1))
        backward = Live()
        with backward:
            grad = tp_loss._nll_loss_and_log_softmax_backward(
                torch.ones(()), log_probs, targets, None, 1, -100, torch.tensor(float(n)), torch.Size([n, v]), 1,
                mesh, 0,
            )  # fmt: skip
    finally:
        dist.destroy_process_group()
    assert grad.shape == (n, v)
    small = 16 * n  # per-row statistics (maximum, its all-reduce, sum, log) and 0-d tensors
    assert 0 <= forward.peak - n * v * 8 <= small and 0 <= forward.current - n * v * 4 <= small
    assert 0 <= backward.peak - n * v * 12 <= n * v * 0.05 + small  # + the int64 targets' masks
    peak = loss_peak_bytes(arch, micro_batch=1, seq_len=n, eager=True, loss_parallel=True)
    assert peak == n * v * 16 == n * v * 4 + n * v * 12
    assert loss_peak_bytes(arch, micro_batch=1, seq_len=n, eager=True) == n * v * 12


def test_eager_z_loss_keeps_the_fp32_logits_and_peaks_at_20_bytes_a_logit() -> None:
    """OLMo-core's eager loss with the z-loss (its 1B script of 2024-09): F.cross_entropy and
    ``logits.logsumexp(-1).pow(2)`` on the fp32 logits, b=2, s=256, V=1,000. After the forward it holds 10 B a logit
    (bf16 logits 2 + fp32 log-probs 4 + the fp32 logits logsumexp keeps 4: ``logits_bytes(z_loss=True)``, 4 B above
    the cross-entropy alone); its backward, after the caller frees the bf16 logits, peaks at 20 B a logit
    (``loss_peak_bytes(eager=True, z_loss=True)``: the cross-entropy's 12 B, the kept fp32 logits and
    ``(self − result).exp()``)."""
    arch, b, s, v, x, w, targets = _loss_inputs()
    live = LiveBytes()
    with live:
        logits = x @ w.t()
        gemm = live.current - logits.untyped_storage().nbytes()
        fp32 = logits.float().flatten(0, 1)
        loss = torch.nn.functional.cross_entropy(fp32, targets.flatten())
        loss = loss + 1e-5 * fp32.logsumexp(-1).pow(2).mean()
        del fp32
        after_forward = live.current - gemm
        del logits
        live.reset_peak()
        loss.backward()
    small = (
        b * s * 8 + 64 + b * s * 4 * 4
    )  # int64 targets, 0-d tensors, the per-row log-sum-exp and its square
    saved = logits_bytes(arch, micro_batch=b, seq_len=s, z_loss=True)
    assert saved == b * s * v * 10 == logits_bytes(arch, micro_batch=b, seq_len=s) + b * s * v * 4
    assert 0 <= after_forward - saved <= small, (after_forward, saved)
    peak = loss_peak_bytes(arch, micro_batch=b, seq_len=s, eager=True, z_loss=True)
    assert peak == b * s * v * 20
    assert 0 <= live.peak - gemm - peak <= small, (live.peak, gemm, peak)
    # a fused or compiled loss computes the z-loss in its pass: nothing more
    assert logits_bytes(arch, micro_batch=b, seq_len=s, fused_loss=True, z_loss=True) == b * s * v * 2


@pytest.mark.parametrize("mode", ["none", "selective"])
def test_dtensor_tensor_parallel_keeps_the_gathered_linear_inputs_whole(mode: str) -> None:
    """torchtitan's tensor parallelism (DTensor, sequence parallel on): its TP plan for a Llama block —
    SequenceParallel norms, PrepareModuleInput(Shard(1) → Replicate()) before the attention and the MLP,
    ColwiseParallel wq/wk/wv/w1/w3, RowwiseParallel(output Shard(1)) wo/w2 — applied to app/bench/model.py's block
    on a fake 2-rank process group (one process; the collectives only shape their outputs). Autograd keeps the
    all-gathered attention and MLP inputs whole, T·h·B each (shared by wq/wk/wv and by w1/w3), where Megatron keeps
    the T/t shard. Tiny Llama (h = 256), b = 2, s = 128, t = 2: T = 256 tokens, so the two gathered inputs hold
    2 · 256 · 256 · 2 = 262,144 B against 131,072 B sharded, and the formula with ``gathered_tp_inputs`` is
    exact (1,297,408 B with no recompute, 1,295,360 B with the attention core recomputed)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    from torch.testing._internal.distributed.fake_pg import FakeStore

    arch, t, b, s = tiny(), 2, 2, 128
    dist.init_process_group("fake", rank=0, world_size=t, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (t,))
        model = build_model(arch, dtype=torch.bfloat16, checkpoint=mode, max_seq_len=512)
        block = model.layers[0]
        plan = {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(
                input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)
            ),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            ),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        }
        parallelize_module(block, mesh, plan)
        block.attention.n_heads //= (
            t  # the local heads, as torchtitan's view(bs, seqlen, -1, head_dim) infers
        )
        block.attention.n_kv_heads //= t

        def local(x: torch.Tensor) -> torch.Tensor:
            return x._local_tensor if isinstance(x, DTensor) else x

        cos, sin = model.rope_cos[:s], model.rope_sin[:s]
        state = {local(p).untyped_storage().data_ptr() for p in block.parameters()}
        state |= {cos.untyped_storage().data_ptr(), sin.untyped_storage().data_ptr()}
        saved: dict[int, tuple[tuple[int, ...], int]] = {}

        def pack(x: torch.Tensor) -> torch.Tensor:
            storage = local(x).untyped_storage()
            if storage.data_ptr() not in state:
                saved.setdefault(storage.data_ptr(), (tuple(local(x).shape), storage.nbytes()))
            return x

        x = torch.randn(b, s // t, arch.hidden_size, dtype=torch.bfloat16, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
            block(x, cos, sin)
    finally:
        dist.destroy_process_group()
    measured = sum(nbytes for _, nbytes in saved.values())
    args = dict(micro_batch=b, seq_len=s, tp=t, sequence_parallel=True, recompute=Recompute(mode))
    gathered = layer_activation_bytes(arch, "dense", **args, gathered_tp_inputs=True)
    sharded = layer_activation_bytes(arch, "dense", **args)
    whole = (b * s, arch.hidden_size)
    assert sum(1 for shape, _ in saved.values() if shape == whole) == 2, saved  # the two gathered inputs
    assert measured == gathered.saved_bytes == {"none": 1_297_408, "selective": 1_295_360}[mode], (
        gathered.formula
    )
    assert gathered.saved_bytes - sharded.saved_bytes == 2 * (b * s - b * s // t) * arch.hidden_size * 2


class _LiveExcept(LiveBytes):
    """Live bytes of what runs under the mode, not counting the storages in ``inputs`` (views of the inputs are
    not new memory) nor funcol's AsyncCollectiveTensor before it is waited (it has no storage yet)."""

    def __init__(self, inputs: set[int]) -> None:
        super().__init__()
        self._inputs = inputs

    def _track(self, t: torch.Tensor) -> None:
        try:
            key = t.untyped_storage().data_ptr()
        except RuntimeError:
            return
        if key not in self._inputs:
            super()._track(t)


@pytest.mark.parametrize(("heads", "kv_heads"), [(8, 2), (8, 8), (16, 2)])
def test_torch_ring_attention_backward_working_set_is_the_formula(heads: int, kv_heads: int) -> None:
    """PyTorch's ring-attention backward (``_templated_ring_attention_backward``: all-gather rotation, fp32
    accumulation, round-robin load balancing — torchtitan's context parallelism) run on CPU over a fake process
    group at every rank of cp 2, 4 and 8, with a stand-in for the attention kernel's backward that returns its
    dQ, dK, dV in bf16. The peak of what it allocates (its inputs excluded), on the busiest rank, is
    ``torch_ring_backward_bytes`` + the kernel's own (q + kv) · B, exactly: b = 1, 256 tokens a rank, head dim 64."""
    import torch.distributed as dist
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from app.domain.estimator.context_parallel import torch_ring_backward_bytes

    b, s_local, d = 1, 256, 64

    def kernel_backward(query, key, value, out, logsumexp, is_causal, grad_out, **kwargs):  # noqa: ANN001, ANN003, ARG001
        return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)

    for cp in (2, 4, 8):
        peaks = []
        for rank in range(cp):
            dist.init_process_group("fake", rank=rank, world_size=cp, store=FakeStore())
            try:
                q = torch.randn(b, heads, s_local, d, dtype=torch.bfloat16)
                k = torch.randn(b, kv_heads, s_local, d, dtype=torch.bfloat16)
                v = torch.randn(b, kv_heads, s_local, d, dtype=torch.bfloat16)
                out, grad_out = torch.randn_like(q), torch.randn_like(q)
                lse = torch.randn(b, heads, s_local, dtype=torch.float32)
                live = _LiveExcept({x.untyped_storage().data_ptr() for x in (q, k, v, out, grad_out, lse)})
                with live:
                    grads = ring._templated_ring_attention_backward(
                        dist.group.WORLD, 2, kernel_backward, grad_out, "grad_out", q, k, v, out, lse, True
                    )
                assert [g.shape for g in grads[:3]] == [q.shape, k.shape, v.shape]
                peaks.append(live.peak)
            finally:
                dist.destroy_process_group()
        q_elems, kv_elems, rows = b * s_local * heads * d, 2 * b * s_local * kv_heads * d, b * s_local * heads
        beyond = torch_ring_backward_bytes(cp, q_elems, kv_elems, rows, 2)
        assert max(peaks) == beyond + (q_elems + kv_elems) * 2, (cp, peaks)
