"""Engine and session factory. SQLite gets foreign keys and real transaction control (Python 3.11)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker


def build_engine(database_url: str) -> Engine:
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        _sqlite_hooks(engine)
        return engine
    # a server that does not answer fails a connection in 5 s instead of the TCP timeout (minutes)
    connect_args = {"connect_timeout": 5} if url.get_backend_name() == "postgresql" else {}
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10, connect_args=connect_args)


def _sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # pragma: no cover - exercised by every SQLite test
        dbapi_connection.isolation_level = None  # let SQLAlchemy emit BEGIN (pysqlite legacy mode off)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # pragma: no cover
        conn.exec_driver_sql("BEGIN")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def iter_session(factory: sessionmaker[Session]) -> Iterator[Session]:
    with factory() as session:
        yield session
