"""Benchmark runs: POST a runner result (bearer token), list and read them; the runs shipped under
data/calibration; the calibration in use. Each run on a catalog accelerator calibrates its estimates (see
app/domain/estimator/calibration.py and app/calibration_store.py)."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from sqlalchemy.orm import Session

from app.deps import RowId, get_catalog, get_session
from app.domain.catalog import Catalog
from app.schemas import (
    BenchmarkIngestOut,
    BenchmarkResultIn,
    BenchmarkRunOut,
    BenchmarkRunSummary,
    CalibrationFigureOut,
    ErrorOut,
    ShippedRunSummary,
    ValidationErrorOut,
)
from app.services.benchmarks import (
    calibration_in_use,
    get_benchmark_run,
    ingest_benchmark,
    list_benchmark_runs,
    run_calibration_changes,
    shipped_run_summary,
)

router = APIRouter(tags=["benchmarks"])


def require_token(request: Request) -> None:
    """``Authorization: Bearer <CAPPLAN_API_TOKEN>``: 401 without a bearer token, 403 with a wrong one (or
    while the server has no token configured: writes are refused)."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise HTTPException(401, "bearer token required", headers={"WWW-Authenticate": "Bearer"})
    token = request.app.state.settings.api_token
    if token is None:
        raise HTTPException(403, "writes are disabled: the server has no CAPPLAN_API_TOKEN")
    if not secrets.compare_digest(given.strip().encode(), token.get_secret_value().encode()):
        raise HTTPException(403, "invalid token")


@router.post(
    "/benchmarks",
    status_code=201,
    response_model=BenchmarkIngestOut,
    dependencies=[Depends(require_token)],
    responses={
        401: {"model": ErrorOut, "description": "no bearer token"},
        403: {"model": ErrorOut, "description": "wrong token (or writes disabled)"},
        422: {"model": ValidationErrorOut, "description": "not a capplan.bench/v1 result: field and reason"},
    },
    summary="Store a benchmark runner result (capplan bench run --report-to); it calibrates later estimates",
)
def post_benchmark(
    body: BenchmarkResultIn,
    request: Request,
    response: Response,
    catalog: Annotated[Catalog, Depends(get_catalog)],
    session: Annotated[Session, Depends(get_session)],
) -> BenchmarkIngestOut:
    run = ingest_benchmark(session, catalog, body)
    request.app.state.calibrations.invalidate()
    request.app.state.metrics.benchmark_ingests_total.labels(accelerator=body.accelerator or "none").inc()
    url = f"/api/v1/benchmarks/{run.id}"
    response.headers["Location"] = url
    changes = run_calibration_changes(catalog, run)
    return BenchmarkIngestOut(
        id=run.id,
        url=url,
        metrics=len(body.metrics),
        calibrates=[f"{c.field}: {c.default:g} → {c.value:g}" for c in changes],
    )


@router.get(
    "/benchmarks", response_model=list[BenchmarkRunSummary], summary="Stored benchmark runs, newest first"
)
def get_benchmarks(
    session: Annotated[Session, Depends(get_session)],
    accelerator: Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9._\-]*$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[BenchmarkRunSummary]:
    return list_benchmark_runs(session, accelerator=accelerator, limit=limit)


@router.get(
    "/benchmarks/shipped",
    response_model=list[ShippedRunSummary],
    summary="The runs shipped with capplan under data/calibration (measured on real GPUs by the project)",
)
def get_shipped_benchmarks(request: Request) -> list[ShippedRunSummary]:
    return [shipped_run_summary(s) for s in request.app.state.calibrations.shipped]


@router.get(
    "/benchmarks/shipped/{key:path}",
    response_model=BenchmarkResultIn,
    response_model_by_alias=True,
    responses={404: {"model": ErrorOut}},
    summary="One shipped run: the capplan.bench/v1 result file as committed",
)
def get_shipped_benchmark(request: Request, key: Annotated[str, Path(max_length=300)]) -> BenchmarkResultIn:
    run = request.app.state.calibrations.shipped_run(key)
    if run is None:
        raise HTTPException(404, f"no shipped run {key!r}")
    return run.result


@router.get(
    "/calibration",
    response_model=list[CalibrationFigureOut],
    summary="The catalog figures calibration replaces now, per accelerator, and the run each comes from",
)
def get_calibration(catalog: Annotated[Catalog, Depends(get_catalog)]) -> list[CalibrationFigureOut]:
    return calibration_in_use(catalog)


@router.get(
    "/benchmarks/{run_id}",
    response_model=BenchmarkRunOut,
    responses={404: {"model": ErrorOut}},
    summary="One run: configuration, hardware, software and every measured figure next to its prediction",
)
def get_benchmark(run_id: RowId, session: Annotated[Session, Depends(get_session)]) -> BenchmarkRunOut:
    run = get_benchmark_run(session, run_id)
    if run is None:
        raise HTTPException(404, f"no benchmark run {run_id}")
    return run
