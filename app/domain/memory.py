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

import math
from dataclasses import dataclass
from functools import lru_cache

from pydantic import Field

from app.domain.activations import (
    ActivationTerms,
    embedding_activation_bytes,
    framework_style_for,
    layer_activation_bytes,
    logits_bytes,
)
from app.domain.architecture import (
    Architecture,
    LayerKind,
    ParameterCounts,
    parameter_counts,
)
from app.domain.cluster import Cluster
from app.domain.pipeline import RankLayers, inflight_microbatches, rank_layers
from app.domain.plan import Framework, Offload, Optimizer, Plan, Precision, Recompute, Sharding
from app.domain.provenance import Frozen
from app.domain.sharding import sharded_state_bytes_counted

GIB = 1024**3


class StateBytesPerParam(Frozen):
    weights: float
    grads: float
    master: float
    optimizer: float
    grad_reduce: float = Field(description="bytes per gradient element on the wire")
    formula: str


def state_bytes_per_param(plan: Plan) -> StateBytesPerParam:
    return _state_bytes(plan.framework, plan.precision, plan.optimizer)


@lru_cache(maxsize=64)
def _state_bytes(framework: Framework, precision: Precision, optimizer_kind: Optimizer) -> StateBytesPerParam:
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


@dataclass(frozen=True, slots=True)
class LocalParams:
    """Parameters one rank of one pipeline stage holds before data-parallel sharding.

    ``dense``: non-expert parameters (TP-sharded where Megatron shards them); ``expert``: routed experts
    (sharded over ep·tp); ``largest_unit``: the largest FSDP unit (one block); ``root``: embedding, output
    layer and final norm (the root FSDP unit)."""

    dense: float
    expert: float
    largest_unit: float
    root: float

    @property
    def total(self) -> float:
        return self.dense + self.expert


def _layer_local(counts: ParameterCounts, kind: LayerKind, tp: int, ep: int) -> tuple[float, float]:
    lc = counts.layer(kind)
    sharded = lc.attention + lc.mlp + lc.shared_experts
    replicated = lc.norms + lc.router
    return sharded / tp + replicated, lc.experts / (ep * tp)


def local_params(arch: Architecture, counts: ParameterCounts, rank: RankLayers, plan: Plan) -> LocalParams:
    dense = 0.0
    expert = 0.0
    largest = 0.0
    for kind in ("dense", "moe"):
        n = rank.count(kind)  # type: ignore[arg-type]
        if n:
            d, e = _layer_local(counts, kind, plan.tp, plan.ep)  # type: ignore[arg-type]
            dense += n * d
            expert += n * e
            largest = max(largest, d + e)
    root = 0.0
    if rank.first:
        root += counts.embedding / plan.tp + (counts.pre_layers - counts.embedding)
    if rank.last:
        head = counts.output_head or (counts.embedding if plan.pp > 1 else 0)
        root += head / plan.tp + (counts.post_layers - counts.output_head)
    dense += root
    return LocalParams(dense, expert, largest, root)


@dataclass(frozen=True, slots=True)
class StageMemory:
    """Memory of one pipeline rank (every tp/dp/cp rank of that stage holds the same), in bytes.

    ``gathered_params_bytes``: unsharded working copies (FSDP/ZeRO-3 gathers); ``buffers_bytes``:
    communication buckets inside the allocator; ``allocated_peak_bytes``: comparable to
    ``torch.cuda.max_memory_allocated()``; ``runtime_bytes``: CUDA context + NCCL buffers, outside PyTorch's
    allocator; ``host_bytes``/``nvme_bytes``: offloaded state this rank needs on the host.
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
    runtime_bytes: int
    total_bytes: int
    usable_bytes: int
    margin_bytes: int
    fits: bool
    dominant_term: str
    host_bytes: int
    nvme_bytes: int
    communicators: int


def _exact_fsdp2(plan: Plan) -> bool:
    """Whole-model FSDP2 (no tp/pp/ep, no offload): per-parameter shard sizes are known exactly."""
    return (
        plan.framework is Framework.fsdp2
        and plan.sharding in (Sharding.fsdp_full, Sharding.fsdp_grad_op, Sharding.fsdp_hybrid)
        and plan.tp == plan.pp == plan.ep == 1
        and plan.offload is Offload.none
    )


def _dp_shard(plan: Plan) -> int:
    return plan.dp_shard_size * plan.cp


def _expert_shard(plan: Plan) -> int:
    return max(1, plan.dp * plan.cp // plan.ep)


def _communicators(plan: Plan, cluster: Cluster, rank: RankLayers) -> tuple[int, int]:
    """(intra-node, spanning-nodes) NCCL communicators this rank creates: world + one per parallel dim."""
    g = cluster.nvlink_domain
    intra, spanning = 0, 0

    def add(size: int, stride: int) -> None:
        nonlocal intra, spanning
        if size <= 1:
            return
        if size * stride <= g:
            intra += 1
        else:
            spanning += 1

    add(plan.gpus, 1) if plan.gpus > 1 else None
    add(plan.tp, 1)
    add(plan.cp, plan.tp)
    add(plan.dp, plan.tp * plan.cp)
    if plan.ep > 1:
        add(plan.ep, plan.tp)
    if plan.pp > 1:
        peers = 1 if (rank.first or rank.last) else 2
        for _ in range(peers):
            add(2, plan.tp * plan.cp * plan.dp)
    return intra, spanning


def layer_terms(arch: Architecture, plan: Plan) -> dict[str, ActivationTerms]:
    """Per-layer activation terms of one micro-batch, for each layer kind the model has."""
    act_bytes = 4 if plan.precision is Precision.fp32 else 2
    style = framework_style_for(plan.framework.value)
    kinds = [k for k, n in (("dense", arch.n_dense_layers), ("moe", arch.n_moe_layers)) if n]
    return {
        kind: layer_activation_bytes(
            arch,
            kind,
            micro_batch=plan.micro_batch,
            seq_len=plan.seq_len,
            tp=plan.tp,
            cp=plan.cp,
            sequence_parallel=plan.sequence_parallel,
            recompute=plan.recompute,
            flash_attention=plan.flash_attention,
            act_bytes=act_bytes,
            framework_style=style,
        )  # fmt: skip
        for kind in kinds
    }


def stage_memory(
    arch: Architecture,
    cluster: Cluster,
    plan: Plan,
    rank: RankLayers,
    counts: ParameterCounts | None = None,
    terms_by_kind: dict[str, ActivationTerms] | None = None,
    local: LocalParams | None = None,
) -> StageMemory:
    counts = counts or parameter_counts(arch)
    terms_by_kind = terms_by_kind if terms_by_kind is not None else layer_terms(arch, plan)
    per = state_bytes_per_param(plan)
    local = local or local_params(arch, counts, rank, plan)
    shard = _dp_shard(plan)
    eshard = _expert_shard(plan)
    sh = plan.sharding

    def sharded(n_dense: float, n_expert: float, bytes_per: float, is_sharded: bool) -> float:
        if not is_sharded:
            return (n_dense + n_expert) * bytes_per
        return (n_dense / shard + n_expert / eshard) * bytes_per

    if _exact_fsdp2(plan):
        # FSDP2 shards each parameter on dim 0 (torch.chunk rows, padded to ceil(dim0/ws)); rank 0 holds the
        # largest shard. Adam keeps a 4-byte ``step`` per parameter tensor.
        exact = sharded_state_bytes_counted(
            arch.shape_counts, shard, 0, param_bytes=int(per.weights),
            grad_bytes=int(per.grads), optimizer_bytes_per_param=int(per.optimizer),
            step_bytes_per_tensor=4 if per.optimizer else 0,
        )  # fmt: skip
        params, grads, optimizer = (
            exact["param_padded_bytes"],
            exact["grad_padded_bytes"],
            exact["optimizer_bytes"],
        )
    else:
        params = sharded(local.dense, local.expert, per.weights, sh.shards_params)
        grads = sharded(local.dense, local.expert, per.grads, sh.shards_grads)
        optimizer = sharded(local.dense, local.expert, per.master + per.optimizer, sh.shards_optimizer)

    host = 0.0
    nvme = 0.0
    if plan.offload is Offload.optimizer_cpu:
        host += optimizer
        optimizer = 0.0
    elif plan.offload is Offload.params_cpu:
        host += params + grads + optimizer
        params = grads = optimizer = 0.0
    elif plan.offload is Offload.nvme:
        nvme += params + optimizer
        host += grads
        params = grads = optimizer = 0.0

    # Unsharded working copies of sharded parameters (16-bit unless fp32 training).
    work = 4.0 if plan.precision is Precision.fp32 else 2.0
    gathered = 0.0
    if sh.shards_params:
        if sh is Sharding.fsdp_grad_op:
            gathered = local.total * work  # kept unsharded from forward to backward
        else:
            # current + prefetched unit, plus the unsharded gradient of one unit (16-bit + fp32 reduce copy)
            gathered = 2 * local.largest_unit * work + local.largest_unit * (work + per.grad_reduce)
            if plan.framework is Framework.fsdp2:
                gathered += local.root * work  # the root unit is not resharded after forward
    buffers = 0.0
    if plan.framework is Framework.fsdp2 and sh is Sharding.ddp:
        buffers = local.total * per.grads  # DDP gradient buckets (gradient_as_bucket_view=False)
    elif plan.framework is Framework.deepspeed and not sh.shards_params:
        buffers = 2 * min(5e8, local.total) * per.grad_reduce  # reduce + all-gather buckets (5e8 elements)

    act_bytes = 4 if plan.precision is Precision.fp32 else 2
    style = framework_style_for(plan.framework.value)
    inflight = inflight_microbatches(rank.rank, plan.pp, plan.vpp, plan.micro_batches)
    activations = 0.0
    peak_extra = 0.0
    for kind, terms in terms_by_kind.items():
        n = rank.count(kind)  # type: ignore[arg-type]
        if not n:
            continue
        activations += n * inflight * terms.saved_bytes
        peak_extra = max(peak_extra, terms.peak_extra_bytes)
    if rank.first:
        activations += inflight * embedding_activation_bytes(
            arch, micro_batch=plan.micro_batch, seq_len=plan.seq_len, tp=plan.tp, cp=plan.cp,
            sequence_parallel=plan.sequence_parallel, act_bytes=act_bytes, framework_style=style,
        )  # fmt: skip
    activations += peak_extra
    logits = 0.0
    if rank.last:
        logits = logits_bytes(
            arch, micro_batch=plan.micro_batch, seq_len=plan.seq_len, tp=plan.tp, cp=plan.cp
        )

    rt = cluster.runtime
    workspace = rt.workspace_bytes
    allocated = params + grads + optimizer + activations + logits + gathered + buffers + workspace
    fragmentation = allocated * rt.fragmentation_fraction
    intra, spanning = _communicators(plan, cluster, rank)
    runtime = (
        rt.cuda_context_bytes
        + intra * rt.nccl_bytes_per_communicator
        + spanning * rt.nccl_bytes_per_communicator_scale_out
    )
    total = allocated + fragmentation + runtime
    usable = cluster.accelerator.memory_usable_bytes
    terms = {
        "params": params, "grads": grads, "optimizer": optimizer, "activations": activations, "logits": logits,
        "gathered params": gathered, "buffers": buffers, "runtime": runtime,
    }  # fmt: skip
    return StageMemory(
        rank=rank.rank,
        layers=rank.n_layers,
        first=rank.first,
        last=rank.last,
        params_bytes=math.ceil(params),
        grads_bytes=math.ceil(grads),
        optimizer_bytes=math.ceil(optimizer),
        activations_bytes=math.ceil(activations),
        logits_bytes=math.ceil(logits),
        gathered_params_bytes=math.ceil(gathered),
        buffers_bytes=math.ceil(buffers),
        workspace_bytes=workspace,
        allocated_peak_bytes=math.ceil(allocated),
        fragmentation_bytes=math.ceil(fragmentation),
        runtime_bytes=math.ceil(runtime),
        total_bytes=math.ceil(total),
        usable_bytes=usable,
        margin_bytes=math.floor(usable - total),
        fits=total <= usable,
        dominant_term=max(terms, key=lambda k: terms[k]),
        host_bytes=math.ceil(host),
        nvme_bytes=math.ceil(nvme),
        communicators=intra + spanning,
    )


def memory_by_stage(
    arch: Architecture,
    cluster: Cluster,
    plan: Plan,
    counts: ParameterCounts | None = None,
    ranks: tuple[RankLayers, ...] | None = None,
    locals_: tuple[LocalParams, ...] | None = None,
) -> tuple[StageMemory, ...]:
    counts = counts or parameter_counts(arch)
    ranks = ranks or rank_layers(arch, plan.pp, plan.vpp)
    locals_ = locals_ or tuple(local_params(arch, counts, r, plan) for r in ranks)
    terms = layer_terms(arch, plan)
    return tuple(
        stage_memory(arch, cluster, plan, r, counts, terms, lp) for r, lp in zip(ranks, locals_, strict=True)
    )


def host_bytes_per_node(stages: tuple[StageMemory, ...], plan: Plan, gpus_per_node: int) -> tuple[int, int]:
    """(host RAM, NVMe) per node for offloaded state: the worst stage's per-rank need × ranks per node."""
    worst_host = max(s.host_bytes for s in stages)
    worst_nvme = max(s.nvme_bytes for s in stages)
    ranks = min(gpus_per_node, plan.gpus)
    return worst_host * ranks, worst_nvme * ranks


__all__ = [
    "GIB", "LocalParams", "StageMemory", "StateBytesPerParam", "host_bytes_per_node", "local_params",
    "memory_by_stage", "stage_memory", "state_bytes_per_param", "Recompute",
]  # fmt: skip
