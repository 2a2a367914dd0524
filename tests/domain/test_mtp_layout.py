"""Multi-token prediction (Plan.mtp_layers, Megatron's --mtp-num-layers) and Megatron-Core's pipeline layout
strings (Plan.pipeline_layout, --pipeline-model-parallel-layout).

Hand-worked figures (DeepSeek-V3: 61 layers, the first 3 dense, h = 7,168, V = 129,280):
- NVIDIA's H100 layout ``Et|(tt|)*30mL`` is 32 virtual stages: ``Et`` (layer 0), 30 × ``tt`` (layers 1–60),
  ``mL``. On pp 8 × vpp 4, rank 7 owns stages 7, 15, 23, 31: layers 13–14, 29–30, 45–46 and none — 6 MoE
  layers, plus the MTP layer (a MoE layer, the model's last kind): 7 MoE layers.
- An MTP module runs the shared output head once more and its 2h→h projection, 2·2h·h / (2·h·V) = 2h/V = 0.1109 of
  a head pass: 2.1109 head passes on the last stage.
- Its projection holds 2h² = 102,760,448 parameters (÷ tp) and three norms of h.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.domain.estimator.estimate import InvalidPlan, build_cluster, estimate
from app.domain.estimator.pipeline import (
    chunk_layer_counts,
    layout_counts,
    layout_problem,
    layout_stages,
    mtp_relief,
    rank_layers,
)
from app.domain.estimator.plan import Framework, Plan, Sharding
from app.domain.estimator.rank_memory import head_passes
from app.domain.export import build_plan_document
from app.domain.export.megatron import megatron_arg_pairs

H100_LAYOUT = "Et|(tt|)*30mL"
NVIDIA_16 = "Et*4|(t*4|)*14tmL"  # Megatron-Bridge's DeepSeek-V3 layout for 16 virtual stages


def test_layout_strings_read_as_megatron_core_reads_them() -> None:
    stages = layout_stages(H100_LAYOUT)
    assert len(stages) == 32 and stages[0] == "Et" and stages[1:31] == ("tt",) * 30 and stages[-1] == "mL"
    assert layout_counts(H100_LAYOUT) == (1,) + (2,) * 30 + (0,)
    assert layout_counts(NVIDIA_16) == (4,) * 15 + (1,)
    assert layout_counts("Ettt|(tt|)*29,m|L") == (3,) + (2,) * 29 + (0, 0)  # commas are cosmetic
    assert layout_problem(H100_LAYOUT, 61, 32, 1) is None
    assert layout_problem(NVIDIA_16, 61, 16, 1) is None


@pytest.mark.parametrize(
    ("layout", "chunks", "mtp", "why"),
    [
        (H100_LAYOUT, 16, 1, "32 stages where pp·vpp = 16"),
        (H100_LAYOUT, 32, 0, "1 MTP layers m where mtp_layers = 0"),
        ("Et*4|(t*4|)*14tL", 16, 1, "0 MTP layers m where mtp_layers = 1"),
        ("Et*4|(t*4|)*14t*2L", 16, 0, "62 transformer layers t where the model has 61"),
        ("t*4E|(t*4|)*14tL", 16, 0, "the embedding E must open the first stage"),
        ("Ettt|(tt|)*29,m|L", 32, 1, "a standalone MTP stage is not modelled"),
        ("Et*4|(t*4|)*14txL", 16, 0, "unknown layer letter(s) x"),
    ],
)
def test_a_layout_that_does_not_fit_says_why(layout, chunks, mtp, why) -> None:
    assert why in (layout_problem(layout, 61, chunks, mtp) or "")


def test_the_mtp_layer_sits_on_the_last_rank_of_nvidias_layout(catalog) -> None:
    arch = catalog.architecture("deepseek-v3")
    ranks = rank_layers(arch, 8, 4, mtp=1, counts=layout_counts(H100_LAYOUT))
    assert [r.n_layers for r in ranks] == [7, 8, 8, 8, 8, 8, 8, 7]
    last = ranks[-1]
    assert last.layers == (13, 14, 29, 30, 45, 46)
    assert (last.dense_layers, last.moe_layers, last.mtp_layers) == (0, 7, 1)
    assert (ranks[0].dense_layers, ranks[0].moe_layers) == (1, 6)  # layers 0, 15–16, 31–32, 47–48
    assert sum(r.n_layers for r in ranks) == 61 + 1
    # without a layout capplan's own split lightens the last stage by mtp_relief: here the same ranks
    assert rank_layers(arch, 8, 4, mtp=1) == ranks


def test_capplans_split_with_mtp_is_megatron_bridges_deepseek_layout(catalog) -> None:
    """mtp_relief from active weights (DeepSeek-V3: 1 + 1.111·0.927/0.583 = 2.76 → 3 layers) reproduces the four
    layouts Megatron-Bridge's DeepSeek-V3 helper writes (src/megatron/bridge/recipes/deepseek/deepseek_v3.py at
    067f987df) — derived, not copied: the split is of 61 + 3 layers and the last stage gives 3 up."""
    arch = catalog.architecture("deepseek-v3")
    assert mtp_relief(arch, 1) == 3 and mtp_relief(arch, 0) == 0
    nvidia = {
        32: H100_LAYOUT, 16: NVIDIA_16, 8: "Et*8|(t*8|)*6t*5mL", 4: "Et*16|t*16|t*16|t*13mL",
    }  # fmt: skip
    for chunks, layout in nvidia.items():
        assert chunk_layer_counts(61, chunks, mtp_relief(arch, 1)) == layout_counts(layout), chunks
    # no MTP: the split is unchanged (the remainder to the middle stages)
    assert chunk_layer_counts(61, 16) == (3,) + (4,) * 13 + (3, 3)


def test_head_passes_by_hand() -> None:
    mq = SimpleNamespace(hidden=7168, embedding=129_280 * 7168)
    assert head_passes(mq, SimpleNamespace(mtp=0)) == 1
    assert head_passes(mq, SimpleNamespace(mtp=1)) == pytest.approx(2 + 2 * 7168 / 129_280)
    assert head_passes(mq, SimpleNamespace(mtp=1)) == pytest.approx(2.1109, abs=1e-4)


def _b200_pp16(catalog, **kw):
    arch = catalog.architecture("deepseek-v3")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    plan = Plan(pp=16, dp=16, ep=8, micro_batch=1, global_batch=4096, seq_len=4096, framework=Framework.megatron,
                sharding=Sharding.megatron_distopt, **kw)  # fmt: skip
    return estimate(arch, cluster, plan)


def test_mtp_costs_the_last_stage_and_a_lightened_stage_balances_it(catalog) -> None:
    """DeepSeek-V3 on 256 B200, pp 16: an MTP module on an even split's last stage (3 layers + head, capplan's split
    without relief, written as a layout) makes it the pipeline's slowest by about two layers and a head; capplan's
    own split with MTP gives that stage 1 layer, as NVIDIA's layout does, and is that layout's estimate."""
    plain = _b200_pp16(catalog)
    mtp_even = _b200_pp16(catalog, mtp_layers=1, pipeline_layout="Et*3|(t*4|)*13t*3|t*3mL")
    mtp_nvidia = _b200_pp16(catalog, mtp_layers=1, pipeline_layout=NVIDIA_16)
    mtp_default = _b200_pp16(catalog, mtp_layers=1)
    assert mtp_even.step_time_s > 1.3 * plain.step_time_s
    assert plain.step_time_s < mtp_nvidia.step_time_s < mtp_even.step_time_s
    assert mtp_default.step_time_s == pytest.approx(mtp_nvidia.step_time_s, rel=1e-12)
    # the even split's last stage holds one more (MTP) layer than without MTP
    last = lambda e: e.memory_by_stage[-1]  # noqa: E731
    assert last(mtp_even).layers == last(plain).layers + 1


def test_a_layout_and_mtp_are_refused_where_they_do_not_apply(catalog) -> None:
    with pytest.raises(InvalidPlan, match="62 transformer layers"):
        _b200_pp16(catalog, pipeline_layout="Et*4|(t*4|)*14t*2L")
    arch = catalog.architecture("deepseek-v3")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    with pytest.raises(InvalidPlan, match="fsdp2: multi-token prediction"):
        estimate(arch, cluster, Plan(dp=256, ep=8, global_batch=256, seq_len=4096, mtp_layers=1))


def test_the_megatron_export_writes_the_layout_and_the_mtp_layers(catalog) -> None:
    arch = catalog.architecture("deepseek-v3")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    base = dict(pp=16, dp=16, ep=8, global_batch=4096, seq_len=4096, framework=Framework.megatron,
                sharding=Sharding.megatron_distopt, mtp_layers=1)  # fmt: skip

    def build_plan_document_of(plan: Plan):
        return build_plan_document(arch=arch, node=cluster.node, fabric=cluster.scale_out_fabric,
                                   estimate=estimate(arch, cluster, plan), preset="deepseek-v3", hf_config=None,
                                   tokens=None)  # fmt: skip

    args = dict(megatron_arg_pairs(build_plan_document_of(Plan(**base, pipeline_layout=NVIDIA_16)))[0])
    assert args["--pipeline-model-parallel-layout"] == NVIDIA_16 and args["--mtp-num-layers"] == "1"
    # capplan's own split (61 + 3 over 16, the last stage lightened) names the MTP layer with the loss
    own = dict(megatron_arg_pairs(build_plan_document_of(Plan(**base)))[0])
    layout = own["--pipeline-model-parallel-layout"]
    assert layout.endswith("t*1mL") and layout_problem(layout, 61, 16, 1) is None
    assert layout_counts(layout) == layout_counts(NVIDIA_16)


def test_the_search_and_the_estimate_agree_with_mtp(catalog) -> None:
    """A Megatron search with an MTP layer: every proposed plan (pipelined ones included, whose last rank holds the
    MTP layer and heads) has the estimate's step time and peak memory."""
    from app.domain.estimator.compute import model_flops_per_token
    from app.domain.model.counts import parameter_counts
    from app.domain.search.engine import search
    from app.domain.search.spec import SearchSpec

    arch = catalog.architecture("qwen3-30b-a3b")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="h100-sxm", gpus=32)
    spec = SearchSpec(gpus=(32,), global_batches=(256,), seq_len=4096, framework=Framework.megatron, top_k=60,
                      shardings=(Sharding.megatron_distopt,), mtp_layers=1)  # fmt: skip
    flops = model_flops_per_token(arch, 4096, parameter_counts(arch).matmul_weights_active).total
    found = search(arch, {32: cluster}, spec, flops)
    assert found.plans and any(c.plan.pp > 1 for c in found.plans)
    for c in found.plans:
        assert c.plan.mtp_layers == 1
        est = estimate(arch, cluster, c.plan)
        assert c.step_time_s == pytest.approx(est.step_time_s, rel=1e-9)
        assert c.peak_memory_bytes == pytest.approx(est.peak_memory_bytes, rel=1e-9)
    without = search(arch, {32: cluster}, spec.model_copy(update={"mtp_layers": 0}), flops)
    assert found.plans[0].tokens_per_s < without.plans[0].tokens_per_s


@pytest.mark.parametrize(
    "layout", ["(t*4096|)*4096L", "Et*999999999L", "E(t|)*5000L", "((t|)*2)*3", "Et*4|)*2L"]
)
def test_a_layout_that_would_expand_too_far_or_does_not_parse_is_refused_at_once(layout) -> None:
    """A 30-character layout could ask for gigabytes: repeat counts and the expanded length are bounded before
    expanding; nested or unbalanced parentheses are not Megatron's grammar."""
    assert layout_problem(layout, 61, 16, 0) is not None


def test_model_flops_count_the_mtp_module_as_nvidia_does(catalog) -> None:
    """NVIDIA's tables: model TFLOP/s ÷ tokens/s is 249–250 GFLOP a token on DeepSeek-V3 rows "w/o MTP" (25.11,
    GB200: 1,003·10¹²/4,018 = 249.6) and 260 on rows with it (26.04, B200: 732·10¹²/2,815 = 260.0); capplan's model
    FLOPs at 4,096 tokens, causal, within 0.5 % of both."""
    from app.domain.estimator.compute import model_flops_per_token
    from app.domain.model.counts import parameter_counts

    arch = catalog.architecture("deepseek-v3")
    active = parameter_counts(arch).matmul_weights_active
    without = model_flops_per_token(arch, 4096, active).total
    with_mtp = model_flops_per_token(arch, 4096, active, mtp_layers=1).total
    assert without == pytest.approx(1003e12 / 4018, rel=0.005)
    assert with_mtp == pytest.approx(732e12 / 2815, rel=0.005)
