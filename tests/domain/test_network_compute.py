"""Collective times (nccl-tests definitions) and FLOP counts, worked by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.compute import (
    GemmRates,
    hardware_flops_per_token,
    head_times,
    model_flops_per_token,
)
from app.domain.estimator.estimate import build_cluster
from app.domain.estimator.network import Collective, collective_time, place_group
from app.domain.estimator.plan import Plan, Precision, Recompute
from app.domain.estimator.xp import SCALAR
from app.domain.model.counts import parameter_counts

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")


def cluster(gpus: int, accelerator: str = "h100-sxm"):
    return build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator=accelerator, gpus=gpus)


def test_all_reduce_inside_a_node_uses_nvlink() -> None:
    """8 × H100 on NVLink 4: 450 GB/s each way × 0.80 = 360 GB/s bus bandwidth.
    All-reduce of 1 GB: 2·7/8 · 1e9 / 360e9 = 4.861 ms, plus 2·7 hops × 3 µs = 0.042 ms."""
    group = place_group("tp", 8, 1, cluster(8))
    assert not group.scale_out and group.bus_gb_per_s == pytest.approx(360)
    assert collective_time(Collective.all_reduce, 1e9, group) == pytest.approx(
        2 * 7 / 8 / 360 + 14 * 3e-6, rel=1e-9
    )


def test_group_across_nodes_is_limited_by_the_nic() -> None:
    """dgx-h100: 8 × 400 Gb/s NDR per node = 50 GB/s per GPU; × 0.85 IB efficiency = 42.5 GB/s."""
    group = place_group("dp", 16, 8, cluster(128))  # stride 8: one rank per node
    assert group.scale_out and group.nodes == 16
    assert group.bus_gb_per_s == pytest.approx(42.5)
    t = collective_time(Collective.reduce_scatter, 1e9, group)
    assert t == pytest.approx(15 / 16 * 1e9 / 42.5e9 + 15 * 8e-6, rel=1e-9)  # a ring: 15 steps between nodes


def test_a_rings_latency_grows_with_the_group_as_nccl_counts_it() -> None:
    """NCCL's tuning model (src/graph/tuning.cc): a ring's steps between nodes wait the network's latency, the
    others the NVLink's. Reduce-scatter of 336 ranks, two on each of 168 nodes (dp 336 at tp 4 on DGX H100): 167
    steps at 8 µs (InfiniBand) + 168 at 3 µs (NVLink) = 1.84 ms of latency, linear in the group — where a tree's
    ⌈log₂ 168⌉ = 8 levels would wait 64 µs. An all-reduce keeps NCCL's tree: 2·(1 + 8)·8 µs."""
    group = place_group("dp", 336, 4, cluster(1344))
    assert (group.ranks_per_domain, group.nodes, group.intra_hop_s) == (2, 168, pytest.approx(3e-6))
    latency = collective_time(Collective.reduce_scatter, 1.0, group) - 335 / 336 / (group.bus_gb_per_s * 1e9)
    assert latency == pytest.approx(167 * 8e-6 + 168 * 3e-6, rel=1e-9)
    assert collective_time(Collective.all_gather, 1.0, group) == collective_time(
        Collective.reduce_scatter, 1.0, group
    )
    tree = collective_time(Collective.all_reduce, 1.0, group) - 2 * 335 / 336 / (group.bus_gb_per_s * 1e9)
    assert tree == pytest.approx(2 * (1 + 8) * 8e-6, rel=1e-9)


def test_gradient_buckets_per_stack() -> None:
    """Megatron-Core's bucket grows with the data-parallel group, max(4·10⁷, 10⁶·dp) parameters: GPT-3 175B at
    tp 4, pp 8 holds 5.5·10⁹ parameters a rank → at dp 336, 17 buckets of 3.36·10⁸; at dp 16, 138 of 4·10⁷.
    DeepSpeed's reduce_bucket_size is 5·10⁸ elements whatever dp: 11 buckets."""
    from app.domain.estimator.evaluate import dp_buckets

    assert dp_buckets(SCALAR, 5.5e9, 336, 0.0) == 17
    assert dp_buckets(SCALAR, 5.5e9, 16, 0.0) == 138
    assert dp_buckets(SCALAR, 5.5e9, 336, 5e8) == 11


def test_group_of_one_costs_nothing() -> None:
    assert collective_time(Collective.all_reduce, 1e9, place_group("dp", 1, 1, cluster(8))) == 0


def test_gpt3_model_flops_match_megatron_72_form_without_attention_halving() -> None:
    """GPT-3 175B, s = 2048: Megatron's 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) per sequence counts non-causal
    attention and 4h MLPs; per token that is 72·l·h²·(1 + s/6h + V/12lh) = 1.0698e12 FLOPs. Our causal count
    halves the s/(6h) attention term: 72·l·h²·(1 + s/(12h) + V/12lh) + biases ≈ 1.0617e12."""
    arch = CATALOG.architecture("gpt3-175b")
    counts = parameter_counts(arch)
    f = model_flops_per_token(arch, 2048, counts.matmul_weights_active)
    n_layers, h, s, v = 96, 12288, 2048, arch.vocab_size
    megatron_causal = 72 * n_layers * h * h * (1 + s / (12 * h) + v / (12 * n_layers * h))
    assert f.total == pytest.approx(megatron_causal, rel=2e-3)  # biases are the difference
    non_causal = model_flops_per_token(arch, 2048, counts.matmul_weights_active, causal=False)
    assert non_causal.total == pytest.approx(
        72 * n_layers * h * h * (1 + s / (6 * h) + v / (12 * n_layers * h)), rel=2e-3
    )


def test_full_recompute_adds_one_forward() -> None:
    """Full recompute: hardware FLOPs ≈ 8/6 of model FLOPs for the layers (the output head is not recomputed)."""
    arch = CATALOG.architecture("llama3.1-8b")
    counts = parameter_counts(arch)
    f = model_flops_per_token(arch, 8192, counts.matmul_weights_active)
    head = arch.vocab_size * arch.hidden_size
    full = hardware_flops_per_token(f, arch, Plan(recompute=Recompute.full), head)
    assert full == pytest.approx(f.total + (f.matmul - 6 * head) / 3 + f.attention / 3)
    assert hardware_flops_per_token(f, arch, Plan(recompute=Recompute.none), head) == f.total
    sel = hardware_flops_per_token(f, arch, Plan(recompute=Recompute.selective), head)
    assert f.total < sel < full


def test_power_cap_derates_compute_but_not_the_mfu_denominator() -> None:
    capped = build_cluster(
        CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=8, power_limit_w=500
    )
    gamma = CATALOG.efficiency.scale.power_exponent  # fitted on the power-capped published runs
    assert 0 < gamma < 1.5
    assert capped.clock_scale == pytest.approx((500 / 700) ** gamma)
    assert capped.peak_flops == cluster(8).peak_flops
    assert capped.peak_flops_for("bf16") < cluster(8).peak_flops_for("bf16")


def test_ring_collectives_across_nodes_use_every_nic_of_the_node() -> None:
    """nccl-tests across DGX H100 nodes (8 × 400 Gb/s NDR, source NCCL-MULTINODE): all-reduce bus bandwidth
    400–450 GB/s, i.e. ≈ 8 × one GPU's 50 GB/s NIC share, bounded by NVLink — a ring leaves each node once per
    channel and the channels use all 8 rails. A group with one GPU per node gets one rail; a send one share."""
    from app.domain.estimator.network import place_group

    c = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=16, node="dgx-h100")
    dp = place_group("dp", 16, 1, c)  # 8 GPUs on each of 2 nodes
    assert dp.nodes == 2 and dp.ranks_per_domain == 8
    assert 0.75 * 400 <= dp.bus_gb_per_s <= 450
    spread = place_group("dp", 2, 8, c)  # one GPU per node (tp 8 inside)
    assert spread.bus_gb_per_s == pytest.approx(c.scale_out_gb_per_s * c.scale_out_network.efficiency)
    assert place_group("pp", 2, 8, c).bus_gb_per_s == pytest.approx(spread.bus_gb_per_s)


def test_moe_all_to_all_moves_the_ranks_sequence_parallel_shard() -> None:
    """Mixtral 8x7B, tp 2 with sequence parallelism, ep 8 on 16 H100 (stride tp: 8 ranks over 2 nodes, 4 per
    node). Each rank dispatches only its 1/tp shard of the micro-batch (Megatron-Core requires SP for MoE with
    TP > 1): 1 × 4,096 / 2 tokens × top-2 × 4,096 hidden × 2 B = 16.8 MB. 4 of the 8 ranks are on the other node,
    so 4/8 of that goes over the rank's NIC share (50 GB/s × 0.85 = 42.5 GB/s) and 3/8 over NVLink (360 GB/s):
    the NIC part sets the time, 8.39 MB / 42.5 GB/s = 197 µs, plus one scale-out hop (8 µs). The busiest of the 8
    ranks receives 1.0137 × the mean (random top-2 of 8 experts over the group's 4,096 · 2 slots a rank:
    moe_load.expert_load_factor), so the bytes grow by that factor: 200 µs."""
    from app.domain.estimator.assemble import consts, model_q, plan_q
    from app.domain.estimator.evaluate import plan_comm
    from app.domain.estimator.xp import SCALAR

    arch = CATALOG.architecture("mixtral-8x7b")
    plan = Plan(tp=2, dp=8, ep=8, global_batch=8, seq_len=4096, sequence_parallel=True, framework="megatron",
                sharding="megatron-distopt")  # fmt: skip
    c = cluster(16)
    comm = plan_comm(SCALAR, model_q(arch, parameter_counts(arch)), plan_q(arch, plan), consts(c, plan))
    size = 4096 / 2 * 2 * 4096 * 2 * 1.0137254
    assert comm["ep_a2a"] == pytest.approx(size * 4 / 8 / 42.5e9 + 8e-6, rel=1e-6)


def test_interleaving_widens_the_window_of_the_distributed_optimizer_collectives() -> None:
    """Megatron's interleaved 1F1B passes micro-batches in groups of pp: chunk c's gradients are final once the last
    group's backward has passed it, while that group still runs through the chunks below, so the reduce-scatter
    hides behind min(m, pp) micro-batches of backward instead of one. Hand-worked: m = 8, pp = 4, vpp = 12 → 4;
    m = 2, pp = 4 → 2; vpp = 1 → 1 (the stage's gradients are final after its last backward)."""
    import numpy as np

    from app.domain.estimator.estimate import estimate
    from app.domain.estimator.evaluate import dp_window_micro_batches
    from app.domain.estimator.plan import Framework, Precision, Sharding
    from app.domain.estimator.xp import SCALAR, VECTOR

    assert dp_window_micro_batches(SCALAR, 8, 4, 12) == 4
    assert dp_window_micro_batches(SCALAR, 2, 4, 12) == 2
    assert dp_window_micro_batches(SCALAR, 8, 4, 1) == 1
    assert dp_window_micro_batches(VECTOR, np.array([8, 2, 8]), 4, np.array([12, 12, 1])).tolist() == [
        4,
        2,
        1,
    ]
    # GPT-3 175B on 128 B200 (tp 8, pp 4, dp 4 across four nodes, 8 micro-batches): the distributed optimizer's
    # reduce-scatter and all-gather cross InfiniBand; interleaving hides more of them
    arch = CATALOG.architecture("gpt3-175b")
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="b200", gpus=128)
    base = dict(tp=8, pp=4, dp=4, micro_batch=1, global_batch=32, seq_len=2048, sequence_parallel=True,
                sharding=Sharding.megatron_distopt, framework=Framework.megatron, precision=Precision.fp8)  # fmt: skip
    flat = estimate(arch, cluster, Plan(**base, vpp=1))
    interleaved = estimate(arch, cluster, Plan(**base, vpp=12))
    assert interleaved.step.dp_exposed_s < 0.9 * flat.step.dp_exposed_s  # equal before the window


# tile-ai/tilelang benchmark/matmul/README.md: M = N = 8192 FP16 GEMMs on an H800 SXM (the H100 SXM's 132 SMs),
# TFLOP/s by reduction length K (source TILELANG-H800-KSWEEP in data/sources_estimation.toml)
TILELANG_H800_TFLOPS = {256: 386, 512: 520, 1024: 628, 2048: 705, 4096: 736, 8192: 758, 16384: 766}


def test_short_reductions_run_slower_as_a_measured_k_sweep_does() -> None:
    """Each output tile pays a fixed cost (first operand stages, storing the tile) of gemm_tile_fixed_k = 200
    reduction steps on Hopper, on top of the 8 µs launch overhead per GEMM. 8192×8192 outputs in 128×256 tiles:
    2,048 tiles in 16 waves on 132 SMs, the same for every K. By hand at a GEMM rate of 667 TFLOP/s (the fitted
    H100 rate when this was written), K = 1,024: 2·8192²·1224 / 667e12 / 0.970 (waves) + 8 µs = 262 µs → 525
    TFLOP/s; K = 16,384: 2·8192²·16584 / 667e12 / 0.970 + 8 µs = 3,450 µs → 637 TFLOP/s; ratio 0.823 vs the
    measured 628/766 = 0.820. Every K from 256 to 16,384 lands within 2.5 % of the measured ratio; without the
    tile term K = 1,024 would sit at 0.99."""
    rates = GemmRates.of(cluster(8), Precision.bf16)
    assert rates.tile_fixed_k == 200

    def tflops(k: int) -> float:
        return 2 * 8192 * 8192 * k / rates.seconds(8192, 8192, k)

    for k, measured in TILELANG_H800_TFLOPS.items():
        ratio = tflops(k) / tflops(16384)
        assert ratio == pytest.approx(measured / TILELANG_H800_TFLOPS[16384], abs=0.025), k
    # a short reduction is slower per FLOP; the launch overhead makes the shortest ones slower still
    assert tflops(256) < tflops(512) < tflops(1024) < tflops(4096)
    no_tile = dataclasses.replace(rates, tile_fixed_k=0.0)
    assert 2 * 8192 * 8192 * 1024 / no_tile.seconds(8192, 8192, 1024) / tflops(16384) > 0.95


def test_fp8_casts_by_hand() -> None:
    """Llama 3.1 8B's w1 at 8,192 tokens (m = 8,192, k = 4,096, n = 14,336): torchao's dynamic tensorwise casts
    (amax read 2 B, then read 2 B and write FP8 in both layouts 1 + 1 B) of the input and the weight forward,
    6·(8,192·4,096 + 4,096·14,336) = 553,648,128 B, and of the output gradient backward, 6·8,192·14,336 =
    704,643,072 B; Transformer Engine's delayed-scaling cast-transpose (4 B, weights cached over micro-batches)
    134,217,728 B and 469,762,048 B. Grouped GEMMs count each group."""
    from app.domain.estimator.casts import cast_bytes
    from app.domain.estimator.plan import Fp8Recipe

    assert cast_bytes("fsdp2", 8192, 14336, 4096, recipe=Fp8Recipe.tensorwise) == (553_648_128, 704_643_072)
    assert cast_bytes("megatron", 8192, 14336, 4096) == (134_217_728, 469_762_048)
    assert cast_bytes("deepspeed", 8192, 14336, 4096, groups=2) == (2 * 134_217_728, 2 * 469_762_048)


@pytest.mark.parametrize("framework", ["fsdp2", "megatron"])
def test_fp8_layer_pays_its_casts_at_the_hbm_rate(framework: str) -> None:
    """An FP8 layer's memory-bound time is its 16-bit one plus the casts of every GEMM at the HBM rate: forward
    time grows by Σ forward cast bytes ÷ HBM, backward by Σ backward cast bytes ÷ HBM beside its faster FP8 GEMMs
    (an eager model: q, k, v and o are separate GEMMs, the MLP's gate‖up one), plus each cast's kernel launches
    (one per pass over the tensor: torchao's rowwise default 4, Transformer Engine's delayed scaling 1)."""
    from app.domain.estimator.casts import cast_bytes, cast_kernels
    from app.domain.estimator.compute import layer_work
    from app.domain.estimator.plan import Framework
    from app.domain.model.counts import kv_dim, q_dim

    arch = CATALOG.architecture("llama3.1-8b")
    cl = cluster(8)
    plan = Plan(micro_batch=1, seq_len=8192, framework=Framework(framework), fused_kernels=False)
    bf16 = layer_work(arch, "dense", plan, cl)
    fp8 = layer_work(arch, "dense", plan.model_copy(update={"precision": Precision.fp8}), cl)
    h, f, t = arch.hidden_size, arch.ffn_hidden_size, 8192
    shapes = [(t, q_dim(arch), h), (t, kv_dim(arch), h), (t, kv_dim(arch), h), (t, h, q_dim(arch)),
              (t, 2 * f, h), (t, h, f)]  # fmt: skip
    fwd_b = sum(cast_bytes(framework, m, n, k)[0] for m, n, k in shapes)
    bwd_b = sum(cast_bytes(framework, m, n, k)[1] for m, n, k in shapes)
    hbm = cl.hbm_bytes_per_s * cl.efficiency.hbm_efficiency
    launches_s = (
        len(shapes)
        * cast_kernels(framework, Precision.fp8, plan.fp8_recipe)
        * cl.scale.kernel_overhead_us
        * 1e-6
    )
    assert cast_kernels(framework, Precision.fp8, plan.fp8_recipe) == {"fsdp2": 4, "megatron": 1}[framework]
    assert fp8.memory_fwd_s - bf16.memory_fwd_s == pytest.approx(fwd_b / hbm + launches_s, rel=1e-9)

    def gemm_bwd_s(precision: Precision) -> float:
        return sum(GemmRates.of(cl, precision).fwd_bwd(m, n, k)[1] for m, n, k in shapes)

    # the backward: FP8 GEMMs (faster) plus the output gradients' casts; attention and the 16-bit traffic unchanged
    expected = gemm_bwd_s(Precision.fp8) - gemm_bwd_s(Precision.bf16) + bwd_b / hbm + launches_s
    assert fp8.bwd_s - bf16.bwd_s == pytest.approx(expected, rel=1e-9)


def test_eager_cross_entropy_moves_48_bytes_a_logit_and_a_fused_one_6() -> None:
    """The loss over the vocabulary is memory-bound. Eager PyTorch (and Megatron's default vocab-parallel loss)
    works in fp32: cast 2 + 4, log-softmax's three row reads and its write 16, the NLL backward's zero-filled
    gradient 4, the log-softmax backward's three reads and a write 16, the cast back 4 + 2 = 48 B a logit; a fused
    kernel reads the 16-bit logits and writes their gradient in place, 6 B. Llama 3.1 8B, one 8,192-token
    sequence, TP 1, H100 SXM (3.35 TB/s × HBM efficiency η): the eager loss costs
    42 × 8,192 × 128,256 B = 44.1 GB more, 15.5 ms at η = 0.85, split evenly between forward and backward."""
    arch = CATALOG.architecture("llama3.1-8b")
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=8)
    plan = Plan(dp=8, micro_batch=1, global_batch=8, seq_len=8192, framework="fsdp2")
    rate = cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency
    eager = head_times(arch, plan.model_copy(update={"fused_loss": False}), cluster)
    fused = head_times(arch, plan.model_copy(update={"fused_loss": True}), cluster)
    extra = 42 * 8192 * 128_256 / rate
    assert sum(eager) - sum(fused) == pytest.approx(extra, rel=1e-9)
    assert eager[0] - fused[0] == pytest.approx(extra / 2, rel=1e-9)
    assert 42 * 8192 * 128_256 == 44_128_272_384
    assert extra == pytest.approx(0.0155, rel=0.01)


def test_eager_z_loss_moves_60_more_bytes_a_logit_and_a_fused_one_none() -> None:
    """The z-loss (PaLM's (log Σ exp logits)², OLMo's z_loss_multiplier) in eager PyTorch runs logsumexp on the fp32
    logits — amax reads 4, the subtraction reads 4 and writes 4, exp_ reads 4 and writes 4, the sum reads 4 (24 B) —
    and its backward grad · (self − result).exp() as three element-wise kernels (24 B); autograd adds that gradient
    to the cross-entropy's (read 4 + 4, write 4): 60 B a logit. A fused or compiled loss has the log-sum-exp
    already: nothing more. OLMo 1B (vocabulary 100,352) at 4 × 4,096 tokens on an H100 SXM: 60 × 16,384 × 100,352 B
    = 98.7 GB more, 34.6 ms at η = 0.85, split evenly between forward and backward."""
    arch = CATALOG.architecture("llama3.1-8b").model_copy(update={"vocab_size": 100_352})
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=8)
    plan = Plan(dp=8, micro_batch=4, global_batch=32, seq_len=4096, framework="fsdp2")
    rate = cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency
    extra = 60 * 16_384 * 100_352 / rate
    eager = plan.model_copy(update={"fused_loss": False})
    with_z, without_z = (
        head_times(arch, eager.model_copy(update={"z_loss": z}), cluster) for z in (True, False)
    )
    assert sum(with_z) - sum(without_z) == pytest.approx(extra, rel=1e-9)
    assert with_z[0] - without_z[0] == pytest.approx(extra / 2, rel=1e-9)
    assert 60 * 16_384 * 100_352 == 98_650_030_080
    assert extra == pytest.approx(98_650_030_080 / (3.35e12 * cluster.efficiency.hbm_efficiency), rel=0.01)
    fused = plan.model_copy(update={"fused_loss": True})
    assert head_times(arch, fused.model_copy(update={"z_loss": True}), cluster) == head_times(
        arch, fused, cluster
    )
    liger = eager.model_copy(update={"fused_cross_entropy": True})  # Liger's kernel computes it in its pass
    assert head_times(arch, liger.model_copy(update={"z_loss": True}), cluster) == head_times(
        arch, liger, cluster
    )
