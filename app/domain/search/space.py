"""The search space laid out as numpy columns (tp × cp × pp × vpp × ep × sharding × offload × micro-batch ×
recompute) and the masks that reject plans, each charged to its first failing reason (plan rules and the
framework capability table, on arrays)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from app.domain.estimator.capabilities import Facts, capability_masks
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.plan import (
    Offload,
    Optimizer,
    Precision,
    Recompute,
    Sharding,
    moe_a2a_overlap_runs,
)
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
    cols: dict[str, np.ndarray]
    size: int


def _axes(arch: Architecture, cluster: Cluster, spec: SearchSpec, gpus: int) -> dict[str, list[int]]:
    domain = cluster.nvlink_domain
    max_tp = spec.max_tp or (gpus if spec.allow_tp_across_nodes else min(domain, gpus))
    tps = [t for t in _divisors(gpus) if t <= max_tp]
    pps = [p for p in _divisors(gpus) if p <= min(spec.max_pp, arch.n_layers)]
    cps = [c for c in spec.cps if gpus % c == 0]
    eps = [e for e in _divisors(arch.n_experts) if e <= 64] if arch.is_moe else [1]
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
    return _Grid(cols={k: cols[k] for k in axes}, size=size)


def _reject_masks(
    arch: Architecture, cluster: Cluster, spec: SearchSpec, gpus: int, batch: int, g: dict
) -> list:
    """(reason, mask-of-failing) in priority order; every plan is charged to its first failing reason."""
    tp, cp, pp, vpp, ep, mb = g["tp"], g["cp"], g["pp"], g["vpp"], g["ep"], g["mb"]
    model_parallel = tp * cp * pp
    dp = np.where(gpus % model_parallel == 0, gpus // np.maximum(model_parallel, 1), 0)
    off = g["off"]  # offload codes (indices into OFFLOADS)
    per_step = mb * np.maximum(dp, 1)
    micro = batch // per_step
    shards_params = np.array([s.shards_params for s in SHARDINGS])[g["sh"]]
    hybrid = g["sh"] == SHARDINGS.index(Sharding.fsdp_hybrid)
    group = spec.hsdp_group or cluster.gpus_per_node
    return [
        ("tp·cp·pp does not divide the GPU count", gpus % model_parallel != 0),
        ("attention heads not divisible by tp", arch.n_heads % tp != 0),
        ("KV heads neither divide nor are divisible by tp", (arch.n_kv_heads % tp != 0) & (tp % arch.n_kv_heads != 0)),
        ("pp·vpp exceeds the layers", pp * vpp > arch.n_layers),
        ("interleaving (vpp > 1) without pipeline parallelism", (vpp > 1) & (pp == 1)),
        ("global batch not divisible by micro-batch·dp", batch % per_step != 0),
        ("interleaving needs micro-batches to be a multiple of pp", (vpp > 1) & (micro % pp != 0)),
        ("sequence not divisible by 2·cp", (cp > 1) & (spec.seq_len % (2 * cp) != 0)),
        ("experts not divisible by ep, or ep not dividing dp·cp",
         (ep > 1) & (((dp * cp) % ep != 0) | (arch.n_experts % np.maximum(ep, 1) != 0))),
        ("HSDP shard group does not divide dp", hybrid & ((dp % group != 0) | (dp <= group))),
        ("offload needs fully sharded parameters",
         np.isin(off, [OFFLOADS.index(Offload.params_cpu), OFFLOADS.index(Offload.nvme)]) & ~shards_params),
        *capability_masks(spec.framework, Facts(
            tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, micro_batches=np.maximum(micro, 1), seq_len=spec.seq_len,
            replicated=~np.array([s.shards_optimizer for s in SHARDINGS])[g["sh"]],
            shards_grads=np.array([s.shards_grads for s in SHARDINGS])[g["sh"]], shards_params=shards_params,
            offload_optimizer=off == OFFLOADS.index(Offload.optimizer_cpu), fp16=spec.precision is Precision.fp16,
            sgd=spec.optimizer is Optimizer.sgd, tied_embeddings=arch.tied_embeddings,
            selective_op=g["rc"] == RECOMPUTES.index(Recompute.selective_op),
            dedup_dispatcher=spec.moe_dispatcher.dedups_per_node,
            a2a_overlap=spec.moe_a2a_overlap & moe_a2a_overlap_runs(
                ep, pp, vpp, g["rc"] == RECOMPUTES.index(Recompute.full), spec.precision is Precision.fp32),
        )),
    ]  # fmt: skip
