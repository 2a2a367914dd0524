"""Every JSON write route refuses anonymous and wrong-token requests; reads stay open.

The routes are read from the app itself, so a write route added later is covered without editing this test.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

# POST routes that compute and store nothing: open by design (like a GET with a body). /api/v1/size/jobs runs
# /api/v1/size in the background, as the open "Size a cluster" page does: it keeps the answer in memory for 15
# minutes (at most 4 running, 64 held) and writes nothing to the database.
COMPUTE_ONLY = {
    "/api/v1/estimate", "/api/v1/plans/search", "/api/v1/plans/export", "/api/v1/cost", "/api/v1/cost/monthly",
    "/api/v1/size", "/api/v1/size/jobs",
}  # fmt: skip


def write_routes(client: TestClient) -> list[tuple[str, str]]:
    routes = []
    for path, item in client.app.openapi()["paths"].items():
        for method in item:
            if method in {"post", "put", "patch", "delete"} and path not in COMPUTE_ONLY:
                routes.append((method.upper(), path.replace("{scenario_id}", "1").replace("{run_id}", "1")))
    return routes


def test_there_are_write_routes(client: TestClient) -> None:
    methods = {m for m, _ in write_routes(client)}
    assert {"POST", "PUT", "DELETE"} <= methods


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_every_write_route_refuses_without_the_token(client: TestClient, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for method, path in write_routes(client):
        response = client.request(method, path, json={}, headers=headers)
        expected = 401 if token is None else 403
        assert response.status_code == expected, (method, path, response.status_code, response.text[:200])


def test_reads_stay_open(client: TestClient) -> None:
    for path in ("/api/v1/scenarios", "/api/v1/benchmarks", "/api/v1/catalog/accelerators", "/healthz"):
        assert client.get(path).status_code == 200, path
