"""Programmatic Alembic: `capplan db upgrade`, tests and `make run` all go through here."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

from app.settings import REPO_ROOT


def alembic_config(database_url: str | None = None, connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(REPO_ROOT / "alembic"))
    if database_url is not None:
        cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


def check(database_url: str) -> None:
    """Raise if the ORM tables and the migrations disagree (alembic check)."""
    command.check(alembic_config(database_url))
