"""MoE token dispatch as the stacks run it: DeepEP / HybridEP send a token once per destination node, and
Megatron-Core's 1F1B all-to-all overlap hides one micro-batch's all-to-alls behind another's compute.

Hand-worked figures:
- DeepSeek-V3 (top-8 of 256 experts) with EP 32 over 4 DGX nodes: a token's experts sit on 8 ranks drawn from 4
  nodes; the expected number of *other* nodes it reaches is 3·(1 − (3/4)⁸) = 3·(1 − 0.1001) = 2.70. A plain
  all-to-all sends its 8 copies, 6 of them (8·24/32) off the node: per-node deduplication sends 2.70/6 = 0.45 of
  the scale-out bytes. The copies then reach their GPUs over NVLink inside the destination node.
- Overlap: 100 ms of all-to-all next to 98 ms of the adjacent micro-batch's compute, ρ = 0.8, κ = 0.1 → hidden
  0.8·98 = 78.4 ms, exposed 100 − 78.4 + 7.84 = 29.44 ms; without the overlap all 100 ms are exposed.
- Megatron-Core 0.16.1 (TransformerConfig.__post_init__) refuses the overlap without expert parallelism, with
  pp > 1 and no virtual pipeline, with full recompute, and in fp32.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from app.domain.estimator.capabilities import capability_violations
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.evaluate import exposed_a2a
from app.domain.estimator.network import all_to_all_seconds, dispatch_dedups, remote_node_copies
from app.domain.estimator.plan import Framework, MoeDispatcher, Plan, Precision, Recompute, Sharding
from app.domain.estimator.validation import run_plan
from app.domain.estimator.xp import SCALAR, VECTOR
from app.domain.export.document import build_plan_document
from app.domain.export.megatron import megatron_arg_pairs
from app.domain.search.engine import evaluate_all
from app.domain.search.spec import SearchSpec


def test_remote_node_copies_hand_worked_and_against_sampled_routing() -> None:
    assert remote_node_copies(SCALAR, 8, 4) == pytest.approx(3 * (1 - 0.75**8))
    assert remote_node_copies(SCALAR, 8, 4) == pytest.approx(2.70, abs=0.005)
    assert remote_node_copies(SCALAR, 1, 4) == pytest.approx(0.75)  # one copy: no duplicates to remove
    assert remote_node_copies(SCALAR, 8, 1) == 0.0  # one node: nothing crosses the scale-out network
    # independent figure: draw top-8 of 256 experts (distinct, as routers pick them) placed 64 per node on 4 nodes,
    # count the other nodes each token reaches; with-replacement formula vs without-replacement draws within 2 %
    rng = np.random.default_rng(0)
    picks = np.array([rng.choice(256, size=8, replace=False) for _ in range(20_000)]) // 64
    other_nodes = np.array([len(set(row) - {0}) for row in picks])
    assert remote_node_copies(SCALAR, 8, 4) == pytest.approx(other_nodes.mean(), rel=0.02)
    # runs on arrays too (the search's path)
    assert remote_node_copies(VECTOR, 8, np.array([1, 4])).tolist() == pytest.approx([0.0, 2.6997], abs=1e-4)


def test_dedup_cuts_the_scale_out_share_of_an_all_to_all() -> None:
    size, up, out, hop = 470e6, 720.0, 45.0, 0.0  # bytes per rank, GB/s NVLink, GB/s NIC share
    plain = all_to_all_seconds(SCALAR, size, 32, 8, 4, up, out, hop)
    dedup = all_to_all_seconds(SCALAR, size, 32, 8, 4, up, out, hop, top_k=8, per_node_dedup=True)
    assert plain == pytest.approx(0.75 * size / (out * 1e9))
    assert dedup == pytest.approx(remote_node_copies(SCALAR, 8, 4) / 8 * size / (out * 1e9))
    assert dedup / plain == pytest.approx(2.70 / 6, abs=0.002)
    # inside one NVLink domain the dispatcher changes nothing
    one = all_to_all_seconds(SCALAR, size, 8, 8, 1, up, out, hop)
    assert all_to_all_seconds(SCALAR, size, 8, 8, 1, up, out, hop, top_k=8, per_node_dedup=True) == one


def test_overlap_hides_at_most_the_adjacent_compute() -> None:
    c = SimpleNamespace(ep_overlap=0.8, comm_slowdown=0.1)
    assert exposed_a2a(SCALAR, 0.100, 0.098, True, c) == pytest.approx(0.02944)
    assert exposed_a2a(SCALAR, 0.100, 0.098, False, c) == pytest.approx(0.100)
    # a short compute window hides little: 100 ms behind 10 ms → 100 − 8 + 0.8
    assert exposed_a2a(SCALAR, 0.100, 0.010, True, c) == pytest.approx(0.0928)


def _deepseek_plan(**kw) -> Plan:
    base = dict(pp=8, vpp=2, dp=32, ep=32, micro_batch=1, global_batch=4096, seq_len=4096,
                recompute=Recompute.selective, sharding=Sharding.megatron_distopt, framework=Framework.megatron,
                precision=Precision.fp8)  # fmt: skip
    return Plan(**{**base, **kw})


def test_deepseek_ep32_across_nodes_gets_faster_with_deepep_and_overlap(catalog) -> None:
    arch = catalog.architecture("deepseek-v3")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    plain = estimate(arch, cluster, _deepseek_plan())
    deepep = estimate(arch, cluster, _deepseek_plan(moe_dispatcher=MoeDispatcher.deepep))
    both = estimate(arch, cluster, _deepseek_plan(moe_dispatcher=MoeDispatcher.deepep, moe_a2a_overlap=True))
    assert deepep.step.ep_exposed_s < 0.5 * plain.step.ep_exposed_s
    assert both.step.ep_exposed_s < deepep.step.ep_exposed_s
    assert plain.step_time_s > deepep.step_time_s > both.step_time_s
    # the dispatcher does not change the arithmetic
    assert deepep.step.compute_s == pytest.approx(plain.step.compute_s)


def test_hybridep_dedups_only_inside_nvl72_domains() -> None:
    """The dispatchers' inter-node deduplication by NVLink domain: DeepEP always, HybridEP only in domains above 8
    GPUs (NVIDIA keeps it at EP 8 on NVL8 nodes, Megatron-Bridge #2883), the all-to-all never; scalars and arrays."""
    kinds = [d.dedup_kind for d in MoeDispatcher]
    assert kinds == [0, 1, 2]  # alltoall, deepep, hybridep
    assert [dispatch_dedups(k, 8) for k in kinds] == [False, True, False]
    assert [dispatch_dedups(k, 72) for k in kinds] == [False, True, True]
    assert dispatch_dedups(np.array([0, 1, 2, 2]), np.array([8, 8, 8, 72])).tolist() == [
        False, True, False, True,
    ]  # fmt: skip


@pytest.mark.parametrize(("accelerator", "gpus", "ep"), [("h100-sxm", 16, 16), ("gb200", 64, 64)])
def test_hybridep_across_8_gpu_nodes_costs_the_plain_all_to_all(catalog, accelerator, gpus, ep) -> None:
    """Qwen3 30B-A3B, EP 16 over two DGX H100 nodes: HybridEP's all-to-alls take as long as NCCL's (its inter-node
    path is not tuned for NVL8) while DeepEP's take less; EP 64 inside one GB200 NVL72 domain crosses no node, so
    every dispatcher costs the same there."""
    arch = catalog.architecture("qwen3-30b-a3b")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=accelerator, gpus=gpus)
    plan = dict(dp=gpus, ep=ep, micro_batch=1, global_batch=gpus, seq_len=4096, framework=Framework.megatron,
                sharding=Sharding.megatron_distopt, precision=Precision.fp8)  # fmt: skip
    ep_s = {
        d: estimate(arch, cluster, Plan(**plan, moe_dispatcher=d)).step.ep_exposed_s for d in MoeDispatcher
    }
    assert ep_s[MoeDispatcher.hybridep] == pytest.approx(ep_s[MoeDispatcher.alltoall], rel=1e-12)
    if cluster.nvlink_domain == 8:
        assert ep_s[MoeDispatcher.deepep] < 0.6 * ep_s[MoeDispatcher.alltoall]
    else:
        assert ep_s[MoeDispatcher.deepep] == pytest.approx(ep_s[MoeDispatcher.alltoall], rel=1e-12)


def test_the_published_deepseek_rows_name_their_dispatcher(catalog) -> None:
    runs = {r.slug: r for r in catalog.published_runs}
    plan, _ = run_plan(runs["nemo260401-deepseek-v3-b200-256gpu-fp8"])
    assert (plan.moe_dispatcher, plan.moe_a2a_overlap) == (MoeDispatcher.deepep, True)
    plan, _ = run_plan(runs["nemo2604-deepseek-v3-b200-256gpu-fp8-pp16-ep8"])
    assert (plan.moe_dispatcher, plan.moe_a2a_overlap) == (MoeDispatcher.hybridep, False)


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        (dict(pp=8, vpp=1, moe_a2a_overlap=True), "megatron-a2a-overlap"),
        (dict(ep=1, moe_a2a_overlap=True), "megatron-a2a-overlap"),
        (dict(recompute=Recompute.full, moe_a2a_overlap=True), "megatron-a2a-overlap"),
        (
            dict(
                framework=Framework.fsdp2,
                sharding=Sharding.fsdp_full,
                pp=1,
                vpp=1,
                dp=256,
                moe_dispatcher=MoeDispatcher.deepep,
            ),
            "fsdp2-moe-dispatcher",
        ),  # fmt: skip
        (
            dict(framework=Framework.deepspeed, sharding=Sharding.zero1, vpp=1, moe_a2a_overlap=True),
            "deepspeed-a2a-overlap",
        ),
    ],
)
def test_frameworks_refuse_what_they_cannot_run(changes, code) -> None:
    plan = _deepseek_plan(**changes)
    assert code in {v.code for v in capability_violations(plan)}


def test_megatron_runs_and_exports_deepep_with_overlap(catalog) -> None:
    plan = _deepseek_plan(moe_dispatcher=MoeDispatcher.deepep, moe_a2a_overlap=True)
    assert capability_violations(plan) == []
    arch = catalog.architecture("deepseek-v3")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    doc = build_plan_document(arch=arch, node=cluster.node, fabric=cluster.scale_out_fabric,
                              estimate=estimate(arch, cluster, plan), preset="deepseek-v3", hf_config=None)  # fmt: skip
    args = megatron_arg_pairs(doc)[0]
    flags = dict(args)
    assert flags["--moe-token-dispatcher-type"] == "flex"
    assert flags["--moe-flex-dispatcher-backend"] == "deepep"
    assert "--overlap-moe-expert-parallel-comm" in flags and "--delay-wgrad-compute" in flags
    plain = build_plan_document(arch=arch, node=cluster.node, fabric=cluster.scale_out_fabric,
                                estimate=estimate(arch, cluster, _deepseek_plan()), preset="deepseek-v3",
                                hf_config=None)  # fmt: skip
    plain_flags = dict(megatron_arg_pairs(plain)[0])
    assert plain_flags["--moe-token-dispatcher-type"] == "alltoall"
    assert "--overlap-moe-expert-parallel-comm" not in plain_flags


def test_search_applies_dispatcher_and_overlap_as_the_estimator_does(catalog) -> None:
    small = catalog.architecture("mixtral-8x7b").model_copy(
        update=dict(slug="small-moe", n_layers=4, hidden_size=512, n_heads=8, n_kv_heads=2, head_dim=64,
                    ffn_hidden_size=1024, expert_ffn_hidden_size=1024, vocab_size=8000)
    )  # fmt: skip
    gpus = 32  # four 8-GPU nodes: expert parallelism crosses the scale-out network
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="h100-sxm", gpus=gpus)
    spec = SearchSpec(gpus=(gpus,), global_batches=(64,), seq_len=1024, framework=Framework.megatron,
                      micro_batches=(1, 2), vpps=(1, 2), cps=(1,), max_pp=2,
                      moe_dispatcher=MoeDispatcher.deepep, moe_a2a_overlap=True)  # fmt: skip
    cands = evaluate_all(small, cluster, spec, gpus, 64)
    overlapped = [c for c in cands if c.plan.moe_a2a_overlap]
    assert overlapped and len(overlapped) < len(cands)  # only where Megatron allows it
    for cand in cands:
        assert cand.plan.moe_dispatcher is MoeDispatcher.deepep
        assert capability_violations(cand.plan) == []
        est = estimate(small, cluster, cand.plan, allow_tp_across_nodes=True)
        assert cand.tokens_per_s == pytest.approx(est.tokens_per_s, rel=1e-9), cand.plan


def test_the_estimate_states_its_moe_dispatch_and_the_memory_caveat(catalog) -> None:
    """The assumptions name the dispatcher and whether the all-to-alls overlap, and what selective recompute re-runs
    — flagged low-confidence for an MoE/MLA model left at the attention core (NVIDIA's recipes name finer modules,
    which keep much less); named modules, or a dense model, carry no flag."""
    arch = catalog.architecture("deepseek-v3")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    est = estimate(arch, cluster, _deepseek_plan(moe_dispatcher=MoeDispatcher.deepep, moe_a2a_overlap=True))
    named = {a.name: a for a in est.assumptions}
    assert named["MoE all-to-alls"].value.startswith("deepep, 1F1B overlap")
    assert named["activation memory under selective recompute"].confidence == "low"
    named = {
        a.name: a
        for a in estimate(arch, cluster, _deepseek_plan(recompute_modules=("mla_up_proj",))).assumptions
    }
    assert named["activation memory under selective recompute"].value == "mla_up_proj re-run in backward"
    assert named["activation memory under selective recompute"].confidence is None
    dense = catalog.architecture("llama3.1-70b")
    plan = Plan(tp=8, dp=32, global_batch=256, seq_len=8192, recompute=Recompute.selective,
                sharding=Sharding.megatron_distopt, framework=Framework.megatron)  # fmt: skip
    plain = {a.name: a for a in estimate(dense, cluster, plan).assumptions}
    assert plain["activation memory under selective recompute"].confidence is None
    assert plain["MoE all-to-alls"].value == "alltoall, not overlapped"
