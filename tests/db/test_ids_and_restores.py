"""Issue 15, items 7 and 9: ids are never reused on either database; a backup restores versions, NUL characters
and ids on SQLite and PostgreSQL; the upgrade to AUTOINCREMENT keeps every row."""

from __future__ import annotations

from sqlalchemy import select

from app.db.backup import Backup, export_backup, import_backup
from app.db.engine import build_engine, session_factory
from app.db.migrate import downgrade, downgrade_drops, upgrade
from app.db.tables import BenchmarkRun, BenchmarkSample, Scenario


def _ids_after_deleting_the_newest(factory) -> tuple[int, int]:
    with factory() as session:
        first = Scenario(name="a", inputs={}, overrides={})
        second = Scenario(name="b", inputs={}, overrides={})
        session.add_all([first, second])
        session.commit()
        deleted = second.id
        session.delete(second)
        session.commit()
        third = Scenario(name="c", inputs={}, overrides={})
        session.add(third)
        session.commit()
        return deleted, third.id


def test_deleted_ids_are_never_reused(database_url: str) -> None:
    upgrade(database_url)
    engine = build_engine(database_url)
    deleted, new = _ids_after_deleting_the_newest(session_factory(engine))
    engine.dispose()
    assert new > deleted


def test_upgrading_to_autoincrement_keeps_rows_and_children(database_url: str) -> None:
    upgrade(database_url, "0001")
    engine = build_engine(database_url)
    factory = session_factory(engine)
    with factory() as session:
        session.add(Scenario(name="kept", inputs={"model": "x"}, overrides={}))
        run = BenchmarkRun(preset="p", world_size=1)
        run.samples = [BenchmarkSample(rank=0, metric="m", unit="s", measured=1.0, predicted=None)]
        session.add(run)
        session.commit()
    upgrade(database_url)
    with factory() as session:
        assert session.scalars(select(Scenario.name)).all() == ["kept"]
        assert len(session.scalars(select(BenchmarkSample)).all()) == 1  # the rebuild cascaded nothing away
    deleted, new = _ids_after_deleting_the_newest(factory)
    assert new > deleted
    # head → 0001: 0002 drops nothing, 0003 its (empty) shared configs
    assert downgrade_drops(database_url, "0001") == {"shared_configs": 0}
    downgrade(database_url, "0001")
    with factory() as session:
        assert len(session.scalars(select(Scenario)).all()) == 3  # kept, a, c
        assert len(session.scalars(select(BenchmarkSample)).all()) == 1
    assert downgrade_drops(database_url, "base")["scenarios"] == 3
    engine.dispose()


def test_restore_keeps_versions_and_replaces_nul(database_url: str) -> None:
    upgrade(database_url)
    engine = build_engine(database_url)
    factory = session_factory(engine)
    with factory() as session:
        session.add(Scenario(name="v", inputs={"model": "x"}, overrides={}))
        session.commit()
        backup = export_backup(session)
    data = backup.model_dump(by_alias=True)
    data["scenarios"][0].update(version=7, name="with\x00nul", inputs={"hf_config": {"k\x00": "v\x00"}})
    with factory() as session:
        counts = import_backup(session, Backup.model_validate(data), replace=True)
    assert counts["nul_characters_replaced"] == 3
    with factory() as session:
        row = session.scalars(select(Scenario)).one()
        assert (
            row.version == 7
            and row.name == "with\ufffdnul"
            and row.inputs == {"hf_config": {"k\ufffd": "v\ufffd"}}
        )
        # the next id continues after the restored ones, and a replace never moves the counter back
        session.add(Scenario(name="next", inputs={}, overrides={}))
        session.commit()
        assert session.scalars(select(Scenario.id).order_by(Scenario.id)).all() == [1, 2]
    with factory() as session:
        import_backup(session, Backup.model_validate(data), replace=True)
        session.add(Scenario(name="after", inputs={}, overrides={}))
        session.commit()
        assert max(session.scalars(select(Scenario.id)).all()) == 3
    engine.dispose()
