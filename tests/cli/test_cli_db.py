"""`capplan db export` and `capplan db import`: a round trip through the CLI, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_catalog import run_cli

from app.db.engine import build_engine, session_factory
from app.db.migrate import upgrade
from app.db.tables import Scenario


@pytest.fixture
def db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("CAPPLAN_DATABASE_URL", url)
    upgrade(url)
    engine = build_engine(url)
    with session_factory(engine)() as session:
        session.add(Scenario(name="kept", inputs={"model": "llama3.1-8b"}, overrides={}))
        session.commit()
    engine.dispose()
    return url


def test_export_then_import_into_a_fresh_database(db_url, monkeypatch, capsys, tmp_path: Path) -> None:
    backup = tmp_path / "backup.json"
    code, _, err = run_cli(monkeypatch, capsys, "db", "export", "-o", str(backup))
    assert code == 0 and "1 scenarios" in err
    assert json.loads(backup.read_text())["scenarios"][0]["name"] == "kept"
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    upgrade(fresh)
    monkeypatch.setenv("CAPPLAN_DATABASE_URL", fresh)
    code, out, _ = run_cli(monkeypatch, capsys, "db", "import", str(backup))
    assert code == 0 and "1 scenarios" in out
    code, out, _ = run_cli(monkeypatch, capsys, "db", "import", str(backup))
    assert code == 2
    code, out, _ = run_cli(monkeypatch, capsys, "db", "import", str(backup), "--replace")
    assert code == 0


def test_import_rejects_a_malformed_file(db_url, monkeypatch, capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "capplan.backup/v9", "exported_at": "2026-12-02T00:00:00Z"}))
    code, _, err = run_cli(monkeypatch, capsys, "db", "import", str(bad))
    assert code == 2 and "schema" in err and "Traceback" not in err


# -- issue 15: destructive downgrades, backups that round-trip, one line instead of a traceback -----------------


def _rows(url: str) -> int:
    from sqlalchemy import func, select

    engine = build_engine(url)
    try:
        with session_factory(engine)() as session:
            return session.scalar(select(func.count()).select_from(Scenario)) or 0
    finally:
        engine.dispose()


def test_downgrade_that_drops_rows_is_refused_without_yes(
    db_url, monkeypatch, capsys, tmp_path: Path
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "db", "downgrade", "base")
    assert code == 2 and "scenarios (1 rows)" in err and "--yes" in err and "db export" in err
    assert len(err.strip().splitlines()) == 1
    assert _rows(db_url) == 1  # nothing changed
    backup = tmp_path / "before-downgrade.json"
    code, out, err = run_cli(monkeypatch, capsys, "db", "downgrade", "base", "--yes", "--backup", str(backup))
    assert code == 0 and "dropped 1 rows" in out
    assert json.loads(backup.read_text())["scenarios"][0]["name"] == "kept"


def test_downgrade_that_keeps_data_needs_no_confirmation(db_url, monkeypatch, capsys) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "db", "downgrade", "--", "-1")
    assert code == 0
    assert _rows(db_url) == 1
    code, _, _ = run_cli(monkeypatch, capsys, "db", "upgrade")
    assert code == 0


def test_backup_round_trips_scenario_versions(db_url, monkeypatch, capsys, tmp_path: Path) -> None:
    from sqlalchemy import select

    engine = build_engine(db_url)
    with session_factory(engine)() as session:
        scenario = session.scalars(select(Scenario)).one()
        scenario.name = "changed"
        session.commit()
        scenario.name = "changed again"
        session.commit()
        assert scenario.version == 3
    engine.dispose()
    backup = tmp_path / "b.json"
    assert run_cli(monkeypatch, capsys, "db", "export", "-o", str(backup))[0] == 0
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    upgrade(fresh)
    monkeypatch.setenv("CAPPLAN_DATABASE_URL", fresh)
    assert run_cli(monkeypatch, capsys, "db", "import", str(backup))[0] == 0
    engine = build_engine(fresh)
    with session_factory(engine)() as session:
        assert session.scalars(select(Scenario.version)).one() == 3
    engine.dispose()


def test_import_into_an_unmigrated_database_is_one_line(db_url, monkeypatch, capsys, tmp_path: Path) -> None:
    backup = tmp_path / "b.json"
    assert run_cli(monkeypatch, capsys, "db", "export", "-o", str(backup))[0] == 0
    monkeypatch.setenv("CAPPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'empty.db'}")
    code, _, err = run_cli(monkeypatch, capsys, "db", "import", str(backup))
    assert code == 2 and "capplan db upgrade" in err and len(err.strip().splitlines()) == 1


def _deep_config(tmp_path: Path) -> Path:
    path = tmp_path / "deep.json"
    path.write_text('{"model_type": "llama", "x": ' + "[" * 5000 + "]" * 5000 + "}")
    return path


def _big_int_config(tmp_path: Path) -> Path:
    path = tmp_path / "big.json"
    path.write_text('{"model_type": "llama", "x": 1' + "0" * 5000 + "}")
    return path


def _layers_config(tmp_path: Path) -> Path:
    path = tmp_path / "layers.json"
    path.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
        "num_hidden_layers": 10**7, "vocab_size": 1000, "max_position_embeddings": 2048,
    }))  # fmt: skip
    return path


def _fifo(tmp_path: Path) -> str:
    import os

    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


ESTIMATE = ["--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "16", "--seq-len", "2048"]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (lambda t: ["estimate", "--model", str(_deep_config(t)), *ESTIMATE], "nested deeper than 20"),
        (lambda t: ["estimate", "--model", str(_big_int_config(t)), *ESTIMATE], "18 digits"),
        (lambda t: ["estimate", "--model", str(_layers_config(t)), *ESTIMATE], "1,024"),
        (lambda t: ["db", "export", "-o", str(t / "missing" / "x.json")], "does not exist"),
        (lambda t: ["db", "export", "-o", str(t)], "is a directory"),
        (lambda t: ["db", "export", "-o", _fifo(t)], "not a regular file"),  # used to hang until read
        (lambda t: ["db", "upgrade", "nonexistent"], "nonexistent"),
        (lambda t: ["db", "downgrade", "nonexistent"], "nonexistent"),
    ],
)
def test_cli_failures_are_one_line_and_exit_2(
    db_url, monkeypatch, capsys, tmp_path: Path, case, expected
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, *case(tmp_path))
    assert code == 2, err
    assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({"CAPPLAN_DATABASE_URL": "bogus://x"}, ["db", "export"], "not a usable database URL"),
        (
            {"CAPPLAN_DATABASE_URL": "postgresql+psycopg://a:b@127.0.0.1:1/x"},
            ["db", "export"],
            "cannot use the database",
        ),
        (
            {"CAPPLAN_DATABASE_URL": "postgresql+psycopg://a:b@127.0.0.1:1/x"},
            ["serve", "--port", "1"],
            "cannot use",
        ),
        ({"CAPPLAN_LOG_LEVEL": "bogus"}, ["db", "check"], "CAPPLAN_LOG_LEVEL"),
        ({"CAPPLAN_SEARCH_MAX_PLANS": "5"}, ["db", "check"], "CAPPLAN_SEARCH_MAX_PLANS"),
    ],
)
def test_environment_and_database_failures_are_one_line(monkeypatch, capsys, env, args, expected) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_check_on_an_empty_database_is_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'empty.db'}")
    code, _, err = run_cli(monkeypatch, capsys, "db", "check")
    assert code == 2 and "never migrated" in err
