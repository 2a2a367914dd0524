"""The Settings read by hand (app/settings.py): the rules pydantic-settings applied before — CAPPLAN_ prefix in
any case, a ./.env file under the environment, keyword arguments over both, unknown names ignored, bad values
refused with the field named."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings, environment_values

FIELDS = set(Settings.model_fields)


def test_environment_wins_over_the_env_file_and_unknown_names_are_ignored(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# comment\n\nexport CAPPLAN_LOG_LEVEL=debug\nCAPPLAN_SEARCH_MAX_PLANS='5000'\n"
        'CAPPLAN_DATABASE_URL="sqlite:///from-file.db"\nCAPPLAN_NOT_A_FIELD=1\nOTHER=2\nno equals sign\n',
        encoding="utf-8",
    )
    environ = {"capplan_database_url": "sqlite:///from-env.db", "CAPPLAN_NOPE": "x", "PATH": "/bin"}
    assert environment_values(FIELDS, environ, env_file) == {
        "log_level": "debug",
        "search_max_plans": "5000",
        "database_url": "sqlite:///from-env.db",
    }


def test_an_absent_env_file_is_empty(tmp_path: Path) -> None:
    assert environment_values(FIELDS, {}, tmp_path / "missing.env") == {}


def test_settings_read_the_environment_and_keywords_win(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "CAPPLAN_SEARCH_CONCURRENCY=3\nCAPPLAN_LOG_LEVEL=error\n", encoding="utf-8"
    )
    monkeypatch.setenv("CAPPLAN_LOG_LEVEL", "warning")
    monkeypatch.setenv("CAPPLAN_DATA_DIR", str(tmp_path))
    settings = Settings(search_max_plans=4000)
    assert settings.search_concurrency == 3  # from ./.env
    assert settings.log_level == "WARNING"  # the environment over the file, validated
    assert settings.data_dir == tmp_path and isinstance(settings.data_dir, Path)
    assert settings.search_max_plans == 4000
    assert settings.api_token is None


def test_a_bad_value_from_the_environment_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_SEARCH_MAX_PLANS", "5")
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert caught.value.title == "Settings" and caught.value.errors()[0]["loc"] == ("search_max_plans",)
