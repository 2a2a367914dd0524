"""Per-rank memory, for every pipeline stage: model states, activations, buffers, runtime; fit verdict.

Conventions by framework profile (bytes per parameter held on a rank, before sharding):

=============  =========  ========  ==============  ==========================================
profile        weights    grads     fp32 master     notes
=============  =========  ========  ==============  ==========================================
fsdp2          4 (fp32)   4 (fp32)  — (the param)   MixedPrecisionPolicy(bf16 params, fp32 reduce);
                                                    bf16 copies of the gathered units are transient
megatron       2 (bf16)   4 (fp32)  4               fp32 main grads; distributed optimizer shards
                                                    master + Adam over dp (6 + 12/dp B/param)
deepspeed      2 (fp16)   2         4               ZeRO stage k shards optimizer / grads / params
=============  =========  ========  ==============  ==========================================

Adam keeps 8 B (m, v in fp32), 8-bit Adam 2 B, SGD with momentum 4 B. fp32 training has 4 B weights and
grads and no separate master. FP8 training does not shrink model states (weights stay bf16/fp32).
Sharding divides by the data-parallel shard size (dp·cp; the HSDP group for fsdp-hybrid).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import Field

from app.domain.estimator.activation_terms import ActivationTerms
from app.domain.estimator.activations import LayerActivations, framework_style_for, layer_activation_bytes
from app.domain.estimator.plan import Framework, Offload, Optimizer, Plan, Precision, Sharding
from app.domain.estimator.saved_rows import NVFP4_ELEMENT_B
from app.domain.model.architecture import Architecture
from app.domain.provenance import Frozen

GIB = 1024**3


class StateBytesPerParam(Frozen):
    weights: float
    grads: float
    master: float
    optimizer: float
    grad_reduce: float = Field(description="bytes per gradient element on the wire")
    formula: str


def state_bytes_per_param(plan: Plan) -> StateBytesPerParam:
    return _state_bytes(plan.framework, plan.precision, plan.optimizer, plan.grad_reduce_bf16)


@lru_cache(maxsize=64)
def _state_bytes(
    framework: Framework, precision: Precision, optimizer_kind: Optimizer, grad_reduce_bf16: bool = False
) -> StateBytesPerParam:
    plan = Plan(framework=framework, precision=precision, optimizer=optimizer_kind)
    optimizer = {Optimizer.adamw: 8.0, Optimizer.adamw_8bit: 2.0, Optimizer.sgd: 4.0}[plan.optimizer]
    if plan.precision is Precision.fp32:
        return StateBytesPerParam(
            weights=4,
            grads=4,
            master=0,
            optimizer=optimizer,
            grad_reduce=4,
            formula="fp32: 4 + 4 + optimizer",
        )
    if plan.framework is Framework.fsdp2:
        return StateBytesPerParam(
            weights=4,
            grads=4,
            master=0,
            optimizer=optimizer,
            grad_reduce=4,
            formula="FSDP2 mixed precision: fp32 sharded params 4 + fp32 grads 4 + optimizer (bf16 copies transient)",
        )
    if plan.framework is Framework.megatron and grad_reduce_bf16:
        return StateBytesPerParam(
            weights=2,
            grads=2,
            master=4,
            optimizer=optimizer,
            grad_reduce=2,
            formula="Megatron, bf16 gradient reduce: bf16 params 2 + bf16 grads 2 + fp32 master 4 + optimizer",
        )
    if plan.framework is Framework.megatron:
        return StateBytesPerParam(
            weights=2,
            grads=4,
            master=4,
            optimizer=optimizer,
            grad_reduce=4,
            formula="Megatron: bf16 params 2 + fp32 main grads 4 + fp32 master 4 + optimizer",
        )
    return StateBytesPerParam(
        weights=2,
        grads=2,
        master=4,
        optimizer=optimizer,
        grad_reduce=2,
        formula="DeepSpeed: 16-bit params 2 + 16-bit grads 2 + fp32 master 4 + optimizer",
    )


STARTUP_TERM = "start-up copy of the whole model"
"""The dominant term's name when DeepSpeed's start-up copy (``startup_bytes``), not training, sets the peak."""


@dataclass(frozen=True, slots=True)
class StageMemory:
    """Memory of one pipeline rank (every tp/dp/cp rank of that stage holds the same), in bytes.

    ``gathered_params_bytes``: unsharded working copies (FSDP/ZeRO-3 gathers); ``buffers_bytes``:
    communication buckets inside the allocator; ``allocated_peak_bytes``: comparable to
    ``torch.cuda.max_memory_allocated()``; ``startup_bytes``: what the allocator reserves at start-up, before
    training (DeepSpeed ZeRO-3 outside zero.Init: the whole model; the total is the larger of it and the allocated
    peak + fragmentation); ``runtime_bytes``: CUDA context + NCCL buffers, outside PyTorch's
    allocator; ``optimizer_step_bytes``: DeepSpeed ZeRO-1/2's step-time gradient copy, in new allocator segments
    (``max_memory_reserved`` reads it on top of the training peak; :func:`optimizer_step_bytes`); ``host_bytes``/``nvme_bytes``: offloaded state this rank needs on the host.
    """

    rank: int
    layers: int
    first: bool
    last: bool
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    logits_bytes: int
    gathered_params_bytes: int
    buffers_bytes: int
    workspace_bytes: int
    allocated_peak_bytes: int
    fragmentation_bytes: int
    startup_bytes: int
    runtime_bytes: int
    total_bytes: int
    usable_bytes: int
    margin_bytes: int
    fits: bool
    dominant_term: str
    host_bytes: int
    nvme_bytes: int
    communicators: int
    optimizer_step_bytes: int = 0


def exact_fsdp2(plan: Plan) -> bool:
    """Whole-model FSDP2 (no tp/pp/ep, no offload): per-parameter shard sizes are known exactly."""
    return (
        plan.framework is Framework.fsdp2
        and plan.sharding in (Sharding.fsdp_full, Sharding.fsdp_grad_op, Sharding.fsdp_hybrid)
        and plan.tp == plan.pp == plan.ep == 1
        and plan.offload is Offload.none
    )


def layer_terms(arch: Architecture, plan: Plan) -> dict[str, ActivationTerms]:
    """Per-layer activation terms of one micro-batch, for each layer kind the model has."""
    return {kind: layer_activation_bytes(arch, kind, **_activation_args(plan)) for kind in _kinds(arch)}


def layer_activations(arch: Architecture, plan: Plan) -> dict[str, LayerActivations]:
    """Per layer kind, the activation terms of one micro-batch for every recompute mode (``plan.recompute`` is
    not read): the numbers of :func:`layer_terms` without the formulas (the plan search)."""
    args = _activation_args(plan)
    del args["recompute"]
    return {kind: LayerActivations(arch, kind, **args) for kind in _kinds(arch)}


def _kinds(arch: Architecture) -> list[str]:
    return [k for k, n in (("dense", arch.n_dense_layers), ("moe", arch.n_moe_layers)) if n]


def _activation_args(plan: Plan) -> dict:
    """The plan's arguments of :func:`layer_activation_bytes`."""
    return dict(
        micro_batch=plan.micro_batch, seq_len=plan.seq_len, tp=plan.tp, cp=plan.cp,
        sequence_parallel=plan.sequence_parallel, recompute=plan.recompute, flash_attention=plan.flash_attention,
        act_bytes=4 if plan.precision is Precision.fp32 else 2, framework_style=framework_style_for(plan.framework.value),
        recompute_modules=None if plan.recompute_modules is None else frozenset(plan.recompute_modules),
        fp8_linear_inputs=plan.precision is Precision.fp8, fp4_linear_inputs=plan.precision is Precision.nvfp4,
        fp8_attention=plan.fp8_attention, fused_swiglu=plan.fused_swiglu,
        expert_tp=None if plan.etp == plan.tp else plan.etp,
        gathered_tp_inputs=keeps_gathered_tp_inputs(plan),
    )  # fmt: skip


def keeps_gathered_tp_inputs(plan: Plan) -> bool:
    """The plan's tensor parallelism is PyTorch DTensor's (FSDP2 / torchtitan), which keeps the all-gathered inputs
    of its column-parallel linears whole (:func:`layer_activation_bytes`' ``gathered_tp_inputs``)."""
    return plan.framework is Framework.fsdp2


def host_bytes_per_node(stages: tuple[StageMemory, ...], plan: Plan, gpus_per_node: int) -> tuple[int, int]:
    """(host RAM, NVMe) per node for offloaded state: the worst stage's per-rank need × ranks per node."""
    worst_host = max(s.host_bytes for s in stages)
    worst_nvme = max(s.nvme_bytes for s in stages)
    ranks = min(gpus_per_node, plan.gpus)
    return worst_host * ranks, worst_nvme * ranks


def host_capacity_bytes(host_memory_gib: float | None, local_nvme_tb: float | None) -> tuple[float, float]:
    """(host RAM, local NVMe) a node offers for offloaded state; unknown capacity is not a limit."""
    host = host_memory_gib * GIB if host_memory_gib else float("inf")
    nvme = local_nvme_tb * 1e12 if local_nvme_tb else float("inf")
    return host, nvme


# Bytes Transformer Engine keeps per linear weight element in quantized form (row-wise and column-wise copies)
TE_QUANTIZED_WEIGHT_B = {"fp8": 2.0, "nvfp4": 2 * NVFP4_ELEMENT_B}


def te_quantized_weight_bytes(framework: str, precision: str) -> float:
    """Bytes per linear weight element that Transformer Engine holds in quantized form under Megatron-Core, 0 for
    other plans: FP8 2.0 (the row-wise copy and the column-wise one the backward GEMMs read, 1 B each), NVFP4 1.125
    (two copies of 0.5 B and one E4M3 scale per 16 values). What it adds depends on the sharding
    (:func:`app.domain.estimator.rank_memory.rank_memory`): with the distributed optimizer they are the primary
    weights (``--fp8-param-gather`` / ``--fp4-param-gather``, which capplan's Megatron export sets as NVIDIA's
    recipes do) and replace the 16-bit copy; with DDP Megatron keeps the 16-bit weights and TE caches the quantized
    ones across micro-batches and steps (Megatron-Core passes ``is_first_microbatch``, core_v0.16.1
    extensions/transformer_engine.py; TE keeps them in ``_fp8_workspaces``, module/linear.py at d0067d0); under
    torch FSDP2 TE caches nothing (``is_fsdp2``). The embedding, the output head and the norms stay 16-bit."""
    if framework != "megatron":
        return 0.0
    return TE_QUANTIZED_WEIGHT_B.get(precision, 0.0)


def optimizer_step_bytes(xp, zero_optimizer_on_gpu: Any, partition_params: Any, work_b: float) -> Any:
    """Bytes DeepSpeed's ZeRO-1/2 optimizer step allocates beyond the training peak's allocator segments.

    ``DeepSpeedZeroOptimizer.step`` (stage_1_and_2.py, read at master and at 5ca2627 of 2022-02-15, the master
    BLOOM's topology benchmarks ran) builds the rank's
    gradient partition as one flat tensor in the gradient dtype (``flatten`` / ``flatten_dense_tensors_aligned``
    of the averaged gradients: ``work_b`` bytes a partition element) and converts it to the fp32 master dtype
    (``.to(fp32)``: 4 bytes) for the optimizer; both exist until the flat copy is deleted. The activations are free
    by then, but their cached blocks are tensor-sized segments, and the caching allocator neither merges separate
    segments nor splits one across requests, so a request of a whole partition (gigabytes) gets new segments:
    ``torch.cuda.max_memory_reserved()`` (and nvidia-smi) read this much above the training peak, while
    ``max_memory_allocated()`` does not (allocated at the step is the model states plus this, far below the
    training peak). Llama 3.1 8B under ZeRO-2 on 8 GPUs in bf16: 8.03·10⁹ / 8 · (2 + 4) B = 6.0 GB (5.6 GiB).
    0 where the step runs elsewhere: ZeRO-3 (stage3.py's sub-groups), DeepSpeed's BF16 optimizer (persistent fp32
    gradients), offloaded optimizers (the copy is on the host), other frameworks (FSDP/Megatron keep their fp32
    gradients or master copies persistently). In fp32 training ``.to`` returns the flat tensor itself: 4 B.
    Not part of the fits verdict: under memory pressure the allocator frees cached blocks and retries."""
    per_element = work_b + (4.0 if work_b != 4.0 else 0.0)
    return xp.where(zero_optimizer_on_gpu, partition_params * per_element, 0.0)


def startup_bytes(xp, shards_params: Any, unsharded_init: bool, local_params: Any, weight_b: float) -> Any:
    """Bytes the caching allocator reserves at start-up, before training: DeepSpeed ZeRO-3 on a model built whole
    (outside ``deepspeed.zero.Init``, e.g. ``from_pretrained`` without the DeepSpeed integration) is moved to the
    GPU whole by ``deepspeed.initialize`` (engine ``_configure_distributed_model``: ``module.to(device)`` unless the
    parameters already carry a ``ds_id``) and only then partitioned, so every rank holds its whole slice of the
    model in the 16-bit weight dtype: local parameters × weight bytes. The partitions are cut from the freed blocks
    and ``defragment`` empties the cache before the flat buffer, so nothing adds to it (DeepSpeed 0.19, source
    DEEPSPEED-ZERO3-INIT). Llama 3.1 8B (8.03·10⁹ parameters, bf16): 14.96 GiB on each GPU whatever the ZeRO-3
    group — what ``torch.cuda.max_memory_reserved`` keeps when training itself needs less. 0 otherwise. Scalars
    or arrays (``xp``: the estimate's and the search's numerics)."""
    return xp.where(xp.logical_and(shards_params, unsharded_init), local_params * weight_b, 0.0)
