"""MoE parallel folding: the routed experts' own tensor-parallel degree (Plan.expert_tp, Megatron's
--expert-tensor-parallel-size), with the expert-parallel group carved out of tp·dp·cp instead of dp·cp."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.activations import LayerActivations
from app.domain.estimator.compute import model_flops_per_token
from app.domain.estimator.estimate import InvalidPlan, build_cluster, estimate
from app.domain.estimator.plan import Framework, Plan, Precision, Sharding
from app.domain.export import build_plan_document
from app.domain.export.megatron import megatron_arg_pairs
from app.domain.export.torchtitan import torchtitan_config_module
from app.domain.model.counts import parameter_counts
from app.domain.search.engine import search
from app.domain.search.space import SAME_LAYOUT
from app.domain.search.spec import SearchSpec

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")
QWEN = CATALOG.architecture("qwen3-30b-a3b")  # 48 layers, all MoE: 128 experts of width 768, top-8, h = 2048
CLUSTER = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=16)
BASE = dict(tp=2, dp=8, ep=8, micro_batch=1, global_batch=64, seq_len=4096, sequence_parallel=True,
            framework=Framework.megatron, sharding=Sharding.megatron_distopt, tp_comm_overlap=False)  # fmt: skip


def _qwen(**update):
    return estimate(QWEN, CLUSTER, Plan(**{**BASE, **update}))


def test_expert_tp_equal_to_tp_is_megatrons_default() -> None:
    """expert_tp = tp is what an empty expert_tp means (Megatron's expert_tensor_parallel_size defaults to tp)."""
    assert Plan(**BASE).etp == 2 and Plan(**BASE, expert_tp=1).etp == 1
    assert _qwen(expert_tp=2).step_time_s == _qwen().step_time_s
    assert _qwen(expert_tp=2).memory_by_stage == _qwen().memory_by_stage


def test_folding_holds_whole_experts_and_shards_their_optimizer_over_more_ranks() -> None:
    """Qwen3 30B-A3B on 16 H100, tp 2, dp 8, ep 8. One layer's routed experts: 128·3·2048·768 = 603,979,776
    parameters. expert_tp 2 (the default): each rank holds 128/8 experts split in two, 603,979,776/16 =
    37,748,736 a layer; expert_tp 1: the 16 experts whole, 75,497,472 a layer — 48 layers × 37,748,736 more
    parameters, 3,623,878,656 bf16 bytes more. Megatron's distributed optimizer shards the expert states over the
    experts' data-parallel ranks, tp·dp/(ep·expert_tp): 1 and 2 — the same optimizer bytes per rank."""
    default, folded = _qwen().memory_by_stage[0], _qwen(expert_tp=1).memory_by_stage[0]
    assert folded.params_bytes - default.params_bytes == 48 * 37_748_736 * 2 == 3_623_878_656
    assert folded.optimizer_bytes == default.optimizer_bytes


def test_folding_leaves_a_moe_layer_only_its_attention_tp_traffic() -> None:
    """With expert_tp = tp a MoE layer's experts gather and scatter their tokens over TP as a dense MLP does (half
    of the layer's TP traffic); folded, the experts exchange tokens only by the expert all-to-all. Every Qwen3
    layer is MoE, so without TP overlap the exposed TP time halves exactly."""
    assert _qwen(expert_tp=1).step.tp_exposed_s == pytest.approx(0.5 * _qwen().step.tp_exposed_s, rel=1e-12)


def test_folding_keeps_an_expert_parallel_group_of_eight_inside_one_node() -> None:
    """Megatron orders expert ranks etp, ep, edp: the EP group's ranks are expert_tp apart. EP 8 at expert_tp 2
    spans 16 ranks, two DGX nodes (4 per node, over InfiniBand); folded it is one node's 8 GPUs over NVLink."""
    default, folded = _qwen().step.groups.ep, _qwen(expert_tp=1).step.groups.ep
    assert (default.nodes, default.ranks_per_domain, default.scale_out) == (2, 4, True)
    assert (folded.nodes, folded.ranks_per_domain, folded.scale_out) == (1, 8, False)
    assert _qwen(expert_tp=1).step.ep_exposed_s < _qwen().step.ep_exposed_s


def test_folding_lets_ep_exceed_dp() -> None:
    """NVIDIA's Qwen3 235B-A22B plan on 256 H100 (tp 2, pp 8, vpp 4, ep 32, FP8) leaves dp = 16: ep must divide
    dp·cp unless the experts are folded (ep·expert_tp = 32 divides tp·dp·cp = 32); folded, it fits in 80 GB."""
    arch = CATALOG.architecture("qwen3-235b-a22b")
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=256)
    plan = Plan(tp=2, pp=8, vpp=4, dp=16, ep=32, global_batch=8192, seq_len=4096, sequence_parallel=True,
                framework=Framework.megatron, sharding=Sharding.megatron_distopt, moe_a2a_overlap=True,
                precision=Precision.fp8)  # fmt: skip
    with pytest.raises(InvalidPlan, match=r"expert_tp = 1 \(MoE parallel folding"):
        estimate(arch, cluster, plan)
    assert estimate(arch, cluster, plan.model_copy(update={"expert_tp": 1})).fits


def test_folded_expert_activations_by_hand() -> None:
    """One Qwen3 30B-A3B MoE layer, micro-batch 1 × 4,096 tokens, tp 2 with sequence parallelism, Megatron style,
    bf16. With expert_tp = tp the TP pair gathers its tokens and both ranks dispatch all T = 4,096 (each running
    half of every expert's width): permuted tokens + unpermute input 2·T·k·h·B = 2·4096·8·2048·2 = 268,435,456 B.
    Folded, each rank dispatches its own sequence shard, T/2: 134,217,728 B. The expert FFN tensors are the same
    either way, (T·k)·(f_e/2) = (T/2·k)·f_e: fc1 output (gate‖up) 2·4096·8·384·2 = 50,331,648 B."""
    args = dict(micro_batch=1, seq_len=4096, tp=2, sequence_parallel=True, framework_style="megatron")

    def rows(expert_tp):
        layer = LayerActivations(QWEN, "moe", expert_tp=expert_tp, **args)
        return {label: value for component, label, _, value in layer.full.rows if component == "experts"}

    default, folded = rows(None), rows(1)
    permuted = "permuted tokens (fc1 input) + unpermute input"
    assert (default[permuted], folded[permuted]) == (268_435_456, 134_217_728)
    assert default["expert fc1 output"] == folded["expert fc1 output"] == 50_331_648


def test_exports_name_the_experts_tensor_parallel_degree() -> None:
    """Megatron gets --expert-tensor-parallel-size when it differs from tp. torchtitan 0.3.0 has no such option:
    its EP always borrows ranks from FSDP and TP, so an FSDP2 plan's experts are whole (expert_tp 1) unless the
    user names another degree, which the capability table refuses."""

    def doc(**update):
        est = _qwen(**update)
        return build_plan_document(arch=QWEN, node=CLUSTER.node, fabric=CLUSTER.scale_out_fabric, estimate=est,
                                   preset="qwen3-30b-a3b", hf_config=None, tokens=None)  # fmt: skip

    args = dict(megatron_arg_pairs(doc(expert_tp=1))[0])
    assert args["--expert-tensor-parallel-size"] == "1" and args["--expert-model-parallel-size"] == "8"
    assert "--expert-tensor-parallel-size" not in dict(megatron_arg_pairs(doc())[0])
    titan = dict(framework=Framework.fsdp2, sharding=Sharding.fsdp_full, tp_comm_overlap=None)
    assert Plan(**{**BASE, **titan}).etp == 1
    module = torchtitan_config_module(doc(**titan))[0]
    assert "expert_parallel_degree = 8  # experts whole on each GPU" in module
    with pytest.raises(InvalidPlan, match="torchtitan 0.3.0 has no expert tensor parallelism"):
        _qwen(expert_tp=2, **titan)


SEARCH = dict(gpus=(16,), global_batches=(64,), seq_len=4096, top_k=100)
FLOPS = model_flops_per_token(QWEN, 4096, parameter_counts(QWEN).matmul_weights_active).total


def _search(**spec):
    return search(QWEN, {16: CLUSTER}, SearchSpec(**{**SEARCH, **spec}), FLOPS)


def test_the_search_keeps_the_experts_tensor_parallel_degree() -> None:
    """Given expert_tp 1, every plan the search proposes folds the experts: Qwen3 30B-A3B on 16 H100 under
    Megatron then may run ep above dp·cp (e.g. tp 2, dp 4, ep 8: ep·1 divides tp·dp = 8), which the experts' TP
    = tp (ep must divide dp·cp) rules out."""
    folded = _search(framework=Framework.megatron, shardings=(Sharding.megatron_distopt,), expert_tp=1)
    assert folded.plans and all(c.plan.expert_tp == 1 for c in folded.plans)
    assert any(c.plan.tp > 1 and c.plan.ep > c.plan.dp * c.plan.cp for c in folded.plans)


def test_without_an_expert_tp_the_megatron_search_tries_both_layouts() -> None:
    """Empty expert_tp, Megatron: every (tp, ep) is laid out twice, the experts' TP = tp (Megatron's default) and
    1 (folded); a folded plan at tp 1 is the unfolded one again and is not laid out as another plan. The search's
    proposals hold both kinds, the unfolded ones with ep dividing dp·cp, and its winner is at least as fast as the
    winner of the search that keeps expert TP 1."""
    both = _search(framework=Framework.megatron, shardings=(Sharding.megatron_distopt,))
    folded_only = _search(framework=Framework.megatron, shardings=(Sharding.megatron_distopt,), expert_tp=1)
    unfolded = [c.plan for c in both.plans if c.plan.expert_tp is None]
    folded = [c.plan for c in both.plans if c.plan.expert_tp is not None]
    assert unfolded and folded
    assert all((p.dp * p.cp) % p.ep == 0 for p in unfolded)
    assert all(p.expert_tp == 1 and p.tp > 1 for p in folded)
    assert both.plans[0].tokens_per_s >= folded_only.plans[0].tokens_per_s * (1 - 1e-12)
    assert SAME_LAYOUT not in both.rejected  # the duplicates are not plans, not rejected ones


@pytest.mark.parametrize(
    ("framework", "sharding"), [(Framework.deepspeed, Sharding.zero1), (Framework.fsdp2, Sharding.fsdp_full)]
)
def test_frameworks_without_folding_have_one_expert_layout(framework, sharding) -> None:
    """DeepSpeed-MoE's experts follow tp and torchtitan's are always whole: their searches lay out one expert
    layout, and no plan they propose names an expert_tp."""
    found = _search(framework=framework, shardings=(sharding,))
    assert found.plans and all(c.plan.expert_tp is None for c in found.plans)


@pytest.mark.parametrize(
    ("framework", "sharding", "expert_tp", "gpus"),
    [
        (Framework.fsdp2, Sharding.fsdp_full, None, 32),
        (Framework.megatron, Sharding.megatron_distopt, 1, 16),
        (Framework.megatron, Sharding.megatron_distopt, None, 16),
    ],
)
def test_the_search_and_the_estimate_agree_on_folded_plans(framework, sharding, expert_tp, gpus) -> None:
    """The search's array evaluation and the one-plan estimate are the same model: on folded plans (FSDP2's
    experts are always whole; Megatron given expert_tp 1) each proposed plan's peak memory and step time are the
    estimate's — the experts' optimizer and gradient shards included (tp·dp·cp/(ep·expert_tp) ranks)."""
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=gpus)
    spec = SearchSpec(gpus=(gpus,), global_batches=(64,), seq_len=4096, framework=framework, top_k=100,
                      shardings=(sharding,), expert_tp=expert_tp)  # fmt: skip
    flops = model_flops_per_token(QWEN, 4096, parameter_counts(QWEN).matmul_weights_active).total
    found = search(QWEN, {gpus: cluster}, spec, flops)
    # the plans whose expert shard differs from dp·cp/ep (what it is when the experts' TP is tp)
    folded = [c for c in found.plans if c.plan.tp > 1 and c.plan.ep > 1 and c.plan.etp == 1]
    assert folded, [(c.plan.tp, c.plan.ep) for c in found.plans]
    for c in found.plans:
        est = estimate(QWEN, cluster, c.plan)
        assert c.peak_memory_bytes == pytest.approx(est.peak_memory_bytes, rel=1e-9)
        assert c.step_time_s == pytest.approx(est.step_time_s, rel=1e-9)
