"""Megatron's selective recompute modules and Transformer Engine's FP8-saved linear inputs, as NVIDIA's published
recipes run them.

Hand-worked figures (one layer, one micro-batch of 4,096 tokens, tp 1, 16-bit activations, Megatron style):
- DeepSeek-V3 MoE layer, ``mla_up_proj`` (the MLA up-projections re-run in backward): q and k, 128 heads × 192
  wide, 2·4096·128·192·2 = 402,653,184 bytes, and v, 128 × 128 wide, 4096·128·128·2 = 134,217,728 bytes, are no
  longer kept: 536,870,912 bytes less.
- ``moe_act`` (the experts' SwiGLU re-run): the activation's output, T·k·f_e·2 = 4096·8·2048·2 = 134,217,728 bytes.
- Llama 3.1 8B dense layer under FP8: the qkv input (4096·4096·2), the wo input (4096·4096·2), the MLP input
  (4096·4096·2) and the fc2 input (a third of 3·4096·14336·2) are kept at one byte instead of two:
  3·16,777,216 + 58,720,256 = 109,051,904 bytes less.
"""

from __future__ import annotations

import pytest

from app.domain.estimator.activations import layer_activation_bytes
from app.domain.estimator.compute import GemmRates, layer_times
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.plan import (
    Framework,
    MoeDispatcher,
    Plan,
    Precision,
    Recompute,
    Sharding,
    plan_violations,
)
from app.domain.estimator.validation import run_plan
from app.domain.export.document import build_plan_document
from app.domain.export.megatron import megatron_args

SHAPE = dict(micro_batch=1, seq_len=4096, tp=1, framework_style="megatron", recompute=Recompute.selective)


def test_mla_up_proj_and_moe_act_drop_their_tensors(catalog) -> None:
    arch = catalog.architecture("deepseek-v3")
    core = layer_activation_bytes(arch, "moe", **SHAPE).saved_bytes
    up = layer_activation_bytes(
        arch, "moe", **SHAPE, recompute_modules=frozenset({"core_attn", "mla_up_proj"})
    )
    act = layer_activation_bytes(arch, "moe", **SHAPE, recompute_modules=frozenset({"core_attn", "moe_act"}))
    assert core - up.saved_bytes == 536_870_912
    assert core - act.saved_bytes == 134_217_728
    assert (
        up.peak_extra_bytes > layer_activation_bytes(arch, "moe", **SHAPE).peak_extra_bytes
    )  # re-materialised
    # the whole MoE block checkpointed keeps its input only: less than any of the above
    moe = layer_activation_bytes(arch, "moe", **SHAPE, recompute_modules=frozenset({"moe"}))
    assert moe.saved_bytes < act.saved_bytes and "experts" not in moe.by_component


def test_fp8_keeps_linear_inputs_at_one_byte(catalog) -> None:
    arch = catalog.architecture("llama3.1-8b")
    bf16 = layer_activation_bytes(arch, "dense", **SHAPE).saved_bytes
    fp8 = layer_activation_bytes(arch, "dense", **SHAPE, fp8_linear_inputs=True).saved_bytes
    assert bf16 - fp8 == 109_051_904
    torch = {**SHAPE, "framework_style": "torch"}  # eager PyTorch keeps 16-bit inputs (torchao's own casts)
    assert layer_activation_bytes(arch, "dense", **torch, fp8_linear_inputs=True).saved_bytes == (
        layer_activation_bytes(arch, "dense", **torch).saved_bytes
    )


def _plan(**kw) -> Plan:
    base = dict(pp=8, vpp=2, dp=32, ep=32, global_batch=4096, seq_len=4096, recompute=Recompute.selective,
                sharding=Sharding.megatron_distopt, framework=Framework.megatron, precision=Precision.fp8,
                moe_dispatcher=MoeDispatcher.deepep, moe_a2a_overlap=True)  # fmt: skip
    return Plan(**{**base, **kw})


def test_recompute_time_adds_each_modules_forward(catalog) -> None:
    """mla_up_proj re-runs the two up-projection GEMMs: (T × a·d_qk × q_lora) and (T × a·(d_nope+d_v) × kv_lora)."""
    arch = catalog.architecture("deepseek-v3")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    core = layer_times(arch, "moe", _plan(), cluster).recompute_s
    up = layer_times(arch, "moe", _plan(recompute_modules=("core_attn", "mla_up_proj")), cluster).recompute_s
    rates = GemmRates.of(cluster, Precision.fp8)
    gemms = rates.seconds(4096, 128 * 192, arch.q_lora_rank) + rates.seconds(
        4096, 128 * 256, arch.kv_lora_rank
    )
    assert up - core == pytest.approx(gemms)
    # the "moe" module repeats the layer's dispatch and combine too
    moe = estimate(arch, cluster, _plan(recompute_modules=("moe",)))
    assert moe.step.ep_exposed_s > estimate(arch, cluster, _plan()).step.ep_exposed_s


def test_nvidias_deepseek_recipe_fits_where_it_ran(catalog) -> None:
    """256 B200, EP 32 across four nodes, NVIDIA's 26.04.01 recipe (mla_up_proj + mlp, FP8): within 2 % of the
    HBM (it ran); with capplan's old reading (attention core only, 16-bit inputs) 258 GiB, 44 % over."""
    runs = {r.slug: r for r in catalog.published_runs}
    plan, _ = run_plan(runs["nemo260401-deepseek-v3-b200-256gpu-fp8"])
    assert [m.value for m in plan.recompute_modules] == ["mla_up_proj", "mlp"]
    arch = catalog.architecture("deepseek-v3")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    est = estimate(arch, cluster, plan)
    assert est.peak_memory_bytes < 1.02 * est.usable_memory_bytes


def test_rules_and_export(catalog) -> None:
    arch = catalog.architecture("deepseek-v3")
    facts = dict(n_layers=arch.n_layers, n_heads=arch.n_heads, n_kv_heads=arch.n_kv_heads, n_experts=arch.n_experts,
                 gpus=256, gpus_per_node=8, nvlink_domain_size=8)  # fmt: skip
    codes = {
        v.code for v in plan_violations(_plan(recompute=Recompute.none, recompute_modules=("mlp",)), **facts)
    }
    assert "recompute-modules-without-selective" in codes
    fsdp = _plan(framework=Framework.fsdp2, sharding=Sharding.fsdp_full, pp=1, vpp=1, dp=256, moe_a2a_overlap=False,
                 moe_dispatcher=MoeDispatcher.alltoall, recompute_modules=("mlp",))  # fmt: skip
    assert "fsdp2-recompute-modules" in {v.code for v in plan_violations(fsdp, **facts)}
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="b200", gpus=256)
    plan = _plan(recompute_modules=("mlp", "mla_up_proj"))
    doc = build_plan_document(arch=arch, node=cluster.node, fabric=cluster.scale_out_fabric,
                              estimate=estimate(arch, cluster, plan), preset="deepseek-v3", hf_config=None)  # fmt: skip
    argv = megatron_args(doc)
    at = argv.index("--recompute-modules")
    assert argv[at + 1 : at + 3] == ["mla_up_proj", "mlp"]  # separate words, in Megatron's order
    assert argv[argv.index("--recompute-granularity") + 1] == "selective"
