"""Pydantic I/O models shared by the API, the web layer, the CLI and the benchmark runner.

What lives where (``from app.schemas import X`` works for every name; each module is imported when one of its names
is first asked for, so a command that needs the search request does not build the benchmark, scenario or export
models — `capplan plan` starts faster, see README "Performance"):

- ``bounds``      — free-form JSON bounded (config.json, benchmark configs), :class:`StrictNumbers`
- ``requests``    — ``EstimateRequest``, ``CostRequest``, ``MonthlyCostRequest``, ``PlanSearchRequest``
- ``size``        — ``SizeRequest``, ``SizeRow``, ``SizeResult`` (the sizing search; ``from app.schemas.size import``)
- ``plan_export`` — ``PlanExportBody`` (an estimate request or a plan document; imports the export package)
- ``benchmarks``  — runner results and the calibration they feed
- ``scenarios``   — saved scenarios
- ``errors``      — the API's error bodies
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.schemas.benchmarks import (
        BENCH_SCHEMA,
        METRIC_PATTERN,
        BenchmarkIngestOut,
        BenchmarkMetricIn,
        BenchmarkMetricOut,
        BenchmarkResultIn,
        BenchmarkRunOut,
        BenchmarkRunSummary,
        CalibrationFigureOut,
        ShippedRunSummary,
        relative_error,
    )
    from app.schemas.bounds import JSON_MAX_DEPTH, BoundedJson, HfConfig, NoNul, StrictNumbers, load_json_text
    from app.schemas.errors import ErrorItem, ErrorOut, ValidationErrorOut
    from app.schemas.plan_export import PlanExportBody
    from app.schemas.requests import (
        MAX_GPUS,
        RANGE_PATTERN,
        CostRequest,
        EstimateRequest,
        FigureOverrides,
        GpusRange,
        MonthlyCostRequest,
        PlanSearchRequest,
        TokensRange,
        parse_range,
    )
    from app.schemas.scenarios import ScenarioConflictOut, ScenarioCreate, ScenarioOut, ScenarioUpdate

_HOME = {
    "ErrorItem": "errors",
    "ErrorOut": "errors",
    "ValidationErrorOut": "errors",
    "BoundedJson": "bounds",
    "HfConfig": "bounds",
    "JSON_MAX_DEPTH": "bounds",
    "NoNul": "bounds",
    "StrictNumbers": "bounds",
    "load_json_text": "bounds",
    "CostRequest": "requests",
    "EstimateRequest": "requests",
    "FigureOverrides": "requests",
    "MonthlyCostRequest": "requests",
    "PlanSearchRequest": "requests",
    "RANGE_PATTERN": "requests",
    "MAX_GPUS": "requests",
    "GpusRange": "requests",
    "TokensRange": "requests",
    "parse_range": "requests",
    "PlanExportBody": "plan_export",
    "BENCH_SCHEMA": "benchmarks",
    "BenchmarkIngestOut": "benchmarks",
    "BenchmarkMetricIn": "benchmarks",
    "BenchmarkMetricOut": "benchmarks",
    "BenchmarkResultIn": "benchmarks",
    "BenchmarkRunOut": "benchmarks",
    "BenchmarkRunSummary": "benchmarks",
    "CalibrationFigureOut": "benchmarks",
    "METRIC_PATTERN": "benchmarks",
    "ShippedRunSummary": "benchmarks",
    "relative_error": "benchmarks",
    "ScenarioConflictOut": "scenarios",
    "ScenarioCreate": "scenarios",
    "ScenarioOut": "scenarios",
    "ScenarioUpdate": "scenarios",
}
"""Each name, by the module that defines it."""

__all__ = [
    "BENCH_SCHEMA",
    "BenchmarkIngestOut",
    "BenchmarkMetricIn",
    "BenchmarkMetricOut",
    "BenchmarkResultIn",
    "BenchmarkRunOut",
    "BenchmarkRunSummary",
    "BoundedJson",
    "CalibrationFigureOut",
    "CostRequest",
    "ErrorItem",
    "ErrorOut",
    "EstimateRequest",
    "FigureOverrides",
    "GpusRange",
    "HfConfig",
    "JSON_MAX_DEPTH",
    "MAX_GPUS",
    "METRIC_PATTERN",
    "MonthlyCostRequest",
    "NoNul",
    "PlanExportBody",
    "PlanSearchRequest",
    "RANGE_PATTERN",
    "ScenarioConflictOut",
    "ScenarioCreate",
    "ScenarioOut",
    "ScenarioUpdate",
    "ShippedRunSummary",
    "StrictNumbers",
    "TokensRange",
    "ValidationErrorOut",
    "load_json_text",
    "parse_range",
    "relative_error",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
