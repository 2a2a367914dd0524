"""POST /api/v1/estimate: memory per stage, step time, throughput and MFU for one plan."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from app.deps import get_catalog
from app.domain.catalog import Catalog
from app.domain.estimator.estimate import Estimate
from app.schemas import EstimateRequest, ValidationErrorOut
from app.services.estimate import timed_estimate

router = APIRouter(tags=["estimate"])


@router.post(
    "/estimate",
    response_model=Estimate,
    responses={422: {"model": ValidationErrorOut, "description": "invalid input or plan: field and reason"}},
    summary="Estimate memory, step time, tokens/s and MFU for a model, cluster and parallelism plan",
)
def post_estimate(
    body: EstimateRequest, request: Request, catalog: Annotated[Catalog, Depends(get_catalog)]
) -> Estimate:
    """Calibrated by the benchmark runs of the accelerator (shipped under data/calibration and posted to this
    server) unless ``calibrated`` is false; the ``calibration`` assumption says which run(s)."""
    return timed_estimate(catalog, body, request.app.state.metrics, "api")
