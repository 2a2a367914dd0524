"""Alembic environment: the URL comes from the caller's Config or from Settings; batch mode on SQLite."""

from __future__ import annotations

from alembic import context
from sqlalchemy import event

import app.db.tables  # noqa: F401  (registers the tables on Base.metadata)
from app.db.base import Base
from app.db.engine import build_engine
from app.settings import Settings

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings().database_url


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _foreign_keys_off(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = build_engine(_url())
    if engine.dialect.name == "sqlite":
        # batch mode rebuilds a table by copy, drop and rename; with foreign keys on, dropping a parent table
        # would cascade-delete its children's rows. PRAGMA foreign_keys only takes effect outside a
        # transaction, so it is set as each connection opens (after the engine's own hook turned it on).
        event.listen(engine, "connect", _foreign_keys_off)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
