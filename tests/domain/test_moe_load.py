"""The busiest expert-parallel rank's load under random top-k routing (app/domain/estimator/moe_load.py), checked
against a simulation of the routing itself and against hand-worked figures; and that the estimate uses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.moe_load import expected_max_standard_normal, expert_load_factor
from app.domain.estimator.plan import Framework, Plan, Sharding
from app.domain.estimator.xp import SCALAR

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")


def _simulated_factor(tokens: int, k: int, experts: int, ep: int, trials: int, seed: int = 0) -> float:
    """E[busiest rank's slots] / mean: every token of the EP group picks k distinct experts uniformly at random;
    rank r holds experts r·E/ep … (r+1)·E/ep − 1."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        choice = rng.random((tokens * ep, experts)).argsort(axis=1)[:, :k]
        per_rank = np.bincount(choice.ravel(), minlength=experts).reshape(ep, experts // ep).sum(axis=1)
        out.append(per_rank.max() / (tokens * k))
    return float(np.mean(out))


@pytest.mark.parametrize(
    ("tokens", "k", "experts", "ep"),
    [(4096, 2, 8, 8), (1024, 2, 8, 4), (512, 8, 64, 16), (256, 8, 256, 64)],
)
def test_load_factor_matches_a_simulation_of_the_routing(tokens: int, k: int, experts: int, ep: int) -> None:
    """The excess over the mean (1–5 %) within 15 % of what 150 simulated routings give."""
    simulated = _simulated_factor(tokens, k, experts, ep, trials=150)
    model = expert_load_factor(SCALAR, tokens * k, ep, experts, k)
    assert model - 1 == pytest.approx(simulated - 1, rel=0.15)


def test_load_factor_hand_worked_and_limits() -> None:
    """Mixtral 8×7B, 4,096 tokens a rank, EP 8: S = 8,192, spread (1 − 1/8)·(8 − 2)/(8 − 1) = 0.75, z(8) = 1.435
    (E[max of 8 standard normals] is 1.4236) → 1 + 1.435·√(0.75/8192) = 1.0137. One rank holding every expert,
    or every expert chosen (k = E), has no imbalance; numpy arrays give the scalar figures."""
    assert expected_max_standard_normal(SCALAR, 8) == pytest.approx(1.4236, abs=0.015)
    assert expected_max_standard_normal(SCALAR, 1) == pytest.approx(0.0, abs=1e-3)
    assert expert_load_factor(SCALAR, 8192, 8, 8, 2) == pytest.approx(1.0137, abs=2e-4)
    assert expert_load_factor(SCALAR, 8192, 1, 8, 2) == 1.0
    assert expert_load_factor(SCALAR, 8192, 8, 8, 8) == 1.0
    vec = expert_load_factor(np, np.array([8192.0, 8192.0]), np.array([1, 8]), 8, 2)
    assert vec.tolist() == pytest.approx([1.0, expert_load_factor(SCALAR, 8192, 8, 8, 2)])


def test_expert_parallel_plans_run_at_the_busiest_ranks_load() -> None:
    """Mixtral 8×7B on 64 H100 with EP 8: the step's all-to-all and expert compute grow by the load factor, so the
    step is slower than with every rank at the mean; without EP nothing changes."""
    arch = CATALOG.architecture("mixtral-8x7b")
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=64)
    plan = Plan(tp=1, pp=1, dp=64, ep=8, micro_batch=1, global_batch=64, seq_len=4096,
                framework=Framework.megatron, sharding=Sharding.megatron_distopt)  # fmt: skip
    est = estimate(arch, cluster, plan)
    assert est.step.ep_exposed_s > 0
    factor = expert_load_factor(SCALAR, 4096 * 2, 8, 8, 2)
    assert 1.005 < factor < 1.03
    from app.domain.estimator import moe_load

    original = moe_load.expert_load_factor
    try:  # the same plan with every rank at the mean load
        import app.domain.estimator.compute as compute
        import app.domain.estimator.evaluate as evaluate

        compute.expert_load_factor = evaluate.expert_load_factor = lambda xp, *a: 1.0  # type: ignore[assignment]
        balanced = estimate(arch, cluster, plan)
    finally:
        compute.expert_load_factor = evaluate.expert_load_factor = original  # type: ignore[assignment]
    # the all-to-all's bytes grow by the factor (its per-step latency does not)
    assert balanced.step.ep_exposed_s < est.step.ep_exposed_s <= balanced.step.ep_exposed_s * factor
    assert est.step.compute_s > balanced.step.compute_s


def test_capacity_factor_caps_or_pads_the_load() -> None:
    """Dropping caps the busiest rank at the factor (min with the statistical load); padding makes every expert's
    input exactly the capacity; no factor leaves the statistical load."""
    from app.domain.estimator.moe_load import capped_load_factor

    assert capped_load_factor(SCALAR, 1.0137, 0.0, False) == 1.0137
    assert capped_load_factor(SCALAR, 1.0137, 1.25, False) == 1.0137  # the cap is above the busiest rank
    assert capped_load_factor(SCALAR, 1.0137, 0.8, False) == 0.8  # a fifth of the tokens dropped
    assert capped_load_factor(SCALAR, 1.0137, 1.25, True) == 1.25
    assert capped_load_factor(SCALAR, 1.0137, 0.8, True) == 0.8
    vec = capped_load_factor(
        np, np.array([1.0137, 1.0137, 1.0137]), np.array([0.0, 1.25, 1.25]), np.array([0, 0, 1])
    )
    assert vec.tolist() == pytest.approx([1.0137, 1.0137, 1.25])


def _mixtral(**kw) -> tuple:
    arch = CATALOG.architecture("mixtral-8x7b")
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=64)
    base = dict(dp=64, ep=8, micro_batch=1, global_batch=256, seq_len=4096, framework=Framework.megatron,
                sharding=Sharding.megatron_distopt)  # fmt: skip
    return arch, cluster, Plan(**(base | kw))


def test_padding_to_capacity_costs_what_the_capacity_carries_and_dropping_saves() -> None:
    """Mixtral 8×7B on 64 H100, EP 8: padded to capacity 1.25 every expert GEMM and all-to-all carries 1.25× the
    mean instead of the dropless busiest rank's 1.0137×, so the step is slower; capacity 0.8 drops a fifth of the
    routed tokens and is faster; capacity 1.25 without padding leaves the dropless plan as it was (the cap is above
    the busiest rank). The estimate names the load it used."""
    arch, cluster, dropless = _mixtral()
    padded = _mixtral(moe_capacity_factor=1.25, moe_pad_to_capacity=True)[2]
    base = estimate(arch, cluster, dropless)
    pad = estimate(arch, cluster, padded)
    drop = estimate(arch, cluster, _mixtral(moe_capacity_factor=0.8)[2])
    loose = estimate(arch, cluster, _mixtral(moe_capacity_factor=1.25)[2])
    assert pad.step_time_s > base.step_time_s > drop.step_time_s
    assert loose.step_time_s == pytest.approx(base.step_time_s, rel=1e-12)
    assert base.step.ep_exposed_s < pad.step.ep_exposed_s <= base.step.ep_exposed_s * 1.25 / 1.0137 + 1e-9
    loads = {a.name: a.value for a in pad.assumptions}
    assert loads["MoE load of the busiest expert-parallel rank"] == 1.25
    assert {a.name: a.value for a in base.assumptions}[
        "MoE load of the busiest expert-parallel rank"
    ] == 1.0137


def test_capacity_rules_and_what_each_framework_runs() -> None:
    """Padding needs a capacity factor (Megatron-Core's own check) and a capacity factor needs experts; torchtitan's
    MoE is dropless, and Megatron's DeepEP backend cannot pad; the Megatron export writes both flags, DeepSpeed's
    says where its MoE layer takes them."""
    from app.domain.estimator.capabilities import capability_violations
    from app.domain.estimator.estimate import InvalidPlan
    from app.domain.estimator.plan import MoeDispatcher
    from app.domain.export.deepspeed import deepspeed_config
    from app.domain.export.document import build_plan_document
    from app.domain.export.megatron import megatron_arg_pairs

    arch, cluster, _ = _mixtral()
    with pytest.raises(InvalidPlan) as err:
        estimate(arch, cluster, _mixtral(moe_pad_to_capacity=True)[2])
    assert {v.code for v in err.value.violations} >= {"moe-pad-without-capacity"}
    dense = CATALOG.architecture("llama3.1-8b")
    with pytest.raises(InvalidPlan) as err:
        estimate(dense, cluster, _mixtral(ep=1, moe_capacity_factor=1.25)[2])
    assert "moe-capacity-dense-model" in {v.code for v in err.value.violations}
    titan = _mixtral(framework=Framework.fsdp2, sharding=Sharding.fsdp_full, moe_capacity_factor=1.25)[2]
    assert "torchtitan-moe-capacity" in {v.code for v in capability_violations(titan)}
    deepep = _mixtral(
        moe_dispatcher=MoeDispatcher.deepep, moe_capacity_factor=1.25, moe_pad_to_capacity=True
    )[2]
    assert "megatron-pad-deepep" in {v.code for v in capability_violations(deepep)}
    padded = _mixtral(moe_capacity_factor=1.25, moe_pad_to_capacity=True)[2]
    assert capability_violations(padded) == []
    doc = build_plan_document(arch=arch, node=cluster.node, fabric=cluster.scale_out_fabric,
                              estimate=estimate(arch, cluster, padded), preset="mixtral-8x7b", hf_config=None)  # fmt: skip
    flags = dict(megatron_arg_pairs(doc)[0])
    assert flags["--moe-expert-capacity-factor"] == "1.25" and "--moe-pad-expert-input-to-capacity" in flags
    ds = _mixtral(framework=Framework.deepspeed, sharding=Sharding.zero1, moe_capacity_factor=1.25)[2]
    ds_doc = build_plan_document(arch=arch, node=cluster.node, fabric=cluster.scale_out_fabric,
                                 estimate=estimate(arch, cluster, ds), preset="mixtral-8x7b", hf_config=None)  # fmt: skip
    notes = deepspeed_config(ds_doc)[1]
    assert any("capacity_factor=1.25, drop_tokens=True" in n for n in notes)


def test_search_applies_the_capacity_factor_as_the_estimator_does() -> None:
    """A search with a capacity factor and padding gives each plan the step time its estimate gives."""
    from app.domain.search.engine import evaluate_all
    from app.domain.search.spec import SearchSpec

    small = CATALOG.architecture("mixtral-8x7b").model_copy(
        update=dict(slug="small-moe", n_layers=4, hidden_size=512, n_heads=8, n_kv_heads=2, head_dim=64,
                    ffn_hidden_size=1024, expert_ffn_hidden_size=1024, vocab_size=8000)
    )  # fmt: skip
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=32)
    spec = SearchSpec(gpus=(32,), global_batches=(64,), seq_len=1024, framework=Framework.megatron,
                      micro_batches=(1, 2), vpps=(1,), cps=(1,), max_pp=2,
                      moe_capacity_factor=1.25, moe_pad_to_capacity=True)  # fmt: skip
    cands = evaluate_all(small, cluster, spec, 32, 64)
    assert any(c.plan.ep > 1 for c in cands)
    for cand in cands:
        assert cand.plan.moe_capacity_factor == 1.25 and cand.plan.moe_pad_to_capacity
        est = estimate(small, cluster, cand.plan, allow_tp_across_nodes=True)
        assert cand.tokens_per_s == pytest.approx(est.tokens_per_s, rel=1e-9), cand.plan
