"""Benchmark runs (stored and shipped) and the calibration they give the estimator."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.calibration_store import (
    ShippedRun,
    calibration_run_from,
    shipped_calibration_run,
    stored_calibration_run,
)
from app.db.tables import BenchmarkRun, BenchmarkSample
from app.domain.catalog import Catalog
from app.domain.estimator.calibration import (
    Calibrations,
    Change,
    apply_calibration,
    calibration_changes,
    fit_run,
)
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.estimate import HardwareError, build_cluster
from app.schemas import (
    BenchmarkMetricOut,
    BenchmarkResultIn,
    BenchmarkRunOut,
    BenchmarkRunSummary,
    CalibrationFigureOut,
    ShippedRunSummary,
    relative_error,
)
from app.services.errors import InputError, field_error


def ingest_benchmark(session: Session, catalog: Catalog, result: BenchmarkResultIn) -> BenchmarkRun:
    """Store one runner result (run + every sample) in one transaction; unknown catalog slugs are a 422."""
    errors = []
    if result.accelerator is not None:
        try:
            catalog.hardware.accelerator(result.accelerator)
        except KeyError as exc:
            errors.append(
                field_error("accelerator", str(exc.args[0] if exc.args else exc), "value_error.unknown_slug")
            )
    if result.node is not None:
        try:
            catalog.hardware.node(result.node)
        except KeyError as exc:
            errors.append(
                field_error("node", str(exc.args[0] if exc.args else exc), "value_error.unknown_slug")
            )
    if errors:
        raise InputError(errors)
    run = BenchmarkRun(
        preset=result.preset, accelerator_slug=result.accelerator, node_slug=result.node,
        world_size=result.world_size, config={**result.config, "nodes": result.nodes},
        hardware={**result.hardware, "device_name": result.device_name}, software=result.software,
        notes=result.notes, measured_at=result.measured_at,
        samples=[BenchmarkSample(rank=m.rank, metric=m.metric, unit=m.unit, measured=m.measured,
                                 predicted=m.predicted) for m in result.metrics],
    )  # fmt: skip
    with session.begin():
        session.add(run)
    return run


def _median_abs_error(samples: Sequence[Any]) -> float | None:
    """Median |measured/predicted − 1| over the samples (stored rows or result metrics) that have a prediction."""
    errs = [abs(e) for s in samples if (e := relative_error(s.measured, s.predicted)) is not None]
    return statistics.median(errs) if errs else None


def _summary(run: BenchmarkRun) -> dict[str, Any]:
    return dict(
        id=run.id, preset=run.preset, accelerator=run.accelerator_slug, node=run.node_slug,
        world_size=run.world_size, device_name=str(run.hardware.get("device_name", "")),
        measured_at=run.measured_at, created_at=run.created_at, metrics=len(run.samples),
        median_abs_error=_median_abs_error(run.samples),
    )  # fmt: skip


def list_benchmark_runs(
    session: Session, *, accelerator: str | None = None, limit: int = 200
) -> list[BenchmarkRunSummary]:
    query = select(BenchmarkRun).options(selectinload(BenchmarkRun.samples))
    if accelerator:
        query = query.where(BenchmarkRun.accelerator_slug == accelerator)
    query = query.order_by(BenchmarkRun.id.desc()).limit(limit)
    return [BenchmarkRunSummary(**_summary(r)) for r in session.scalars(query)]


def get_benchmark_run(session: Session, run_id: int) -> BenchmarkRunOut | None:
    run = session.get(BenchmarkRun, run_id, options=[selectinload(BenchmarkRun.samples)])
    if run is None:
        return None
    samples = [
        BenchmarkMetricOut(metric=s.metric, unit=s.unit, rank=s.rank, measured=s.measured, predicted=s.predicted,
                           relative_error=relative_error(s.measured, s.predicted))
        for s in run.samples
    ]  # fmt: skip
    return BenchmarkRunOut(
        **_summary(run), config=run.config, hardware=run.hardware, software=run.software, notes=run.notes,
        samples=samples,
    )  # fmt: skip


def run_calibration_changes(
    catalog: Catalog, run: BenchmarkRunOut | BenchmarkRun | ShippedRun
) -> list[Change]:
    """What this one run (stored or shipped) would change on its accelerator's reference cluster (its page)."""
    if isinstance(run, ShippedRun):
        cal = shipped_calibration_run(run)
        world_size, node = run.result.world_size, run.result.node
    elif isinstance(run, BenchmarkRun):
        cal, world_size, node = stored_calibration_run(run), run.world_size, run.node_slug
    else:
        cal = calibration_run_from(
            run_id=run.id, measured_at=run.measured_at, accelerator=run.accelerator, world_size=run.world_size,
            config=run.config, samples=run.samples, href=f"/benchmarks/{run.id}",
        )  # fmt: skip
        world_size, node = run.world_size, run.node
    if cal is None:
        return []
    cluster = reference_cluster(catalog, cal.accelerator, gpus=max(1, world_size), node=node)
    return calibration_changes(cluster, fit_run(cal)) if cluster is not None else []


def reference_cluster(
    catalog: Catalog, accelerator: str, gpus: int = 1, node: str | None = None
) -> Cluster | None:
    """The cluster a calibration is shown on: ``node`` (the run's) or the accelerator's reference node; None
    when the catalog has no node for the accelerator (its runs are stored, but nothing can be estimated on it)."""
    for candidate in (node, None) if node else (None,):
        try:
            return build_cluster(
                catalog.hardware, catalog.efficiency, accelerator=accelerator, gpus=gpus, node=candidate
            )
        except (HardwareError, KeyError):
            continue
    return None


def shipped_run_summary(run: ShippedRun) -> ShippedRunSummary:
    r = run.result
    return ShippedRunSummary(
        key=run.key, url=run.href, api_url=f"/api/v1/benchmarks/shipped/{run.key}", preset=r.preset,
        accelerator=r.accelerator, node=r.node, world_size=r.world_size, device_name=r.device_name,
        measured_at=r.measured_at, metrics=len(r.metrics), software=r.software,
        median_abs_error=_median_abs_error(r.metrics),
    )  # fmt: skip


def shipped_run_out(run: ShippedRun) -> BenchmarkRunOut:
    """A shipped file in the shape of a stored run (id 0), for the run page."""
    r = run.result
    samples = [
        BenchmarkMetricOut(metric=m.metric, unit=m.unit, rank=m.rank, measured=m.measured, predicted=m.predicted,
                           relative_error=relative_error(m.measured, m.predicted))
        for m in r.metrics
    ]  # fmt: skip
    summary = shipped_run_summary(run)
    return BenchmarkRunOut(
        id=0, preset=r.preset, accelerator=r.accelerator, node=r.node, world_size=r.world_size,
        device_name=r.device_name, measured_at=r.measured_at, created_at=r.measured_at, metrics=len(r.metrics),
        median_abs_error=summary.median_abs_error, config={**r.config, "nodes": r.nodes}, hardware=r.hardware,
        software=r.software, notes=r.notes, samples=samples,
    )  # fmt: skip


def calibration_in_use(catalog: Catalog) -> list[CalibrationFigureOut]:
    """Every figure the catalog's calibration replaces, per accelerator (reference node, one GPU)."""
    cal = catalog.calibrations
    if cal is None:
        return []
    return [
        CalibrationFigureOut(
            accelerator=slug,
            part=c.part,
            field=c.field,
            default=c.default,
            value=c.value,
            run=c.run,
            run_url=c.run_href,
            measured_at=c.measured_at,
            method=c.method,
        )  # fmt: skip
        for slug in sorted(cal.fits)
        for c in active_calibration(catalog, cal, slug)
    ]


def active_calibration(catalog: Catalog, calibrations: Calibrations, accelerator: str) -> list[Change]:
    """The figures the estimator currently replaces on ``accelerator`` (reference node, one GPU)."""
    cluster = reference_cluster(catalog, accelerator)
    return apply_calibration(cluster, calibrations)[1] if cluster is not None else []
