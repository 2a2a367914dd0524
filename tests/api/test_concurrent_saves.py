"""Concurrent saves of one scenario, on SQLite and PostgreSQL, through a real server: exactly one wins, the
other gets a 409 with the current version, and nothing is lost or half-written."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import uvicorn

from app.db.migrate import upgrade
from app.main import create_app
from app.settings import REPO_ROOT, Settings

TOKEN = "t0ken"
INPUTS = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 8, "seq_len": 4096}


def _call(url: str, method: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_two_writers_with_the_same_version(database_url: str) -> None:
    upgrade(database_url)
    settings = Settings(
        database_url=database_url, data_dir=REPO_ROOT / "data", api_token=TOKEN, log_level="WARNING"
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    base = f"http://127.0.0.1:{port}/api/v1/scenarios"
    try:
        status, created = _call(base, "POST", {"name": "base", "inputs": INPUTS})
        assert status == 201, created
        sid = created["id"]
        barrier = threading.Barrier(2)
        results: dict[str, tuple[int, dict]] = {}
        errors: dict[str, BaseException] = {}

        def write(name: str) -> None:
            barrier.wait()
            try:
                results[name] = _call(f"{base}/{sid}", "PUT", {"version": 1, "name": name})
            except BaseException as exc:  # noqa: BLE001  (reported by the assertion below)
                errors[name] = exc

        writers = [threading.Thread(target=write, args=(n,)) for n in ("alice", "bob")]
        for w in writers:
            w.start()
        for w in writers:
            w.join(timeout=60)
        assert not errors, errors
        assert sorted(code for code, _ in results.values()) == [200, 409], results
        winner = next(n for n, (code, _) in results.items() if code == 200)
        loser = next(body for code, body in results.values() if code == 409)
        assert "2" in json.dumps(loser)  # the current version is in the answer
        status, saved = _call(f"{base}/{sid}", "GET")
        assert (
            status == 200
            and saved["name"] == winner
            and saved["version"] == 2
            and saved["inputs"]["gpus"] == 8
        )
    finally:
        server.should_exit = True
        thread.join(timeout=10)
