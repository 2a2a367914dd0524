"""POST /api/v1/cost and /api/v1/cost/monthly: the documented fields, and 422 with field + reason on bad input."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

BASE = {
    "model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 64, "global_batch": 256, "seq_len": 8192,
    "sharding": "fsdp-full", "framework": "fsdp2", "recompute": "selective", "tokens": 1e12,
}  # fmt: skip


def post(client: TestClient, **changes):
    return client.post("/api/v1/cost", json={**BASE, **changes})


def test_cost_returns_the_documented_fields(client: TestClient) -> None:
    response = post(client)
    assert response.status_code == 200, response.text
    body = response.json()
    for key in ("job_mtbf_hours", "checkpoint_interval_s", "goodput", "expected_failures", "options", "reliability",
                "self_build", "storage", "serving", "assumptions", "cheapest", "instance"):  # fmt: skip
        assert key in body, key
    assert body["instance"] == "p5.48xlarge" and body["instances"] == 8
    assert 0 < body["goodput"] <= 1 and body["job_mtbf_hours"] > 100
    options = {o["option"]: o for o in body["options"]}
    assert set(options) == {"on-demand", "commit-1yr", "commit-3yr", "spot", "capacity-block", "off-peak",
                            "reserved-spot-mix", "self-build"}  # fmt: skip
    for row in options.values():
        assert row["days"] > 0 and row["total_usd"] > 0
    assert options["on-demand"]["usd_per_gpu_hour"] == pytest.approx(6.88)
    assert any(a["source"] == "SKY8" for a in body["assumptions"])


def test_cost_options_filter_and_overrides(client: TestClient) -> None:
    response = post(client, options=["on-demand", "spot"],
                    overrides={"on_demand_usd_per_hour": 80, "reliability": {"checkpoint_mode": "sync"}})  # fmt: skip
    assert response.status_code == 200, response.text
    body = response.json()
    assert [o["option"] for o in body["options"]] == ["on-demand", "spot"]
    assert body["options"][0]["usd_per_instance_hour"] == 80
    assert body["reliability"]["checkpoint_mode"] == "sync"


@pytest.mark.parametrize(
    ("overrides", "loc"),
    [
        ({"on_demand_usd_per_hour": -1}, ["overrides", "on_demand_usd_per_hour"]),
        ({"self_build": {"electricity_usd_per_kwh": -0.1}}, ["overrides", "self_build", "electricity_usd_per_kwh"]),
        ({"reliability": {"storage_write_gbyte_per_s_per_node": 0}},
         ["overrides", "reliability", "storage_write_gbyte_per_s_per_node"]),
        ({"self_build": {"depreciation_years": -1}}, ["overrides", "self_build", "depreciation_years"]),
        ({"commit_1yr_discount": 1.5}, ["overrides", "commit_1yr_discount"]),
        ({"no_such_figure": 1}, ["overrides", "no_such_figure"]),
    ],
)  # fmt: skip
def test_bad_overrides_are_422_naming_the_field(client: TestClient, overrides: dict, loc: list[str]) -> None:
    response = post(client, overrides=overrides)
    assert response.status_code == 422
    item = response.json()["detail"][0]
    assert item["loc"] == ["body", *loc] and item["msg"]


@pytest.mark.parametrize(
    ("changes", "loc", "needle"),
    [
        ({"overrides": {"instance": "p9.huge"}}, ["body", "overrides", "instance"], "p5.48xlarge"),
        ({"overrides": {"instance": "p4d.24xlarge"}}, ["body", "overrides", "instance"], "a100-40gb"),
        ({"overrides": {"reliability": {"failure_record": "nope"}}},
         ["body", "overrides", "reliability", "failure_record"], "llama3-405b"),
        ({"overrides": {"self_build": {"server_price": "nope"}}},
         ["body", "overrides", "self_build", "server_price"], "hgx-h100-cheah-2024"),
        ({"gpu": "gb200", "gpus": 72, "global_batch": 144}, ["body", "gpu"], "no AWS instance"),
    ],
)  # fmt: skip
def test_unusable_inputs_are_422(client: TestClient, changes: dict, loc: list[str], needle: str) -> None:
    response = post(client, **changes)
    assert response.status_code == 422, response.text
    item = response.json()["detail"][0]
    assert item["loc"] == loc and needle in item["msg"]


def test_bad_tokens_and_option_are_422(client: TestClient) -> None:
    assert post(client, tokens=0).status_code == 422
    assert post(client, tokens=None).status_code == 422
    item = post(client, options=["layaway"]).json()["detail"][0]
    assert item["loc"][:2] == ["body", "options"]


def test_monthly_table(client: TestClient) -> None:
    response = client.post("/api/v1/cost/monthly", json={"instance": "p5.48xlarge", "nodes": 1, "months": 12})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["on_demand_usd_per_month"] == pytest.approx(55.04 * 730)
    for key in ("commit_1yr_usd_per_month", "commit_3yr_usd_per_month", "spot_usd_per_month",
                "capacity_block_usd_per_month", "self_build_capex_usd", "self_build_opex_usd_per_month"):  # fmt: skip
        assert body[key] > 0, key
    assert len(body["cumulative"]["months"]) == 13 and "self-build" in body["cumulative"]["usd"]
    by_node = client.post("/api/v1/cost/monthly", json={"node": "dgx-h100", "nodes": 128}).json()
    assert by_node["instance"] == "p5.48xlarge" and by_node["nodes"] == 128
    assert by_node["self_build"]["fabric"]["size"]["leaf_switches"] == 32


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"nodes": 1}, ["body"]),
        ({"instance": "p5.48xlarge", "nodes": 0}, ["body", "nodes"]),
        ({"instance": "p9.huge", "nodes": 1}, ["body", "instance"]),
        ({"node": "dgx-h900", "nodes": 1}, ["body", "node"]),
        ({"instance": "p5.48xlarge", "nodes": 1, "overrides": {"spot_usd_per_hour": -3}},
         ["body", "overrides", "spot_usd_per_hour"]),
    ],
)  # fmt: skip
def test_monthly_bad_input_is_422(client: TestClient, body: dict, loc: list[str]) -> None:
    response = client.post("/api/v1/cost/monthly", json=body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == loc


def test_cost_is_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert "/api/v1/cost" in paths and "/api/v1/cost/monthly" in paths
    assert "422" in paths["/api/v1/cost"]["post"]["responses"]


def test_cost_nan_tokens_and_zero_price_are_422(client: TestClient) -> None:
    response = client.post("/api/v1/cost", content=b'{"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 64, '
                           b'"global_batch": 256, "seq_len": 8192, "tokens": NaN}',
                           headers={"content-type": "application/json"})  # fmt: skip
    assert response.status_code == 422, response.text
    assert "must be a number" in response.text
    response = post(client, overrides={"spot_usd_per_hour": 0})
    assert response.status_code == 422 and "spot_usd_per_hour" in response.text


def test_cost_unknown_region_is_422(client: TestClient) -> None:
    response = post(client, overrides={"region": "mars-1"})
    assert response.status_code == 422, response.text
    assert "unknown region" in response.text and "region" in response.text


def test_cost_in_a_region_with_some_prices_prices_those_and_one_with_none_is_422(client: TestClient) -> None:
    """p5.48xlarge has a Capacity Block offer in us-east-2 but no on-demand price there: the block is priced and
    on-demand says why not; g5.48xlarge has no price of any kind in us-east-2: 422 at overrides.region."""
    response = post(client, overrides={"region": "us-east-2"})
    assert response.status_code == 200, response.text
    rows = {o["option"]: o for o in response.json()["options"] if o.get("provider", "aws") == "aws"}
    assert rows["capacity-block"]["available"] and not rows["on-demand"]["available"]
    assert "no on-demand price for p5.48xlarge in us-east-2" in rows["on-demand"]["reason"]
    response = post(client, overrides={"region": "us-east-2", "instance": "g5.48xlarge"}, gpu="a10g")
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "overrides", "region"] and "price of any kind" in error["msg"]
