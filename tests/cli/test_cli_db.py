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
