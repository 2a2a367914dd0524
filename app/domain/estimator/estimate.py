"""The estimate: memory per stage, step time and its breakdown, throughput, MFU/HFU — and why.

:func:`estimate` is the one entry point every surface (API, pages, CLI, search, runner) calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from app.domain.estimator.assemble import evaluate_plan, plan_ring, ring_backward_bytes
from app.domain.estimator.casts import cast_element_b, fp8_any_layout
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.compute import hardware_flops_per_token, model_flops_per_token
from app.domain.estimator.efficiency import EfficiencyCatalog
from app.domain.estimator.hardware import HardwareCatalog, fp8_recipe_problem, precision_problem
from app.domain.estimator.memory import (
    StageMemory,
    host_bytes_per_node,
    host_capacity_bytes,
    layer_terms,
    state_bytes_per_param,
    te_quantized_weight_bytes,
)
from app.domain.estimator.moe_load import capped_load_factor, expert_load_factor
from app.domain.estimator.pipeline import inflight_microbatches
from app.domain.estimator.plan import (
    Fp8Recipe,
    Framework,
    Offload,
    Plan,
    Precision,
    Recompute,
    Sharding,
    Violation,
    plan_violations,
)
from app.domain.estimator.step import StepTime
from app.domain.estimator.track_record import TrackRecord
from app.domain.estimator.xp import SCALAR
from app.domain.model.architecture import Architecture
from app.domain.model.counts import parameter_counts
from app.domain.provenance import Frozen

SECONDS_PER_DAY = 86_400


class InvalidPlan(ValueError):
    """The plan cannot run on this model and cluster; ``violations`` say why and how to fix it."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        super().__init__("; ".join(f"{v.field}: {v.message} (fix: {v.fix})" for v in violations))


class HardwareError(ValueError):
    """A hardware selection that does not make sense (unknown slug, node without that accelerator…)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Assumption:
    """A figure or rule the estimate used. ``source``: a catalog source key, 'formula', 'default' or
    'override'; ``as_of`` and ``confidence`` come from the catalog entry."""

    name: str
    value: Any
    unit: str = ""
    source: str = "formula"
    as_of: str | None = None
    confidence: str | None = None
    note: str | None = None
    key: str | None = None  # "part.field" of a catalog figure (what an override names)


def _figure(cluster: Cluster, part: str, field: str, name: str, unit: str) -> Assumption:
    entry = getattr(cluster, part)
    prov = entry.figure_provenance(field)
    return Assumption(
        name=name, value=getattr(entry, field), unit=unit, source=prov.source, as_of=prov.as_of,
        confidence=prov.confidence.value, note=prov.note, key=f"{part}.{field}",
    )  # fmt: skip


def build_cluster(
    hardware: HardwareCatalog,
    efficiency: EfficiencyCatalog,
    *,
    accelerator: str,
    gpus: int,
    node: str | None = None,
    fabric: str | None = None,
    oversubscription: float = 1.0,
    power_limit_w: float | None = None,
) -> Cluster:
    """Resolve catalog slugs into a :class:`Cluster`; the node defaults to a reference server of that GPU."""
    try:
        acc = hardware.accelerator(accelerator)
    except KeyError as exc:
        raise HardwareError("gpu", str(exc.args[0] if exc.args else exc)) from None
    if node is None:
        candidates = [n for n in hardware.nodes if n.accelerator == acc.slug]
        if not candidates:
            raise HardwareError(
                "node", f"no node in the catalog carries {acc.slug}; add one to data/nodes.toml (see README)"
            )
        candidates.sort(key=lambda n: (n.kind != "server", n.slug))
        chosen = candidates[0]
    else:
        try:
            chosen = hardware.node(node)
        except KeyError as exc:
            raise HardwareError("node", str(exc.args[0] if exc.args else exc)) from None
        if chosen.accelerator != acc.slug:
            raise HardwareError("node", f"node {chosen.slug} carries {chosen.accelerator}, not {acc.slug}")
    try:
        out_fabric = hardware.fabric(fabric or chosen.scale_out_fabric)
    except KeyError as exc:
        raise HardwareError("fabric", str(exc.args[0] if exc.args else exc)) from None
    if out_fabric.is_scale_up:
        raise HardwareError("fabric", f"{out_fabric.slug} is a scale-up fabric; choose a scale-out one")
    intra = hardware.fabric(chosen.intra_node_fabric)
    return Cluster(
        accelerator=acc,
        node=chosen,
        intra_fabric=intra,
        scale_out_fabric=out_fabric,
        gpus=gpus,
        efficiency=efficiency.for_accelerator(acc.slug),
        scale_up_network=efficiency.for_network(intra.kind),
        scale_out_network=efficiency.for_network(out_fabric.kind),
        runtime=efficiency.runtime,
        stacks=efficiency.stacks,
        scale=efficiency.scale,
        oversubscription=oversubscription,
        power_limit_w=power_limit_w,
    )


class Estimate(Frozen):
    model: str
    accelerator: str
    node: str
    scale_out_fabric: str
    gpus: int
    nodes: int
    plan: Plan
    parameters_total: int
    parameters_active: int
    fits: bool
    peak_memory_bytes: int
    usable_memory_bytes: int
    margin_bytes: int
    dominant_term: str
    peak_stage: int
    memory_by_stage: tuple[StageMemory, ...]
    host_fits: bool = Field(description="offloaded state fits the node's host RAM and local NVMe")
    host_bytes_per_node: int
    nvme_bytes_per_node: int
    step_time_s: float
    step: StepTime
    tokens_per_step: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_flops_per_token: float
    hardware_flops_per_token: float
    flops_formula: str
    mfu: float
    hfu: float
    achieved_tflops_per_gpu: float = Field(description="model FLOPs per second per GPU")
    tokens_to_train: float | None
    time_to_train_s: float | None
    time_to_train_days: float | None
    memory_formulas: dict[str, str]
    assumptions: tuple[Assumption, ...]
    track_record: TrackRecord | None = Field(
        default=None,
        description="capplan's out-of-sample error on published runs like this plan (the service adds it)",
    )


def _te_weights_formula(plan: Plan) -> str:
    """The memory formula's sentence on Transformer Engine's quantized weights (memory.te_quantized_weight_bytes)."""
    per = te_quantized_weight_bytes(plan.framework.value, plan.precision.value)
    if not per or plan.sharding.shards_params:
        return ""
    kind = plan.precision.value.upper()
    if plan.sharding.shards_optimizer:
        flag = "fp8" if plan.precision is Precision.fp8 else "fp4"
        return (f"; Transformer Engine's quantized weights are the primary ones (--{flag}-"
                f"param-gather): each linear weight holds {per:g} B ({kind}, row-wise and column-wise copies) "
                "instead of its 16-bit 2 B")  # fmt: skip
    return (f"; Transformer Engine caches each linear weight's {kind} copies ({per:g} B, row-wise and column-wise) "
            "beside the 16-bit one across micro-batches and steps")  # fmt: skip


def _bf16_optimizer_note(plan: Plan) -> str:
    bf16_zero1 = (
        plan.framework is Framework.deepspeed and plan.precision is Precision.bf16 and plan.grad_accum_fp32
    )
    if bf16_zero1 and plan.sharding is Sharding.zero1 and plan.offload is Offload.none:
        return " + BF16_Optimizer's fp32 gradient buffer 4 (whole, not partitioned)"
    return ""


def _grad_accumulation(plan: Plan) -> Assumption | None:
    """How a DeepSpeed plan's micro-batch gradients are accumulated (evaluate.grad_accumulate_seconds), or None for
    stacks that accumulate inside the weight-gradient GEMM (Megatron) or reduce every micro-batch (FSDP)."""
    if plan.framework is not Framework.deepspeed:
        return None
    if _bf16_optimizer_note(plan):
        value = "BF16_Optimizer: 26 B a local parameter at the HBM rate every micro-batch"
    elif not (plan.sharding.shards_grads or plan.sharding.shards_params):  # evaluate's ``unsharded``
        value = "autograd adds into param.grad: 6 B a local parameter at the HBM rate on (m − 1)/m of the micro-batches"
    else:
        return None
    return Assumption(
        name="gradient accumulation (DeepSpeed)", value=value, source="formula",
        note="zeroing, accumulating and (BF16 optimizer) adding into the fp32 buffer are memory-bound passes over the "
        "rank's parameters on the backward's stream",
    )  # fmt: skip


def _moe_load(arch: Architecture, plan: Plan) -> Assumption | None:
    """The busiest expert-parallel rank's load the MoE time used (moe_load), for MoE plans."""
    if not arch.is_moe:
        return None
    tokens = plan.micro_batch * plan.seq_len / plan.cp
    k, e = arch.experts_top_k, arch.n_experts or 0
    floor = expert_load_factor(SCALAR, tokens * k, plan.ep, e, k)
    load = capped_load_factor(SCALAR, floor, plan.moe_capacity_factor or 0.0, plan.moe_pad_to_capacity)
    if not plan.moe_capacity_factor:
        how = "dropless; random top-k routing (a trained router is at best this balanced)"
    elif plan.moe_pad_to_capacity:
        how = f"inputs padded to capacity factor {plan.moe_capacity_factor:g}"
    else:
        how = f"capacity factor {plan.moe_capacity_factor:g} caps the busiest rank ({floor:.3f} without it)"
    return Assumption(
        name="MoE load of the busiest expert-parallel rank", value=round(load, 4), unit="× the mean",
        source="formula", note=f"{how}; scales the expert GEMMs and the all-to-all bytes",
    )  # fmt: skip


def _tp_overlap_value(cluster: Cluster, plan: Plan) -> str:
    if plan.tp == 1:
        return "none (tp = 1)"
    if plan.framework is Framework.deepspeed:
        return "0% hidden (DeepSpeed has no TP communication overlap)"
    if (
        not plan.uses_tp_comm_overlap
    ):  # asked where the stack cannot run it, the plan is refused (capabilities)
        return "0% hidden (TP communication overlap off)"
    if not plan.sequence_parallel:
        return "0% hidden (TP communication overlap needs sequence parallelism)"
    return f"{cluster.stack(plan.framework.value).tp_overlap:.0%} hidden (TP communication overlap)"


def _kernels(plan: Plan) -> Assumption:
    """Which kernels the estimate assumed for the memory-bound ops and the loss, and how sure that is: a DeepSpeed
    plan runs fused kernels only where the model brings them (Megatron-DeepSpeed, or Liger-Kernel on a Hugging Face
    model); DeepSpeed itself cannot choose them, so its default is marked low confidence."""
    value = (
        f"{'fused' if plan.uses_fused_kernels else 'eager'} norms, rotary and activation; "
        f"{'fused 16-bit' if plan.uses_fused_loss else 'fp32'} cross-entropy"
    )
    notes = {
        Framework.megatron: "Transformer Engine's fused kernels; the Megatron export asks for its fused "
        "cross-entropy (--cross-entropy-loss-fusion --cross-entropy-fusion-impl te) when the loss is fused",
        Framework.fsdp2: "eager PyTorch unless the model is compiled (torch.compile: fused_kernels)",
        Framework.deepspeed: "as Megatron-DeepSpeed and Hugging Face models with Liger-Kernel run them; a Hugging "
        "Face model without Liger-Kernel runs them eager (fused_kernels false, CLI --eager): slower, and its fp32 "
        "loss holds more memory on the last stage",
    }
    note = notes.get(plan.framework)
    if plan.eager_z_loss:
        value += "; eager z-loss (60 B a logit more)"
        note = (note + "; " if note else "") + (
            "the eager z-loss keeps the fp32 logits for logsumexp's backward (+4 B a logit saved, +8 B at the "
            "loss's backward peak, measured with torch on CPU; under torchtitan's loss_parallel not measured)"
        )
    default_for_deepspeed = plan.framework is Framework.deepspeed and plan.fused_kernels is None
    return Assumption(
        name="kernels", value=value, source="default" if plan.fused_kernels is None else "formula",
        confidence="low" if default_for_deepspeed else None, note=note,
    )  # fmt: skip


def _scale_terms(cluster: Cluster, plan: Plan) -> list[Assumption]:
    """The fitted terms shared by every stack and GPU that this plan's time depends on (data/fitted.toml)."""
    out = [
        _figure(cluster, "scale", "kernel_overhead_us", "fixed cost per memory-bound kernel", "µs"),
        _figure(
            cluster, "scale", "comm_slowdown", "compute slowdown per second of hidden communication", "s/s"
        ),
        _figure(
            cluster, "scale", "straggler_cv", "per-rank step jitter (wait for the slowest rank)", "fraction"
        ),
    ]
    if plan.cp > 1 and not plan.cp_gathers_kv:
        out.append(_figure(cluster, "scale", "ring_attention_ratio", "attention rate inside a ring step",
                           "fraction of the kernel's rate outside a ring"))  # fmt: skip
    return out


def _fp8_recipe(plan: Plan, cluster: Cluster) -> Assumption | None:
    """The FP8 recipe an FP8 plan runs and what its casts cost (casts.cast_element_b); rowwise is marked low confidence:
    torchtitan's own June 2025 H100 tables measured it 26-34 % below tensorwise (70B on 256 GPUs, 8B on 64, TP 8),
    where the casts this model counts give 6-10 %: its row-wise GEMM kernels' shortfall is not modelled."""
    if plan.precision is not Precision.fp8:
        return None
    recipe = plan.fp8_recipe_used
    element_b = cast_element_b(plan.framework.value, recipe, fp8_any_layout(cluster.accelerator.arch))
    note = f"casts read and write {element_b:g} B an element"
    if recipe is Fp8Recipe.rowwise:
        note += (
            "; torchtitan's June 2025 H100 tables measured rowwise 26-34 % slower than tensorwise (this model: "
            "6-10 %, its row-wise GEMM kernels are not modelled): expect this plan slower than estimated"
        )
    return Assumption(
        name="FP8 recipe", value=recipe.value, source="default" if plan.fp8_recipe is Fp8Recipe.auto else "formula",
        confidence="low" if recipe is Fp8Recipe.rowwise else None, note=note,
    )  # fmt: skip


def _logits_formula(plan: Plan) -> str:
    if plan.fused_cross_entropy:
        return (
            "last stage: the output GEMM's input and weight gradients, computed in the forward (b·(s/cp)·h + "
            "(V/tp)·h, 16-bit), or, where larger, those plus one token chunk's 16-bit logits while the loss runs"
        )
    if plan.uses_fused_loss:
        return (
            "last stage: the larger of the 16-bit logits a fused or compiled loss saves, b·(s/cp)·(V/tp)·2 B, + one "
            "layer's backward working set, and those logits with their 16-bit gradient, b·(s/cp)·(V/tp)·4 B"
        )
    if plan.eager_z_loss:
        return (
            "last stage: the larger of b·(s/cp)·(V/tp)·(2 B bf16 logits + 4 B fp32 loss copy + 4 B fp32 logits the "
            "z-loss's logsumexp keeps) + one layer's backward working set, and the eager loss's backward peak "
            "b·(s/cp)·(V/tp)·20 B (the cross-entropy's 12 B and the z-loss's fp32 logits and exp(logits − lse))"
        )
    saved = "b·(s/cp)·(V/tp)·(2 B bf16 logits + 4 B fp32 loss copy)"
    return (
        f"last stage: the larger of {saved} + one layer's backward working set, and eager cross-entropy's "
        "backward peak b·(s/cp)·(V/tp)·12 B (fp32 log-probs, their gradient and the logits' gradient; 16 B under "
        "torchtitan's loss_parallel with TP)"
    )


def _ring_formula(arch: Architecture, plan: Plan) -> str:
    ring = ring_backward_bytes(arch, plan, 4 if plan.precision is Precision.fp32 else 2)
    if not ring:
        return ""
    who, held = (
        ("Transformer Engine's all-gather CP", "every rank's K/V gathered, full-length dK/dV and the query chunks' "
         "partial gradients") if plan.cp_gathers_kv
        else ("PyTorch's ring-attention", "every rank's K/V all-gathered, fp32 dQ/dK/dV with their copies")
    )  # fmt: skip
    return (
        f"; {who} backward holds {ring / 2**30:.2f} GiB a layer beyond the attention kernel's gradients ({held}), "
        "counted where it exceeds the MLP tensors the layer's MLP backward has freed by then"
    )


def _memory_formulas(
    arch: Architecture, cluster: Cluster, plan: Plan, stages: tuple[StageMemory, ...] = ()
) -> dict[str, str]:
    per = state_bytes_per_param(plan)
    sh = plan.sharding
    shard = f"dp·cp = {plan.dp_shard_size * plan.cp}" + (" (HSDP group)" if plan.shard_group_size else "")
    divided = [n for n, on in (("params", sh.shards_params), ("grads", sh.shards_grads),
                               ("optimizer", sh.shards_optimizer)) if on]  # fmt: skip
    terms = layer_terms(arch, plan)
    rt = cluster.runtime
    return {
        "model states": f"{per.formula}{_bf16_optimizer_note(plan)}; {sh.value} divides {', '.join(divided) or 'nothing'} by {shard}; "
        "layer parameters ÷ tp (norms and routers replicated), experts ÷ ep·tp; the first stage adds the "
        "embedding ÷ tp, the last the output layer ÷ tp (a tied embedding is copied there when pp > 1)"
        + _te_weights_formula(plan),
        "activations": "per layer × layers on the rank × in-flight micro-batches (+ one layer's backward working "
        "set): " + " | ".join(f"{k}: {t.formula}" for k, t in terms.items()) + _ring_formula(arch, plan),
        "logits": _logits_formula(plan),
        "gathered params": "FSDP/ZeRO-3: 2 units (current + prefetch) in 16-bit + one unit's unsharded gradient; "
        "FSDP2 keeps the root unit (embedding, output) gathered; SHARD_GRAD_OP keeps all units gathered",
        "runtime": f"CUDA context {rt.cuda_context_bytes / 2**30:.2f} GiB + NCCL {rt.nccl_bytes_per_communicator / 2**30:.2f} "
        f"GiB per intra-node / {rt.nccl_bytes_per_communicator_scale_out / 2**30:.2f} GiB per multi-node communicator "
        "(world + each parallel group), outside the caching allocator",
        "fragmentation": f"{rt.fragmentation_fraction:.0%} of the allocated peak",
        **(
            {
                "start-up": "DeepSpeed ZeRO-3 outside zero.Init (zero_init off): the rank's whole model in 16-bit "
                "before it is partitioned; the peak is the larger of it and the allocated peak + fragmentation"
            }
            if plan.framework is Framework.deepspeed and sh.shards_params and not plan.zero_init
            else {}
        ),
        **(
            {
                "optimizer step": "DeepSpeed ZeRO-1/2: the step builds the rank's gradient partition flat in the "
                "gradient dtype and converts it to fp32 (stage_1_and_2.py), partition × (2 + 4) B in new allocator "
                f"segments, up to {max(st.optimizer_step_bytes for st in stages) / 2**30:.2f} GiB a rank: "
                "torch.cuda.max_memory_reserved() and nvidia-smi read it above the training peak, "
                "max_memory_allocated() does not; not counted against the fit (the allocator frees cache for it)"
            }
            if any(st.optimizer_step_bytes for st in stages)
            else {}
        ),
        "fit": f"total ≤ usable memory {cluster.accelerator.memory_usable_bytes / 2**30:.2f} GiB "
        "(what torch.cuda.mem_get_info reports as total)",
    }


def estimate(
    arch: Architecture,
    cluster: Cluster,
    plan: Plan,
    *,
    tokens_to_train: float | None = None,
    allow_tp_across_nodes: bool = False,
    framework_refusals: bool = True,
) -> Estimate:
    """Memory, time and throughput of ``plan`` for ``arch`` on ``cluster``. Raises :class:`InvalidPlan`.
    ``framework_refusals`` False: the capability table's refusals are not checked (published runs on stacks it does
    not describe, costed with the stand-in framework's mechanisms)."""
    violations = plan_violations(
        plan, n_layers=arch.n_layers, n_heads=arch.n_heads, n_kv_heads=arch.n_kv_heads, n_experts=arch.n_experts,
        gpus=cluster.gpus, gpus_per_node=cluster.gpus_per_node, nvlink_domain_size=cluster.nvlink_domain,
        allow_tp_across_nodes=allow_tp_across_nodes, mla=arch.attention == "mla", capabilities=framework_refusals,
    )  # fmt: skip
    unsupported = precision_problem(cluster.accelerator, plan.precision.value)
    if unsupported:
        violations.append(Violation(code="precision-unsupported", field="precision", message=unsupported,
                                    fix="use bf16, or a GPU with those tensor cores"))  # fmt: skip
    unrunnable = fp8_recipe_problem(cluster.accelerator, plan.precision.value, plan.fp8_recipe.value)
    if unrunnable:
        violations.append(Violation(code="fp8-recipe-unsupported", field="fp8_recipe", message=unrunnable,
                                    fix="use fp8_recipe tensorwise or delayed, or a GPU that runs the recipe"))  # fmt: skip
    if violations:
        raise InvalidPlan(violations)
    counts = parameter_counts(arch)
    stages, step = evaluate_plan(arch, cluster, plan, counts)
    peak = max(stages, key=lambda st: st.total_bytes)
    host, nvme = host_bytes_per_node(stages, plan, cluster.gpus_per_node)
    host_cap, nvme_cap = host_capacity_bytes(cluster.node.host_memory_gib, cluster.node.local_nvme_tb)
    host_fits = host <= host_cap and nvme <= nvme_cap
    tokens_per_step = plan.global_batch * plan.seq_len
    tps = tokens_per_step / step.step_s
    flops = model_flops_per_token(
        arch, plan.seq_len, counts.matmul_weights_active, mtp_layers=plan.mtp_layers
    )
    head = arch.vocab_size * arch.hidden_size
    hw_flops = hardware_flops_per_token(flops, arch, plan, head)
    peak_flops = cluster.peak_flops
    mfu = flops.total * tps / (cluster.gpus * peak_flops)
    hfu = hw_flops * tps / (cluster.gpus * peak_flops)
    ttt = tokens_to_train / tps if tokens_to_train else None
    return Estimate(
        model=arch.slug,
        accelerator=cluster.accelerator.slug,
        node=cluster.node.slug,
        scale_out_fabric=cluster.scale_out_fabric.slug,
        gpus=cluster.gpus,
        nodes=cluster.nodes,
        plan=plan,
        parameters_total=counts.total,
        parameters_active=counts.active,
        fits=all(st.fits for st in stages) and host_fits,
        host_fits=host_fits,
        peak_memory_bytes=peak.total_bytes,
        usable_memory_bytes=peak.usable_bytes,
        margin_bytes=min(st.margin_bytes for st in stages),
        dominant_term=peak.dominant_term,
        peak_stage=peak.rank,
        memory_by_stage=stages,
        host_bytes_per_node=host,
        nvme_bytes_per_node=nvme,
        step_time_s=step.step_s,
        step=step,
        tokens_per_step=tokens_per_step,
        tokens_per_s=tps,
        tokens_per_s_per_gpu=tps / cluster.gpus,
        model_flops_per_token=flops.total,
        hardware_flops_per_token=hw_flops,
        flops_formula=flops.formula,
        mfu=mfu,
        hfu=hfu,
        achieved_tflops_per_gpu=flops.total * tps / cluster.gpus / 1e12,
        tokens_to_train=tokens_to_train,
        time_to_train_s=ttt,
        time_to_train_days=ttt / SECONDS_PER_DAY if ttt else None,
        memory_formulas=_memory_formulas(arch, cluster, plan, stages),
        assumptions=_assumptions(arch, cluster, plan, flops.formula),
    )


def _assumptions(
    arch: Architecture, cluster: Cluster, plan: Plan, flops_formula: str
) -> tuple[Assumption, ...]:
    acc = cluster.accelerator
    per = state_bytes_per_param(plan)
    out = [
        _figure(cluster, "accelerator", "bf16_dense_tflops", "peak dense BF16", "TFLOP/s"),
        _figure(cluster, "accelerator", "memory_usable_bytes", "usable memory per GPU", "bytes"),
        _figure(cluster, "accelerator", "memory_bandwidth_gb_per_s", "HBM bandwidth", "GB/s"),
        Assumption(name="scale-up bandwidth per GPU, one direction", value=cluster.scale_up_gb_per_s, unit="GB/s",
                   source=acc.figure_provenance("nvlink_bandwidth_gb_per_s").source, note="half the bidirectional NVLink figure"),
        Assumption(name="scale-out bandwidth per GPU, one direction", value=cluster.scale_out_gb_per_s, unit="GB/s",
                   source=cluster.node.figure_provenance("scale_out_gbit_per_s_per_nic").source,
                   note=f"{cluster.node.scale_out_nics} × {cluster.node.scale_out_gbit_per_s_per_nic:g} Gb/s shared by {cluster.gpus_per_node} GPUs"),
        _figure(cluster, "efficiency", "gemm_efficiency", "GEMM efficiency (large GEMMs)", "fraction of peak"),
        _figure(cluster, "efficiency", "gemm_overhead_us", "overhead per GEMM", "µs"),
        _figure(cluster, "efficiency", "attention_efficiency", "fused attention efficiency", "fraction of peak"),
        *_scale_terms(cluster, plan),
        _figure(cluster, "efficiency", "hbm_efficiency", "HBM efficiency of memory-bound kernels", "fraction"),
        _figure(cluster, "efficiency", "scale_up_efficiency", "NVLink collective efficiency (busbw/peak)", "fraction"),
        _figure(cluster, "scale_out_network", "efficiency", f"{cluster.scale_out_fabric.kind} collective efficiency", "fraction"),
        _figure(cluster, "runtime", "cuda_context_bytes", "CUDA context per process", "bytes"),
        _figure(cluster, "runtime", "nccl_bytes_per_communicator", "NCCL buffers per intra-node communicator", "bytes"),
        _figure(cluster, "runtime", "nccl_bytes_per_communicator_scale_out", "NCCL buffers per multi-node communicator", "bytes"),
        _figure(cluster, "runtime", "fragmentation_fraction", "allocator fragmentation reserve", "fraction of allocated"),
        Assumption(name="model-state bytes per parameter", value=per.weights + per.grads + per.master + per.optimizer,
                   unit="B/param", source="formula", note=per.formula),
        Assumption(name="model FLOPs per token", value=flops_formula, source="formula"),
        Assumption(name="in-flight micro-batches on the first stage",
                   value=inflight_microbatches(0, plan.pp, plan.vpp, plan.micro_batches), source="formula",
                   note="1F1B: min(m, pp); interleaved: Megatron warm-up count"),
        Assumption(name="pipeline bubble", value="(pp−1)/vpp × t_micro-batch", source="formula"),
        Assumption(name="pipeline layout", value=plan.pipeline_layout or "even split, remainder to the middle stages",
                   source="override" if plan.pipeline_layout else "default",
                   note=(f"{plan.mtp_layers} multi-token prediction layer(s) with the loss on the last stage: one more "
                         "layer, 2h→h projection and output-head pass each, counted in MFU's model FLOPs as NVIDIA counts them)")
                   if plan.mtp_layers else "no multi-token prediction"),
        Assumption(name="TP collectives", value=_tp_overlap_value(cluster, plan), source="formula",
                   note="with TP communication overlap (Megatron's --tp-comm-overlap, torchtitan's async TP; needs "
                   "sequence parallelism) the stack's fitted tp_overlap share hides behind the neighbouring GEMMs, "
                   "slowing them by comm_slowdown; without it every TP collective is on the critical path"),
        Assumption(name="MoE all-to-alls", value=f"{plan.moe_dispatcher.value}, "
                   + ("1F1B overlap: ρ·min(all-to-all, adjacent compute) hidden" if plan.moe_a2a_overlap
                      else "not overlapped"), source="formula",
                   note="deepep sends each token once per destination node over the scale-out network; hybridep "
                   "too inside NVL72 domains, not across 8-GPU nodes (costed as the plain all-to-all there: NVIDIA "
                   "keeps it at EP 8 on NVL8, Megatron-Bridge #2883)"),
        Assumption(name="gradient reduction", value="once per step (no_sync), overlapped with the last backward",
                   source="default", note="FSDP/ZeRO-3 re-gather and reduce-scatter every micro-batch"),
        Assumption(name="fat-tree oversubscription", value=cluster.oversubscription, source="default"),
        _kernels(plan),
    ]  # fmt: skip
    recipe = _fp8_recipe(plan, cluster)
    if recipe is not None:
        out.append(recipe)
    accumulation = _grad_accumulation(plan)
    if accumulation is not None:
        out.append(accumulation)
    moe_load = _moe_load(arch, plan)
    if moe_load is not None:
        out.append(moe_load)
    if plan.cp > 1:
        out.append(Assumption(name="context parallelism", value=plan_ring(plan).name, source="formula",
                              note="all-gather: K/V gathered and dK/dV reduce-scattered in the open, no ring, "
                              "whole-prefix kernels; a ring hides each K/V send behind one step's attention"))  # fmt: skip
    if plan.recompute is Recompute.selective:
        modules = sorted(m.value for m in plan.recompute_module_set)
        moe_or_mla = arch.is_moe or arch.attention == "mla"
        out.append(Assumption(
            name="activation memory under selective recompute", value=", ".join(modules) + " re-run in backward",
            source="formula" if plan.recompute_modules is not None or not moe_or_mla else "default",
            confidence="low" if plan.recompute_modules is None and moe_or_mla else None,
            note="Megatron's --recompute-modules; NVIDIA's MoE/MLA recipes also re-run mla_up_proj, mlp or moe_act "
            "(set recompute_modules to match), which keeps much less than the attention core alone"
            if plan.recompute_modules is None and moe_or_mla else "CUDA graphs and activation offloading are not "
            "modelled",
        ))  # fmt: skip
    listed = {a.key for a in out if a.key}  # overridden figures not already listed under their own name
    for part in ("accelerator", "node", "efficiency", "scale_up_network", "scale_out_network", "runtime"):
        entry = getattr(cluster, part)
        for name, prov in entry.provenance.items():
            if prov.source == "override" and f"{part}.{name}" not in listed:
                out.append(Assumption(name=f"{part}.{name}", value=getattr(entry, name), source="override",
                                      as_of=prov.as_of, confidence=prov.confidence.value, note=prov.note,
                                      key=f"{part}.{name}"))  # fmt: skip
    return tuple(out)
