"""Per-app Prometheus registry: HTTP metrics from the instrumentator plus capplan's own counters."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass(frozen=True)
class AppMetrics:
    registry: CollectorRegistry
    estimates_total: Counter
    estimate_duration_seconds: Histogram
    searches_total: Counter
    benchmark_ingests_total: Counter
    catalog_entries: Gauge


def build_metrics() -> AppMetrics:
    registry = CollectorRegistry(auto_describe=True)
    return AppMetrics(
        registry=registry,
        estimates_total=Counter(
            "capplan_estimates_total", "Estimates computed", ["surface"], registry=registry
        ),
        estimate_duration_seconds=Histogram(
            "capplan_estimate_duration_seconds",
            "Time to compute one estimate",
            buckets=(1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.1),
            registry=registry,
        ),
        searches_total=Counter("capplan_searches_total", "Plan searches run", ["surface"], registry=registry),
        benchmark_ingests_total=Counter(
            "capplan_benchmark_results_ingested_total",
            "Benchmark runs ingested",
            ["accelerator"],
            registry=registry,
        ),
        catalog_entries=Gauge(
            "capplan_catalog_entries", "Catalog entries by kind", ["kind"], registry=registry
        ),
    )
