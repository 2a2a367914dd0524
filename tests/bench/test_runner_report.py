"""`capplan bench submit/run --report-to URL --token T` against a live server (uvicorn in a thread): 401 without
the token (exit 2, one line), stored and calibrating with it."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx2
import uvicorn
from bench_fixtures import synthetic_h100_result
from typer.testing import CliRunner

from app.cli import app as cli_app
from app.db.migrate import upgrade


def _synthetic():
    return synthetic_h100_result()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_submit_reports_to_a_live_server(settings, tmp_path: Path) -> None:
    from app.main import create_app

    upgrade(settings.database_url)
    port = _port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        result_file = tmp_path / "result.json"
        result_file.write_text(_synthetic().model_dump_json(by_alias=True))
        refused = CliRunner().invoke(cli_app, ["bench", "submit", str(result_file), "--report-to", url])
        assert refused.exit_code != 0
        assert "HTTP 401" in str(refused.exception) or "HTTP 401" in refused.output
        ok = CliRunner().invoke(
            cli_app, ["bench", "submit", str(result_file), "--report-to", url, "--token", "test-token"]
        )
        assert ok.exit_code == 0, ok.output
        assert "reported: /api/v1/benchmarks/1 (run 1)" in ok.stdout
        est = httpx2.post(f"{url}/api/v1/estimate", json={"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8,
                                                           "global_batch": 8, "seq_len": 8192}).json()  # fmt: skip
        note = next(a for a in est["assumptions"] if a["name"] == "calibration")
        assert note["value"] == "calibrated by run 1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
