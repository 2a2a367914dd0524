"""POST /api/v1/size: ranked rows, the Pareto front, losses by reason and the winner's plan document; 422s
naming the field and the reason."""

from __future__ import annotations

from fastapi.testclient import TestClient

BASE = {"model": "llama3.1-8b", "tokens": 1e12, "accelerators": ["h100-sxm"], "options": ["on-demand", "spot"],
        "gpus_range": "64:128", "calibrated": False}  # fmt: skip


def test_size_ranks_and_returns_the_winners_plan_document(client: TestClient) -> None:
    response = client.post("/api/v1/size", json=BASE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["ranked"] and body["pareto"] and body["plan_document"]["schema"].startswith("capplan.plan/")
    first = body["ranked"][0]
    assert {"accelerator", "offer", "option", "gpus", "plan", "days", "usd_amortised", "usd_cash",
            "usd_per_million_tokens", "mfu", "headroom_gib"} <= set(first)  # fmt: skip
    assert {"tp", "pp", "vpp", "dp", "cp", "ep", "sharding", "micro_batch", "recompute"} <= set(first["plan"])
    assert body["searched"]["plans_per_s"] > 0 and "amortised" in body["basis"]


def test_size_422_names_the_field(client: TestClient) -> None:
    for bad, field in (
        ({"tokens": -1}, "tokens"),
        ({"gpus_range": "lots"}, "gpus_range"),
        ({"gpus_range": "1:1e400"}, "gpus_range"),
        ({"options": ["barter"]}, "options"),
        ({"accelerators": ["tpu-v9"]}, "accelerators"),
        ({"model": "nope"}, "model"),
    ):
        response = client.post("/api/v1/size", json={**BASE, **bad})
        assert response.status_code == 422, (bad, response.text)
        assert field in response.text, response.text
