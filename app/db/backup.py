"""`capplan db export` / `capplan db import`: every saved scenario, custom catalog entry and benchmark run as one
JSON document (``capplan.backup/v1``), restorable into an empty or existing database in one transaction."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, selectinload

from app.db.tables import BenchmarkRun, BenchmarkSample, CustomCatalogEntry, CustomKind, Scenario

BACKUP_SCHEMA = "capplan.backup/v1"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScenarioRow(_Row):
    id: int
    name: str = Field(max_length=200)
    inputs: dict[str, Any]
    overrides: dict[str, Any]
    version: int = Field(ge=1)
    created_at: datetime
    updated_at: datetime


class CustomEntryRow(_Row):
    id: int
    kind: CustomKind
    slug: str = Field(max_length=64)
    body: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class SampleRow(_Row):
    rank: int
    metric: str = Field(max_length=80)
    unit: str = Field(max_length=32)
    measured: float
    predicted: float | None


class BenchmarkRunRow(_Row):
    id: int
    preset: str = Field(max_length=120)
    accelerator_slug: str | None
    node_slug: str | None
    world_size: int
    config: dict[str, Any]
    hardware: dict[str, Any]
    software: dict[str, Any]
    notes: str
    measured_at: datetime
    created_at: datetime
    samples: list[SampleRow]


class Backup(_Row):
    schema_id: str = Field(alias="schema", pattern=r"^capplan\.backup/v1$")
    exported_at: datetime
    scenarios: list[ScenarioRow] = []
    custom_catalog_entries: list[CustomEntryRow] = []
    benchmark_runs: list[BenchmarkRunRow] = []

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _columns(row: Any, names: list[str]) -> dict[str, Any]:
    return {n: getattr(row, n) for n in names}


def export_backup(session: Session) -> Backup:
    scenarios = session.scalars(select(Scenario).order_by(Scenario.id)).all()
    entries = session.scalars(select(CustomCatalogEntry).order_by(CustomCatalogEntry.id)).all()
    runs = session.scalars(
        select(BenchmarkRun).options(selectinload(BenchmarkRun.samples)).order_by(BenchmarkRun.id)
    ).all()
    return Backup(
        schema_id=BACKUP_SCHEMA,
        exported_at=datetime.now(UTC),
        scenarios=[ScenarioRow(**_columns(s, list(ScenarioRow.model_fields))) for s in scenarios],
        custom_catalog_entries=[
            CustomEntryRow(**_columns(e, list(CustomEntryRow.model_fields))) for e in entries
        ],
        benchmark_runs=[
            BenchmarkRunRow(
                **_columns(r, [f for f in BenchmarkRunRow.model_fields if f != "samples"]),
                samples=[SampleRow(**_columns(s, list(SampleRow.model_fields))) for s in r.samples],
            )
            for r in runs
        ],
    )


def import_backup(session: Session, backup: Backup, *, replace: bool = False) -> dict[str, int]:
    """Insert every row of ``backup`` (keeping ids) in one transaction. With ``replace`` the tables are emptied
    first; otherwise an id that already exists is an error and nothing is written."""
    try:
        if replace:
            for table in (BenchmarkSample, BenchmarkRun, CustomCatalogEntry, Scenario):
                session.execute(delete(table))
        for row in backup.scenarios:
            session.add(Scenario(**row.model_dump()))
        for row in backup.custom_catalog_entries:
            session.add(CustomCatalogEntry(**row.model_dump()))
        for row in backup.benchmark_runs:
            data = row.model_dump(exclude={"samples"})
            run = BenchmarkRun(**data)
            run.samples = [BenchmarkSample(**s.model_dump()) for s in row.samples]
            session.add(run)
        session.flush()
        _reset_sequences(session)
        session.commit()
    except Exception:
        session.rollback()
        raise
    return {
        "scenarios": len(backup.scenarios),
        "custom_catalog_entries": len(backup.custom_catalog_entries),
        "benchmark_runs": len(backup.benchmark_runs),
        "benchmark_samples": sum(len(r.samples) for r in backup.benchmark_runs),
    }


def _reset_sequences(session: Session) -> None:
    """After inserting explicit ids, PostgreSQL's sequences must move past them (SQLite needs nothing)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for model in (Scenario, CustomCatalogEntry, BenchmarkRun, BenchmarkSample):
        top = session.execute(select(func.max(model.id))).scalar()
        if top:
            session.execute(select(func.setval(f"{model.__tablename__}_id_seq", top)))
