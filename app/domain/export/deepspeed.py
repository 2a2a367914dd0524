"""DeepSpeed config JSON: ZeRO stage and offload, precision, and the three batch numbers, consistent.

DeepSpeed checks ``train_batch_size = train_micro_batch_size_per_gpu · gradient_accumulation_steps ·
data-parallel world size`` at start-up; the data-parallel size is the plan's dp (world / (tp · pp · cp)).
Tensor and pipeline parallelism are not config keys: they come from the model code (Megatron-DeepSpeed's
arguments or a ``PipelineModule``).
"""

from __future__ import annotations

import json
from typing import Any

from app.domain.estimator.plan import Framework, Offload, Optimizer, Precision, Recompute, Sharding
from app.domain.export.document import PlanDocument

NVME_PATH = "/local_nvme"

ZERO_STAGE = {
    Sharding.ddp: 0,
    Sharding.zero1: 1,
    Sharding.megatron_distopt: 1,
    Sharding.zero2: 2,
    Sharding.fsdp_grad_op: 2,
    Sharding.zero3: 3,
    Sharding.fsdp_full: 3,
    Sharding.fsdp_hybrid: 3,
}


def gradient_accumulation_steps(doc: PlanDocument) -> int:
    p = doc.plan
    return p.global_batch // (p.micro_batch * p.dp)


def deepspeed_config(doc: PlanDocument) -> tuple[dict[str, Any], list[str]]:
    p = doc.plan
    notes: list[str] = []
    stage = ZERO_STAGE[p.sharding]
    if p.sharding not in {Sharding.ddp, Sharding.zero1, Sharding.zero2, Sharding.zero3}:
        notes.append(f"{p.sharding.value} is written as ZeRO stage {stage}")
    zero: dict[str, Any] = {"stage": stage}
    if stage > 0:
        zero |= {"overlap_comm": True, "contiguous_gradients": True, "reduce_scatter": True}
    if stage == 3:
        zero |= {"stage3_gather_16bit_weights_on_model_save": True}
        notes.append(
            "build the model under deepspeed.zero.Init(config_dict_or_path=this file) (Hugging Face: create "
            "HfDeepSpeedConfig before from_pretrained), as the estimate assumes"
            if p.zero_init
            else "the model is built outside deepspeed.zero.Init (zero_init off): deepspeed.initialize moves it whole "
            "to every GPU before ZeRO-3 partitions it, and the estimate counts that start-up peak"
        )
    if p.sharding is Sharding.fsdp_hybrid and p.shard_group_size:
        zero["zero_hpz_partition_size"] = p.shard_group_size
        notes.append(
            "HSDP maps to ZeRO++ hierarchical partitioning (zero_hpz_partition_size): a secondary copy"
        )
    if p.offload is Offload.optimizer_cpu:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    elif p.offload is Offload.params_cpu:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    elif p.offload is Offload.nvme:
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": NVME_PATH, "pin_memory": True}
        zero["offload_param"] = {"device": "nvme", "nvme_path": NVME_PATH, "pin_memory": True}
        notes.append(f"NVMe offload writes to {NVME_PATH}: a local NVMe mount on every node")
    if p.offload in {Offload.params_cpu, Offload.nvme} and stage != 3:
        notes.append("DeepSpeed offloads parameters only under ZeRO stage 3")

    config: dict[str, Any] = {
        "train_batch_size": p.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": gradient_accumulation_steps(doc),
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "bf16": {"enabled": p.precision in {Precision.bf16, Precision.fp8}},
        "fp16": {"enabled": p.precision is Precision.fp16},
        "zero_optimization": zero,
    }
    if p.grad_accum_fp32 and p.precision in {Precision.bf16, Precision.fp8}:
        # the estimate's fp32 gradient accumulation (with ZeRO-1: BF16_Optimizer and its whole fp32 gradient buffer)
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    if p.precision is Precision.fp16:
        config["fp16"] |= {"loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                           "hysteresis": 2, "min_loss_scale": 1}  # fmt: skip
    if p.precision is Precision.fp8:
        notes.append(
            "DeepSpeed has no FP8 switch: bf16 here, FP8 GEMMs come from TransformerEngine in the model; the "
            f"estimate assumed its {p.fp8_recipe_on(Framework.deepspeed).value} recipe (te.fp8_autocast(fp8_recipe=…) in the model code)"
        )
    if p.optimizer is Optimizer.sgd:
        notes.append(
            "no optimizer block: DeepSpeed's built-in optimizers are Adam-family; pass SGD as client optimizer"
        )
    else:
        config["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1},
        }
        if p.optimizer is Optimizer.adamw_8bit:
            notes.append(
                "DeepSpeed has no 8-bit AdamW: written as AdamW (pass bitsandbytes AdamW8bit as client optimizer)"
            )
    if p.recompute is not Recompute.none:
        # deepspeed.checkpointing.configure() reads this section; the model wraps its layers with
        # deepspeed.checkpointing.checkpoint (PipelineModule: activation_checkpoint_interval=1)
        config["activation_checkpointing"] = {
            "partition_activations": p.tp > 1,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
            "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        }
        if p.recompute is Recompute.full and p.recompute_layers is not None:
            notes.append(
                f"the plan recomputes {p.recompute_layers} layers per pipeline chunk: wrap only those layers "
                "with deepspeed.checkpointing.checkpoint (the others keep their activations)"
            )
        if p.recompute is Recompute.selective:
            notes.append(
                "DeepSpeed checkpoints whole layers: selective recompute needs the model to checkpoint only "
                "its attention core (e.g. Megatron-DeepSpeed --recompute-granularity selective)"
            )
    if p.pp > 1:
        notes.append(
            f"pipeline: build a deepspeed.pipe.PipelineModule with num_stages={p.pp} "
            "(partition_method='uniform'); DeepSpeed's pipeline engine runs 1F1B with ZeRO stage 0 or 1 only"
        )
    if p.tp * p.pp * p.cp > 1:
        notes.append(
            f"tp={p.tp} pp={p.pp} cp={p.cp} are set in the model code (e.g. Megatron-DeepSpeed arguments), not here"
        )
    if p.moe_capacity_factor:
        notes.append(
            f"MoE token dropping is set in the model code: deepspeed.moe.layer.MoE(..., ep_size={p.ep}, "
            f"capacity_factor={p.moe_capacity_factor:g}, drop_tokens=True), as the estimate assumed"
            + (
                ""
                if p.moe_pad_to_capacity
                else "; DeepSpeed's top-k gate dispatches capacity-sized (zero-padded) buffers, so set "
                "moe_pad_to_capacity for the estimate to match it"
            )
        )
    return config, notes


def deepspeed_json(doc: PlanDocument) -> tuple[str, list[str]]:
    config, notes = deepspeed_config(doc)
    return json.dumps(config, indent=2) + "\n", notes
