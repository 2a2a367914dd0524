"""Benchmark run pages: the list (with each accelerator's active calibration) and one run's predicted vs
measured figures with the error."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy.orm import Session

from app.deps import RowId, get_catalog, get_session
from app.domain.catalog import Catalog
from app.schemas import BenchmarkRunOut
from app.services.benchmarks import (
    active_calibration,
    get_benchmark_run,
    list_benchmark_runs,
    run_calibration_changes,
    shipped_run_out,
    shipped_run_summary,
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
    accelerator: Annotated[str, Query(max_length=64, pattern=r"^[A-Za-z0-9._\-]*$")] = "",
) -> HTMLResponse:
    runs = list_benchmark_runs(session, accelerator=accelerator or None)
    calibrations = catalog.calibrations  # what estimates use now (the app's cache: shipped + posted runs)
    fits = calibrations.fits if calibrations else {}
    active = {slug: active_calibration(catalog, calibrations, slug) for slug in sorted(fits)}  # type: ignore[arg-type]
    shipped = [shipped_run_summary(s) for s in request.app.state.calibrations.shipped]
    context = {
        "runs": runs,
        "shipped": [s for s in shipped if not accelerator or s.accelerator == accelerator],
        "accelerator": accelerator,
        "accelerators": sorted(
            {r.accelerator for r in list_benchmark_runs(session) if r.accelerator}
            | {s.accelerator for s in shipped if s.accelerator}
        ),
        "active": {k: v for k, v in active.items() if v},
    }
    return render(request, "pages/benchmarks.html", context, block="results")


def _run_page(
    request: Request, catalog: Catalog, run: BenchmarkRunOut, changes: list, *,
    title: str, label: str, page_url: str, json_url: str, rank: str,
) -> HTMLResponse:  # fmt: skip
    samples = run.samples if rank == "all" else [s for s in run.samples if str(s.rank) == rank]
    active = []
    if run.accelerator and catalog.calibrations is not None:
        active = active_calibration(catalog, catalog.calibrations, run.accelerator)
    in_use = sorted({c.field for c in active if c.run == label})
    context = {
        "run": run, "title": title, "page_url": page_url, "json_url": json_url, "samples": samples, "rank": rank,
        "ranks": ["all", *[str(r) for r in range(run.world_size)]], "changes": changes, "in_use": in_use,
        "shipped": run.id == 0,
    }  # fmt: skip
    return render(request, "pages/benchmarks_run.html", context)


@router.get("/benchmarks/shipped", include_in_schema=False)
def shipped_runs_list() -> RedirectResponse:
    """The shipped runs are listed on the runs page."""
    return RedirectResponse("/benchmarks#shipped", status_code=302)


@router.get("/benchmarks/shipped/{key:path}", response_class=HTMLResponse)
def shipped_run_page(
    request: Request,
    key: Annotated[str, Path(max_length=300)],
    catalog: CatalogDep,
    rank: Annotated[str, Query(max_length=10)] = "all",
) -> HTMLResponse:
    shipped = request.app.state.calibrations.shipped_run(key)
    if shipped is None:
        raise HTTPException(404, f"no shipped run {key!r}")
    return _run_page(
        request, catalog, shipped_run_out(shipped), run_calibration_changes(catalog, shipped),
        title=f"Shipped run {key}", label=shipped.label, page_url=shipped.href,
        json_url=f"/api/v1/benchmarks/shipped/{key}", rank=rank,
    )  # fmt: skip


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
    return _run_page(
        request, catalog, run, run_calibration_changes(catalog, run), title=f"Run {run.id}",
        label=f"run {run.id}", page_url=f"/benchmarks/{run.id}", json_url=f"/api/v1/benchmarks/{run.id}", rank=rank,
    )  # fmt: skip
