"""NVFP4 (precision ``nvfp4``): Transformer Engine's NVFP4BlockScaling as Megatron-Core runs it on Blackwell — the
GEMMs of every transformer layer's linears against the FP4 peak, their quantization at the HBM rate, the inputs they
save for the backward, the GPUs and frameworks that run it, and the Megatron flags that ask for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.activations import layer_activation_bytes
from app.domain.estimator.casts import cast_bytes
from app.domain.estimator.compute import GemmRates, head_times, layer_work
from app.domain.estimator.estimate import InvalidPlan, build_cluster, estimate
from app.domain.estimator.hardware import precision_problem
from app.domain.estimator.plan import Framework, Plan, Precision, Sharding, plan_violations
from app.domain.model.counts import kv_dim, q_dim

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")
MEGATRON = dict(framework=Framework.megatron, sharding=Sharding.megatron_distopt)


def _cluster(accelerator: str = "gb300", gpus: int = 8):
    return build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator=accelerator, gpus=gpus)


def test_fp4_peaks_are_the_blackwell_datasheets() -> None:
    """Dense FP4 per GPU: HGX B200 144 PFLOPS sparse / 8 / 2 = 9,000; GB200 NVL72 1,440 / 72 / 2 = 10,000; HGX B300
    108 dense / 8 = 13,500; GB300 NVL72 1,080 dense / 72 = 15,000 TFLOP/s. Hopper and Ampere have none."""
    fp4 = {a.slug: a.fp4_dense_tflops for a in CATALOG.hardware.accelerators}
    assert (fp4["b200"], fp4["gb200"], fp4["b300"], fp4["gb300"]) == (9000, 10000, 13500, 15000)
    assert fp4["h100-sxm"] is None and fp4["h200-sxm"] is None and fp4["a100-80gb"] is None
    for slug in ("b200", "gb200", "b300", "gb300"):
        acc = CATALOG.hardware.accelerator(slug)
        assert acc.provenance["fp4_dense_tflops"].source and acc.fp4_dense_tflops >= acc.fp8_dense_tflops


def test_a_precision_needs_its_tensor_cores() -> None:
    h100, a100, gb300 = (CATALOG.hardware.accelerator(s) for s in ("h100-sxm", "a100-80gb", "gb300"))
    assert precision_problem(gb300, "nvfp4") is None and precision_problem(h100, "fp8") is None
    assert "no FP4 (NVFP4) tensor cores" in precision_problem(h100, "nvfp4")
    assert "no FP8 tensor cores" in precision_problem(a100, "fp8")
    # the domain refuses it as a plan violation on the precision field, never a bare ValueError
    arch = CATALOG.architecture("llama3.1-8b")
    cl = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=8)
    with pytest.raises(InvalidPlan) as err:
        estimate(arch, cl, Plan(dp=8, global_batch=8, seq_len=4096, precision=Precision.nvfp4, **MEGATRON))
    (v,) = err.value.violations
    assert (v.field, v.code) == ("precision", "precision-unsupported")


def test_nvfp4_quantization_by_hand() -> None:
    """Llama 3.1 8B's w1 at 8,192 tokens (m = 8,192, k = 4,096, n = 14,336), per Transformer Engine's
    NVFP4Quantizer::quantize_impl: a first read of the 16-bit input for the per-tensor amax (2 B), then
    * with the random Hadamard transform (the recipe's default): the row-wise copy from the input (2 B read, 0.5 B + a
      1-byte scale per 16 written) and the column-wise one from the transformed transpose (the same again):
      7.125·8,192·4,096 = 239,075,328 B forward, 7.125·8,192·14,336 = 836,763,648 B for the output gradient;
    * without it (NVTE_NVFP4_DISABLE_RHT=1): one pass writes both copies, 2 + 2 + 2·0.5625 = 5.125 B:
      171,966,464 B and 601,882,624 B;
    * an input a fused norm produced (TE's LayerNormLinear) has its amax already, without the transform: 3.125 B,
      104,857,600 B.
    The weight's copies are made once per step (not per micro-batch). Whatever the framework asks, it is TE's."""
    assert cast_bytes("megatron", 8192, 14336, 4096, precision=Precision.nvfp4) == (239_075_328, 836_763_648)
    assert cast_bytes("megatron", 8192, 14336, 4096, groups=2, precision=Precision.nvfp4) == (
        2 * 239_075_328, 2 * 836_763_648,
    )  # fmt: skip
    assert cast_bytes("megatron", 8192, 14336, 4096, precision=Precision.nvfp4, nvfp4_rht=False) == (
        171_966_464, 601_882_624,
    )  # fmt: skip
    fed = cast_bytes("megatron", 8192, 14336, 4096, precision=Precision.nvfp4, nvfp4_rht=False, norm_fed=True)
    assert fed == (104_857_600, 601_882_624)
    # the transform's amax is its own pass: a norm-fed input gains nothing with it on
    assert (
        cast_bytes("megatron", 8192, 14336, 4096, precision=Precision.nvfp4, norm_fed=True)[0] == 239_075_328
    )


def test_the_hadamard_transform_is_a_plan_field_the_exports_carry() -> None:
    """An NVFP4 plan without the transform is faster by its second pass and its launch sets the variable Transformer
    Engine reads (NVTE_NVFP4_DISABLE_RHT=1); the default keeps TE's recipe and sets nothing."""
    from app.domain.export import build_plan_document, export_plan

    arch = CATALOG.architecture("llama3.1-8b")
    cl = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="gb300", gpus=8)
    plan = Plan(dp=8, global_batch=64, seq_len=8192, precision=Precision.nvfp4, recompute="none", **MEGATRON)
    on, off = estimate(arch, cl, plan), estimate(arch, cl, plan.model_copy(update={"nvfp4_rht": False}))
    assert off.step_time_s < on.step_time_s
    assert off.step.compute_s < on.step.compute_s
    scripts = {}
    for rht, est in ((True, on), (False, off)):
        doc = build_plan_document(arch=arch, node=cl.node, fabric=cl.scale_out_fabric, estimate=est,
                                  preset="llama3.1-8b", hf_config=None, tokens=None)  # fmt: skip
        scripts[rht] = export_plan(doc, "torchrun").content
    assert (
        "export NVTE_NVFP4_DISABLE_RHT=1" in scripts[False] and "NVTE_NVFP4_DISABLE_RHT" not in scripts[True]
    )


def test_nvfp4_gemms_run_against_the_fp4_peak() -> None:
    """GB300: FP4 peak 15,000 TFLOP/s × the GEMM efficiency × fp4_gemm_ratio; 0.5625 B an element (4 bits and one
    E4M3 scale per 16) for the memory-bound bound."""
    cl = _cluster()
    rates = GemmRates.of(cl, Precision.nvfp4)
    expected = 15_000e12 * cl.clock_scale * cl.efficiency.gemm_efficiency * cl.scale.fp4_gemm_ratio
    assert rates.flops_per_s == pytest.approx(expected, rel=1e-12)
    assert rates.elem_bytes == 0.5625
    assert (
        rates.flops_per_s
        > GemmRates.of(cl, Precision.fp8).flops_per_s
        > GemmRates.of(cl, Precision.bf16).flops_per_s
    )


def test_an_nvfp4_layer_is_its_gemms_plus_their_quantization() -> None:
    """Against the same layer in bf16: the linears' GEMMs are NVFP4's and every GEMM's input and output gradient
    pay their quantization at the HBM rate (7.125 B an element with the Hadamard transform) and its three kernel
    launches (amax, cast, transformed transpose: 12 a pass for the 4 GEMMs); attention and the rest of the memory
    traffic are unchanged. The output head stays bf16, as Transformer Engine keeps it."""
    arch, cl = CATALOG.architecture("llama3.1-8b"), _cluster()
    plan = Plan(micro_batch=1, seq_len=8192, **MEGATRON)
    bf16 = layer_work(arch, "dense", plan, cl)
    fp4 = layer_work(arch, "dense", plan.model_copy(update={"precision": Precision.nvfp4}), cl)
    h, f, t = arch.hidden_size, arch.ffn_hidden_size, 8192
    shapes = [(t, q_dim(arch) + 2 * kv_dim(arch), h), (t, h, q_dim(arch)), (t, 2 * f, h), (t, h, f)]  # fused
    hbm = cl.hbm_bytes_per_s * cl.efficiency.hbm_efficiency
    fwd_b = sum(cast_bytes("megatron", m, n, k, precision=Precision.nvfp4)[0] for m, n, k in shapes)
    bwd_b = sum(cast_bytes("megatron", m, n, k, precision=Precision.nvfp4)[1] for m, n, k in shapes)
    launches_s = 4 * 3 * cl.scale.kernel_overhead_us * 1e-6
    assert fp4.memory_fwd_s - bf16.memory_fwd_s == pytest.approx(fwd_b / hbm + launches_s, rel=1e-9)

    def gemm_s(precision: Precision, part: int) -> float:
        return sum(GemmRates.of(cl, precision).fwd_bwd(m, n, k)[part] for m, n, k in shapes)

    assert fp4.gemm_fwd_s - bf16.gemm_fwd_s == pytest.approx(
        gemm_s(Precision.nvfp4, 0) - gemm_s(Precision.bf16, 0)
    )
    assert fp4.bwd_s - bf16.bwd_s == pytest.approx(
        gemm_s(Precision.nvfp4, 1) - gemm_s(Precision.bf16, 1) + bwd_b / hbm + launches_s, rel=1e-9
    )
    assert fp4.attention_fwd_s == bf16.attention_fwd_s
    assert head_times(arch, plan.model_copy(update={"precision": Precision.nvfp4}), cl) == head_times(
        arch, plan, cl
    )


def test_te_saves_the_linear_inputs_quantized() -> None:
    """Transformer Engine keeps a low-precision linear's input as the copy its weight-gradient GEMM reads: FP8 at
    1 B (half the 16-bit bytes), NVFP4 at 0.5625 B (the column-wise copy with its scales). So the bytes NVFP4 saves
    over bf16 are (2 − 0.5625)/(2 − 1) = 1.4375 × FP8's saving, to the byte's rounding; torch-style plans are not
    TE and keep 16 bits."""
    arch = CATALOG.architecture("llama3.1-8b")
    shape = dict(micro_batch=1, seq_len=4096, tp=2, sequence_parallel=True, framework_style="megatron")
    bf16 = layer_activation_bytes(arch, "dense", **shape).saved_bytes
    fp8 = layer_activation_bytes(arch, "dense", **shape, fp8_linear_inputs=True).saved_bytes
    fp4 = layer_activation_bytes(arch, "dense", **shape, fp4_linear_inputs=True).saved_bytes
    assert bf16 > fp8 > fp4
    assert (bf16 - fp4) / (bf16 - fp8) == pytest.approx(1.4375, abs=1e-4)
    torch_style = dict(shape, framework_style="torch")
    assert layer_activation_bytes(arch, "dense", **torch_style, fp4_linear_inputs=True).saved_bytes == (
        layer_activation_bytes(arch, "dense", **torch_style).saved_bytes
    )


@pytest.mark.parametrize("framework", [Framework.fsdp2, Framework.deepspeed])
def test_only_megatron_runs_nvfp4(framework: Framework) -> None:
    sharding = Sharding.fsdp_full if framework is Framework.fsdp2 else Sharding.zero1
    plan = Plan(
        dp=8, global_batch=8, seq_len=4096, precision=Precision.nvfp4, framework=framework, sharding=sharding
    )
    (v,) = plan_violations(plan, n_layers=32, n_heads=32, n_kv_heads=8, n_experts=0, gpus=8, gpus_per_node=8,
                           nvlink_domain_size=8)  # fmt: skip
    assert v.field == "precision" and "NVFP4" in v.message and "fp8" in v.fix
    megatron = Plan(dp=8, global_batch=8, seq_len=4096, precision=Precision.nvfp4, **MEGATRON)
    assert plan_violations(megatron, n_layers=32, n_heads=32, n_kv_heads=8, n_experts=0, gpus=8, gpus_per_node=8,
                           nvlink_domain_size=8) == []  # fmt: skip


def test_nvfp4_is_faster_than_fp8_on_gb300_and_saves_memory() -> None:
    """NVIDIA's Llama 3 70B on 64 GB300 (PP 4, VP 5): the NVFP4 plan runs faster than the MXFP8 one (published
    7,296 against 4,864 tokens/s a GPU in the same table) and keeps less in memory (smaller saved inputs)."""
    arch = CATALOG.architecture("llama3.1-70b")
    cl = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="gb300", gpus=64, node="gb300-nvl72")
    plan = Plan(pp=4, vpp=5, dp=16, global_batch=256, seq_len=8192, precision=Precision.fp8, **MEGATRON)
    fp8 = estimate(arch, cl, plan)
    fp4 = estimate(arch, cl, plan.model_copy(update={"precision": Precision.nvfp4}))
    assert fp4.tokens_per_s_per_gpu > 1.2 * fp8.tokens_per_s_per_gpu
    assert fp4.peak_memory_bytes < fp8.peak_memory_bytes


def test_te_keeps_quantized_weights_by_sharding() -> None:
    """Llama 3.1 70B, tp 4, pp 8, rank 0: 10 layers of (q 8192² + k, v 8192·1024 + o 8192² + 3·8192·28672) / 4 =
    213,909,504 linear weights each, 2,139,095,040 on the rank. Under Megatron's distributed optimizer the quantized
    weights are the primary ones (--fp8/--fp4-param-gather): FP8's two 1-byte copies cost what the bf16 copy did
    (± 0), NVFP4's two 0.5625-byte copies 0.875 B less a weight (−1,871,708,160 B). Under DDP TE caches them beside
    the bf16 weights: +2 B (FP8, +4,278,190,080 B) and +1.125 B (NVFP4). Under torch FSDP2 TE caches nothing."""
    arch = CATALOG.architecture("llama3.1-70b")
    cl = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="gb300", gpus=64, node="gb300-nvl72")
    linear = 10 * (8192 * 8192 * 2 + 8192 * 1024 * 2 + 3 * 8192 * 28672) // 4
    assert linear == 2_139_095_040

    def params(sharding: Sharding, precision: Precision, pp: int = 8) -> int:
        plan = Plan(tp=4, pp=pp, dp=64 // (4 * pp), global_batch=64, seq_len=8192, framework=Framework.megatron,
                    sharding=sharding, precision=precision, recompute="full", sequence_parallel=True)  # fmt: skip
        return estimate(arch, cl, plan).memory_by_stage[0].params_bytes

    distopt, ddp = Sharding.megatron_distopt, Sharding.ddp
    assert params(distopt, Precision.fp8) == params(distopt, Precision.bf16)
    assert params(distopt, Precision.nvfp4) - params(distopt, Precision.bf16) == pytest.approx(
        -0.875 * linear, abs=2
    )
    assert params(ddp, Precision.fp8) - params(ddp, Precision.bf16) == pytest.approx(2 * linear, abs=2)
    assert params(ddp, Precision.nvfp4) - params(ddp, Precision.bf16) == pytest.approx(1.125 * linear, abs=2)
    fsdp = Sharding.fsdp_full
    assert params(fsdp, Precision.nvfp4, pp=1) == params(fsdp, Precision.bf16, pp=1)


def test_the_distributed_optimizer_gathers_the_quantized_weights() -> None:
    """With --fp8-param-gather / --fp4-param-gather Megatron's distributed optimizer all-gathers the linears'
    row-wise quantized copy (1 B, 0.5625 B) instead of 2 B: on 8 DGX B200 over InfiniBand, with one 8K micro-batch,
    the exposed DP time falls bf16 > FP8 > NVFP4, although the faster FP8 / NVFP4 compute hides less of it — as DDP
    shows, whose 16-bit all-reduce is the same in every precision and is more exposed beside faster compute. (The
    buckets' ring latencies are the same in every precision; inside one NVL72 rack, where they outweigh the bytes,
    the ordering does not hold, which is why the case crosses nodes.)"""
    arch = CATALOG.architecture("llama3.1-8b")
    cl = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="b200", gpus=64)

    def dp_s(sharding: Sharding, precision: Precision) -> float:
        plan = Plan(dp=64, global_batch=64, seq_len=8192, framework=Framework.megatron, sharding=sharding,
                    precision=precision)  # fmt: skip
        return estimate(arch, cl, plan).step.dp_exposed_s

    distopt = [dp_s(Sharding.megatron_distopt, p) for p in (Precision.bf16, Precision.fp8, Precision.nvfp4)]
    assert distopt[0] > distopt[1] > distopt[2] > 0
    ddp = [dp_s(Sharding.ddp, p) for p in (Precision.bf16, Precision.fp8, Precision.nvfp4)]
    assert ddp[0] < ddp[1] < ddp[2]


def test_published_nvfp4_runs_are_scored_with_their_transform_setting() -> None:
    """NVIDIA's MLPerf Training v5.1 NVFP4 configurations (config_common_fp4.sh) set NVTE_NVFP4_DISABLE_RHT=1; the
    partners' runs of the same implementation are marked so as an inference; NeMo's table rows state the recipe only
    (TE's default: the transform on). The plan each run is scored with carries the setting."""
    from app.domain.estimator.validation import run_plan

    nvfp4 = [r for r in CATALOG.published_runs if r.precision == "nvfp4"]
    assert len(nvfp4) >= 21
    for run in nvfp4:
        assert run.nvfp4_rht is (run.source_family != "MLPERF-TRAINING"), run.slug
        assert run_plan(run)[0].nvfp4_rht is run.nvfp4_rht
    inferred = [r for r in nvfp4 if "nvfp4_rht" in (r.inferred or {})]
    assert inferred and all("config_common_fp4.sh" in r.inferred["nvfp4_rht"] for r in inferred)
