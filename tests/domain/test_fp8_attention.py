"""FP8 attention (plan field ``fp8_attention``): Transformer Engine's fp8_dot_product_attention under Megatron-Core —
its speed from cuDNN's own benchmark, the plans that may ask for it, the flag that asks for it, and the published
runs that used it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.capabilities import capability_violations
from app.domain.estimator.compute import layer_work
from app.domain.estimator.estimate import build_cluster
from app.domain.estimator.plan import Framework, Plan, Precision, Sharding, plan_violations
from app.domain.estimator.validation import run_plan, validate_run

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")
MEGATRON = dict(framework=Framework.megatron, sharding=Sharding.megatron_distopt)
SHAPE = dict(
    n_layers=32, n_heads=32, n_kv_heads=8, n_experts=0, gpus=8, gpus_per_node=8, nvlink_domain_size=8
)


def _speedup(bf16_fwd: float, bf16_bwd: float, fp8_fwd: float, fp8_bwd: float) -> float:
    """Forward+backward time ratio at equal work from TFLOP/s figures counted as cuDNN's benchmark counts them
    (2 batched matmuls forward, 5 backward: the backward does 2.5× the forward's FLOPs)."""
    return (1 / bf16_fwd + 2.5 / bf16_bwd) / (1 / fp8_fwd + 2.5 / fp8_bwd)


def test_the_speedups_are_cudnns_own_benchmark() -> None:
    """cudnn-frontend's SDPA training benchmark (cuDNN 9.22, Llama 3.1 shape, causal, 8,192 tokens): GB200 BF16
    1,574 / 1,332 TFLOP/s forward / backward, FP8 2,047 / 1,454 → 1.138; GB300 BF16 1,856 / 1,435, FP8 2,897 / 1,781
    → 1.304. B200 and B300 take their rack siblings' figure (same silicon); Hopper and Ampere none (1)."""
    assert _speedup(1574, 1332, 2047, 1454) == pytest.approx(1.14, abs=0.005)
    assert _speedup(1856, 1435, 2897, 1781) == pytest.approx(1.30, abs=0.005)
    eff = {e.slug: e for e in CATALOG.efficiency.accelerators}
    assert eff["gb200"].fp8_attention_speedup == eff["b200"].fp8_attention_speedup == 1.14
    assert eff["gb300"].fp8_attention_speedup == eff["b300"].fp8_attention_speedup == 1.30
    assert eff["h100-sxm"].fp8_attention_speedup == eff["a100-80gb"].fp8_attention_speedup == 1.0
    for slug in ("b200", "gb200", "b300", "gb300"):
        assert eff[slug].provenance["fp8_attention_speedup"].source == "CUDNN-FE-SDPA"


@pytest.mark.parametrize(("accelerator", "speedup"), [("gb200", 1.14), ("gb300", 1.30), ("h100-sxm", 1.0)])
def test_fp8_attention_divides_the_attention_time_only(accelerator: str, speedup: float) -> None:
    """Llama 3.1 8B, one 8K sequence, FP8 linears: with fp8_attention the attention kernel's forward (and its
    backward, a fixed multiple of it) take 1/speedup of the time; the GEMMs and the memory-bound work do not move."""
    arch = CATALOG.architecture("llama3.1-8b")
    cl = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator=accelerator, gpus=8)
    plan = Plan(dp=8, global_batch=8, seq_len=8192, precision=Precision.fp8, recompute="none", **MEGATRON)
    off = layer_work(arch, "dense", plan, cl)
    on = layer_work(arch, "dense", plan.model_copy(update={"fp8_attention": True}), cl)
    assert off.attention_fwd_s / on.attention_fwd_s == pytest.approx(speedup, rel=1e-12)
    assert (on.gemm_fwd_s, on.memory_fwd_s) == (off.gemm_fwd_s, off.memory_fwd_s)
    assert off.fwd_s - on.fwd_s == pytest.approx(off.attention_fwd_s - on.attention_fwd_s, rel=1e-9)


def test_fp8_attention_needs_fp8_or_nvfp4_linears() -> None:
    """It runs inside Transformer Engine's FP8 recipe: with bf16 linears the plan is refused on its own field."""
    bf16 = Plan(dp=8, global_batch=8, seq_len=8192, fp8_attention=True, **MEGATRON)
    (v,) = plan_violations(bf16, **SHAPE)
    assert (v.field, v.code) == ("fp8_attention", "fp8-attention-precision") and "fp8 or nvfp4" in v.fix
    for precision in (Precision.fp8, Precision.nvfp4):
        assert plan_violations(bf16.model_copy(update={"precision": precision}), **SHAPE) == []


@pytest.mark.parametrize("framework", [Framework.fsdp2, Framework.deepspeed])
def test_only_megatron_runs_fp8_attention(framework: Framework) -> None:
    """torchtitan and DeepSpeed have no FP8 attention switch: refused, and the nearest plan turns it off."""
    plan = Plan(
        dp=8, global_batch=8, seq_len=8192, precision=Precision.fp8, fp8_attention=True, framework=framework
    )
    (v,) = [v for v in capability_violations(plan) if v.field == "fp8_attention"]
    assert v.code == f"{framework.value}-fp8-attention" and "fp8_attention" in v.fix
    assert capability_violations(plan.model_copy(update={"fp8_attention": False})) == []
    assert capability_violations(plan.model_copy(update=MEGATRON)) == []


def test_the_runs_with_fp8_attention_are_scored_with_it() -> None:
    """The 13 MLPerf v5.1 single-node Llama 3.1 8B NVFP4 runs ran fp8_dot_product_attention, and so did NVIDIA's
    DeepSeek-V3 MXFP8 on 256 GB300 (its recipe sets it): scored, not skipped, with the field on their plan."""
    runs = [r for r in CATALOG.published_runs if r.fp8_attention]
    assert len(runs) >= 14 and {r.family for r in runs} == {"MLPERF-TRAINING", "NVIDIA-NEMO-PERF"}
    for run in runs:
        plan, _ = run_plan(run)
        row = validate_run(run, CATALOG)
        assert plan.fp8_attention and row.error is not None and row.skipped is None, run.slug


def test_fp8_attention_keeps_its_fp8_q_k_v_for_the_backward() -> None:
    """Transformer Engine's FP8 attention saves the FP8 Q, K, V it ran on: Llama 3.1 8B, one 8,192-token sequence,
    tp 1, no recompute: Q 8,192·32·128·2 B = 67,108,864 B → 33,554,432 B and K, V 2·8,192·8·128·2 B = 33,554,432 B
    → 16,777,216 B, 50,331,648 B a layer less; the rest of the layer (its FP8 linear inputs included) unchanged."""
    from app.domain.estimator.activations import layer_activation_bytes

    arch = CATALOG.architecture("llama3.1-8b")
    args = dict(micro_batch=1, seq_len=8192, framework_style="megatron", fp8_linear_inputs=True)
    off = layer_activation_bytes(arch, "dense", **args)
    on = layer_activation_bytes(arch, "dense", **args, fp8_attention=True)
    assert off.saved_bytes - on.saved_bytes == 50_331_648
    assert off.by_component["attention"] - on.by_component["attention"] == 50_331_648
    assert {k: v for k, v in on.by_component.items() if k != "attention"} == {
        k: v for k, v in off.by_component.items() if k != "attention"
    }
    assert "(FP8 attention)" in on.formula
    # a torchtitan layer has no FP8 attention to keep (the framework refuses the plan; the terms ignore the flag)
    torch_args = dict(args, framework_style="torch")
    assert layer_activation_bytes(arch, "dense", **torch_args, fp8_attention=True).saved_bytes == (
        layer_activation_bytes(arch, "dense", **torch_args).saved_bytes
    )
