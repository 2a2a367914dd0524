"""A live server for the browser tests: the app on a free loopback port (app.live_server), API token
``e2e-token``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.live_server import serve as serve_app


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """The app on a free loopback port, on a new SQLite database in ``folder`` (API token ``e2e-token``)."""
    with serve_app(folder / "e2e.db", "e2e-token") as url:
        yield url
