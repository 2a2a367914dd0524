"""CSRF on every HTML form post, the optional password login, and inert user-supplied text."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.settings import Settings
from app.web.security import CSRF_COOKIE, session_cookie, valid_session


def test_form_post_without_token_is_refused(client) -> None:
    response = client.post("/scenarios", data={"name": "x", "query": "model=llama3.1-8b"}, raw_csrf=True)
    assert response.status_code == 403
    assert "security token" in response.text


def test_form_post_with_a_wrong_token_is_refused(client) -> None:
    client.get("/catalog")
    bad = client.post("/scenarios", data={"name": "x", "query": "", "csrf_token": "forged"}, raw_csrf=True)
    assert bad.status_code == 403


def test_pages_set_a_strict_csrf_cookie_and_forms_carry_it(client) -> None:
    response = client.get("/")
    cookie = response.headers.get("set-cookie", "")
    assert CSRF_COOKIE in cookie and "samesite=strict" in cookie.lower() and "httponly" in cookie.lower()
    assert f'name="csrf_token" value="{client.cookies[CSRF_COOKIE]}"' in response.text


def test_scenario_named_script_renders_inert(client) -> None:
    name = "<script>alert(1)</script>"
    saved = client.post("/api/v1/scenarios", json={"name": name, "inputs": {"model": "llama3.1-8b", "gpu": "h100-sxm",
                        "gpus": 8, "global_batch": 8, "seq_len": 4096}}, headers={"Authorization": "Bearer test-token"})  # fmt: skip
    assert saved.status_code == 201, saved.text
    for url in ("/scenarios", f"/scenarios/{saved.json()['id']}"):
        html = client.get(url).text
        assert name not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_login_guards_pages_not_the_api(sqlite_url: str) -> None:
    from app.db.migrate import upgrade
    from app.main import create_app

    upgrade(sqlite_url)
    settings = Settings(
        database_url=sqlite_url, ui_password="s3cret", secret_key="k" * 32, log_level="WARNING"
    )
    with TestClient(create_app(settings)) as c:
        page = c.get("/scenarios?x=1", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login?next=%2Fscenarios%3Fx%3D1"
        assert c.get("/api/v1/catalog/accelerators").status_code == 200
        assert c.get("/healthz").status_code == 200
        form = c.get("/login")
        token = c.cookies[CSRF_COOKIE]
        wrong = c.post("/login", data={"password": "nope", "next": "/scenarios", "csrf_token": token})
        assert wrong.status_code == 401 and "Wrong password" in wrong.text
        assert form.status_code == 200
        ok = c.post("/login", data={"password": "s3cret", "next": "//evil.example/", "csrf_token": token},
                    follow_redirects=False)  # fmt: skip
        assert ok.status_code == 303 and ok.headers["location"] == "/"  # never off-site
        assert c.get("/scenarios").status_code == 200


def test_session_cookie_expires_and_cannot_be_forged() -> None:
    value = session_cookie("key", now=1000.0)
    assert valid_session("key", value, now=1001.0)
    assert not valid_session("other", value, now=1001.0)
    assert not valid_session("key", value, now=1000.0 + 13 * 3600)
    assert not valid_session("key", "9999999999.deadbeef")
