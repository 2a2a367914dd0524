"""Pydantic I/O models shared by the API, the web layer, the CLI and the benchmark runner."""

from __future__ import annotations

import json
import math
from datetime import datetime
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from app.domain.estimator.plan import (
    AttentionKernel,
    Framework,
    Offload,
    Optimizer,
    Precision,
    Recompute,
    Sharding,
)
from app.domain.export import PlanDocument
from app.domain.model.hf_config import ArchitectureImportError, check_hf_config_bounds


class ErrorOut(BaseModel):
    """Error body of every 4xx answer the API gives."""

    detail: str
    known: list[str] | None = None


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    """422 body: one item per offending field, with the reason (and the fix for plan violations)."""

    detail: list[ErrorItem]


# -- free-form JSON (a config.json, a benchmark run's config): bounded before it is stored or read ----------

JSON_MAX_DEPTH = 20


def load_json_text(text: str | bytes, what: str = "input") -> Any:
    """``json.loads`` that answers every malformed or oversized document with a ValueError naming the problem
    (the standard parser raises RecursionError past ~1,000 levels and a bare ValueError past 4,300 digits)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"{what} is nested deeper than {JSON_MAX_DEPTH} levels (limit)") from None
    except ValueError as exc:  # int digits over sys.get_int_max_str_digits()
        raise ValueError(f"{what} holds an integer over 18 digits (limit): {str(exc)[:80]}") from None


def _bounded_hf_config(value: dict[str, Any]) -> dict[str, Any]:
    try:
        check_hf_config_bounds(value)
    except ArchitectureImportError as exc:
        raise ValueError(str(exc).split(" (supported model_type")[0]) from None
    return value


def _bounded_json(value: dict[str, Any]) -> dict[str, Any]:
    """Any stored JSON object: nesting, digits, size and NUL characters bounded like a config.json (what the
    API accepts must be what a backup can restore, on SQLite and PostgreSQL alike)."""
    try:
        check_hf_config_bounds(value)
    except ArchitectureImportError as exc:
        if "over the limit of" in exc.reason:  # model-size limits are for config.json only
            return value
        raise ValueError(str(exc).split(" (supported model_type")[0]) from None
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("NUL characters are not allowed")
    return value


HfConfig = Annotated[dict[str, Any], AfterValidator(_bounded_hf_config)]
BoundedJson = Annotated[dict[str, Any], AfterValidator(_bounded_json)]
NoNul = Annotated[str, AfterValidator(_no_nul)]


# -- numbers are numbers: JSON true/false is refused where a number is expected (pydantic's lax mode would take
# false as 0), in the request models and every override model nested in them.


def _bool_paths(annotation: Any, value: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _bool_paths(args[0], value, path)
    if origin in (Union, UnionType):
        if isinstance(value, bool) and bool in args:
            return []
        found = [_bool_paths(a, value, path) for a in args if a is not type(None)]
        return min(found, key=len) if found else []
    if isinstance(value, bool):
        return [path] if annotation in (int, float) else []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(value, dict):
        out: list[tuple[str, ...]] = []
        for name, field in annotation.model_fields.items():
            key = field.alias or name
            if key in value:
                out += _bool_paths(field.annotation, value[key], (*path, key))
        return out
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return [p for k, v in value.items() for p in _bool_paths(args[1], v, (*path, str(k)))]
    if origin is list and isinstance(value, list) and args:
        return [p for i, v in enumerate(value) for p in _bool_paths(args[0], v, (*path, str(i)))]
    return []


class StrictNumbers(BaseModel):
    """Base of request models: a boolean where a number is expected is an error naming the field."""

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        paths = _bool_paths(cls, data, ())
        if paths:
            raise ValueError(
                "expected a number, got true/false: " + ", ".join(".".join(p) for p in paths[:5])
            )
        return data


FigureOverrides = dict[Annotated[str, Field(max_length=80)], Annotated[float, Field(ge=0, le=1e15)]]
"""Catalog figures replaced for one plan or search (keys in app/domain/estimator/overrides.py)."""


class EstimateRequest(StrictNumbers):
    """Inputs of one estimate. ``model`` (a preset slug) or ``hf_config`` (a Hugging Face config.json object)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        default=None,
        max_length=200,
        description="architecture preset slug, e.g. llama3.1-70b, or a Hugging Face id (org/name[@revision]) "
        "whose config.json is in the server's local Hugging Face cache (never downloaded)",
    )
    hf_config: HfConfig | None = Field(
        default=None,
        description="a Hugging Face config.json, as JSON (nesting ≤ 20, integers ≤ 18 digits, "
        "num_hidden_layers ≤ 1,024, experts ≤ 4,096, vocab ≤ 4,194,304, …)",
    )
    gpu: str = Field(max_length=64, description="accelerator slug, e.g. h100-sxm")
    node: str | None = Field(
        default=None, max_length=64, description="node or instance slug (default: reference server)"
    )
    fabric: str | None = Field(
        default=None, max_length=64, description="scale-out fabric slug (default: the node's)"
    )
    gpus: int = Field(ge=1, le=1_048_576)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    vpp: int = Field(default=1, ge=1, le=64)
    dp: int | None = Field(default=None, ge=1, le=1_048_576, description="default: gpus / (tp·pp·cp)")
    cp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=1024)
    sharding: Sharding = Sharding.fsdp_full
    shard_group_size: int | None = Field(default=None, ge=1, le=1_048_576)
    offload: Offload = Offload.none
    micro_batch: int = Field(default=1, ge=1, le=4096)
    global_batch: int = Field(ge=1, le=16_777_216, description="sequences per optimizer step")
    seq_len: int = Field(ge=1, le=4_194_304)
    recompute: Recompute = Recompute.none
    recompute_layers: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="with full recompute: layers per pipeline chunk that recompute (the rest keep their "
        "activations); empty = every layer",
    )
    sequence_parallel: bool = False
    flash_attention: bool = True
    attention_kernel: AttentionKernel = Field(
        default="auto", description="fused attention kernel: auto = the framework's own"
    )
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adamw
    framework: Framework = Framework.fsdp2
    fused_kernels: bool | None = None
    fused_cross_entropy: bool = Field(
        default=False,
        description="fused linear cross-entropy (Liger-Kernel): the logits are never held whole",
    )
    tokens: float | None = Field(
        default=None, gt=0, le=1e16, description="tokens to train (for time to train)"
    )
    oversubscription: float = Field(default=1.0, ge=1.0, le=64.0)
    power_limit_w: float | None = Field(default=None, gt=0, le=5000)
    allow_tp_across_nodes: bool = False
    calibrated: bool = Field(
        default=True,
        description="use the calibration fitted from benchmark runs on this accelerator, when there is one "
        "(false: catalog defaults only, to compare)",
    )
    figure_overrides: FigureOverrides = Field(
        default_factory=dict,
        max_length=40,
        description="catalog figures replaced for this plan, e.g. {'accelerator.bf16_dense_tflops': 900, "
        "'efficiency.gemm_efficiency': 0.6}; see app/domain/estimator/overrides.py for the keys",
    )

    @model_validator(mode="after")
    def _one_model(self) -> EstimateRequest:
        if (self.model is None) == (self.hf_config is None):
            raise ValueError("give exactly one of model (a preset slug) or hf_config (a config.json object)")
        return self


# -- plan export (POST /api/v1/plans/export) ----------------------------------------------------------------


def _export_body_kind(value: Any) -> str:
    """A body with a ``schema`` key is a plan document; anything else is read as an estimate request."""
    if isinstance(value, dict):
        return "plan_document" if "schema" in value else "estimate_request"
    return "plan_document" if isinstance(value, PlanDocument) else "estimate_request"


PlanExportBody = Annotated[
    Annotated[EstimateRequest, Tag("estimate_request")] | Annotated[PlanDocument, Tag("plan_document")],
    Discriminator(_export_body_kind),
]
"""What the export endpoint takes: an estimate request (estimated first) or a capplan.plan/v1 document.
Validation errors name the branch: ``["body", "plan_document", "plan", "tp"]``."""


# --------------------------------------------------------------------------------------------------
# Cost and reliability (issue 5): `POST /api/v1/cost`, `POST /api/v1/cost/monthly`, `capplan cost`.

from app.domain.cost.inputs import CostOption, CostOverrides  # noqa: E402


class CostRequest(EstimateRequest):
    """ "Train ``tokens`` tokens with this plan": the estimate's inputs, plus the options to price and overrides
    of any cost or reliability figure (omitted figures come from the catalog, with their sources)."""

    tokens: float = Field(gt=0, le=1e16, description="tokens to train")
    options: list[CostOption] | None = Field(
        default=None, max_length=len(CostOption), description="pricing options (default: all)"
    )
    overrides: CostOverrides = Field(default_factory=CostOverrides)

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_a_number(cls, value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a number, got {value}")
        if isinstance(value, str) and value.strip().lower() in {
            "nan",
            "inf",
            "+inf",
            "-inf",
            "infinity",
            "-infinity",
        }:
            raise ValueError(f"must be a number, got {value.strip()}")
        return value


class MonthlyCostRequest(StrictNumbers):
    """The monthly bill of ``nodes`` × an instance or node running all month, for every option."""

    model_config = ConfigDict(extra="forbid")

    instance: str | None = Field(
        default=None, max_length=64, description="AWS instance slug, e.g. p5.48xlarge"
    )
    node: str | None = Field(
        default=None, max_length=64, description="node slug: a server (self-build) or an instance"
    )
    nodes: int = Field(ge=1, le=1_000_000, description="how many of the instance or node")
    options: list[CostOption] | None = Field(default=None, max_length=len(CostOption))
    months: int = Field(default=36, ge=1, le=120, description="length of the cumulative-cost series")
    overrides: CostOverrides = Field(default_factory=CostOverrides)

    @model_validator(mode="after")
    def _instance_or_node(self) -> MonthlyCostRequest:
        if self.instance is None and self.node is None:
            raise ValueError("give instance (an AWS instance slug) or node (a node slug)")
        return self


# --------------------------------------------------------------------------------------------------
# Plan search (issue 4): `POST /api/v1/plans/search`, `capplan plan`.

from app.domain.search.spec import Objective  # noqa: E402

RANGE_PATTERN = r"^\s*\d+(\.\d+)?([eE]\d+)?\s*:\s*\d+(\.\d+)?([eE]\d+)?\s*$"


class PlanSearchRequest(StrictNumbers):
    """Find the best plan: the model, the hardware, the cluster size (or a range of whole-node sizes), the
    batch (or a range in tokens), the objective, the constraints and, optionally, a narrower space."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        default=None,
        max_length=200,
        description="preset slug or Hugging Face id (org/name), as in the estimate",
    )
    hf_config: HfConfig | None = None
    gpu: str = Field(max_length=64)
    node: str | None = Field(default=None, max_length=64)
    fabric: str | None = Field(default=None, max_length=64)
    figure_overrides: FigureOverrides = Field(
        default_factory=dict,
        max_length=40,
        description="catalog figures replaced for every plan of the search, as for an estimate (the planner's "
        "overrides reach its search)",
    )
    gpus: int | None = Field(default=None, ge=1, le=1_048_576, description="a fixed GPU count")
    gpus_range: str | None = Field(default=None, pattern=RANGE_PATTERN, description="'A:B' GPUs, whole nodes")
    calibrated: bool = Field(
        default=True,
        description="use the accelerator's calibration from benchmark runs (false: catalog defaults)",
    )
    global_batch: int | None = Field(default=None, ge=1, le=16_777_216, description="sequences per step")
    global_batch_tokens: str | None = Field(
        default=None, pattern=RANGE_PATTERN, description="'A:B' tokens per step; power-of-two batches inside"
    )
    seq_len: int = Field(ge=1, le=4_194_304)
    objective: Objective = Objective.max_tokens_per_s
    top_k: int = Field(default=10, ge=1, le=100)
    headroom_gib: float = Field(default=0.0, ge=0, le=1024)
    headroom_percent: float = Field(default=0.0, ge=0, lt=90)
    framework: Framework = Framework.fsdp2
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adamw
    flash_attention: bool = True
    fused_kernels: bool | None = None
    fused_cross_entropy: bool = Field(
        default=False,
        description="fused linear cross-entropy (Liger-Kernel): the logits are never held whole",
    )
    attention_kernel: AttentionKernel = Field(
        default="auto", description="fused attention kernel: auto = the framework's own"
    )
    shardings: list[Sharding] | None = Field(default=None, max_length=len(Sharding))
    offloads: list[Offload] | None = Field(default=None, max_length=len(Offload))
    micro_batches: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(default=None, max_length=12)
    recomputes: list[Recompute] | None = Field(default=None, max_length=len(Recompute))
    vpps: list[Annotated[int, Field(ge=1, le=64)]] | None = Field(default=None, max_length=8)
    cps: list[Annotated[int, Field(ge=1, le=1024)]] | None = Field(default=None, max_length=8)
    max_pp: int = Field(default=64, ge=1, le=1024)
    max_tp: int | None = Field(default=None, ge=1, le=1024)
    allow_tp_across_nodes: bool = False
    tokens: float | None = Field(default=None, gt=0, le=1e16, description="tokens to train")
    deadline_days: float | None = Field(default=None, gt=0, le=3650)
    budget_usd: float | None = Field(default=None, gt=0, le=1e12)
    price_option: CostOption = Field(default=CostOption.on_demand, description="pricing for cost figures")
    overrides: CostOverrides = Field(
        default_factory=CostOverrides,
        description="price, reliability and storage figures replaced, as for the cost (the planner's price overrides "
        "reach its search)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PlanSearchRequest:
        if (self.model is None) == (self.hf_config is None):
            raise ValueError("give exactly one of model (a preset slug) or hf_config (a config.json object)")
        if (self.gpus is None) == (self.gpus_range is None):
            raise ValueError("give exactly one of gpus or gpus_range ('A:B')")
        if (self.global_batch is None) == (self.global_batch_tokens is None):
            raise ValueError("give exactly one of global_batch (sequences) or global_batch_tokens ('A:B')")
        if (self.deadline_days or self.budget_usd) and not self.tokens:
            raise ValueError("a deadline or a budget needs tokens (how many tokens to train)")
        return self


# --------------------------------------------------------------------------------------------------
# Benchmark results (issue 7): one schema shared by the runner (app/bench), the API and the pages.

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


# --------------------------------------------------------------------------------------------------
# Saved scenarios (issue 6): `GET/POST /api/v1/scenarios`, `GET/PUT/DELETE /api/v1/scenarios/{id}`.


class ScenarioCreate(StrictNumbers):
    """A scenario to save: a name, the estimate inputs (with ``tokens``) and any overridden catalog figures."""

    model_config = ConfigDict(extra="forbid")

    name: NoNul = Field(min_length=1, max_length=200)
    inputs: EstimateRequest
    overrides: CostOverrides = Field(default_factory=CostOverrides)


class ScenarioUpdate(StrictNumbers):
    """A change to a saved scenario. ``version`` is the one you read: a stale version is a 409."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1, description="the scenario's version when you read it (optimistic locking)")
    name: NoNul | None = Field(default=None, min_length=1, max_length=200)
    inputs: EstimateRequest | None = None
    overrides: CostOverrides | None = None


class ScenarioOut(BaseModel):
    id: int
    name: str
    inputs: dict[str, Any]
    overrides: dict[str, Any] = Field(description="catalog figures the user overrode (CostOverrides)")
    version: int
    created_at: datetime
    updated_at: datetime
    planner_url: str = Field(description="the page showing the planner with these inputs")


class ScenarioConflictOut(BaseModel):
    """409 body: someone saved the scenario since you read it."""

    detail: str
    version: int
