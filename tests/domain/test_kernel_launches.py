"""Fixed costs the memory-bound kernels add to a layer: each launch (``scale.kernel_overhead_us``), one kernel per
pass a quantization makes over its tensor, and the amax all-reduce current scaling waits for under sequence
parallelism — counted by hand from the kernels Transformer Engine and eager PyTorch launch."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.casts import amax_all_reduced, cast_bytes, cast_kernels
from app.domain.estimator.compute import layer_work
from app.domain.estimator.estimate import build_cluster
from app.domain.estimator.network import small_all_reduce_seconds
from app.domain.estimator.plan import Fp8Recipe, Framework, Plan, Precision, Sharding
from app.domain.estimator.xp import SCALAR

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")
MEGATRON = dict(framework=Framework.megatron, sharding=Sharding.megatron_distopt)


def _with_overhead(cluster, us: float):
    return cluster.model_copy(update={"scale": cluster.scale.model_copy(update={"kernel_overhead_us": us})})


@pytest.mark.parametrize(
    ("ranks", "nodes", "expected_us"),
    [(1, 1, 0.0), (2, 1, 4.54), (8, 1, 10.18), (16, 2, 22.16)],
)
def test_an_amax_all_reduce_costs_nccls_low_latency_ring(ranks: int, nodes: int, expected_us: float) -> None:
    """NCCL's tuning model for a few bytes (LL ring, src/graph/tuning.cc): 3.6 µs + 0.47 µs a NVLink step + 2.7 µs a
    network step, 2·(n − 1) steps: 2 ranks 3.6 + 2·0.47 = 4.54 µs (NCCL issue #1259 measures ~6 µs on two H100s),
    8 ranks 3.6 + 14·0.47 = 10.18 µs; 16 ranks on 2 nodes: 28 NVLink steps and 2 network steps,
    3.6 + 28·0.47 + 2·2.7 = 22.16 µs."""
    assert float(small_all_reduce_seconds(SCALAR, ranks, nodes)) * 1e6 == pytest.approx(expected_us, abs=1e-9)


@pytest.mark.parametrize(
    ("precision", "recipe", "rht", "norm_fed", "kernels"),
    [
        (Precision.fp8, Fp8Recipe.delayed, True, False, 1),  # cast records the amax on the way
        (Precision.fp8, Fp8Recipe.delayed, True, True, 0),  # the norm writes FP8 itself
        (Precision.fp8, Fp8Recipe.tensorwise, True, False, 2),  # amax pass, then cast
        (Precision.fp8, Fp8Recipe.tensorwise, True, True, 1),  # the norm takes the amax
        (Precision.fp8, Fp8Recipe.rowwise, True, False, 4),  # two layouts, each amax + cast
        (Precision.fp8, Fp8Recipe.mxfp8, True, True, 1),  # unfused: one cast writes both layouts
        (Precision.fp8, Fp8Recipe.blockwise, True, False, 1),
        (Precision.nvfp4, Fp8Recipe.auto, True, False, 3),  # amax, cast, transformed transpose
        (Precision.nvfp4, Fp8Recipe.auto, False, False, 2),
        (Precision.nvfp4, Fp8Recipe.auto, False, True, 1),
        (Precision.nvfp4, Fp8Recipe.auto, True, True, 3),  # the transform's amax pass stays
    ],
)
def test_a_quantization_launches_one_kernel_per_pass(
    precision: Precision, recipe: Fp8Recipe, rht: bool, norm_fed: bool, kernels: int
) -> None:
    assert cast_kernels("megatron", precision, recipe, rht, norm_fed) == kernels


def test_only_current_amax_scales_need_the_tp_all_reduce() -> None:
    """One per-tensor scale from the current amax (tensorwise; NVFP4's FP32 global scale) needs the whole sequence's
    amax; delayed scaling reduces its history once a step; row and block scales are local. FSDP2's default is
    rowwise, Megatron's delayed."""
    assert amax_all_reduced("megatron", Precision.fp8, Fp8Recipe.tensorwise)
    assert amax_all_reduced("megatron", Precision.nvfp4, Fp8Recipe.auto)
    assert amax_all_reduced("fsdp2", Precision.fp8, Fp8Recipe.tensorwise)
    assert not amax_all_reduced("fsdp2", Precision.fp8, Fp8Recipe.auto)
    for recipe in (
        Fp8Recipe.auto,
        Fp8Recipe.delayed,
        Fp8Recipe.mxfp8,
        Fp8Recipe.blockwise,
        Fp8Recipe.rowwise,
    ):
        assert not amax_all_reduced("megatron", Precision.fp8, recipe)


@pytest.mark.parametrize(("framework", "sharding", "forward"), [
    (Framework.megatron, Sharding.megatron_distopt, 7),  # 2 norms + 2 residual adds + rotary q, k + SwiGLU
    (Framework.fsdp2, Sharding.fsdp_full, 22),  # eager: 2 × 6 (RMSNorm) + 2 + 2 × 3 (rotary) + 2 (SiLU, multiply)
])  # fmt: skip
def test_every_elementwise_launch_costs_the_overhead(
    framework: Framework, sharding: Sharding, forward: int
) -> None:
    """A Llama 3.1 8B layer in BF16 on one H100: raising the per-kernel overhead from 0 to 5 µs adds 5 µs per
    memory-bound launch, twice as many in the backward — and nothing to the GEMMs or attention."""
    arch = CATALOG.architecture("llama3.1-8b")
    cl = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=8)
    plan = Plan(dp=8, global_batch=8, seq_len=8192, recompute="none", framework=framework, sharding=sharding)
    zero = layer_work(arch, "dense", plan, _with_overhead(cl, 0.0))
    five = layer_work(arch, "dense", plan, _with_overhead(cl, 5.0))
    assert (five.gemm_fwd_s, five.attention_fwd_s) == (zero.gemm_fwd_s, zero.attention_fwd_s)
    assert five.memory_fwd_s - zero.memory_fwd_s == pytest.approx(forward * 5e-6, rel=1e-9)
    assert five.bwd_s - zero.bwd_s == pytest.approx(2 * forward * 5e-6, rel=1e-9)


def test_current_scaling_under_sequence_parallelism_waits_for_the_tp_amax() -> None:
    """Llama 3.1 8B, TP 8 with sequence parallelism on H100 (Hopper: two FP8 copies), Megatron, tensorwise against
    delayed. Forward GEMMs (m, n, k): QKV (8,192, 768, 4,096) and FC1 (8,192, 3,584, 4,096) norm-fed and quantized on
    the 1,024-row shard; proj (8,192, 4,096, 512) and FC2 (8,192, 4,096, 1,792) whole. Cast bytes: delayed
    1·4,194,304 + 4·4,194,304 + 1·4,194,304 + 4·14,680,064 = 83,886,080 B; tensorwise 4·4,194,304 + 6·4,194,304 +
    4·4,194,304 + 6·14,680,064 = 146,800,640 B. Cast kernels: delayed 0 + 1 + 0 + 1, tensorwise 1 + 2 + 1 + 2 (4
    more). Tensorwise's QKV and FC1 inputs each wait for an amax all-reduce over the 8 ranks: 2 × 10.18 µs."""
    arch = CATALOG.architecture("llama3.1-8b")
    cl = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=8)
    plan = Plan(tp=8, global_batch=1, seq_len=8192, sequence_parallel=True, precision=Precision.fp8,
                fp8_recipe=Fp8Recipe.delayed, recompute="none", **MEGATRON)  # fmt: skip
    delayed = layer_work(arch, "dense", plan, cl)
    current = layer_work(arch, "dense", plan.model_copy(update={"fp8_recipe": Fp8Recipe.tensorwise}), cl)
    assert sum(
        cast_bytes("megatron", *shape, recipe=Fp8Recipe.tensorwise, input_shards=8 if shape[2] == 4096 else 1,
                   norm_fed=shape[2] == 4096)[0]
        for shape in ((8192, 768, 4096), (8192, 4096, 512), (8192, 3584, 4096), (8192, 4096, 1792))
    ) == 146_800_640  # fmt: skip
    hbm = cl.hbm_bytes_per_s * cl.efficiency.hbm_efficiency
    launch_s = cl.scale.kernel_overhead_us * 1e-6
    expected = (146_800_640 - 83_886_080) / hbm + 4 * launch_s + 2 * 10.18e-6
    assert current.memory_fwd_s - delayed.memory_fwd_s == pytest.approx(expected, rel=1e-9)
    # without sequence parallelism every rank quantizes the whole sequence and needs no one else's amax: delayed
    # 33,554,432 + 16,777,216 + 33,554,432 + 58,720,256 = 142,606,336 B, tensorwise 134,217,728 + 25,165,824 +
    # 134,217,728 + 88,080,384 = 381,681,664 B; the same 4 more launches, no all-reduce
    whole = plan.model_copy(update={"sequence_parallel": False})
    no_sp = layer_work(arch, "dense", whole.model_copy(update={"fp8_recipe": Fp8Recipe.tensorwise}), cl)
    no_sp_delayed = layer_work(arch, "dense", whole, cl)
    assert no_sp.memory_fwd_s - no_sp_delayed.memory_fwd_s == pytest.approx(
        (381_681_664 - 142_606_336) / hbm + 4 * launch_s, rel=1e-9
    )
