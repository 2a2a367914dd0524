"""The plan rules: one table of what makes a plan invalid, for one plan and for the search's whole grid.

Each :class:`Rule` names the plan field it blames, a stable ``code``, a short ``reason`` (the search's
"rejected because" key), a predicate ``refuses`` over :class:`Facts`, and the message and fix shown for one
plan. The predicates use comparisons, arithmetic (``%``, ``//``, ``*``) and ``&``/``|`` only, with :func:`no`
for negation (Python's ``~True`` is -2), so the same rule reads Python numbers (one plan: ``bool`` of the
result) and numpy arrays (the search grid: a mask). The same :func:`facts` builder derives both kinds of
Facts, so what a rule reads cannot differ between the two.

Users of the table:

* :func:`app.domain.estimator.plan.plan_violations` — every broken plan rule as a ``Violation``; the framework
  rules (``capabilities``) only when no plan rule is broken, with the nearest plan the framework runs;
* :func:`rule_masks` — (reason, mask of refused grid points) in table order, for ``search.space``: the search
  charges each grid point to its first failing rule.

The table is the plan rules below followed by the framework refusals of
:mod:`app.domain.estimator.capabilities` (:func:`table`). Order matters for the search's counts only.
``structural`` rules mark grid points that are not plans at all (degrees that do not multiply to the GPU count,
more pipeline chunks than layers, interleaving without a pipeline); the search skips them without counting.

HSDP with a shard group equal to dp (``hsdp-one-replica``) is refused: one replica is fully sharded data
parallelism, and fsdp-full says so (both the plan form and the search, which used to disagree).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from app.domain.estimator.pipeline import layout_problem
from app.domain.estimator.plan import (
    CPCommType,
    Framework,
    MoeDispatcher,
    Offload,
    Optimizer,
    Plan,
    Precision,
    Recompute,
    Sharding,
    Violation,
)

# Enumerations as integer codes: Facts hold indices into these (scalars for one plan, arrays for the grid).
SHARDINGS = list(Sharding)
OFFLOADS = list(Offload)
RECOMPUTES = list(Recompute)

_SHARDING_CODE = {s: i for i, s in enumerate(SHARDINGS)}
_OFFLOAD_CODE = {o: i for i, o in enumerate(OFFLOADS)}
_RECOMPUTE_CODE = {r: i for i, r in enumerate(RECOMPUTES)}

# What each framework's sharding maps to (the exporters write these; the search lays out exactly these).
SHARDINGS_BY_FRAMEWORK = {
    Framework.fsdp2: (Sharding.ddp, Sharding.fsdp_full, Sharding.fsdp_grad_op, Sharding.fsdp_hybrid),
    Framework.megatron: (Sharding.ddp, Sharding.megatron_distopt, Sharding.fsdp_full),
    Framework.deepspeed: (Sharding.ddp, Sharding.zero1, Sharding.zero2, Sharding.zero3),
}
FRAMEWORK_LABELS = {
    Framework.fsdp2: "FSDP2",
    Framework.megatron: "Megatron-LM",
    Framework.deepspeed: "DeepSpeed",
}
_SHARDING_FIXES = {
    Framework.fsdp2: "use ddp, fsdp-full, fsdp-grad-op or fsdp-hybrid",
    Framework.megatron: "use ddp, megatron-distopt or fsdp-full (Megatron FSDP)",
    Framework.deepspeed: "use ddp, zero1, zero2 or zero3",
}


def no(x: Any) -> Any:
    """Logical not for a bool and a bool array alike (``~`` on a Python bool is an integer)."""
    return x ^ True


_INTEGER = (int, np.integer)


def _lookup(values: tuple, index: Any) -> Any:
    """``values[index]`` for an integer code (a Python value) and for an array of codes (an array)."""
    if isinstance(index, _INTEGER):
        return values[index]
    return np.asarray(values)[index]


def _at_least_1(x: Any) -> Any:
    return max(x, 1) if isinstance(x, _INTEGER) else np.maximum(x, 1)


_SHARDS_OPTIMIZER = tuple(s.shards_optimizer for s in SHARDINGS)
_SHARDS_GRADS = tuple(s.shards_grads for s in SHARDINGS)
_SHARDS_PARAMS = tuple(s.shards_params for s in SHARDINGS)
_HYBRID = tuple(s is Sharding.fsdp_hybrid for s in SHARDINGS)
_NO_OFFLOAD, _OPTIMIZER_CPU, _PARAMS_CPU, _NVME = (
    OFFLOADS.index(o) for o in (Offload.none, Offload.optimizer_cpu, Offload.params_cpu, Offload.nvme)
)
_SELECTIVE_OP, _FULL = RECOMPUTES.index(Recompute.selective_op), RECOMPUTES.index(Recompute.full)
_SELECTIVE = RECOMPUTES.index(Recompute.selective)
_OFFERED = {fw: tuple(s in offered for s in SHARDINGS) for fw, offered in SHARDINGS_BY_FRAMEWORK.items()}


class Context(NamedTuple):  # a named tuple: built once per validated plan, cheaper than a frozen dataclass
    """The model and cluster a plan is checked against. The framework rules read only ``tied_embeddings``; the
    others are None when only those are evaluated (``capabilities``)."""

    gpus: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    n_experts: int | None = None
    gpus_per_node: int | None = None
    nvlink_domain: int | None = None
    allow_tp_across_nodes: bool = False
    tied_embeddings: bool = False
    mla: bool = False  # multi-latent attention (Megatron's mla_up_proj recompute needs it)
    # False: the framework's refusals are not checked (a published run on a stack they do not describe)
    capabilities: bool = True


@dataclass(slots=True)  # read-only by convention: frozen would cost a third of one plan's validation
class Facts:
    """What the rules read: numbers and bools for one plan, numpy arrays (broadcastable) for the search grid.
    Built by :func:`facts` only."""

    # the plan (sharding, offload and recompute as indices into SHARDINGS, OFFLOADS, RECOMPUTES)
    tp: Any
    pp: Any
    vpp: Any
    dp: Any  # 0 on grid points whose tp·cp·pp does not divide the GPUs
    cp: Any
    ep: Any
    etp: Any  # the routed experts' tensor-parallel degree (Plan.etp; tp unless MoE parallel folding)
    etp_given: Any  # Plan.expert_tp set by the user (None: the framework's default)
    micro_batch: Any
    global_batch: Any
    seq_len: Any
    sharding: Any
    offload: Any
    recompute: Any
    recompute_layers: Any  # -1: every layer (None on the plan)
    shard_group: Any  # 0: none given
    sequence_parallel: Any
    framework: Framework
    fp16: Any
    sgd: Any
    fp32: Any
    nvfp4: Any  # NVFP4 GEMMs (Plan.precision nvfp4)
    fp8_attention: Any  # attention in FP8 (Plan.fp8_attention)
    fp8_recipe: Any  # Plan.fp8_recipe as its index (Fp8Recipe.code; 0: auto)
    quantized: Any  # GEMMs below 16 bits: FP8 or NVFP4 (Plan.precision.quantized_gemms)
    dedup_dispatcher: Any  # DeepEP / HybridEP token dispatcher (Plan.moe_dispatcher)
    cp_gather: Any  # all-gather context parallelism asked (Plan.cp_comm_type all_gather)
    a2a_overlap: Any  # MoE all-to-all overlap (Plan.moe_a2a_overlap)
    capacity: Any  # MoE capacity factor (Plan.moe_capacity_factor; 0: dropless)
    pad_capacity: Any  # expert inputs padded to the capacity (Plan.moe_pad_to_capacity)
    deepep: Any  # the DeepEP dispatcher (Megatron's flex dispatcher with the deepep backend)
    tp_overlap_asked: Any  # TP communication overlap asked for explicitly (Plan.tp_comm_overlap is True)
    compiled: Any  # torch.compile / fused kernels (Plan.uses_fused_kernels)
    mtp: Any  # multi-token prediction layers (Plan.mtp_layers)
    layout_why: (
        str  # why Plan.pipeline_layout does not fit ("" when it fits or none is given; the search gives none)
    )
    layout_given: Any  # Plan.pipeline_layout set
    # the model and cluster (Context)
    gpus: int | None
    n_layers: int | None
    n_heads: int | None
    n_kv_heads: int | None
    n_experts: int | None
    gpus_per_node: int | None
    nvlink_domain: int | None
    allow_tp_across_nodes: bool
    tied_embeddings: bool
    # derived by facts()
    per_step: Any  # micro-batch · dp (dp at least 1)
    micro_batches: Any  # per pipeline per step, at least 1 (Plan.micro_batches)
    layers_per_chunk: Any  # ⌈n_layers / (pp·vpp)⌉ (Plan.layers_per_chunk)
    replicated: Any  # DDP: nothing sharded
    shards_grads: Any
    shards_params: Any
    hybrid: Any
    sharding_offered: Any  # by the framework (SHARDINGS_BY_FRAMEWORK)
    group_or_1: Any  # the shard group as a divisor (1 when none)
    offload_any: Any
    offload_optimizer: Any
    offload_params: Any  # params-cpu or nvme
    offload_nvme: Any
    selective_op: Any  # torchtitan's per-op selective activation checkpointing
    full_recompute: Any
    selective: Any  # Megatron-style selective recompute
    modules_named: Any  # recompute_modules given (Megatron's --recompute-modules)
    up_proj_named: Any  # mla_up_proj among them
    moe_modules_named: Any  # moe, moe_act or shared_experts among them
    mla: bool


def facts(
    *, tp: Any, pp: Any, vpp: Any, dp: Any, cp: Any, ep: Any, micro_batch: Any, global_batch: Any, seq_len: Any,
    sharding: Any, offload: Any, recompute: Any, recompute_layers: Any, shard_group: Any, sequence_parallel: Any,
    framework: Framework, fp16: Any, sgd: Any, context: Context, fp32: Any = False, dedup_dispatcher: Any = False,
    a2a_overlap: Any = False, modules_named: Any = False, up_proj_named: Any = False, moe_modules_named: Any = False,
    tp_overlap_asked: Any = False, compiled: Any = False, capacity: Any = 0.0, pad_capacity: Any = False,
    deepep: Any = False, etp: Any = None, etp_given: Any = False, mtp: Any = 0, layout_why: str = "",
    layout_given: Any = False, nvfp4: Any = False, fp8_attention: Any = False, quantized: Any = False,
    fp8_recipe: Any = 0, cp_gather: Any = False,
) -> Facts:  # fmt: skip
    """The one builder of Facts, for a plan's numbers and for the grid's arrays alike (``etp`` None: tp)."""
    per_step = micro_batch * _at_least_1(dp)
    n_layers = context.n_layers
    return Facts(
        tp=tp, pp=pp, vpp=vpp, dp=dp, cp=cp, ep=ep, etp=tp if etp is None else etp, etp_given=etp_given, mtp=mtp,
        layout_why=layout_why, layout_given=layout_given,
        micro_batch=micro_batch, global_batch=global_batch,
        seq_len=seq_len, sharding=sharding, offload=offload, recompute=recompute, recompute_layers=recompute_layers,
        shard_group=shard_group, sequence_parallel=sequence_parallel, framework=framework, fp16=fp16, sgd=sgd,
        fp32=fp32, nvfp4=nvfp4, fp8_attention=fp8_attention, fp8_recipe=fp8_recipe, quantized=quantized, dedup_dispatcher=dedup_dispatcher, cp_gather=cp_gather, a2a_overlap=a2a_overlap, modules_named=modules_named,
        tp_overlap_asked=tp_overlap_asked, compiled=compiled, capacity=capacity, pad_capacity=pad_capacity,
        deepep=deepep, up_proj_named=up_proj_named, moe_modules_named=moe_modules_named, mla=context.mla,
        gpus=context.gpus, n_layers=n_layers, n_heads=context.n_heads, n_kv_heads=context.n_kv_heads,
        n_experts=context.n_experts, gpus_per_node=context.gpus_per_node, nvlink_domain=context.nvlink_domain,
        allow_tp_across_nodes=context.allow_tp_across_nodes, tied_embeddings=context.tied_embeddings,
        per_step=per_step, micro_batches=_at_least_1(global_batch // per_step),
        layers_per_chunk=None if n_layers is None else -(-n_layers // (pp * vpp)),
        replicated=no(_lookup(_SHARDS_OPTIMIZER, sharding)), shards_grads=_lookup(_SHARDS_GRADS, sharding),
        shards_params=_lookup(_SHARDS_PARAMS, sharding), hybrid=_lookup(_HYBRID, sharding),
        sharding_offered=_lookup(_OFFERED[framework], sharding), group_or_1=_at_least_1(shard_group),
        offload_any=offload != _NO_OFFLOAD, offload_optimizer=offload == _OPTIMIZER_CPU,
        offload_params=(offload == _PARAMS_CPU) | (offload == _NVME), offload_nvme=offload == _NVME,
        selective_op=recompute == _SELECTIVE_OP, full_recompute=recompute == _FULL, selective=recompute == _SELECTIVE,
    )  # fmt: skip


def plan_facts(plan: Plan, context: Context) -> Facts:
    """The Facts of one plan (Python numbers and bools)."""
    return facts(
        tp=plan.tp, pp=plan.pp, vpp=plan.vpp, dp=plan.dp, cp=plan.cp, ep=plan.ep, micro_batch=plan.micro_batch,
        global_batch=plan.global_batch, seq_len=plan.seq_len, sharding=_SHARDING_CODE[plan.sharding],
        offload=_OFFLOAD_CODE[plan.offload], recompute=_RECOMPUTE_CODE[plan.recompute],
        recompute_layers=-1 if plan.recompute_layers is None else plan.recompute_layers,
        shard_group=plan.shard_group_size or 0, sequence_parallel=plan.sequence_parallel, framework=plan.framework,
        fp16=plan.precision is Precision.fp16, sgd=plan.optimizer is Optimizer.sgd, context=context,
        fp32=plan.precision is Precision.fp32, dedup_dispatcher=plan.moe_dispatcher.dedups_per_node,
        cp_gather=plan.cp_comm_type is CPCommType.all_gather,
        nvfp4=plan.precision is Precision.nvfp4, fp8_attention=plan.fp8_attention, fp8_recipe=plan.fp8_recipe.code,
        quantized=plan.precision.quantized_gemms,
        a2a_overlap=plan.moe_a2a_overlap, modules_named=plan.recompute_modules is not None,
        up_proj_named="mla_up_proj" in (plan.recompute_modules or ()),
        moe_modules_named=bool({"moe", "moe_act", "shared_experts"} & set(plan.recompute_modules or ())),
        tp_overlap_asked=plan.tp_comm_overlap is True, compiled=plan.uses_fused_kernels,
        capacity=plan.moe_capacity_factor or 0.0, pad_capacity=plan.moe_pad_to_capacity,
        deepep=plan.moe_dispatcher is MoeDispatcher.deepep, etp=plan.etp, etp_given=plan.expert_tp is not None,
        mtp=plan.mtp_layers, layout_given=plan.pipeline_layout is not None,
        layout_why=(layout_problem(plan.pipeline_layout, context.n_layers, plan.pp * plan.vpp, plan.mtp_layers) or "")
        if plan.pipeline_layout and context.n_layers else "",
    )  # fmt: skip


Text = Callable[[Facts], str]


@dataclass(frozen=True, slots=True)
class Rule:
    """One way a plan can be invalid: the field blamed, a stable code, the search's short reason, the predicate
    (scalars and arrays alike), and the message and fix for one plan (read the scalar Facts). Framework rules
    (``capabilities``) carry the source they were read from and the move to the nearest plan the framework runs."""

    code: str
    field: str
    reason: str
    refuses: Callable[[Facts], Any]
    message: Text
    fix: Text
    frameworks: tuple[Framework, ...] = tuple(Framework)
    structural: bool = False  # not a plan at all: the search skips such grid points without counting them
    name: str = ""  # unique in the table (defaults to the code; set where two rules share a code)
    source: str | None = None  # framework rules: the release whose code refuses the plan
    nearest: Callable[[Plan, Framework], Plan] | None = None  # framework rules: the fix, applied

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.code)

    @property
    def capability(self) -> bool:
        """A framework refusal (checked once the plan rules pass), not a rule of the plan itself."""
        return self.source is not None


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]


def _gpu_count_fix(f: Facts) -> str:
    mp = f.tp * f.pp * f.cp
    return f"set dp = {f.gpus // mp}" if f.gpus % mp == 0 else f"choose tp·pp·cp dividing {f.gpus}"


def _hsdp_group_hint(f: Facts) -> str:
    if f.dp == 1:
        return "use fsdp-full (one data-parallel rank has nothing to replicate)"
    group = max(d for d in _divisors(f.dp, min(f.dp - 1, f.gpus_per_node)))
    return f"e.g. {group}"


PLAN_RULES: tuple[Rule, ...] = (
    Rule(
        "gpu-count", "dp", "tp·cp·pp does not divide the GPU count",
        lambda f: f.tp * f.pp * f.dp * f.cp != f.gpus,
        lambda f: f"tp·pp·dp·cp = {f.tp}·{f.pp}·{f.dp}·{f.cp} = {f.tp * f.pp * f.dp * f.cp} ≠ {f.gpus} GPUs",
        _gpu_count_fix, structural=True,
    ),
    Rule(
        "heads-not-divisible", "tp", "attention heads not divisible by tp",
        lambda f: f.n_heads % f.tp != 0,
        lambda f: f"{f.n_heads} attention heads are not divisible by tp={f.tp}",
        lambda f: f"use tp in {_divisors(f.n_heads, min(f.n_heads, 64))}",
    ),
    Rule(
        "kv-heads-not-divisible", "tp", "KV heads neither divide nor are divisible by tp",
        lambda f: (f.n_kv_heads % f.tp != 0) & (f.tp % f.n_kv_heads != 0),
        lambda f: f"{f.n_kv_heads} KV heads neither divide nor are divisible by tp={f.tp}",
        lambda f: f"use tp dividing {f.n_kv_heads} or a multiple of it",
    ),
    Rule(
        "tp-across-nodes", "tp", "tp spans beyond one NVLink domain",
        lambda f: (f.tp > f.nvlink_domain) & no(f.allow_tp_across_nodes),
        lambda f: f"tp={f.tp} spans beyond one NVLink domain of {f.nvlink_domain} GPUs; "
        "every layer's all-reduce would cross the scale-out network",
        lambda f: f"keep tp ≤ {f.nvlink_domain}, or allow TP across nodes explicitly",
    ),
    Rule(
        "pp-exceeds-layers", "pp", "pp exceeds the layers",
        lambda f: f.pp > f.n_layers,
        lambda f: f"pp={f.pp} exceeds the model's {f.n_layers} layers",
        lambda f: f"use pp ≤ {f.n_layers}", structural=True,
    ),
    Rule(
        "chunks-exceed-layers", "vpp", "pp·vpp exceeds the layers",
        # a pipeline layout may give the embedding and the loss stages of their own (Megatron's
        # --account-for-embedding/loss-in-pipeline-split): the layout's own rule checks its stage count
        lambda f: (f.pp <= f.n_layers) & (f.pp * f.vpp > f.n_layers) & no(f.layout_given),
        lambda f: f"pp·vpp = {f.pp * f.vpp} chunks exceed the model's {f.n_layers} layers",
        lambda f: f"use vpp ≤ {f.n_layers // f.pp}, or (Megatron) a pipeline layout whose first and last stages "
        "hold the embedding E and the loss L alone", structural=True,
    ),
    Rule(
        "vpp-without-pp", "vpp", "interleaving (vpp > 1) without pipeline parallelism",
        lambda f: (f.vpp > 1) & (f.pp == 1),
        lambda f: "interleaving (vpp > 1) needs pipeline parallelism",
        lambda f: "set vpp = 1 or pp > 1", structural=True,
    ),
    Rule(
        "batch-not-divisible", "global_batch", "global batch not divisible by micro-batch·dp",
        lambda f: f.global_batch % f.per_step != 0,
        lambda f: f"global batch {f.global_batch} is not divisible by micro-batch·dp = {f.micro_batch}·{f.dp}"
        f" = {f.per_step}",
        lambda f: "use a global batch that is a multiple of "
        f"{f.per_step}, e.g. {max(1, round(f.global_batch / f.per_step)) * f.per_step}",
    ),
    Rule(
        "interleave-microbatches", "global_batch", "interleaving needs micro-batches to be a multiple of pp",
        lambda f: (f.global_batch % f.per_step == 0) & (f.vpp > 1) & (f.micro_batches % f.pp != 0),
        lambda f: f"interleaved schedules need micro-batches per step ({f.micro_batches}) to be a multiple of "
        f"pp={f.pp}",
        lambda f: f"use a global batch that is a multiple of {f.per_step * f.pp}",
    ),
    Rule(
        "seq-not-divisible", "cp", "sequence not divisible by cp",
        lambda f: f.seq_len % f.cp != 0,
        lambda f: f"sequence length {f.seq_len} is not divisible by cp={f.cp}",
        lambda f: "choose cp dividing the sequence length",
    ),
    Rule(
        "cp-load-balance", "cp", "sequence not divisible by 2·cp",
        lambda f: (f.cp > 1) & (f.seq_len % f.cp == 0) & ((f.seq_len // f.cp) % 2 != 0),
        lambda f: "causal context parallelism splits each sequence into 2·cp chunks; "
        f"{f.seq_len} is not divisible by 2·cp = {2 * f.cp}",
        lambda f: "choose cp with seq_len divisible by 2·cp",
    ),
    Rule(
        "recompute-layers-without-full", "recompute_layers", "recompute_layers without full recompute",
        lambda f: (f.recompute_layers >= 0) & no(f.full_recompute),
        lambda f: "recompute_layers counts the layers that recompute fully; it needs recompute = full",
        lambda f: "set recompute = full, or leave recompute_layers empty",
    ),
    Rule(
        "recompute-modules-without-selective", "recompute_modules", "recompute_modules without selective recompute",
        lambda f: f.modules_named & no(f.selective),
        lambda f: "recompute_modules names what selective recompute re-runs; it needs recompute = selective",
        lambda f: "set recompute = selective, or leave recompute_modules empty",
    ),
    Rule(
        "mla-up-proj-without-mla", "recompute_modules", "mla_up_proj on a model without multi-latent attention",
        lambda f: f.up_proj_named & no(f.mla),
        lambda f: "mla_up_proj re-runs the up-projections of multi-latent attention; this model has none (Megatron "
        "refuses it)",
        lambda f: "drop mla_up_proj from recompute_modules",
    ),
    Rule(
        "moe-modules-dense-model", "recompute_modules", "moe, moe_act or shared_experts on a dense model",
        lambda f: f.moe_modules_named & (f.n_experts == 0),
        lambda f: "moe, moe_act and shared_experts recompute parts of MoE layers; this model has none",
        lambda f: "drop them from recompute_modules",
    ),
    Rule(
        "moe-pad-without-capacity", "moe_pad_to_capacity", "padding to capacity without a capacity factor",
        lambda f: f.pad_capacity & (f.capacity <= 0),
        lambda f: "padding expert inputs to capacity needs a capacity factor (Megatron-Core: "
        "'moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity')",
        lambda f: "set moe_capacity_factor (e.g. 1.25), or turn padding off",
    ),
    Rule(
        "moe-capacity-dense-model", "moe_capacity_factor", "a capacity factor on a dense model",
        lambda f: (f.capacity > 0) & (f.n_experts == 0),
        lambda f: "the capacity factor caps the tokens each MoE expert takes; this model has no experts",
        lambda f: "leave moe_capacity_factor empty",
    ),
    Rule(
        "recompute-layers-exceed-chunk", "recompute_layers", "recompute_layers exceeds a pipeline chunk's layers",
        lambda f: f.full_recompute & (f.recompute_layers > f.layers_per_chunk),
        lambda f: f"recompute_layers={f.recompute_layers} exceeds the {f.layers_per_chunk} layers of a pipeline "
        f"chunk ({f.n_layers} layers / pp·vpp = {f.pp * f.vpp})",
        lambda f: f"use recompute_layers ≤ {f.layers_per_chunk}, or leave it empty to recompute every layer",
    ),
    Rule(
        "fp8-attention-precision", "fp8_attention", "FP8 attention without FP8 or NVFP4 linears",
        lambda f: f.fp8_attention & no(f.quantized),
        lambda f: "FP8 attention (Transformer Engine's fp8_dot_product_attention) runs inside an FP8 recipe: it "
        "needs precision fp8 or nvfp4",
        lambda f: "set precision fp8 or nvfp4, or turn fp8_attention off",
    ),
    Rule(
        "fp8-recipe-precision", "fp8_recipe", "an FP8 recipe without FP8 linears",
        lambda f: (f.fp8_recipe != 0) & (no(f.quantized) | f.nvfp4),
        lambda f: "an FP8 recipe says how FP8 tensors are scaled: it needs precision fp8 (NVFP4 is a recipe of its own)",
        lambda f: "set precision fp8, or fp8_recipe auto",
    ),
    Rule(
        "sp-without-tp", "sequence_parallel", "sequence parallelism without tp",
        lambda f: f.sequence_parallel & (f.tp == 1),
        lambda f: "sequence parallelism needs tp > 1",
        lambda f: "turn it off or raise tp",
    ),
    Rule(
        "ep-dense-model", "ep", "expert parallelism on a dense model",
        lambda f: (f.ep > 1) & (f.n_experts == 0),
        lambda f: "expert parallelism needs an MoE model",
        lambda f: "set ep = 1",
    ),
    Rule(
        "experts-not-divisible", "ep", "experts not divisible by ep",
        lambda f: (f.ep > 1) & (f.n_experts > 0) & (f.n_experts % f.ep != 0),
        lambda f: f"{f.n_experts} experts are not divisible by ep={f.ep}",
        lambda f: f"use ep in {_divisors(f.n_experts, min(f.n_experts, 256))}",
    ),
    Rule(
        "pipeline-layout", "pipeline_layout", "a pipeline layout that does not fit the model and plan",
        lambda f: f.layout_why != "",
        lambda f: f.layout_why,
        lambda f: "write one stage per pp·vpp with every transformer layer once, E first, L last and the MTP "
        "layers m with L, or leave it empty for the even split",
    ),
    Rule(
        "expert-tp-dense-model", "expert_tp", "an expert tensor-parallel degree on a dense model",
        lambda f: f.etp_given & (f.n_experts == 0),
        lambda f: "expert_tp applies to the routed experts of an MoE model",
        lambda f: "leave expert_tp empty",
    ),
    Rule(
        "expert-tp-not-dividing-tp", "expert_tp", "expert_tp does not divide tp",
        lambda f: f.etp_given & (f.tp % f.etp != 0),
        lambda f: f"expert_tp={f.etp} must divide tp={f.tp}",
        lambda f: f"use expert_tp in {_divisors(f.tp, f.tp)} (1: MoE parallel folding)",
    ),
    Rule(
        "expert-tp-without-sp", "expert_tp", "expert_tp below tp without sequence parallelism",
        lambda f: f.etp_given & (f.etp < f.tp) & no(f.sequence_parallel),
        lambda f: f"expert_tp={f.etp} below tp={f.tp} splits the experts' tokens by the sequence-parallel shards: "
        "it needs sequence parallelism (Megatron-Core requires it for MoE with tp > 1)",
        lambda f: "turn sequence parallelism on, or set expert_tp = tp",
    ),
    Rule(
        "ep-not-in-dp", "ep", "ep·expert_tp does not divide tp·dp·cp",
        lambda f: (f.ep > 1) & ((f.tp * f.dp * f.cp) % (f.ep * f.etp) != 0),
        lambda f: (
            f"ep={f.ep} must divide dp·cp = {f.dp * f.cp}" if f.etp == f.tp
            else f"ep={f.ep} × expert_tp={f.etp} must divide tp·dp·cp = {f.tp * f.dp * f.cp}"
        ),
        lambda f: (
            "choose ep·expert_tp dividing tp·dp·cp" if f.etp != f.tp
            else "choose ep dividing dp·cp, or expert_tp = 1 (MoE parallel folding: ep dividing tp·dp·cp)"
            if f.tp > 1 else "choose ep dividing dp·cp"
        ),
    ),
    Rule(
        "hsdp-group", "shard_group_size", "HSDP without a shard group size",
        lambda f: f.hybrid & (f.shard_group == 0),
        lambda f: "HSDP needs a shard group size",
        _hsdp_group_hint, name="hsdp-group-missing",
    ),
    Rule(
        "hsdp-group", "shard_group_size", "HSDP shard group does not divide dp",
        lambda f: f.hybrid & (f.shard_group > 0) & (f.dp % f.group_or_1 != 0),
        lambda f: f"shard group {f.shard_group} does not divide dp={f.dp}",
        lambda f: f"use a divisor of {f.dp} smaller than {f.dp}", name="hsdp-group-divides",
    ),
    Rule(
        "hsdp-one-replica", "shard_group_size", "HSDP shard group spans all of dp (that is fsdp-full)",
        lambda f: f.hybrid & (f.shard_group > 0) & (f.dp == f.shard_group),
        lambda f: f"shard group {f.shard_group} spans all dp={f.dp} ranks: HSDP with one replica is fully "
        "sharded data parallelism",
        lambda f: f"use fsdp-full, or a shard group smaller than {f.dp} that divides it",
    ),
    Rule(
        "group-without-hsdp", "shard_group_size", "a shard group size without fsdp-hybrid",
        lambda f: (f.shard_group > 0) & no(f.hybrid),
        lambda f: "a shard group size only applies to fsdp-hybrid",
        lambda f: "remove it or choose sharding fsdp-hybrid",
    ),
    Rule(
        "framework-sharding", "sharding", "sharding the framework does not offer",
        lambda f: no(f.sharding_offered),
        lambda f: f"{FRAMEWORK_LABELS[f.framework]} does not offer {SHARDINGS[f.sharding].value}",
        lambda f: _SHARDING_FIXES[f.framework],
    ),
    Rule(
        "framework-offload", "offload", "Megatron-LM offloads only the optimizer",
        lambda f: f.offload_any & no(f.offload_optimizer),
        lambda f: "Megatron-LM offloads only the optimizer to CPU",
        lambda f: "use optimizer-cpu", frameworks=(Framework.megatron,), name="framework-offload-megatron",
    ),
    Rule(
        "offload-needs-sharding", "offload", "offload needs fully sharded parameters",
        lambda f: f.offload_params & no(f.shards_params),
        lambda f: f"{OFFLOADS[f.offload].value} offload needs fully sharded parameters",
        lambda f: "use zero3 or fsdp-full",
    ),
    Rule(
        "framework-offload", "offload", "NVMe offload is DeepSpeed ZeRO-Infinity only",
        lambda f: f.offload_nvme,
        lambda f: "NVMe offload is DeepSpeed ZeRO-Infinity only",
        lambda f: "use framework deepspeed", frameworks=(Framework.megatron, Framework.fsdp2),
        name="framework-offload-nvme",
    ),
)  # fmt: skip


@functools.cache
def table() -> tuple[Rule, ...]:
    """Every rule: the plan rules, then the framework refusals (``capabilities``, which builds on this module)."""
    from app.domain.estimator.capabilities import CAPABILITIES

    return (*PLAN_RULES, *CAPABILITIES)


@functools.cache
def rules_for(framework: Framework, capability: bool | None = None) -> tuple[Rule, ...]:
    """The rules that apply to plans of ``framework``, in table order (with ``capability``, only the framework
    rules, or only the plan rules)."""
    return tuple(
        r for r in table() if framework in r.frameworks and (capability is None or r.capability is capability)
    )


@functools.cache
def structural_reasons() -> frozenset[str]:
    """The search's reasons for grid points that are not plans (skipped, not counted as rejected)."""
    return frozenset(r.reason for r in table() if r.structural)


def broken(f: Facts, *, capability: bool = False) -> list[Rule]:
    """The plan rules (or, with ``capability``, the framework rules) that one plan's Facts break."""
    return [r for r in rules_for(f.framework, capability) if r.refuses(f)]


def violations(plan: Plan, context: Context) -> list[Violation]:
    """Every plan rule ``plan`` breaks as a Violation; when none is, the framework rules it breaks, whose fix
    names the nearest plan the framework runs (``capabilities.capability_violations``)."""
    f = plan_facts(plan, context)
    out = [Violation(field=r.field, code=r.code, message=r.message(f), fix=r.fix(f)) for r in broken(f)]
    if out or not context.capabilities or not broken(f, capability=True):
        return out
    from app.domain.estimator.capabilities import capability_violations

    return capability_violations(plan, tied_embeddings=context.tied_embeddings)


def rule_masks(f: Facts) -> list[tuple[str, Any]]:
    """(reason, mask of refused points) for every rule of the Facts' framework, in table order (the search)."""
    return [(r.reason, r.refuses(f)) for r in rules_for(f.framework)]
