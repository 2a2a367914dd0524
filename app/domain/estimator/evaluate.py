"""The estimator's per-rank arithmetic, written once for numbers and for numpy arrays.

:func:`app.domain.estimate.estimate` evaluates one plan with Python numbers (``SCALAR``); the plan search
(:mod:`app.domain.search`) evaluates hundreds of thousands with numpy arrays (``VECTOR``) through the very
same functions, so the two can never disagree. Inputs come in four bundles:

* :class:`ModelQ` — per-architecture constants (parameters per layer kind split into TP-sharded, replicated
  and expert parts; embedding and head);
* :class:`PlanQ` — the plan's degrees and switches (numbers, or one array entry per candidate plan);
* :class:`RankQ` — one pipeline rank: its index, dense and MoE layer counts, first/last flags;
* :class:`KeyQ` — per-layer activation bytes and compute times for the plan's (tp, cp, sp, recompute,
  micro-batch, ep), computed by the scalar functions in activations.py and compute.py.

Formulas and their sources are documented in memory.py (memory), step.py (time) and network.py (collectives);
the memory arithmetic itself is :mod:`app.domain.estimator.rank_memory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.domain.estimator.context_parallel import (
    ATTENTION_BACKWARD_RATIO,
    TE_P2P,
    RingAttention,
    ring_exposed_s,
)
from app.domain.estimator.moe_load import capped_load_factor, expert_load_factor
from app.domain.estimator.network import (
    Collective,
    all_to_all_seconds,
    collective_latency_seconds,
    collective_seconds,
    dispatch_dedups,
    group_link,
    group_shape,
)
from app.domain.estimator.rank_memory import bf16_optimizer_runs, head_passes, linear_weights, local_params

Num = Any  # a Python number or a numpy array


@dataclass(frozen=True, slots=True)
class ModelQ:
    dense_sharded: float  # attention + dense MLP (+ biases) per dense layer: ÷ tp
    dense_replicated: float  # norms per dense layer
    moe_sharded: float  # attention + shared experts per MoE layer: ÷ tp
    moe_replicated: float  # norms + router per MoE layer
    moe_experts: float  # routed experts per MoE layer: ÷ ep·tp
    embedding: float
    pre_rest: float  # positions and embedding norm on the first stage (replicated)
    output_head: float  # untied output layer (0 when tied)
    post_rest: float  # final norm on the last stage
    hidden: int
    kv_dim: int
    q_dim: int  # query width, all heads: K's (and V's) width once repeated to every query head
    top_k: int
    largest_matrix: float = 0.0  # the largest weight matrix of a layer (one nn.Linear), before tp
    n_experts: int = 0  # routed experts per MoE layer (0: dense)


@dataclass(frozen=True, slots=True)
class PlanQ:
    gpus: Num
    tp: Num
    pp: Num
    vpp: Num
    dp: Num
    cp: Num
    ep: Num
    etp: Num  # the routed experts' tensor-parallel degree (tp unless MoE parallel folding)
    micro_batch: Num
    micro_batches: Num
    seq_len: Num
    shard: Num  # dp_shard_size · cp
    replicas: Num  # HSDP replica groups
    shards_params: Num
    shards_grads: Num
    shards_optimizer: Num
    grad_op: Num  # FSDP SHARD_GRAD_OP
    hybrid: Num  # HSDP
    ddp: Num
    fsdp2: Num
    deepspeed: Num
    offload_optimizer: Num
    offload_params: Num
    offload_nvme: Num
    recompute_full: Num
    sequence_parallel: Num
    exact: Num  # whole-model FSDP2: exact per-tensor shard sizes below
    exact_params: Num
    exact_grads: Num
    exact_optimizer: Num
    ep_dedup: Num = (
        0  # the dispatcher's MoeDispatcher.dedup_kind (network.dispatch_dedups: per-node deduplication)
    )
    ep_a2a_overlap: Num = False  # Megatron-Core's overlap_moe_expert_parallel_comm (1F1B all-to-all overlap)
    ep_capacity: Num = 0.0  # MoE capacity factor (0: dropless)
    ep_pad: Num = False  # MoE expert inputs padded to the capacity
    mtp: Num = 0  # multi-token prediction modules (Plan.mtp_layers): their layers, heads and projections
    recompute_moe: Num = False  # Megatron's "moe" recompute module: dispatch and combine run again
    recompute_selective_op: Num = (
        False  # torchtitan's per-op AC: its TP all-gathers run again (tp_recompute_ar)
    )


@dataclass(frozen=True, slots=True)
class RankQ:
    rank: Num
    n_dense: Num
    n_moe: Num
    first: Num
    last: Num


@dataclass(frozen=True, slots=True)
class KeyQ:
    saved_dense: Num
    saved_moe: Num
    peak_extra: Num
    embedding_act: Num
    head_act: Num
    logits: Num
    fwd_dense: Num
    bwd_dense: Num
    rec_dense: Num
    attn_dense: Num
    fwd_moe: Num
    bwd_moe: Num
    rec_moe: Num
    attn_moe: Num
    head_fwd: Num
    head_bwd: Num
    cp_fwd: Num = 0.0  # ring attention: merges + per-step kernels, one layer's forward (context_parallel)
    cp_bwd: Num = 0.0  # the same for its backward
    cp_forwards: Num = 1.0  # forward passes of the ring per layer: 1 + the recomputed share of the attention
    pipeline_output: Num = 0.0  # the last stage's output per micro-batch (head_activations)


@dataclass(frozen=True, slots=True)
class Consts:
    """Per (cluster, framework, precision, optimizer) constants."""

    weights_b: float
    grads_b: float
    master_b: float
    optimizer_b: float
    grad_reduce_b: float
    work_b: float  # bytes per gathered (unsharded) parameter
    act_b: float
    cuda_context: float
    nccl_intra: float
    nccl_spanning: float
    workspace: float
    fragmentation: float
    usable: float
    domain: int
    scale_up: float
    scale_out: float
    hop_up: float
    hop_out: float
    optimizer_traffic_b: float
    hbm_bytes_per_s: float
    host_link_bytes_per_s: float  # PCIe (or C2C) per GPU, one direction
    cpu_optimizer_bytes_per_s: float
    nvme_bytes_per_s: float
    tp_overlap: float = 0.0  # the stack's fraction of TP collectives hidden behind GEMMs (0: overlap off)
    ep_overlap: float = 0.0  # the stack's fraction of MoE token all-to-alls hidden behind compute
    dp_overlap: float = 1.0  # the stack's fraction of overlappable DP/FSDP traffic actually hidden
    comm_slowdown: float = 0.0  # compute stretched by this fraction of the communication it hides
    straggler_cv: float = 0.0  # per-rank step jitter: a synchronous step waits ≈ cv·√(2 ln N) longer
    # how the plan's context parallelism exchanges K/V (assemble.plan_ring)
    cp_ring: RingAttention = TE_P2P
    repeat_kv: bool = False  # K/V repeated to every query head before attention (the ring moves them so)
    fsdp_copy_out: bool = False  # FSDP2: every gathered parameter copied out of the all-gather buffer
    unsharded_init: bool = False  # DeepSpeed ZeRO-3 outside zero.Init: the whole model on the GPU at start-up
    pp_overlap_interleaved: bool = False  # interleaved schedule: sends/receives posted asynchronously
    pp_serial_p2p: bool = False  # the stack's pipeline stages send and receive one transfer after another
    pp_grad_reduce_after_schedule: bool = (
        False  # pp > 1: gradients reduced after the last backward (DeepSpeed)
    )
    param_gather_in_step: bool = (
        False  # sharded optimizer: updated parameters gathered inside the step (DeepSpeed)
    )
    bf16_optimizer: bool = False  # DeepSpeed bf16 + fp32 grad accumulation: ZeRO-1 runs BF16_Optimizer
    autograd_grad_accumulation: bool = (
        False  # micro-batch gradients added into param.grad by autograd (DeepSpeed)
    )
    prefetch_bucket_params: float = 0.0  # ZeRO-3: parameters fetched ahead of use (0: a whole unit, as FSDP)
    # gradient bucket of the data-parallel reduction, in parameters (0: Megatron-Core's max(4·10⁷, 10⁶·dp))
    dp_bucket_params: float = 0.0
    live_params: float = 0.0  # ZeRO-3: parameters kept gathered beside the module in use (0: FSDP's units)
    te_quantized_b: float = (
        0.0  # Megatron FP8/NVFP4: TE's quantized bytes per linear weight (te_quantized_weight_bytes)
    )


def _group(xp, size: Num, stride: Num, c: Consts, ring: bool = True) -> tuple[Num, Num, Num, Num, Num, float]:
    per_domain, nodes = group_shape(xp, size, stride, c.domain)
    bw, hop = group_link(xp, nodes, per_domain, c.scale_up, c.scale_out, c.hop_up, c.hop_out, ring)
    return size, per_domain, nodes, bw, hop, c.hop_up


def tp_recompute_ar(xp, sequence_parallel: Num) -> Num:
    """All-reduce equivalents of TP traffic a layer's backward repeats under torchtitan's per-op selective
    activation checkpointing (``selective-op``): its policy saves matmul, attention and reduce-scatter outputs but
    not all-gathers or all-reduces (torchtitan ``_save_list``, parallelize_llama.py at e846b69, 2024-12; still so in
    activation_checkpoint.py's ``comm_ops``), so the backward regathers what the saved-for-backward tensors need.
    With sequence parallelism that is the attention's and the MLP's input all-gathers (2 all-gathers = 1 all-reduce
    of the same tensor: ring bytes ``(t−1)/t·n`` each against ``2·(t−1)/t·n``); without it, the two all-reduces
    after the row-parallel GEMMs, whose outputs feed the residual stream the recomputed norms read (2)."""
    return xp.where(sequence_parallel, 1.0, 2.0)


def plan_comm(xp, mq: ModelQ, pq: PlanQ, c: Consts) -> dict[str, Num]:
    """Plan-level communication: per-layer TP/CP/EP times, the groups FSDP/DP use, the PP transfer."""
    tokens = pq.micro_batch * pq.seq_len / pq.cp
    tp_group = _group(xp, pq.tp, 1, c)
    n_ar = 4 + 2 * pq.recompute_full + pq.recompute_selective_op * tp_recompute_ar(xp, pq.sequence_parallel)
    tp_ar = collective_seconds(xp, Collective.all_reduce, tokens * mq.hidden * c.act_b, *tp_group)
    tp_layer = n_ar * tp_ar
    # A MoE layer's attention half of that traffic runs over TP; its expert half over the expert-TP group, on the
    # tokens of its etp members' sequence shards (none with etp = 1: MoE parallel folding)
    expert_tokens = tokens * pq.etp / pq.tp
    etp_group = _group(xp, pq.etp, 1, c)
    tp_moe_layer = (
        n_ar
        / 2
        * (
            tp_ar
            + collective_seconds(xp, Collective.all_reduce, expert_tokens * mq.hidden * c.act_b, *etp_group)
        )
    )
    # Context parallelism: one rank's K and V block (the ring's unit of transfer), sent to one peer per step; the
    # running dK/dV travels with it in the backward (context_parallel.py)
    kv_bytes = 2 * tokens * (mq.q_dim if c.repeat_kv else mq.kv_dim) / pq.tp * c.act_b
    cp_send = _group(xp, pq.cp, pq.tp, c, ring=False)
    cp_kv = collective_seconds(xp, Collective.p2p, kv_bytes, *cp_send)
    cp_dkv = collective_seconds(xp, Collective.p2p, c.cp_ring.dkv_wire_ratio * kv_bytes, *cp_send)
    cp_kv_dkv = collective_seconds(xp, Collective.p2p, (1 + c.cp_ring.dkv_wire_ratio) * kv_bytes, *cp_send)
    cp_gather = collective_seconds(xp, Collective.all_gather, pq.cp * kv_bytes, *_group(xp, pq.cp, pq.tp, c))
    ep_n, ep_per_domain, ep_nodes, _, ep_hop, _ = _group(xp, pq.ep, pq.etp, c)
    # Each rank dispatches the tokens it holds: under sequence parallelism (which Megatron-Core requires for MoE
    # with TP > 1) that is its 1/tp shard of the micro-batch; the expert outputs are gathered back over the
    # expert-TP group (NVLink). The EP group's ranks are etp apart (Megatron's expert rank order: etp, ep, edp).
    routed_tokens = tokens / xp.where(pq.sequence_parallel, pq.tp, 1)
    # the busiest EP rank receives more than the mean (moe_load: random top-k routing over the group's tokens)
    load = capped_load_factor(
        xp,
        expert_load_factor(xp, expert_tokens * mq.top_k, pq.ep, mq.n_experts, mq.top_k),
        pq.ep_capacity,
        pq.ep_pad,
    )
    ep_a2a = all_to_all_seconds(
        xp,
        routed_tokens * mq.top_k * mq.hidden * c.act_b * load,
        ep_n,
        ep_per_domain,
        ep_nodes,
        c.scale_up,
        c.scale_out,
        ep_hop,
        top_k=mq.top_k,
        per_node_dedup=dispatch_dedups(pq.ep_dedup, c.domain),
    )
    p2p_bytes = tokens * mq.hidden * c.act_b / xp.where(pq.sequence_parallel, pq.tp, 1)
    pp_hop = collective_seconds(
        xp, Collective.p2p, p2p_bytes, *_group(xp, 2, pq.tp * pq.cp * pq.dp, c, ring=False)
    )
    return {
        "tp_layer": tp_layer,
        "tp_moe_layer": tp_moe_layer,
        "cp_kv": cp_kv,
        "cp_dkv": cp_dkv,
        "cp_kv_dkv": cp_kv_dkv,
        "cp_gather": cp_gather,
        "ep_a2a": ep_a2a,
        "pp_hop": xp.where(pq.pp > 1, pp_hop, 0),
        "dp": _group(xp, pq.dp * pq.cp, pq.tp, c),
        "dp_shard": _group(xp, pq.shard, pq.tp, c),
        "dp_replicate": _group(xp, pq.replicas, pq.tp * pq.shard, c),
    }


def dp_buckets(xp, params: Num, dp: Num, bucket_params: float) -> Num:
    """Buckets a rank's ``params`` gradients are reduced in, each a collective of its own. ``bucket_params`` 0:
    Megatron-Core's default, max(4·10⁷, 10⁶·dp) parameters (DistributedDataParallel, core_v0.16.1: the bucket
    grows with the data-parallel group so that each collective stays large); else the stack's fixed bucket
    (DeepSpeed's reduce_bucket_size, 5·10⁸ elements; PyTorch DDP's 25 MB). Example: GPT-3 175B at tp 4, pp 8 on
    10,752 H100 (dp 336): 5.5·10⁹ parameters a rank in buckets of 3.36·10⁸ → 17 reduce-scatters and 17
    all-gathers a step."""
    size = xp.where(bucket_params > 0, bucket_params, xp.maximum(4e7, 1e6 * dp))
    return xp.ceil(params / size)


def exposed_dp(xp, comm_s: Num, window_s: Num, units: Num, c: Consts) -> Num:
    """Seconds of data-parallel communication ``comm_s`` left on the critical path when it can overlap
    ``window_s`` of compute, issued in ``units`` buckets or FSDP units:

        max(0, comm − window) + (1 − ρ)·min(comm, window) + κ·ρ·min(comm, window) + comm / units

    — the part longer than the window; the share the stack does not overlap (ρ = its ``dp_overlap``); the
    slowdown of the compute that hides the rest (κ = ``comm_slowdown``); and the last bucket, which has nothing
    left to hide behind."""
    hidden = xp.minimum(comm_s, window_s)
    return (
        xp.maximum(0.0, comm_s - window_s)
        + (1 - c.dp_overlap) * hidden
        + c.comm_slowdown * c.dp_overlap * hidden
        + comm_s / xp.maximum(1, units)
    )


def prefetch_share(xp, unit_params: Num, bucket_params: float) -> Num:
    """The share of the compute a sharded-parameter stack can hide the next unit's gather behind.

    FSDP prefetches the whole next unit (``bucket_params`` 0: share 1). DeepSpeed ZeRO-3 fetches at most
    ``stage3_prefetch_bucket_size`` parameter elements ahead of their use (default 5·10⁷, source
    DEEPSPEED-ZERO-CONFIG): of a unit of ``unit_params`` parameters, only bucket/unit can be in flight while the
    previous module computes, so min(1, bucket/unit) of the window hides gathers and the rest of each gather
    waits on the critical path. 530B (5·10⁹ parameters a layer): 1 %; Llama 3.1 8B (2.2·10⁸): 23 %."""
    if not bucket_params:
        return 1.0
    return xp.minimum(1.0, bucket_params / xp.maximum(unit_params, 1.0))


def dp_window_micro_batches(xp, micro_batches: Num, pp: Num, vpp: Num) -> Num:
    """Micro-batches of backward (forward) compute that a rank's bucketed gradient reduction (parameter gather) can
    hide behind at the end (start) of a step.

    Without interleaving a stage's gradients are final only after its last micro-batch's backward: one
    micro-batch. Megatron's interleaved 1F1B runs micro-batches in groups of pp through the model chunks (forward
    chunk 0 → vpp−1, backward vpp−1 → 0), so chunk c's gradients are final once the last group has passed it
    backwards, while the group still runs through the chunks below: the last group's backward, min(m, pp)
    micro-batches, is the window; the next step's first group forward likewise for the parameter all-gather
    (Megatron-Core's overlap_grad_reduce / overlap_param_gather dispatch per chunk). Example: m = 8, pp = 4,
    vpp = 12 → 4 micro-batches; vpp = 1 → 1."""
    return xp.where(vpp > 1, xp.maximum(1, xp.minimum(micro_batches, pp)), 1)


def exposed_a2a(xp, a2a_s: Num, compute_s: Num, overlap: Num, c: Consts) -> Num:
    """Seconds of a micro-batch's MoE all-to-alls ``a2a_s`` left on the critical path of one rank.

    Without overlap every dispatch and combine waits for its tokens: all of ``a2a_s``. With Megatron-Core's 1F1B
    all-to-all overlap (``overlap_moe_expert_parallel_comm``; the DualPipe idea) one micro-batch's all-to-alls run
    behind another micro-batch's forward/backward compute, so at most that compute ``compute_s`` can hide them:

        hidden = ρ·min(a2a, compute);  exposed = a2a − hidden + κ·hidden

    with ρ = the stack's ``ep_overlap`` (the share the schedule manages to pair; the first and last micro-batch of
    each virtual stage have no partner) and κ = ``comm_slowdown`` (the SMs the communication kernels take: DeepEP
    ~20 of 132-148). Example: a2a 100 ms behind 98 ms of compute, ρ = 0.8, κ = 0.1 → hidden 78.4 ms, exposed
    29.4 ms; without overlap 100 ms."""
    hidden = xp.where(overlap, c.ep_overlap * xp.minimum(a2a_s, compute_s), 0.0)
    return a2a_s - hidden + c.comm_slowdown * hidden


# HBM bytes a local parameter costs every micro-batch under DeepSpeed's BF16 optimizer (grad_accumulate_seconds)
BF16_ACCUMULATE_B = 26.0
# HBM bytes autograd's AccumulateGrad moves per parameter when a micro-batch's 16-bit gradient is added into the
# one already held (``grad += new``: read 2 + 2, write 2)
AUTOGRAD_ACCUMULATE_B = 6.0


def fsdp_copy_out_seconds(xp, gathered_params: Num, gathers: Num, c: Consts) -> Num:
    """Seconds FSDP2 spends copying gathered parameters out of the all-gather buffer, on the compute stream.

    FSDP2 (``fully_shard``) all-gathers a unit's shards into one flat buffer and then, in ``wait_for_unshard``,
    ``foreach_all_gather_copy_out`` splits it into the unit's parameters with ``split_with_sizes_copy`` on the
    current (compute) stream — torch ``distributed/fsdp/_fully_shard/_fsdp_collectives.py``, read at torch 2.4–2.13
    — before the unit's forward or backward can start: every gathered parameter read and written once,
    ``gathers · params · 2 · work_b / HBM`` (4 B a 16-bit parameter per gather). FSDP1, FairScale and Composer keep
    each unit's parameters as views of the flat buffer the all-gather fills (``fsdp_flat_params``), and DeepSpeed
    ZeRO-3 narrows its flat buffer into views likewise: nothing to copy. (FSDP2's reduce-scatter copy-in, which casts
    the unsharded gradients into the reduce dtype, runs on the reduce-scatter stream beside compute.)

    Example: OLMo-core's 13B (13.7·10⁹ parameters) on 8 H100 without pipeline parallelism gathers twice per
    micro-batch: 2 · 13.7·10⁹ · 4 B = 109.7 GB, 38.5 ms at 3.35 TB/s × 0.85 — 5 % of its 0.73 s micro-batch.
    """
    if not c.fsdp_copy_out:
        return 0.0
    return gathers * gathered_params * 2 * c.work_b / c.hbm_bytes_per_s


def grad_accumulate_seconds(xp, pq: PlanQ, c: Consts, local_params: Num) -> Num:
    """Seconds a micro-batch spends accumulating gradients on DeepSpeed's engine, a memory-bound pass over the
    rank's parameters (Megatron accumulates inside the weight-gradient GEMM, FSDP reduces every micro-batch).

    Under DeepSpeed's BF16 optimizer (ZeRO-1 with fp32 gradient accumulation: :func:`bf16_optimizer_runs`) every
    micro-batch (the pipeline engine's ``_exec_backward_pass``, since PR #1801, 2022-04; the engine's ``backward``
    otherwise — source DEEPSPEED-BF16-OPTIMIZER) zeroes the 16-bit gradients before its backward (``clear_lp_grads``:
    write 2 B), so autograd accumulates each weight gradient into them (``grad += new``: the new gradient written
    and both read, the sum written: 2 + 4 + 2 − the 2 B a first gradient costs anyway = 6 B), and afterwards adds
    them into the fp32 buffer (``update_hp_grads``: ``hp.add_(lp.to(fp32))`` reads 2, writes and reads a 4 B
    temporary, reads and writes 4 + 4: 18 B) — 26 B a parameter at the HBM rate. BLOOM's 176B topology at TP 8,
    PP 12 (1.9·10⁹ parameters a GPU on A100-80GB): 49 GB, 28 ms every micro-batch — 14 s a step at 512
    micro-batches of one sequence, 3.6 s at 128 of four.

    Otherwise, with unsharded 16-bit gradients (ZeRO 0/1, DeepSpeed's fp16 and bf16 optimizers), the gradients stay
    in ``param.grad`` across the micro-batches of a step and torch's ``AccumulateGrad`` adds every micro-batch's
    after the first into them in place (``variable.grad += new_grad``: 6 B a parameter), (m − 1)/m of the
    micro-batches on average. MT-NLG's 530B at TP 8, PP 35 (1.9·10⁹ parameters a GPU on A100-80GB, 240
    micro-batches): 11 GB, 9 ms a micro-batch, 2.1 s of a 60 s step."""
    bf16 = bf16_optimizer_runs(xp, pq, c)
    unsharded = xp.logical_not(xp.logical_or(pq.shards_grads, pq.shards_params))
    later = (pq.micro_batches - 1) / xp.maximum(pq.micro_batches, 1)
    autograd = xp.where(
        xp.logical_and(c.autograd_grad_accumulation, unsharded), AUTOGRAD_ACCUMULATE_B * later, 0.0
    )
    return local_params * xp.where(bf16, BF16_ACCUMULATE_B, autograd) / c.hbm_bytes_per_s


def rank_time(
    xp, mq: ModelQ, pq: PlanQ, rq: RankQ, kq: KeyQ, c: Consts, comm: dict[str, Num]
) -> dict[str, Num]:
    """Seconds on one rank: a micro-batch's compute and exposed communication, the per-step DP and optimizer."""
    dense, expert, _, _ = local_params(xp, mq, pq, rq)
    total_local = dense + expert
    compute = rq.n_dense * (kq.fwd_dense + kq.bwd_dense) + rq.n_moe * (kq.fwd_moe + kq.bwd_moe)
    compute = compute + xp.where(rq.last, head_passes(mq, pq) * (kq.head_fwd + kq.head_bwd), 0)
    # DeepSpeed accumulates gradients in every micro-batch's backward, on its stream
    compute = compute + grad_accumulate_seconds(xp, pq, c, total_local)
    recompute = rq.n_dense * kq.rec_dense + rq.n_moe * kq.rec_moe
    n_layers = rq.n_dense + rq.n_moe
    tp_total = rq.n_dense * comm["tp_layer"] + rq.n_moe * comm["tp_moe_layer"]
    # Hidden communication still costs: compute that shares the GPU with NCCL kernels runs slower (they take
    # SMs and HBM bandwidth), by comm_slowdown × the hidden time; counted with the exposed part.
    # (TP overlap pipelines the all-gather/reduce-scatter pairs of sequence parallelism with their GEMMs: needs SP)
    hidden = c.tp_overlap * xp.where(pq.sequence_parallel, 1.0, 0.0)
    tp_s = tp_total * (1 - hidden) + c.comm_slowdown * hidden * tp_total

    def cp_layer(attn: Num) -> Num:
        """One layer's ring-attention cost beyond its attention (context_parallel.py): the transfers no ring step
        hides, the slowdown of the attention beside the hidden ones, the merges and per-step kernels."""
        fwd_step = attn / pq.cp
        bwd_step = ATTENTION_BACKWARD_RATIO * fwd_step
        exposed, hidden = ring_exposed_s(xp, c.cp_ring, pq.cp, comm, fwd_step, bwd_step, kq.cp_forwards)
        return exposed + c.comm_slowdown * hidden + kq.cp_forwards * kq.cp_fwd + kq.cp_bwd

    cp_s = xp.where(pq.cp > 1, rq.n_dense * cp_layer(kq.attn_dense) + rq.n_moe * cp_layer(kq.attn_moe), 0)
    ep_total = rq.n_moe * comm["ep_a2a"] * (4 + 2 * pq.recompute_full + 2 * pq.recompute_moe)
    mb_compute = compute + recompute
    ep_s = exposed_a2a(xp, ep_total, mb_compute, pq.ep_a2a_overlap, c)

    multi_dp = pq.dp * pq.cp > 1
    gather = collective_seconds(xp, Collective.all_gather, total_local * c.work_b, *comm["dp_shard"])
    scatter = collective_seconds(
        xp, Collective.reduce_scatter, total_local * c.grad_reduce_b, *comm["dp_shard"]
    )
    # With pipeline parallelism FSDP gathers a stage's parameters once per step and reduce-scatters its gradients
    # once (torch.distributed.pipelining turns resharding and gradient sync off for all but the last micro-batch;
    # Llama 3's FSDP does the same); without it every micro-batch gathers (twice unless SHARD_GRAD_OP).
    once_per_step = pq.pp > 1
    gathers = xp.where(pq.grad_op, 1, 2)
    window = mb_compute * prefetch_share(xp, local_params(xp, mq, pq, rq)[2], c.prefetch_bucket_params)
    # FSDP2 then copies each gathered parameter out of the all-gather buffer on the compute stream
    fsdp = xp.where(
        once_per_step,
        0.0,
        exposed_dp(xp, gathers * gather + scatter, window, n_layers + 1, c)
        + fsdp_copy_out_seconds(xp, total_local, gathers, c),
    )
    fsdp_step = xp.where(
        once_per_step,
        exposed_dp(xp, gather + scatter, mb_compute, n_layers + 1, c)
        + fsdp_copy_out_seconds(xp, total_local, 1, c),
        0.0,
    )
    # HSDP all-reduces each unit's reduce-scattered gradient shard across the replicas as soon as it is ready,
    # during the last micro-batch's backward, like DDP's buckets
    hsdp_dp = xp.where(
        pq.hybrid,
        exposed_dp(
            xp,
            collective_seconds(
                xp, Collective.all_reduce, total_local / pq.shard * c.grad_reduce_b, *comm["dp_replicate"]
            ),
            compute * 2 / 3,
            n_layers + 1,
            c,
        ),
        0,
    )
    grads_bytes = total_local * c.grad_reduce_b
    # DDP all-reduces the gradients during the last micro-batch's backward; a sharded optimizer (ZeRO-1/2,
    # Megatron's distributed optimizer) reduce-scatters them there and all-gathers the updated parameters during
    # the next step's first forward. Under an interleaved schedule the window is wider (dp_window_micro_batches).
    # A stack that reduces after the pipeline schedule (DeepSpeed's pipeline engine) or gathers the updated
    # parameters inside the optimizer step (DeepSpeed ZeRO-1/2) leaves that collective whole on the critical path.
    window = dp_window_micro_batches(xp, pq.micro_batches, pq.pp, pq.vpp)
    reduce_after = xp.logical_and(c.pp_grad_reduce_after_schedule, pq.pp > 1)
    all_reduce = collective_seconds(xp, Collective.all_reduce, grads_bytes, *comm["dp"])
    reduce_scatter = collective_seconds(xp, Collective.reduce_scatter, grads_bytes, *comm["dp"])
    # DeepSpeed's BF16 optimizer under its pipeline engine reduces by all-reducing its fp32 gradient buffer
    # (_bf16_reduce_grads -> buffered_allreduce_fallback over get_grads_for_reduction; source DEEPSPEED-BF16-OPTIMIZER)
    bf16_pipeline = xp.logical_and(bf16_optimizer_runs(xp, pq, c), pq.pp > 1)
    reduce_scatter = xp.where(
        bf16_pipeline,
        collective_seconds(xp, Collective.all_reduce, total_local * 4.0, *comm["dp"]),
        reduce_scatter,
    )
    # Megatron's distributed optimizer under FP8 / NVFP4 all-gathers the linears' quantized primary weights, their
    # row-wise copy (--fp8/--fp4-param-gather: 1 B, 0.5625 B), and the rest in 16 bits
    gathered_b = total_local * c.work_b
    if c.te_quantized_b:
        gathered_b = gathered_b - linear_weights(mq, pq, rq) * (c.work_b - c.te_quantized_b / 2)
    all_gather = collective_seconds(xp, Collective.all_gather, gathered_b, *comm["dp"])
    # every bucket is its own collective and waits its own latency (the buffers above pay it once)
    extra = xp.maximum(0, dp_buckets(xp, total_local, comm["dp"][0], c.dp_bucket_params) - 1)
    size, per_domain, nodes, _, hop, intra_hop = comm["dp"]

    def latency(kind: Collective) -> Num:
        return collective_latency_seconds(xp, kind, size, per_domain, nodes, hop, intra_hop)

    reduce_scatter = reduce_scatter + extra * latency(Collective.reduce_scatter)
    all_gather = all_gather + extra * latency(Collective.all_gather)
    all_reduce = all_reduce + extra * latency(Collective.all_reduce)
    ddp_dp = xp.where(
        pq.ddp,
        xp.where(reduce_after, all_reduce, exposed_dp(xp, all_reduce, window * compute * 2 / 3, n_layers, c)),
        xp.where(
            reduce_after, reduce_scatter, exposed_dp(xp, reduce_scatter, window * compute * 2 / 3, n_layers, c)
        )
        + xp.where(c.param_gather_in_step, all_gather, exposed_dp(xp, all_gather, window * compute / 3, n_layers, c)),
    )  # fmt: skip
    uses_fsdp = xp.logical_and(pq.shards_params, multi_dp)
    fsdp_s = xp.where(uses_fsdp, fsdp, 0)
    dp_s = xp.where(
        multi_dp, xp.where(pq.shards_params, hsdp_dp + xp.where(uses_fsdp, fsdp_step, 0), ddp_dp), 0
    )
    sharded_params = xp.where(pq.shards_optimizer, total_local / pq.shard, total_local)
    offloaded = xp.logical_or(xp.logical_or(pq.offload_optimizer, pq.offload_params), pq.offload_nvme)
    # Offloaded optimizer: gradients down and 16-bit params back over the host link, Adam on the CPU
    # (host-memory bound), optimizer state to and from NVMe for ZeRO-Infinity; not overlapped.
    host_step = sharded_params * (c.grads_b + c.work_b) / c.host_link_bytes_per_s
    host_step = host_step + sharded_params * c.optimizer_traffic_b / c.cpu_optimizer_bytes_per_s
    host_step = host_step + xp.where(
        pq.offload_nvme, sharded_params * 2 * (c.master_b + c.optimizer_b) / c.nvme_bytes_per_s, 0.0
    )
    optimizer = xp.where(offloaded, host_step, sharded_params * c.optimizer_traffic_b / c.hbm_bytes_per_s)
    # Parameters kept on the host are copied in for every forward and backward of every micro-batch.
    param_fetch = xp.where(
        xp.logical_or(pq.offload_params, pq.offload_nvme),
        (total_local / pq.shard) * c.work_b * 2 / c.host_link_bytes_per_s,
        0.0,
    )
    fsdp_s = fsdp_s + param_fetch
    return {
        "compute": compute, "recompute": recompute, "tp": tp_s, "cp": cp_s, "ep": ep_s, "fsdp": fsdp_s,
        "micro_batch": compute + recompute + tp_s + cp_s + ep_s + fsdp_s, "dp": dp_s, "optimizer": optimizer,
    }  # fmt: skip


def exposed_pp_p2p(xp, pq: PlanQ, c: Consts, hop_s: Num, micro_batch_s: Num) -> Num:
    """Seconds of pipeline send/receive on the step's critical path. Each micro-batch crosses every stage boundary
    of every virtual chunk twice (activation forward, gradient backward): 2·(m·vpp + pp − 1) hops of ``hop_s``.

    A stack that overlaps them (``pp_overlap_interleaved``: Megatron-Core's ``overlap_p2p_comm``, which
    Megatron-Bridge turns on exactly when vpp > 1 and otherwise batches blocking send/receive pairs — source
    MBRIDGE-COMM-OVERLAP) posts each transfer asynchronously and waits for it only when the next chunk needs its
    input, one chunk's forward later (≈ t_mb/(3·vpp): a forward is a third of a micro-batch's forward and
    backward). So in the steady state a hop costs only what outlasts that window, plus comm_slowdown × the hidden
    part; the 2·(pp − 1) hops that fill and drain the pipeline have nothing to hide behind:

        2·(pp − 1)·hop + 2·m·vpp·(max(0, hop − w) + κ·min(hop, w)),  w = t_mb/(3·vpp)

    and 2·(m·vpp + pp − 1)·hop otherwise (blocking transfers, a stage's send paired with its receive: Megatron's
    batched 1F1B, PyTorch's pipelining). A stack whose stage sends and receives one after the other
    (``pp_serial_p2p``: DeepSpeed's pipeline engine, whose schedule issues RecvActivation, SendActivation, RecvGrad
    and SendGrad as separate blocking instructions — source DEEPSPEED-PIPE-ENGINE) waits for four transfers per
    micro-batch on an inner stage: 4·m·vpp·hop + 2·(pp − 1)·hop."""
    per_micro_batch = xp.where(c.pp_serial_p2p, 4, 2)
    blocking = (per_micro_batch * pq.micro_batches * pq.vpp + 2 * (pq.pp - 1)) * hop_s
    window = micro_batch_s / (3 * pq.vpp)
    steady = xp.maximum(hop_s - window, 0) + c.comm_slowdown * xp.minimum(hop_s, window)
    overlapped = 2 * (pq.pp - 1) * hop_s + 2 * pq.micro_batches * pq.vpp * steady
    return xp.where(xp.logical_and(c.pp_overlap_interleaved, pq.vpp > 1), overlapped, blocking)


def straggler_factor(xp, gpus: Num, cv: float) -> Num:
    """Expected slowest-of-N stretch of a synchronous step: cv·√(2 ln N) (maximum of N Gaussians, N ≥ 2)."""
    return cv * xp.sqrt(2 * xp.log(xp.maximum(gpus, 1)))


def combine_step(
    xp, pq: PlanQ, c: Consts, micro_batch_s: Num, pp_p2p_s: Num, dp_s: Num, optimizer_s: Num
) -> tuple[Num, Num, Num]:
    """(step, bubble, synchronisation seconds): base = m·t_mb + (pp − 1)/vpp·t_mb + p2p + exposed DP + optimizer;
    step = base · (1 + cv·√(2 ln N)) — every rank waits for the slowest at each synchronous collective."""
    bubble = (pq.pp - 1) / pq.vpp * micro_batch_s
    base = pq.micro_batches * micro_batch_s + bubble + pp_p2p_s + dp_s + optimizer_s
    sync = base * straggler_factor(xp, pq.gpus, c.straggler_cv)
    return base + sync, bubble, sync
