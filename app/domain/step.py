"""Step time: compute per micro-batch and stage, exposed communication, pipeline bubble, optimizer.

    step = m·t_mb + (pp − 1)/vpp · t_mb          (1F1B / interleaved: bubble (pp−1)/(vpp·m) of the work)
         + pipeline point-to-point transfers
         + exposed data-parallel gradient reduction (once per step: no_sync under gradient accumulation)
         + optimizer step
    t_mb = max over pipeline ranks of (forward + backward + recompute
                                       + exposed TP, CP, EP and FSDP communication of one micro-batch)

Overlap rules: TP and EP collectives are on the critical path (no TP/EP overlap assumed); CP ring exchange
overlaps the attention it feeds; FSDP/ZeRO-3 gathers and reduce-scatters overlap the micro-batch's compute
except the first unit's gather; DDP/ZeRO-1/2 and Megatron gradient reduction overlaps the last
micro-batch's backward except the last bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from app.domain.architecture import Architecture, ParameterCounts, kv_dim
from app.domain.cluster import Cluster
from app.domain.compute import head_times, layer_times, optimizer_time
from app.domain.memory import LocalParams, local_params, state_bytes_per_param
from app.domain.network import Collective, Groups, collective_time, plan_groups
from app.domain.pipeline import RankLayers, rank_layers
from app.domain.plan import Offload, Plan, Precision, Recompute, Sharding
from app.domain.provenance import Frozen


@dataclass(frozen=True, slots=True)
class RankTime:
    """Seconds on one pipeline rank: one micro-batch's compute (forward + backward), recompute and exposed
    TP/CP/EP/FSDP communication; ``dp_s`` is the exposed per-step gradient reduction."""

    rank: int
    compute_s: float
    recompute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    fsdp_s: float
    micro_batch_s: float
    dp_s: float
    optimizer_s: float


class StepTime(Frozen):
    step_s: float
    micro_batches: int
    micro_batch_s: float
    compute_s: float = Field(description="forward + backward over the step on the slowest stage")
    recompute_s: float
    tp_exposed_s: float
    cp_exposed_s: float
    ep_exposed_s: float
    fsdp_exposed_s: float
    pp_p2p_s: float
    bubble_s: float
    dp_exposed_s: float
    optimizer_s: float
    slowest_rank: int
    ranks: tuple[RankTime, ...]
    groups: Groups


def _act_bytes(plan: Plan) -> int:
    return 4 if plan.precision is Precision.fp32 else 2


def step_time(
    arch: Architecture,
    counts: ParameterCounts,
    cluster: Cluster,
    plan: Plan,
    ranks_layers: tuple[RankLayers, ...] | None = None,
    locals_: tuple[LocalParams, ...] | None = None,
) -> StepTime:
    groups = plan_groups(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, plan.dp_shard_size, cluster)
    per = state_bytes_per_param(plan)
    act = _act_bytes(plan)
    b, s, cp, tp = plan.micro_batch, plan.seq_len, plan.cp, plan.tp
    tokens = b * s / cp
    h = arch.hidden_size
    m = plan.micro_batches
    times = {kind: layer_times(arch, kind, plan, cluster) for kind in ("dense", "moe") if (
        arch.n_dense_layers if kind == "dense" else arch.n_moe_layers)}  # fmt: skip
    head_fwd, head_bwd = head_times(arch, plan, cluster)

    tp_bytes = tokens * h * act
    tp_per_layer = 0.0
    if tp > 1:
        n_ar = 4 + (2 if plan.recompute is Recompute.full else 0)
        tp_per_layer = n_ar * collective_time(Collective.all_reduce, tp_bytes, groups.tp)
    kv_bytes = 2 * tokens * kv_dim(arch) / tp * act
    cp_hop = collective_time(Collective.p2p, kv_bytes, groups.cp) if cp > 1 else 0.0
    ep_a2a = 0.0
    if plan.ep > 1 and arch.is_moe:
        ep_a2a = collective_time(Collective.all_to_all, tokens * arch.experts_top_k * h * act, groups.ep)

    shard = plan.dp_shard_size * cp
    work = 4.0 if plan.precision is Precision.fp32 else 2.0
    ranks: list[RankTime] = []
    ranks_layers = ranks_layers or rank_layers(arch, plan.pp, plan.vpp)
    locals_ = locals_ or tuple(local_params(arch, counts, r, plan) for r in ranks_layers)
    for rank, local in zip(ranks_layers, locals_, strict=True):
        compute = recompute = tp_s = cp_s = ep_s = 0.0
        for kind, t in times.items():
            n = rank.count(kind)  # type: ignore[arg-type]
            compute += n * (t.fwd_s + t.bwd_s)
            recompute += n * t.recompute_s
            tp_s += n * tp_per_layer
            if cp > 1:
                ring = (cp - 1) * cp_hop
                cp_s += n * (max(0.0, ring - t.attention_fwd_s) + max(0.0, 2 * ring - 2 * t.attention_fwd_s))
            if kind == "moe":
                ep_s += n * ep_a2a * (4 + (2 if plan.recompute is Recompute.full else 0))
        if rank.last:
            compute += head_fwd + head_bwd
        mb_compute = compute + recompute
        fsdp = 0.0
        dp = 0.0
        sh = plan.sharding
        if sh.shards_params and plan.dp * cp > 1:
            gathers = 1 if sh is Sharding.fsdp_grad_op else 2
            comm = gathers * collective_time(Collective.all_gather, local.total * work, groups.dp_shard)
            comm += collective_time(Collective.reduce_scatter, local.total * per.grad_reduce, groups.dp_shard)
            units = max(1, rank.n_layers)
            fsdp = max(0.0, comm - mb_compute) + comm / (units + 1)
            if sh is Sharding.fsdp_hybrid and groups.dp_replicate.size > 1:
                dp = collective_time(
                    Collective.all_reduce, local.total / shard * per.grad_reduce, groups.dp_replicate
                )
        elif plan.dp * cp > 1:
            if sh is Sharding.ddp:
                comm = collective_time(Collective.all_reduce, local.total * per.grad_reduce, groups.dp)
            else:  # zero1/zero2/distopt: reduce-scatter grads, all-gather updated 16-bit params
                comm = collective_time(Collective.reduce_scatter, local.total * per.grad_reduce, groups.dp)
                comm += collective_time(Collective.all_gather, local.total * work, groups.dp)
            window = compute * 2 / 3  # the backward of the last micro-batch
            dp = max(0.0, comm - window) + comm / max(1, rank.n_layers)
        sharded_params = local.total / shard if sh.shards_optimizer else local.total
        opt = 0.0 if plan.offload is not Offload.none else optimizer_time(sharded_params, plan, cluster)
        mb = compute + recompute + tp_s + cp_s + ep_s + fsdp
        ranks.append(
            RankTime(
                rank=rank.rank,
                compute_s=compute,
                recompute_s=recompute,
                tp_s=tp_s,
                cp_s=cp_s,
                ep_s=ep_s,
                fsdp_s=fsdp,
                micro_batch_s=mb,
                dp_s=dp,
                optimizer_s=opt,
            )  # fmt: skip
        )
    slow = max(ranks, key=lambda r: r.micro_batch_s)
    t_mb = slow.micro_batch_s
    bubble = (plan.pp - 1) / plan.vpp * t_mb
    p2p = 0.0
    if plan.pp > 1:
        p2p_bytes = tokens * h * act / (tp if plan.sequence_parallel else 1)
        p2p = 2 * (m * plan.vpp + plan.pp - 1) * collective_time(Collective.p2p, p2p_bytes, groups.pp)
    dp_exposed = max(r.dp_s for r in ranks)
    optimizer = max(r.optimizer_s for r in ranks)
    step = m * t_mb + bubble + p2p + dp_exposed + optimizer
    return StepTime(
        step_s=step,
        micro_batches=m,
        micro_batch_s=t_mb,
        compute_s=m * slow.compute_s,
        recompute_s=m * slow.recompute_s,
        tp_exposed_s=m * slow.tp_s,
        cp_exposed_s=m * slow.cp_s,
        ep_exposed_s=m * slow.ep_s,
        fsdp_exposed_s=m * slow.fsdp_s,
        pp_p2p_s=p2p,
        bubble_s=bubble,
        dp_exposed_s=dp_exposed,
        optimizer_s=optimizer,
        slowest_rank=slow.rank,
        ranks=tuple(ranks),
        groups=groups,
    )
