"""The reliability model's small pure functions (job MTBF, checkpoint size and write time, Young and Daly
intervals, goodput, wall clock) and their inputs (:class:`ReliabilityOverrides`, defaults without a catalog
figure). Units live in names: ``_s`` seconds, ``_hours``, ``_bytes``, ``_gbyte_per_s`` (10⁹ bytes/s).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from app.domain.estimator.memory import state_bytes_per_param
from app.domain.estimator.plan import Plan
from app.domain.provenance import Frozen

SECONDS_PER_HOUR = 3600.0
HOURS_PER_DAY = 24.0
HOURS_PER_MONTH = 730.0  # 8,760 h / 12
GBYTE = 1e9
RULE_OF_THUMB_INTERVAL_S = 1800.0
RULE_OF_THUMB_SAME_S = 1.0
SENSITIVITY_FACTORS = (0.5, 1.0, 2.0)  # an interval within 1 s of 30 min is the rule itself

# Defaults without a catalog figure (reported as source "default"; override them per scenario).
DEFAULT_DETECT_S = 60.0
DEFAULT_RESCHEDULE_S = 180.0
DEFAULT_WARMUP_S = 60.0
DEFAULT_ELASTIC_RESCHEDULE_S = 30.0
DEFAULT_SPOT_INTERRUPTIONS_PER_INSTANCE_MONTH = 0.10
PER_NODE_BANDWIDTH = "superpod-gds-read-per-node"
AGGREGATE_BANDWIDTH = "llama3-tectonic"
ASYNC_STAGING_RECORD = "crusoe-llama3-70b-h200"
ASYNC_STAGING_PARAMS = 70.55e9  # Llama3-70B parameters (the catalog's llama3.1-70b preset)


# --------------------------------------------------------------------------------------------------
# Inputs


class ReliabilityOverrides(Frozen):
    """Every reliability input; ``None`` means the catalog default (or the documented default)."""

    failure_record: str | None = Field(
        default=None, max_length=64, description="failure record slug (default: reliability_defaults)"
    )
    failures_per_gpu_hour: float | None = Field(default=None, gt=0, le=1, description="replaces the record")
    spot_interruptions_per_instance_month: float | None = Field(
        default=None, ge=0, le=730, description="spot options only; default 0.10 (no sourced rate)"
    )
    rollbacks_per_day: float = Field(default=0.0, ge=0, le=1000, description="NaN/loss-spike rollbacks")
    checkpoint_bytes_per_param: float | None = Field(default=None, gt=0, le=64)
    checkpoint_mode: Literal["sync", "async"] = "async"
    async_blocking_s: float | None = Field(
        default=None, ge=0, le=86_400, description="replaces the staging model"
    )
    async_staging_gbyte_per_s_per_gpu: float | None = Field(default=None, gt=0, le=1000)
    storage_tier: str | None = Field(
        default=None,
        max_length=64,
        description="storage tier slug (default: checkpoint_defaults.storage_tier)",
    )
    async_background_slowdown: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="share of throughput lost while an async save writes in the background",
    )
    storage_write_gbyte_per_s_per_node: float | None = Field(default=None, gt=0, le=10_000)
    storage_write_gbyte_per_s_aggregate: float | None = Field(default=None, gt=0, le=1_000_000)
    storage_read_gbyte_per_s_per_node: float | None = Field(default=None, gt=0, le=10_000)
    storage_read_gbyte_per_s_aggregate: float | None = Field(default=None, gt=0, le=1_000_000)
    interval_formula: Literal["daly", "young"] = "daly"
    checkpoint_interval_s: float | None = Field(
        default=None, gt=0, le=30 * 86_400, description="a fixed interval instead of the optimum"
    )
    detect_s: float | None = Field(default=None, ge=0, le=86_400)
    reschedule_s: float | None = Field(default=None, ge=0, le=86_400)
    warmup_s: float | None = Field(default=None, ge=0, le=86_400)
    elastic: bool = Field(
        default=False, description="TorchElastic with hot spares: re-rendezvous, no requeue"
    )
    elastic_reschedule_s: float | None = Field(default=None, ge=0, le=86_400)


# --------------------------------------------------------------------------------------------------
# Small pure functions


def job_mtbf_hours(failures_per_gpu_hour: float, gpus: int, extra_events_per_hour: float = 0.0) -> float:
    """Mean time between job-stopping events: ``1 / (rate · gpus + extra)``, hours.

    Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 GPUs is one every ~3.1 h:

    >>> rate = 419 / (16_384 * 54 * 24)
    >>> round(job_mtbf_hours(rate, 16_384), 2)
    3.09
    >>> round(job_mtbf_hours(rate, 1_024), 1)  # the same hardware, 16x fewer GPUs
    49.5
    """
    if failures_per_gpu_hour <= 0 or gpus < 1 or extra_events_per_hour < 0:
        raise ValueError("failure rate must be > 0, gpus >= 1 and extra events >= 0")
    return 1.0 / (failures_per_gpu_hour * gpus + extra_events_per_hour)


def spot_interruptions_per_hour(per_instance_month: float, instances: int) -> float:
    """Interruptions per hour of a job on ``instances`` spot instances (each interrupted
    ``per_instance_month`` times a month on average).

    >>> round(spot_interruptions_per_hour(0.10, 730), 3)
    0.1
    """
    return per_instance_month * instances / HOURS_PER_MONTH


def plan_checkpoint_bytes_per_param(plan: Plan) -> float:
    """Bytes per parameter of a resumable checkpoint for the plan's framework profile: weights +
    fp32 master + optimizer state (gradients are not saved). Megatron with AdamW: 2 + 4 + 8 = 14;
    FSDP2 (fp32 sharded params are the master): 4 + 0 + 8 = 12."""
    per = state_bytes_per_param(plan)
    return per.weights + per.master + per.optimizer


def checkpoint_bytes(parameters: int, bytes_per_param: float) -> float:
    """Checkpoint size: parameters × bytes per parameter (405B at 14 B/param ≈ 5.7 TB).

    >>> checkpoint_bytes(405_000_000_000, 14) / 1e12
    5.67
    """
    return parameters * bytes_per_param


def storage_gbyte_per_s(nodes: int, per_node_gbyte_per_s: float, aggregate_gbyte_per_s: float) -> float:
    """Bandwidth a checkpoint sees: every node writes its shard in parallel, capped by the storage system.

    >>> storage_gbyte_per_s(4, 40, 2000), storage_gbyte_per_s(2048, 40, 2000)
    (160, 2000)
    """
    if per_node_gbyte_per_s <= 0 or aggregate_gbyte_per_s <= 0 or nodes < 1:
        raise ValueError("storage bandwidth must be > 0 and nodes >= 1")
    return min(nodes * per_node_gbyte_per_s, aggregate_gbyte_per_s)


def checkpoint_write_s(size_bytes: float, gbyte_per_s: float) -> float:
    """Seconds to move ``size_bytes`` at ``gbyte_per_s`` (10⁹ bytes/s)."""
    if gbyte_per_s <= 0:
        raise ValueError("bandwidth must be > 0")
    return size_bytes / (gbyte_per_s * GBYTE)


def checkpoint_blocking_s(
    write_s: float,
    mode: Literal["sync", "async"],
    shard_bytes_per_gpu: float,
    staging_gbyte_per_s_per_gpu: float,
) -> float:
    """Time the GPUs stop for one checkpoint: the whole write (sync), or staging each GPU's shard into
    host memory (async; the write continues in the background).

    >>> checkpoint_blocking_s(148.8, "sync", 12e9, 0.68), round(checkpoint_blocking_s(148.8, "async", 1.7e9, 0.68), 2)
    (148.8, 2.5)
    """
    if mode == "sync":
        return write_s
    return shard_bytes_per_gpu / (staging_gbyte_per_s_per_gpu * GBYTE)


def async_overhead_s(
    blocking_s: float, background_write_s: float, slowdown: float, *, capped: bool = True
) -> float:
    """Time an asynchronous save costs: the snapshot that stops the GPUs, plus the throughput lost while the
    write runs in the background (``slowdown`` × its duration). Capped at the synchronous write, which a job
    could always do instead.

    1,024 GPUs, a 0.98 TB checkpoint: 1.41 s snapshot, 7.84 s write in the background at 54 % slowdown:

    >>> round(async_overhead_s(1.41, 7.84, 0.543), 2)
    5.67
    >>> async_overhead_s(1.41, 2.0, 0.9)  # never more than writing synchronously
    2.0
    """
    cost = blocking_s + slowdown * background_write_s
    return min(cost, max(background_write_s, blocking_s)) if capped else cost


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimum checkpoint interval ``√(2·δ·M)``.

    Job MTBF 3 h (10,800 s), blocking checkpoint 60 s: √(2 · 60 · 10,800) = √1,296,000 ≈ 1,138 s.

    >>> round(young_interval_s(60, 10_800), 1)
    1138.4
    """
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum: ``√(2δM)·[1 + ⅓√(δ/2M) + (1/9)(δ/2M)] − δ`` for δ < 2M, else M.

    Same case as Young: x = δ/2M = 60/21,600 = 0.002778, √x = 0.05270;
    1,138.42 × (1 + 0.017568 + 0.000309) − 60 = 1,158.77 − 60 ≈ 1,098.8 s.

    >>> round(daly_interval_s(60, 10_800), 1)
    1098.8
    >>> daly_interval_s(50_000, 10_800)  # checkpoint longer than 2M: checkpoint every M
    10800
    """
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2.0 * mtbf_s)
    return young_interval_s(checkpoint_s, mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - checkpoint_s


def goodput(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Share of wall-clock time that is useful training (Daly 2006, exponential failures):
    ``τ / (M · e^{R/M} · (e^{(τ+δ)/M} − 1))``; always in (0, 1].

    The reference's worked row (M = 186 min, δ = 6 s async, τ ≈ 6 min, R = 5 min) gives ~94 %,
    against 1 − 6 % by the first-order formula:

    >>> round(goodput(360, 6, 300, 186 * 60), 3), round(1 - first_order_waste(360, 6, 300, 186 * 60), 3)
    (0.942, 0.94)
    """
    if interval_s <= 0 or mtbf_s <= 0 or checkpoint_s < 0 or restart_s < 0:
        raise ValueError("interval and MTBF must be > 0, checkpoint and restart times >= 0")
    x = (interval_s + checkpoint_s) / mtbf_s
    log_expm1 = math.log(math.expm1(x)) if x < 30 else x + math.log1p(-math.exp(-x))
    log_ratio = math.log(interval_s / mtbf_s) - restart_s / mtbf_s - log_expm1  # in logs: no overflow
    return min(1.0, math.exp(log_ratio))


def first_order_waste(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """The reference's first-order waste fraction ``δ/τ + τ/2M + R/M`` (can exceed 1 when M is short)."""
    return checkpoint_s / interval_s + interval_s / (2.0 * mtbf_s) + restart_s / mtbf_s


def wall_clock_hours(compute_hours: float, goodput_fraction: float) -> float:
    """Wall-clock hours to get ``compute_hours`` of useful training at a goodput."""
    if not 0 < goodput_fraction <= 1:
        raise ValueError("goodput must be in (0, 1]")
    return compute_hours / goodput_fraction


def expected_failures(wall_hours: float, mtbf_hours: float) -> float:
    """Expected job-stopping events over ``wall_hours`` (Poisson: wall time / MTBF)."""
    return wall_hours / mtbf_hours
