"""The estimator's per-rank memory arithmetic (:func:`rank_memory`), written once for numbers and for numpy
arrays like the time arithmetic of :mod:`app.domain.estimator.evaluate`, whose bundles (ModelQ, PlanQ, RankQ,
KeyQ, Consts) it reads. The conventions and sources of each term are documented in memory.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.domain.estimator.memory import optimizer_step_bytes, startup_bytes

if TYPE_CHECKING:
    from app.domain.estimator.evaluate import Consts, KeyQ, ModelQ, Num, PlanQ, RankQ


def head_passes(mq: ModelQ, pq: PlanQ) -> Num:
    """Passes of the output head a micro-batch makes on the last stage: 1, plus one per multi-token prediction
    module (DeepSeek-V3 §2.2: each module shares the output head and runs its own loss) with its 2h→h projection,
    2h/V of a head pass in FLOPs (2·2h·h against 2·h·V a token; DeepSeek-V3: 0.11)."""
    return 1 + pq.mtp * (1 + 2 * mq.hidden * mq.hidden / mq.embedding)


def local_params(xp, mq: ModelQ, pq: PlanQ, rq: RankQ) -> tuple[Num, Num, Num, Num]:
    """(dense incl. root, expert, largest unit, root) parameters on one rank before dp sharding."""
    dense_layer = mq.dense_sharded / pq.tp + mq.dense_replicated
    moe_layer = mq.moe_sharded / pq.tp + mq.moe_replicated
    expert_layer = mq.moe_experts / (pq.ep * pq.etp)
    head = xp.where(mq.output_head > 0, mq.output_head, xp.where(pq.pp > 1, mq.embedding, 0))
    # a multi-token prediction module adds its 2h→h projection (column-parallel) and three norms to the last stage;
    # its transformer layer is counted with the rank's layers (pipeline.rank_layers) and it shares the head
    mtp = pq.mtp * (2 * mq.hidden * mq.hidden / pq.tp + 3 * mq.hidden)
    root = xp.where(rq.first, mq.embedding / pq.tp + mq.pre_rest, 0) + xp.where(
        rq.last, head / pq.tp + mq.post_rest + mtp, 0
    )
    dense = rq.n_dense * dense_layer + rq.n_moe * moe_layer + root
    expert = rq.n_moe * expert_layer
    largest = xp.maximum(
        xp.where(rq.n_dense > 0, dense_layer, 0), xp.where(rq.n_moe > 0, moe_layer + expert_layer, 0)
    )
    return dense, expert, largest, root


def linear_weights(mq: ModelQ, pq: PlanQ, rq: RankQ) -> Num:
    """The transformer layers' linear weights on one rank (÷ tp, the routed experts ÷ ep·etp): the weights Transformer
    Engine quantizes under FP8 / NVFP4 (not the embedding, the output head or the norms)."""
    return rq.n_dense * mq.dense_sharded / pq.tp + rq.n_moe * (
        mq.moe_sharded / pq.tp + mq.moe_experts / (pq.ep * pq.etp)
    )


def inflight(xp, rank: Num, pq: PlanQ) -> Num:
    from app.domain.estimator.pipeline import inflight_microbatches

    return inflight_microbatches(rank, pq.pp, pq.vpp, pq.micro_batches, xp)


def communicators(xp, pq: PlanQ, rq: RankQ, domain: int) -> tuple[Num, Num]:
    """(intra-node, spanning-nodes) NCCL communicators: world + tp, cp, dp, ep groups + pp neighbours."""
    intra = 0
    spanning = 0
    for size, stride in (
        (pq.gpus, 1),
        (pq.tp, 1),
        (pq.cp, pq.tp),
        (pq.dp, pq.tp * pq.cp),
        (pq.ep, pq.etp),
    ):
        present = size > 1
        inside = size * stride <= domain
        intra = intra + xp.where(xp.logical_and(present, inside), 1, 0)
        spanning = spanning + xp.where(xp.logical_and(present, xp.logical_not(inside)), 1, 0)
    peers = xp.where(pq.pp > 1, xp.where(xp.logical_or(rq.first, rq.last), 1, 2), 0)
    pp_inside = 2 * pq.tp * pq.cp * pq.dp <= domain
    intra = intra + xp.where(pp_inside, peers, 0)
    spanning = spanning + xp.where(pp_inside, 0, peers)
    return intra, spanning


def fp32_grad_buffer(xp, pq: PlanQ, c: Consts, local_params: Num) -> Num:
    """Bytes of DeepSpeed's BF16 optimizer's fp32 gradient-accumulation buffer on one rank: in bf16 with ZeRO stage
    1, gradients accumulated in fp32 (``data_types.grad_accum_dtype``; the plan's ``grad_accum_fp32`` — DeepSpeed's
    default from 0.8, 2022-11, until "Enable non-ZeRO mode", 2025-08, made it the model dtype) and no offload,
    DeepSpeed wraps the optimizer in ``BF16_Optimizer`` (engine ``_do_optimizer_sanity_check``),
    which allocates ``fp32_groups_gradients_flat`` as ``zeros_like`` the rank's whole flat bf16 parameter group in
    ``grad_acc_dtype`` (fp32) and accumulates every micro-batch's bf16 gradients into it — 4 bytes per local
    parameter, not partitioned, on top of the bf16 gradients (source DEEPSPEED-BF16-OPTIMIZER)."""
    return xp.where(bf16_optimizer_runs(xp, pq, c), local_params * 4.0, 0.0)


def bf16_optimizer_runs(xp, pq: PlanQ, c: Consts) -> Num:
    """Whether DeepSpeed runs its BF16 optimizer: bf16 with fp32 gradient accumulation (``c.bf16_optimizer``),
    ZeRO stage 1 and nothing offloaded (engine ``_do_optimizer_sanity_check``)."""
    zero1 = xp.logical_and(pq.shards_optimizer, xp.logical_not(pq.shards_grads))
    offloaded = xp.logical_or(xp.logical_or(pq.offload_optimizer, pq.offload_params), pq.offload_nvme)
    return xp.logical_and(xp.logical_and(c.bf16_optimizer, zero1), xp.logical_not(offloaded))


def zero3_gathered_bytes(
    xp, mq: ModelQ, pq: PlanQ, rq: RankQ, total_local: Num, live_params: float, work_b: float
) -> Num:
    """DeepSpeed ZeRO-3's gathered parameters at the peak, per rank (source DEEPSPEED-ZERO-CONFIG).

    Its coordinator gathers one module's own parameters (``iter_params(module, recurse=False)``: one nn.Linear or
    embedding) when the module runs and releases them after, except those its trace reuses within
    ``stage3_max_reuse_distance`` elements; it prefetches only while fewer than ``stage3_max_live_parameters`` are
    gathered (both 10⁹ by default: ``live_params``). At the forward-to-backward turn the last modules are reused at
    once, so up to ``live_params`` elements stay gathered beside the module in use M, and M's 16-bit gradient
    exists before the bucket takes it:

        (min(stage parameters, live_params + M) + M) · 2 B,  M = the largest weight matrix (÷ tp), or the
        embedding / output head on the first / last stage

    A 1T GPT (h = 25,600): M = h·4h = 2.6·10⁹, 12.5 GB — not a 7.9·10⁹-parameter block gathered three times
    (63 GB) as FSDP's units are. Llama 3.1 8B: M = the 525·10⁶-element embedding, (1.5·10⁹ + 0.5·10⁹)·2 = 4.1 GB."""
    head = xp.where(mq.output_head > 0, mq.output_head, mq.embedding)
    edge = xp.maximum(xp.where(rq.first, mq.embedding, 0), xp.where(rq.last, head, 0))
    module = xp.maximum(mq.largest_matrix, edge) / pq.tp
    return (xp.minimum(total_local, live_params + module) + module) * work_b


def expert_shard(xp, pq: PlanQ) -> Num:
    """Ranks of a pipeline stage that hold the same expert shard and split its sharded states (the experts'
    data-parallel degree): tp·dp·cp / (ep·etp), at least 1 — dp·cp/ep when the experts' TP is tp."""
    return xp.maximum(1, pq.tp * pq.dp * pq.cp // (pq.ep * pq.etp))


def rank_memory(xp, mq: ModelQ, pq: PlanQ, rq: RankQ, kq: KeyQ, c: Consts) -> dict[str, Num]:
    """Every memory term of one rank, in bytes (see memory.py for the conventions)."""
    dense, expert, largest, root = local_params(xp, mq, pq, rq)
    total_local = dense + expert
    experts_over = expert_shard(xp, pq)

    def sharded(bytes_per: float, on: Num) -> Num:
        return xp.where(on, (dense / pq.shard + expert / experts_over) * bytes_per, total_local * bytes_per)

    params = xp.where(pq.exact, pq.exact_params, sharded(c.weights_b, pq.shards_params))
    grads = xp.where(pq.exact, pq.exact_grads, sharded(c.grads_b, pq.shards_grads))
    grads = grads + fp32_grad_buffer(xp, pq, c, total_local)
    optimizer = xp.where(
        pq.exact, pq.exact_optimizer, sharded(c.master_b + c.optimizer_b, pq.shards_optimizer)
    )

    host = xp.where(pq.offload_optimizer, optimizer, 0) + xp.where(
        pq.offload_params, params + grads + optimizer, 0
    )
    # DeepSpeed's ZeRO-2/3 optimizer offload keeps the gradient partition on the host too (stage_1_and_2.py and
    # stage3.py: self.device = cpu under offload; the GPU reduces through its buckets and copies out)
    grads_to_host = xp.logical_and(
        xp.logical_and(pq.deepspeed, pq.shards_grads),
        xp.logical_and(pq.offload_optimizer, xp.logical_not(pq.offload_params)),
    )
    host = host + xp.where(grads_to_host, grads, 0)
    grads = xp.where(grads_to_host, 0, grads)
    host = host + xp.where(pq.offload_nvme, grads, 0)
    nvme = xp.where(pq.offload_nvme, params + optimizer, 0)
    moved_states = xp.logical_or(pq.offload_params, pq.offload_nvme)
    optimizer = xp.where(xp.logical_or(pq.offload_optimizer, moved_states), 0, optimizer)
    params = xp.where(moved_states, 0, params)
    if c.te_quantized_b:  # Megatron FP8/NVFP4: TE's quantized weights (memory.te_quantized_weight_bytes)
        linear = linear_weights(mq, pq, rq)
        # distributed optimizer: the quantized primary weights replace the 16-bit ones; DDP: cached beside them;
        # torch FSDP2: none
        per = xp.where(pq.shards_optimizer, c.te_quantized_b - c.weights_b, c.te_quantized_b)
        params = params + xp.where(pq.shards_params, 0.0, per * linear)
    grads = xp.where(moved_states, 0, grads)

    gathered_units = (
        2 * largest * c.work_b
        + largest * (c.work_b + c.grad_reduce_b)
        + xp.where(pq.fsdp2, root * c.work_b, 0)
    )
    if c.live_params:  # DeepSpeed ZeRO-3: one module at a time, not a block (zero3_gathered_bytes)
        gathered_units = zero3_gathered_bytes(xp, mq, pq, rq, total_local, c.live_params, c.work_b)
    # SHARD_GRAD_OP, and FSDP under pipeline parallelism (gathered once per step), keep the stage unsharded
    whole_stage = xp.logical_or(pq.grad_op, pq.pp > 1)
    gathered = xp.where(pq.shards_params, xp.where(whole_stage, total_local * c.work_b, gathered_units), 0)
    # DeepSpeed reduces gradients through buckets of reduce_bucket_size (5·10⁸) elements: two under ZeRO-0/1/2
    # (overlap_comm), ZeRO-3's one contiguous ipg bucket in the parameter dtype (stage3.py)
    buffers = xp.where(xp.logical_and(pq.fsdp2, pq.ddp), total_local * c.grads_b, 0) + xp.where(
        pq.deepspeed,
        xp.where(pq.shards_params, xp.minimum(5e8, total_local) * c.work_b, 2 * xp.minimum(5e8, total_local) * c.grad_reduce_b),
        0,
    )  # fmt: skip
    # FSDP2 under pipeline parallelism reduce-scatters once per step (gradient sync is off for all but the last
    # micro-batch), so the stage's unsharded gradients accumulate in the reduce dtype until then
    deferred_sync = xp.logical_and(xp.logical_and(pq.fsdp2, pq.shards_grads), pq.pp > 1)
    buffers = buffers + xp.where(deferred_sync, total_local * c.grad_reduce_b, 0)

    flight = inflight(xp, rq.rank, pq)
    activations = flight * (rq.n_dense * kq.saved_dense + rq.n_moe * kq.saved_moe) + kq.peak_extra
    activations = activations + xp.where(rq.first, flight * kq.embedding_act, 0)
    # each multi-token prediction module saves its own head's activations for the backward (the 2h-wide
    # projection input it also saves is left out: under 2 % of a head's logits at DeepSeek-V3's vocabulary)
    activations = activations + xp.where(rq.last, flight * kq.head_act * (1 + pq.mtp), 0)
    # torch.distributed.pipelining (FSDP2 under PP: torchtitan) keeps every micro-batch's output on the last stage
    # until its schedule step ends: m − 1 more beside the one the loss works on (head_activations.
    # pipeline_output_bytes). A schedule step runs at most pp·vpp micro-batches (torchtitan's default split; its
    # gradient accumulation runs further schedule steps, each merging and freeing its outputs).
    schedule_m = xp.minimum(pq.micro_batches, pq.pp * pq.vpp)
    kept_outputs = xp.where(xp.logical_and(pq.fsdp2, pq.pp > 1), (schedule_m - 1) * kq.pipeline_output, 0)
    logits = xp.where(rq.last, kq.logits + kept_outputs, 0)

    allocated = params + grads + optimizer + activations + logits + gathered + buffers + c.workspace
    fragmentation = allocated * c.fragmentation
    n_intra, n_spanning = communicators(xp, pq, rq, c.domain)
    runtime = c.cuda_context + n_intra * c.nccl_intra + n_spanning * c.nccl_spanning
    startup = startup_bytes(xp, pq.shards_params, c.unsharded_init, total_local, c.weights_b)
    total = xp.maximum(allocated + fragmentation, startup) + runtime
    step = 0.0
    if not isinstance(pq.deepspeed, bool) or pq.deepspeed:  # the search's arrays, or a DeepSpeed plan
        offloaded = xp.logical_or(xp.logical_or(pq.offload_optimizer, pq.offload_params), pq.offload_nvme)
        zero12_on_gpu = xp.logical_and(
            xp.logical_and(pq.deepspeed, pq.shards_optimizer),
            xp.logical_not(
                xp.logical_or(xp.logical_or(pq.shards_params, offloaded), bf16_optimizer_runs(xp, pq, c))
            ),
        )
        step = optimizer_step_bytes(xp, zero12_on_gpu, sharded(1.0, pq.shards_optimizer), c.work_b)
    return {
        "params": params, "grads": grads, "optimizer": optimizer, "activations": activations, "logits": logits,
        "gathered": gathered, "buffers": buffers, "allocated": allocated, "fragmentation": fragmentation,
        "startup": startup, "runtime": runtime, "total": total, "host": host, "nvme": nvme, "step": step,
        "communicators": n_intra + n_spanning,
    }  # fmt: skip
