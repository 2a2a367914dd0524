"""Programmatic Alembic: `capplan db upgrade`, tests and `make run` all go through here."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, inspect, text

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


def current_revision(database_url: str) -> str | None:
    """The database's revision; None for an empty (never migrated) database."""
    from app.db.engine import build_engine

    engine = build_engine(database_url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head() or "base"


def revisions_to_undo(database_url: str, target: str) -> list[str]:
    """The revisions a downgrade to ``target`` (an id, ``base`` or ``-N``) reverts, newest first; a
    CommandError for a target that is unknown or above the current revision."""
    script = ScriptDirectory.from_config(alembic_config())
    current = current_revision(database_url)
    chain: list[str] = []
    rev = script.get_revision(current) if current else None
    while rev is not None:
        chain.append(rev.revision)
        rev = script.get_revision(rev.down_revision) if rev.down_revision else None
    if target == "base":
        return chain
    if target.startswith("-") and target[1:].isdigit():
        steps = int(target[1:])
        if steps > len(chain):
            raise CommandError(f"cannot go {steps} revisions down from {current or 'base'}")
        return chain[:steps]
    try:
        wanted = script.get_revision(target)
    except Exception as exc:  # alembic raises several resolution errors
        raise CommandError(
            f"no revision {target!r} (known: base, {', '.join(chain[::-1]) or 'none'})"
        ) from exc
    if wanted is None or wanted.revision not in chain:
        raise CommandError(f"revision {target!r} is not below the current revision {current or 'base'}")
    return chain[: chain.index(wanted.revision)]


def downgrade_drops(database_url: str, target: str) -> dict[str, int]:
    """Tables a downgrade to ``target`` drops, with the rows each holds now."""
    from app.db.engine import build_engine

    script = ScriptDirectory.from_config(alembic_config())
    tables: list[str] = []
    for revision in revisions_to_undo(database_url, target):
        tables += getattr(script.get_revision(revision).module, "DROPS_TABLES", ())
    if not tables:
        return {}
    engine = build_engine(database_url)
    try:
        existing = set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            return {
                t: int(conn.execute(text(f'SELECT COUNT(*) FROM "{t}"')).scalar() or 0)
                for t in tables
                if t in existing
            }
    finally:
        engine.dispose()
