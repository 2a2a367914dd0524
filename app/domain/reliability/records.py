"""Reliability and checkpoint records of ``data/reliability.toml``: failure statistics of published runs,
restart times, typical MFU; checkpoint formulas, sizes, measured and asynchronous saves, storage bandwidths
and tiers. Figures only: :mod:`app.domain.reliability.report` consumes them.
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import Field, model_validator

from app.domain.figures import Fraction, Span, by_slug
from app.domain.provenance import CatalogEntry, Confidence, Frozen

HOURS_PER_DAY = 24.0


# --------------------------------------------------------------------------------------------------
# Reliability (reliability.toml)
# --------------------------------------------------------------------------------------------------


class FailureCause(Frozen):
    cause: str
    count: int = Field(ge=0)
    share_pct: float = Field(ge=0, le=100)
    confidence: Confidence = Confidence.high


class MttfPoint(Frozen):
    gpus: int = Field(ge=1)
    mttf_hours: float = Field(gt=0)
    projected: bool = False
    note: str = ""


class EttrPoint(Frozen):
    gpus: int = Field(ge=1)
    checkpoint_interval_s: float | None = Field(default=None, gt=0)
    restart_s: float | None = Field(default=None, gt=0)
    ettr: Fraction


class FailureRecord(CatalogEntry):
    """Failure figures of one published run or study.

    :attr:`failures_per_gpu_hour` is derived, never typed in: from unexpected interruptions over GPU-hours,
    else from a failure rate per 1000 node-days, else from a job MTTI over the job's GPUs.
    """

    run: str
    accelerator: str
    gpus: int | None = Field(default=None, ge=1)
    gpus_per_node: int = Field(default=8, ge=1)
    duration_days: float | None = Field(default=None, gt=0)
    unexpected_interruptions: int | None = Field(default=None, ge=0)
    planned_interruptions: int | None = Field(default=None, ge=0)
    failures_per_1000_node_days: float | None = Field(default=None, ge=0)
    job_mtti_hours: float | None = Field(default=None, gt=0)
    job_mtti_is_upper_bound: bool = False
    job_uptime: Span | None = None
    effective_training_time_fraction: float | None = Field(default=None, ge=0, le=1)
    hardware_share_of_unexpected: float | None = Field(default=None, ge=0, le=1)
    gpu_share_of_unexpected: float | None = Field(default=None, ge=0, le=1)
    manual_interventions: int | None = Field(default=None, ge=0)
    manual_restarts_min: int | None = Field(default=None, ge=0)
    automatic_recoveries_min: int | None = Field(default=None, ge=0)
    hosts_cycled_min: int | None = Field(default=None, ge=0)
    model_params_b: float | None = Field(default=None, gt=0)
    started: date | None = None
    causes: tuple[FailureCause, ...] = ()
    mttf_points: tuple[MttfPoint, ...] = ()
    ettr_points: tuple[EttrPoint, ...] = ()

    @property
    def rate_basis(self) -> str | None:
        if self.unexpected_interruptions is not None and self.gpus and self.duration_days:
            return "unexpected interruptions / GPU-hours"
        if self.failures_per_1000_node_days is not None:
            return "failures per 1000 node-days"
        if self.job_mtti_hours is not None and self.gpus:
            return "job MTTI (lower bound on the rate)" if self.job_mtti_is_upper_bound else "job MTTI"
        return None

    @property
    def failures_per_gpu_hour(self) -> float | None:
        basis = self.rate_basis
        if basis is None:
            return None
        if basis.startswith("unexpected"):
            assert self.unexpected_interruptions is not None and self.gpus and self.duration_days
            return self.unexpected_interruptions / (self.gpus * self.duration_days * HOURS_PER_DAY)
        if basis.startswith("failures per 1000"):
            assert self.failures_per_1000_node_days is not None
            return self.failures_per_1000_node_days / 1000 / (HOURS_PER_DAY * self.gpus_per_node)
        assert self.job_mtti_hours is not None and self.gpus
        return 1 / (self.job_mtti_hours * self.gpus)

    def job_mtbf_hours(self, gpus: int | None = None) -> float | None:
        """Mean time between failures of a job on ``gpus`` GPUs (the run's own size when None)."""
        rate = self.failures_per_gpu_hour
        n = gpus or self.gpus
        if rate is None or not n or rate == 0:
            return None
        return 1 / (rate * n)


class RestartTime(CatalogEntry):
    """Time lost per failure to detection, rescheduling and reload (not sourced separately)."""

    restart_s: float = Field(gt=0)
    checkpoint_overhead_s: float | None = Field(default=None, gt=0)


class TypicalMfu(CatalogEntry):
    mfu: Span

    @model_validator(mode="after")
    def _fraction(self) -> TypicalMfu:
        if self.mfu.high > 1:
            raise ValueError("MFU is a fraction <= 1")
        return self


class ReliabilityDefaults(Frozen):
    failure_rate: str
    failure_rate_reason: str
    restart_time: str
    restart_time_reason: str


class Reliability(Frozen):
    failure_records: tuple[FailureRecord, ...]
    restart_times: tuple[RestartTime, ...]
    typical_mfu: tuple[TypicalMfu, ...]
    defaults: ReliabilityDefaults

    def failure_record(self, slug: str | None = None) -> FailureRecord:
        return by_slug(self.failure_records, slug or self.defaults.failure_rate, "failure record")

    @property
    def default_failure_record(self) -> FailureRecord:
        return self.failure_record()

    def restart_time(self, slug: str | None = None) -> RestartTime:
        return by_slug(self.restart_times, slug or self.defaults.restart_time, "restart time")


# --------------------------------------------------------------------------------------------------
# Checkpointing (reliability.toml)
# --------------------------------------------------------------------------------------------------


class CheckpointFormula(CatalogEntry):
    formula: str
    variables: dict[str, str] = Field(default_factory=dict)


class CheckpointSize(CatalogEntry):
    """Bytes per parameter of a checkpoint or training-state layout."""

    bytes_per_param: Span
    layout: str


class MeasuredCheckpoint(CatalogEntry):
    """A published checkpoint size; bytes per parameter derived."""

    params_b: float = Field(gt=0)
    full_checkpoint_tbyte: float = Field(gt=0)
    weights_gbyte: float | None = Field(default=None, gt=0)

    @property
    def bytes_per_param(self) -> float:
        return self.full_checkpoint_tbyte * 1e12 / (self.params_b * 1e9)

    @property
    def weights_bytes_per_param(self) -> float | None:
        return None if self.weights_gbyte is None else self.weights_gbyte * 1e9 / (self.params_b * 1e9)


class AsyncCheckpoint(CatalogEntry):
    """A measured checkpoint save: blocking time (sync/async) and background phase."""

    model: str
    gpus: int | None = Field(default=None, ge=1)
    accelerator: str | None = None
    sync_blocking_s: float | None = Field(default=None, gt=0)
    async_blocking_s: Span | None = None
    background_before_s: float | None = Field(default=None, gt=0)
    background_after_s: float | None = Field(default=None, gt=0)
    tokens_per_s_normal: float | None = Field(default=None, gt=0)
    tokens_per_s_during_background: float | None = Field(default=None, gt=0)

    @property
    def background_slowdown(self) -> float | None:
        """Share of throughput lost while the background write runs: 1 − tokens/s during it / normal."""
        if self.tokens_per_s_normal is None or self.tokens_per_s_during_background is None:
            return None
        return max(0.0, 1.0 - self.tokens_per_s_during_background / self.tokens_per_s_normal)

    @property
    def async_speedup(self) -> float | None:
        if self.sync_blocking_s is None or self.async_blocking_s is None:
            return None
        return self.sync_blocking_s / self.async_blocking_s.mid


class StorageBandwidth(CatalogEntry):
    """Storage throughput reference; ``scope`` says whether per node or for the whole storage system."""

    scope: Literal["aggregate", "per-node"]
    direction: Literal["read", "write", "unspecified"]
    sustained_gbyte_per_s: float | None = Field(default=None, gt=0)
    peak_gbyte_per_s: float | None = Field(default=None, gt=0)
    capacity_pbyte: float | None = Field(default=None, gt=0)
    servers: int | None = Field(default=None, ge=1)


class StorageTier(CatalogEntry):
    """How checkpoint bandwidth scales with the cluster: per-node write and read limits (kept apart), and the
    storage system's aggregate, either fixed or a share per compute node (a system sized with the cluster)."""

    write_gbyte_per_s_per_node: float = Field(gt=0)
    read_gbyte_per_s_per_node: float = Field(gt=0)
    aggregate_write_gbyte_per_s: float | None = Field(default=None, gt=0)
    aggregate_read_gbyte_per_s: float | None = Field(default=None, gt=0)
    aggregate_write_gbyte_per_s_per_node: float | None = Field(default=None, gt=0)
    aggregate_read_gbyte_per_s_per_node: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_aggregate_each(self) -> StorageTier:
        for d in ("write", "read"):
            fixed = getattr(self, f"aggregate_{d}_gbyte_per_s")
            scaled = getattr(self, f"aggregate_{d}_gbyte_per_s_per_node")
            if (fixed is None) == (scaled is None):
                raise ValueError(
                    f"give exactly one of aggregate_{d}_gbyte_per_s and aggregate_{d}_gbyte_per_s_per_node"
                )
        return self

    def aggregate_gbyte_per_s(self, direction: Literal["write", "read"], nodes: int) -> float:
        """The storage system's bandwidth for a cluster of ``nodes``: fixed, or nodes × the per-node share."""
        fixed = getattr(self, f"aggregate_{direction}_gbyte_per_s")
        if fixed is not None:
            return float(fixed)
        return nodes * getattr(self, f"aggregate_{direction}_gbyte_per_s_per_node")

    def aggregate_field(self, direction: Literal["write", "read"]) -> str:
        fixed = f"aggregate_{direction}_gbyte_per_s"
        return fixed if getattr(self, fixed) is not None else f"{fixed}_per_node"


class CheckpointDefaults(Frozen):
    checkpoint_size: str
    checkpoint_size_reason: str
    storage_tier: str
    storage_tier_reason: str
    async_background: str


class Checkpointing(Frozen):
    formulas: tuple[CheckpointFormula, ...]
    sizes: tuple[CheckpointSize, ...]
    measured: tuple[MeasuredCheckpoint, ...]
    async_saves: tuple[AsyncCheckpoint, ...]
    storage_bandwidths: tuple[StorageBandwidth, ...]
    storage_tiers: tuple[StorageTier, ...]
    cpu_memory_overhead: str
    defaults: CheckpointDefaults

    def storage_tier(self, slug: str | None = None) -> StorageTier:
        return by_slug(self.storage_tiers, slug or self.defaults.storage_tier, "storage tier")

    def size(self, slug: str | None = None) -> CheckpointSize:
        return by_slug(self.sizes, slug or self.defaults.checkpoint_size, "checkpoint size")

    def formula(self, slug: str) -> CheckpointFormula:
        return by_slug(self.formulas, slug, "checkpoint formula")


class CheckpointNotes(Frozen):
    cpu_memory_overhead: str
