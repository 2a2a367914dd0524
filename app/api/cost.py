"""POST /api/v1/cost and /api/v1/cost/monthly: what training costs on AWS and on your own cluster."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from app.deps import get_catalog
from app.domain.catalog import Catalog
from app.domain.cost.monthly import MonthlyCost
from app.domain.cost.training import TrainingCost
from app.schemas import CostRequest, MonthlyCostRequest, ValidationErrorOut
from app.services.cost import run_cost, run_monthly_cost

router = APIRouter(tags=["cost"])

INVALID = {422: {"model": ValidationErrorOut, "description": "invalid input: field and reason"}}


@router.post(
    "/cost",
    response_model=TrainingCost,
    responses=INVALID,
    summary="Days and dollars to train N tokens with a plan, per pricing option, after failures and checkpoints",
)
def post_cost(body: CostRequest, catalog: Annotated[Catalog, Depends(get_catalog)]) -> TrainingCost:
    return run_cost(catalog, body)


@router.post(
    "/cost/monthly",
    response_model=MonthlyCost,
    responses=INVALID,
    summary="Monthly cost of a cluster per pricing option, self-build capex and opex, break-even months",
)
def post_cost_monthly(
    body: MonthlyCostRequest, catalog: Annotated[Catalog, Depends(get_catalog)]
) -> MonthlyCost:
    return run_monthly_cost(catalog, body)
