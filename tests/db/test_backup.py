"""`db export` → `db import` round trip on SQLite and PostgreSQL keeps every row; a migration with data in place
keeps every row."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.db.backup import Backup, export_backup, import_backup
from app.db.engine import build_engine, session_factory
from app.db.migrate import downgrade, upgrade
from app.db.tables import (
    BenchmarkRun,
    BenchmarkSample,
    CustomCatalogEntry,
    CustomKind,
    Scenario,
    SharedConfig,
)


def seed(factory, shared_config: bool = True) -> None:
    with factory() as session:
        session.add(Scenario(name="405B <on> H100", inputs={"model": "llama3.1-405b", "gpus": 16384},
                             overrides={"prices.p5.48xlarge": 40.0}))  # fmt: skip
        session.add(
            CustomCatalogEntry(kind=CustomKind.accelerator, slug="mi300x", body={"bf16_dense_tflops": 1307.4})
        )
        run = BenchmarkRun(preset="tiny_fsdp2_cpu", world_size=2, config={"layers": 2}, software={"torch": "2.13.0"},
                           measured_at=datetime(2026, 12, 1, tzinfo=UTC))  # fmt: skip
        run.samples = [BenchmarkSample(rank=r, metric="step_time_s", unit="s", measured=0.1 * (r + 1), predicted=0.12)
                       for r in range(2)]  # fmt: skip
        session.add(run)
        if shared_config:  # its table arrives with migration 0003
            session.add(SharedConfig(id="0123456789abcdef0123", body='{"model_type":"llama"}'))
        session.commit()


def snapshot(factory) -> dict:
    with factory() as session:
        data = export_backup(session).model_dump(mode="json", by_alias=True)
    data.pop("exported_at")
    return data


def first_tables(factory) -> dict:
    """Every row of the first revision's tables (the backup reads tables later revisions add)."""
    from app.db.base import Base

    names = ("scenarios", "custom_catalog_entries", "benchmark_runs", "benchmark_samples")
    with factory() as session:
        return {
            n: [dict(r._mapping) for r in session.execute(select(Base.metadata.tables[n]))] for n in names
        }


def test_round_trip_keeps_every_row(database_url: str, tmp_path) -> None:
    upgrade(database_url)
    engine = build_engine(database_url)
    factory = session_factory(engine)
    seed(factory)
    before = snapshot(factory)
    with factory() as session:
        text = export_backup(session).model_dump_json(by_alias=True)
    backup = Backup.model_validate_json(text)
    assert json.loads(text)["schema"] == "capplan.backup/v1"
    # restore into an emptied database
    downgrade(database_url, "base")
    upgrade(database_url)
    with factory() as session:
        counts = import_backup(session, backup)
    assert counts == {
        "scenarios": 1,
        "custom_catalog_entries": 1,
        "benchmark_runs": 1,
        "benchmark_samples": 2,
        "shared_configs": 1,
        "nul_characters_replaced": 0,
    }
    assert snapshot(factory) == before
    # ids continue after the imported ones
    with factory() as session:
        session.add(Scenario(name="next", inputs={}, overrides={}))
        session.commit()
        assert session.scalars(select(Scenario.id).order_by(Scenario.id)).all() == [1, 2]
    engine.dispose()


def test_import_onto_existing_rows_fails_whole_unless_replace(database_url: str) -> None:
    upgrade(database_url)
    engine = build_engine(database_url)
    factory = session_factory(engine)
    seed(factory)
    with factory() as session:
        backup = export_backup(session)
    with factory() as session, pytest.raises(IntegrityError):
        import_backup(session, backup)
    with factory() as session:
        assert len(session.scalars(select(Scenario)).all()) == 1  # nothing half-written
        import_backup(session, backup, replace=True)
    assert snapshot(factory)["scenarios"][0]["name"] == "405B <on> H100"
    engine.dispose()


def test_upgrading_a_database_with_data_keeps_every_row(database_url: str) -> None:
    """Every revision from the first one that has the tables up to head, with rows in place."""
    from alembic.script import ScriptDirectory

    from app.db.migrate import alembic_config

    revisions = [
        r.revision for r in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))
    ]
    upgrade(database_url, revisions[0])
    engine = build_engine(database_url)
    factory = session_factory(engine)
    seed(factory, shared_config=False)
    before = first_tables(factory)
    for revision in revisions[1:] + ["head"]:
        upgrade(database_url, revision)
        assert first_tables(factory) == before
    engine.dispose()
