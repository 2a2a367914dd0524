"""torchtitan config module (Python) for ``torchtitan.train --module torchtitan_config --config capplan_plan``.

torchtitan 0.3 (2026-09) reads no TOML: a run is ``--module M --config F``, where ``F()`` in module ``M``
returns a ``Trainer.Config`` (``torchtitan/config/manager.py``). The file written here starts from the
config registry function torchtitan ships for the model (``llama3_70b``, ``deepseek_v3_671b``…), rebuilds the
model spec (fp8 converters or none) and sets what the plan decides: batch, steps, the data-parallel
degrees, TP/PP/CP/EP, the pipeline split as explicit module lists, activation checkpointing, compile, CPU
offload, and checkpointing every N steps from capplan's reliability model (``checkpoint.enable`` is off by
default in torchtitan; on here, and a restart resumes from the latest step in the folder).

Batch semantics: ``local_batch_size`` is per data-parallel rank per gradient-accumulation step; torchtitan
derives accumulation as ``global_batch_size / (local_batch_size · dp)``. With pipeline parallelism every
micro-batch of the step goes through the pipeline at once (``local_batch_size = global / dp``, split into
``pipeline_parallel_microbatch_size`` chunks) and there is no gradient accumulation.

Pipeline split: torchtitan's own split counts the embedding and the output as layers
(``pipeline_parallel_first/last_stage_less_layers``); capplan's estimate splits the transformer layers
(``app.domain.pipeline.chunk_layer_counts``), so the file writes ``module_fqns_per_model_part`` — the exact
modules of every stage — and torchtitan builds what capplan estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.estimator.pipeline import chunk_layer_counts
from app.domain.estimator.plan import Fp8Recipe, Framework, Offload, Precision, Recompute, Sharding
from app.domain.export.document import PlanDocument
from app.domain.export.launch import (
    CHECKPOINT_DIR,
    TORCHTITAN_CONFIG_FUNCTION,
    TORCHTITAN_MODULE,
    checkpoint_interval_steps,
    header_lines,
    steps_or_default,
)
from app.domain.export.text import comment_block

TORCHTITAN_VERSION = "0.3.0"


@dataclass(frozen=True, slots=True)
class TitanModel:
    """A model torchtitan ships: the package under ``torchtitan.models``, the registry function the config
    starts from, the flavor and the Hugging Face assets folder (tokenizer).

    The base is a registry function without converters (``llama3_8b`` for every Llama 3 flavor: torchtitan's
    ``llama3_405b`` builds fp8 converters, which fail on GPUs before SM89); the model spec, assets and every
    plan-dependent field are replaced."""

    package: str
    registry_function: str
    flavor: str
    hf_assets: str
    registry_kwargs: str = ""  # extra keyword arguments of model_registry, as Python source
    fp8_filter: tuple[str, ...] = ("lm_head",)
    mx_fqns: tuple[str, ...] = ("layers.",)


TORCHTITAN_MODELS: dict[str, TitanModel] = {
    "llama3.1-8b": TitanModel("llama3", "llama3_8b", "8B", "Llama-3.1-8B"),
    "llama3.1-70b": TitanModel("llama3", "llama3_8b", "70B", "Llama-3.1-70B"),
    "llama3.1-405b": TitanModel("llama3", "llama3_8b", "405B", "Llama-3.1-405B"),
    "deepseek-v3": TitanModel(
        "deepseek_v3", "deepseek_v3_671b", "671B", "DeepSeek-V3.1-Base", 'attn_backend="flex"',
        ("lm_head", "router.gate"),
    ),
}  # fmt: skip


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


def stage_modules(n_layers: int, stages: int) -> list[list[str]]:
    """The modules of each pipeline stage (torchtitan FQNs): capplan's layer split, the embedding on the
    first stage, the final norm and the output head on the last."""
    counts = chunk_layer_counts(n_layers, stages)
    out: list[list[str]] = []
    start = 0
    for c, count in enumerate(counts):
        modules = [f"layers.{i}" for i in range(start, start + count)]
        start += count
        if c == 0:
            modules.insert(0, "tok_embeddings")
        if c == stages - 1:
            modules += ["norm", "lm_head"]
        out.append(modules)
    return out


def _py(value: object) -> str:
    """A Python literal (repr of str/int/float/bool/None/lists of them)."""
    return repr(value)


def torchtitan_config_module(doc: PlanDocument) -> tuple[str, list[str]]:
    p, arch = doc.plan, doc.arch
    notes: list[str] = []
    dp = data_parallel(doc)
    if dp.note:
        notes.append(dp.note)
    b = batches(doc)
    steps, steps_note = steps_or_default(doc)
    interval, interval_note = checkpoint_interval_steps(doc)

    model = TORCHTITAN_MODELS.get(arch.slug)
    if model is None:
        notes.append(
            f"PLACEHOLDER: torchtitan {TORCHTITAN_VERSION} ships no model for {arch.slug}: register one "
            f"({arch.n_layers} layers, hidden {arch.hidden_size}, {arch.n_heads} heads, {arch.n_kv_heads} KV heads, "
            f"FFN {arch.ffn_hidden_size}, vocab {arch.vocab_size}) and point the imports below at it"
        )
        model = TitanModel("PLACEHOLDER_your_model", "PLACEHOLDER_your_config", arch.slug, arch.slug)
    if p.precision is Precision.fp16:
        notes.append(
            "torchtitan mixed precision is bfloat16 or float32: the plan's fp16 is written as bfloat16"
        )
    if p.tp > 1 and not p.sequence_parallel:
        notes.append(
            "torchtitan's tensor parallelism shards norms over the sequence (sequence parallel) by default"
        )
    if p.recompute is Recompute.selective:
        notes.append(
            "torchtitan's selective AC is per-op: it keeps every other matmul output and the attention outputs and "
            "recomputes the rest (capplan's 'selective-op' models it); capplan's 'selective' (Korthikanti et al.) "
            "recomputes only the attention core, so "
            "expect torchtitan to hold less activation memory and recompute more than this estimate"
        )
    if p.recompute is Recompute.full and p.recompute_layers is not None:
        notes.append(
            f"the plan recomputes {p.recompute_layers} layers per pipeline chunk; the config checkpoints every "
            "layer (FullAC): expect less activation memory and more recompute than this estimate"
        )
    if p.offload is not Offload.none and p.offload is not Offload.params_cpu:
        notes.append(
            f"FSDP2 CPU offload moves params, grads and optimizer state; the plan asked for {p.offload.value}"
        )
    if p.optimizer.value != "adamw":
        notes.append(f"the registry's optimizer (AdamW) is kept; the plan assumed {p.optimizer.value}")
    if not p.flash_attention:
        notes.append("torchtitan always uses fused attention; the estimate assumed unfused attention")
    if p.fsdp_flat_params:
        notes.append(
            "torchtitan shards with FSDP2 (fully_shard, per parameter) and copies gathered parameters out of the "
            "all-gather buffer; the estimate assumed FSDP1's flat parameters, which it does not copy"
        )
    if p.repeat_kv and p.cp > 1:
        notes.append(
            f"torchtitan {TORCHTITAN_VERSION} passes grouped K/V to SDPA (enable_gqa); the estimate's ring moved K/V "
            "repeated to every query head, as torchtitan did before 2026-01"
        )

    pkg = f"torchtitan.models.{model.package}"
    fp8 = p.precision is Precision.fp8
    compile_model = p.uses_fused_kernels or fp8
    ac_class = {
        Recompute.full: "FullAC",
        Recompute.selective: "SelectiveAC",
        Recompute.selective_op: "SelectiveAC",
    }.get(p.recompute)
    registry_args = [_py(model.flavor)] + ([model.registry_kwargs] if model.registry_kwargs else [])
    converter = None
    if fp8 and p.fp8_recipe_on(Framework.fsdp2) is Fp8Recipe.mxfp8:
        # torchao's MXFP8 linears (Blackwell) on the transformer layers only: the output head stays 16-bit, as
        # estimated (MXFP8LinearConverter converts the Linear configs whose name contains one of ``fqns``)
        converter = "MXFP8LinearConverter"
        registry_args.append(
            f"converters=[MXFP8LinearConverter.Config(fqns={_py(list(model.mx_fqns))}, "
            f"model_compile_enabled={compile_model})]"
        )
    elif fp8:
        converter = "Float8LinearConverter"
        registry_args.append(
            f"converters=[Float8LinearConverter.Config(filter_fqns={_py(list(model.fp8_filter))}, "
            f"recipe_name={_py(p.fp8_recipe_on(Framework.fsdp2).value)}, model_compile_enabled={compile_model})]"
        )
    else:
        registry_args.append("converters=[]")
    lines = [
        "from torchtitan.components.checkpoint import CheckpointManager",
        *([f"from torchtitan.components.quantization import {converter}"] if converter else []),
        "from torchtitan.components.optimizer import default_adamw",
        "from torchtitan.config import CompileConfig",
        *([f"from torchtitan.distributed.activation_checkpoint import {ac_class}"] if ac_class else []),
        f"from {pkg} import model_registry",
        f"from {pkg}.config_registry import {model.registry_function} as base_config",
        "",
        "",
        f"def {TORCHTITAN_CONFIG_FUNCTION}():",
        f'    """{doc.name}: {arch.name} on {doc.hardware.gpus} x {doc.hardware.gpu} (capplan plan)."""',
        "    config = base_config()",
        f"    config.model_spec = model_registry({', '.join(registry_args)})",
        f"    config.hf_assets_path = {_py('./assets/hf/' + model.hf_assets)}  # tokenizer (download_hf_assets.py)",
        f"    config.dump_folder = {_py('./outputs')}",
        f"    config.dataloader.dataset = {_py('c4')}  # PLACEHOLDER: your dataset",
        "    # training: sequences per data-parallel rank per step"
        + (f", {b.local_batch_size // p.micro_batch} pipeline micro-batches" if p.pp > 1 else ""),
        f"    config.training.local_batch_size = {b.local_batch_size}",
        f"    config.training.global_batch_size = {b.global_batch_size}"
        f"  # local {b.local_batch_size} x dp {p.dp} x grad-accum {b.gradient_accumulation_steps}",
        f"    config.training.seq_len = {p.seq_len}",
        f"    config.training.steps = {steps}  # {steps_note}",
        "    config.training.mixed_precision_param = "
        + _py("float32" if p.precision is Precision.fp32 else "bfloat16"),
        f"    config.training.enable_cpu_offload = {p.offload is not Offload.none}",
        f"    config.training.disable_cuda_graphs = {p.pp > 1 or p.ep > 1}"
        + (
            "  # torchtitan: CUDA graphs support neither PP nor EP's standard dispatcher"
            if p.pp > 1 or p.ep > 1
            else ""
        ),
        f"    config.parallelism.data_parallel_replicate_degree = {dp.replicate}",
        f"    config.parallelism.data_parallel_shard_degree = {dp.shard}"
        f"  # replicate x shard x tp x pp x cp = {dp.replicate * dp.shard * p.tp * p.pp * p.cp} GPUs",
        f"    config.parallelism.fsdp_reshard_after_forward = {_py(dp.reshard_after_forward)}",
        f"    config.parallelism.tensor_parallel_degree = {p.tp}",
        f"    config.parallelism.enable_sequence_parallel = {p.tp > 1}",
        f"    config.parallelism.context_parallel_degree = {p.cp}",
        f"    config.parallelism.expert_parallel_degree = {p.ep}"
        + (
            "  # experts whole on each GPU: EP borrows ranks from FSDP and TP"
            if p.ep > 1 and p.tp > 1
            else ""
        ),
        f"    config.parallelism.pipeline_parallel_degree = {p.pp}",
    ]
    if p.pp > 1:
        stages = p.pp * p.vpp
        counts = chunk_layer_counts(arch.n_layers, stages)
        lines += [
            "    config.parallelism.pipeline_parallel_schedule = "
            + _py("Interleaved1F1B" if p.vpp > 1 else "1F1B")
            + f"  # {stages} stages, {p.vpp} per rank",
            f"    config.parallelism.pipeline_parallel_microbatch_size = {p.micro_batch}",
            "    config.parallelism.pipeline_parallel_layers_per_stage = None",
            f"    # layers per stage {'/'.join(map(str, counts))} (capplan's split; embedding first, output last)",
            f"    config.parallelism.module_fqns_per_model_part = {_py(stage_modules(arch.n_layers, stages))}",
        ]
    ac = f"{ac_class}.Config()" if ac_class else "None"
    # the loss compiles with the model unless the plan says otherwise (fused_loss: the estimate's loss kernel)
    compile_loss = compile_model if p.fused_loss is None else p.fused_loss
    components = [c for c, on in (("model", compile_model), ("loss", compile_loss)) if on] or ["loss"]
    # async TP (the estimate's TP communication overlap): torchtitan requires the compiled model
    async_tp = p.tp > 1 and p.uses_tp_comm_overlap and compile_model
    if p.tp > 1 and p.asks_tp_comm_overlap and not async_tp:
        notes.append(
            "async TP needs torch.compile of the model (--fused-kernels): not enabled, nor assumed by the estimate"
        )
    lines += [
        f"    config.activation_checkpoint = {ac}",
        f"    config.compile = CompileConfig(enable={compile_model or compile_loss}, components={_py(components)}"
        + (", enable_async_tensor_parallel=True)" if async_tp else ")"),
        f"    # checkpoint every {interval} steps: {interval_note}; a restart resumes from the latest step",
        "    config.checkpoint = CheckpointManager.Config(",
        f"        enable=True, folder={_py(CHECKPOINT_DIR)}, interval={interval}, async_mode={_py('async')},",
        "        last_save_model_only=False,",
        "    )",
        "    config.optimizer = default_adamw(lr=3e-4)  # PLACEHOLDER: your learning rate and schedule",
        "    return config",
    ]
    head = comment_block(
        [
            *header_lines(doc, f"torchtitan {TORCHTITAN_VERSION} config module"),
            f"run: torchrun ... -m torchtitan.train --module {TORCHTITAN_MODULE} --config {TORCHTITAN_CONFIG_FUNCTION}"
            " (this file's folder on PYTHONPATH)",
            "placeholders: the dataset, the learning rate"
            + (", the model imports" if arch.slug not in TORCHTITAN_MODELS else ""),
            *(f"note: {n}" for n in notes),
        ]
    )
    return head + "\n".join(lines) + "\n", notes
