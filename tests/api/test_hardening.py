"""Hardening (issue 15): every size that drives work is bounded, no request answers 500 or text/plain, results are
never NaN, searches have a time and concurrency budget, an unreachable database is a 503 JSON body."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from app.main import SECURITY_HEADERS, create_app
from app.services.search import SearchBudget, SearchBusy
from app.settings import REPO_ROOT, Settings

BASE = {"gpu": "h100-sxm", "gpus": 8, "global_batch": 16, "seq_len": 2048}
LLAMA = {
    "model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
    "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048,
}  # fmt: skip
AUTH = {"Authorization": "Bearer test-token"}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def post_raw(client: TestClient, path: str, text: str, **kw):
    return client.post(
        path, content=text, headers={"content-type": "application/json", **kw.pop("headers", {})}
    )


def assert_json_error(response, status: int) -> dict:
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"].startswith("application/json")
    for header in SECURITY_HEADERS:
        assert header in response.headers
    return response.json()


# -- item 1: sizes that drive work --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "limit"),
    [
        ("num_hidden_layers", 300_000, "1,024"),
        ("num_attention_heads", 1_000_000, "4,096"),
        ("vocab_size", 10**9, "4,194,304"),
    ],
)
def test_hf_config_sizes_over_the_limit_are_a_422_naming_it(client: TestClient, key, value, limit) -> None:
    response = client.post("/api/v1/estimate", json={**BASE, "hf_config": {**LLAMA, key: value}})
    body = assert_json_error(response, 422)
    msg = body["detail"][0]["msg"]
    assert key in msg and limit in msg


def test_moe_expert_count_is_bounded(client: TestClient) -> None:
    cfg = {**LLAMA, "model_type": "mixtral", "num_local_experts": 100_000, "num_experts_per_tok": 2}
    body = assert_json_error(client.post("/api/v1/estimate", json={**BASE, "hf_config": cfg}), 422)
    assert "num_local_experts" in body["detail"][0]["msg"]


def test_search_link_with_a_huge_config_is_refused_fast(client: TestClient) -> None:
    import json

    cfg = json.dumps({**LLAMA, "num_hidden_layers": 10**7})
    page = client.get("/search", params={"model": "hf", "hf_config": cfg, **BASE, "tokens": "1e9"})
    assert page.status_code == 422 and "1,024" in page.text


# -- item 3: nesting and digits, on the API and the pages ----------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/estimate", "/api/v1/plans/search", "/api/v1/cost"])
def test_json_bodies_nested_5000_deep_or_with_5000_digits_are_422(client: TestClient, path: str) -> None:
    for value in (nested(5000), "1" + "0" * 5000):
        text = '{"hf_config": {"model_type": "llama", "x": ' + value + '}, "gpu": "h100-sxm", "gpus": 8}'
        body = assert_json_error(post_raw(client, path, text), 422)
        assert body["detail"][0]["loc"] == ["body"]


@pytest.mark.parametrize("depth", [21, 200, 254, 300, 900])
def test_stored_json_nesting_is_bounded_to_what_a_backup_restores(client: TestClient, depth: int) -> None:
    value: list = []
    for _ in range(depth - 2):
        value = [value]
    cfg = {**LLAMA, "x": value}
    response = client.post(
        "/api/v1/scenarios", json={"name": "deep", "inputs": {**BASE, "hf_config": cfg}}, headers=AUTH
    )
    body = assert_json_error(response, 422)
    assert "nested deeper than 20 levels" in body["detail"][0]["msg"]


def test_integers_over_18_digits_in_a_config_are_422(client: TestClient) -> None:
    cfg = {**LLAMA, "rope_theta": 10**30}
    body = assert_json_error(client.post("/api/v1/estimate", json={**BASE, "hf_config": cfg}), 422)
    assert "18 digits" in body["detail"][0]["msg"]


def test_nul_characters_are_refused_before_the_database(client: TestClient) -> None:
    response = client.post(
        "/api/v1/scenarios", json={"name": "a\x00b", "inputs": {**BASE, "model": "llama3.1-8b"}}, headers=AUTH
    )
    assert "NUL" in assert_json_error(response, 422)["detail"][0]["msg"]
    cfg = {**LLAMA, "_name_or_path": "x\x00y"}
    response = client.post(
        "/api/v1/scenarios", json={"name": "n", "inputs": {**BASE, "hf_config": cfg}}, headers=AUTH
    )
    assert "NUL" in assert_json_error(response, 422)["detail"][0]["msg"]


# -- item 4 and the 500s from tiny overrides ---------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["efficiency.gemm_efficiency", "scale_out_network.efficiency", "node.scale_out_gbit_per_s_per_nic"]
)
def test_overrides_that_make_the_result_infinite_are_a_422_naming_them(client: TestClient, key: str) -> None:
    body = {**BASE, "gpus": 16, "model": "llama3.1-8b", "figure_overrides": {key: 5e-324}}
    for path, extra in (("/api/v1/estimate", {}), ("/api/v1/cost", {"tokens": 1e9})):
        detail = assert_json_error(client.post(path, json={**body, **extra}), 422)["detail"]
        assert detail[0]["loc"] == ["body", "figure_overrides", *key.split(".")]
        assert "not a finite number" in detail[0]["msg"]


# -- item 2: search budget ---------------------------------------------------------------------------------


def test_search_budget_refuses_when_every_slot_is_busy() -> None:
    budget = SearchBudget(concurrency=1, timeout_s=5, queue_s=0.05)
    with budget.slot(), pytest.raises(SearchBusy) as info, budget.slot():
        pass
    assert info.value.retry_after_s >= 1
    with budget.slot() as should_stop:  # the slot came back
        assert should_stop() is False


def test_saturated_search_is_a_503_with_retry_after(client: TestClient) -> None:
    budget: SearchBudget = client.app.state.search_budget  # type: ignore[attr-defined]
    budget.queue_s = 0.05
    body = {"model": "llama3.1-8b", **BASE, "max_pp": 2}
    held = [budget._slots.acquire() for _ in range(budget.concurrency)]
    try:
        response = client.post("/api/v1/plans/search", json=body)
        assert_json_error(response, 503)
        assert int(response.headers["retry-after"]) >= 1
        page = client.get("/search", params={**body, "tokens": "1e9"})
        assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
    finally:
        for _ in held:
            budget._slots.release()
    assert client.post("/api/v1/plans/search", json=body).status_code == 200


def test_a_search_past_its_deadline_is_stopped(settings: Settings) -> None:
    from app.db.migrate import upgrade

    upgrade(settings.database_url)
    slow = settings.model_copy(update={"search_timeout_s": 1e-6})
    with TestClient(create_app(slow)) as client:
        body = {"model": "llama3.1-8b", **BASE, "gpus": 64}
        response = client.post("/api/v1/plans/search", json=body)
        assert "CAPPLAN_SEARCH_TIMEOUT_S" in assert_json_error(response, 503)["detail"]


def test_html_search_honours_search_max_plans(settings: Settings) -> None:
    from app.db.migrate import upgrade

    upgrade(settings.database_url)
    small = settings.model_copy(update={"search_max_plans": 1000})
    with TestClient(create_app(small)) as client:
        page = client.get("/search", params={"model": "llama3.1-8b", **BASE, "gpus": 64, "tokens": "1e9"})
        assert page.status_code == 422 and "limit 1,000" in page.text


def test_concurrent_searches_never_exceed_the_slots(client: TestClient) -> None:
    budget: SearchBudget = client.app.state.search_budget  # type: ignore[attr-defined]
    running = peak = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, peak
        try:
            with budget.slot():
                with lock:
                    running += 1
                    peak = max(peak, running)
                time.sleep(0.05)
                with lock:
                    running -= 1
        except SearchBusy:
            pass

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak <= budget.concurrency


# -- item 8: database outage -------------------------------------------------------------------------------


def test_data_endpoints_answer_503_json_while_the_database_is_down() -> None:
    settings = Settings(
        database_url="postgresql+psycopg://nobody:nothing@127.0.0.1:1/none", data_dir=REPO_ROOT / "data",
        log_level="WARNING", api_token="t",
    )  # fmt: skip
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for response in (client.get("/api/v1/scenarios"), client.get("/api/v1/benchmarks"),
                         client.get("/api/v1/scenarios/1")):  # fmt: skip
            body = assert_json_error(response, 503)
            assert "database" in body["detail"] and response.headers["retry-after"]
        page = client.get("/scenarios")
        assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
        assert "content-security-policy" in page.headers


def test_an_unexpected_error_is_json_or_the_error_page_with_the_security_headers(client: TestClient) -> None:
    app = client.app

    @app.get("/api/v1/boom", include_in_schema=False)  # type: ignore[attr-defined]
    def boom() -> None:
        raise RuntimeError("boom")

    @app.get("/boom", include_in_schema=False)  # type: ignore[attr-defined]
    def boom_page() -> None:
        raise RuntimeError("boom")

    with TestClient(app, raise_server_exceptions=False) as c:
        body = assert_json_error(c.get("/api/v1/boom"), 500)
        assert "boom" not in body["detail"]
        page = c.get("/boom")
        assert page.status_code == 500 and page.headers["content-type"].startswith("text/html")
        assert all(h in page.headers for h in SECURITY_HEADERS)


# -- item 11: what is saved opens later; numbers are numbers; lists are paged -------------------------------------


@pytest.mark.parametrize(
    ("inputs", "loc"),
    [
        ({"model": "no-such-model"}, ["body", "inputs", "model"]),
        ({"model": "llama3.1-8b", "gpu": "no-such-gpu"}, ["body", "inputs", "gpu"]),
        ({"model": "llama3.1-8b", "node": "no-such-node"}, ["body", "inputs", "node"]),
    ],
)
def test_scenarios_with_unknown_slugs_are_not_saved(client: TestClient, inputs: dict, loc: list) -> None:
    body = {"name": "x", "inputs": {**BASE, **inputs}}
    detail = assert_json_error(client.post("/api/v1/scenarios", json=body, headers=AUTH), 422)["detail"]
    assert detail[0]["loc"] == loc
    assert client.get("/api/v1/scenarios").json() == []
    saved = client.post("/api/v1/scenarios", json={"name": "ok", "inputs": {**BASE, "model": "llama3.1-8b"}},
                        headers=AUTH).json()  # fmt: skip
    change = {"version": 1, "inputs": {**BASE, **inputs}}
    assert client.put(f"/api/v1/scenarios/{saved['id']}", json=change, headers=AUTH).status_code == 422


@pytest.mark.parametrize(
    "body",
    [
        {
            "name": "x",
            "inputs": {**BASE, "model": "llama3.1-8b"},
            "overrides": {"reliability": {"elastic_reschedule_s": False}},
        },
        {"name": "x", "inputs": {**BASE, "model": "llama3.1-8b", "gpus": True}},
        {
            "name": "x",
            "inputs": {
                **BASE,
                "model": "llama3.1-8b",
                "figure_overrides": {"efficiency.gemm_efficiency": True},
            },
        },
    ],
)
def test_booleans_are_not_numbers(client: TestClient, body: dict) -> None:
    detail = assert_json_error(client.post("/api/v1/scenarios", json=body, headers=AUTH), 422)["detail"]
    assert "expected a number, got true/false" in detail[0]["msg"]


def test_scenario_list_is_paginated(client: TestClient) -> None:
    for i in range(5):
        body = {"name": f"s{i}", "inputs": {**BASE, "model": "llama3.1-8b"}}
        assert client.post("/api/v1/scenarios", json=body, headers=AUTH).status_code == 201
    first = client.get("/api/v1/scenarios", params={"limit": 2})
    assert [s["name"] for s in first.json()] == ["s4", "s3"]
    assert first.headers["x-total-count"] == "5" and 'rel="next"' in first.headers["link"]
    last = client.get("/api/v1/scenarios", params={"limit": 2, "offset": 4})
    assert [s["name"] for s in last.json()] == ["s0"] and "link" not in last.headers
    assert client.get("/api/v1/scenarios", params={"limit": 10_000}).status_code == 422
    assert len(client.get("/api/v1/scenarios").json()) == 5  # default page: 50
