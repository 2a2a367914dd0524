"""The estimator's predictions for a benchmark configuration, the result object, its table, launch commands.

Torch-free: the CLI and the runner both use it. Every measured figure of a run is put next to what
:mod:`app.domain` predicts for the same model, plan and accelerator, so each run is also a check of the model.

Conventions of the predictions (per rank, one micro-batch per optimizer step, ``dp = world size``):

* ``param_bytes`` / ``grad_bytes`` / ``optimizer_bytes`` — FSDP2's exact per-rank shards
  (:func:`app.domain.sharding.sharded_state_bytes_counted`, the estimator's FSDP2 figures: fp32 parameter
  and gradient shards padded to ``ceil(dim0/ws)`` rows as FSDP2 allocates them, AdamW ``exp_avg`` +
  ``exp_avg_sq`` + one fp32 ``step`` per tensor); rank 0 is the estimator's stage figure.
* ``saved_activation_bytes`` — what autograd keeps for one micro-batch: the estimator's activation term
  without the backward working set (L × per-layer saved bytes + embedding + head inputs) plus the fp32
  log-probabilities of the loss (``b·s·V·4``, the fp32 part of ``logits_bytes``) and its 0-d weight total.
  ``saved_activation_bytes_layers`` is the per-layer part alone (L × saved bytes).
* ``flops_per_step`` — FLOPs of one forward + backward as ``torch.utils.flop_counter.FlopCounterMode``
  counts them: every GEMM 2·m·n·k (6·N_matmul per token over forward and backward, output head included),
  SDPA counted **non-causally** (the full s×s score matrix, as torch's formula does) with its backward
  re-computing QKᵀ (5 score-sized GEMMs, not 4): attention = (7/6) × 6·L·s·a·(d_qk+d_v) per token;
  recompute adds the re-run forward (hardware FLOPs) — for full recompute without each block's last GEMM
  (the MLP down projection), which torch's non-reentrant checkpoint does not re-run (its early stop).
* time, tokens/s, TFLOP/s and MFU — :func:`app.domain.estimate.estimate` on the catalog accelerator of the
  preset (none for CPU runs); peak allocated/reserved and memory outside tensors — its stage memory.
"""

from __future__ import annotations

import math
import shlex
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.bench.presets import TINY_ARCH, Preset
from app.bench.scaling import scaled_arch
from app.domain.catalog import Catalog
from app.domain.estimator.calibration import bus_factor
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.compute import hardware_flops_per_token, model_flops_per_token
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.memory import layer_terms
from app.domain.estimator.network import Collective, collective_time, place_group
from app.domain.estimator.plan import Framework, Plan, Recompute, Sharding
from app.domain.estimator.sharding import sharded_state_bytes_counted
from app.domain.model.architecture import Architecture
from app.domain.model.counts import parameter_counts
from app.schemas import BENCH_SCHEMA, BenchmarkMetricIn, BenchmarkResultIn, relative_error

REFERENCE_ACCELERATOR = "h100-sxm"  # byte predictions are hardware-independent; any catalog GPU will do
OPS = {"all_reduce": Collective.all_reduce, "all_gather": Collective.all_gather,
       "reduce_scatter": Collective.reduce_scatter}  # fmt: skip

UNITS = {
    "step_time_s": "s", "step_time_p90_s": "s", "tokens_per_s": "tokens/s", "achieved_tflops": "TFLOP/s",
    "mfu": "fraction", "flops_per_step": "FLOP", "param_bytes": "B", "grad_bytes": "B", "optimizer_bytes": "B",
    "saved_activation_bytes": "B", "saved_activation_bytes_layers": "B", "peak_allocated_bytes": "B",
    "peak_reserved_bytes": "B", "outside_tensors_bytes": "B", "cuda_context_bytes": "B", "alloc_retries": "count",
    "ooms": "count", "loss": "nats",
}  # fmt: skip


# -- configuration -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """The architecture the runner trains (``arch``) and the one it stands for (``full``)."""

    full: Architecture | None
    arch: Architecture | None

    @property
    def layer_scale(self) -> float:
        if self.full is None or self.arch is None:
            return 1.0
        return self.full.n_layers / self.arch.n_layers


def resolve_architecture(preset: Preset, catalog: Catalog) -> Resolved:
    if preset.model == "none":
        return Resolved(None, None)
    if preset.model == "tiny":
        full = Architecture(**{**TINY_ARCH, **preset.arch_overrides})
    else:
        full = catalog.architecture(preset.model)
        if preset.arch_overrides:
            full = full.model_copy(update=preset.arch_overrides)
    if preset.layers is None or preset.layers >= full.n_layers:
        return Resolved(full, full)
    return Resolved(full, scaled_arch(full, preset.layers))


def plan_for(preset: Preset, world_size: int) -> Plan:
    return Plan(
        dp=world_size, micro_batch=preset.micro_batch, global_batch=preset.micro_batch * world_size,
        seq_len=preset.seq_len, recompute=Recompute(preset.recompute), framework=Framework.fsdp2,
        sharding=Sharding.fsdp_full, fused_kernels=False,
    )  # fmt: skip


def cluster_for(catalog: Catalog, accelerator: str | None, world_size: int) -> Cluster:
    return build_cluster(
        catalog.hardware,
        catalog.efficiency,
        accelerator=accelerator or REFERENCE_ACCELERATOR,
        gpus=world_size,
    )


# -- predictions ---------------------------------------------------------------------------------------------


def flop_counter_flops_per_token(arch: Architecture, plan: Plan) -> float:
    """FLOPs per token of forward + backward in FlopCounterMode's convention (see the module docstring)."""
    counts = parameter_counts(arch)
    noncausal = model_flops_per_token(arch, plan.seq_len, counts.matmul_weights_active, causal=False)
    hardware = hardware_flops_per_token(noncausal, arch, plan, arch.vocab_size * arch.hidden_size)
    flops = hardware + noncausal.attention / 6  # SDPA backward recomputes QKᵀ: 14 score GEMM units, not 12
    if plan.recompute is Recompute.full:
        # torch's non-reentrant checkpoint stops recomputing once the last tensor backward needs is back: the
        # block's final GEMM (the MLP down projection, whose output nothing saves) is not re-run.
        h = arch.hidden_size
        for kind in arch.layer_kinds():
            if kind == "moe":
                down = arch.experts_top_k * (arch.expert_ffn_hidden_size or 0) * h
                down += arch.n_shared_experts * (arch.shared_expert_ffn_hidden_size or 0) * h
            else:
                down = arch.ffn_hidden_size * h
            flops -= 2 * down
    return flops


def state_predictions(arch: Architecture, world_size: int, rank: int) -> dict[str, int]:
    exact = sharded_state_bytes_counted(
        arch.shape_counts, world_size, rank, param_bytes=4, grad_bytes=4, optimizer_bytes_per_param=8,
        step_bytes_per_tensor=4,
    )  # fmt: skip
    return {
        "param_bytes": exact["param_padded_bytes"],
        "grad_bytes": exact["grad_padded_bytes"],
        "optimizer_bytes": exact["optimizer_bytes"],
    }


def activation_predictions(arch: Architecture, plan: Plan, cluster: Cluster) -> dict[str, int]:
    from app.domain.estimator.assemble import memory_by_stage

    stage = memory_by_stage(arch, cluster, plan)[0]
    terms = layer_terms(arch, plan)
    peak_extra = max(t.peak_extra_bytes for t in terms.values())
    fp32_logprobs = plan.micro_batch * plan.seq_len * arch.vocab_size * 4  # the fp32 part of logits_bytes
    layers = sum(terms[kind].saved_bytes for kind in arch.layer_kinds())
    return {
        "saved_activation_bytes": stage.activations_bytes - peak_extra + fp32_logprobs + 4,
        "saved_activation_bytes_layers": layers,
    }


def predictions(
    preset: Preset, resolved: Resolved, catalog: Catalog, world_size: int
) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """Per rank, the predicted value of each metric; plus facts for the result's config (communicators…)."""
    arch = resolved.arch
    per_rank: list[dict[str, float]] = [{} for _ in range(world_size)]
    info: dict[str, Any] = {}
    if arch is None:
        return per_rank, info
    plan = plan_for(preset, world_size)
    cluster = cluster_for(catalog, preset.accelerator, world_size)
    acts = activation_predictions(arch, plan, cluster)
    flops = flop_counter_flops_per_token(arch, plan) * plan.micro_batch * plan.seq_len
    for rank in range(world_size):
        per_rank[rank].update(state_predictions(arch, world_size, rank))
        per_rank[rank].update(acts)
        per_rank[rank]["flops_per_step"] = flops
    info["flop_convention"] = "FlopCounterMode: GEMMs 2mnk; SDPA non-causal with QKᵀ recomputed in backward"
    info["parameters"] = parameter_counts(arch).total
    if preset.accelerator is None or preset.device != "cuda":
        return per_rank, info
    est = estimate(arch, cluster, plan)
    stage = est.memory_by_stage[0]
    info["communicators"] = stage.communicators
    # the catalog efficiencies these predictions used: a step-time ratio calibrates relative to them, so a
    # later change of data/efficiency.toml does not shift an old run's calibration
    info["prediction_basis"] = {
        "gemm_efficiency": cluster.efficiency.gemm_efficiency,
        "attention_efficiency": cluster.efficiency.attention_efficiency,
    }
    info["predicted_step"] = est.step.model_dump(exclude={"ranks", "groups"})
    timing = {
        "step_time_s": est.step_time_s,
        "tokens_per_s": est.tokens_per_s_per_gpu,
        "achieved_tflops": est.achieved_tflops_per_gpu,
        "mfu": est.mfu,
        "peak_allocated_bytes": stage.allocated_peak_bytes,
        "peak_reserved_bytes": stage.allocated_peak_bytes + stage.fragmentation_bytes,
        "outside_tensors_bytes": stage.runtime_bytes,
        "cuda_context_bytes": cluster.runtime.cuda_context_bytes,
    }
    for rank in range(world_size):
        per_rank[rank].update(timing)
    return per_rank, info


def gemm_prediction_tflops(cluster: Cluster, m: int, n: int, k: int, dtype: str = "bf16") -> float:
    """The estimator's GEMM rate: F / (F/(peak·gemm_efficiency) + overhead)."""
    flops = 2.0 * m * n * k
    precision = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "tf32": "fp32", "fp8": "fp8"}[dtype]
    peak = cluster.peak_flops_for(precision)
    eff = cluster.efficiency
    t = flops / (peak * eff.gemm_efficiency) + eff.gemm_overhead_us * 1e-6
    return flops / t / 1e12


def busbw_prediction_gb_per_s(cluster: Cluster, op: str, ranks: int, size_bytes: int) -> float:
    """The estimator's bus bandwidth for one collective on ``ranks`` consecutive GPUs (nccl-tests busbw)."""
    group = place_group(op, ranks, 1, cluster)
    t = collective_time(OPS[op], size_bytes, group)
    return bus_factor(op, ranks) * size_bytes / t / 1e9 if t > 0 else 0.0


# -- the result ----------------------------------------------------------------------------------------------


def build_result(
    preset: Preset,
    catalog: Catalog,
    *,
    world_size: int,
    nodes: int,
    measured: list[dict[str, float]],
    gemm: Iterable[tuple[str, int, int, int, float]] = (),
    collectives: Iterable[tuple[str, int, int, int, float]] = (),
    device_name: str,
    hardware: dict[str, Any],
    software: dict[str, Any],
    measured_at: datetime | None = None,
    notes: str = "",
) -> BenchmarkResultIn:
    """Assemble the result: each rank's measured figures next to the estimator's predictions.

    ``measured[rank]`` maps metric → value; ``gemm`` holds (dtype, m, n, k, TFLOP/s) and ``collectives``
    (op, ranks, nodes, bytes, busbw GB/s), both measured on rank 0.
    """
    from app.domain.estimator.calibration import busbw_metric, gemm_metric

    resolved = resolve_architecture(preset, catalog)
    predicted, info = predictions(preset, resolved, catalog, world_size)
    metrics: list[BenchmarkMetricIn] = []
    for rank, values in enumerate(measured):
        for name, value in values.items():
            if value is None or not math.isfinite(value):
                continue
            metrics.append(
                BenchmarkMetricIn(
                    metric=name,
                    unit=UNITS.get(name, ""),
                    rank=rank,
                    measured=value,
                    predicted=predicted[rank].get(name) if rank < len(predicted) else None,
                )  # fmt: skip
            )
    cluster = cluster_for(catalog, preset.accelerator, world_size) if preset.accelerator else None
    for dtype, m, n, k, tflops in gemm:
        pred = gemm_prediction_tflops(cluster, m, n, k, dtype) if cluster else None
        metrics.append(BenchmarkMetricIn(metric=gemm_metric(dtype, m, n, k), unit="TFLOP/s", measured=tflops,
                                         predicted=pred))  # fmt: skip
    for op, ranks, n_nodes, size, busbw in collectives:
        pred = None
        if preset.accelerator:
            pred = busbw_prediction_gb_per_s(cluster_for(catalog, preset.accelerator, ranks), op, ranks, size)
        metrics.append(BenchmarkMetricIn(metric=busbw_metric(op, ranks, n_nodes, size), unit="GB/s",
                                         measured=busbw, predicted=pred))  # fmt: skip
    config: dict[str, Any] = {"preset": preset.as_config(), **info}
    if resolved.arch is not None:
        config["architecture"] = resolved.arch.slug
        config["full_architecture"] = resolved.full.slug if resolved.full else None
        config["layers"] = resolved.arch.n_layers
        config["layer_scale"] = resolved.layer_scale
        config["plan"] = plan_for(preset, world_size).model_dump(mode="json")
        if resolved.layer_scale != 1:
            config["scaling"] = resolved.arch.notes
    if preset.accelerator:
        cl = cluster_for(catalog, preset.accelerator, world_size)
        config["scale_out_kind"] = cl.scale_out_fabric.kind
        node = cl.node.slug
    else:
        node = None
    return BenchmarkResultIn(
        schema=BENCH_SCHEMA, preset=preset.name, accelerator=preset.accelerator if preset.device == "cuda" else None,
        node=node if preset.device == "cuda" else None, device_name=device_name, world_size=world_size,
        nodes=nodes, measured_at=measured_at or datetime.now(UTC), config=config, hardware=hardware,
        software=software, metrics=metrics, notes=notes,
    )  # fmt: skip


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "B":
        return f"{value:,.0f}"
    if unit == "FLOP":
        return f"{value:.4g}"
    if unit == "fraction":
        return f"{value:.3f}"
    return f"{value:.4g}"


def result_table(result: BenchmarkResultIn, *, all_ranks: bool = False) -> str:
    """Predicted vs measured, one line per metric (rank 0, or every rank), with the relative error."""
    rows = [m for m in result.metrics if all_ranks or m.rank == 0]
    head = f"{'metric':44s} {'rank':>4s} {'measured':>16s} {'predicted':>16s} {'error':>8s}  unit"
    lines = [head, "-" * len(head)]
    for m in rows:
        err = relative_error(m.measured, m.predicted)
        lines.append(
            f"{m.metric:44s} {m.rank:>4d} {_fmt(m.measured, m.unit):>16s} {_fmt(m.predicted, m.unit):>16s} "
            f"{(f'{err:+.2%}' if err is not None else '—'):>8s}  {m.unit}"
        )
    errs = [abs(e) for m in rows if (e := relative_error(m.measured, m.predicted)) is not None]
    if errs:
        lines.append(f"median |error| {statistics.median(errs):.2%} over {len(errs)} predicted figures")
    return "\n".join(lines)


HEADLINE = (
    ("step_time_s", "step time"), ("tokens_per_s", "tokens/s"), ("achieved_tflops", "TFLOP/s (FlopCounter)"),
    ("mfu", "MFU"), ("flops_per_step", "FLOPs per step"), ("param_bytes", "parameter bytes"),
    ("grad_bytes", "gradient bytes"), ("optimizer_bytes", "optimizer bytes"),
    ("saved_activation_bytes", "saved activations"), ("peak_allocated_bytes", "peak allocated"),
    ("peak_reserved_bytes", "peak reserved"), ("outside_tensors_bytes", "outside tensors"),
)  # fmt: skip


def _md(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "B":
        return f"{value / 2**30:,.2f} GiB"
    if unit == "fraction":
        return f"{value:.1%}"
    if unit == "s":
        return f"{value * 1e3:,.1f} ms"
    return f"{value:,.4g}"


def markdown_table(results: Iterable[BenchmarkResultIn]) -> str:
    """The README's predicted-vs-measured table: rank 0's headline figures of each run, and the GEMM sweep's
    largest square GEMM per dtype."""
    lines = ["| run | figure | measured | predicted | error |", "| --- | --- | ---: | ---: | ---: |"]
    for r in results:
        by = {m.metric: m for m in r.metrics if m.rank == 0}
        label = f"`{r.preset}` ({r.world_size} × {r.device_name}, {r.measured_at:%Y-%m-%d})"
        for metric, name in HEADLINE:
            m = by.get(metric)
            if m is None:
                continue
            err = relative_error(m.measured, m.predicted)
            lines.append(
                f"| {label} | {name} | {_md(m.measured, m.unit)} | {_md(m.predicted, m.unit)} | "
                f"{f'{err:+.1%}' if err is not None else '—'} |"
            )
            label = ""
        gemms: dict[str, tuple[int, float]] = {}
        for m in by.values():
            parts = m.metric.split(":")
            if parts[0] == "gemm" and len(parts) == 3:
                dims = [int(x) for x in parts[2].split("x")]
                if len(set(dims)) == 1 and dims[0] > gemms.get(parts[1], (0, 0.0))[0]:
                    gemms[parts[1]] = (dims[0], m.measured)
        for dtype, (size, tflops) in sorted(gemms.items()):
            lines.append(f"| {label} | GEMM {dtype} {size}³ | {tflops:,.0f} TFLOP/s | — | — |")
            label = ""
    return "\n".join(lines)


# -- launch --------------------------------------------------------------------------------------------------


def runner_args(preset: str, output: str, overrides: dict[str, Any] | None = None) -> list[str]:
    args = ["-m", "app.bench", "--preset", preset, "--output", output]
    for key, value in (overrides or {}).items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def local_command(preset: str, nproc: int, output: str, overrides: dict[str, Any] | None = None) -> list[str]:
    """torchrun on this node (``python -m torch.distributed.run`` is torchrun, without relying on PATH)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            *runner_args(preset, output, overrides)]  # fmt: skip


def multinode_command(
    preset: str, *, nodes: int, nproc: int, rdzv_host: str, rdzv_port: int, output: str,
    slurm: bool = False, job_id: str = "capplan-bench",
) -> str:  # fmt: skip
    """The torchrun (or Slurm srun + torchrun) command to run ``preset`` on ``nodes`` nodes."""
    if slurm:
        return "\n".join([
            "#!/bin/bash",
            f"#SBATCH --job-name=capplan-bench-{preset}",
            f"#SBATCH --nodes={nodes}",
            "#SBATCH --ntasks-per-node=1",
            f"#SBATCH --gpus-per-node={nproc}",
            "#SBATCH --exclusive",
            'RDZV_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            f"RDZV_PORT={rdzv_port}",
            f"srun --kill-on-bad-exit=1 torchrun --nnodes={nodes} --nproc-per-node={nproc} --rdzv-backend=c10d "
            '"--rdzv-endpoint=${RDZV_HOST}:${RDZV_PORT}" "--rdzv-id=${SLURM_JOB_ID}" '
            + " ".join(shlex.quote(a) for a in runner_args(preset, output)),
        ]) + "\n"  # fmt: skip
    return (
        f"torchrun --nnodes={nodes} --nproc-per-node={nproc} --rdzv-backend=c10d "
        f"--rdzv-endpoint={rdzv_host}:{rdzv_port} --rdzv-id={job_id} "
        + " ".join(shlex.quote(a) for a in runner_args(preset, output))
        + "\n# run the same command on every node; rank 0 writes the result"
    )
