"""Predicted vs published throughput for every run in data/published_runs.toml (`capplan validate`).

Each source reports throughput in its own convention (Megatron's recompute-inclusive 96·B·s·l·h² "HFU",
Korthikanti's 72-form MFU, MPT's (6N + 12·l·h·s) MFU, or plain tokens/s). The comparison converts the
published figure into the iteration time it implies under that convention, and compares it with the
estimator's step time: ``error = predicted throughput / published throughput − 1``.
"""

from __future__ import annotations

import statistics

from app.domain.catalog.store import Catalog
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.estimate import Estimate, InvalidPlan, build_cluster, estimate
from app.domain.estimator.overrides import apply_overrides
from app.domain.estimator.plan import (
    CPCommType,
    Framework,
    MoeDispatcher,
    Offload,
    Plan,
    Precision,
    Recompute,
    Sharding,
)
from app.domain.estimator.published import (
    FlopsAccounting,
    PublishedRun,
    accounting_flops_per_iteration,
    architecture_for_run,
)
from app.domain.provenance import Frozen

# The cluster each published run ran on, where the run does not say: the reference server of its GPU.
DEFAULT_NODE = {
    "a100-80gb": "dgx-a100-80gb",
    "a100-40gb": "dgx-a100",
    "h100-sxm": "dgx-h100",
    "h200-sxm": "hgx-h200",
}
FRAMEWORK = {
    "megatron-lm": Framework.megatron,
    "nemo": Framework.megatron,
    "megatron-deepspeed": Framework.deepspeed,
    "deepspeed": Framework.deepspeed,
    "torchtitan": Framework.fsdp2,
    "pytorch-fsdp": Framework.fsdp2,
    "composer": Framework.fsdp2,
}

# The releases the capability table describes (Megatron-Core 0.16.1, DeepSpeed 0.19.8 and its pipeline engine under
# Megatron-DeepSpeed, torchtitan 0.3.0): their refusals apply to a published run on them. Runs on other stacks
# (Meta's and others' PyTorch FSDP, Composer) are costed as published with the stand-in framework's mechanisms.
DESCRIBED_STACKS = frozenset({"megatron-lm", "nemo", "megatron-deepspeed", "deepspeed", "torchtitan"})


class ValidationRow(Frozen):
    run: str
    model: str
    accelerator: str | None
    gpus: int
    plan: str
    accounting: str
    metric: str
    published: float | None
    predicted: float | None
    error: float | None
    predicted_mfu: float | None
    assumptions: tuple[str, ...] = ()
    skipped: str | None = None
    memory_published_gib: float | None = None
    memory_predicted_gib: float | None = None
    memory_error: float | None = None


class ValidationReport(Frozen):
    rows: tuple[ValidationRow, ...]
    compared: int
    median_abs_error: float | None
    max_abs_error: float | None
    worst_run: str | None
    memory_compared: int = 0
    memory_median_abs_error: float | None = None
    memory_max_abs_error: float | None = None


def run_plan(run: PublishedRun) -> tuple[Plan, list[str]]:
    """The capplan plan for a published run, with the choices made where the source is silent."""
    notes: list[str] = []
    framework = FRAMEWORK.get(str(run.framework), Framework.megatron)
    tp, pp, cp, ep = run.tp or 1, run.pp or 1, run.cp or 1, run.ep or 1
    dp = run.dp or run.n_gpus // (tp * pp * cp)
    micro = run.micro_batch
    if micro is None:
        micro = 1 if pp > 1 else max(1, (run.global_batch or dp) // dp)
        notes.append(f"micro-batch not published: assumed {micro}")
    elif run.global_batch and (run.global_batch % (micro * dp)):
        micro = max(1, run.global_batch // dp)
        notes.append(f"published micro-batch is the local batch; used {micro}")
    if pp > 1 and run.global_batch and micro * dp == run.global_batch:
        local = micro
        stages = pp * (run.vpp or 1)
        if str(run.framework) == "torchtitan" and local % stages == 0:
            # torchtitan splits the local batch into pipeline_parallel_microbatches micro-batches, by default the
            # number of pipeline stages (torchtitan/parallelisms/pipelining_utils.py at 25ec560e, 2024-10-08: "The
            # default value will be the number of pipeline stages, if unspecified"; build_pipeline_schedule:
            # num_total_stages = pipeline_parallel_degree · len(stages), the stages on one rank — 2 for an
            # interleaved schedule)
            micro = local // stages
            notes.append(
                f"the published micro-batch is the local batch; torchtitan's default splits it into pp · stages per "
                f"rank = {stages} micro-batches: used micro-batch {micro}"
            )
        else:
            micro = 1
            notes.append(
                "one micro-batch per step with pipeline parallelism is the local batch: used micro-batch 1"
            )
    sharding = Sharding(str(run.sharding))
    if framework is Framework.megatron and sharding not in (Sharding.ddp, Sharding.megatron_distopt):
        sharding = Sharding.ddp
    if framework is Framework.deepspeed and sharding not in (
        Sharding.ddp,
        Sharding.zero1,
        Sharding.zero2,
        Sharding.zero3,
    ):
        sharding = Sharding.zero1
    # Fused (flash) attention: what the run states; else FSDP stacks and NeMo (Transformer Engine) always, and any
    # stack from 2023 on (FlashAttention appeared mid-2022; Megatron-LM, DeepSpeed and PyTorch SDPA adopted it by
    # 2023). A run that says "no-flash-attention" keeps the unfused kernel.
    flash = "no-flash-attention" not in run.optimizations and (
        framework is Framework.fsdp2
        or "flash-attention" in run.optimizations
        or str(run.framework) == "nemo"
        or run.source_year >= 2023
    )
    if flash and "flash-attention" not in run.optimizations and framework is not Framework.fsdp2:
        notes.append("fused (flash) attention assumed: the stack uses it by default since 2023")
    # FlashAttention-2 appeared in July 2023: flash attention in runs published before then ran FA1-class kernels
    # (FlashAttention-1, xformers, Triton); "flash-attention-2" in the run's optimizations says otherwise.
    kernel = "auto"
    dated_before_fa2 = run.source_year < 2023 or (len(run.as_of) >= 7 and run.as_of < "2023-07")
    if flash and dated_before_fa2 and "flash-attention-2" not in run.optimizations:
        kernel = "fa1"
        notes.append("FlashAttention-1-class kernel: published before FlashAttention-2 (2023-07)")
    # A run that names its kernel ran it: FlashAttention-3 on Hopper, -4 on Blackwell; FlashAttention-1 or the
    # FA1-era Triton port (llm-foundry's attn_impl triton) run at the FA1 class's rate
    named = (
        ("flash-attention-1", "fa1"), ("triton-flash-attention", "fa1"),
        ("flash-attention-3", "fa3"), ("flash-attention-4", "fa4"),
    )  # fmt: skip
    for name, slug in named:
        if flash and name in run.optimizations:
            kernel = slug
    # Composer (MPT) trains with FlashAttention, fused LayerNorm and fused cross-entropy kernels; torchtitan
    # is eager unless the run used torch.compile; Megatron and DeepSpeed use their fused kernels.
    # A run that names its fused norm / rotary / cross-entropy kernels (TinyLlama: FlashAttention's RMSNorm, rotary
    # and cross-entropy, xformers' SwiGLU) runs them fused too.
    fused = None
    named_fused = {"fused-rmsnorm", "fused-layernorm", "fused-rope", "fused-cross-entropy"} & set(
        run.optimizations
    )
    if str(run.framework) == "composer" or "torch.compile" in run.optimizations or named_fused:
        fused = True
    # torchtitan's training.compile compiled the transformer blocks only until 2025-04-02 (the loss's
    # torch.compile stayed commented out; pytorch/torchtitan bbb1b616e, PR #1033, compiles it since): a compiled
    # torchtitan run published before then ran eager cross-entropy.
    fused_loss = None
    # Megatron-LM and Megatron-DeepSpeed compute the vocab-parallel cross-entropy in fp32 (the logits cast
    # .float(); Megatron-LM's --cross-entropy-loss-fusion is off by default and its 'native' fusion stays fp32);
    # NeMo / Megatron-Bridge's model configs run Transformer Engine's Triton kernel (cross_entropy_fusion_impl="te")
    if str(run.framework) in ("megatron-lm", "megatron-deepspeed") and not named_fused:
        fused_loss = False
        notes.append("fp32 cross-entropy: Megatron's vocab-parallel loss casts the logits to fp32")
    if fused and str(run.framework) == "torchtitan" and run.as_of < "2025-04":
        fused_loss = False
        notes.append("eager cross-entropy: torchtitan compiled only the model before 2025-04 (PR #1033)")
    if run.fused_loss is not None:  # what the run's training script configured
        fused_loss = run.fused_loss
        notes.append(
            f"{'fused' if run.fused_loss else 'eager fp32'} cross-entropy, as the run's script configured it"
        )
    precision = (
        Precision(str(run.precision))
        if str(run.precision) in Precision._value2member_map_
        else Precision.bf16
    )
    recompute = Recompute(str(run.recompute))
    if recompute is Recompute.selective and str(run.framework) == "torchtitan":
        recompute = Recompute.selective_op  # torchtitan's selective AC is per-op (selective_ac_option = "op")
        notes.append("torchtitan's selective activation checkpointing is per-op: estimated as selective-op")
    # NVIDIA's NeMo / Megatron-Bridge performance recipes reduce gradients in bf16 (their performance
    # optimisations set recipe.trainer.plugins.grad_reduce_in_fp32 = False, nemo/collections/llm/recipes/*.py, and
    # scripts/performance set it with FP8): half the gradient buffer and half the reduce-scatter of Megatron-LM's
    # default fp32 main gradients. Megatron-LM's own tables (its README, Narayanan 2021, Korthikanti 2022) keep fp32.
    grad_reduce_bf16 = str(run.framework) == "nemo"
    if grad_reduce_bf16:
        notes.append("gradients reduced in bf16: NeMo's performance recipes set grad_reduce_in_fp32 = False")
    # TP communication overlap: what the run states; else on where the run names it (Megatron's tp-comm-overlap,
    # torchtitan's async TP) and for NeMo / Megatron-Bridge's performance configs, which set
    # CommOverlapConfig(tp_comm_overlap = tp > 1) with a userbuffers configuration per model and GPU
    # (scripts/performance/configs/llama/llama3_llm_pretrain.py, utils/helpers.py COMM_OVERLAP_CONFIG_MAP, 2025);
    # off for every other run — Megatron-LM before Transformer Engine's userbuffers (2023: Narayanan 2021,
    # Korthikanti 2022), Megatron-DeepSpeed, and torchtitan without async TP.
    tp_overlap = run.tp_comm_overlap
    if tp_overlap is None:
        named = "tp-comm-overlap" in run.optimizations or "async-tp" in run.optimizations
        tp_overlap = named or str(run.framework) == "nemo"
        if tp > 1 and str(run.framework) == "nemo" and not named:
            notes.append("TP communication overlap on: NeMo's performance configs set it wherever tp > 1")
    # torchtitan repeated K/V to every query head before SDPA until pytorch/torchtitan ff0829c10 (PR #2259,
    # 2026-01-27, "GQA without kv repeats"; repeat_kv in torchtitan/models/llama/model.py at 4d88a8a4, 2024-12)
    repeat_kv = str(run.framework) == "torchtitan" and run.as_of < "2026-01"
    # DeepSpeed bf16 runs that name the BF16 optimizer accumulated gradients in fp32 (its grad_acc_dtype)
    grad_accum_fp32 = "bf16-optimizer" in run.optimizations
    # PyTorch FSDP1 (pytorch-fsdp, Composer) gathers into flat parameters; torchtitan is FSDP2 (per-parameter
    # sharding, gathered parameters copied out of the all-gather buffer); a run that says which it ran keeps it
    flat_params = str(run.framework) in ("pytorch-fsdp", "composer")
    if run.fsdp_flat_params is not None:
        flat_params = run.fsdp_flat_params
    plan = Plan(
        tp=tp, pp=pp, vpp=run.vpp or 1, dp=dp, cp=cp, ep=ep, expert_tp=run.etp, mtp_layers=run.mtp_layers, pipeline_layout=run.pipeline_layout, shard_group_size=run.shard_group_size, offload=Offload(run.offload), sharding=sharding, micro_batch=micro,
        global_batch=run.global_batch or micro * dp, seq_len=run.seq_len, recompute=recompute,
        recompute_layers=run.recompute_layers if recompute is Recompute.full else None,
        sequence_parallel=run.sequence_parallel, moe_dispatcher=MoeDispatcher(run.moe_dispatcher),
        cp_comm_type=CPCommType(run.cp_comm_type),
        recompute_modules=run.recompute_modules if recompute is Recompute.selective else None,
        moe_a2a_overlap=run.moe_a2a_overlap, flash_attention=flash, precision=precision, framework=framework,
        fused_kernels=fused, fused_loss=fused_loss, attention_kernel=kernel,
        fused_cross_entropy="liger-kernel" in run.optimizations or "fused-linear-cross-entropy" in run.optimizations,
        grad_reduce_bf16=grad_reduce_bf16, fused_swiglu="liger-kernel" in run.optimizations, z_loss="z-loss" in run.optimizations, grad_accum_fp32=grad_accum_fp32,
        tp_comm_overlap=tp_overlap, repeat_kv=repeat_kv, zero_init=run.zero_init, fsdp_flat_params=flat_params,
        fp8_attention=run.fp8_attention, fp8_recipe=run.fp8_recipe, nvfp4_rht=run.nvfp4_rht,
    )  # fmt: skip
    return plan, notes


def published_iteration_s(run: PublishedRun, peak_tflops: float) -> tuple[str, float | None, float | None]:
    """(metric name, published value, iteration seconds it implies under the run's own accounting)."""
    acc = FlopsAccounting(run.flops_accounting)
    if acc is FlopsAccounting.none_reported or (run.mfu is None and run.tflops_per_gpu_reported is None):
        if run.tokens_per_sec_per_gpu and run.global_batch:
            t = run.global_batch * run.seq_len / (run.tokens_per_sec_per_gpu * run.n_gpus)
            return "tokens/s/GPU", run.tokens_per_sec_per_gpu, t
        return "—", None, None
    flops = accounting_flops_per_iteration(run)
    if flops is None:
        return "—", None, None
    if acc is FlopsAccounting.megatron_96_hfu and run.tflops_per_gpu_reported:
        return (
            "TFLOP/s/GPU (96-form)",
            run.tflops_per_gpu_reported,
            flops / (run.tflops_per_gpu_reported * 1e12 * run.n_gpus),
        )
    peak = (run.gpu_peak_tflops_16bit or peak_tflops) * 1e12
    if run.mfu:
        return f"MFU ({acc.value})", run.mfu, flops / (run.mfu * peak * run.n_gpus)
    return "—", None, None


def run_cluster(run: PublishedRun, catalog: Catalog) -> Cluster:
    """The cluster the run ran on: its node (or its GPU's reference server) with the catalog's efficiencies, the
    scale-out bandwidth the source states when it differs from the node's (spread over the node's NICs), and the
    card's HBM bandwidth when the source states one other than the catalog SKU's."""
    cluster = build_cluster(
        catalog.hardware, catalog.efficiency, accelerator=run.accelerator, gpus=run.n_gpus,
        node=run.node or DEFAULT_NODE.get(run.accelerator), power_limit_w=run.gpu_power_limit_w,
    )  # fmt: skip
    if run.scale_out_gbit_per_s_per_node:
        per_nic = run.scale_out_gbit_per_s_per_node / cluster.node.scale_out_nics
        cluster = apply_overrides(cluster, {"node.scale_out_gbit_per_s_per_nic": per_nic})
    if run.gpu_memory_bandwidth_gb_per_s:  # e.g. Meta's Grand Teton H100 with 96 GB of HBM2e at 2.4 TB/s
        cluster = apply_overrides(
            cluster, {"accelerator.memory_bandwidth_gb_per_s": run.gpu_memory_bandwidth_gb_per_s}
        )
    return cluster


def validate_run(run: PublishedRun, catalog: Catalog) -> ValidationRow:
    base = dict(run=run.slug, model=run.model, accelerator=run.accelerator, gpus=run.n_gpus,
                accounting=str(run.flops_accounting))  # fmt: skip
    if run.excluded_from_validation:
        return ValidationRow(**base, plan="", metric="—", published=None, predicted=None, error=None,
                             predicted_mfu=None, skipped=run.excluded_from_validation)  # fmt: skip
    if run.accelerator is None:
        return ValidationRow(**base, plan="", metric="—", published=None, predicted=None, error=None,
                             predicted_mfu=None, skipped=f"GPU {run.gpu_name} is not in the catalog")  # fmt: skip
    arch = architecture_for_run(run, catalog.architectures)
    plan, notes = run_plan(run)
    cluster = run_cluster(run, catalog)
    summary = (f"tp{plan.tp} pp{plan.pp} vpp{plan.vpp} dp{plan.dp} cp{plan.cp} "
               + (f"ep{plan.ep} " if plan.ep > 1 else "") + (f"etp{plan.etp} " if run.ep and plan.etp != plan.tp else "")
               + f"mb{plan.micro_batch} "
               f"gb{plan.global_batch} s{plan.seq_len} {plan.recompute.value} {plan.sharding.value} {plan.framework.value}")  # fmt: skip
    try:
        est = estimate(arch, cluster, plan, allow_tp_across_nodes=True,
                       framework_refusals=str(run.framework) in DESCRIBED_STACKS)  # fmt: skip
    except InvalidPlan as exc:
        return ValidationRow(**base, plan=summary, metric="—", published=None, predicted=None, error=None,
                             predicted_mfu=None, skipped=f"plan invalid: {exc}")  # fmt: skip
    metric, published, t_pub = published_iteration_s(run, cluster.accelerator.bf16_dense_tflops)
    if t_pub is None or published is None:
        return ValidationRow(**base, plan=summary, metric=metric, published=None, predicted=None, error=None,
                             predicted_mfu=est.mfu, skipped="no comparable throughput published")  # fmt: skip
    predicted = published * t_pub / est.step_time_s
    return ValidationRow(
        **base, plan=summary, metric=metric, published=published, predicted=predicted,
        error=predicted / published - 1, predicted_mfu=est.mfu, assumptions=tuple(notes), **_memory(run, est),
    )  # fmt: skip


def _memory(run: PublishedRun, est: Estimate) -> dict[str, float | None]:
    """Published peak memory per GPU against the estimate's: the caching-allocator peak (allocated + fragmentation
    of the fullest stage, plus the segments DeepSpeed ZeRO-1/2's optimizer step adds, or the start-up copy where
    that is larger), which is what torch.cuda.max_memory_reserved reports; where the source read the device
    (nvidia-smi: ``includes_runtime``), the CUDA context and NCCL buffers outside the allocator are added."""
    published = run.memory.peak_gib_max_over_ranks if run.memory else None
    if not published:
        return {}
    runtime = run.memory.includes_runtime  # type: ignore[union-attr]
    predicted = (
        max(
            max(st.allocated_peak_bytes + st.fragmentation_bytes + st.optimizer_step_bytes, st.startup_bytes)
            + (st.runtime_bytes if runtime else 0)
            for st in est.memory_by_stage
        )
        / 2**30
    )
    return {
        "memory_published_gib": published,
        "memory_predicted_gib": predicted,
        "memory_error": predicted / published - 1,
    }


def validate(catalog: Catalog) -> ValidationReport:
    rows = tuple(validate_run(run, catalog) for run in catalog.published_runs)
    errors = [(abs(r.error), r.run) for r in rows if r.error is not None]
    if not errors:
        return ValidationReport(
            rows=rows, compared=0, median_abs_error=None, max_abs_error=None, worst_run=None
        )
    worst = max(errors)
    memory = [abs(r.memory_error) for r in rows if r.memory_error is not None]
    return ValidationReport(
        rows=rows, compared=len(errors), median_abs_error=statistics.median(e for e, _ in errors),
        max_abs_error=worst[0], worst_run=worst[1], memory_compared=len(memory),
        memory_median_abs_error=statistics.median(memory) if memory else None,
        memory_max_abs_error=max(memory) if memory else None,
    )  # fmt: skip


class AccuracyRow(Frozen):
    run: str
    family: str
    stack: str
    precision: str = "bf16"
    accelerator: str | None
    gpus: int
    plan: str
    metric: str
    published: float | None
    predicted: float | None
    fit_error: float | None
    cv_error: float | None
    notes: str


class AccuracyGroup(Frozen):
    group: str
    runs: int
    cv_median_abs_error: float | None
    fit_median_abs_error: float | None


class MemoryRow(Frozen):
    run: str
    published_gib: float
    predicted_gib: float
    error: float
    includes_runtime: bool


class AccuracyTable(Frozen):
    """What /accuracy shows: per run the fit error (now) and the out-of-sample error (recorded by the last fit),
    their medians by stack, GPU, GEMM precision and source family, how many runs fall within ±10 % and beyond ±20 % out of sample,
    and the published peak-memory figures against the estimate's (not fitted: one error each)."""

    rows: tuple[AccuracyRow, ...]
    fit_date: str | None
    families: int
    cv_median_abs_error: float | None
    cv_max_abs_error: float | None
    fit_median_abs_error: float | None
    by_stack: tuple[AccuracyGroup, ...]
    by_accelerator: tuple[AccuracyGroup, ...]
    by_family: tuple[AccuracyGroup, ...] = ()
    by_precision: tuple[AccuracyGroup, ...] = ()
    cv_within_10: int = 0
    cv_beyond_20: int = 0
    configurations: int | None = None
    cv_median_abs_error_distinct: float | None = None
    memory_rows: tuple[MemoryRow, ...] = ()
    memory_median_abs_error: float | None = None
    memory_max_abs_error: float | None = None
    memory_within_10: int = 0


def _median_abs(values: list[float | None]) -> float | None:
    present = [abs(v) for v in values if v is not None]
    return statistics.median(present) if present else None


def accuracy_table(catalog: Catalog) -> AccuracyTable:
    """Every published run with its fit error (scored now with the fitted constants) and its cross-validated
    error (from data/fitted.toml: the error when the run's source family was left out of the fit)."""
    fit = catalog.fit
    cv = fit.cv_errors if fit else {}
    report = validate(catalog)
    runs = {r.slug: r for r in catalog.published_runs}
    rows = tuple(
        AccuracyRow(
            run=row.run,
            family=runs[row.run].family,
            stack=runs[row.run].stack,
            precision=str(runs[row.run].precision),
            accelerator=row.accelerator,
            gpus=row.gpus,
            plan=row.plan,
            metric=row.metric,
            published=row.published,
            predicted=row.predicted,
            fit_error=row.error,
            cv_error=cv.get(row.run) if row.error is not None else None,
            notes=row.skipped or "; ".join(row.assumptions),
        )  # fmt: skip
        for row in report.rows
    )

    def groups(key) -> tuple[AccuracyGroup, ...]:  # noqa: ANN001
        names = sorted({key(r) or "—" for r in rows if r.fit_error is not None})
        return tuple(
            AccuracyGroup(
                group=name,
                runs=sum(1 for r in rows if r.fit_error is not None and (key(r) or "—") == name),
                cv_median_abs_error=_median_abs([r.cv_error for r in rows if (key(r) or "—") == name]),
                fit_median_abs_error=_median_abs([r.fit_error for r in rows if (key(r) or "—") == name]),
            )
            for name in names
        )

    cv_errors = [abs(r.cv_error) for r in rows if r.cv_error is not None]
    memory = tuple(
        MemoryRow(
            run=row.run,
            published_gib=row.memory_published_gib,
            predicted_gib=row.memory_predicted_gib,
            error=row.memory_error,
            includes_runtime=bool(runs[row.run].memory and runs[row.run].memory.includes_runtime),
        )  # fmt: skip
        for row in report.rows
        if row.memory_error is not None and row.memory_published_gib and row.memory_predicted_gib is not None
    )
    return AccuracyTable(
        rows=rows, fit_date=fit.date if fit else None, families=len(fit.families) if fit else 0,
        cv_median_abs_error=fit.cv_median_abs_error if fit else None,
        cv_max_abs_error=fit.cv_max_abs_error if fit else None, fit_median_abs_error=report.median_abs_error,
        by_stack=groups(lambda r: r.stack), by_accelerator=groups(lambda r: r.accelerator),
        by_family=groups(lambda r: r.family), by_precision=groups(lambda r: r.precision),
        cv_within_10=sum(1 for e in cv_errors if e <= 0.10), cv_beyond_20=sum(1 for e in cv_errors if e > 0.20),
        configurations=fit.configurations if fit else None,
        cv_median_abs_error_distinct=fit.cv_distinct_median_abs_error if fit else None,
        memory_rows=memory, memory_median_abs_error=report.memory_median_abs_error,
        memory_max_abs_error=report.memory_max_abs_error,
        memory_within_10=sum(1 for m in memory if abs(m.error) <= 0.10),
    )  # fmt: skip
