"""Benchmark results (issue 7): one schema shared by the runner (app/bench), the API and the pages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.schemas.bounds import BoundedJson, NoNul

BENCH_SCHEMA = "capplan.bench/v1"
METRIC_PATTERN = r"^[A-Za-z0-9_.:\-]+$"


class BenchmarkMetricIn(BaseModel):
    """One measured figure on one rank, with the estimator's prediction for the same configuration.

    Metric names: ``step_time_s``, ``tokens_per_s``, ``flops_per_step``, ``param_bytes``, … for the training
    step; ``gemm:<dtype>:<m>x<n>x<k>`` (TFLOP/s) and ``busbw:<op>:<ranks>r<nodes>n:<bytes>`` (GB/s) for the
    microbenchmarks (see app/domain/estimator/calibration.py)."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(min_length=1, max_length=80, pattern=METRIC_PATTERN)
    unit: NoNul = Field(max_length=32)
    rank: int = Field(default=0, ge=0, le=1_048_576)
    measured: float = Field(allow_inf_nan=False)
    predicted: float | None = Field(default=None, allow_inf_nan=False)


class BenchmarkMetricOut(BenchmarkMetricIn):
    relative_error: float | None = Field(description="measured / predicted − 1 (None without a prediction)")


def relative_error(measured: float, predicted: float | None) -> float | None:
    if predicted is None or predicted == 0:
        return None
    return measured / predicted - 1


class BenchmarkResultIn(BaseModel):
    """What ``capplan bench run`` writes (``--output``) and posts (``--report-to``): one run, every rank."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_version: str = Field(default=BENCH_SCHEMA, alias="schema", pattern=r"^capplan\.bench/v1$")
    preset: NoNul = Field(min_length=1, max_length=120)
    accelerator: str | None = Field(
        default=None,
        max_length=64,
        description="catalog accelerator slug (None: not a catalog device, e.g. CPU)",
    )
    node: str | None = Field(default=None, max_length=64, description="catalog node slug, if known")
    device_name: NoNul = Field(max_length=200, description="the device as the runtime reports it")
    world_size: int = Field(ge=1, le=1_048_576)
    nodes: int = Field(default=1, ge=1, le=65_536)
    measured_at: datetime
    config: BoundedJson = Field(default_factory=dict, description="preset and resolved run configuration")
    hardware: BoundedJson = Field(default_factory=dict)
    software: BoundedJson = Field(default_factory=dict, description="torch, CUDA, NCCL, Python versions")
    metrics: list[BenchmarkMetricIn] = Field(min_length=1, max_length=20_000)
    notes: NoNul = Field(default="", max_length=4000)

    @model_validator(mode="after")
    def _ranks_in_world(self) -> BenchmarkResultIn:
        bad = sorted({m.rank for m in self.metrics if m.rank >= self.world_size})
        if bad:
            raise ValueError(f"metrics name ranks {bad} outside world_size {self.world_size}")
        return self


class _RunFacts(BaseModel):
    """What a list of runs shows of each (stored or shipped)."""

    preset: str
    accelerator: str | None
    node: str | None
    world_size: int
    device_name: str
    measured_at: datetime
    metrics: int = Field(description="number of measured figures")
    median_abs_error: float | None = Field(description="median |relative error| over predicted figures")


class BenchmarkRunSummary(_RunFacts):
    id: int
    created_at: datetime


class BenchmarkRunOut(BenchmarkRunSummary):
    config: dict[str, Any]
    hardware: dict[str, Any]
    software: dict[str, Any]
    notes: str
    samples: list[BenchmarkMetricOut]


class ShippedRunSummary(_RunFacts):
    """A runner result shipped with capplan under data/calibration (measured by the project on real GPUs)."""

    key: str = Field(description="path under data/calibration without .json")
    url: str = Field(description="the run's page")
    api_url: str
    software: dict[str, Any]


class CalibrationFigureOut(BaseModel):
    """One catalog figure that calibration replaces now."""

    accelerator: str
    part: str = Field(description="efficiency | scale_up_network | scale_out_network | runtime")
    field: str
    default: float = Field(description="the catalog default")
    value: float = Field(description="the calibrated value the estimator uses")
    run: str = Field(description="the run it comes from: 'run N' (stored) or 'shipped KEY'")
    run_url: str | None
    measured_at: str
    method: str


class BenchmarkIngestOut(BaseModel):
    id: int
    url: str
    metrics: int
    calibrates: list[str] = Field(description="figures this run calibrates for its accelerator")
