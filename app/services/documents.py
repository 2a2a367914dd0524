"""Plan documents (capplan.plan/v1) and their exports (torchrun, Megatron, DeepSpeed, …)."""

from __future__ import annotations

from app.domain.catalog import Catalog
from app.domain.cost.inputs import CostOverrides
from app.domain.export import (
    ExportedFile,
    ExportFormat,
    PlanDocument,
    PlanDocumentError,
    export_plan,
    plan_document_problems,
)
from app.schemas import EstimateRequest
from app.services.errors import InputError
from app.services.scenario import run_scenario


def plan_document_from_request(
    catalog: Catalog, request: EstimateRequest, overrides: CostOverrides | None = None
) -> PlanDocument:
    """Estimate ``request`` and wrap plan, hardware and estimate in a plan document (raises InputError): the
    pipeline's document, with the reliability model's checkpoint interval for the job and, when the request has
    tokens, the run's cost per pricing option (``overrides``, or a CostRequest's own, replace cost figures). A plan
    that cannot be priced (a GPU without an AWS instance) gets a document without ``cost``."""
    doc = run_scenario(catalog, request, overrides=overrides, cost=bool(request.tokens)).document
    assert doc is not None
    return doc


def export_document(doc: PlanDocument, fmt: ExportFormat | str) -> ExportedFile:
    """``export_plan``, with a plan the format's framework refuses (or an inconsistent document) as an
    InputError naming the field, the framework's limit and the nearest plan it runs."""
    try:
        return export_plan(doc, fmt)
    except PlanDocumentError as exc:
        loc = ["body", *exc.field.split(".")] if exc.field else ["body"]
        raise InputError([{"loc": loc, "msg": exc.message, "type": "plan.framework-refusal"}]) from None


def checked_plan_document(doc: PlanDocument) -> PlanDocument:
    """``doc`` if it is consistent, else an InputError naming each offending field."""
    problems = plan_document_problems(doc)
    if problems:
        raise InputError(
            [{"loc": ["body", *field.split(".")], "msg": msg, "type": "value_error.plan_document"}
             for field, msg in problems]
        )  # fmt: skip
    return doc
