"""Mechanisms that let a published run be estimated as it ran: block-level partial recompute, the scale-out
bandwidth a source states, HSDP's overlapped replica all-reduce, and the attention kernel a stack really ran.

Hand-worked figures:
- Partial recompute: Llama 2 13B (40 layers), pp = 1, recompute_layers = 10 → a quarter of the layers keep only
  their input and repeat their forward: saved bytes per layer = ¼·full + ¾·none, recompute time = ¼·full's, and
  the hardware FLOPs add ¼ of the forward (¼·(6N_layers/3 + attention/3)).
- fms-fsdp's README prints MFU 0.51 and HFU 0.59 for Llama 2 13B on A100 with "Selective AC": a recomputed block
  repeats its forward (1/3 of its FLOPs), so the recomputed share is 3·(0.59/0.51 − 1) = 0.47 → 19 of 40 blocks.
- Jean Zay (BLOOM paper, arXiv 2211.05100, §3.4): four Omni-Path 100 Gb/s links per 8-GPU node = 400 Gb/s,
  6.25 GB/s per GPU, a quarter of the DGX A100's 8 × 200 Gb/s.
"""

from __future__ import annotations

import pytest

from app.domain.estimator.assemble import evaluate_plan, key_q, key_work, recompute_key_q
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.network import Collective, collective_time, plan_groups
from app.domain.estimator.plan import Framework, Plan, Recompute, Sharding, plan_violations
from app.domain.estimator.validation import run_cluster, run_plan
from app.domain.export.document import build_plan_document
from app.domain.export.megatron import megatron_arg_pairs


def _cluster(catalog, gpus: int = 8, accelerator: str = "a100-80gb"):
    return build_cluster(catalog.hardware, catalog.efficiency, accelerator=accelerator, gpus=gpus)


def _plan(**kw) -> Plan:
    base = dict(dp=8, global_batch=16, micro_batch=2, seq_len=4096, sharding=Sharding.fsdp_full)
    return Plan(**{**base, **kw})


def test_recompute_share() -> None:
    assert _plan().recompute_share(40) == 0.0
    assert _plan(recompute=Recompute.full).recompute_share(40) == 1.0
    assert _plan(recompute=Recompute.full, recompute_layers=10).recompute_share(40) == 0.25
    # per pipeline chunk: 40 layers over pp 2 → 20 per chunk
    pp = Plan(pp=2, dp=4, global_batch=16, recompute=Recompute.full, recompute_layers=10)
    assert pp.recompute_share(40) == 0.5
    assert _plan(recompute=Recompute.selective, recompute_layers=10).recompute_share(40) == 0.0


def test_partial_recompute_blends_memory_time_and_flops(catalog) -> None:
    arch = catalog.architecture("llama2-13b")
    cluster = _cluster(catalog)
    none, full = key_q(arch, _plan(), cluster), key_q(arch, _plan(recompute=Recompute.full), cluster)
    quarter = key_q(arch, _plan(recompute=Recompute.full, recompute_layers=10), cluster)
    assert full.saved_dense < none.saved_dense
    assert quarter.saved_dense == pytest.approx(0.25 * full.saved_dense + 0.75 * none.saved_dense)
    assert quarter.rec_dense == pytest.approx(0.25 * full.rec_dense)
    assert quarter.fwd_dense == pytest.approx(full.fwd_dense)
    # the whole estimate: between none and full, both in memory and in step time
    est = {k: estimate(arch, cluster, p) for k, p in (
        ("none", _plan()), ("full", _plan(recompute=Recompute.full)),
        ("quarter", _plan(recompute=Recompute.full, recompute_layers=10)),
    )}  # fmt: skip
    assert est["full"].step_time_s > est["quarter"].step_time_s > est["none"].step_time_s
    peak = {k: e.peak_memory_bytes for k, e in est.items()}
    assert peak["none"] > peak["quarter"] > peak["full"]
    # HFU adds a quarter of the full recompute's forward
    model = est["none"].hardware_flops_per_token
    assert est["none"].model_flops_per_token == model
    assert est["quarter"].hardware_flops_per_token - model == pytest.approx(
        0.25 * (est["full"].hardware_flops_per_token - model)
    )


def _violations(plan: Plan, n_layers: int = 40) -> set[str]:
    return {
        v.code
        for v in plan_violations(
            plan,
            n_layers=n_layers,
            n_heads=40,
            n_kv_heads=40,
            n_experts=0,
            gpus=plan.gpus,
            gpus_per_node=8,
            nvlink_domain_size=8,
        )  # fmt: skip
    }


def test_recompute_layers_rules() -> None:
    assert _violations(_plan(recompute=Recompute.full, recompute_layers=40)) == set()
    assert "recompute-layers-without-full" in _violations(_plan(recompute_layers=4))
    assert "recompute-layers-exceed-chunk" in _violations(
        _plan(recompute=Recompute.full, recompute_layers=41)
    )


def test_megatron_export_writes_the_block_method(catalog) -> None:
    arch = catalog.architecture("llama2-13b")
    cluster = _cluster(catalog)
    plan = Plan(tp=8, dp=1, global_batch=8, micro_batch=1, framework=Framework.megatron,
                sharding=Sharding.megatron_distopt, recompute=Recompute.full, recompute_layers=12)  # fmt: skip
    doc = build_plan_document(arch=arch, node=cluster.node, fabric=cluster.scale_out_fabric,
                              estimate=estimate(arch, cluster, plan), preset="llama2-13b", hf_config=None)  # fmt: skip
    args = dict(megatron_arg_pairs(doc)[0])
    assert args["--recompute-method"] == "block"
    assert args["--recompute-num-layers"] == "12"
    assert doc.plan.recompute_layers == 12


def test_fms_selective_rows_are_partial_full_recompute(catalog) -> None:
    runs = {r.slug: r for r in catalog.published_runs}
    run = runs["fms-fsdp-13b-128gpu-a100"]
    assert run.recompute == "full" and run.recompute_layers == round(3 * (0.59 / 0.51 - 1) * 40) == 19
    plan, _ = run_plan(run)
    assert plan.recompute is Recompute.full and plan.recompute_layers == 19


def test_stated_scale_out_bandwidth_replaces_the_nodes(catalog) -> None:
    runs = {r.slug: r for r in catalog.published_runs}
    bloom = runs["bloom-176b-384gpu"]
    assert bloom.scale_out_gbit_per_s_per_node == 400.0
    cluster = run_cluster(bloom, catalog)
    assert cluster.node.scale_out_nics * cluster.node.scale_out_gbit_per_s_per_nic == pytest.approx(400.0)
    default = build_cluster(catalog.hardware, catalog.efficiency, accelerator="a100-80gb", gpus=384,
                            node="dgx-a100-80gb")  # fmt: skip
    assert cluster.scale_out_gb_per_s == pytest.approx(default.scale_out_gb_per_s / 4)


def test_hsdp_replica_all_reduce_hides_behind_the_backward(catalog) -> None:
    """Llama 2 7B, HSDP over 16 nodes (shard 8): the replica all-reduce of each GPU's 1/8 gradient shard takes
    well under the backward, so only the stack's un-overlapped share, the slowdown and the last unit's bucket
    remain on the critical path."""
    arch = catalog.architecture("llama2-7b")
    cluster = _cluster(catalog, gpus=128)
    plan = Plan(dp=128, global_batch=256, micro_batch=2, seq_len=4096, sharding=Sharding.fsdp_hybrid,
                shard_group_size=8)  # fmt: skip
    _, step = evaluate_plan(arch, cluster, plan)
    groups = plan_groups(1, 1, 128, 1, 1, 8, cluster, etp=1)
    grads_b = 4.0  # FSDP2 reduces in fp32
    all_reduce = collective_time(
        Collective.all_reduce, arch_params(catalog) / 8 * grads_b, groups.dp_replicate
    )
    assert all_reduce > 0.1
    assert step.ranks[0].dp_s < 0.5 * all_reduce


def arch_params(catalog) -> float:
    from app.domain.model.counts import parameter_counts

    return float(parameter_counts(catalog.architecture("llama2-7b")).total)


def test_llm_foundry_benchmarks_ran_the_triton_kernel(catalog) -> None:
    runs = {r.slug: r for r in catalog.published_runs}
    plan, notes = run_plan(runs["mpt-h100-7b-8gpu-seq65536"])
    assert plan.attention_kernel == "fa1"


def test_torchtitan_pipeline_rows_split_the_local_batch_into_pp_micro_batches(catalog) -> None:
    """torchtitan (2024-10, the paper's tree: torchtitan/parallelisms/pipelining_utils.py at 25ec560e) splits each
    rank's local batch into ``pipeline_parallel_microbatches`` micro-batches, by default the number of pipeline
    stages, ``num_total_stages`` = PP degree × stages per rank (build_pipeline_schedule): the 405B 3D row's local
    batch of 32 with pp 8 runs 8 micro-batches of 4 (not 32 of 1), so its bubble is (pp − 1)/m = 7/8 of a
    micro-batch's time per micro-batch, as the paper's 1F1B baseline paid; the interleaved row (2 stages a rank) runs
    16 of 2 — which is why it peaks 10 GiB lower (72.7 against 82.5 GiB)."""
    runs = {r.slug: r for r in catalog.published_runs}
    plan, notes = run_plan(runs["torchtitan-llama3.1-405b-512gpu-3d"])
    assert (plan.micro_batch, plan.micro_batches) == (4, 8)
    assert any("= 8 micro-batches" in n for n in notes)
    interleaved, notes = run_plan(runs["torchtitan-llama3.1-405b-512gpu-3d-interleaved"])
    assert (interleaved.vpp, interleaved.micro_batch, interleaved.micro_batches) == (2, 2, 16)
    assert any("= 16 micro-batches" in n for n in notes)
    # other stacks keep one sequence per micro-batch when the published micro-batch is the local batch
    megatron = runs["torchtitan-llama3.1-405b-512gpu-3d"].model_copy(update={"framework": "megatron-lm"})
    assert run_plan(megatron)[0].micro_batch == 1


@pytest.mark.parametrize("model", ["llama2-13b", "deepseek-v3", "gpt3-175b"])
def test_one_key_work_serves_every_recompute_mode(catalog, model) -> None:
    """The search builds one KeyWork per (tp, cp, micro-batch, ep) from a plan without recompute and derives each
    recompute mode's KeyQ from it: exactly (==) the KeyQ of the plan itself, partial recompute included."""
    arch = catalog.architecture(model)
    cluster = _cluster(catalog, accelerator="h100-sxm")
    for framework, tp, cp in (
        (Framework.fsdp2, 1, 1),
        (Framework.megatron, 4, 2),
        (Framework.deepspeed, 2, 1),
    ):
        base = _plan(framework=framework, tp=tp, cp=cp, dp=8, sequence_parallel=tp > 1, sharding=Sharding.ddp)
        work = key_work(arch, base, cluster)
        for recompute, layers in [(r, None) for r in Recompute] + [(Recompute.full, 2)]:
            plan = base.model_copy(update={"recompute": recompute, "recompute_layers": layers})
            shared = recompute_key_q(arch, work, recompute, plan.recompute_share(arch.n_layers))
            assert shared == key_q(arch, plan, cluster), (framework, recompute, layers)
