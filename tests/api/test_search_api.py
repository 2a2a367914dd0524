"""POST /api/v1/plans/search: plans with their figures, Pareto front, rejected counts; 422s that say why."""

from __future__ import annotations

from fastapi.testclient import TestClient

BASE = {"model": "gpt3-175b", "gpu": "a100-80gb", "gpus": 768, "global_batch": 1536, "seq_len": 2048,
        "framework": "megatron", "flash_attention": False}  # fmt: skip


def test_search_returns_ranked_plans(client: TestClient) -> None:
    response = client.post("/api/v1/plans/search", json={**BASE, "top_k": 5})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["evaluated_plans"] > 1000 and len(body["plans"]) == 5
    tps = [p["tokens_per_s"] for p in body["plans"]]
    assert tps == sorted(tps, reverse=True)
    assert {"tp", "pp", "dp", "sharding", "micro_batch", "recompute"} <= set(body["plans"][0]["plan"])
    assert body["best"]["tokens_per_s"] == tps[0]
    assert body["pareto"] and body["rejected"] and "tokens/s" in body["explanation"]
    assert 'capplan_searches_total{surface="api"} 1.0' in client.get("/metrics").text


def test_range_of_sizes_deadline_and_cost(client: TestClient) -> None:
    body = client.post("/api/v1/plans/search", json={
        "model": "llama3.1-8b", "gpu": "h100-sxm", "gpus_range": "8:64", "global_batch_tokens": "1e6:2e6",
        "seq_len": 8192, "tokens": 1e11, "deadline_days": 30, "objective": "min-cost",
        "micro_batches": [1, 2], "vpps": [1], "cps": [1],
    }).json()  # fmt: skip
    best = body["plans"][0]
    assert best["time_to_train_days"] <= 30 and best["cost_to_train_usd"] > 0
    assert any("after failures" in n and "$/M tokens" in n for n in body["notes"])


def test_nothing_fits_is_a_200_with_advice(client: TestClient) -> None:
    body = client.post("/api/v1/plans/search", json={**BASE, "model": "llama3.1-405b", "gpu": "h100-sxm", "gpus": 8,
                                                      "global_batch": 8, "seq_len": 8192, "framework": "fsdp2"}).json()  # fmt: skip
    assert body["plans"] == [] and "more GPUs" in body["message"]


def test_bad_input_is_422(client: TestClient) -> None:
    assert client.post("/api/v1/plans/search", json={**BASE, "gpus": 0}).status_code == 422
    both = client.post("/api/v1/plans/search", json={**BASE, "gpus_range": "8:16"})
    assert both.status_code == 422 and "gpus_range" in both.json()["detail"][0]["msg"]
    item = client.post("/api/v1/plans/search", json={**BASE, "micro_batches": [0]}).json()["detail"][0]
    assert item["loc"][:3] == ["body", "micro_batches", 0]
    deadline = client.post("/api/v1/plans/search", json={**BASE, "deadline_days": 3}).json()["detail"][0]
    assert "tokens" in deadline["msg"]


def test_space_too_large_is_422_saying_how_to_narrow(client: TestClient) -> None:
    response = client.post("/api/v1/plans/search", json={
        **BASE, "gpus": None, "gpus_range": "8:100000", "micro_batches": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
        "vpps": [1, 2, 3, 4, 5, 6, 7, 8], "cps": [1, 2, 4, 8, 16, 32, 64, 128], "max_pp": 1024,
    })  # fmt: skip
    assert response.status_code == 422
    assert "narrow" in response.json()["detail"][0]["msg"]


def test_search_uses_the_figure_overrides_the_estimate_uses(client: TestClient) -> None:
    """Issue 13: the search ranks with the same figures as the estimate beside it. With a GEMM-efficiency
    override every plan slows down, and the winner's tokens/s equals what /estimate says for that plan with the
    same override; an unknown override key is a 422 naming it."""
    fast = {**BASE, "top_k": 3}
    slow = {**fast, "figure_overrides": {"efficiency.gemm_efficiency": 0.3}}
    base = client.post("/api/v1/plans/search", json=fast).json()
    body = client.post("/api/v1/plans/search", json=slow).json()
    assert body["plans"][0]["tokens_per_s"] < 0.8 * base["plans"][0]["tokens_per_s"]
    winner = body["plans"][0]["plan"]
    keep = ("tp", "pp", "vpp", "dp", "cp", "ep", "sharding", "offload", "micro_batch", "recompute",
            "sequence_parallel", "precision", "framework", "global_batch", "seq_len")  # fmt: skip
    est = client.post("/api/v1/estimate", json={
        "model": "gpt3-175b", "gpu": "a100-80gb", "gpus": 768, "flash_attention": False,
        "figure_overrides": {"efficiency.gemm_efficiency": 0.3}, **{k: winner[k] for k in keep},
    }).json()  # fmt: skip
    assert est["tokens_per_s"] == body["plans"][0]["tokens_per_s"]
    bad = client.post("/api/v1/plans/search", json={**fast, "figure_overrides": {"efficiency.nope": 1}})
    assert bad.status_code == 422 and "figure_overrides" in bad.text


def test_search_takes_the_attention_kernel_and_fused_cross_entropy_like_the_estimate(
    client: TestClient,
) -> None:
    """The winner of a search with FlashAttention-3 and fused cross-entropy carries both, and estimating that plan
    gives the same tokens/s and memory; a kernel that does not exist is a 422 naming the field."""
    req = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 16, "seq_len": 8192,
           "attention_kernel": "fa3", "fused_cross_entropy": True, "top_k": 1}  # fmt: skip
    body = client.post("/api/v1/plans/search", json=req).json()
    best = body["plans"][0]
    assert best["plan"]["attention_kernel"] == "fa3" and best["plan"]["fused_cross_entropy"] is True
    plan = {k: v for k, v in best["plan"].items() if k != "gpus"}
    est = client.post("/api/v1/estimate", json={"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, **plan})
    assert est.status_code == 200, est.text
    assert est.json()["tokens_per_s"] == best["tokens_per_s"]
    assert est.json()["peak_memory_bytes"] == best["peak_memory_bytes"]
    bad = client.post("/api/v1/plans/search", json={**req, "attention_kernel": "fa9"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "attention_kernel"
