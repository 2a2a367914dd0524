"""The app on a free loopback port, uvicorn in a thread, on a new SQLite database: what the browser tests
(tests/e2e) and the README's screenshots (scripts/screenshots.py) run against. Not used by the app itself."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve(database: Path, api_token: str, start_timeout_s: float = 20.0) -> Iterator[str]:
    """The base URL of the app serving a migrated SQLite database at ``database`` with ``api_token``."""
    import uvicorn

    from app.db.migrate import upgrade
    from app.main import create_app
    from app.settings import Settings

    settings = Settings(database_url=f"sqlite:///{database}", api_token=api_token, log_level="WARNING")
    upgrade(settings.database_url)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
