"""The search space laid out as numpy columns (tp × cp × pp × vpp × expert layout × sharding × offload ×
micro-batch × recompute) and the masks that reject plans, each charged to its first failing reason: the plan rules' one table
(``app.domain.estimator.rules``, framework capabilities included) evaluated on arrays."""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.domain.estimator.cluster import Cluster
from app.domain.estimator.plan import (
    CPCommType,
    Framework,
    MoeDispatcher,
    Optimizer,
    Precision,
    Recompute,
    Sharding,
    folds_experts,
    fused_kernels_on,
)
from app.domain.estimator.rules import Context, facts, rule_masks, structural_reasons
from app.domain.model.architecture import Architecture
from app.domain.search.spec import (
    OFFLOADS,
    OFFLOADS_BY_FRAMEWORK,
    RECOMPUTES,
    RECOMPUTES_BY_FRAMEWORK,
    SHARDINGS,
    SHARDINGS_BY_FRAMEWORK,
    SearchSpec,
)

# The grid's expert axis holds expert *layouts*, each one integer: ep alone (the routed experts' TP is the spec's
# expert_tp, else the framework's default), or ep + FOLDED — MoE parallel folding with the experts' TP 1 under a
# larger attention TP, tried as well where the framework folds and no expert_tp is given (:func:`expert_layouts`).
FOLDED = 1 << 16
SAME_LAYOUT = "the experts' TP 1 under tp = 1 is the unfolded plan"

# Grid points that are not plans at all (degrees that do not multiply to the GPU count, interleaving without
# a pipeline, more chunks than layers — the table's structural rules — and a folded layout that is the unfolded
# plan again): skipped without being counted as rejected.
STRUCTURAL = structural_reasons() | {SAME_LAYOUT}

# -- the space ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _divisor_tuple(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted({*small, *(n // d for d in small)}))


def _divisors(n: int) -> list[int]:
    """Divisors of ``n`` in increasing order (pairs d, n/d up to √n)."""
    return list(_divisor_tuple(n))


@dataclass
class _Grid:
    """The laid-out points as flat columns (``cols``), and the same points as axes that broadcast against each
    other over ``shape`` = (tp·cp·pp triple, vpp, ep, sharding, offload, micro-batch, recompute) (``axes``;
    the columns are that shape raveled), and ``size``, the points counted as considered."""

    cols: dict[str, np.ndarray]
    size: int
    axes: dict[str, np.ndarray]
    shape: tuple[int, ...]


def expert_degrees(arch: Architecture) -> list[int]:
    """The expert-parallel degrees the search lays out: the divisors of the experts up to 64 (1 when dense)."""
    return [e for e in _divisors(arch.n_experts) if e <= 64] if arch.is_moe else [1]


def tries_folding(arch: Architecture, framework: Framework, expert_tp: int | None) -> bool:
    """Whether the search lays every expert degree out a second time with the experts' TP 1: an MoE model, a
    framework that folds experts (Megatron) and no ``expert_tp`` given."""
    return arch.is_moe and expert_tp is None and folds_experts(framework)


def expert_layouts(arch: Architecture, framework: Framework, expert_tp: int | None) -> list[int]:
    """The expert layouts the search lays out (see :data:`FOLDED`): every expert degree, and where
    :func:`tries_folding`, each again with the experts' TP 1."""
    eps = expert_degrees(arch)
    return eps + [e + FOLDED for e in eps] if tries_folding(arch, framework, expert_tp) else eps


def layout_ep(layout: Any) -> Any:
    """The expert-parallel degree of expert layouts (numbers or arrays)."""
    return layout % FOLDED


def layout_folded(layout: Any) -> Any:
    """Whether expert layouts fold the experts to TP 1 (numbers or arrays)."""
    return layout >= FOLDED


def layout_etp(spec: SearchSpec, tp: Any, layout: Any) -> Any:
    """The routed experts' TP of plans of the space with ``tp`` and expert ``layout`` (numbers or arrays)."""
    folded = layout_folded(layout)
    return spec.etp(tp) * (1 - folded) + folded


def _axes(arch: Architecture, cluster: Cluster, spec: SearchSpec, gpus: int) -> dict[str, list[int]]:
    domain = cluster.nvlink_domain
    max_tp = spec.max_tp or (gpus if spec.allow_tp_across_nodes else min(domain, gpus))
    tps = [t for t in _divisors(gpus) if t <= max_tp]
    pps = [p for p in _divisors(gpus) if p <= min(spec.max_pp, arch.n_layers)]
    cps = [c for c in spec.cps if gpus % c == 0]
    eps = expert_layouts(arch, spec.framework, spec.expert_tp)
    shardings = spec.shardings or SHARDINGS_BY_FRAMEWORK[spec.framework]
    offloads = spec.offloads or OFFLOADS_BY_FRAMEWORK[spec.framework]
    axes = {
        "tp": tps, "cp": cps, "pp": pps, "vpp": list(spec.vpps), "ep": eps,
        "sh": [SHARDINGS.index(s) for s in shardings], "off": [OFFLOADS.index(o) for o in offloads],
        "mb": list(spec.micro_batches),
        "rc": [RECOMPUTES.index(r) for r in spec.recomputes if r in RECOMPUTES_BY_FRAMEWORK[spec.framework]],
    }  # fmt: skip
    return axes


def space_size(arch: Architecture, clusters: dict[int, Cluster], spec: SearchSpec) -> int:
    """Grid points the search would visit over every cluster size and batch."""
    per_batch = sum(math.prod(len(v) for v in _axes(arch, clusters[g], spec, g).values()) for g in spec.gpus)
    return per_batch * len(spec.global_batches)


def _grid(arch: Architecture, cluster: Cluster, spec: SearchSpec, gpus: int, batch: int) -> _Grid:
    axes = _axes(arch, cluster, spec, gpus)
    size = math.prod(len(v) for v in axes.values())
    # Only (tp, cp, pp) whose product divides the GPU count are laid out (the others are not plans and were
    # never counted as rejected); the surviving points keep the full mesh's order, so ties rank the same.
    triples = np.array(
        [(t, c, p) for t in axes["tp"] for c in axes["cp"] for p in axes["pp"] if gpus % (t * c * p) == 0],
        dtype=np.int64,
    ).reshape(-1, 3)
    rest = [k for k in axes if k not in ("tp", "cp", "pp")]
    mesh = np.meshgrid(
        np.arange(len(triples)), *[np.asarray(axes[k], dtype=np.int64) for k in rest], indexing="ij"
    )
    which = mesh[0].ravel()
    cols = {"tp": triples[which, 0], "cp": triples[which, 1], "pp": triples[which, 2]}
    cols.update({k: m.ravel() for k, m in zip(rest, mesh[1:], strict=True)})
    shape = mesh[0].shape

    def along(axis: int, values) -> np.ndarray:  # the values on one axis, broadcasting against the others
        return np.asarray(values, dtype=np.int64).reshape([-1 if j == axis else 1 for j in range(len(shape))])

    compact = {k: along(0, triples[:, i]) for i, k in enumerate(("tp", "cp", "pp"))}
    compact.update({k: along(i + 1, axes[k]) for i, k in enumerate(rest)})
    return _Grid(cols={k: cols[k] for k in axes}, size=size, axes=compact, shape=shape)


def _alive(
    arch: Architecture, cluster: Cluster, spec: SearchSpec, gpus: int, batch: int, grid: _Grid,
    rejected: Counter[str] | None = None,
) -> np.ndarray:  # fmt: skip
    """Which points of ``grid.cols`` break no rule; with ``rejected``, each other point is counted under its first
    failing rule's reason (structural ones, not plans at all, uncounted). The rules run on the grid's axes, so a
    predicate costs the size of the axes it reads, not of the grid."""
    alive = np.ones(grid.shape, dtype=bool)
    for reason, failing in _reject_masks(arch, cluster, spec, gpus, batch, grid.axes):
        if not np.any(failing):
            continue
        hit = alive & failing
        if rejected is not None and reason not in STRUCTURAL:
            n = int(np.count_nonzero(hit))
            if n:
                rejected[reason] += n
        alive &= ~hit
    return alive.ravel()


def _reject_masks(
    arch: Architecture, cluster: Cluster, spec: SearchSpec, gpus: int, batch: int, g: dict
) -> list:
    """(reason, mask-of-failing) in priority order; every plan is charged to its first failing reason. The masks
    are the plan rules' table (``app.domain.estimator.rules``) on the grid's columns: the plan each point stands
    for is the one the search would propose (sequence parallelism with tp > 1, the HSDP group of the spec or one
    node, capped at dp, every layer recomputed under full recompute)."""
    tp, cp, pp, layout = g["tp"], g["cp"], g["pp"], g["ep"]
    ep, folded = layout_ep(layout), layout_folded(layout)
    model_parallel = tp * cp * pp
    dp = np.where(gpus % model_parallel == 0, gpus // np.maximum(model_parallel, 1), 0)
    group = spec.hsdp_group or cluster.gpus_per_node
    hybrid = g["sh"] == SHARDINGS.index(Sharding.fsdp_hybrid)
    context = Context(
        gpus=gpus, n_layers=arch.n_layers, n_heads=arch.n_heads, n_kv_heads=arch.n_kv_heads, n_experts=arch.n_experts,
        gpus_per_node=cluster.gpus_per_node, nvlink_domain=cluster.nvlink_domain,
        allow_tp_across_nodes=spec.allow_tp_across_nodes, tied_embeddings=arch.tied_embeddings,
        mla=arch.attention == "mla",
    )  # fmt: skip
    masks = rule_masks(facts(
        tp=tp, pp=pp, vpp=g["vpp"], dp=dp, cp=cp, ep=ep, micro_batch=g["mb"], global_batch=batch,
        seq_len=spec.seq_len, sharding=g["sh"], offload=g["off"], recompute=g["rc"], recompute_layers=-1,
        shard_group=np.where(hybrid, np.minimum(group, dp), 0), sequence_parallel=tp > 1, framework=spec.framework,
        fp16=spec.precision is Precision.fp16, sgd=spec.optimizer is Optimizer.sgd, context=context,
        fp32=spec.precision is Precision.fp32, dedup_dispatcher=spec.moe_dispatcher.dedups_per_node,
        cp_gather=spec.cp_comm_type is CPCommType.all_gather,
        nvfp4=spec.precision is Precision.nvfp4, fp8_attention=spec.fp8_attention, fp8_recipe=spec.fp8_recipe.code,
        quantized=spec.precision.quantized_gemms,
        a2a_overlap=spec.a2a_overlap(ep, pp, g["vpp"], g["rc"] == RECOMPUTES.index(Recompute.full)),
        capacity=spec.moe_capacity_factor or 0.0, pad_capacity=spec.moe_pad_to_capacity,
        deepep=spec.moe_dispatcher is MoeDispatcher.deepep, etp=layout_etp(spec, tp, layout),
        etp_given=(spec.expert_tp is not None) | folded, mtp=spec.mtp_layers,
        tp_overlap_asked=spec.tp_comm_overlap is True,
        compiled=fused_kernels_on(spec.framework, spec.fused_kernels),
    ))  # fmt: skip
    return [(SAME_LAYOUT, folded & (tp == 1)), *masks]
