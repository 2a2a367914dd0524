"""POST /api/v1/size: ranked rows, the Pareto front, losses by reason and the winner's plan document; 422s
naming the field and the reason; the same run in the background (POST /api/v1/size/jobs, GET its progress)."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from app.services.search import SearchBudget
from app.services.size_jobs import SizingJobs

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


def _wait(client: TestClient, url: str) -> dict:
    """The job's answer once it is no longer running (the test waits for the thread, then asks once)."""
    job = client.app.state.sizing_jobs.get(url.rsplit("/", 1)[1])
    for _ in range(6000):
        if job.done:
            break
        time.sleep(0.05)
    response = client.get(url)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_background_run_reports_progress_then_the_same_result(client: TestClient) -> None:
    """POST /api/v1/size/jobs answers at once (202, Location) and GET reports the run until it holds the result
    POST /api/v1/size answers; the job is the page's: GET /size/jobs/{id} shows it too."""
    started = client.post("/api/v1/size/jobs", json=BASE)
    assert started.status_code == 202, started.text
    body = started.json()
    assert body["status"] in ("running", "done") and started.headers["Location"] == body["poll"]
    assert body["poll"] == f"/api/v1/size/jobs/{body['id']}"
    final = _wait(client, body["poll"])
    assert final["status"] == "done" and final["error"] is None
    assert final["progress"]["phase"] == "done" and final["progress"]["done"] == final["progress"]["total"]
    direct = client.post("/api/v1/size", json=BASE).json()
    assert [r["plan"] for r in final["result"]["ranked"]] == [r["plan"] for r in direct["ranked"]]
    assert final["result"]["plan_document"] == direct["plan_document"]
    page = client.get(f"/size/jobs/{body['id']}")
    assert page.status_code == 200 and "llama3.1-8b" in page.text and 'value="64:128"' in page.text


def test_a_background_run_refuses_bad_input_at_once_and_says_why_one_failed(client: TestClient) -> None:
    for bad, field in (({"gpus_range": "8:4"}, "gpus_range"), ({"tokens": -1}, "tokens"),
                       ({"model": "nope"}, "model"), ({"accelerators": ["tpu-v9"]}, "accelerators")):  # fmt: skip
        response = client.post("/api/v1/size/jobs", json={**BASE, **bad})
        assert response.status_code == 422 and field in response.text, (bad, response.text)
    unknown = client.get("/api/v1/size/jobs/nope")
    assert unknown.status_code == 404 and "no such sizing run" in unknown.json()["detail"]
    client.app.state.search_budget = SearchBudget(timeout_s=0.0, concurrency=1)  # every run stops at once
    started = client.post("/api/v1/size/jobs", json=BASE)
    assert started.status_code == 202
    final = _wait(client, started.json()["poll"])
    assert final["status"] == "failed" and final["result"] is None
    assert final["error"]["status_code"] == 503 and "CAPPLAN_SEARCH_TIMEOUT_S" in final["error"]["detail"]
    client.app.state.sizing_jobs = SizingJobs(max_running=0)
    busy = client.post("/api/v1/size/jobs", json=BASE)
    assert busy.status_code == 503 and busy.headers["Retry-After"]


def test_size_ranks_on_cash_and_reads_the_region_and_the_day(client: TestClient) -> None:
    amortised = client.post("/api/v1/size", json={**BASE, "options": ["on-demand", "commit-1yr"]}).json()
    cash = client.post(
        "/api/v1/size", json={**BASE, "options": ["on-demand", "commit-1yr"], "basis": "cash"}
    ).json()
    assert amortised["ranked_on"] == "amortised" and cash["ranked_on"] == "cash"

    def first_aws(result: dict) -> str:
        return next(r["option"] for r in result["ranked"] if r["vendor"] == "aws")

    assert first_aws(amortised) == "commit-1yr"  # the used part of the year is cheaper per hour
    assert first_aws(cash) == "on-demand"  # but the whole year is paid out
    west = client.post("/api/v1/size", json={**BASE, "region": "us-west-1", "top_k": 200}).json()
    od = {r["gpus"]: r for r in west["ranked"] if (r["vendor"], r["option"]) == ("aws", "on-demand")}
    home = {
        r["gpus"]: r
        for r in client.post("/api/v1/size", json={**BASE, "top_k": 200}).json()["ranked"]
        if (r["vendor"], r["option"]) == ("aws", "on-demand")
    }
    assert od and all(od[g]["usd_amortised"] > home[g]["usd_amortised"] for g in od)
    for bad, field in (({"region": "mars-1"}, "region"), ({"basis": "vibes"}, "basis"),
                       ({"runs": 2, "use_after_run_years": 1}, "not both"), ({"prices_as_of": "soon"}, "prices_as_of")):  # fmt: skip
        response = client.post("/api/v1/size", json={**BASE, **bad})
        assert response.status_code == 422 and field in response.text, (bad, response.text)


def test_an_api_job_is_shown_with_every_field_of_the_page_form() -> None:
    """GET /size/jobs/{id} renders an API job with the page's form: the request must map to every form field (a
    field added to the page and not here broke that page)."""
    from app.api.size import _form_values
    from app.services.size import SizeRequest
    from app.web.size import FIELDS, size_request

    body = SizeRequest(model="llama3.1-8b", tokens=1e12, deadline_days=30, front_tolerance_pct=0, runs=2)
    values = _form_values(body)
    assert set(values) == set(FIELDS)
    again, errors = size_request(values)
    assert not errors and again == body
