"""Build the inputs of the shared per-rank formulas (:mod:`app.domain.evaluate`) from catalog objects, and run
them for one plan with Python numbers: memory per pipeline stage and the step time.

The plan search builds the same bundles as numpy arrays (:mod:`app.domain.search`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.domain.estimator.activations import LayerActivations, framework_style_for
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.compute import LayerWork, head_times, layer_work
from app.domain.estimator.context_parallel import (
    RingAttention,
    ring_fixed_seconds,
    ring_for,
    ring_merge_bytes,
    te_gather_backward_bytes,
    torch_ring_backward_bytes,
)
from app.domain.estimator.evaluate import (
    Consts,
    KeyQ,
    ModelQ,
    PlanQ,
    RankQ,
    combine_step,
    exposed_pp_p2p,
    plan_comm,
    rank_time,
)
from app.domain.estimator.head_activations import (
    embedding_activation_bytes,
    head_activation_bytes,
    logits_bytes,
    loss_peak_bytes,
    pipeline_output_bytes,
)
from app.domain.estimator.memory import (
    STARTUP_TERM,
    StageMemory,
    exact_fsdp2,
    keeps_gathered_tp_inputs,
    layer_activations,
    state_bytes_per_param,
    te_quantized_weight_bytes,
)
from app.domain.estimator.network import link_speeds, plan_groups
from app.domain.estimator.pipeline import RankLayers, rank_layers
from app.domain.estimator.plan import (
    Framework,
    Offload,
    Plan,
    Precision,
    Recompute,
    RecomputeModule,
    Sharding,
)
from app.domain.estimator.rank_memory import rank_memory
from app.domain.estimator.sharding import sharded_state_bytes_counted
from app.domain.estimator.step import RankTime, StepTime
from app.domain.estimator.xp import SCALAR
from app.domain.model.architecture import Architecture
from app.domain.model.counts import ParameterCounts, kv_dim, parameter_counts, q_dim

OPTIMIZER_TRAFFIC_B = {"adamw": 30.0, "adamw-8bit": 18.0, "sgd": 20.0}  # bytes moved per local parameter


def model_q(arch: Architecture, counts: ParameterCounts) -> ModelQ:
    dense = counts.dense_layer
    moe = counts.moe_layer
    return ModelQ(
        dense_sharded=(dense.attention + dense.mlp + dense.shared_experts) if dense else 0.0,
        dense_replicated=(dense.norms + dense.router) if dense else 0.0,
        moe_sharded=(moe.attention + moe.mlp + moe.shared_experts) if moe else 0.0,
        moe_replicated=(moe.norms + moe.router) if moe else 0.0,
        moe_experts=moe.experts if moe else 0.0,
        embedding=counts.embedding,
        pre_rest=counts.pre_layers - counts.embedding,
        output_head=counts.output_head,
        post_rest=counts.post_layers - counts.output_head,
        hidden=arch.hidden_size,
        kv_dim=kv_dim(arch),
        q_dim=q_dim(arch),
        top_k=arch.experts_top_k,
        largest_matrix=largest_matrix(arch),
        n_experts=arch.n_experts or 0,
    )


def largest_matrix(arch: Architecture) -> float:
    """The largest weight matrix of a layer, one nn.Linear: the query (or output) projection h × (heads · head
    dim), a dense MLP matrix h × f, an expert's h × f_e, the shared experts' h × (n_shared · f_s); K/V are smaller.
    What DeepSpeed ZeRO-3 gathers at a time (:func:`rank_memory.zero3_gathered_bytes`)."""
    h = arch.hidden_size
    shared = arch.n_shared_experts * (arch.shared_expert_ffn_hidden_size or 0)
    return float(
        h
        * max(
            q_dim(arch),
            arch.ffn_hidden_size if arch.n_dense_layers else 0,
            arch.expert_ffn_hidden_size or 0,
            shared,
        )
    )


def exact_state(arch: Architecture, plan: Plan) -> tuple[float, float, float]:
    """FSDP2's exact rank-0 (params, grads, optimizer) bytes: dim-0 shards padded to ceil(dim0/ws) rows."""
    per = state_bytes_per_param(plan)
    exact = sharded_state_bytes_counted(
        arch.shape_counts, plan.dp_shard_size * plan.cp, 0, param_bytes=int(per.weights),
        grad_bytes=int(per.grads), optimizer_bytes_per_param=int(per.optimizer),
        step_bytes_per_tensor=4 if per.optimizer else 0,
    )  # fmt: skip
    return exact["param_padded_bytes"], exact["grad_padded_bytes"], exact["optimizer_bytes"]


def plan_q(arch: Architecture, plan: Plan) -> PlanQ:
    sh = plan.sharding
    exact = exact_fsdp2(plan)
    e_params, e_grads, e_opt = exact_state(arch, plan) if exact else (0.0, 0.0, 0.0)
    return PlanQ(
        gpus=plan.gpus, tp=plan.tp, pp=plan.pp, vpp=plan.vpp, dp=plan.dp, cp=plan.cp, ep=plan.ep, etp=plan.etp,
        micro_batch=plan.micro_batch, micro_batches=plan.micro_batches, seq_len=plan.seq_len,
        shard=plan.dp_shard_size * plan.cp,
        replicas=max(1, plan.dp // plan.dp_shard_size) if sh is Sharding.fsdp_hybrid else 1,
        shards_params=sh.shards_params, shards_grads=sh.shards_grads, shards_optimizer=sh.shards_optimizer,
        grad_op=sh is Sharding.fsdp_grad_op, hybrid=sh is Sharding.fsdp_hybrid, ddp=sh is Sharding.ddp,
        fsdp2=plan.framework is Framework.fsdp2, deepspeed=plan.framework is Framework.deepspeed,
        offload_optimizer=plan.offload is Offload.optimizer_cpu, offload_params=plan.offload is Offload.params_cpu,
        offload_nvme=plan.offload is Offload.nvme, recompute_full=plan.recompute_share(arch.n_layers),
        sequence_parallel=plan.sequence_parallel, exact=exact, exact_params=e_params, exact_grads=e_grads,
        exact_optimizer=e_opt, mtp=plan.mtp_layers, ep_dedup=plan.moe_dispatcher.dedup_kind, ep_a2a_overlap=plan.moe_a2a_overlap,
        ep_capacity=plan.moe_capacity_factor or 0.0, ep_pad=plan.moe_pad_to_capacity,
        recompute_moe=RecomputeModule.moe in plan.recompute_module_set,
        recompute_selective_op=plan.recompute is Recompute.selective_op,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class KeyWork:
    """What :func:`key_q` reads of a plan's (tp, cp, sp, micro-batch, ep) whatever its recompute: the layers'
    activation terms and seconds before recompute, the head's seconds, the ring's and the head activations' bytes. The plan search
    builds it once for all the recompute modes of a key."""

    activations: dict[str, LayerActivations]
    dense: LayerWork | None
    moe: LayerWork | None
    head_fwd: float
    head_bwd: float
    cp_fwd: float
    cp_bwd: float
    cp_bwd_bytes: float  # the ring backward's working set beyond the single attention kernel's (torch_ring_backward_bytes)
    embedding_act: float
    head_act: float
    logits: float
    loss_peak: float
    pipeline_output: float = 0.0  # the last stage's output per micro-batch (head_activations)


def key_work(arch: Architecture, plan: Plan, cluster: Cluster) -> KeyWork:
    """:class:`KeyWork` of ``plan`` (``plan.recompute`` is not read)."""
    act_bytes = 4 if plan.precision is Precision.fp32 else 2
    style = framework_style_for(plan.framework.value)
    shape = dict(micro_batch=plan.micro_batch, seq_len=plan.seq_len, tp=plan.tp, cp=plan.cp)
    head_fwd, head_bwd = head_times(arch, plan, cluster)
    cp_fwd, cp_bwd = ring_layer_seconds(arch, plan, cluster)
    return KeyWork(
        activations=layer_activations(arch, plan),
        dense=layer_work(arch, "dense", plan, cluster) if arch.n_dense_layers else None,
        moe=layer_work(arch, "moe", plan, cluster) if arch.n_moe_layers else None,
        head_fwd=head_fwd, head_bwd=head_bwd, cp_fwd=cp_fwd, cp_bwd=cp_bwd,
        cp_bwd_bytes=ring_backward_bytes(arch, plan, act_bytes),
        embedding_act=embedding_activation_bytes(
            arch, **shape, sequence_parallel=plan.sequence_parallel, act_bytes=act_bytes, framework_style=style
        ),
        head_act=head_activation_bytes(
            arch, **shape, sequence_parallel=plan.sequence_parallel, act_bytes=act_bytes, framework_style=style,
            gathered_tp_inputs=keeps_gathered_tp_inputs(plan),
        ),
        logits=logits_bytes(
            arch, **shape, act_bytes=act_bytes, fused_linear=plan.fused_cross_entropy, fused_loss=plan.uses_fused_loss,
            z_loss=plan.z_loss,
        ),
        pipeline_output=0.0 if plan.fused_cross_entropy else pipeline_output_bytes(
            arch, **shape, act_bytes=act_bytes, fp32=not plan.uses_fused_loss
        ),
        loss_peak=loss_peak_bytes(
            arch, **shape, act_bytes=act_bytes, fused_linear=plan.fused_cross_entropy, eager=not plan.uses_fused_loss,
            loss_parallel=plan.tp > 1 and plan.framework is Framework.fsdp2,  # torchtitan's default with TP
            z_loss=plan.z_loss,
        ),
    )  # fmt: skip


def key_q(arch: Architecture, plan: Plan, cluster: Cluster) -> KeyQ:
    """Per-layer activation bytes and compute seconds for the plan's (tp, cp, sp, recompute, micro-batch, ep)."""
    return recompute_key_q(
        arch, key_work(arch, plan, cluster), plan.recompute, plan.recompute_share(arch.n_layers)
    )


def recompute_key_q(arch: Architecture, w: KeyWork, recompute: Recompute, share: float | None = None) -> KeyQ:
    """:func:`key_q` of the plans whose :func:`key_work` is ``w`` under ``recompute`` (the search: one
    :class:`KeyWork` for all the recompute modes of a key). ``share``: of the layers that recompute fully
    (:meth:`Plan.recompute_share`; default every layer under full recompute, none otherwise)."""
    full = recompute is Recompute.full
    if share is None:
        share = 1.0 if full else 0.0
    totals = {kind: a.totals(recompute) for kind, a in w.activations.items()}  # (saved, peak extra)
    # Full recompute of only some layers (recompute_layers): that share of the layers keeps its input and
    # repeats its forward; the others keep every activation (the saved bytes are the share-weighted mean).
    partial = full and share < 1.0
    kept = {kind: a.totals(Recompute.none) for kind, a in w.activations.items()} if partial else totals

    def saved(kind: str) -> float:  # the share-weighted mean (exactly the plan's own bytes unless partial)
        if kind not in totals:
            return 0.0
        return share * totals[kind][0] + (1 - share) * kept[kind][0]

    peak_extra = max(t[1] for t in (*totals.values(), *kept.values()))
    # the ring's backward buffers live while the layer's attention backward runs, after its MLP backward has freed
    # the MLP's tensors (saved or re-materialised): they add only what exceeds those
    if w.cp_bwd_bytes:
        ring = max(t[1] + max(0.0, w.cp_bwd_bytes - w.activations[k].mlp_bytes()) for k, t in totals.items())
        peak_extra = max(peak_extra, ring)
    # The last stage's loss term: the saved logits, or the eager loss's backward peak where that is larger than
    # the saved logits plus a layer's recompute transient (the two never coexist: the loss's tensors are freed
    # before the first layer's backward runs).
    logits = max(w.logits, w.loss_peak - peak_extra)
    rec = share if full else 1.0
    dense, moe = w.dense, w.moe
    # the ring runs again for each recomputed attention forward: full recompute (its share of the layers) and
    # selective recompute (the attention core); selective-op keeps the attention outputs
    cp_forwards = 1.0 + (share if full else 1.0 if recompute is Recompute.selective else 0.0)
    zero = 0.0
    return KeyQ(
        saved_dense=saved("dense"), saved_moe=saved("moe"), peak_extra=peak_extra,
        embedding_act=w.embedding_act, head_act=w.head_act, logits=logits, pipeline_output=w.pipeline_output,
        fwd_dense=dense.fwd_s if dense else zero, bwd_dense=dense.bwd_s if dense else zero,
        rec_dense=rec * dense.recompute_s(arch, recompute) if dense else zero,
        attn_dense=dense.attention_fwd_s if dense else zero,
        fwd_moe=moe.fwd_s if moe else zero, bwd_moe=moe.bwd_s if moe else zero,
        rec_moe=rec * moe.recompute_s(arch, recompute) if moe else zero,
        attn_moe=moe.attention_fwd_s if moe else zero,
        head_fwd=w.head_fwd, head_bwd=w.head_bwd, cp_fwd=w.cp_fwd, cp_bwd=w.cp_bwd, cp_forwards=cp_forwards,
    )  # fmt: skip


def ring_backward_bytes(arch: Architecture, plan: Plan, act_bytes: int) -> float:
    """Bytes one layer's ring-attention backward holds beyond the single attention kernel's gradients, one
    micro-batch on one rank (:func:`app.domain.estimator.context_parallel.torch_ring_backward_bytes`): PyTorch's ring
    (FSDP2 / torchtitan plans with CP), or Transformer Engine's all-gather (:func:`te_gather_backward_bytes`); 0
    without CP and for Transformer Engine's p2p ring, whose buffers are not modelled."""
    if plan.cp <= 1 or not (plan.framework is Framework.fsdp2 or plan.cp_gathers_kv):
        return 0.0
    rows = plan.micro_batch * plan.seq_len / plan.cp  # the rank's tokens
    heads = math.ceil(arch.n_heads / plan.tp)
    # K/V repeated to every query head where the model repeats them before attention
    kv_heads = heads if plan.repeat_kv else math.ceil(arch.n_kv_heads / plan.tp)
    q = rows * heads * arch.qk_head_dim
    kv = rows * kv_heads * (arch.qk_head_dim + arch.value_head_dim)
    if plan.cp_gathers_kv:
        return float(te_gather_backward_bytes(plan.cp, q, kv, act_bytes))
    return float(torch_ring_backward_bytes(plan.cp, q, kv, rows * heads, act_bytes))


def plan_ring(plan: Plan) -> RingAttention:
    """The K/V exchange ``plan``'s context parallelism runs (:func:`app.domain.estimator.context_parallel.ring_for`)."""
    return ring_for(plan.framework.value, plan.cp_comm_type.value)


def ring_layer_seconds(arch: Architecture, plan: Plan, cluster: Cluster) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's ring-attention merges and extra attention kernels on one rank
    (:func:`app.domain.estimator.context_parallel.ring_merge_bytes`, :func:`ring_fixed_seconds`); 0 without CP."""
    if plan.cp <= 1:
        return 0.0, 0.0
    rows = plan.micro_batch * plan.seq_len / plan.cp / plan.tp  # the rank's tokens; widths below are ÷ tp
    q = rows * arch.n_heads * arch.qk_head_dim
    out = rows * arch.n_heads * arch.value_head_dim
    kv_heads = arch.n_heads if plan.repeat_kv else arch.n_kv_heads  # K/V repeated to every query head
    kv = rows * kv_heads * (arch.qk_head_dim + arch.value_head_dim)
    ring = plan_ring(plan)
    fwd_b, bwd_b = ring_merge_bytes(plan.cp, q, out, kv, ring)
    hbm = cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency
    overhead = cluster.efficiency.gemm_overhead_us * 1e-6
    return tuple(ring_fixed_seconds(plan.cp, b, hbm, overhead, ring) for b in (fwd_b, bwd_b))  # type: ignore[return-value]


def consts(cluster: Cluster, plan: Plan) -> Consts:
    per = state_bytes_per_param(plan)
    rt = cluster.runtime
    stack = cluster.stack(plan.framework.value)
    up, out, hop_up, hop_out = link_speeds(cluster)
    ring = plan_ring(plan)
    return Consts(
        weights_b=per.weights, grads_b=per.grads, master_b=per.master, optimizer_b=per.optimizer,
        grad_reduce_b=per.grad_reduce, work_b=4.0 if plan.precision is Precision.fp32 else 2.0,
        act_b=4.0 if plan.precision is Precision.fp32 else 2.0, cuda_context=rt.cuda_context_bytes,
        nccl_intra=rt.nccl_bytes_per_communicator, nccl_spanning=rt.nccl_bytes_per_communicator_scale_out,
        workspace=rt.workspace_bytes, fragmentation=rt.fragmentation_fraction,
        usable=cluster.accelerator.memory_usable_bytes, domain=cluster.nvlink_domain, scale_up=up, scale_out=out,
        hop_up=hop_up, hop_out=hop_out, optimizer_traffic_b=OPTIMIZER_TRAFFIC_B[plan.optimizer.value],
        hbm_bytes_per_s=cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency,
        host_link_bytes_per_s=rt.host_link_gb_per_s(cluster.accelerator.pcie_generation) * 1e9,
        cpu_optimizer_bytes_per_s=rt.cpu_optimizer_gb_per_s * 1e9, nvme_bytes_per_s=rt.nvme_gb_per_s * 1e9,
        tp_overlap=stack.tp_overlap if plan.uses_tp_comm_overlap else 0.0, ep_overlap=stack.ep_overlap, dp_overlap=stack.dp_overlap, comm_slowdown=cluster.scale.comm_slowdown,
        straggler_cv=cluster.scale.straggler_cv, cp_ring=ring,
        pp_overlap_interleaved=stack.pp_overlap_interleaved, pp_serial_p2p=stack.pp_serial_p2p,
        pp_grad_reduce_after_schedule=stack.pp_grad_reduce_after_schedule, param_gather_in_step=stack.param_gather_in_step,
        bf16_optimizer=plan.framework is Framework.deepspeed and plan.precision is Precision.bf16 and plan.grad_accum_fp32,
        autograd_grad_accumulation=plan.framework is Framework.deepspeed,
        prefetch_bucket_params=stack.prefetch_bucket_params or 0.0,
        dp_bucket_params=stack.dp_bucket_params or (stack.dp_bucket_bytes or 0.0) / per.grad_reduce,
        live_params=stack.live_params or 0.0, repeat_kv=plan.repeat_kv,
        unsharded_init=plan.framework is Framework.deepspeed and not plan.zero_init,
        fsdp_copy_out=plan.framework is Framework.fsdp2 and not plan.fsdp_flat_params,
        te_quantized_b=te_quantized_weight_bytes(plan.framework.value, plan.precision.value),
    )  # fmt: skip


def rank_q(rank: RankLayers) -> RankQ:
    return RankQ(
        rank=rank.rank, n_dense=rank.dense_layers, n_moe=rank.moe_layers, first=rank.first, last=rank.last
    )


def _stage(rank: RankLayers, m: dict, usable: float, workspace: float) -> StageMemory:
    terms = {
        "params": m["params"], "grads": m["grads"], "optimizer": m["optimizer"], "activations": m["activations"],
        "logits": m["logits"], "gathered params": m["gathered"], "buffers": m["buffers"], "runtime": m["runtime"],
    }  # fmt: skip
    if m["startup"] > m["allocated"] + m["fragmentation"]:  # the start-up copy, not training, sets the peak
        terms = {STARTUP_TERM: m["startup"]}
    return StageMemory(
        rank=rank.rank, layers=rank.n_layers, first=rank.first, last=rank.last,
        params_bytes=math.ceil(m["params"]), grads_bytes=math.ceil(m["grads"]),
        optimizer_bytes=math.ceil(m["optimizer"]), activations_bytes=math.ceil(m["activations"]),
        logits_bytes=math.ceil(m["logits"]), gathered_params_bytes=math.ceil(m["gathered"]),
        buffers_bytes=math.ceil(m["buffers"]), workspace_bytes=int(workspace),
        allocated_peak_bytes=math.ceil(m["allocated"]), fragmentation_bytes=math.ceil(m["fragmentation"]),
        startup_bytes=math.ceil(m["startup"]), runtime_bytes=math.ceil(m["runtime"]), total_bytes=math.ceil(m["total"]), usable_bytes=int(usable),
        margin_bytes=math.floor(usable - m["total"]), fits=m["total"] <= usable,
        dominant_term=max(terms, key=lambda k: terms[k]), host_bytes=math.ceil(m["host"]),
        nvme_bytes=math.ceil(m["nvme"]), communicators=int(m["communicators"]),
        optimizer_step_bytes=math.ceil(m["step"]),
    )  # fmt: skip


def evaluate_plan(
    arch: Architecture, cluster: Cluster, plan: Plan, counts: ParameterCounts | None = None
) -> tuple[tuple[StageMemory, ...], StepTime]:
    """Memory of every pipeline rank and the step time of ``plan`` (Python numbers)."""
    counts = counts or parameter_counts(arch)
    mq, pq, kq, c = (
        model_q(arch, counts),
        plan_q(arch, plan),
        key_q(arch, plan, cluster),
        consts(cluster, plan),
    )
    comm = plan_comm(SCALAR, mq, pq, c)
    stages: list[StageMemory] = []
    ranks: list[RankTime] = []
    times: dict[tuple, dict] = {}  # a rank's time depends only on its layers and first/last role
    for rank in rank_layers(arch, plan.pp, plan.vpp, plan.mtp_layers, plan.chunk_counts):
        rq = rank_q(rank)
        stages.append(_stage(rank, rank_memory(SCALAR, mq, pq, rq, kq, c), c.usable, c.workspace))
        signature = (rank.dense_layers, rank.moe_layers, rank.first, rank.last)
        if signature not in times:
            times[signature] = rank_time(SCALAR, mq, pq, rq, kq, c, comm)
        t = times[signature]
        ranks.append(
            RankTime(
                rank=rank.rank,
                compute_s=t["compute"],
                recompute_s=t["recompute"],
                tp_s=t["tp"],
                cp_s=t["cp"],
                ep_s=t["ep"],
                fsdp_s=t["fsdp"],
                micro_batch_s=t["micro_batch"],
                dp_s=t["dp"],
                optimizer_s=t["optimizer"],
            )  # fmt: skip
        )
    slow = max(ranks, key=lambda r: r.micro_batch_s)
    dp_exposed = max(r.dp_s for r in ranks)
    optimizer = max(r.optimizer_s for r in ranks)
    pp_p2p = exposed_pp_p2p(SCALAR, pq, c, comm["pp_hop"], slow.micro_batch_s)
    step, bubble, sync = combine_step(SCALAR, pq, c, slow.micro_batch_s, pp_p2p, dp_exposed, optimizer)
    m = plan.micro_batches
    groups = plan_groups(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, plan.dp_shard_size, cluster, plan.etp)
    return tuple(stages), StepTime(
        step_s=step, micro_batches=m, micro_batch_s=slow.micro_batch_s, compute_s=m * slow.compute_s,
        recompute_s=m * slow.recompute_s, tp_exposed_s=m * slow.tp_s, cp_exposed_s=m * slow.cp_s,
        ep_exposed_s=m * slow.ep_s, fsdp_exposed_s=m * slow.fsdp_s, pp_p2p_s=pp_p2p, bubble_s=bubble,
        dp_exposed_s=dp_exposed, optimizer_s=optimizer, sync_s=sync, slowest_rank=slow.rank, ranks=tuple(ranks), groups=groups,
    )  # fmt: skip


def step_seconds(
    arch: Architecture,
    cluster: Cluster,
    plan: Plan,
    mq: ModelQ,
    pq: PlanQ,
    ranks: tuple[RankLayers, ...],
) -> float:
    """The step time alone, as :func:`evaluate_plan` computes it (same formulas, no memory): for fitting, where
    the model, plan and ranks (``mq``, ``pq``, ``ranks``) are fixed and only the cluster's efficiencies change."""
    kq, c = key_q(arch, plan, cluster), consts(cluster, plan)
    comm = plan_comm(SCALAR, mq, pq, c)
    times: dict[tuple, dict] = {}
    for rank in ranks:
        signature = (rank.dense_layers, rank.moe_layers, rank.first, rank.last)
        if signature not in times:
            times[signature] = rank_time(SCALAR, mq, pq, rank_q(rank), kq, c, comm)
    slow = max(t["micro_batch"] for t in times.values())
    dp = max(t["dp"] for t in times.values())
    optimizer = max(t["optimizer"] for t in times.values())
    pp_p2p = exposed_pp_p2p(SCALAR, pq, c, comm["pp_hop"], slow)
    return combine_step(SCALAR, pq, c, slow, pp_p2p, dp, optimizer)[0]


def memory_by_stage(arch: Architecture, cluster: Cluster, plan: Plan) -> tuple[StageMemory, ...]:
    return evaluate_plan(arch, cluster, plan)[0]
