"""The vectorised search agrees with the scalar estimator plan by plan, and finds what brute force finds."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.compute import model_flops_per_token
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.plan import Framework, Offload, Recompute, Sharding
from app.domain.model.counts import parameter_counts
from app.domain.search.engine import evaluate_all, explain, search
from app.domain.search.spec import Objective, SearchSpec, SearchTooLarge

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")
SMALL = CATALOG.architecture("llama3.1-8b").model_copy(
    update=dict(slug="small-llama", n_layers=6, hidden_size=1024, n_heads=16, n_kv_heads=4, head_dim=64,
                ffn_hidden_size=2816, vocab_size=32000)
)  # fmt: skip
SMALL_MOE = CATALOG.architecture("mixtral-8x7b").model_copy(
    update=dict(slug="small-moe", n_layers=4, hidden_size=512, n_heads=8, n_kv_heads=2, head_dim=64,
                ffn_hidden_size=1024, expert_ffn_hidden_size=1024, vocab_size=8000)
)  # fmt: skip


def cluster(gpus: int, accelerator: str = "h100-sxm"):
    return build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator=accelerator, gpus=gpus)


def flops(arch, seq: int) -> float:
    return model_flops_per_token(arch, seq, parameter_counts(arch).matmul_weights_active).total


CASES = [
    (SMALL, 16, Framework.fsdp2, 32, 2048),
    (SMALL, 16, Framework.megatron, 32, 2048),
    (SMALL, 16, Framework.deepspeed, 32, 1024),
    (SMALL_MOE, 16, Framework.megatron, 32, 1024),
]
KERNEL_SETTINGS = [
    {},
    {"attention_kernel": "fa3", "fused_cross_entropy": True},
    {"grad_reduce_bf16": True, "fused_swiglu": True},
    {"z_loss": True, "fused_kernels": False},  # an eager loss with the z-loss's passes over the logits
    {"fsdp_flat_params": True},  # FSDP1's flat parameters: no FSDP2 copy-out
    {"tp_comm_overlap": False},  # Megatron without --tp-comm-overlap
    {"tp_comm_overlap": True, "fused_kernels": True},  # torchtitan's async TP
    {"repeat_kv": True},  # torchtitan before 2026-01: the CP ring moves repeated K/V
    {"zero_init": False},  # DeepSpeed ZeRO-3 on a model built whole: the start-up copy
    {"precision": "fp8"},  # FP8 GEMMs and their casts (torchao for FSDP2, Transformer Engine otherwise)
]


@pytest.mark.parametrize("settings", KERNEL_SETTINGS)
@pytest.mark.parametrize(("arch", "gpus", "framework", "batch", "seq"), CASES)
def test_every_plan_matches_the_scalar_estimator(arch, gpus, framework, batch, seq, settings) -> None:
    spec = SearchSpec(gpus=(gpus,), global_batches=(batch,), seq_len=seq, framework=framework,
                      micro_batches=(1, 2), vpps=(1, 2), cps=(1, 2), max_pp=4, **settings)  # fmt: skip
    cands = evaluate_all(arch, cluster(gpus), spec, gpus, batch)
    assert len(cands) > 20
    for cand in cands:
        for field, value in settings.items():
            assert getattr(cand.plan, field) == value
        est = estimate(arch, cluster(gpus), cand.plan, allow_tp_across_nodes=True)
        assert cand.tokens_per_s == pytest.approx(est.tokens_per_s, rel=1e-9), cand.plan
        assert cand.peak_memory_bytes == pytest.approx(est.peak_memory_bytes, abs=2), cand.plan


def test_search_finds_what_brute_force_finds() -> None:
    gpus, batch, seq = 16, 32, 2048
    spec = SearchSpec(gpus=(gpus,), global_batches=(batch,), seq_len=seq, framework=Framework.megatron,
                      micro_batches=(1, 2, 4), vpps=(1, 2), cps=(1,), max_pp=4, top_k=5)  # fmt: skip
    result = search(SMALL, {gpus: cluster(gpus)}, spec, flops(SMALL, seq))
    brute = []
    for cand in evaluate_all(SMALL, cluster(gpus), spec, gpus, batch):
        est = estimate(SMALL, cluster(gpus), cand.plan, allow_tp_across_nodes=True)
        if est.fits:
            brute.append(est.tokens_per_s)
    assert result.plans[0].tokens_per_s == pytest.approx(max(brute), rel=1e-9)
    assert [round(p.tokens_per_s, 3) for p in result.plans] == [
        round(t, 3) for t in sorted(brute, reverse=True)[:5]
    ]
    assert result.best is not None and result.best.tokens_per_s == pytest.approx(max(brute), rel=1e-9)


def test_gpt3_article_plan_is_in_the_space_and_the_best_is_explained() -> None:
    """gpt3-175b on 768 × a100-80gb, seq 2048, global batch 1536: the article's TP=8, PP=8, DP=12 is one of
    the evaluated plans; the winner beats or equals it and the explanation names the trade-off."""
    arch = CATALOG.architecture("gpt3-175b")
    spec = SearchSpec(gpus=(768,), global_batches=(1536,), seq_len=2048, framework=Framework.megatron,
                      flash_attention=False)  # fmt: skip
    cands = evaluate_all(arch, cluster(768, "a100-80gb"), spec, 768, 1536)
    article = [c for c in cands if (c.plan.tp, c.plan.pp, c.plan.dp, c.plan.vpp, c.plan.micro_batch) == (8, 8, 12, 1, 1)
               and c.plan.sharding is Sharding.ddp and c.plan.recompute is Recompute.full
               and c.plan.offload is Offload.none]  # fmt: skip
    assert len(article) == 1
    result = search(arch, {768: cluster(768, "a100-80gb")}, spec, flops(arch, 2048))
    assert result.plans[0].tokens_per_s >= article[0].tokens_per_s
    assert "tokens/s" in result.explanation and "GiB headroom" in result.explanation
    assert result.evaluated_plans > 1000


def test_nothing_fits_says_what_to_relax() -> None:
    arch = CATALOG.architecture("llama3.1-405b")
    spec = SearchSpec(gpus=(8,), global_batches=(8,), seq_len=8192, framework=Framework.fsdp2)
    result = search(arch, {8: cluster(8)}, spec, flops(arch, 8192))
    assert result.plans == ()
    assert result.message and "does not fit" in result.message and "more GPUs" in result.message
    assert any(k.startswith("does not fit by ≥ 40 GiB") for k in result.rejected)


def test_rejected_reasons_include_heads() -> None:
    spec = SearchSpec(gpus=(12,), global_batches=(24,), seq_len=1024, max_tp=12, allow_tp_across_nodes=True)
    result = search(SMALL, {12: cluster(12)}, spec, flops(SMALL, 1024))
    assert result.rejected.get("attention heads not divisible by tp", 0) > 0


def test_space_too_large_is_refused_with_advice() -> None:
    spec = SearchSpec(gpus=(16,), global_batches=(32,), seq_len=2048, max_plans=10)
    with pytest.raises(SearchTooLarge, match="narrow it"):
        search(SMALL, {16: cluster(16)}, spec, flops(SMALL, 2048))


def test_deadline_picks_the_smallest_cluster_that_meets_it() -> None:
    spec = SearchSpec(gpus=(8, 16, 32), global_batches=(64,), seq_len=2048, tokens_to_train=2e10,
                      deadline_days=30, micro_batches=(1, 2), vpps=(1,), cps=(1,))  # fmt: skip
    clusters = {g: cluster(g) for g in spec.gpus}
    result = search(SMALL, clusters, spec, flops(SMALL, 2048))
    assert result.plans[0].gpus == 8
    tight = spec.model_copy(update={"deadline_days": result.plans[0].time_to_train_days * 0.6})
    result2 = search(SMALL, clusters, tight, flops(SMALL, 2048))
    assert result2.plans[0].gpus > 8
    assert result2.rejected.get("misses the deadline", 0) > 0


def test_min_cost_objective_prefers_fewer_gpus_per_token() -> None:
    spec = SearchSpec(gpus=(8, 32), global_batches=(64,), seq_len=2048, objective=Objective.min_cost,
                      usd_per_gpu_hour=2.0, micro_batches=(1, 2), vpps=(1,), cps=(1,))  # fmt: skip
    result = search(SMALL, {g: cluster(g) for g in spec.gpus}, spec, flops(SMALL, 2048))
    costs = [p.usd_per_million_tokens for p in result.plans]
    assert costs == sorted(costs)


def test_explain_names_the_changes() -> None:
    spec = SearchSpec(
        gpus=(16,), global_batches=(32,), seq_len=2048, micro_batches=(1, 2), vpps=(1,), cps=(1,)
    )
    result = search(SMALL, {16: cluster(16)}, spec, flops(SMALL, 2048))
    assert result.explanation == explain(list(result.plans))
    assert "→" in result.explanation


def test_per_op_selective_recompute_is_torchtitans_alone() -> None:
    """selective-op (torchtitan's per-op SAC) is searched for FSDP2 only; Megatron and DeepSpeed plans that ask
    for it are refused by the capability table with the nearest plan they run (attention-core selective)."""
    from app.domain.estimator.estimate import InvalidPlan
    from app.domain.estimator.plan import Plan

    arch = CATALOG.architecture("llama3.1-8b")
    seq = 8192
    for framework in (Framework.megatron, Framework.deepspeed, Framework.fsdp2):
        spec = SearchSpec(gpus=(16,), global_batches=(32,), seq_len=seq, framework=framework, max_pp=2)
        found = {c.plan.recompute for c in evaluate_all(arch, cluster(16), spec, 16, 32)}
        assert (Recompute.selective_op in found) == (framework is Framework.fsdp2), framework
    plan = Plan(dp=8, global_batch=16, micro_batch=2, seq_len=seq, recompute=Recompute.selective_op,
                framework=Framework.megatron, sharding=Sharding.megatron_distopt)  # fmt: skip
    with pytest.raises(InvalidPlan, match="per-op selective"):
        estimate(arch, cluster(8), plan)
    fsdp = plan.model_copy(update={"framework": Framework.fsdp2, "sharding": Sharding.fsdp_full})
    est = estimate(arch, cluster(8), fsdp)
    none = estimate(arch, cluster(8), fsdp.model_copy(update={"recompute": Recompute.none}))
    assert est.peak_memory_bytes < none.peak_memory_bytes and est.step_time_s > none.step_time_s
