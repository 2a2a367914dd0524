"""Hardening of the pages (issue 15): who may write through the UI, login rate limit and logout, and inputs that
used to answer a text/plain 500."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.main import SECURITY_HEADERS
from app.settings import Settings
from app.web.security import CSRF_COOKIE, SESSION_COOKIE, LoginLimiter

FORM = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": "8", "global_batch": "16", "seq_len": "2048"}


def _app(settings: Settings):
    from app.db.migrate import upgrade
    from app.main import create_app

    upgrade(settings.database_url)
    return create_app(settings)


def _post_form(c: TestClient, url: str, data: dict, **kw):
    c.get("/catalog")
    return c.post(url, data={**data, "csrf_token": c.cookies[CSRF_COOKIE]}, follow_redirects=False, **kw)


# -- item 5: UI writes ---------------------------------------------------------------------------------------


def test_ui_writes_without_a_ui_password_are_refused_from_other_hosts(settings: Settings) -> None:
    app = _app(settings)
    with TestClient(app, client=("203.0.113.9", 40000)) as remote:
        response = _post_form(remote, "/scenarios", {"name": "x", "query": ""})
        assert response.status_code == 403 and "CAPPLAN_UI_PASSWORD" in response.text
    with TestClient(app, client=("127.0.0.1", 40000)) as local:
        spoofed = _post_form(local, "/scenarios", {"name": "x"}, headers={"X-Forwarded-For": "203.0.113.9"})
        assert spoofed.status_code == 403  # a local reverse proxy does not make its clients local
    with TestClient(app) as api:  # nothing was written
        assert api.get("/api/v1/scenarios").json() == []


def test_ui_writes_from_loopback_are_allowed(client) -> None:
    response = client.post("/scenarios", data={"name": "mine", "query": "&".join(f"{k}={v}" for k, v in FORM.items())},
                           follow_redirects=False)  # fmt: skip
    assert response.status_code in (200, 303), response.text[:200]


def test_ui_writes_with_a_ui_password_need_the_login(
    sqlite_url: str, data_without_shipped_calibration
) -> None:
    settings = Settings(database_url=sqlite_url, ui_password="s3cret", secret_key="k" * 32, log_level="WARNING",
                        data_dir=data_without_shipped_calibration)  # fmt: skip
    with TestClient(_app(settings), client=("203.0.113.9", 40000)) as c:
        c.get("/login")
        token = c.cookies[CSRF_COOKIE]
        refused = c.post("/scenarios", data={"name": "x", "csrf_token": token}, follow_redirects=False)
        assert refused.status_code == 303 and refused.headers["location"].startswith("/login")
        c.post("/login", data={"password": "s3cret", "next": "/", "csrf_token": token})
        assert SESSION_COOKIE in c.cookies
        assert "Log out" in c.get("/scenarios").text
        out = c.post("/logout", data={"csrf_token": token}, follow_redirects=False)
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert SESSION_COOKIE not in c.cookies
        assert c.get("/scenarios", follow_redirects=False).status_code == 303


def test_login_is_rate_limited(sqlite_url: str, data_without_shipped_calibration) -> None:
    settings = Settings(database_url=sqlite_url, ui_password="s3cret", secret_key="k" * 32, log_level="WARNING",
                        data_dir=data_without_shipped_calibration)  # fmt: skip
    with TestClient(_app(settings)) as c:
        c.get("/login")
        token = c.cookies[CSRF_COOKIE]
        codes = [
            c.post("/login", data={"password": f"guess{i}", "csrf_token": token}).status_code
            for i in range(8)
        ]
        assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}
        blocked = c.post("/login", data={"password": "s3cret", "csrf_token": token}, follow_redirects=False)
        assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) >= 1


def test_login_limiter_window_and_total() -> None:
    limiter = LoginLimiter(per_client=2, total=3, window_s=10)
    limiter.failed("a", now=0)
    limiter.failed("a", now=1)
    assert limiter.retry_after("a", now=2) == 9 and limiter.retry_after("b", now=2) == 0
    limiter.failed("b", now=3)
    assert limiter.retry_after("c", now=4) >= 1  # three failures in total: everyone waits
    assert limiter.retry_after("a", now=11.5) == 0


# -- item 3: pages that answered a text/plain 500 -------------------------------------------------------------

DEEP = '{"model_type":"llama","x":' + "[" * 5000 + "]" * 5000 + "}"
BIG = '{"model_type":"llama","x":1' + "0" * 5000 + "}"


@pytest.mark.parametrize(
    "url",
    [
        "/scenarios/compare?ids=9223372036854775808",
        "/search?model=llama3.1-8b&gpu=h100-sxm&gpus=8&global_batch=16&seq_len=2048&top_k=inf",
        "/search?model=llama3.1-8b&gpu=h100-sxm&gpus=8&global_batch=16&seq_len=2048&top_k=1e400",
        "/?o.self_build.pue=1.2&o.self_build.pue.x=1",
        "/?o.reliability=x&o.reliability.detect_s=1",
        "/?o.figure.efficiency.gemm_efficiency=5e-324",
    ],
)
def test_malformed_page_queries_are_422_pages(client, url: str) -> None:
    page = client.get(url)
    assert page.status_code == 422, page.text[:300]
    assert page.headers["content-type"].startswith("text/html")
    assert all(h in page.headers for h in SECURITY_HEADERS)


@pytest.mark.parametrize("path", ["/", "/search", "/planner/export"])
@pytest.mark.parametrize("config", [DEEP, BIG], ids=["deep", "digits"])
def test_unreadable_configs_in_links_are_422(client, path: str, config: str) -> None:
    page = client.get(path, params={**FORM, "model": "hf", "hf_config": config, "tokens": "1e9"})
    assert page.status_code == 422 and "content-security-policy" in page.headers


@pytest.mark.parametrize("config", [DEEP, BIG], ids=["deep", "digits"])
def test_unreadable_uploaded_configs_are_422(client, config: str) -> None:
    response = client.post("/planner/hf-config", files={"file": ("config.json", config.encode())})
    assert response.status_code == 422


def test_a_config_with_too_many_layers_is_refused_on_the_planner(client) -> None:
    cfg = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
           "num_hidden_layers": 10**7, "vocab_size": 1000, "max_position_embeddings": 2048}  # fmt: skip
    page = client.get("/", params={**FORM, "model": "hf", "hf_config": json.dumps(cfg), "tokens": "1e9"})
    assert page.status_code == 422 and "1,024" in page.text


def test_scenarios_page_is_paginated(client) -> None:
    from app.web.scenarios import PAGE_SIZE

    for i in range(PAGE_SIZE + 2):
        r = client.post("/api/v1/scenarios", json={"name": f"s{i}", "inputs": {**FORM, "gpus": 8, "global_batch": 16,
                        "seq_len": 2048}}, headers={"Authorization": "Bearer test-token"})  # fmt: skip
        assert r.status_code == 201
    page1 = client.get("/scenarios")
    assert page1.text.count('name="ids"') == PAGE_SIZE and "page 1 of 2" in page1.text
    page2 = client.get("/scenarios?page=2")
    assert page2.text.count('name="ids"') == 2


def test_saving_an_unknown_model_through_the_ui_is_refused(client) -> None:
    query = "&".join(f"{k}={v}" for k, v in {**FORM, "model": "no-such-model", "tokens": "1e9"}.items())
    response = client.post("/scenarios", data={"name": "x", "query": query}, follow_redirects=False)
    assert response.status_code == 422
    assert client.get("/api/v1/scenarios").json() == []
