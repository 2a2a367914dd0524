"""POST /api/v1/size: which accelerator, how many, which plan and which way to pay, across the catalog.

Two ways to run it: ``POST /api/v1/size`` answers the result in one request (a few seconds for the whole catalog;
the server's search budget, CAPPLAN_SEARCH_TIMEOUT_S, stops a longer one with 503); ``POST /api/v1/size/jobs``
starts the same run in the background and answers at once (202, ``Location``), and ``GET /api/v1/size/jobs/{id}``
reports where it stands (phase, pairs settled of all, plans covered and evaluated, seconds) until it holds the
result. The jobs are the "Size a cluster" page's (:mod:`app.services.size_jobs`): in the memory of the worker
that started them, finished ones kept 15 minutes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from pydantic import BaseModel

from app.deps import get_catalog
from app.domain.catalog import Catalog
from app.schemas import ErrorOut, ValidationErrorOut
from app.services.errors import InputError
from app.services.search import SearchBusy
from app.services.size import SizeRequest, SizeResult, SizingProgress, check_size_request, run_size
from app.services.size_jobs import SizingJob

router = APIRouter(tags=["plans"])

BUSY = {
    "model": ErrorOut,
    "description": "every search slot busy, or the search ran past its time budget (Retry-After)",
}


@router.post(
    "/size",
    response_model=SizeResult,
    responses={
        422: {"model": ValidationErrorOut, "description": "invalid input (the field and the reason)"},
        503: BUSY,
    },
    summary="Size a cluster: every accelerator × whole-node size × plan × pricing option, ranked, with the "
    "Pareto front of days vs dollars and the winner's plan document",
)
def post_size(
    body: SizeRequest, request: Request, catalog: Annotated[Catalog, Depends(get_catalog)]
) -> SizeResult:
    state = request.app.state
    return run_size(catalog, body, max_plans=state.settings.search_max_plans, budget=state.search_budget)


class SizeJobProgress(BaseModel):
    """Where a running sizing stands: ``phase`` "bounds" (``done`` of ``total`` nodes bounded), "search"
    (``done`` of ``total`` (node, size) pairs settled, ``label`` the pair being searched) or "done"."""

    phase: str
    done: int
    total: int
    label: str
    valid_plans: int
    evaluated_plans: int
    elapsed_s: float


class SizeJobError(BaseModel):
    """Why a job ended without a result: the status a synchronous request would have had, and its detail."""

    status_code: int
    detail: str | list[dict[str, Any]]


class SizeJobOut(BaseModel):
    """A background sizing run: ``running`` (with its progress), ``done`` (with ``result``, the body
    ``POST /api/v1/size`` answers) or ``failed`` (with ``error``). Poll ``poll`` until it is not running."""

    id: str
    status: Literal["running", "done", "failed"]
    poll: str
    progress: SizeJobProgress | None = None
    result: SizeResult | None = None
    error: SizeJobError | None = None


def _form_values(body: SizeRequest) -> dict[str, str]:
    """The request as the page's form fields, so the page can show an API job too (``GET /size/jobs/{id}``)."""

    def text(x: float | None) -> str:
        return (
            "" if x is None else repr(x).removesuffix(".0")
        )  # exact: the form reads it back as the same float

    return {
        "model": body.model, "tokens": text(body.tokens), "deadline_days": text(body.deadline_days),
        "budget_usd": text(body.budget_usd), "accelerators": ",".join(body.accelerators or []),
        "options": ",".join(o.value for o in body.options or []), "gpus_range": body.gpus_range,
        "front_tolerance_pct": text(body.front_tolerance_pct),
        "basis": body.basis, "region": body.region or "", "prices_as_of": str(body.prices_as_of or ""),
        "use_after_run_years": text(body.use_after_run_years), "runs": "" if body.runs is None else str(body.runs),
    }  # fmt: skip


def _out(job: SizingJob) -> SizeJobOut:
    poll = f"/api/v1/size/jobs/{job.id}"
    p = job.progress
    progress = (
        SizeJobProgress(phase=p.phase, done=p.done, total=p.total, label=p.label, valid_plans=p.valid_plans,
                        evaluated_plans=p.evaluated_plans, elapsed_s=p.elapsed_s)
        if p is not None else None
    )  # fmt: skip
    if not job.done:
        return SizeJobOut(id=job.id, status="running", poll=poll, progress=progress)
    if job.error is None:
        return SizeJobOut(id=job.id, status="done", poll=poll, progress=progress, result=job.result)
    exc = job.error
    if isinstance(exc, InputError):
        error = SizeJobError(status_code=422, detail=exc.errors)
    elif isinstance(exc, SearchBusy):
        error = SizeJobError(status_code=exc.status_code, detail=str(exc))
    else:  # logged by the job store with its traceback
        error = SizeJobError(status_code=500, detail="internal error; the server log has the details")
    return SizeJobOut(id=job.id, status="failed", poll=poll, progress=progress, error=error)


@router.post(
    "/size/jobs",
    response_model=SizeJobOut,
    status_code=202,
    responses={
        422: {"model": ValidationErrorOut, "description": "invalid input (the field and the reason)"},
        503: {
            "model": ErrorOut,
            "description": "as many sizing runs as the server holds are running (Retry-After)",
        },
    },
    summary="Start a sizing run in the background; poll GET /api/v1/size/jobs/{id} for its progress and result",
)
def start_size_job(
    body: SizeRequest, request: Request, response: Response, catalog: Annotated[Catalog, Depends(get_catalog)]
) -> SizeJobOut:
    check_size_request(
        catalog, body
    )  # the model, accelerators and options: a 422 now, not a failed job later
    state = request.app.state

    def run(progress: Callable[[SizingProgress], None]) -> SizeResult:
        return run_size(catalog, body, progress=progress, max_plans=state.settings.search_max_plans,
                        budget=state.search_budget)  # fmt: skip

    job = state.sizing_jobs.start(_form_values(body), run)
    response.headers["Location"] = f"/api/v1/size/jobs/{job.id}"
    return _out(job)


@router.get(
    "/size/jobs/{job_id}",
    response_model=SizeJobOut,
    responses={404: {"model": ErrorOut, "description": "no such run on this worker (finished over 15 minutes ago, "
                                                          "the server restarted, or another worker holds it)"}},
    summary="A background sizing run: its progress while it runs, then its result (or why it failed)",
)  # fmt: skip
def get_size_job(job_id: str, request: Request) -> SizeJobOut:
    job = request.app.state.sizing_jobs.get(job_id)
    if job is None:
        raise HTTPException(404, "no such sizing run on this server: it finished over 15 minutes ago, the server "
                                 "restarted, or it was started on another worker; start it again")  # fmt: skip
    return _out(job)
