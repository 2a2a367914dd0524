"""Attention kernel classes: the rate of each fused kernel relative to FlashAttention-2 on each GPU generation.

Independent figures: the FlashAttention-3 paper (Shah et al., 2024, H100 SXM5, BF16, head dim 128, 16K tokens)
benchmarks FA2, cuDNN and FA3 side by side — forward (causal) 335 / 539 / 616 TFLOP/s, backward 322 / 516 / 561
TFLOP/s, the backward counted as 2.5× the forward FLOPs. A training step spends F/fwd + 2.5·F/bwd seconds on 3·F
model FLOPs (our accounting: backward = 2× forward), so the kernels' forward+backward rates are
FA2 3/(1/335 + 2.5/322) = 279, cuDNN 3/(1/539 + 2.5/516) = 448, FA3 3/(1/616 + 2.5/561) = 493 TFLOP/s:
cuDNN = 1.60× FA2 (the prior of cudnn_attention_ratio), and FA3 runs at 493/989 = 0.50 of the H100's dense peak (the
prior of fa3_attention_efficiency: FA3/FA4 run at their own rate, not a multiple of the fitted FA2-class rate).
"""

from __future__ import annotations

import tomllib

import pytest

from app.domain.estimator.compute import attention_efficiency
from app.domain.estimator.estimate import build_cluster
from app.domain.estimator.plan import Framework, Plan, Recompute
from app.domain.estimator.validation import run_plan
from app.settings import REPO_ROOT


def _combined(fwd_tflops: float, bwd_tflops: float) -> float:
    return 3 / (1 / fwd_tflops + 2.5 / bwd_tflops)


def test_priors_are_the_fa3_papers_forward_backward_ratios() -> None:
    fa2, cudnn, fa3 = _combined(335, 322), _combined(539, 516), _combined(616, 561)
    assert (round(fa2), round(cudnn), round(fa3)) == (279, 448, 493)
    data = tomllib.loads((REPO_ROOT / "data" / "efficiency.toml").read_text())
    scale = data["scale_terms"]
    by_gpu = {e["slug"]: e for e in data["efficiency"]}
    for gpu in (
        "h100-sxm",
        "h200-sxm",
        "b200",
        "gb200",
    ):  # FA4 on Blackwell: assumed the same fraction of peak
        assert by_gpu[gpu]["fa3_attention_efficiency"] == pytest.approx(fa3 / 989, abs=0.005)
    assert "fa3_attention_efficiency" not in by_gpu["a100-80gb"]  # FA3/FA4 do not run on Ampere
    assert scale["cudnn_attention_ratio"] == pytest.approx(cudnn / fa2, abs=0.01)


def _eff(catalog, accelerator: str, kernel: str, framework: Framework = Framework.fsdp2) -> float:
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=accelerator, gpus=8)
    plan = Plan(dp=8, global_batch=8, seq_len=8192, framework=framework, attention_kernel=kernel)
    return attention_efficiency(cluster, plan)


@pytest.mark.parametrize(
    ("accelerator", "kernel", "ratio"),
    [
        ("h100-sxm", "fa1", "fa1_attention_ratio"),
        ("h100-sxm", "cudnn", "cudnn_attention_ratio"),
        ("b200", "cudnn", "cudnn_attention_ratio"),
        ("b200", "fa3", None),  # FA3 is Hopper-only: the FA2-class rate
        ("a100-80gb", "fa3", None),  # no asynchronous tensor cores on Ampere
        ("a100-80gb", "fa4", None),
        ("a100-80gb", "cudnn", None),
    ],
)
def test_each_kernel_runs_at_its_ratio_of_fa2(
    catalog, accelerator: str, kernel: str, ratio: str | None
) -> None:
    """Block of 8,192 tokens: FA2 runs at base · 8192/(8192 + L½); FA1-class and cuDNN kernels at their ratio of it."""
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=accelerator, gpus=8)
    base = cluster.efficiency.attention_efficiency
    half = cluster.scale.attention_half_length
    fa2 = _eff(catalog, accelerator, "fa2")
    assert fa2 == pytest.approx(base * 8192 / (8192 + half))
    factor = 1.0 if ratio is None else getattr(cluster.scale, ratio)
    assert _eff(catalog, accelerator, kernel) == pytest.approx(min(0.95, fa2 * factor))
    if ratio is not None:
        assert factor != 1.0  # the kernel really changes the rate


@pytest.mark.parametrize(
    ("accelerator", "kernel"),
    [("h100-sxm", "fa3"), ("h100-sxm", "fa4"), ("h200-sxm", "fa3"), ("b200", "fa4")],
)
def test_flashattention_3_and_4_run_at_their_own_rate_whatever_fa2s(
    catalog, accelerator: str, kernel: str
) -> None:
    """FA3 (Hopper) and FA4 (Hopper, Blackwell): fa3_attention_efficiency · 8192/(8192 + L½), and the same when the
    FA2-class rate of the GPU changes (the kernels do not share FA2's fitted rate)."""
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=accelerator, gpus=8)
    half = cluster.scale.attention_half_length
    expected = cluster.efficiency.fa3_attention_efficiency * 8192 / (8192 + half)
    assert _eff(catalog, accelerator, kernel) == pytest.approx(expected)
    slower = cluster.model_copy(update={"efficiency": cluster.efficiency.model_copy(
        update={"attention_efficiency": cluster.efficiency.attention_efficiency / 2})})  # fmt: skip
    plan = Plan(dp=8, global_batch=8, seq_len=8192, attention_kernel=kernel)
    assert attention_efficiency(slower, plan) == pytest.approx(expected)
    assert attention_efficiency(slower, plan.model_copy(update={"attention_kernel": "fa2"})) < expected / 2


def test_auto_is_the_stacks_own_kernel(catalog) -> None:
    assert _eff(catalog, "h100-sxm", "auto", Framework.megatron) == _eff(catalog, "h100-sxm", "cudnn")
    assert _eff(catalog, "h100-sxm", "auto", Framework.fsdp2) == _eff(catalog, "h100-sxm", "fa2")


def test_a_run_that_names_flashattention_3_or_4_is_estimated_with_it(catalog) -> None:
    runs = {r.slug: r for r in catalog.published_runs}
    h200, _ = run_plan(runs["mleng-llama3.1-8b-8gpu-h200-zero3-seq8k"])
    b200, _ = run_plan(runs["mleng-llama3.1-8b-8gpu-b200-zero3-seq8k"])
    other, _ = run_plan(runs["torchtitan-llama3.1-8b-8gpu-fsdp"])
    assert (h200.attention_kernel, b200.attention_kernel, other.attention_kernel) == ("fa3", "fa4", "auto")


def test_fused_attention_splits_its_time_by_the_kernels_forward_and_backward_rates(catalog) -> None:
    """A fused attention's forward + backward takes 3F/(peak·efficiency) (F its forward FLOPs), the backward
    ATTENTION_BACKWARD_RATIO times the forward: FlashAttention-3's 616 / 561 TFLOP/s forward / backward with the
    backward doing 2.5× the FLOPs give 2.75; the same paper's FlashAttention-2 (335 / 322) and cuDNN (539 / 516)
    give 2.60 and 2.61. So a recomputed attention forward costs 1/3.75 = 27 % of the pair, not a third.
    Llama 3.1 8B, b = 1, s = 8192, one H100: F = 2·s²·a·(d_qk + d_v)/2 = 2·8192²·32·256/2 = 549,755,813,888."""
    from app.domain.estimator.compute import layer_work
    from app.domain.estimator.context_parallel import ATTENTION_BACKWARD_RATIO

    ratio = ATTENTION_BACKWARD_RATIO
    assert ratio == pytest.approx(2.5 * 616 / 561)
    fa2_ratio, cudnn_ratio = 2.5 * 335 / 322, 2.5 * 539 / 516
    assert round(fa2_ratio, 2) == 2.60 and round(cudnn_ratio, 2) == 2.61
    arch = catalog.architecture("llama3.1-8b")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="h100-sxm", gpus=1)
    plan = Plan(dp=1, global_batch=1, seq_len=8192)
    work = layer_work(arch, "dense", plan, cluster)
    flops = 2 * 8192**2 * 32 * 256 / 2
    assert flops == 549_755_813_888
    pair = 3 * flops / (cluster.peak_flops_for("bf16") * attention_efficiency(cluster, plan))
    assert work.attention_fwd_s == pytest.approx(pair / (1 + ATTENTION_BACKWARD_RATIO), rel=1e-12)
    # selective recompute (Megatron's: the attention core) repeats exactly that forward
    assert work.recompute_s(arch, Recompute.selective) == pytest.approx(work.attention_fwd_s, rel=1e-12)


@pytest.mark.parametrize(
    ("accelerator", "kernel"),
    [("h100-sxm", "fa2"), ("h100-sxm", "cudnn"), ("h100-sxm", "fa3"), ("b200", "fa4")],
)
def test_a_ring_step_runs_its_kernel_at_the_ring_ratio_of_the_same_block_outside_a_ring(
    catalog, accelerator: str, kernel: str
) -> None:
    """cp 4 at 32,768 tokens: every ring step attends blocks of 8,192 tokens, so the kernel runs at its rate on an
    8,192-token block (the cp 1, 8,192-token plan's) times ``ring_attention_ratio``; cp 1 is untouched. Worked with
    the ratio set to 0.5: exactly half the rate, whatever the kernel class."""
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=accelerator, gpus=8)
    half = cluster.model_copy(
        update={"scale": cluster.scale.model_copy(update={"ring_attention_ratio": 0.5})}
    )
    single = Plan(dp=8, global_batch=8, seq_len=8192, attention_kernel=kernel)
    ring = Plan(dp=2, cp=4, global_batch=2, seq_len=32768, attention_kernel=kernel)
    assert attention_efficiency(half, single) == attention_efficiency(cluster, single)
    assert attention_efficiency(half, ring) == pytest.approx(attention_efficiency(half, single) / 2)
    fitted = cluster.scale.ring_attention_ratio
    assert (
        0.5 < fitted < 1
    )  # fitted on the CP runs (data/fitted.toml): a ring step loses some of the kernel's rate
    assert attention_efficiency(cluster, ring) == pytest.approx(
        attention_efficiency(cluster, single) * fitted
    )


def test_the_estimate_lists_the_fitted_scale_terms_it_used(catalog) -> None:
    """The shared fitted terms appear on the estimate's assumption list with their fit provenance; the ring step's
    attention rate only on a plan with context parallelism."""
    from app.domain.estimator.estimate import estimate

    arch = catalog.architecture("llama3.1-8b")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="h100-sxm", gpus=8)

    def scale_keys(plan: Plan) -> dict[str, object]:
        return {
            a.key: a
            for a in estimate(arch, cluster, plan).assumptions
            if a.key and a.key.startswith("scale.")
        }

    plain = scale_keys(Plan(dp=8, global_batch=8, seq_len=8192))
    ring = scale_keys(Plan(dp=4, cp=2, global_batch=8, seq_len=32768))
    shared = {"scale.kernel_overhead_us", "scale.comm_slowdown", "scale.straggler_cv"}
    assert set(plain) == shared
    assert set(ring) == shared | {"scale.ring_attention_ratio"}
    listed = ring["scale.ring_attention_ratio"]
    assert listed.value == cluster.scale.ring_attention_ratio
    assert listed.source == "CAPPLAN-FIT"
