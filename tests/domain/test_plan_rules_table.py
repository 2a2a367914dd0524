"""The plan rules are one table (app.domain.estimator.rules), evaluated on one plan by plan validation and on the
whole grid by the search's masks; the two must agree in both directions:

* grid → plan: points drawn from the search's own grid (dense GQA, MoE, tied embeddings; FSDP2, Megatron-LM,
  DeepSpeed) — a point the masks accept passes ``plan_violations``, a point they reject fails it with exactly the
  codes of the rules whose masks hold there;
* plan → arrays: random plans (with fields the grid never varies) stacked into arrays give, rule by rule, the
  answer each plan gets alone;
* each rule has a hand-made plan that breaks it, and the search's masks are the table's rules, in its order.

A rule added to one side only (an ``if`` in plan validation, a mask in search.space) breaks these tests.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.estimate import InvalidPlan, build_cluster, estimate
from app.domain.estimator.plan import (
    CPCommType,
    Fp8Recipe,
    Framework,
    MoeDispatcher,
    Offload,
    Optimizer,
    Plan,
    Precision,
    Recompute,
    Sharding,
    plan_violations,
)
from app.domain.estimator.rules import (
    Context,
    broken,
    facts,
    plan_facts,
    rule_masks,
    rules_for,
    structural_reasons,
    table,
)
from app.domain.search.engine import _scalar_plan, search
from app.domain.search.space import SAME_LAYOUT, _grid, _reject_masks
from app.domain.search.spec import OFFLOADS, RECOMPUTES, SHARDINGS, SearchSpec

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")


def _cluster(gpus: int):
    return build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=gpus)


def _violations(plan: Plan, arch, cluster, spec: SearchSpec):
    return plan_violations(
        plan, n_layers=arch.n_layers, n_heads=arch.n_heads, n_kv_heads=arch.n_kv_heads, n_experts=arch.n_experts,
        gpus=cluster.gpus, gpus_per_node=cluster.gpus_per_node, nvlink_domain_size=cluster.nvlink_domain,
        allow_tp_across_nodes=spec.allow_tp_across_nodes, tied_embeddings=arch.tied_embeddings,
    )  # fmt: skip


def _violations_in(plan: Plan, context: Context) -> list:
    """``plan_violations`` with every field of a rules Context (what the table reads)."""
    return plan_violations(
        plan, n_layers=context.n_layers, n_heads=context.n_heads, n_kv_heads=context.n_kv_heads,
        n_experts=context.n_experts, gpus=context.gpus, gpus_per_node=context.gpus_per_node,
        nvlink_domain_size=context.nvlink_domain, allow_tp_across_nodes=context.allow_tp_across_nodes,
        tied_embeddings=context.tied_embeddings, mla=context.mla,
    )  # fmt: skip


# -- grid → plan: the search's own points, both directions ------------------------------------------------------

# Wide axes on purpose: every sharding and offload (the framework does not offer them all), cp and vpp values
# that do not divide, a sequence of 4,098 tokens (cp 2 splits it into odd halves), tp beyond a node without
# allowing it, batches that micro-batch·dp does not divide, HSDP groups equal to dp.
WIDE = dict(
    shardings=tuple(Sharding), offloads=tuple(Offload), micro_batches=(1, 2, 3), vpps=(1, 2, 3),
    cps=(1, 2, 3, 4), recomputes=tuple(Recompute), max_tp=16,
)  # fmt: skip
GRID_CASES = [
    ("llama3.1-8b", 48, Framework.fsdp2, dict(seq_len=4098, hsdp_group=8), (96, 100)),
    ("llama3.1-70b", 64, Framework.megatron, dict(seq_len=4096, precision=Precision.fp16), (64,)),
    ("mixtral-8x7b", 64, Framework.deepspeed, dict(seq_len=4096, hsdp_group=16), (128,)),
    ("mixtral-8x22b", 48, Framework.fsdp2, dict(seq_len=4096, max_pp=8), (96,)),  # 48 heads, 8 KV heads
    ("deepseek-v3", 128, Framework.megatron, dict(seq_len=4096, max_pp=8, optimizer=Optimizer.sgd), (256,)),
    ("gpt3-175b", 96, Framework.megatron, dict(seq_len=2048, max_pp=8), (96,)),  # tied embeddings, 96 heads
    ("llama3.1-70b", 64, Framework.fsdp2, dict(seq_len=8192, hsdp_group=64, max_pp=4), (128,)),
    # MoE dispatch the framework cannot run (the search turns Megatron's overlap on only where it runs)
    ("mixtral-8x7b", 32, Framework.fsdp2, dict(seq_len=4096, moe_dispatcher=MoeDispatcher.deepep), (64,)),
    ("mixtral-8x7b", 32, Framework.deepspeed, dict(seq_len=4096, moe_a2a_overlap=True), (64,)),
    # TP communication overlap asked where the framework cannot run it (uncompiled torchtitan, DeepSpeed)
    ("llama3.1-8b", 16, Framework.fsdp2, dict(seq_len=4096, tp_comm_overlap=True), (32,)),
    ("llama3.1-8b", 16, Framework.deepspeed, dict(seq_len=4096, tp_comm_overlap=True), (32,)),
    # multi-token prediction asked where capplan models it for Megatron only
    ("deepseek-v3", 64, Framework.fsdp2, dict(seq_len=4096, mtp_layers=1, max_pp=4), (128,)),
    ("mixtral-8x7b", 32, Framework.deepspeed, dict(seq_len=4096, mtp_layers=1), (64,)),
]
PER_RULE = 6  # sampled points charged to each rule (first failing), besides random accepted and rejected ones


def _sample(first: np.ndarray, n_rules: int, rng: np.random.Generator) -> np.ndarray:
    """Points of every first-failing rule (up to PER_RULE each) and up to 150 accepted ones."""
    picks = []
    for k in range(n_rules + 1):  # n_rules: accepted
        where = np.flatnonzero(first == k)
        picks.append(
            rng.choice(where, size=min(where.size, 150 if k == n_rules else PER_RULE), replace=False)
        )
    return np.concatenate(picks)


@pytest.mark.parametrize(("model", "gpus", "framework", "settings", "batches"), GRID_CASES)
def test_grid_masks_and_plan_validation_agree(model, gpus, framework, settings, batches) -> None:
    arch, cluster = CATALOG.architecture(model), _cluster(gpus)
    spec = SearchSpec(gpus=(gpus,), global_batches=batches, framework=framework, **{**WIDE, **settings})
    rules = rules_for(framework)
    rng = np.random.default_rng(13)
    seen_first: set[str] = set()
    for batch in batches:
        grid = _grid(arch, cluster, spec, gpus, batch)
        same_layout, *masks = _reject_masks(arch, cluster, spec, gpus, batch, grid.axes)
        assert same_layout[0] == SAME_LAYOUT  # a folded layout at tp 1: the same plan twice, not a rule
        assert [reason for reason, _ in masks] == [r.reason for r in rules]  # the masks ARE the table
        failing = np.stack([np.broadcast_to(m, grid.shape).ravel() for _, m in masks])  # (rule, point)
        first = np.where(failing.any(axis=0), failing.argmax(axis=0), len(rules))
        seen_first |= {rules[k].name for k in np.unique(first) if k < len(rules)}
        cols = grid.cols
        group = spec.hsdp_group or cluster.gpus_per_node
        for i in _sample(first, len(rules), rng):
            tp, cp, pp = (int(cols[k][i]) for k in ("tp", "cp", "pp"))
            dp = gpus // (tp * cp * pp)
            sharding = SHARDINGS[cols["sh"][i]]
            plan = _scalar_plan(
                spec, tp=tp, pp=pp, vpp=int(cols["vpp"][i]), dp=dp, cp=cp, ep=int(cols["ep"][i]), sharding=sharding,
                offload=OFFLOADS[cols["off"][i]], micro_batch=int(cols["mb"][i]), batch=batch,
                recompute=RECOMPUTES[cols["rc"][i]],
                shard_group_size=min(group, dp) if sharding is Sharding.fsdp_hybrid else None,
            )  # fmt: skip
            broken_here = [r for r, f in zip(rules, failing[:, i], strict=True) if f]
            plan_rules = {r.code for r in broken_here if not r.capability}
            expected = plan_rules or {r.code for r in broken_here if r.capability}
            found = {v.code for v in _violations(plan, arch, cluster, spec)}
            assert found == expected, (plan, [r.name for r in broken_here])
    # the sample reached the rules this grid can break (each case is built to break several)
    assert len(seen_first) >= 5, seen_first


def test_the_grid_cases_reach_every_rule_the_search_can_lay_out() -> None:
    """Across the cases, every rule is some grid point's first failing rule, except those whose plans the
    grid never lays out: tp·cp·pp always divides the GPUs, pp never exceeds the layers, ep divides the experts
    and is 1 on dense models; recompute_layers, sequence parallelism and the HSDP group are the search's own
    choices; Megatron-LM and DeepSpeed are not offered per-op selective recompute; the search never names
    Megatron's recompute modules; it turns Megatron's
    all-to-all overlap on only where Megatron runs it (the cases reach one dispatcher and one overlap refusal);
    it always runs TP with sequence parallelism, which Megatron's TP overlap needs; the MoE capacity settings are
    the user's, kept fixed (the cases set none); the experts' tensor-parallel degree is the framework's default or, folded
    (Megatron), 1 — which divides tp, and the search always runs TP with sequence parallelism — so no expert_tp rule
    fires on its grid; the search lays out no pipeline layout string (it splits evenly), so no layout rule fires; FP8
    attention and the FP8 recipe are the user's, kept fixed (the cases ask for neither), and so is the CP exchange
    (the cases keep the ring)."""
    never = {
        "gpu-count", "pp-exceeds-layers", "experts-not-divisible", "ep-dense-model", "recompute-layers-without-full",
        "recompute-layers-exceed-chunk", "sp-without-tp", "hsdp-group-missing", "hsdp-group-divides",
        "group-without-hsdp", "megatron-selective-op", "deepspeed-selective-op", "megatron-a2a-overlap",
        "deepspeed-moe-dispatcher", "fsdp2-a2a-overlap", "recompute-modules-without-selective",
        "mla-up-proj-without-mla", "moe-modules-dense-model",
        "fsdp2-recompute-modules", "deepspeed-recompute-modules", "megatron-tp-overlap-sp",
        "moe-pad-without-capacity", "moe-capacity-dense-model", "torchtitan-moe-capacity", "megatron-pad-deepep",
        "expert-tp-dense-model", "expert-tp-not-dividing-tp", "expert-tp-without-sp", "torchtitan-expert-tp",
        "deepspeed-expert-tp", "pipeline-layout", "fsdp2-pipeline-layout", "deepspeed-pipeline-layout",
        "fsdp2-nvfp4", "deepspeed-nvfp4", "fp8-attention-precision", "fsdp2-fp8-attention", "deepspeed-fp8-attention",
        "fp8-recipe-precision", "megatron-fp8-rowwise", "deepspeed-fp8-rowwise", "fsdp2-fp8-te-recipe",
        "fsdp2-cp-all-gather", "deepspeed-cp-all-gather",
    }  # fmt: skip
    reached: set[str] = set()
    for model, gpus, framework, settings, batches in GRID_CASES:
        arch, cluster = CATALOG.architecture(model), _cluster(gpus)
        spec = SearchSpec(gpus=(gpus,), global_batches=batches, framework=framework, **{**WIDE, **settings})
        rules = rules_for(framework)
        for batch in batches:
            grid = _grid(arch, cluster, spec, gpus, batch)
            alive = np.ones(grid.shape, dtype=bool)
            for rule, (_, mask) in zip(
                rules, _reject_masks(arch, cluster, spec, gpus, batch, grid.axes)[1:], strict=True
            ):
                if (alive & mask).any():
                    reached.add(rule.name)
                alive &= ~np.broadcast_to(mask, grid.shape)
    assert reached >= {r.name for r in table()} - never, {r.name for r in table()} - never - reached


# -- plan → arrays: random plans, alone and stacked ----------------------------------------------------------------

INPUTS = [p for p in inspect.signature(facts).parameters if p not in ("framework", "context")]


def _random_plan(rng: np.random.Generator, framework: Framework) -> Plan:
    pick = lambda values: values[rng.integers(len(values))]  # noqa: E731
    return Plan(
        tp=pick([1, 2, 3, 4, 8, 16]), pp=pick([1, 2, 3, 4, 40, 100]), vpp=pick([1, 2, 3]), dp=pick([1, 2, 3, 4, 6, 8]),
        cp=pick([1, 2, 3, 4]), ep=pick([1, 2, 3, 4, 8]), micro_batch=pick([1, 2, 3]), global_batch=pick([1, 4, 6, 8, 24, 96]),
        seq_len=pick([4096, 4098, 4097, 12]), sharding=pick(SHARDINGS), offload=pick(OFFLOADS),
        recompute=pick(RECOMPUTES), recompute_layers=pick([None, 0, 1, 5, 40]), shard_group_size=pick([None, 1, 2, 4, 8]),
        sequence_parallel=pick([False, True]), precision=pick([Precision.bf16, Precision.fp16, Precision.fp32]),
        optimizer=pick([Optimizer.adamw, Optimizer.sgd]), framework=framework,
        moe_dispatcher=pick(list(MoeDispatcher)), moe_a2a_overlap=pick([False, True]),
        tp_comm_overlap=pick([None, False, True]), fused_kernels=pick([None, False, True]),
        recompute_modules=pick([None, ("mlp",), ("core_attn", "moe_act"), ("mla_up_proj",)]),
        moe_capacity_factor=pick([None, 1.25]), moe_pad_to_capacity=pick([False, True]),
    )  # fmt: skip


CONTEXTS = [
    Context(gpus=64, n_layers=80, n_heads=64, n_kv_heads=8, n_experts=0, gpus_per_node=8, nvlink_domain=8),
    Context(gpus=48, n_layers=32, n_heads=32, n_kv_heads=8, n_experts=8, gpus_per_node=8, nvlink_domain=4,
            allow_tp_across_nodes=True, tied_embeddings=True, mla=True),
]  # fmt: skip


@pytest.mark.parametrize("framework", list(Framework))
@pytest.mark.parametrize("context", CONTEXTS)
def test_each_rule_answers_the_same_on_a_plan_and_on_arrays(framework, context) -> None:
    rng = np.random.default_rng(list(Framework).index(framework) * 1000 + context.gpus)
    plans = [_random_plan(rng, framework) for _ in range(600)]
    alone = [plan_facts(p, context) for p in plans]
    stacked = facts(
        **{k: np.array([getattr(f, k) for f in alone]) for k in INPUTS}, framework=framework, context=context
    )
    masks = rule_masks(stacked)
    assert len(masks) == len(rules_for(framework))
    for rule, (_, mask) in zip(rules_for(framework), masks, strict=True):
        one_by_one = np.array([bool(rule.refuses(f)) for f in alone])
        assert np.asarray(mask).dtype == bool, rule.name
        assert (np.broadcast_to(mask, one_by_one.shape) == one_by_one).all(), rule.name
    # and plan validation reports exactly the rules that break (the framework's only when the plan's pass)
    for plan, f in zip(plans[:200], alone[:200], strict=True):
        expected = {r.code for r in broken(f)} or {r.code for r in broken(f, capability=True)}
        found = _violations_in(plan, context)
        assert {v.code for v in found} == expected, plan


# -- each rule by hand -------------------------------------------------------------------------------------------

BASE_CONTEXT = dict(
    gpus=8, n_layers=80, n_heads=64, n_kv_heads=8, n_experts=0, gpus_per_node=8, nvlink_domain=8
)
BASE_PLAN = dict(dp=8, global_batch=8, seq_len=4096)
FSDP2, MEGATRON, DEEPSPEED = Framework.fsdp2, Framework.megatron, Framework.deepspeed
DISTOPT = dict(framework=MEGATRON, sharding=Sharding.megatron_distopt)
ZERO1 = dict(framework=DEEPSPEED, sharding=Sharding.zero1)

# rule name → (plan fields, context fields) of a plan that breaks it
CASES: dict[str, tuple[dict, dict]] = {
    "gpu-count": (dict(dp=4), {}),
    "heads-not-divisible": (dict(tp=3, dp=1, global_batch=1), dict(gpus=3)),
    "kv-heads-not-divisible": (dict(tp=4, dp=2), dict(n_heads=48, n_kv_heads=6)),
    "tp-across-nodes": (dict(tp=16, dp=1, global_batch=1), dict(gpus=16)),
    "pp-exceeds-layers": (dict(pp=8, dp=1), dict(n_layers=4)),
    "chunks-exceed-layers": (dict(pp=2, vpp=4, dp=4), dict(n_layers=6)),
    "vpp-without-pp": (dict(vpp=2), {}),
    "batch-not-divisible": (dict(global_batch=12), {}),
    "interleave-microbatches": (dict(pp=2, vpp=2, dp=4, global_batch=12), {}),
    "seq-not-divisible": (dict(cp=2, dp=4, seq_len=4095), {}),
    "cp-load-balance": (dict(cp=2, dp=4, seq_len=4098), {}),
    "recompute-layers-without-full": (dict(recompute_layers=2), {}),
    "recompute-layers-exceed-chunk": (dict(recompute=Recompute.full, recompute_layers=100), {}),
    "sp-without-tp": (dict(sequence_parallel=True), {}),
    "ep-dense-model": (dict(ep=2), {}),
    "experts-not-divisible": (dict(ep=3, dp=6, global_batch=6), dict(gpus=6, n_experts=8)),
    "ep-not-in-dp": (dict(ep=4, dp=6, global_batch=6), dict(gpus=6, n_experts=8)),
    "hsdp-group-missing": (dict(sharding=Sharding.fsdp_hybrid), {}),
    "hsdp-group-divides": (dict(sharding=Sharding.fsdp_hybrid, shard_group_size=3), {}),
    "hsdp-one-replica": (dict(sharding=Sharding.fsdp_hybrid, shard_group_size=8), {}),
    "group-without-hsdp": (dict(shard_group_size=4), {}),
    "framework-sharding": (dict(framework=DEEPSPEED, sharding=Sharding.fsdp_full), {}),
    "framework-offload-megatron": (dict(DISTOPT, offload=Offload.params_cpu), {}),
    "offload-needs-sharding": (dict(sharding=Sharding.ddp, offload=Offload.params_cpu), {}),
    "framework-offload-nvme": (dict(offload=Offload.nvme), {}),
    "megatron-selective-op": (dict(DISTOPT, recompute=Recompute.selective_op), {}),
    "deepspeed-selective-op": (dict(ZERO1, recompute=Recompute.selective_op), {}),
    "deepspeed-pp-zero": (dict(framework=DEEPSPEED, sharding=Sharding.zero2, pp=2, dp=4), {}),
    "deepspeed-interleaving": (dict(ZERO1, pp=2, vpp=2, dp=4), {}),
    "deepspeed-context-parallel": (dict(ZERO1, cp=2, dp=4), {}),
    "deepspeed-offload-stage0": (dict(framework=DEEPSPEED, sharding=Sharding.ddp, offload=Offload.optimizer_cpu), {}),
    "megatron-fsdp2-pp": (dict(framework=MEGATRON, pp=2, dp=4), {}),
    "megatron-fsdp2-ep": (dict(framework=MEGATRON, ep=2), dict(n_experts=8)),
    "megatron-fsdp2-fp16": (dict(framework=MEGATRON, precision=Precision.fp16), {}),
    "megatron-fsdp2-tied": (dict(framework=MEGATRON), dict(tied_embeddings=True)),
    "megatron-offload-distopt": (dict(framework=MEGATRON, sharding=Sharding.ddp, offload=Offload.optimizer_cpu), {}),
    "megatron-offload-adam": (dict(DISTOPT, offload=Offload.optimizer_cpu, optimizer=Optimizer.sgd), {}),
    "torchtitan-pp-microbatches": (dict(pp=2, dp=4, global_batch=4), {}),
    "torchtitan-seq-split": (dict(tp=2, dp=4, seq_len=4095), {}),
    "megatron-tp-overlap-sp": (dict(DISTOPT, tp=2, dp=4, tp_comm_overlap=True), {}),
    "torchtitan-async-tp-compile": (dict(tp=2, dp=4, sequence_parallel=True, tp_comm_overlap=True), {}),
    "deepspeed-tp-overlap": (dict(ZERO1, tp=2, dp=4, sequence_parallel=True, tp_comm_overlap=True), {}),
    "megatron-a2a-overlap": (dict(DISTOPT, ep=2, pp=2, dp=4, moe_a2a_overlap=True), dict(n_experts=8)),
    "fsdp2-moe-dispatcher": (dict(ep=2, moe_dispatcher=MoeDispatcher.deepep), dict(n_experts=8)),
    "deepspeed-moe-dispatcher": (dict(ZERO1, ep=2, moe_dispatcher=MoeDispatcher.hybridep), dict(n_experts=8)),
    "fsdp2-cp-all-gather": (dict(cp=2, dp=4, cp_comm_type=CPCommType.all_gather), {}),
    "deepspeed-cp-all-gather": (dict(ZERO1, cp=2, dp=4, cp_comm_type=CPCommType.all_gather), {}),
    "fsdp2-a2a-overlap": (dict(ep=2, moe_a2a_overlap=True), dict(n_experts=8)),
    "deepspeed-a2a-overlap": (dict(ZERO1, ep=2, moe_a2a_overlap=True), dict(n_experts=8)),
    "recompute-modules-without-selective": (dict(recompute=Recompute.full, recompute_modules=("mlp",)), {}),
    "mla-up-proj-without-mla": (dict(DISTOPT, recompute=Recompute.selective, recompute_modules=("mla_up_proj",)), {}),
    "moe-modules-dense-model": (dict(DISTOPT, recompute=Recompute.selective, recompute_modules=("moe_act",)), {}),
    "fsdp2-nvfp4": (dict(precision=Precision.nvfp4), {}),
    "deepspeed-nvfp4": (dict(ZERO1, precision=Precision.nvfp4), {}),
    "fp8-attention-precision": (dict(DISTOPT, fp8_attention=True), {}),
    "fsdp2-fp8-attention": (dict(precision=Precision.fp8, fp8_attention=True), {}),
    "deepspeed-fp8-attention": (dict(ZERO1, precision=Precision.fp8, fp8_attention=True), {}),
    "fp8-recipe-precision": (dict(DISTOPT, fp8_recipe=Fp8Recipe.tensorwise), {}),
    "megatron-fp8-rowwise": (dict(DISTOPT, precision=Precision.fp8, fp8_recipe=Fp8Recipe.rowwise), {}),
    "deepspeed-fp8-rowwise": (dict(ZERO1, precision=Precision.fp8, fp8_recipe=Fp8Recipe.rowwise), {}),
    "fsdp2-fp8-te-recipe": (dict(precision=Precision.fp8, fp8_recipe=Fp8Recipe.delayed), {}),
    "fsdp2-recompute-modules": (dict(recompute=Recompute.selective, recompute_modules=("mlp",)), {}),
    "deepspeed-recompute-modules": (dict(ZERO1, recompute=Recompute.selective, recompute_modules=("mlp",)), {}),
    "moe-pad-without-capacity": (dict(ep=2, moe_pad_to_capacity=True), dict(n_experts=8)),
    "moe-capacity-dense-model": (dict(moe_capacity_factor=1.25), {}),
    "torchtitan-moe-capacity": (dict(ep=2, moe_capacity_factor=1.25), dict(n_experts=8)),
    "megatron-pad-deepep": (dict(DISTOPT, ep=2, moe_dispatcher=MoeDispatcher.deepep, moe_capacity_factor=1.25,
                                 moe_pad_to_capacity=True), dict(n_experts=8)),
    "expert-tp-dense-model": (dict(tp=2, dp=4, sequence_parallel=True, expert_tp=1), {}),
    "expert-tp-not-dividing-tp": (dict(DISTOPT, tp=4, dp=2, sequence_parallel=True, expert_tp=3), dict(n_experts=8)),
    "expert-tp-without-sp": (dict(DISTOPT, tp=2, dp=4, expert_tp=1), dict(n_experts=8)),
    "torchtitan-expert-tp": (dict(tp=4, dp=2, sequence_parallel=True, expert_tp=2), dict(n_experts=8)),
    "deepspeed-expert-tp": (dict(ZERO1, tp=2, dp=4, sequence_parallel=True, expert_tp=1), dict(n_experts=8)),
    # 80 layers on pp 2: a layout of 79 transformer layers
    "pipeline-layout": (dict(DISTOPT, pp=2, dp=4, pipeline_layout="Et*40|t*39L"), {}),
    "fsdp2-mtp": (dict(mtp_layers=1), {}),
    "deepspeed-mtp": (dict(ZERO1, mtp_layers=1), {}),
    "fsdp2-pipeline-layout": (dict(pp=2, dp=4, pipeline_layout="Et*40|t*40L"), {}),
    "deepspeed-pipeline-layout": (dict(framework=DEEPSPEED, sharding=Sharding.zero1, pp=2, dp=4,
                                       pipeline_layout="Et*40|t*40L"), {}),
}  # fmt: skip


def test_every_rule_has_a_hand_made_case_and_a_unique_name() -> None:
    names = [r.name for r in table()]
    assert len(names) == len(set(names))
    assert set(CASES) == set(names)


@pytest.mark.parametrize("name", list(CASES))
def test_each_rule_breaks_on_its_hand_made_plan(name: str) -> None:
    rule = next(r for r in table() if r.name == name)
    plan_fields, context_fields = CASES[name]
    plan = Plan(**{**BASE_PLAN, **plan_fields})
    context = Context(**{**BASE_CONTEXT, **context_fields})
    f = plan_facts(plan, context)
    assert rule in broken(f, capability=rule.capability)
    found = _violations_in(plan, context)
    mine = [v for v in found if v.code == rule.code and v.message == rule.message(f)]
    assert len(mine) == 1, found
    assert mine[0].field == rule.field and mine[0].fix.startswith(rule.fix(f))
    if rule.capability:
        assert rule.source and rule.nearest and rule.reason.startswith(f"{plan.framework.value}: ")


def test_the_base_plans_are_valid() -> None:
    """The cases differ from valid plans only in what they name (each framework's default sharding)."""
    for framework, sharding in ((FSDP2, Sharding.fsdp_full), (MEGATRON, Sharding.megatron_distopt),
                                (DEEPSPEED, Sharding.zero1)):  # fmt: skip
        plan = Plan(**BASE_PLAN, framework=framework, sharding=sharding)
        context = Context(**BASE_CONTEXT)
        assert (
            broken(plan_facts(plan, context)) == []
            and broken(plan_facts(plan, context), capability=True) == []
        )


def test_existing_texts_are_kept() -> None:
    """The web form and the API show these; the rules table writes them as plan validation always did."""
    plan = Plan(tp=16, pp=1, dp=2, micro_batch=3, global_batch=100, seq_len=8191, cp=2)
    found = {v.code: v for v in plan_violations(plan, gpus=32, n_layers=80, n_heads=64, n_kv_heads=8, n_experts=0,
                                                 gpus_per_node=8, nvlink_domain_size=8)}  # fmt: skip
    assert found["gpu-count"].message == "tp·pp·dp·cp = 16·1·2·2 = 64 ≠ 32 GPUs"
    assert found["gpu-count"].fix == "set dp = 1"
    assert found["batch-not-divisible"].message == (
        "global batch 100 is not divisible by micro-batch·dp = 3·2 = 6"
    )
    assert found["batch-not-divisible"].fix == "use a global batch that is a multiple of 6, e.g. 102"
    assert found["tp-across-nodes"].message == (
        "tp=16 spans beyond one NVLink domain of 8 GPUs; every layer's all-reduce would cross the scale-out network"
    )
    assert found["seq-not-divisible"].message == "sequence length 8191 is not divisible by cp=2"
    ds = Plan(dp=8, global_batch=8, seq_len=8, framework=Framework.deepspeed, sharding=Sharding.fsdp_full)
    (v,) = plan_violations(ds, gpus=8, n_layers=80, n_heads=64, n_kv_heads=8, n_experts=0, gpus_per_node=8,
                           nvlink_domain_size=8)  # fmt: skip
    assert (v.code, v.message, v.fix) == (
        "framework-sharding",
        "DeepSpeed does not offer fsdp-full",
        "use ddp, zero1, zero2 or zero3",
    )


def test_structural_rules_are_the_ones_the_search_does_not_count() -> None:
    assert structural_reasons() == {
        "tp·cp·pp does not divide the GPU count", "pp exceeds the layers", "pp·vpp exceeds the layers",
        "interleaving (vpp > 1) without pipeline parallelism",
    }  # fmt: skip


def test_a_layout_may_give_the_embedding_and_the_loss_stages_of_their_own() -> None:
    """Megatron-Bridge's Llama 3.1 405B recipes set account_for_embedding/loss_in_pipeline_split: 126 layers, the
    embedding and the loss are 128 units, one per chunk of pp 16 × vpp 8. The even split cannot place 126 layers in
    128 chunks (refused, with the layout named in the fix); the layout ``E|(t|)*126L`` can."""
    context = Context(**{**BASE_CONTEXT, "gpus": 128, "n_layers": 126})
    even = Plan(**{**BASE_PLAN, **DISTOPT, "pp": 16, "vpp": 8, "dp": 8, "global_batch": 128})
    (v,) = _violations_in(even, context)
    assert v.code == "chunks-exceed-layers" and "pipeline layout" in v.fix
    laid_out = even.model_copy(update={"pipeline_layout": "E|(t|)*126L"})
    assert _violations_in(laid_out, context) == []
    assert laid_out.chunk_counts == (0, *(1,) * 126, 0)
    # one stage too many is still refused, by the layout's own rule
    too_many = even.model_copy(update={"pipeline_layout": "E|(t|)*127L"})
    assert {x.code for x in _violations_in(too_many, context)} == {"pipeline-layout"}


# -- HSDP with one replica: refused on both sides ------------------------------------------------------------------


def test_hsdp_with_one_replica_is_refused_by_both_sides() -> None:
    arch = CATALOG.architecture("llama3.1-8b")
    plan = Plan(dp=8, global_batch=16, seq_len=4096, sharding=Sharding.fsdp_hybrid, shard_group_size=8)
    with pytest.raises(InvalidPlan) as err:
        estimate(arch, _cluster(8), plan)
    (v,) = err.value.violations
    assert v.code == "hsdp-one-replica" and v.fix.startswith("use fsdp-full")
    # the search: HSDP on one node (group = 8 = dp) is counted under the same rule, never proposed
    spec = SearchSpec(gpus=(8,), global_batches=(16,), seq_len=4096, shardings=(Sharding.fsdp_hybrid,
                      Sharding.fsdp_full), recomputes=(Recompute.full,), micro_batches=(1, 2), top_k=50)  # fmt: skip
    result = search(arch, {8: _cluster(8)}, spec, flops_per_token=1.0)
    assert result.rejected.get("HSDP shard group spans all of dp (that is fsdp-full)", 0) > 0
    assert result.plans and all(c.plan.sharding is Sharding.fsdp_full for c in result.plans)
    # with two nodes the group of one node leaves two replicas: HSDP is a plan again
    spec16 = spec.model_copy(update={"gpus": (16,)})
    result = search(arch, {16: _cluster(16)}, spec16, flops_per_token=1.0)
    assert any(c.plan.sharding is Sharding.fsdp_hybrid for c in result.plans)
