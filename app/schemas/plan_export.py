"""The body of ``POST /api/v1/plans/export``: an estimate request or a capplan.plan/v1 document. Its own module:
it imports the export package, which nothing else of the schemas needs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag

from app.domain.export import PlanDocument
from app.schemas.requests import EstimateRequest


def _export_body_kind(value: Any) -> str:
    """A body with a ``schema`` key is a plan document; anything else is read as an estimate request."""
    if isinstance(value, dict):
        return "plan_document" if "schema" in value else "estimate_request"
    return "plan_document" if isinstance(value, PlanDocument) else "estimate_request"


PlanExportBody = Annotated[
    Annotated[EstimateRequest, Tag("estimate_request")] | Annotated[PlanDocument, Tag("plan_document")],
    Discriminator(_export_body_kind),
]
"""What the export endpoint takes: an estimate request (estimated first) or a capplan.plan/v1 document.
Validation errors name the branch: ``["body", "plan_document", "plan", "tp"]``."""
