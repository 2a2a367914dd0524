"""POST /api/v1/plans/export: a plan as runnable configuration (plan JSON, torchtitan, torchrun, Megatron-LM,
DeepSpeed, Slurm, Kubernetes).

The body is an estimate request (the plan is estimated first and the estimate summarised in the file) or a
capplan plan document (``"schema": "capplan.plan/v1"``, exported as it is). ``GET /plans/{id}/export`` for
a saved scenario exports its plan the same way.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Query
from fastapi.responses import Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.deps import RowId, get_catalog, get_session
from app.domain.catalog import Catalog
from app.domain.export import (
    EXPORT_FORMATS,
    ExportedFile,
    ExportFormat,
    PlanDocument,
)
from app.schemas import ErrorOut, EstimateRequest, PlanExportBody, ValidationErrorOut
from app.services.documents import checked_plan_document, export_document, plan_document_from_request
from app.services.errors import InputError
from app.services.saved_scenarios import ScenarioNotFound, get_scenario

router = APIRouter(tags=["plans"])

MEDIA_TYPES = sorted({"application/json", "text/x-python", "text/x-shellscript", "application/yaml"})


def exported_response(exported: ExportedFile) -> Response:
    return Response(
        content=exported.content.encode("utf-8"),
        media_type=exported.media_type,
        headers={"Content-Disposition": f'attachment; filename="{exported.filename}"'},
    )


@router.post(
    "/plans/export",
    response_class=Response,
    responses={
        200: {
            "description": "the exported file, with Content-Disposition naming it",
            "content": {m: {"schema": {"type": "string"}} for m in MEDIA_TYPES},
        },
        422: {
            "model": ValidationErrorOut,
            "description": "unknown format, invalid input or plan: field and reason",
        },
    },
    summary="Export a plan as plan JSON, torchtitan config, torchrun, Megatron-LM, DeepSpeed, Slurm or Kubernetes",
)
def post_plan_export(
    body: Annotated[
        PlanExportBody, Body(description="an estimate request, or a capplan.plan/v1 plan document")
    ],
    catalog: Annotated[Catalog, Depends(get_catalog)],
    fmt: Annotated[
        ExportFormat, Query(alias="format", description=f"one of {', '.join(EXPORT_FORMATS)}")
    ] = ExportFormat.json,
) -> Response:
    if isinstance(body, PlanDocument):
        doc = checked_plan_document(body)
    else:
        doc = plan_document_from_request(catalog, body)
    return exported_response(export_document(doc, fmt))


@router.get(
    "/plans/{scenario_id}/export",
    response_class=Response,
    responses={
        200: {
            "description": "the saved plan's file, with Content-Disposition naming it",
            "content": {m: {"schema": {"type": "string"}} for m in MEDIA_TYPES},
        },
        404: {"model": ErrorOut, "description": "no saved scenario with that id"},
        422: {
            "model": ValidationErrorOut,
            "description": "unknown format, or the saved inputs no longer estimate",
        },
    },
    summary="Export a saved scenario's plan (same bytes as POST /plans/export with its inputs)",
)
def get_saved_plan_export(
    scenario_id: RowId,
    catalog: Annotated[Catalog, Depends(get_catalog)],
    session: Annotated[Session, Depends(get_session)],
    fmt: Annotated[
        ExportFormat, Query(alias="format", description=f"one of {', '.join(EXPORT_FORMATS)}")
    ] = ExportFormat.json,
) -> Response:
    try:
        scenario = get_scenario(session, scenario_id)
    except ScenarioNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    try:
        request = EstimateRequest.model_validate(scenario.inputs)
    except ValidationError as exc:
        raise InputError(
            [{"loc": ["scenario", "inputs", *map(str, e["loc"])], "msg": e["msg"], "type": e["type"]}
             for e in exc.errors()]
        ) from None  # fmt: skip
    return exported_response(export_document(plan_document_from_request(catalog, request), fmt))
