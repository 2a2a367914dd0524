"""With the database unreachable the app still starts, serves what needs no database, and /healthz says 503."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import REPO_ROOT, Settings


def test_app_serves_read_only_pages_while_the_database_is_down() -> None:
    settings = Settings(
        database_url="postgresql+psycopg://nobody:nothing@127.0.0.1:1/none", data_dir=REPO_ROOT / "data",
        log_level="WARNING",
    )  # fmt: skip
    with TestClient(create_app(settings)) as client:
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["database"] == "unavailable"
        assert client.get("/catalog/accelerators").status_code == 200
        assert client.get("/api/v1/catalog/nodes/p5.48xlarge").status_code == 200
        body = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 8, "seq_len": 4096}
        assert client.post("/api/v1/estimate", json=body).status_code == 200
