"""POST /api/v1/benchmarks (bearer token, schema-validated, stored in one transaction) and GET list/detail;
a posted run calibrates the next estimate on its accelerator, which says so, and calibrated=false undoes it."""

from __future__ import annotations

import json

from bench_fixtures import synthetic_h100_result
from fastapi.testclient import TestClient

AUTH = {"Authorization": "Bearer test-token"}
ESTIMATE = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 8, "micro_batch": 1,
            "seq_len": 8192}  # fmt: skip


def body() -> dict:
    return json.loads(synthetic_h100_result().model_dump_json(by_alias=True))


def calibration(estimate: dict) -> dict:
    return next(a for a in estimate["assumptions"] if a["name"] == "calibration")


def test_post_needs_a_bearer_token(client: TestClient) -> None:
    r = client.post("/api/v1/benchmarks", json=body())
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert (
        client.post("/api/v1/benchmarks", json=body(), headers={"Authorization": "Bearer nope"}).status_code
        == 403
    )
    assert (
        client.post("/api/v1/benchmarks", json=body(), headers={"Authorization": "Basic x"}).status_code
        == 401
    )
    assert client.get("/api/v1/benchmarks").json() == []


def test_post_is_schema_validated(client: TestClient) -> None:
    bad = body()
    bad["metrics"][0]["measured"] = "fast"
    r = client.post("/api/v1/benchmarks", json=bad, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "metrics", 0]
    wrong_rank = body()
    wrong_rank["metrics"][0]["rank"] = 99
    assert client.post("/api/v1/benchmarks", json=wrong_rank, headers=AUTH).status_code == 422
    unknown = {**body(), "accelerator": "h900"}
    r = client.post("/api/v1/benchmarks", json=unknown, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "accelerator"]
    assert client.get("/api/v1/benchmarks").json() == []  # nothing stored


def test_posted_run_is_stored_and_calibrates_the_next_estimate(client: TestClient) -> None:
    before = client.post("/api/v1/estimate", json=ESTIMATE).json()
    assert calibration(before)["value"].startswith("not calibrated")

    r = client.post("/api/v1/benchmarks", json=body(), headers=AUTH)
    assert r.status_code == 201, r.text
    out = r.json()
    run_id = out["id"]
    assert r.headers["location"] == f"/api/v1/benchmarks/{run_id}"
    assert any(c.startswith("gemm_efficiency") for c in out["calibrates"])

    runs = client.get("/api/v1/benchmarks").json()
    assert [x["id"] for x in runs] == [run_id] and runs[0]["accelerator"] == "h100-sxm"
    detail = client.get(f"/api/v1/benchmarks/{run_id}").json()
    assert detail["software"]["torch"] == "2.13.0" and detail["hardware"]["device_name"].startswith("NVIDIA")
    step = next(s for s in detail["samples"] if s["metric"] == "step_time_s" and s["rank"] == 0)
    assert abs(step["relative_error"] - 0.25) < 1e-9
    assert client.get("/api/v1/benchmarks/999").status_code == 404

    after = client.post("/api/v1/estimate", json=ESTIMATE).json()
    assert calibration(after)["value"] == f"calibrated by run {run_id}"
    assert after["tokens_per_s"] < before["tokens_per_s"]  # the run was 25 % slower than predicted
    gemm = next(a for a in after["assumptions"] if a["name"] == "GEMM efficiency (large GEMMs)")
    assert gemm["source"].startswith(f"calibrated (run {run_id}, ")
    off = client.post("/api/v1/estimate", json={**ESTIMATE, "calibrated": False}).json()
    assert off["tokens_per_s"] == before["tokens_per_s"] and calibration(off)["value"].startswith("off")
    other = client.post("/api/v1/estimate", json={**ESTIMATE, "gpu": "a100-80gb"}).json()
    assert calibration(other)["value"].startswith("not calibrated")
    assert (
        'capplan_benchmark_results_ingested_total{accelerator="h100-sxm"} 1.0' in client.get("/metrics").text
    )


def test_writes_refused_without_a_server_token(settings, tmp_path) -> None:
    from app.db.migrate import upgrade
    from app.main import create_app

    no_token = settings.model_copy(update={"api_token": None})
    upgrade(no_token.database_url)
    with TestClient(create_app(no_token)) as c:
        assert c.post("/api/v1/benchmarks", json=body(), headers=AUTH).status_code == 403
