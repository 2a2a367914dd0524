"""Benchmark pages: the runs list with the calibration in use, one run's predicted vs measured with errors."""

from __future__ import annotations

import json
import re

from bench_fixtures import synthetic_h100_result
from fastapi.testclient import TestClient


def post_run(client: TestClient) -> int:
    body = json.loads(synthetic_h100_result().model_dump_json(by_alias=True))
    r = client.post("/api/v1/benchmarks", json=body, headers={"Authorization": "Bearer test-token"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_empty_list_explains_how_to_run(client: TestClient) -> None:
    r = client.get("/benchmarks")
    assert r.status_code == 200 and "capplan bench run --preset tiny_fsdp2_cpu" in r.text
    assert "HX-Request-Type" in r.headers["vary"]


def test_list_and_detail_show_predicted_vs_measured_and_calibration(client: TestClient) -> None:
    run_id = post_run(client)
    page = client.get("/benchmarks").text
    assert f'href="/benchmarks/{run_id}"' in page and "llama3_8b_fsdp8_h100" in page
    assert "Calibration in use" in page and "gemm efficiency" in page and f"run {run_id}" in page
    detail = client.get(f"/benchmarks/{run_id}")
    assert detail.status_code == 200
    text = detail.text
    assert "Predicted vs measured" in text and "step_time_s" in text and "+25.00 %" in text
    assert "The estimator uses this run" in text and "gemm efficiency" in text
    assert "<script>" not in text and not re.search(r"<script(?![^>]*src=)", text)  # CSP: no inline scripts
    rank1 = client.get(f"/benchmarks/{run_id}?rank=1").text
    assert re.search(r'<td class="num">1</td>', rank1) and not re.search(
        r'<td class="num">0</td>\s*<td class="num">\d', rank1
    )


def test_partial_and_missing(client: TestClient) -> None:
    post_run(client)
    part = client.get(
        "/benchmarks?accelerator=h100-sxm", headers={"HX-Request": "true", "HX-Request-Type": "partial"}
    )
    assert part.status_code == 200 and "<html" not in part.text and 'id="benchmark-results"' in part.text
    assert client.get("/benchmarks/404").status_code == 404
