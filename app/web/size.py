""" "Size a cluster": the newcomer's entry point — a model and a token count, optionally a deadline and a
budget; every accelerator, cluster size, plan and way to pay is searched (:func:`app.services.size.run_size`).

``GET /size`` shows the form; with ``model`` and ``tokens`` in the query it runs the search and renders the
ranked table, the Pareto chart of days against dollars, the losses by reason and the winner's plan document
(``{% block size_results %}``) — the bookmarkable, script-free path. The page itself posts the form to
``POST /size/jobs``, which starts the run in the background (:mod:`app.services.size_jobs`) and answers at once
with a progress panel that polls ``GET /size/jobs/{id}`` every second (htmx ``every 1s``) until that answers the
results; the address bar gets the ``GET /size?…`` URL of the same run. Errors keep what the user typed (only the
results panel is swapped). Nothing is computed here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from app.deps import get_catalog
from app.domain.catalog import Catalog
from app.domain.cost.inputs import CostOption
from app.services.errors import InputError
from app.services.search import SearchBusy
from app.services.size import (
    DEFAULT_GPUS_RANGE,
    DEFAULT_OPTIONS,
    SizeRequest,
    SizeResult,
    SizingProgress,
    check_size_request,
    run_size,
)
from app.services.size_jobs import SizingJob
from app.web.htmx import render
from app.web.security import verify_csrf

router = APIRouter(include_in_schema=False)
CatalogDep = Annotated[Catalog, Depends(get_catalog)]

FIELDS = {
    "model": "llama3.1-70b",
    "tokens": "15e12",
    "deadline_days": "",
    "budget_usd": "",
    "accelerators": "",
    "options": ",".join(o.value for o in DEFAULT_OPTIONS),
    "gpus_range": DEFAULT_GPUS_RANGE,
    "front_tolerance_pct": "1",
    "basis": "amortised",
    "region": "",
    "prices_as_of": "",
    "use_after_run_years": "",
    "runs": "",
}


def _list(text: str) -> list[str] | None:
    items = [t.strip() for t in text.split(",") if t.strip()]
    return items or None


def size_request(values: dict[str, str]) -> tuple[SizeRequest | None, dict[str, str]]:
    """The request the form describes, or the errors by field (the form keeps what the user typed)."""
    body: dict[str, Any] = {"model": values["model"].strip(), "gpus_range": values["gpus_range"].strip()}
    errors: dict[str, str] = {}
    for key in ("tokens", "deadline_days", "budget_usd"):
        text = values[key].strip().replace(",", "").replace("_", "")
        if not text:
            continue
        try:
            body[key] = float(text)
        except ValueError:
            errors[key] = "a number, e.g. 15e12"
    body["accelerators"] = _list(values["accelerators"])
    body["options"] = _list(values["options"])
    body["basis"] = values["basis"].strip() or "amortised"
    for key in (
        "region",
        "prices_as_of",
        "use_after_run_years",
        "runs",
        "front_tolerance_pct",
    ):  # pydantic reads it
        if values[key].strip():
            body[key] = values[key].strip()
    if errors:
        return None, errors
    try:
        return SizeRequest.model_validate(body), {}
    except ValidationError as exc:
        return None, {
            str(e["loc"][0]) if e["loc"] else "model": str(e["msg"]).removeprefix("Value error, ")
            for e in exc.errors()
        }


def pareto_chart(result: SizeResult) -> dict[str, Any]:
    """ECharts option: every ranked point and the whole catalog's Pareto front, days against $ on the ranking's
    basis (amortised or cash)."""
    cash = result.ranked_on == "cash"

    def point(r: Any) -> dict[str, Any]:
        return {
            "value": [round(r.days, 2), round((r.usd_cash if cash else r.usd_amortised) / 1e6, 3)],
            "name": f"{r.gpus} × {r.accelerator} ({r.offer}, {r.option})",
        }

    return {
        "title": {"text": f"Days against $ ({result.ranked_on}), whole catalog", "left": "center",
                  "textStyle": {"fontSize": 14}},
        "animation": False,
        "tooltip": {"trigger": "item", "formatter": "{b}: {c}"},
        "legend": {"top": 28},
        "grid": {"left": 70, "right": 30, "top": 70, "bottom": 50},
        "xAxis": {"type": "log", "name": "days after failures", "nameLocation": "middle", "nameGap": 28},
        "yAxis": {"type": "log", "name": f"$ M ({result.ranked_on})"},
        "series": [
            {"name": "ranked", "type": "scatter", "symbolSize": 9, "itemStyle": {"color": "#4e79a7"},
             "data": [point(r) for r in result.ranked]},
            {"name": "Pareto front", "type": "line", "step": "end", "symbolSize": 11,
             "itemStyle": {"color": "#e15759"}, "data": [point(r) for r in result.pareto]},
        ],
    }  # fmt: skip


def _context(catalog: Catalog, values: dict[str, str], errors: dict[str, str], result: SizeResult | None = None,
             job: SizingJob | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "values": values, "errors": errors, "result": result, "job": job,
        "progress": progress_view(job) if job is not None else None,  # the panel that polls the job
        "chart_option": pareto_chart(result) if result is not None and result.pareto else None,
        "plan_json": json.dumps(result.plan_document, indent=2) if result and result.plan_document else None,
        "models": sorted(a.slug for a in catalog.architectures),
        "accelerators": sorted({n.accelerator for n in catalog.hardware.nodes}),
        "all_options": [o.value for o in CostOption],
    }  # fmt: skip


def _error_fields(exc: Exception) -> dict[str, str]:
    """The form fields an error of the sizing names (InputError), or "search" for the rest."""
    if isinstance(exc, InputError):
        errors = {}
        for e in exc.errors:
            loc = [str(p) for p in e.get("loc", []) if p != "body"]
            errors[loc[0] if loc else "model"] = str(e.get("msg", ""))
        return errors
    return {"search": str(exc)}


def progress_view(job: SizingJob) -> dict[str, Any]:
    """What the progress panel shows of a running job."""
    p = job.progress
    elapsed = time.monotonic() - job.started
    if p is None:
        return {"text": "Starting…", "done": 0, "total": 0, "valid": 0, "evaluated": 0, "elapsed": elapsed}
    if p.phase == "bounds":
        text = f"Bounding node {p.done + 1} of {p.total} ({p.label}): memory and speed bounds of every size"
    elif p.phase == "search":
        text = f"Searching (node, size) pair {p.done + 1} of {p.total}: {p.label}"
    else:
        text = "Pricing and ranking…"
    return {"text": text, "done": p.done, "total": p.total, "valid": p.valid_plans, "evaluated": p.evaluated_plans,
            "elapsed": elapsed}  # fmt: skip


@router.get("/size", response_class=HTMLResponse)
def size_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    params = dict(request.query_params)
    asked = "model" in params or "tokens" in params
    values = {k: params.get(k, v) for k, v in FIELDS.items()}
    errors: dict[str, str] = {}
    result = None
    if asked:
        req, errors = size_request(values)
        if req is not None:
            try:
                state = request.app.state
                result = run_size(
                    catalog, req, max_plans=state.settings.search_max_plans, budget=state.search_budget
                )
            except (InputError, SearchBusy) as exc:
                errors = _error_fields(exc)
    ctx = _context(catalog, values, errors, result)
    return render(request, "pages/size.html", ctx, block="size_results", status_code=422 if errors else 200)


@router.post("/size/jobs", response_class=HTMLResponse, dependencies=[Depends(verify_csrf)])
async def start_sizing(request: Request, catalog: CatalogDep) -> HTMLResponse:
    """Start a sizing run from the form; answer the progress panel that polls it (202, even when the run is already
    over: the next poll answers its results), or the errors (422)."""
    form = await request.form()
    values = {k: str(form.get(k, v)) for k, v in FIELDS.items()}
    req, errors = size_request(values)
    status = 422
    job = None
    if req is not None:
        try:
            check_size_request(catalog, req)  # the model, accelerators and options, before the run starts
        except InputError as exc:
            req, errors = None, _error_fields(exc)
    if req is not None:
        state = request.app.state

        def run(progress: Callable[[SizingProgress], None]) -> SizeResult:
            return run_size(catalog, req, progress=progress, max_plans=state.settings.search_max_plans,
                            budget=state.search_budget)  # fmt: skip

        try:
            job = state.sizing_jobs.start(values, run)
            status = 202
        except SearchBusy as exc:
            errors, status = _error_fields(exc), 503
    response = render(request, "pages/size.html", _context(catalog, values, errors, job=job),
                      block="size_results", status_code=status)  # fmt: skip
    if job is not None:  # the address of the same run without scripts (and for a bookmark)
        query = urlencode({k: v for k, v in values.items() if v.strip()})
        response.headers["HX-Replace-Url"] = f"/size?{query}"
    return response


@router.get("/size/jobs/{job_id}", response_class=HTMLResponse)
def sizing_job(request: Request, catalog: CatalogDep, job_id: str) -> HTMLResponse:
    """A sizing run's progress while it runs (the panel keeps polling), then its results; 404 for a run this
    server does not hold (finished long ago, or started by another worker)."""
    job = request.app.state.sizing_jobs.get(job_id)
    if job is None:
        errors = {"search": "this sizing run is no longer held by the server (it finished a while ago, or the "
                            "server restarted): submit the form again"}  # fmt: skip
        return render(request, "pages/size.html", _context(catalog, dict(FIELDS), errors), block="size_results",
                      status_code=404)  # fmt: skip
    if not job.done:
        return render(
            request, "pages/size.html", _context(catalog, job.values, {}, job=job), block="size_results"
        )
    # done: the results (or what went wrong) replace the panel, which stops polling
    if job.error is not None:
        status = getattr(job.error, "status_code", 500 if not isinstance(job.error, InputError) else 422)
        return render(request, "pages/size.html", _context(catalog, job.values, _error_fields(job.error)),
                      block="size_results", status_code=status)  # fmt: skip
    return render(
        request, "pages/size.html", _context(catalog, job.values, {}, job.result), block="size_results"
    )
