"""Scenarios over JSON: CRUD, bearer-token writes (401/403), optimistic locking (409 with the version)."""

from __future__ import annotations

from fastapi.testclient import TestClient

AUTH = {"Authorization": "Bearer test-token"}
BODY = {
    "name": "8B on 8 H100",
    "inputs": {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 8, "seq_len": 4096,
               "tokens": 1e10},
    "overrides": {"on_demand_usd_per_hour": 40.0, "self_build": {"pue": 1.3}},
}  # fmt: skip


def test_create_read_list_update_delete(client: TestClient) -> None:
    created = client.post("/api/v1/scenarios", json=BODY, headers=AUTH)
    assert created.status_code == 201
    s = created.json()
    assert created.headers["location"] == f"/api/v1/scenarios/{s['id']}"
    assert s["version"] == 1 and s["inputs"]["model"] == "llama3.1-8b"
    assert s["overrides"] == {"on_demand_usd_per_hour": 40.0, "self_build": {"pue": 1.3}}
    assert s["planner_url"] == f"/scenarios/{s['id']}"
    assert client.get(f"/api/v1/scenarios/{s['id']}").json()["name"] == BODY["name"]
    assert [x["id"] for x in client.get("/api/v1/scenarios").json()] == [s["id"]]
    updated = client.put(f"/api/v1/scenarios/{s['id']}", json={"version": 1, "name": "renamed"}, headers=AUTH)
    assert (
        updated.status_code == 200 and updated.json()["version"] == 2 and updated.json()["name"] == "renamed"
    )
    assert updated.json()["inputs"] == s["inputs"]
    assert client.delete(f"/api/v1/scenarios/{s['id']}", headers=AUTH).status_code == 204
    assert client.get(f"/api/v1/scenarios/{s['id']}").status_code == 404


def test_writes_need_the_bearer_token(client: TestClient) -> None:
    assert client.post("/api/v1/scenarios", json=BODY).status_code == 401
    assert (
        client.post("/api/v1/scenarios", json=BODY, headers={"Authorization": "Bearer nope"}).status_code
        == 403
    )
    assert (
        client.post("/api/v1/scenarios", json=BODY, headers={"Authorization": "Basic abc"}).status_code == 401
    )
    s = client.post("/api/v1/scenarios", json=BODY, headers=AUTH).json()
    assert client.put(f"/api/v1/scenarios/{s['id']}", json={"version": 1}).status_code == 401
    assert (
        client.delete(f"/api/v1/scenarios/{s['id']}", headers={"Authorization": "Bearer x"}).status_code
        == 403
    )
    assert client.get(f"/api/v1/scenarios/{s['id']}").status_code == 200  # reads are open


def test_stale_version_is_a_409_with_the_current_version(client: TestClient) -> None:
    s = client.post("/api/v1/scenarios", json=BODY, headers=AUTH).json()
    assert (
        client.put(f"/api/v1/scenarios/{s['id']}", json={"version": 1, "name": "a"}, headers=AUTH).status_code
        == 200
    )
    stale = client.put(f"/api/v1/scenarios/{s['id']}", json={"version": 1, "name": "b"}, headers=AUTH)
    assert stale.status_code == 409
    assert stale.json()["version"] == 2 and "version 2" in stale.json()["detail"]
    new_inputs = {**BODY["inputs"], "gpus": 16}
    ok = client.put(f"/api/v1/scenarios/{s['id']}", json={"version": 2, "inputs": new_inputs}, headers=AUTH)
    assert ok.status_code == 200 and ok.json()["inputs"]["gpus"] == 16 and ok.json()["name"] == "a"


def test_invalid_bodies_are_422_naming_the_field(client: TestClient) -> None:
    bad = {**BODY, "inputs": {**BODY["inputs"], "gpus": 0}}
    response = client.post("/api/v1/scenarios", json=bad, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:3] == ["body", "inputs", "gpus"]
    neg = {**BODY, "overrides": {"spot_usd_per_hour": -1}}
    assert client.post("/api/v1/scenarios", json=neg, headers=AUTH).status_code == 422
    assert client.put("/api/v1/scenarios/999", json={"version": 1}, headers=AUTH).status_code == 404
    assert client.delete("/api/v1/scenarios/999", headers=AUTH).status_code == 404


def test_writes_are_refused_without_a_configured_token(settings) -> None:
    from app.db.migrate import upgrade
    from app.main import create_app

    upgrade(settings.database_url)
    with TestClient(create_app(settings.model_copy(update={"api_token": None}))) as c:
        assert c.post("/api/v1/scenarios", json=BODY, headers=AUTH).status_code == 403
