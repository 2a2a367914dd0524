"""Exhaustive, vectorised search for the best parallelism plan.

The space (tp × cp × pp × vpp × ep × sharding × offload × micro-batch × recompute, dp derived, for every
cluster size and global batch asked for) is laid out as numpy arrays and evaluated in one pass by the same
per-rank formulas the estimator uses (:mod:`app.domain.estimator.evaluate`) — not one Python object per plan. Each plan's
memory is the worst of a few representative pipeline ranks (for every distinct layer count and first/last
role, the lowest rank: it holds the most micro-batches in flight), which is exactly the estimator's maximum
over all ranks. The top plans are then re-evaluated by :func:`app.domain.estimator.estimate.estimate` for their full
breakdown. Sequence parallelism is switched on whenever tp > 1: in the model it never costs memory or time.

Rejected plans are counted by their first failing reason, so a user sees why nothing fits.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.domain.estimator.assemble import KeyWork, consts, exact_state, key_work, model_q, recompute_key_q
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.estimate import estimate
from app.domain.estimator.evaluate import (
    KeyQ,
    PlanQ,
    RankQ,
    combine_step,
    exposed_pp_p2p,
    plan_comm,
    rank_time,
)
from app.domain.estimator.memory import host_capacity_bytes
from app.domain.estimator.pipeline import rank_counts
from app.domain.estimator.plan import Framework, Offload, Plan, Recompute, Sharding
from app.domain.estimator.rank_memory import rank_memory
from app.domain.estimator.xp import VECTOR
from app.domain.model.architecture import Architecture
from app.domain.model.counts import parameter_counts
from app.domain.search.run_pricing import FlatRate, RunPricing
from app.domain.search.space import _alive, _grid, layout_ep, layout_etp, layout_folded, space_size
from app.domain.search.spec import (
    GIB,
    OFFLOADS,
    RECOMPUTES,
    SHARDINGS,
    Candidate,
    Objective,
    SearchCancelled,
    SearchResult,
    SearchSpec,
    SearchTooLarge,
)

# -- evaluation --------------------------------------------------------------------------------------------


def _plan_arrays(
    arch: Architecture, spec: SearchSpec, cluster: Cluster, gpus: int, batch: int, g: dict
) -> PlanQ:
    tp, cp, pp, vpp, layout, mb = (g[k] for k in ("tp", "cp", "pp", "vpp", "ep", "mb"))
    ep = layout_ep(layout)
    dp = gpus // (tp * cp * pp)
    sh_codes = g["sh"]
    flags = {
        name: np.array([fn(s) for s in SHARDINGS])[sh_codes]
        for name, fn in (
            ("shards_params", lambda s: s.shards_params), ("shards_grads", lambda s: s.shards_grads),
            ("shards_optimizer", lambda s: s.shards_optimizer), ("grad_op", lambda s: s is Sharding.fsdp_grad_op),
            ("hybrid", lambda s: s is Sharding.fsdp_hybrid), ("ddp", lambda s: s is Sharding.ddp),
        )
    }  # fmt: skip
    group = spec.hsdp_group or cluster.gpus_per_node
    shard_size = np.where(flags["hybrid"], np.minimum(group, dp), dp)
    off = g["off"]
    fsdp_family = np.isin(
        sh_codes,
        [SHARDINGS.index(s) for s in (Sharding.fsdp_full, Sharding.fsdp_grad_op, Sharding.fsdp_hybrid)],
    )
    exact = (
        (spec.framework is Framework.fsdp2) & fsdp_family & (tp == 1) & (pp == 1) & (ep == 1)
        & (off == OFFLOADS.index(Offload.none))
    )  # fmt: skip
    e_params = np.zeros(len(tp))
    e_grads = np.zeros(len(tp))
    e_opt = np.zeros(len(tp))
    if exact.any():
        shard_total = shard_size * cp
        for value in np.unique(shard_total[exact]):
            plan = _scalar_plan(spec, tp=1, pp=1, vpp=1, dp=int(value), cp=1, ep=1, sharding=Sharding.fsdp_full,
                                offload=Offload.none, micro_batch=1, batch=int(value), recompute=Recompute.none)  # fmt: skip
            p, gr, o = exact_state(arch, plan)
            sel = exact & (shard_total == value)
            e_params[sel], e_grads[sel], e_opt[sel] = p, gr, o
    col = lambda a: np.asarray(a)[:, None]  # noqa: E731  (plan-level columns broadcast over ranks)
    return PlanQ(
        gpus=gpus, tp=col(tp), pp=col(pp), vpp=col(vpp), dp=col(dp), cp=col(cp), ep=col(ep), etp=col(layout_etp(spec, tp, layout)),
        micro_batch=col(mb),
        micro_batches=col(np.maximum(1, batch // (mb * dp))), seq_len=spec.seq_len, shard=col(shard_size * cp),
        replicas=col(np.where(flags["hybrid"], np.maximum(1, dp // shard_size), 1)),
        shards_params=col(flags["shards_params"]), shards_grads=col(flags["shards_grads"]),
        shards_optimizer=col(flags["shards_optimizer"]), grad_op=col(flags["grad_op"]), hybrid=col(flags["hybrid"]),
        ddp=col(flags["ddp"]), fsdp2=spec.framework is Framework.fsdp2, deepspeed=spec.framework is Framework.deepspeed,
        offload_optimizer=col(off == OFFLOADS.index(Offload.optimizer_cpu)),
        offload_params=col(off == OFFLOADS.index(Offload.params_cpu)), offload_nvme=col(off == OFFLOADS.index(Offload.nvme)),
        recompute_full=col(g["rc"] == RECOMPUTES.index(Recompute.full)), sequence_parallel=col(tp > 1),
        recompute_selective_op=col(g["rc"] == RECOMPUTES.index(Recompute.selective_op)),
        exact=col(exact), exact_params=col(e_params), exact_grads=col(e_grads), exact_optimizer=col(e_opt),
        ep_dedup=spec.moe_dispatcher.dedup_kind,
        ep_a2a_overlap=col(spec.a2a_overlap(ep, pp, vpp, g["rc"] == RECOMPUTES.index(Recompute.full))),
        ep_capacity=spec.moe_capacity_factor or 0.0, ep_pad=spec.moe_pad_to_capacity, mtp=spec.mtp_layers,
    )  # fmt: skip


def _scalar_plan(spec: SearchSpec, *, tp, pp, vpp, dp, cp, ep, sharding, offload, micro_batch, batch, recompute,
                 shard_group_size=None) -> Plan:  # fmt: skip
    """The plan a grid point stands for; ``ep`` is its expert layout (:data:`app.domain.search.space.FOLDED`)."""
    folded, ep = bool(layout_folded(ep)), int(layout_ep(ep))
    return Plan(
        tp=tp, pp=pp, vpp=vpp, dp=dp, cp=cp, ep=ep, sharding=sharding, shard_group_size=shard_group_size,
        offload=offload, micro_batch=micro_batch, global_batch=batch, seq_len=spec.seq_len, recompute=recompute,
        sequence_parallel=tp > 1, flash_attention=spec.flash_attention, precision=spec.precision,
        optimizer=spec.optimizer, framework=spec.framework, fused_kernels=spec.fused_kernels, fused_loss=spec.fused_loss,
        fused_cross_entropy=spec.fused_cross_entropy, attention_kernel=spec.attention_kernel,
        grad_reduce_bf16=spec.grad_reduce_bf16, fused_swiglu=spec.fused_swiglu, z_loss=spec.z_loss,
        moe_dispatcher=spec.moe_dispatcher, cp_comm_type=spec.cp_comm_type, expert_tp=1 if folded else spec.expert_tp,
        mtp_layers=spec.mtp_layers,
        grad_accum_fp32=spec.grad_accum_fp32, tp_comm_overlap=spec.tp_comm_overlap, repeat_kv=spec.repeat_kv,
        fsdp_flat_params=spec.fsdp_flat_params, fp8_attention=spec.fp8_attention, fp8_recipe=spec.fp8_recipe, nvfp4_rht=spec.nvfp4_rht,
        zero_init=spec.zero_init, moe_capacity_factor=spec.moe_capacity_factor,
        moe_pad_to_capacity=spec.moe_pad_to_capacity,
        moe_a2a_overlap=bool(spec.a2a_overlap(ep, pp, vpp, recompute is Recompute.full)),
    )  # fmt: skip


# Per-rank terms (activation bytes, layer compute seconds) of a (tp, cp, recompute, micro-batch, ep) key depend on
# the model, the plan settings and the cluster's accelerator and efficiency figures, never on its GPU count: they
# are shared across cluster sizes and searches (the sizing search runs one node over many sizes). Keyed by the
# JSON of everything they could read, so any difference (calibration, power cap) is a different entry.
_KEY_Q_CACHE: dict[tuple[str, str, str], dict[tuple[int, ...], Any]] = {}
_KEY_Q_CACHE_CONTEXTS = 64


def _key_q_context(arch: Architecture, spec: SearchSpec, cluster: Cluster) -> dict[tuple[int, ...], Any]:
    ctx = (
        arch.model_dump_json(),
        # what key_q reads of a cluster: the GPU, its figures and the stacks — not its size, node or fabrics, so
        # every node of one accelerator shares the entries (tests/domain/test_sizing.py checks the independence)
        cluster.model_dump_json(include={"accelerator", "efficiency", "scale", "stacks", "power_limit_w", "runtime"}),
        spec.model_dump_json(include={"seq_len", "framework", "precision", "optimizer", "flash_attention",
                                      "fused_kernels", "fused_loss", "fused_cross_entropy", "attention_kernel",
                                      "grad_reduce_bf16", "fused_swiglu", "z_loss", "repeat_kv", "moe_capacity_factor", "fp8_attention", "fp8_recipe", "nvfp4_rht",
                                      "moe_pad_to_capacity", "expert_tp", "cp_comm_type"}),
    )  # fmt: skip
    table = _KEY_Q_CACHE.get(ctx)
    if table is None:
        if len(_KEY_Q_CACHE) >= _KEY_Q_CACHE_CONTEXTS:
            _KEY_Q_CACHE.clear()
        table = _KEY_Q_CACHE.setdefault(ctx, {})
    return table


def _key_arrays(arch: Architecture, spec: SearchSpec, cluster: Cluster, g: dict) -> KeyQ:
    unique, inverse = _unique_rows([g["tp"], g["cp"], g["rc"], g["mb"], g["ep"]])
    values = []
    shared = _key_q_context(arch, spec, cluster)
    work: dict[tuple[int, ...], KeyWork] = {}  # the recompute modes of one (tp, cp, mb, ep) share their work
    for tp, cp, rc, mb, ep in unique.tolist():
        hit = shared.get((tp, cp, rc, mb, ep))
        if hit is None:
            w = work.get((tp, cp, mb, ep))
            if w is None:
                plan = _scalar_plan(spec, tp=tp, pp=1, vpp=1, dp=1, cp=cp, ep=ep, sharding=Sharding.ddp,
                                    offload=Offload.none, micro_batch=mb, batch=mb, recompute=Recompute.none)  # fmt: skip
                w = work[(tp, cp, mb, ep)] = key_work(arch, plan, cluster)
            hit = shared[(tp, cp, rc, mb, ep)] = recompute_key_q(arch, w, RECOMPUTES[rc])
        values.append(hit)
    fields = tuple(KeyQ.__dataclass_fields__)
    table = np.array([[getattr(v, f) for f in fields] for v in values], dtype=float)[inverse.ravel()]
    return KeyQ(**{f: table[:, i, None] for i, f in enumerate(fields)})


def _unique_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)`` (same order), without the slow
    row sort: each column is coded by its sorted distinct values and the codes combined into one integer."""
    combined = np.zeros(len(cols[0]), dtype=np.int64)
    for col in cols:
        values, codes = np.unique(col, return_inverse=True)
        combined = combined * len(values) + codes.ravel()
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    return np.stack([c[first] for c in cols], axis=1), inverse.ravel()


# The representative ranks of each (pp, vpp) per architecture object (held, so its id is not reused while cached):
# the sizing search asks for the same few pipelines thousands of times.
_RANK_REPS: dict[
    int, tuple[Architecture, dict[tuple[int, int, int], list[tuple[int, int, int, bool, bool]]]]
] = {}


def _rank_reps(arch: Architecture, pp: int, vpp: int, mtp: int = 0) -> list[tuple[int, int, int, bool, bool]]:
    """(rank, dense layers, MoE layers, first, last) of the lowest rank of each distinct layer count and role."""
    entry = _RANK_REPS.get(id(arch))
    if entry is None or entry[0] is not arch:
        if len(_RANK_REPS) >= 32:
            _RANK_REPS.clear()
        entry = _RANK_REPS[id(arch)] = (arch, {})
    reps = entry[1].get((pp, vpp, mtp))
    if reps is None:
        seen: dict[tuple, tuple] = {}
        for rank, *sig in rank_counts(arch, pp, vpp, mtp):
            seen.setdefault(tuple(sig), (rank, *sig))
        reps = entry[1][(pp, vpp, mtp)] = list(seen.values())
    return reps


def _rank_arrays(arch: Architecture, g: dict, mtp: int = 0) -> RankQ:
    unique, inverse = _unique_rows([g["pp"], g["vpp"]])
    reps = [_rank_reps(arch, pp, vpp, mtp) for pp, vpp in unique.tolist()]
    width = max(len(r) for r in reps)
    table = np.array([r + [r[0]] * (width - len(r)) for r in reps], dtype=float)  # pad with a duplicate
    rows = table[inverse.ravel()]
    pick = lambda i, dt: rows[:, :, i].astype(dt)  # noqa: E731
    return RankQ(
        rank=pick(0, float),
        n_dense=pick(1, float),
        n_moe=pick(2, float),
        first=pick(3, bool),
        last=pick(4, bool),
    )


def _subset(g: dict, mask: np.ndarray) -> dict:
    return {k: v[mask] for k, v in g.items()}


@dataclass
class _Scored:
    g: dict
    gpus: int
    batch: int
    step_s: np.ndarray
    peak: np.ndarray
    usable: float
    host_ok: np.ndarray


def _rows(q: Any, idx: np.ndarray, n: int) -> Any:
    """``q`` (PlanQ, RankQ or KeyQ) restricted to the plans ``idx`` of ``n``: every per-plan array (first axis
    of length ``n``) is indexed; scalars and broadcast constants are kept."""
    return dataclasses.replace(q, **{
        f: v[idx] for f in q.__dataclass_fields__
        if isinstance(v := getattr(q, f), np.ndarray) and v.ndim >= 1 and v.shape[0] == n
    })  # fmt: skip


def _evaluate(
    arch: Architecture,
    cluster: Cluster,
    spec: SearchSpec,
    gpus: int,
    batch: int,
    g: dict,
    time_only_fitting: bool = False,
) -> _Scored:
    """Memory and step time of every plan in ``g``. With ``time_only_fitting`` (the search), time is evaluated
    only for plans that fit in GPU memory and host RAM/NVMe (the others cannot be chosen; their step is ∞)."""
    counts = parameter_counts(arch)
    mq = model_q(arch, counts)
    pq = _plan_arrays(arch, spec, cluster, gpus, batch, g)
    kq = _key_arrays(arch, spec, cluster, g)
    rq = _rank_arrays(arch, g, spec.mtp_layers)
    c = consts(cluster, _scalar_plan(spec, tp=1, pp=1, vpp=1, dp=1, cp=1, ep=1, sharding=Sharding.ddp,
                                     offload=Offload.none, micro_batch=1, batch=1, recompute=Recompute.none))  # fmt: skip
    mem = rank_memory(VECTOR, mq, pq, rq, kq, c)
    shape = mem["total"].shape
    worst = lambda a, sh=shape: np.max(np.broadcast_to(a, sh), axis=1, keepdims=True)  # noqa: E731
    ranks_per_node = min(cluster.gpus_per_node, gpus)
    host_cap, nvme_cap = host_capacity_bytes(cluster.node.host_memory_gib, cluster.node.local_nvme_tb)
    host_ok = (worst(mem["host"]).ravel() * ranks_per_node <= host_cap) & (
        worst(mem["nvme"]).ravel() * ranks_per_node <= nvme_cap
    )
    peak = worst(mem["total"]).ravel()
    n = len(peak)
    step_s = np.full(n, np.inf)
    timed = np.flatnonzero(host_ok & (peak <= c.usable)) if time_only_fitting else np.arange(n)
    if timed.size:
        if timed.size < n:
            pq, rq, kq = _rows(pq, timed, n), _rows(rq, timed, n), _rows(kq, timed, n)
        comm = plan_comm(VECTOR, mq, pq, c)
        t = rank_time(VECTOR, mq, pq, rq, kq, c, comm)
        sub = (timed.size, shape[1])
        micro_batch_s = worst(t["micro_batch"], sub)
        pp_p2p = exposed_pp_p2p(VECTOR, pq, c, comm["pp_hop"], micro_batch_s)
        step, _, _ = combine_step(VECTOR, pq, c, micro_batch_s, pp_p2p, worst(t["dp"], sub),
                                  worst(t["optimizer"], sub))  # fmt: skip
        step_s[timed] = np.ravel(np.broadcast_to(step, (timed.size, 1)))
    return _Scored(
        g=g, gpus=gpus, batch=batch, step_s=step_s, peak=peak, usable=c.usable, host_ok=host_ok,
    )  # fmt: skip


# -- the search --------------------------------------------------------------------------------------------


def _bucket(short_gib: float) -> str:
    if short_gib < 10:
        return "does not fit by < 10 GiB"
    if short_gib < 40:
        return "does not fit by 10–40 GiB"
    return "does not fit by ≥ 40 GiB"


def _candidate(
    arch: Architecture, cluster: Cluster, spec: SearchSpec, s: _Scored, i: int, flops_per_token: float
) -> Candidate:
    g = {k: int(v[i]) for k, v in s.g.items()}
    dp = s.gpus // (g["tp"] * g["cp"] * g["pp"])
    sharding = SHARDINGS[g["sh"]]
    group = (spec.hsdp_group or cluster.gpus_per_node) if sharding is Sharding.fsdp_hybrid else None
    plan = _scalar_plan(
        spec, tp=g["tp"], pp=g["pp"], vpp=g["vpp"], dp=dp, cp=g["cp"], ep=g["ep"], sharding=sharding,
        offload=OFFLOADS[g["off"]], micro_batch=g["mb"], batch=s.batch, recompute=RECOMPUTES[g["rc"]],
        shard_group_size=min(group, dp) if group else None,
    )  # fmt: skip
    tps = s.batch * spec.seq_len / float(s.step_s[i])
    usd_h = spec.usd_per_gpu_hour * s.gpus if spec.usd_per_gpu_hour else None
    days = spec.tokens_to_train / tps / 86_400 if spec.tokens_to_train else None
    return Candidate(
        plan=plan, gpus=s.gpus, tokens_per_s=tps, step_time_s=float(s.step_s[i]), peak_memory_bytes=float(math.ceil(s.peak[i])),
        margin_bytes=s.usable - float(s.peak[i]), mfu=flops_per_token * tps / (s.gpus * cluster.peak_flops),
        usd_per_hour=usd_h, usd_per_million_tokens=usd_h / (tps * 3600) * 1e6 if usd_h else None,
        time_to_train_days=days, cost_to_train_usd=usd_h * days * 24 if usd_h and days else None,
    )  # fmt: skip


def _rank(score: np.ndarray, margin: np.ndarray, g: dict, idx: np.ndarray) -> np.ndarray:
    """Order by score (desc), then headroom (desc), then the simpler plan (fewer pipeline chunks, smaller cp,
    tp, no offload) — ties are common, e.g. dp and cp splits of equal speed."""
    simplicity = g["pp"][idx] * g["vpp"][idx] + g["cp"][idx] + g["tp"][idx] + 4 * g["off"][idx]
    simplicity = simplicity + layout_folded(g["ep"][idx])  # the experts at tp before folded ones
    return np.lexsort((simplicity, -np.round(margin / GIB, 3), -np.round(score, 9)))


def _score(spec: SearchSpec, tps: np.ndarray, gpus: int, margin: np.ndarray) -> np.ndarray:
    """Higher is better."""
    if spec.objective is Objective.max_headroom:
        return margin
    if spec.objective is Objective.min_cost:
        return tps / gpus  # cost per token ∝ gpus · price / tokens/s
    return tps  # max tokens/s and min time to train rank the same way


def check_space(arch: Architecture, clusters: dict[int, Cluster], spec: SearchSpec) -> None:
    """Raise :class:`SearchTooLarge` (saying how to narrow it) when the space exceeds ``spec.max_plans``."""
    size = space_size(arch, clusters, spec)
    if size > spec.max_plans:
        raise SearchTooLarge(
            f"the space has {size:,} grid points (limit {spec.max_plans:,}, about 10 s); narrow it: fewer "
            "cluster sizes or batch sizes, fewer micro-batch, vpp or cp values, a lower max pp, a fixed "
            "sharding or recompute"
        )


def search(
    arch: Architecture,
    clusters: dict[int, Cluster],
    spec: SearchSpec,
    flops_per_token: float,
    should_stop: Callable[[], bool] | None = None,
    pricing: RunPricing | None = None,
) -> SearchResult:
    """Every plan of ``spec`` for each cluster size in ``clusters`` (GPUs → Cluster); best first.
    ``should_stop`` (e.g. a deadline check) is asked before and after each grid's evaluation; when it answers
    true the search raises :class:`SearchCancelled`. ``pricing`` turns tokens/s into days (after failures) and
    dollars, for the deadline, the budget and every row (default: ``spec.usd_per_gpu_hour``, no failures)."""
    pricing = pricing or FlatRate(spec.tokens_to_train, spec.usd_per_gpu_hour)

    def priced(c: Candidate) -> Candidate:
        f = pricing.figures(c.gpus, c.tokens_per_s)
        return replace(
            c, time_to_train_days=f.days, time_to_train_days_before_failures=f.days_before_failures,
            goodput=f.goodput, cost_to_train_usd=f.usd, usd_per_million_tokens=f.usd_per_million_tokens,
        )  # fmt: skip

    def checkpoint() -> None:
        if should_stop is not None and should_stop():
            raise SearchCancelled("the search was stopped before it finished")

    start = time.perf_counter()
    check_space(arch, clusters, spec)
    rejected: Counter[str] = Counter()
    evaluated = considered = 0
    closest: float | None = None
    pool: list[tuple[float, Candidate]] = []
    feasible_total = 0
    by_gpus_best: dict[int, Candidate] = {}
    pareto_pool: list[Candidate] = []
    for gpus in spec.gpus:
        cluster = clusters[gpus]
        for batch in spec.global_batches:
            checkpoint()
            grid = _grid(arch, cluster, spec, gpus, batch)
            considered += grid.size
            alive = _alive(arch, cluster, spec, gpus, batch, grid, rejected)
            evaluated += int(alive.sum())
            if not alive.any():
                continue
            checkpoint()
            scored = _evaluate(
                arch, cluster, spec, gpus, batch, _subset(grid.cols, alive), time_only_fitting=True
            )
            checkpoint()
            limit = scored.usable - max(spec.headroom_bytes, spec.headroom_fraction * scored.usable)
            host_short = ~scored.host_ok
            if host_short.any():
                rejected["offloaded state exceeds host RAM or NVMe"] += int(host_short.sum())
            gpu_fits = scored.peak <= scored.usable
            over = ~gpu_fits & scored.host_ok
            short = (scored.peak - scored.usable) / GIB
            if over.any():
                closest = (
                    float(short[over].min()) if closest is None else min(closest, float(short[over].min()))
                )
            for low, high in ((0, 10), (10, 40), (40, np.inf)):
                n = int(np.sum(over & (short >= low) & (short < high)))
                if n:
                    rejected[_bucket(low)] += n
            within = scored.peak <= limit
            below = gpu_fits & scored.host_ok & ~within
            if below.any():
                rejected["fits but below the requested headroom"] += int(below.sum())
            ok = within & scored.host_ok
            tps = batch * spec.seq_len / scored.step_s
            if spec.tokens_to_train and spec.deadline_days:
                late = ok & (tps < pricing.min_tokens_per_s(gpus, days=spec.deadline_days))
                rejected["misses the deadline"] += int(late.sum())
                ok &= ~late
            if spec.tokens_to_train and spec.budget_usd:
                over = ok & (tps < pricing.min_tokens_per_s(gpus, usd=spec.budget_usd))
                rejected["over budget"] += int(over.sum())
                ok &= ~over
            idx = np.flatnonzero(ok)
            feasible_total += idx.size
            if not idx.size:
                continue
            margin = scored.usable - scored.peak
            score = _score(spec, tps, gpus, margin)
            order = idx[_rank(score[idx], margin[idx], scored.g, idx)][: spec.top_k]
            for i in order:
                cand = _candidate(arch, cluster, spec, scored, int(i), flops_per_token)
                pool.append((float(score[i]), cand))
            best_here = _candidate(arch, cluster, spec, scored, int(order[0]), flops_per_token)
            prev = by_gpus_best.get(gpus)
            if prev is None or best_here.tokens_per_s > prev.tokens_per_s:
                by_gpus_best[gpus] = best_here
            pareto_pool.extend(
                _pareto_candidates(arch, cluster, spec, scored, idx, tps, margin, flops_per_token)
            )
    elapsed = time.perf_counter() - start
    pool.sort(key=lambda x: -x[0])
    # days and dollars of what is shown (and what min-cost ranks on), from the one pricing
    by_gpus_best = {g: priced(c) for g, c in by_gpus_best.items()}
    if spec.objective is Objective.min_cost:
        pool = [(score, priced(c)) for score, c in pool]
        if all(c.cost_to_train_usd is not None for _, c in pool):
            pool.sort(key=lambda x: x[1].cost_to_train_usd or 0.0)  # stable: ties keep the score order
    plans = [priced(c) for c in _pick_cluster(spec, pool, by_gpus_best)[: spec.top_k]]
    best_estimate = None
    if plans:
        best = plans[0]
        best_estimate = estimate(arch, clusters[best.gpus], best.plan, tokens_to_train=spec.tokens_to_train,
                                 allow_tp_across_nodes=spec.allow_tp_across_nodes)  # fmt: skip
    return SearchResult(
        considered_plans=considered, evaluated_plans=evaluated, feasible_plans=feasible_total, elapsed_s=elapsed,
        plans_per_s=evaluated / elapsed if elapsed > 0 else float("inf"), plans=tuple(plans), best=best_estimate,
        pareto=tuple(map(priced, _pareto(pareto_pool))), rejected=dict(rejected.most_common()),
        best_by_gpus=tuple(by_gpus_best[g] for g in sorted(by_gpus_best)),
        explanation=explain(plans), message=None if plans else _nothing_message(rejected, spec, closest),
    )  # fmt: skip


def _pick_cluster(spec: SearchSpec, pool: list, by_gpus_best: dict[int, Candidate]) -> list[Candidate]:
    """With a deadline or budget over several cluster sizes, the smallest (or cheapest) size that meets it
    comes first; otherwise the ranking by objective."""
    ranked = [c for _, c in pool]
    if len(spec.gpus) > 1 and (spec.deadline_days or spec.budget_usd) and by_gpus_best:
        smallest = min(by_gpus_best)
        if spec.objective is Objective.min_cost and all(
            c.usd_per_million_tokens is not None for c in by_gpus_best.values()
        ):
            smallest = min(by_gpus_best, key=lambda g: by_gpus_best[g].usd_per_million_tokens or 0)
        head = [c for c in ranked if c.gpus == smallest]
        return head + [c for c in ranked if c.gpus != smallest]
    return ranked


def _pareto_candidates(
    arch, cluster, spec, scored: _Scored, idx: np.ndarray, tps, margin, fpt
) -> list[Candidate]:
    """Non-dominated plans of one (cluster size, batch) in (tokens/s ↑, cost/token ↓, headroom ↑); for a fixed
    cluster size cost per token follows tokens/s, so the front is the 2-D tokens/s–headroom front here."""
    order = idx[np.lexsort((-margin[idx], -tps[idx]))]
    front, best_margin = [], -np.inf
    for i in order:
        if margin[i] > best_margin:
            front.append(int(i))
            best_margin = margin[i]
        if len(front) >= 50:
            break
    return [_candidate(arch, cluster, spec, scored, i, fpt) for i in front]


def _pareto(cands: list[Candidate]) -> list[Candidate]:
    """Plans no other plan beats on all of time, cost (per token) and headroom."""
    out = []
    for a in cands:
        a_cost = a.gpus / a.tokens_per_s
        dominated = any(
            b.tokens_per_s >= a.tokens_per_s and b.gpus / b.tokens_per_s <= a_cost and b.margin_bytes >= a.margin_bytes
            and (b.tokens_per_s > a.tokens_per_s or b.gpus / b.tokens_per_s < a_cost or b.margin_bytes > a.margin_bytes)
            for b in cands
        )  # fmt: skip
        if not dominated:
            out.append(a)
    return sorted(out, key=lambda c: -c.tokens_per_s)


def _describe(plan: Plan) -> dict[str, Any]:
    return {
        "tp": plan.tp, "pp": plan.pp, "vpp": plan.vpp, "dp": plan.dp, "cp": plan.cp, "ep": plan.ep,
        "expert tp": "= tp" if plan.expert_tp is None else plan.expert_tp,
        "sharding": plan.sharding.value, "offload": plan.offload.value, "micro-batch": plan.micro_batch,
        "recompute": plan.recompute.value, "global batch": plan.global_batch,
    }  # fmt: skip


def explain(plans: list[Candidate]) -> str:
    """What the winner trades against the runner-up, e.g. "+18 % tokens/s, −8.5 GiB headroom"."""
    if not plans:
        return ""
    best = plans[0]
    if len(plans) == 1:
        return "the only plan that fits"
    second = plans[1]
    a, b = _describe(best.plan), _describe(second.plan)
    changes = [f"{k} {b[k]} → {a[k]}" for k in a if a[k] != b[k]]
    if best.gpus != second.gpus:
        changes.insert(0, f"GPUs {second.gpus} → {best.gpus}")
    speed = best.tokens_per_s / second.tokens_per_s - 1
    room = (best.margin_bytes - second.margin_bytes) / GIB
    text = f"vs the runner-up ({', '.join(changes) or 'same settings'}): {speed:+.1%} tokens/s, {room:+.1f} GiB headroom"
    if best.usd_per_million_tokens and second.usd_per_million_tokens:
        text += f", {best.usd_per_million_tokens / second.usd_per_million_tokens - 1:+.1%} cost per token"
    return text


MODEL_REASONS = ("does not fit", "headroom", "host RAM", "deadline", "budget")


def _nothing_message(rejected: Counter, spec: SearchSpec, closest_short_gib: float | None) -> str:
    if not rejected:
        return "the space is empty: check the GPU counts and batch sizes"
    modelled = [(r, n) for r, n in rejected.most_common() if any(k in r for k in MODEL_REASONS)]
    reason, n = (modelled or rejected.most_common())[0]
    hints = {
        "does not fit": "more GPUs, a smaller micro-batch, full recompute, more sharding (fsdp-full / zero3 / "
        "distributed optimizer), tensor or pipeline parallelism, or offload",
        "misses the deadline": "more GPUs or a later deadline",
        "over budget": "a larger budget, fewer tokens, or a cheaper pricing option",
        "headroom": "a smaller headroom",
        "global batch": "a global batch that is a multiple of micro-batch × dp",
    }
    hint = next((v for k, v in hints.items() if k in reason), "relax the constraints")
    closest = (
        f" The closest plan is {closest_short_gib:,.1f} GiB short per GPU."
        if closest_short_gib is not None and "does not fit" in reason
        else ""
    )
    return f"no plan meets the constraints; most were rejected because: {reason} ({n:,} plans).{closest} Try {hint}."


def evaluate_all(
    arch: Architecture, cluster: Cluster, spec: SearchSpec, gpus: int, batch: int
) -> list[Candidate]:
    """Every valid plan of one cluster size and batch with its vectorised figures (for checks and exports)."""
    grid = _grid(arch, cluster, spec, gpus, batch)
    alive = _alive(arch, cluster, spec, gpus, batch, grid)
    if not alive.any():
        return []
    scored = _evaluate(arch, cluster, spec, gpus, batch, _subset(grid.cols, alive))
    return [_candidate(arch, cluster, spec, scored, i, 0.0) for i in range(len(scored.step_s))]
