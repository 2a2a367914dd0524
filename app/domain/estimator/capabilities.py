"""What each training framework can run: the framework part of the plan rules' table (``rules.table()``).

Every rule here is a combination of plan features that a framework's own code refuses at start-up, with the
consumer's message, the source it was read from, and how to get to the nearest plan it accepts. Like every rule
of :mod:`app.domain.estimator.rules`, the predicates read :class:`~app.domain.estimator.rules.Facts` with
comparisons and ``&``/``|`` only, so one rule evaluates a single plan and the search's whole grid alike; the
search reads them through ``rules.rule_masks``, plan validation through :func:`capability_violations`:

* :func:`capability_violations` — the rules a :class:`~app.domain.plan.Plan` breaks for a framework, as
  :class:`~app.domain.plan.Violation` whose fix names the nearest runnable plan (plan validation once the plan
  rules pass, and export for the format's framework);
* :func:`nearest_runnable` — the plan with each broken rule's fix applied (named in errors).

Sharding is seen through what the framework's exporter writes for it: *replicated* (DDP, ZeRO-0),
*optimizer-sharded only* (ZeRO-1/2 as Megatron's distributed optimizer, ``megatron-distopt``), *gradients
sharded* (ZeRO-2 and up, FSDP), *parameters sharded* (ZeRO-3, FSDP, HSDP). The sources are the consumers'
releases capplan exports for (README, "Export and launch"); ``scripts/check_exports`` runs the real ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.domain.estimator.plan import (
    CPCommType,
    Fp8Recipe,
    Framework,
    MoeDispatcher,
    Optimizer,
    Plan,
    Precision,
    Recompute,
    Sharding,
    Violation,
    moe_a2a_overlap_runs,
)
from app.domain.estimator.rules import Context, Facts, Rule, no, plan_facts

MEGATRON_SOURCE = (
    "Megatron-LM core_v0.16.1 megatron/training/arguments.py validate_args; megatron-core 0.16.1"
)
DEEPSPEED_SOURCE = "DeepSpeed 0.19.8 deepspeed/runtime/pipe/engine.py PipelineEngine.__init__"
TORCHTITAN_SOURCE = "torchtitan 0.3.0 with torch 2.13 torch/distributed/pipelining/schedules.py"


def _sharding(plan: Plan, framework: Framework, *, optimizer_only: bool) -> Plan:
    """The framework's sharding that keeps the plan's memory savings as far as the rule allows."""
    if framework is Framework.deepspeed:
        return replace_plan(plan, sharding=Sharding.zero1)
    if framework is Framework.megatron:
        return replace_plan(plan, sharding=Sharding.megatron_distopt)
    return replace_plan(plan, sharding=Sharding.fsdp_full if not optimizer_only else Sharding.ddp)


def replace_plan(plan: Plan, **changes: Any) -> Plan:
    data = plan.model_dump()
    data.update(changes)
    if data.get("sharding") is not Sharding.fsdp_hybrid:
        data["shard_group_size"] = None
    return Plan.model_validate(data)


def _fold_cp_into_dp(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, cp=1, dp=plan.dp * plan.cp)


def _fold_ep(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, ep=1)


def _no_interleave(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, vpp=1)


def _smaller_micro_batch(plan: Plan, framework: Framework) -> Plan:
    """The largest micro-batch giving at least pp micro-batches per step (1 when none does)."""
    per_rank = plan.global_batch // plan.dp
    for mb in range(plan.micro_batch, 0, -1):
        if per_rank % mb == 0 and per_rank // mb >= plan.pp:
            return replace_plan(plan, micro_batch=mb)
    return replace_plan(plan, micro_batch=1)


def _seq_multiple(plan: Plan, framework: Framework) -> Plan:
    """The next sequence length torchtitan can split over tp (sequence parallel) and 2·cp."""
    unit = plan.tp * (2 * plan.cp if plan.cp > 1 else 1)
    return replace_plan(plan, seq_len=-(-plan.seq_len // unit) * unit)


def _expert_tp_as_tp(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, expert_tp=None)


def _no_mtp(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, mtp_layers=0, pipeline_layout=None)


def _no_layout(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, pipeline_layout=None)


def _layer_recompute(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, recompute=Recompute.selective)


def _bf16(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, precision=Precision.bf16)


def _fp8(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, precision=Precision.fp8)


def _adam(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, optimizer=Optimizer.adamw)


def _alltoall(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, moe_dispatcher=MoeDispatcher.alltoall)


def _ring_cp(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, cp_comm_type=CPCommType.p2p)


def _no_a2a_overlap(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, moe_a2a_overlap=False)


def _dropless(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, moe_capacity_factor=None, moe_pad_to_capacity=False)


def _no_pad(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, moe_pad_to_capacity=False)


def _no_tp_overlap(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, tp_comm_overlap=False)


def _with_sequence_parallel(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, sequence_parallel=True)


def _compiled(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, fused_kernels=True)


def _no_fp8_attention(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, fp8_attention=False)


def _framework_recipe(plan: Plan, framework: Framework) -> Plan:
    """The framework's own FP8 recipe (``auto``: plan.default_fp8_recipe)."""
    return replace_plan(plan, fp8_recipe=Fp8Recipe.auto)


# Fp8Recipe codes as the rules' Facts carry them
_DELAYED, _ROWWISE, _BLOCKWISE = Fp8Recipe.delayed.code, Fp8Recipe.rowwise.code, Fp8Recipe.blockwise.code


def _default_modules(plan: Plan, framework: Framework) -> Plan:
    return replace_plan(plan, recompute_modules=None)


def _refusal(
    framework: Framework, code: str, field: str, message: str, fix: str, source: str,
    refuses: Callable[[Facts], Any], nearest: Callable[[Plan, Framework], Plan],
) -> Rule:  # fmt: skip
    """A framework rule of the table: reason and message name the framework; the fix is written per plan (with
    the nearest runnable plan) by :func:`capability_violations`."""
    text = f"{framework.value}: {message}"
    return Rule(
        code, field, text, refuses, lambda f: text, lambda f: fix, frameworks=(framework,), source=source,
        nearest=nearest,
    )  # fmt: skip


def _megatron_only(
    code: str, field: str, lacks: str, fix: str, refuses: Callable[[Facts], Any],
    nearest: Callable[[Plan, Framework], Plan],
) -> tuple[Rule, ...]:  # fmt: skip
    """A plan feature only Megatron-Core runs, refused by torchtitan and by DeepSpeed: ``"<release> <lacks>"``."""
    return tuple(
        _refusal(fw, f"{fw.value}-{code}", field, f"{release} {lacks}", fix, source, refuses, nearest)
        for fw, release, source in (
            (Framework.fsdp2, "torchtitan 0.3.0", TORCHTITAN_SOURCE),
            (Framework.deepspeed, "DeepSpeed 0.19.8", DEEPSPEED_SOURCE),
        )
    )


def _zero1(plan: Plan, fw: Framework) -> Plan:
    return _sharding(plan, fw, optimizer_only=True)


CAPABILITIES: tuple[Rule, ...] = (
    *(
        _refusal(
            fw, f"{fw.value}-selective-op", "recompute",
            f"{fw.value} has no per-op selective activation checkpointing (torchtitan's selective_ac_option = "
            "'op'); it recomputes whole layers or, selectively, the attention core",
            "use selective (attention core) or full", MEGATRON_SOURCE if fw is Framework.megatron else DEEPSPEED_SOURCE,
            lambda f: f.selective_op, _layer_recompute,
        )
        for fw in (Framework.megatron, Framework.deepspeed)
    ),
    _refusal(
        Framework.deepspeed, "deepspeed-pp-zero", "sharding",
        "DeepSpeed's pipeline engine refuses ZeRO-2/3: 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
        "parallelism'", "use zero1 (or ddp) with pp > 1, or pp = 1", DEEPSPEED_SOURCE,
        lambda f: (f.pp > 1) & f.shards_grads, _zero1,
    ),
    _refusal(
        Framework.deepspeed, "deepspeed-interleaving", "vpp",
        "DeepSpeed's pipeline engine has one schedule (1F1B): no interleaved virtual stages",
        "set vpp = 1", DEEPSPEED_SOURCE, lambda f: f.vpp > 1, _no_interleave,
    ),
    _refusal(
        Framework.deepspeed, "deepspeed-context-parallel", "cp",
        "DeepSpeed has no ring context parallelism (its Ulysses sequence parallelism splits heads, not the "
        "causal ring capplan estimates)", "set cp = 1 (its GPUs join dp)", DEEPSPEED_SOURCE,
        lambda f: f.cp > 1, _fold_cp_into_dp,
    ),
    _refusal(
        Framework.deepspeed, "deepspeed-offload-stage0", "offload",
        "DeepSpeed offloads the optimizer (ZeRO-Offload) only with ZeRO stage 1 or more",
        "use zero1 or higher with optimizer-cpu offload", DEEPSPEED_SOURCE,
        lambda f: f.offload_optimizer & f.replicated, _zero1,
    ),
    _refusal(
        Framework.megatron, "megatron-fsdp2-pp", "sharding",
        "Megatron-LM: '--use-torch-fsdp2 is not supported with pipeline parallelism'",
        "use megatron-distopt with pp > 1, or pp = 1", MEGATRON_SOURCE,
        lambda f: f.shards_params & (f.pp > 1), _zero1,
    ),
    _refusal(
        Framework.megatron, "megatron-fsdp2-ep", "sharding",
        "Megatron-LM: '--use-torch-fsdp2 is not supported with expert parallelism'",
        "use megatron-distopt with ep > 1, or ep = 1", MEGATRON_SOURCE,
        lambda f: f.shards_params & (f.ep > 1), _zero1,
    ),
    _refusal(
        Framework.fsdp2, "torchtitan-expert-tp", "expert_tp",
        "torchtitan 0.3.0 has no expert tensor parallelism: its EP borrows ranks from FSDP and TP "
        "(efsdp = dp_shard·cp·tp / ep), every expert whole on one GPU", "leave expert_tp empty (= 1)",
        "torchtitan 0.3.0 torchtitan/config/configs.py ParallelismConfig.expert_parallel_degree",
        lambda f: f.etp_given & (f.etp != 1), _expert_tp_as_tp,
    ),
    _refusal(
        Framework.deepspeed, "deepspeed-expert-tp", "expert_tp",
        "DeepSpeed-MoE has no expert tensor-parallel degree of its own: its experts follow the model's tensor "
        "parallelism", "leave expert_tp empty (= tp), or use framework megatron", DEEPSPEED_SOURCE,
        lambda f: f.etp_given & (f.etp != f.tp), _expert_tp_as_tp,
    ),
    *(
        _refusal(
            framework, f"{framework.value}-mtp", "mtp_layers",
            "multi-token prediction is modelled as Megatron-Core trains it (--mtp-num-layers, the modules with the "
            f"loss on the last stage); capplan's {framework.value} export has no such setting",
            "set mtp_layers to 0, or use framework megatron", f"capplan's {framework.value} export (no MTP setting)",
            lambda f: f.mtp > 0, _no_mtp,
        )
        for framework in (Framework.fsdp2, Framework.deepspeed)
    ),
    *(
        _refusal(
            framework, f"{framework.value}-pipeline-layout", "pipeline_layout",
            "a pipeline layout string is Megatron-Core's --pipeline-model-parallel-layout; this framework splits "
            "the layers its own way (capplan's even split)",
            "leave pipeline_layout empty, or use framework megatron",
            f"capplan's {framework.value} export (its own pipeline split)",
            lambda f: f.layout_given, _no_layout,
        )
        for framework in (Framework.fsdp2, Framework.deepspeed)
    ),
    _refusal(
        Framework.megatron, "megatron-fsdp2-fp16", "precision",
        "Megatron-LM: '--use-torch-fsdp2 not supported with fp16 yet'",
        "use bf16 with fsdp-full, or megatron-distopt", MEGATRON_SOURCE,
        lambda f: f.shards_params & f.fp16, _bf16,
    ),
    _refusal(
        Framework.megatron, "megatron-fsdp2-tied", "sharding",
        "Megatron-LM: '--use-torch-fsdp2 requires --untie-embeddings-and-output-weights' (this model ties them)",
        "use megatron-distopt", MEGATRON_SOURCE,
        lambda f: f.shards_params & f.tied_embeddings, _zero1,
    ),
    _refusal(
        Framework.megatron, "megatron-offload-distopt", "offload",
        "Megatron-LM: optimizer CPU offload needs --use-precision-aware-optimizer, which is 'only supported with "
        "distributed optimizer'", "use megatron-distopt with optimizer-cpu offload", MEGATRON_SOURCE,
        lambda f: f.offload_optimizer & (f.replicated | f.shards_params), _zero1,
    ),
    _refusal(
        Framework.megatron, "megatron-offload-adam", "optimizer",
        "Megatron-LM: '--use-precision-aware-optimizer only supported with adam' (optimizer CPU offload)",
        "use adamw with optimizer-cpu offload", MEGATRON_SOURCE,
        lambda f: f.offload_optimizer & f.sgd, _adam,
    ),
    _refusal(
        Framework.megatron, "megatron-a2a-overlap", "moe_a2a_overlap",
        "Megatron-Core: overlap_moe_expert_parallel_comm needs expert parallelism, "
        "virtual_pipeline_model_parallel_size when pp > 1, no full recomputation and a bf16/fp16 model",
        "turn the all-to-all overlap off, or use ep > 1 with vpp > 1 (when pp > 1) and selective recompute",
        "megatron-core 0.16.1 TransformerConfig.__post_init__",
        lambda f: f.a2a_overlap & (moe_a2a_overlap_runs(f.ep, f.pp, f.vpp, f.full_recompute, f.fp32) == False),  # noqa: E712
        _no_a2a_overlap,
    ),
    *_megatron_only(
        "moe-dispatcher", "moe_dispatcher",
        "has no DeepEP/HybridEP token dispatcher (Megatron-Core's flex dispatcher): it dispatches MoE tokens with a "
        "plain all-to-all", "use the alltoall dispatcher, or framework megatron", lambda f: f.dedup_dispatcher,
        _alltoall,
    ),
    *_megatron_only(
        "cp-all-gather", "cp_comm_type",
        "has no all-gather context parallelism (Transformer Engine's cp_comm_type 'all_gather'; torchtitan's "
        "'allgather' rotation is PyTorch's ring)", "use cp_comm_type p2p, or framework megatron",
        lambda f: f.cp_gather & (f.cp > 1), _ring_cp,
    ),
    _refusal(
        Framework.fsdp2, "torchtitan-moe-capacity", "moe_capacity_factor",
        "torchtitan 0.3.0's MoE routes dropless (token-choice top-k, no per-expert capacity): it drops no tokens",
        "leave moe_capacity_factor empty, or use framework megatron", TORCHTITAN_SOURCE,
        lambda f: f.capacity > 0, _dropless,
    ),
    _refusal(
        Framework.megatron, "megatron-pad-deepep", "moe_pad_to_capacity",
        "Megatron-Core: 'Flex token dispatcher with deepep backend does not support "
        "moe_pad_expert_input_to_capacity'", "turn padding off, or use the alltoall or hybridep dispatcher",
        "megatron-core 0.16.1 TransformerConfig.__post_init__",
        lambda f: f.pad_capacity & f.deepep, _no_pad,
    ),
    *_megatron_only(
        "a2a-overlap", "moe_a2a_overlap",
        "does not overlap the MoE all-to-alls with another micro-batch's compute (a Megatron-Core feature)",
        "turn the all-to-all overlap off, or use framework megatron", lambda f: f.a2a_overlap, _no_a2a_overlap,
    ),
    _refusal(
        Framework.megatron, "megatron-tp-overlap-sp", "tp_comm_overlap",
        "Megatron-LM: 'Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is "
        "enabled' (--tp-comm-overlap)", "turn sequence parallelism on, or TP communication overlap off",
        MEGATRON_SOURCE, lambda f: f.tp_overlap_asked & (f.tp > 1) & no(f.sequence_parallel),
        _with_sequence_parallel,
    ),
    _refusal(
        Framework.fsdp2, "torchtitan-async-tp-compile", "tp_comm_overlap",
        "torchtitan: 'Async TP requires 'model' in --compile.components and --compile.enable' (async TP is a "
        "torch.compile pass)", "compile the model (fused kernels), or turn TP communication overlap off",
        "torchtitan 0.3.0 torchtitan/config/configs.py CompileConfig.__post_init__",
        lambda f: f.tp_overlap_asked & (f.tp > 1) & no(f.compiled), _compiled,
    ),
    _refusal(
        Framework.deepspeed, "deepspeed-tp-overlap", "tp_comm_overlap",
        "DeepSpeed has no TP communication overlap (its tensor parallelism, Megatron-DeepSpeed's or AutoTP, "
        "all-reduces on the critical path)", "turn TP communication overlap off, or use framework megatron",
        DEEPSPEED_SOURCE, lambda f: f.tp_overlap_asked & (f.tp > 1), _no_tp_overlap,
    ),
    _refusal(
        Framework.fsdp2, "fsdp2-nvfp4", "precision",
        "capplan models NVFP4 as Transformer Engine runs it under Megatron-Core (--fp4-format e2m1); torchtitan "
        "0.3.0's NVFP4 converter (TorchAO's experimental nvfp4_training kernels, weights re-quantized every "
        "micro-batch) is not modelled", "use fp8 or bf16, or framework megatron",
        "torchtitan 0.3.0 torchtitan/components/quantization/nvfp4.py", lambda f: f.nvfp4, _fp8,
    ),
    _refusal(
        Framework.deepspeed, "deepspeed-nvfp4", "precision",
        "DeepSpeed has no precision switch beyond fp16/bf16 (FP8 or NVFP4 GEMMs come from Transformer Engine in the "
        "model code); capplan models NVFP4 only as Megatron-Core configures it (--fp4-format e2m1)",
        "use fp8 or bf16, or framework megatron", "DeepSpeed 0.19.8 config: fp16 and bf16 blocks only",
        lambda f: f.nvfp4, _fp8,
    ),
    *_megatron_only(
        "fp8-attention", "fp8_attention",
        "has no FP8 attention (Transformer Engine's fp8_dot_product_attention, which megatron-core turns on with "
        "TransformerConfig.fp8_dot_product_attention): its attention runs in 16 bits", "turn fp8_attention off, or use framework "
        "megatron", lambda f: f.fp8_attention, _no_fp8_attention,
    ),
    *(
        _refusal(
            fw, f"{fw.value}-fp8-rowwise", "fp8_recipe",
            "runs FP8 through Transformer Engine, whose recipes scale per tensor (delayed, current), per block "
            "(1x128 / 128x128) or per 32 values (MXFP8): it has no row-wise recipe (torchao's)",
            "use fp8_recipe tensorwise, delayed, mxfp8 or blockwise, or framework fsdp2",
            MEGATRON_SOURCE + " --fp8-recipe {tensorwise,delayed,mxfp8,blockwise,custom}" if fw is Framework.megatron
            else "Transformer Engine recipes (TE-FP8-RECIPES)",
            lambda f: f.fp8_recipe == _ROWWISE, _framework_recipe,
        )
        for fw in (Framework.megatron, Framework.deepspeed)
    ),
    _refusal(
        Framework.fsdp2, "fsdp2-fp8-te-recipe", "fp8_recipe",
        "runs FP8 through torchao, which scales dynamically (tensorwise, rowwise, MXFP8): no delayed scaling and no "
        "1x128 / 128x128 block scaling (Transformer Engine's recipes)",
        "use fp8_recipe tensorwise, rowwise or mxfp8, or framework megatron",
        "torchtitan 0.3.0 torchtitan/components/quantization/float8.py and mx.py (TORCHTITAN-FLOAT8)",
        lambda f: (f.fp8_recipe == _DELAYED) | (f.fp8_recipe == _BLOCKWISE), _framework_recipe,
    ),
    *_megatron_only(
        "recompute-modules", "recompute_modules",
        "has no per-module selective recompute like Megatron's --recompute-modules",
        "leave recompute_modules empty, or use framework megatron", lambda f: f.modules_named, _default_modules,
    ),
    _refusal(
        Framework.fsdp2, "torchtitan-pp-microbatches", "micro_batch",
        "torch.distributed.pipelining: 'Number of microbatches must be greater than or equal to the number of "
        "stages' (pipeline ranks)", "use a smaller micro-batch or a larger global batch", TORCHTITAN_SOURCE,
        lambda f: (f.pp > 1) & (f.micro_batches < f.pp), _smaller_micro_batch,
    ),
    _refusal(
        Framework.fsdp2, "torchtitan-seq-split", "seq_len",
        "torchtitan: the sequence length must divide by tp (its TP always shards norms over the sequence) "
        "times 2·cp", "use a sequence length that is a multiple of tp·2·cp", TORCHTITAN_SOURCE,
        lambda f: f.seq_len % (f.tp * ((f.cp > 1) * (2 * f.cp - 1) + 1)) != 0, _seq_multiple,
    ),
)  # fmt: skip


def capabilities_for(framework: Framework) -> tuple[Rule, ...]:
    return tuple(c for c in CAPABILITIES if framework in c.frameworks)


def broken_capabilities(
    plan: Plan, framework: Framework | None = None, *, tied_embeddings: bool = False
) -> list[Rule]:
    """The rules of ``framework`` (default: the plan's) that ``plan`` breaks."""
    fw = framework or plan.framework
    facts = plan_facts(plan, Context(tied_embeddings=tied_embeddings))
    return [c for c in capabilities_for(fw) if bool(c.refuses(facts))]


def nearest_runnable(
    plan: Plan, framework: Framework | None = None, *, tied_embeddings: bool = False
) -> Plan | None:
    """The plan with the fix of every broken rule applied, until none is broken (None if that fails)."""
    fw = framework or plan.framework
    current = plan
    for _ in range(len(CAPABILITIES) + 1):
        broken = broken_capabilities(current, fw, tied_embeddings=tied_embeddings)
        if not broken:
            return current
        try:
            current = broken[0].nearest(current, fw)
        except ValueError:
            return None
    return None


def describe_changes(old: Plan, new: Plan) -> str:
    """``sharding zero2 → zero1, vpp 4 → 1`` — the fields that differ."""
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    parts = [f"{k} {a[k]} → {b[k]}" for k in a if a[k] != b[k] and k != "shard_group_size"]
    return ", ".join(parts) or "no change"


def capability_violations(
    plan: Plan, framework: Framework | None = None, *, tied_embeddings: bool = False
) -> list[Violation]:
    """Each broken rule as a Violation whose fix names the nearest plan the framework runs."""
    fw = framework or plan.framework
    broken = broken_capabilities(plan, fw, tied_embeddings=tied_embeddings)
    if not broken:
        return []
    nearest = nearest_runnable(plan, fw, tied_embeddings=tied_embeddings)
    nearest_text = (
        f"; nearest runnable plan: {describe_changes(plan, nearest)}" if nearest is not None else ""
    )
    facts = plan_facts(plan, Context(tied_embeddings=tied_embeddings))
    return [
        Violation(field=c.field, code=c.code, message=c.message(facts), fix=f"{c.fix(facts)}{nearest_text}")
        for c in broken
    ]
