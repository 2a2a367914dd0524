"""The catalog over JSON: every kind lists with provenance; unknown slugs 404 with the known ones."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

KINDS = ["accelerators", "nodes", "fabrics", "prices", "architectures", "switches", "topologies"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_figure_has_source_and_as_of(client: TestClient, kind: str) -> None:
    body = client.get(f"/api/v1/catalog/{kind}").json()
    assert body["kind"] == kind
    assert body["count"] == len(body["entries"]) > 0
    for entry in body["entries"]:
        assert entry["figures"], entry["slug"]
        for name, fig in entry["figures"].items():
            assert fig["source"] and fig["as_of"], (entry["slug"], name)
            assert fig["source_title"], f"{entry['slug']}.{name}: source {fig['source']!r} has no title"
            assert fig["confidence"] in {"high", "medium", "low"}


def test_accelerator_detail_uses_dense_not_sparse_peak(client: TestClient) -> None:
    body = client.get("/api/v1/catalog/accelerators/h100-sxm").json()
    assert body["slug"] == "h100-sxm"
    assert body["figures"]["bf16_dense_tflops"]["value"] == pytest.approx(989.4, rel=1e-3)


def test_required_slugs_present(client: TestClient) -> None:
    slugs = {e["slug"] for e in client.get("/api/v1/catalog/architectures").json()["entries"]}
    assert {"gpt3-175b", "llama3.1-405b", "deepseek-v3", "mixtral-8x22b", "qwen2.5-72b"} <= slugs
    nodes = {e["slug"] for e in client.get("/api/v1/catalog/nodes").json()["entries"]}
    assert {"p5.48xlarge", "p6-b200.48xlarge", "dgx-h100", "gb200-nvl72"} <= nodes


def test_filter_by_substring(client: TestClient) -> None:
    body = client.get("/api/v1/catalog/accelerators", params={"q": "h200"}).json()
    assert {e["slug"] for e in body["entries"]} == {"h200-sxm", "h200-nvl"}


def test_unknown_slug_is_404_listing_known(client: TestClient) -> None:
    response = client.get("/api/v1/catalog/accelerators/h900")
    assert response.status_code == 404
    body = response.json()
    assert "h900" in body["detail"]
    assert "h100-sxm" in body["known"]


def test_unknown_kind_is_422_naming_the_field(client: TestClient) -> None:
    response = client.get("/api/v1/catalog/gizmos")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["path", "kind"]


def test_openapi_documents_the_catalog(client: TestClient) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert "/api/v1/catalog/{kind}" in paths
    assert "404" in paths["/api/v1/catalog/{kind}/{slug}"]["get"]["responses"]


def test_healthz_reports_database(client: TestClient) -> None:
    body = client.get("/healthz").json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert body["catalog"]["accelerators"] >= 12


def test_healthz_is_503_when_database_is_gone(client: TestClient) -> None:
    from sqlalchemy import create_engine

    client.app.state.engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["database"] == "unavailable"


def test_metrics_count_requests_and_catalog(client: TestClient) -> None:
    client.get("/api/v1/catalog/accelerators")
    text = client.get("/metrics").text
    assert 'http_requests_total{handler="/api/v1/catalog/{kind}"' in text
    assert 'capplan_catalog_entries{kind="accelerators"}' in text


def test_two_apps_in_one_process_do_not_clash(settings) -> None:
    from app.main import create_app

    create_app(settings)
    create_app(settings)  # a per-app registry: no "Duplicated timeseries"
