"""Plan validation explains each violation with a fix; layers fall on pipeline ranks as documented."""

from __future__ import annotations

import pytest

from app.domain.estimator.pipeline import chunk_layer_counts, inflight_microbatches, rank_counts, rank_layers
from app.domain.estimator.plan import Framework, Plan, Sharding, plan_violations

LLAMA70 = dict(n_layers=80, n_heads=64, n_kv_heads=8, n_experts=0)
H100_NODE = dict(gpus_per_node=8, nvlink_domain_size=8)


def codes(plan: Plan, gpus: int, **arch) -> set[str]:
    return {v.code for v in plan_violations(plan, gpus=gpus, **{**LLAMA70, **arch}, **H100_NODE)}


def test_valid_plan_has_no_violations() -> None:
    plan = Plan(
        tp=8,
        pp=4,
        dp=8,
        micro_batch=1,
        global_batch=512,
        seq_len=8192,
        framework=Framework.megatron,
        sharding=Sharding.megatron_distopt,
    )
    assert codes(plan, 256) == set()


def test_each_violation_names_field_and_fix() -> None:
    plan = Plan(tp=16, pp=1, dp=2, micro_batch=3, global_batch=100, seq_len=8191, cp=2)
    violations = plan_violations(plan, gpus=32, **LLAMA70, **H100_NODE)
    by_code = {v.code: v for v in violations}
    assert {"gpu-count", "tp-across-nodes", "batch-not-divisible", "seq-not-divisible"} <= set(by_code)
    assert by_code["gpu-count"].field == "dp" and "dp = 1" in by_code["gpu-count"].fix
    assert by_code["batch-not-divisible"].fix.startswith("use a global batch that is a multiple of 6")
    for v in violations:
        assert v.message and v.fix


def test_heads_not_divisible_by_tp() -> None:
    assert "heads-not-divisible" in codes(
        Plan(tp=3, dp=1, global_batch=1, seq_len=8), 3, n_heads=64, n_kv_heads=8
    )


def test_tp_across_nodes_allowed_when_asked() -> None:
    plan = Plan(tp=16, dp=1, global_batch=1, seq_len=8)
    assert not [
        v
        for v in plan_violations(plan, gpus=16, **LLAMA70, **H100_NODE, allow_tp_across_nodes=True)
        if v.code == "tp-across-nodes"
    ]


def test_framework_sharding_mismatch() -> None:
    plan = Plan(dp=8, global_batch=8, seq_len=8, framework=Framework.deepspeed, sharding=Sharding.fsdp_full)
    assert "framework-sharding" in codes(plan, 8)


def test_moe_expert_parallel_rules() -> None:
    plan = Plan(dp=8, ep=3, global_batch=8, seq_len=8)
    assert {"experts-not-divisible", "ep-not-in-dp"} <= codes(plan, 8, n_experts=8)
    assert "ep-dense-model" in codes(Plan(dp=8, ep=2, global_batch=8, seq_len=8), 8)


def test_uneven_layers_put_the_remainder_in_the_middle() -> None:
    """Llama 3 405B: 126 layers over 16 stages → 8 per stage, the first and last get 7."""
    counts = chunk_layer_counts(126, 16)
    assert sum(counts) == 126
    assert counts[0] == counts[-1] == 7
    assert max(counts) == 8


def test_inflight_microbatches_1f1b_and_interleaved() -> None:
    # 1F1B: first stage holds pp micro-batches, the last one, capped by m
    assert inflight_microbatches(0, 8, 1, 64) == 8
    assert inflight_microbatches(7, 8, 1, 64) == 1
    assert inflight_microbatches(0, 8, 1, 4) == 4
    # interleaved, rank 0: pp·(1 + (pp−1)/(pp·vpp)) = 8·(1 + 7/24) = 10.333…
    assert inflight_microbatches(0, 8, 3, 64) == pytest.approx(8 * (1 + 7 / 24))
    assert inflight_microbatches(0, 1, 1, 64) == 1


def test_rank_counts_are_rank_layers_without_the_lists(catalog) -> None:
    """The search's per-rank layer counts (prefix sums) equal the estimator's rank lists, rank by rank, for every
    architecture (dense, MoE with leading dense layers) and pipeline with at least one layer per chunk."""
    for arch in catalog.architectures:
        for pp in (1, 2, 3, 4, 5, 7, 8, 16, 32):
            for vpp in (1, 2, 3, 4):
                if pp * vpp > arch.n_layers:
                    continue
                expected = tuple(
                    (r.rank, r.dense_layers, r.moe_layers, r.first, r.last)
                    for r in rank_layers(arch, pp, vpp)
                )
                assert rank_counts(arch, pp, vpp) == expected, (arch.slug, pp, vpp)
