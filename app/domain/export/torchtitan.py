"""torchtitan job config (TOML) for FSDP2 + TP/PP/CP/EP: the ``--job.config_file`` of ``torchtitan.train``.

Keys follow torchtitan's TOML ``JobConfig`` (sections job, model, optimizer, training, parallelism,
checkpoint, activation_checkpoint, compile, float8 — as in its ``llama3_70b.toml``). Batch semantics:
``local_batch_size`` is per data-parallel rank per optimizer step *before* gradient accumulation, which
torchtitan derives as ``global_batch_size / (local_batch_size · dp)``; with pipeline parallelism every
micro-batch of the step goes through the pipeline at once (``local_batch_size = global / dp``, split into
``pipeline_parallel_microbatch_size`` chunks) and there is no gradient accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.export.document import PlanDocument
from app.domain.export.launch import header_lines, steps_or_default
from app.domain.export.text import TomlValue, comment_block, toml_table
from app.domain.pipeline import chunk_layer_counts
from app.domain.plan import Offload, Precision, Recompute, Sharding

# catalog preset → (torchtitan model name, flavor, Hugging Face assets folder)
TORCHTITAN_MODELS: dict[str, tuple[str, str, str]] = {
    "llama3.1-8b": ("llama3", "8B", "Llama-3.1-8B"),
    "llama3.1-70b": ("llama3", "70B", "Llama-3.1-70B"),
    "llama3.1-405b": ("llama3", "405B", "Llama-3.1-405B"),
    "deepseek-v3": ("deepseek_v3", "671B", "DeepSeek-V3"),
}


@dataclass(frozen=True, slots=True)
class DataParallel:
    """torchtitan's two data-parallel degrees and the FSDP reshard policy for a plan's sharding."""

    replicate: int
    shard: int
    reshard_after_forward: str
    note: str | None = None


def data_parallel(doc: PlanDocument) -> DataParallel:
    p = doc.plan
    sh = p.sharding
    if sh is Sharding.ddp:
        return DataParallel(replicate=p.dp, shard=1, reshard_after_forward="default")
    if sh is Sharding.fsdp_hybrid:
        group = p.dp_shard_size
        return DataParallel(replicate=p.dp // group, shard=group, reshard_after_forward="always")
    if sh in {Sharding.fsdp_full, Sharding.zero3}:
        note = (
            None if sh is Sharding.fsdp_full else "ZeRO-3 maps to FSDP2 fully_shard (reshard after forward)"
        )
        return DataParallel(replicate=1, shard=p.dp, reshard_after_forward="always", note=note)
    note = None
    if sh is not Sharding.fsdp_grad_op:
        note = (
            f"FSDP2 has no {sh.value}; the nearest is fully_shard without resharding after forward "
            "(SHARD_GRAD_OP), which also shards the parameters"
        )
    return DataParallel(replicate=1, shard=p.dp, reshard_after_forward="never", note=note)


@dataclass(frozen=True, slots=True)
class Batches:
    local_batch_size: int
    global_batch_size: int
    gradient_accumulation_steps: int
    pipeline_microbatch_size: int | None


def batches(doc: PlanDocument) -> Batches:
    p = doc.plan
    per_rank = p.global_batch // p.dp
    if p.pp > 1:
        return Batches(per_rank, p.global_batch, 1, p.micro_batch)
    return Batches(p.micro_batch, p.global_batch, per_rank // p.micro_batch, None)


def _pipeline(doc: PlanDocument) -> tuple[dict[str, TomlValue], dict[str, str]]:
    p, arch = doc.plan, doc.arch
    if p.pp == 1:
        return {}, {}
    stages = p.pp * p.vpp
    values: dict[str, TomlValue] = {
        "pipeline_parallel_schedule": "Interleaved1F1B" if p.vpp > 1 else "1F1B",
        "pipeline_parallel_microbatch_size": p.micro_batch,
    }
    comments = {
        "pipeline_parallel_schedule": f"{stages} stages: {p.vpp} per rank"
        if p.vpp > 1
        else "one stage per rank"
    }
    if arch.n_layers % stages == 0:
        values["pipeline_parallel_layers_per_stage"] = arch.n_layers // stages
    else:
        counts = chunk_layer_counts(arch.n_layers, stages)
        starts = [sum(counts[:c]) for c in range(1, stages)]
        values["pipeline_parallel_split_points"] = [f"layers.{s}" for s in starts]
        comments["pipeline_parallel_split_points"] = (
            f"layers per stage {'/'.join(str(c) for c in counts)}: the lighter first and last stages also hold "
            "the embedding and the output layer"
        )
    return values, comments


def torchtitan_toml(doc: PlanDocument) -> tuple[str, list[str]]:
    p, arch = doc.plan, doc.arch
    notes: list[str] = []
    dp = data_parallel(doc)
    if dp.note:
        notes.append(dp.note)
    b = batches(doc)
    steps, steps_note = steps_or_default(doc)

    name, flavor, assets = TORCHTITAN_MODELS.get(arch.slug, (arch.family or "custom", arch.slug, arch.slug))
    if arch.slug not in TORCHTITAN_MODELS:
        notes.append(
            f"torchtitan has no built-in flavor for {arch.slug}: register model {name!r} flavor {arch.slug!r} "
            f"({arch.n_layers} layers, hidden {arch.hidden_size}, {arch.n_heads} heads, {arch.n_kv_heads} KV heads, "
            f"FFN {arch.ffn_hidden_size}, vocab {arch.vocab_size})"
        )
    model: dict[str, TomlValue] = {"name": name, "flavor": flavor, "hf_assets_path": f"./assets/hf/{assets}"}
    if p.precision is Precision.fp8:
        model["converters"] = ["float8"]

    if p.precision is Precision.fp32:
        param_dtype = "float32"
    else:
        param_dtype = "bfloat16"
        if p.precision is Precision.fp16:
            notes.append(
                "torchtitan mixed precision is bfloat16 or float32: the plan's fp16 is written as bfloat16"
            )
    training: dict[str, TomlValue] = {
        "local_batch_size": b.local_batch_size,
        "global_batch_size": b.global_batch_size,
        "seq_len": p.seq_len,
        "steps": steps,
        "max_norm": 1.0,
        "dataset": "c4",
        "mixed_precision_param": param_dtype,
        "mixed_precision_reduce": "float32",
    }
    training_comments = {
        "local_batch_size": "sequences per data-parallel rank per step"
        + (f", {b.local_batch_size // p.micro_batch} pipeline micro-batches" if p.pp > 1 else ""),
        "global_batch_size": f"= local {b.local_batch_size} x dp {p.dp} x grad-accum {b.gradient_accumulation_steps}",
        "steps": steps_note,
        "dataset": "placeholder: your dataset",
    }
    if p.offload is not Offload.none:
        training["enable_cpu_offload"] = True
        if p.offload is not Offload.params_cpu:
            notes.append(
                f"FSDP2 CPU offload moves params, grads and optimizer state; the plan asked for {p.offload.value}"
            )

    parallelism: dict[str, TomlValue] = {
        "data_parallel_replicate_degree": dp.replicate,
        "data_parallel_shard_degree": dp.shard,
        "fsdp_reshard_after_forward": dp.reshard_after_forward,
        "tensor_parallel_degree": p.tp,
        "pipeline_parallel_degree": p.pp,
        "context_parallel_degree": p.cp,
    }
    pp_values, pp_comments = _pipeline(doc)
    parallelism |= pp_values
    if arch.n_experts:
        parallelism["expert_parallel_degree"] = p.ep
    degrees = dp.replicate * dp.shard * p.tp * p.pp * p.cp
    par_comments = {
        "data_parallel_shard_degree": f"replicate x shard x tp x pp x cp = {degrees} GPUs"
    } | pp_comments
    if p.tp > 1 and not p.sequence_parallel:
        notes.append(
            "torchtitan's tensor parallelism always shards norms over the sequence (sequence parallel)"
        )

    activation: dict[str, TomlValue] = {"mode": p.recompute.value}
    if p.recompute is Recompute.selective:
        activation["selective_ac_option"] = "op"
        notes.append(
            "torchtitan's selective AC ('op') is per-op: it keeps every other matmul output and the attention "
            "outputs and recomputes the rest; capplan's 'selective' (Korthikanti et al.) recomputes only the "
            "attention core, so expect torchtitan to hold less activation memory and recompute more than this "
            "estimate (capplan models per-op SAC not yet; see README, Accuracy)"
        )

    tables = [
        toml_table("job", {"dump_folder": "./outputs", "description": f"{doc.name}: {arch.name}"}),
        toml_table("model", model),
        toml_table(
            "optimizer", {"name": "AdamW", "lr": 3e-4, "eps": 1e-8}, {"lr": "placeholder: your schedule"}
        ),
        toml_table("training", training, training_comments),
        toml_table("parallelism", parallelism, par_comments),
        toml_table(
            "checkpoint",
            {
                "enable_checkpoint": True,
                "folder": "checkpoint",
                "interval": min(500, steps),
                "async_mode": "async",
            },
        ),
        toml_table("activation_checkpoint", activation),
        toml_table("compile", {"enable": p.uses_fused_kernels, "components": ["model", "loss"]}),
    ]
    if p.optimizer.value != "adamw":
        notes.append(f"torchtitan's optimizer here is AdamW; the plan assumed {p.optimizer.value}")
    if p.precision is Precision.fp8:
        sharded = dp.shard > 1
        tables.append(
            toml_table(
                "float8",
                {
                    "enable_fsdp_float8_all_gather": sharded,
                    "precompute_float8_dynamic_scale_for_fsdp": sharded,
                    "filter_fqns": ["output"],
                },
            )
        )
    if not p.flash_attention:
        notes.append(
            "torchtitan always uses fused (flash) SDPA attention; the estimate assumed unfused attention"
        )
    head = comment_block([*header_lines(doc, "torchtitan job config"), *(f"note: {n}" for n in notes)])
    return head + "\n" + "\n".join(tables), notes
