"""Rows survive a round trip on both backends; the scenario version column guards concurrent edits."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from app.db.engine import build_engine, session_factory
from app.db.migrate import upgrade
from app.db.tables import BenchmarkRun, BenchmarkSample, CustomCatalogEntry, CustomKind, Scenario


@pytest.fixture
def factory(database_url: str):
    upgrade(database_url)
    engine = build_engine(database_url)
    yield session_factory(engine)
    engine.dispose()


def test_scenario_round_trip_keeps_inputs_and_overrides(factory) -> None:
    inputs = {"model": "llama3.1-405b", "gpus": 16384, "plan": {"tp": 8, "pp": 16}}
    overrides = {"accelerators.h100-sxm.bf16_dense_tflops": 900.0}
    with factory() as session:
        session.add(Scenario(name="405B on H100", inputs=inputs, overrides=overrides))
        session.commit()
    with factory() as session:
        row = session.scalars(select(Scenario)).one()
        assert (row.name, row.inputs, row.overrides, row.version) == ("405B on H100", inputs, overrides, 1)
        assert row.created_at.tzinfo is not None


def test_scenario_version_bumps_and_stale_write_is_refused(factory) -> None:
    with factory() as session:
        session.add(Scenario(name="a", inputs={}, overrides={}))
        session.commit()
    first: Session = factory()
    second: Session = factory()
    a = first.scalars(select(Scenario)).one()
    b = second.scalars(select(Scenario)).one()
    second.commit()  # the reader's request ends; it comes back later with version 1 in hand
    a.name = "first"
    first.commit()
    assert a.version == 2
    b.name = "second"
    with pytest.raises(StaleDataError):
        second.commit()
    second.rollback()
    first.close()
    second.close()
    with factory() as session:
        assert session.scalars(select(Scenario.name)).one() == "first"


def test_benchmark_run_cascades_to_samples(factory) -> None:
    with factory() as session:
        run = BenchmarkRun(preset="tiny_fsdp2_cpu", accelerator_slug=None, world_size=2, config={"layers": 2})
        run.samples = [
            BenchmarkSample(rank=r, metric="step_time_s", unit="s", measured=0.5 + r, predicted=0.4)
            for r in (0, 1)
        ]
        session.add(run)
        session.commit()
        assert [s.rank for s in run.samples] == [0, 1]
        session.delete(run)
        session.commit()
        assert session.scalars(select(BenchmarkSample)).all() == []


def test_custom_entry_is_unique_per_kind_and_slug(factory) -> None:
    from sqlalchemy.exc import IntegrityError

    with factory() as session:
        session.add(
            CustomCatalogEntry(kind=CustomKind.accelerator, slug="mi300x", body={"bf16_dense_tflops": 1307})
        )
        session.add(CustomCatalogEntry(kind=CustomKind.price, slug="mi300x", body={}))
        session.commit()
        session.add(CustomCatalogEntry(kind=CustomKind.accelerator, slug="mi300x", body={}))
        with pytest.raises(IntegrityError):
            session.commit()
