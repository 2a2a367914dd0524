"""Benchmark run pages: the list (with each accelerator's active calibration) and one run's predicted vs
measured figures with the error."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.deps import RowId, get_catalog, get_session
from app.domain.catalog import Catalog
from app.services import (
    active_calibration,
    get_benchmark_run,
    list_benchmark_runs,
    load_calibrations,
    run_calibration_changes,
)
from app.web.htmx import render

router = APIRouter(include_in_schema=False)

CatalogDep = Annotated[Catalog, Depends(get_catalog)]
SessionDep = Annotated[Session, Depends(get_session)]


@router.get("/benchmarks", response_class=HTMLResponse)
def benchmarks_page(
    request: Request,
    catalog: CatalogDep,
    session: SessionDep,
    accelerator: Annotated[str, Query(max_length=64)] = "",
) -> HTMLResponse:
    runs = list_benchmark_runs(session, accelerator=accelerator or None)
    calibrations = load_calibrations(session)
    active = {slug: active_calibration(catalog, calibrations, slug) for slug in sorted(calibrations.fits)}
    context = {
        "runs": runs,
        "accelerator": accelerator,
        "accelerators": sorted({r.accelerator for r in list_benchmark_runs(session) if r.accelerator}),
        "active": {k: v for k, v in active.items() if v},
    }
    return render(request, "pages/benchmarks.html", context, block="results")


@router.get("/benchmarks/{run_id}", response_class=HTMLResponse)
def benchmark_run_page(
    request: Request,
    run_id: RowId,
    catalog: CatalogDep,
    session: SessionDep,
    rank: Annotated[str, Query(max_length=10)] = "all",
) -> HTMLResponse:
    run = get_benchmark_run(session, run_id)
    if run is None:
        raise HTTPException(404, f"no benchmark run {run_id}")
    samples = run.samples if rank == "all" else [s for s in run.samples if str(s.rank) == rank]
    changes = run_calibration_changes(catalog, run)
    active = []
    if run.accelerator:
        active = active_calibration(catalog, load_calibrations(session), run.accelerator)
    in_use = sorted({c.field for c in active if c.run_id == run.id})
    context = {
        "run": run,
        "samples": samples,
        "rank": rank,
        "ranks": ["all", *[str(r) for r in range(run.world_size)]],
        "changes": changes,
        "in_use": in_use,
    }
    return render(request, "pages/benchmarks_run.html", context)
