"""POST /api/v1/size: which accelerator, how many, which plan and which way to pay, across the catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from app.deps import get_catalog
from app.domain.catalog import Catalog
from app.schemas import ErrorOut, ValidationErrorOut
from app.services.size import SizeRequest, SizeResult, run_size

router = APIRouter(tags=["plans"])


@router.post(
    "/size",
    response_model=SizeResult,
    responses={
        422: {"model": ValidationErrorOut, "description": "invalid input (the field and the reason)"},
        503: {
            "model": ErrorOut,
            "description": "every search slot busy, or the search ran past its time budget (Retry-After)",
        },
    },
    summary="Size a cluster: every accelerator × whole-node size × plan × pricing option, ranked, with the "
    "Pareto front of days vs dollars and the winner's plan document",
)
def post_size(
    body: SizeRequest, request: Request, catalog: Annotated[Catalog, Depends(get_catalog)]
) -> SizeResult:
    state = request.app.state
    return run_size(catalog, body, max_plans=state.settings.search_max_plans, budget=state.search_budget)
