"""GET /api/v1/catalog/{kind} and /{kind}/{slug}: catalog entries with every figure's provenance."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from app.deps import get_catalog
from app.domain.catalog import Catalog, entry_record
from app.schemas import ErrorOut


class CatalogKind(StrEnum):
    accelerators = "accelerators"
    nodes = "nodes"
    fabrics = "fabrics"
    switches = "switches"
    topologies = "topologies"
    prices = "prices"
    architectures = "architectures"


class FigureOut(BaseModel):
    value: Any
    source: str
    source_title: str | None
    source_url: str | None
    as_of: str
    confidence: str
    note: str | None


class CatalogEntryOut(BaseModel):
    slug: str
    name: str
    source: str
    as_of: str
    confidence: str
    notes: str
    figures: dict[str, FigureOut]
    model_config = {"extra": "allow"}


class CatalogListOut(BaseModel):
    kind: CatalogKind
    count: int
    entries: list[CatalogEntryOut]


router = APIRouter(prefix="/catalog", tags=["catalog"])

CatalogDep = Annotated[Catalog, Depends(get_catalog)]


@router.get("/{kind}", response_model=CatalogListOut, summary="List catalog entries of one kind")
def list_entries(
    kind: CatalogKind,
    catalog: CatalogDep,
    q: Annotated[str | None, Query(max_length=100, description="Substring of slug or name")] = None,
) -> dict:
    entries = catalog.entries(kind.value)
    if q:
        needle = q.lower()
        entries = tuple(e for e in entries if needle in e.slug.lower() or needle in e.name.lower())
    records = [entry_record(e, catalog.sources) for e in entries]
    return {"kind": kind, "count": len(records), "entries": records}


@router.get(
    "/{kind}/{slug}",
    response_model=CatalogEntryOut,
    responses={404: {"model": ErrorOut, "description": "Unknown slug; the message lists the known ones"}},
    summary="One catalog entry",
)
def get_entry(kind: CatalogKind, slug: str, catalog: CatalogDep) -> dict:
    return entry_record(catalog.entry(kind.value, slug), catalog.sources)
