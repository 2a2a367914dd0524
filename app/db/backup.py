"""`capplan db export` / `capplan db import`: every saved scenario, custom catalog entry, benchmark run and shared
config.json as one JSON document (``capplan.backup/v1``), restorable into an empty or existing database in one
transaction."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.orm import Session, selectinload

from app.db.tables import (
    BenchmarkRun,
    BenchmarkSample,
    CustomCatalogEntry,
    CustomKind,
    Scenario,
    SharedConfig,
)

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


class SharedConfigRow(_Row):
    id: str = Field(pattern=r"^[0-9a-f]{20}$")
    body: str = Field(max_length=64_000)
    created_at: datetime


class Backup(_Row):
    schema_id: str = Field(alias="schema", pattern=r"^capplan\.backup/v1$")
    exported_at: datetime
    scenarios: list[ScenarioRow] = []
    custom_catalog_entries: list[CustomEntryRow] = []
    benchmark_runs: list[BenchmarkRunRow] = []
    shared_configs: list[SharedConfigRow] = []  # absent from backups made before planner links stored configs

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _columns(row: Any, names: list[str]) -> dict[str, Any]:
    return {n: getattr(row, n) for n in names}


def export_backup(session: Session) -> Backup:
    scenarios = session.scalars(select(Scenario).order_by(Scenario.id)).all()
    entries = session.scalars(select(CustomCatalogEntry).order_by(CustomCatalogEntry.id)).all()
    runs = session.scalars(
        select(BenchmarkRun).options(selectinload(BenchmarkRun.samples)).order_by(BenchmarkRun.id)
    ).all()
    shared = session.scalars(select(SharedConfig).order_by(SharedConfig.id)).all()
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
        shared_configs=[SharedConfigRow(**_columns(c, list(SharedConfigRow.model_fields))) for c in shared],
    )


def _without_nul(value: Any, counter: list[int]) -> Any:
    """``value`` with every NUL character replaced by U+FFFD (PostgreSQL stores neither in text nor in jsonb)."""
    if isinstance(value, str):
        if "\x00" in value:
            counter[0] += value.count("\x00")
            return value.replace("\x00", "\ufffd")
        return value
    if isinstance(value, dict):
        return {_without_nul(k, counter): _without_nul(v, counter) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v, counter) for v in value]
    return value


def import_backup(session: Session, backup: Backup, *, replace: bool = False) -> dict[str, int]:
    """Insert every row of ``backup`` (keeping ids and scenario versions) in one transaction. With ``replace``
    the tables are emptied first; otherwise an id that already exists is an error and nothing is written.

    Rows go in through Core inserts: the ORM would restart each scenario's ``version`` (its optimistic-locking
    counter) at 1, and a client holding version 3 could then overwrite a change. NUL characters, which SQLite
    stores and PostgreSQL refuses, are replaced by U+FFFD (counted in ``nul_characters_replaced``). Shared
    configs are named by their content, so one already present is left as it is."""
    nul = [0]

    def rows(items: list[Any], **exclude: Any) -> list[dict[str, Any]]:
        return [_without_nul(item.model_dump(exclude=set(exclude)), nul) for item in items]

    try:
        if replace:
            for table in (BenchmarkSample, BenchmarkRun, CustomCatalogEntry, Scenario, SharedConfig):
                session.execute(delete(table))
        if backup.scenarios:
            session.execute(insert(Scenario.__table__), rows(backup.scenarios))
        if backup.custom_catalog_entries:
            session.execute(insert(CustomCatalogEntry.__table__), rows(backup.custom_catalog_entries))
        if backup.benchmark_runs:
            session.execute(insert(BenchmarkRun.__table__), rows(backup.benchmark_runs, samples=True))
            samples = [
                {**_without_nul(s.model_dump(), nul), "run_id": run.id}
                for run in backup.benchmark_runs
                for s in run.samples
            ]
            if samples:
                session.execute(insert(BenchmarkSample.__table__), samples)
        present = set(session.scalars(select(SharedConfig.id))) if backup.shared_configs else set()
        configs = [c for c in backup.shared_configs if c.id not in present]
        if configs:
            session.execute(insert(SharedConfig.__table__), rows(configs))
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
        "shared_configs": len(backup.shared_configs),
        "nul_characters_replaced": nul[0],
    }


def _reset_sequences(session: Session) -> None:
    """After inserting explicit ids, PostgreSQL's sequences must move past them (SQLite needs nothing)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for model in (Scenario, CustomCatalogEntry, BenchmarkRun, BenchmarkSample):
        top = session.execute(select(func.max(model.id))).scalar()
        if top:  # never move a sequence back: an id handed out once is never handed out again
            seq = f"{model.__tablename__}_id_seq"
            session.execute(
                text(f"SELECT setval('{seq}', GREATEST(:top, (SELECT last_value FROM {seq})))"), {"top": top}
            )
