"""POST /api/v1/plans/search: the best parallelism plans for a model on a cluster, and why."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from app.deps import get_catalog
from app.domain.catalog import Catalog
from app.domain.search.spec import SearchResult
from app.schemas import ErrorOut, PlanSearchRequest, ValidationErrorOut
from app.services.search import timed_search

router = APIRouter(tags=["plans"])


@router.post(
    "/plans/search",
    response_model=SearchResult,
    responses={
        422: {
            "model": ValidationErrorOut,
            "description": "invalid input, or a space too large (how to narrow it)",
        },
        503: {
            "model": ErrorOut,
            "description": "every search slot busy, or the search ran past its time budget (Retry-After)",
        },
    },
    summary="Search every TP × PP × DP × CP × EP / sharding / micro-batch / recompute plan; best first",
)
def post_search(
    body: PlanSearchRequest, request: Request, catalog: Annotated[Catalog, Depends(get_catalog)]
) -> SearchResult:
    settings = request.app.state.settings
    state = request.app.state
    return timed_search(catalog, body, state.metrics, "api", settings.search_max_plans, state.search_budget)
