"""Failures, checkpoints and goodput: how much of the wall clock a training job spends training.

The model, in the order the numbers are derived (every input overridable through
:class:`ReliabilityOverrides`; defaults from ``data/reliability.toml`` with their sources):

- **Failure rate** per GPU-hour, from a published run (default: Llama 3 405B, 419 unexpected
  interruptions in 54 days on 16,384 GPUs). Extra event sources add to it: spot interruptions
  (per instance-month, AWS Spot Advisor style) and NaN/loss-spike rollbacks (per day).
- **Job MTBF** ``M = 1 / (rate · GPUs + extra events per hour)``: one failed GPU stops a synchronous job.
- **Checkpoint size** = parameters × bytes per parameter of the resumable training state (the framework
  profile's weights + fp32 master + optimizer state; gradients are not saved).
- **Write time** = size / min(nodes × per-node write bandwidth, aggregate storage bandwidth).
  **Blocking time** ``δ``: the whole write when saving synchronously; with asynchronous save (PyTorch
  DCP ``async_save``) only the staging copy of each GPU's shard to host memory, at a staging rate
  derived from the at-scale measurement in the catalog (0.78 s for Llama3-70B on 1,856 H200). An asynchronous save still needs its background write to finish before the
  next one starts, so the interval is never shorter than the write time, and after a failure the
  checkpoint still being written is not there yet: that write time is re-done work.
- **Optimal interval** ``τ``: Young (1974) ``√(2δM)``, or Daly (2006)
  ``√(2δM)·[1 + ⅓√(δ/2M) + (1/9)(δ/2M)] − δ`` for ``δ < 2M``, else ``M`` (default: Daly).
- **Restart time** ``R`` = detect + reschedule + reload (size / read bandwidth) + warm-up; elastic
  training (TorchElastic, hot spares) replaces the reschedule by a re-rendezvous.
- **Goodput** (effective training time ratio) from Daly's expected wall time for exponential failures:
  ``goodput = τ / (M · e^{R/M} · (e^{(τ+δ)/M} − 1))``. It lies in (0, 1] and agrees with the reference's
  first-order waste ``δ/τ + τ/2M + R/M`` (reported too) while that is small; unlike it, it never goes
  negative. Waste fraction = 1 − goodput.
- The "checkpoint every 30 minutes" rule of thumb is evaluated the same way, against the optimum.

Units live in names: ``_s`` seconds, ``_hours``, ``_bytes``, ``_gbyte_per_s`` (10⁹ bytes/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from app.domain.cost_catalog import CostCatalog, by_slug
from app.domain.estimate import Assumption
from app.domain.memory import state_bytes_per_param
from app.domain.plan import Plan
from app.domain.provenance import CatalogEntry, Frozen

__all__ = [
    "HOURS_PER_MONTH",
    "RULE_OF_THUMB_INTERVAL_S",
    "ReliabilityOverrides",
    "ReliabilityReport",
    "RestartTime",
    "IntervalPoint",
    "RuleOfThumb",
    "async_overhead_s",
    "checkpoint_blocking_s",
    "checkpoint_bytes",
    "checkpoint_write_s",
    "daly_interval_s",
    "expected_failures",
    "first_order_waste",
    "goodput",
    "job_mtbf_hours",
    "plan_checkpoint_bytes_per_param",
    "reliability_report",
    "restart_time",
    "spot_interruptions_per_hour",
    "storage_gbyte_per_s",
    "wall_clock_hours",
    "young_interval_s",
]

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


# --------------------------------------------------------------------------------------------------
# Results


class RestartTime(Frozen):
    detect_s: float
    reschedule_s: float
    reload_s: float
    warmup_s: float
    elastic: bool

    @property
    def total_s(self) -> float:
        return self.detect_s + self.reschedule_s + self.reload_s + self.warmup_s


def restart_time(
    detect_s: float, reschedule_s: float, reload_s: float, warmup_s: float, elastic: bool
) -> RestartTime:
    return RestartTime(
        detect_s=detect_s, reschedule_s=reschedule_s, reload_s=reload_s, warmup_s=warmup_s, elastic=elastic
    )


class RuleOfThumb(Frozen):
    """The "checkpoint every 30 minutes" rule against the optimum on this cluster."""

    interval_s: float
    goodput: float
    goodput_at_optimum: float
    goodput_loss: float = Field(description="goodput at the optimum minus goodput with the rule")
    extra_wall_clock_fraction: float = Field(description="wall clock with the rule / at the optimum − 1")
    same_as_interval: bool = Field(
        default=False,
        description="the job already checkpoints every 30 min: nothing to compare, show no rule line",
    )


class IntervalPoint(Frozen):
    """Goodput at ``factor`` × the optimal checkpoint interval (how flat the optimum is)."""

    factor: float
    interval_s: float
    goodput: float
    limited_by_write: bool = Field(
        default=False,
        description="async: raised to the background write time, as the next save must wait for it",
    )


class ReliabilityReport(Frozen):
    gpus: int
    nodes: int
    failures_per_gpu_hour: float
    failure_record: str | None
    spot_interruptions_per_hour: float
    rollbacks_per_hour: float
    job_mtbf_hours: float
    checkpoint_bytes_per_param: float
    checkpoint_bytes: float
    checkpoint_mode: Literal["sync", "async"]
    storage_write_gbyte_per_s: float
    storage_read_gbyte_per_s: float
    checkpoint_write_s: float
    checkpoint_blocking_s: float = Field(
        description="GPUs stopped per save: the write (sync) or the snapshot (async)"
    )
    background_write_s: float = Field(description="async: the write to storage, while training continues")
    background_slowdown: float = Field(
        description="async: share of throughput lost during the background write"
    )
    checkpoint_overhead_s: float = Field(
        description="δ, the time lost per save: blocking + slowdown × background write (≤ the sync write)"
    )
    interval_sensitivity: tuple[IntervalPoint, ...] = Field(
        description="goodput at 0.5×, 1× and 2× the optimal interval"
    )
    young_interval_s: float
    daly_interval_s: float
    interval_formula: str
    checkpoint_interval_s: float
    async_background_limits_interval: bool = Field(
        description="async: the background write is longer than the optimum, so the interval is the write time"
    )
    rework_s: float = Field(
        description="work redone per failure beyond the lost interval (async in-flight write)"
    )
    restart: RestartTime
    restart_s: float
    goodput: float
    waste_fraction: float
    first_order_waste_fraction: float
    rule_of_thumb: RuleOfThumb
    assumptions: tuple[Assumption, ...]


# --------------------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True, slots=True)
class _Figure:
    value: float
    assumption: Assumption


def _catalog_figure(
    entry: CatalogEntry, field: str, value: float, name: str, unit: str, note: str | None = None
) -> _Figure:
    prov = entry.figure_provenance(field)
    return _Figure(
        value,
        Assumption(
            name=name, value=value, unit=unit, source=prov.source, as_of=prov.as_of,
            confidence=prov.confidence.value, note=note or prov.note,
        ),
    )  # fmt: skip


def _pick(override: float | None, default: _Figure, name: str, unit: str) -> _Figure:
    if override is None:
        return default
    return _Figure(override, Assumption(name=name, value=override, unit=unit, source="override"))


def _default(value: float, name: str, unit: str, note: str) -> _Figure:
    return _Figure(
        value, Assumption(name=name, value=value, unit=unit, source="default", confidence="low", note=note)
    )


def _failure_rate(cc: CostCatalog, o: ReliabilityOverrides) -> tuple[_Figure, str | None]:
    name, unit = "failure rate per GPU-hour", "1/GPU-h"
    if o.failures_per_gpu_hour is not None:
        return _Figure(o.failures_per_gpu_hour, Assumption(name=name, value=o.failures_per_gpu_hour, unit=unit,
                                                           source="override")), None  # fmt: skip
    record = cc.reliability.failure_record(o.failure_record)
    rate = record.failures_per_gpu_hour
    if rate is None or rate <= 0:
        raise ValueError(f"failure record {record.slug!r} has no failure rate ({record.name})")
    note = f"{record.name}: {record.rate_basis}"
    if o.failure_record is None:
        note += f"; default because: {cc.reliability.defaults.failure_rate_reason}"
    return _catalog_figure(record, "unexpected_interruptions", rate, name, unit, note), record.slug


def _bandwidths(cc: CostCatalog, o: ReliabilityOverrides, nodes: int) -> dict[str, _Figure]:
    ck = cc.checkpointing
    tier = ck.storage_tier(o.storage_tier)
    why = "" if o.storage_tier else f"; default because: {ck.defaults.storage_tier_reason}"
    figures: dict[str, _Figure] = {}
    for direction in ("write", "read"):
        per_node = getattr(tier, f"{direction}_gbyte_per_s_per_node")
        figures[f"{direction}_node"] = _pick(
            getattr(o, f"storage_{direction}_gbyte_per_s_per_node"),
            _catalog_figure(tier, f"{direction}_gbyte_per_s_per_node", per_node,
                            f"storage {direction} bandwidth per node", "GB/s",
                            f"{tier.name}: " + (tier.figure_provenance(f"{direction}_gbyte_per_s_per_node").note or "")),
            f"storage {direction} bandwidth per node", "GB/s",
        )  # fmt: skip
        field = tier.aggregate_field(direction)  # type: ignore[arg-type]
        aggregate = tier.aggregate_gbyte_per_s(direction, nodes)  # type: ignore[arg-type]
        scaled = field.endswith("_per_node")
        note = (f"{tier.name}: {getattr(tier, field):g} GB/s per compute node × {nodes} nodes{why}" if scaled
                else f"{tier.name}: fixed whatever the cluster size{why}")  # fmt: skip
        figures[f"{direction}_aggregate"] = _pick(
            getattr(o, f"storage_{direction}_gbyte_per_s_aggregate"),
            _catalog_figure(
                tier, field, aggregate, f"storage {direction} bandwidth, aggregate", "GB/s", note
            ),
            f"storage {direction} bandwidth, aggregate",
            "GB/s",
        )
    return figures


def _checkpoint_size(cc: CostCatalog, o: ReliabilityOverrides, plan_bytes_per_param: float | None) -> _Figure:
    name, unit = "checkpoint bytes per parameter", "B/param"
    if o.checkpoint_bytes_per_param is not None:
        return _Figure(o.checkpoint_bytes_per_param, Assumption(name=name, value=o.checkpoint_bytes_per_param,
                                                                unit=unit, source="override"))  # fmt: skip
    if plan_bytes_per_param is not None:
        return _Figure(plan_bytes_per_param, Assumption(
            name=name, value=plan_bytes_per_param, unit=unit, source="formula",
            note="the plan's framework profile: weights + fp32 master + optimizer state (no gradients)"))  # fmt: skip
    size = cc.checkpointing.size()
    return _catalog_figure(size, "bytes_per_param", size.bytes_per_param.mid, name, unit,
                           f"{size.layout}; {cc.checkpointing.defaults.checkpoint_size_reason}")  # fmt: skip


def _async_staging(cc: CostCatalog, size_bytes_per_param: float, o: ReliabilityOverrides) -> _Figure:
    name, unit = "async checkpoint staging rate per GPU", "GB/s"
    if o.async_staging_gbyte_per_s_per_gpu is not None:
        return _pick(o.async_staging_gbyte_per_s_per_gpu, _default(0, name, unit, ""), name, unit)
    record = next(a for a in cc.checkpointing.async_saves if a.slug == ASYNC_STAGING_RECORD)
    blocked = record.async_blocking_s.mid if record.async_blocking_s else 1.0
    per_gpu = ASYNC_STAGING_PARAMS * size_bytes_per_param / (record.gpus or 1)
    rate = per_gpu / blocked / GBYTE
    note = (
        f"derived: {record.name}, {blocked:g} s blocked for ~{per_gpu / GBYTE:.2f} GB per GPU "
        f"({ASYNC_STAGING_PARAMS / 1e9:g}B params × {size_bytes_per_param:g} B/param / {record.gpus} GPUs)"
    )
    return _catalog_figure(record, "async_blocking_s", rate, name, unit, note)


def _async_background(cc: CostCatalog, o: ReliabilityOverrides) -> _Figure:
    name, unit = "async background-write slowdown", "fraction of throughput"
    record = by_slug(
        cc.checkpointing.async_saves, cc.checkpointing.defaults.async_background, "async checkpoint"
    )
    slowdown = record.background_slowdown or 0.0
    note = (f"derived: {record.name}, {record.tokens_per_s_normal:g} → {record.tokens_per_s_during_background:g} "
            f"tokens/s while the save wrote in the background (before the fix that cut that phase from "
            f"{record.background_before_s:g} s to {record.background_after_s:g} s: a conservative figure)")  # fmt: skip
    return _pick(o.async_background_slowdown,
                 _catalog_figure(record, "tokens_per_s_during_background", slowdown, name, unit, note), name, unit)  # fmt: skip


def _restart_figures(cc: CostCatalog, o: ReliabilityOverrides) -> dict[str, _Figure]:
    base = cc.reliability.restart_time()
    why = (f"unsourced split of the {base.restart_s:g} s restart assumed by {base.name} ({base.source}): "
           "detect 60 + reschedule 180 + warm-up 60; reload is computed from the checkpoint size")  # fmt: skip
    figures = {
        "detect": _pick(o.detect_s, _default(DEFAULT_DETECT_S, "failure detection", "s", why), "failure detection", "s"),
        "warmup": _pick(o.warmup_s, _default(DEFAULT_WARMUP_S, "warm-up after restart", "s", why), "warm-up after restart", "s"),
    }  # fmt: skip
    if o.elastic:
        dflt = _default(DEFAULT_ELASTIC_RESCHEDULE_S, "elastic re-rendezvous", "s",
                        "TorchElastic with hot spare nodes: re-rendezvous instead of requeueing the job (unsourced)")  # fmt: skip
        figures["reschedule"] = _pick(o.elastic_reschedule_s, dflt, "elastic re-rendezvous", "s")
    else:
        dflt = _default(DEFAULT_RESCHEDULE_S, "reschedule (requeue, replace node)", "s", why)
        figures["reschedule"] = _pick(o.reschedule_s, dflt, "reschedule (requeue, replace node)", "s")
    return figures


def reliability_report(
    cost_catalog: CostCatalog,
    *,
    gpus: int,
    nodes: int,
    parameters: int,
    plan_bytes_per_param: float | None = None,
    overrides: ReliabilityOverrides | None = None,
    spot_instances: int = 0,
) -> ReliabilityReport:
    """MTBF, checkpoint cost, optimal interval, restart time and goodput of a job on ``gpus`` GPUs.

    ``plan_bytes_per_param``: the plan's checkpoint bytes per parameter
    (:func:`plan_checkpoint_bytes_per_param`); None uses the catalog's default checkpoint size.
    ``spot_instances``: instances bought on spot, whose interruptions add to the failure rate.
    Raises ValueError on impossible inputs (unknown failure record, no rate).
    """
    o = overrides or ReliabilityOverrides()
    if gpus < 1 or nodes < 1 or parameters < 1:
        raise ValueError("gpus, nodes and parameters must be >= 1")
    rate, record_slug = _failure_rate(cost_catalog, o)
    assumptions = [rate.assumption]
    spot_per_hour = 0.0
    if spot_instances:
        spot_fig = _pick(o.spot_interruptions_per_instance_month,
                         _default(DEFAULT_SPOT_INTERRUPTIONS_PER_INSTANCE_MONTH, "spot interruptions per instance-month",
                                  "1/month", "no sourced GPU spot interruption rate (AWS-SPOT buckets <5 % … >20 %/month)"),
                         "spot interruptions per instance-month", "1/month")  # fmt: skip
        spot_per_hour = spot_interruptions_per_hour(spot_fig.value, spot_instances)
        assumptions.append(spot_fig.assumption)
    rollbacks_per_hour = o.rollbacks_per_day / HOURS_PER_DAY
    if o.rollbacks_per_day:
        assumptions.append(Assumption(name="NaN/loss-spike rollbacks per day", value=o.rollbacks_per_day, unit="1/day",
                                      source="override"))  # fmt: skip
    mtbf_h = job_mtbf_hours(rate.value, gpus, spot_per_hour + rollbacks_per_hour)
    mtbf_s = mtbf_h * SECONDS_PER_HOUR

    size_per_param = _checkpoint_size(cost_catalog, o, plan_bytes_per_param)
    size = checkpoint_bytes(parameters, size_per_param.value)
    bw = _bandwidths(cost_catalog, o, nodes)
    write_bw = storage_gbyte_per_s(nodes, bw["write_node"].value, bw["write_aggregate"].value)
    read_bw = storage_gbyte_per_s(nodes, bw["read_node"].value, bw["read_aggregate"].value)
    write_s = checkpoint_write_s(size, write_bw)
    staging = _async_staging(cost_catalog, size_per_param.value, o)
    assumptions += [size_per_param.assumption, *(f.assumption for f in bw.values())]
    slowdown = 0.0
    if o.checkpoint_mode == "sync":
        blocking_s = overhead_s = write_s
    else:
        if o.async_blocking_s is not None:
            blocking_s = o.async_blocking_s
            assumptions.append(
                Assumption(name="async blocking time", value=blocking_s, unit="s", source="override")
            )
        else:  # the snapshot into host memory; never longer than writing synchronously would block
            blocking_s = min(checkpoint_blocking_s(write_s, "async", size / gpus, staging.value), write_s)
            assumptions.append(staging.assumption)
        background = _async_background(cost_catalog, o)
        slowdown = background.value
        assumptions.append(background.assumption)
        overhead_s = async_overhead_s(blocking_s, write_s, slowdown, capped=o.async_blocking_s is None)

    young = young_interval_s(overhead_s, mtbf_s) if overhead_s > 0 else 0.0
    daly = daly_interval_s(overhead_s, mtbf_s) if overhead_s > 0 else 0.0
    optimum = daly if o.interval_formula == "daly" else young
    floor = write_s if o.checkpoint_mode == "async" else 0.0
    limited = o.checkpoint_interval_s is None and optimum < floor
    interval = o.checkpoint_interval_s if o.checkpoint_interval_s is not None else max(optimum, floor)
    interval = max(interval, 1e-3)
    rework = write_s if o.checkpoint_mode == "async" else 0.0

    rs = _restart_figures(cost_catalog, o)
    reload_s = checkpoint_write_s(size, read_bw)
    restart = restart_time(
        rs["detect"].value, rs["reschedule"].value, reload_s, rs["warmup"].value, o.elastic
    )
    assumptions += [f.assumption for f in rs.values()]
    lost_s = restart.total_s + rework

    gp = goodput(interval, overhead_s, lost_s, mtbf_s)
    optimal_interval = max(optimum, floor, 1e-3)
    best = goodput(optimal_interval, overhead_s, lost_s, mtbf_s)
    rule_interval = max(RULE_OF_THUMB_INTERVAL_S, floor)
    rule_gp = goodput(rule_interval, overhead_s, lost_s, mtbf_s)
    sensitivity = tuple(
        IntervalPoint(factor=f, interval_s=max(f * optimal_interval, floor, 1e-3),
                      limited_by_write=f * optimal_interval < floor,
                      goodput=goodput(max(f * optimal_interval, floor, 1e-3), overhead_s, lost_s, mtbf_s))
        for f in SENSITIVITY_FACTORS
    )  # fmt: skip
    assumptions += [
        Assumption(name="checkpoint interval formula", value=o.interval_formula, source="formula",
                   note="Young: √(2δM); Daly: √(2δM)·[1 + ⅓√(δ/2M) + (δ/2M)/9] − δ" + (
                       "" if o.checkpoint_interval_s is None else f"; fixed interval {o.checkpoint_interval_s:g} s (override)")),
        Assumption(name="goodput", value="τ / (M·e^{R/M}·(e^{(τ+δ)/M} − 1))", source="formula",
                   note="Daly 2006 expected wall time with exponential failures"),
    ]  # fmt: skip
    return ReliabilityReport(
        gpus=gpus,
        nodes=nodes,
        failures_per_gpu_hour=rate.value,
        failure_record=record_slug,
        spot_interruptions_per_hour=spot_per_hour,
        rollbacks_per_hour=rollbacks_per_hour,
        job_mtbf_hours=mtbf_h,
        checkpoint_bytes_per_param=size_per_param.value,
        checkpoint_bytes=size,
        checkpoint_mode=o.checkpoint_mode,
        storage_write_gbyte_per_s=write_bw,
        storage_read_gbyte_per_s=read_bw,
        checkpoint_write_s=write_s,
        checkpoint_blocking_s=blocking_s,
        background_write_s=write_s if o.checkpoint_mode == "async" else 0.0,
        background_slowdown=slowdown,
        checkpoint_overhead_s=overhead_s,
        interval_sensitivity=sensitivity,
        young_interval_s=young,
        daly_interval_s=daly,
        interval_formula=o.interval_formula if o.checkpoint_interval_s is None else "fixed",
        checkpoint_interval_s=interval,
        async_background_limits_interval=limited,
        rework_s=rework,
        restart=restart,
        restart_s=restart.total_s,
        goodput=gp,
        waste_fraction=1.0 - gp,
        first_order_waste_fraction=first_order_waste(interval, overhead_s, lost_s, mtbf_s),
        rule_of_thumb=RuleOfThumb(
            interval_s=rule_interval,
            goodput=rule_gp,
            goodput_at_optimum=best,
            goodput_loss=best - rule_gp,
            extra_wall_clock_fraction=best / rule_gp - 1.0,
            same_as_interval=abs(interval - rule_interval) < RULE_OF_THUMB_SAME_S,
        ),
        assumptions=tuple(assumptions),
    )
