""" "Size a cluster" page: linked from the nav, the form alone without a query, the ranked table and the Pareto
chart with one, the htmx partial, errors that keep what the user typed, and the background run the form starts:
its progress panel polls until the results replace it."""

from __future__ import annotations

import json
import re
import threading
import time
from urllib.parse import unquote

from fastapi.testclient import TestClient

from app.services.errors import InputError, field_error
from app.services.size import SizingProgress
from app.services.size_jobs import SizingJobs

QUERY = {"model": "llama3.1-8b", "tokens": "1e12", "accelerators": "h100-sxm", "options": "on-demand,spot",
         "gpus_range": "64:128"}  # fmt: skip


def test_nav_links_the_size_page_and_the_form_renders_alone(client: TestClient) -> None:
    home = client.get("/")
    assert 'href="/size"' in home.text
    page = client.get("/size")
    assert page.status_code == 200 and 'id="size-form"' in page.text and 'id="size-table"' not in page.text
    assert 'class="busy"' in page.text  # the htmx request indicator while the search runs


def test_size_page_shows_the_ranking_the_chart_and_the_plan(client: TestClient) -> None:
    page = client.get("/size", params={**QUERY, "deadline_days": "15"})  # the 64-GPU points miss it
    assert page.status_code == 200, page.text
    assert (
        'id="size-table"' in page.text and 'id="lost-table"' in page.text and 'id="winner-plan"' in page.text
    )
    match = re.search(
        r'data-chart="chart-size-pareto".*?<script type="application/json">(.*?)</script>', page.text, re.S
    )
    assert match, "the Pareto chart is drawn"
    option = json.loads(match.group(1).replace("&#34;", '"'))
    assert {s["name"] for s in option["series"]} == {"ranked", "Pareto front"}
    link = re.search(
        r'id="winner-plan-download" download="plan.json" href="data:application/json;charset=utf-8,([^"]+)"',
        page.text,
    )
    assert link, "the winner's plan document can be downloaded"
    doc = json.loads(unquote(link.group(1).replace("&amp;", "&")))
    assert doc["schema"] == "capplan.plan/v1"
    assert re.search(r"\d+ of \d+ \(node, cluster size\) pairs searched", page.text)
    partial = client.get("/size", params=QUERY, headers={"HX-Request": "true", "HX-Request-Type": "partial"})
    assert partial.text.lstrip().startswith('<section id="size-results"')


def test_errors_keep_what_the_user_typed(client: TestClient) -> None:
    page = client.get("/size", params={**QUERY, "tokens": "lots", "deadline_days": "-3"})
    assert page.status_code == 422
    assert 'value="lots"' in page.text and 'value="-3"' in page.text and "tokens" in page.text
    page = client.get("/size", params={**QUERY, "accelerators": "tpu-v9"})
    assert page.status_code == 422 and 'value="tpu-v9"' in page.text and "tpu-v9" in page.text


# -- the page's background runs: start, progress, results ----------------------------------------------------

PARTIAL = {"HX-Request": "true", "HX-Request-Type": "partial"}


def _poll(client: TestClient, job_id: str):
    """The job's answer once it has finished (the page polls every second; here the test waits for the thread, up to
    five minutes on a loaded machine, then asks once)."""
    job = client.app.state.sizing_jobs.get(job_id)
    for _ in range(6000):
        if job.done:
            break
        time.sleep(0.05)
    response = client.get(f"/size/jobs/{job_id}", headers=PARTIAL)
    assert 'hx-trigger="every 1s"' not in response.text, "a finished job's panel stops polling"
    return response


def test_the_form_starts_a_job_whose_panel_polls_until_the_results_replace_it(client: TestClient) -> None:
    page = client.get("/size")
    assert 'hx-post="/size/jobs"' in page.text and 'name="csrf_token"' in page.text
    started = client.post("/size/jobs", data=QUERY, headers=PARTIAL)
    assert started.status_code == 202, started.text
    panel = started.text.lstrip()
    assert panel.startswith('<section id="size-results"') and 'hx-trigger="every 1s"' in panel
    job_id = re.search(r'hx-get="/size/jobs/([^"]+)"', panel).group(1)
    assert 'id="size-progress"' in panel and "<progress" in panel
    assert started.headers["HX-Replace-Url"].startswith("/size?model=llama3.1-8b&tokens=1e12")
    done = _poll(client, job_id)
    assert done.status_code == 200 and 'id="size-table"' in done.text and 'id="winner-plan"' in done.text
    assert done.text.lstrip().startswith('<section id="size-results"') and "size-progress" not in done.text
    again = client.get(f"/size/jobs/{job_id}")  # a full page too (the job is kept a while)
    assert again.status_code == 200 and 'id="size-form"' in again.text and 'value="llama3.1-8b"' in again.text


def test_a_running_job_shows_where_it_stands(client: TestClient) -> None:
    release = threading.Event()

    def run(progress):
        progress(SizingProgress("search", 2, 10, "p5.48xlarge at 1,024 GPUs (h100-sxm)", 123_456, 7_890, 1.5))
        release.wait(30)
        raise InputError([field_error("gpus_range", "no whole number of nodes", "value_error.range")])

    job = client.app.state.sizing_jobs.start(dict(QUERY, deadline_days="", budget_usd=""), run)
    try:
        panel = client.get(f"/size/jobs/{job.id}", headers=PARTIAL)
        assert panel.status_code == 200 and 'hx-trigger="every 1s"' in panel.text
        assert "pair 3 of 10: p5.48xlarge at 1,024 GPUs (h100-sxm)" in panel.text
        assert 'max="10" value="2"' in panel.text and "123,456 valid plans" in panel.text
    finally:
        release.set()
    failed = _poll(client, job.id)
    assert (
        failed.status_code == 422
        and "gpus_range" in failed.text
        and "no whole number of nodes" in failed.text
    )


def test_errors_busy_and_unknown_jobs_answer_the_panel_without_polling(client: TestClient) -> None:
    bad = client.post("/size/jobs", data={**QUERY, "tokens": "lots"}, headers=PARTIAL)
    assert bad.status_code == 422 and "tokens" in bad.text and "every 1s" not in bad.text
    assert "HX-Replace-Url" not in bad.headers
    unknown = client.get("/size/jobs/nope", headers=PARTIAL)
    assert unknown.status_code == 404 and "no longer held" in unknown.text and "every 1s" not in unknown.text
    forged = client.post("/size/jobs", data={**QUERY, "csrf_token": "forged"}, raw_csrf=True)
    assert forged.status_code == 403
    client.app.state.sizing_jobs = SizingJobs(max_running=0)
    busy = client.post("/size/jobs", data=QUERY, headers=PARTIAL)
    assert busy.status_code == 503 and "already in progress" in busy.text


def test_values_no_run_can_use_are_refused_before_a_job_starts(client: TestClient) -> None:
    for field, value in [("gpus_range", "1:1e400"), ("tokens", "nan"), ("tokens", "1e400"), ("model", "\x00"),
                         ("accelerators", "tpu-v9"), ("options", "barter"), ("gpus_range", "99999999999:1")]:  # fmt: skip
        response = client.post("/size/jobs", data={**QUERY, field: value}, headers=PARTIAL)
        assert response.status_code == 422, (field, value, response.text[:300])
        assert f"<code>{field}</code>" in response.text and "every 1s" not in response.text
        assert client.get("/size", params={**QUERY, field: value}).status_code == 422


def test_fields_in_error_are_marked_invalid_with_their_message(client: TestClient) -> None:
    """Issue 17's accessibility line on the size page: a field with an error carries aria-invalid and names its
    message (aria-describedby); the htmx answer sends the messages out of band, so static/js/app.js keeps
    aria-invalid in step with them."""
    page = client.get("/size", params={**QUERY, "tokens": "lots"})
    assert page.status_code == 422
    tokens = re.search(r'<input id="z-tokens"[^>]*>', page.text).group(0)
    assert 'aria-invalid="true"' in tokens and 'aria-describedby="z-err-tokens"' in tokens
    assert re.search(r'<span class="field-error" id="z-err-tokens"[^>]*>[^<]+</span>', page.text)
    model = re.search(r'<input id="z-model"[^>]*>', page.text).group(0)
    assert "aria-invalid" not in model and 'aria-describedby="z-err-model"' in model
    answer = client.post("/size/jobs", data={**QUERY, "tokens": "lots"}, headers=PARTIAL)
    assert answer.status_code == 422
    oob = re.search(
        r'<span class="field-error" id="z-err-tokens" hx-swap-oob="true"[^>]*>([^<]+)</span>', answer.text
    )
    assert oob and oob.group(1).strip() and answer.text.lstrip().startswith('<section id="size-results"')


def test_the_cost_basis_and_prices_are_form_fields(client: TestClient) -> None:
    """Rank on cash, with a region's prices and a self-build used for 3 runs: the page ranks and charts on cash and
    keeps what was typed; a bad value is named by its field."""
    page = client.get("/size", params={**QUERY, "options": "on-demand,commit-1yr", "basis": "cash",
                                       "region": "us-west-1", "runs": "3"})  # fmt: skip
    assert page.status_code == 200, page.text[:500]
    assert "Ranked by cash $" in page.text and '<option value="cash" selected>' in page.text
    assert 'value="us-west-1"' in page.text and 'value="3"' in page.text and "3 runs" in page.text
    option = json.loads(re.search(r'data-chart="chart-size-pareto"[^>]*>\s*<script type="application/json">(.*?)</script>',
                                  page.text, re.S).group(1))  # fmt: skip
    assert "cash" in option["yAxis"]["name"]
    bad = client.get("/size", params={**QUERY, "region": "mars-1"})
    assert bad.status_code == 422 and 'value="mars-1"' in bad.text and "unknown region" in bad.text


def test_the_front_tolerance_is_a_form_field_that_reaches_the_run(client: TestClient) -> None:
    """The page's "Front exact to (%)" field is the API's front_tolerance_pct: 0 asks for the exact front, a value
    out of range is named on the field and kept as typed."""
    page = client.get("/size")
    assert 'name="front_tolerance_pct"' in page.text and 'value="1"' in page.text
    exact = client.get("/size", params={**QUERY, "front_tolerance_pct": "0"})
    assert (
        exact.status_code == 200 and 'id="z-front_tolerance_pct"' in exact.text and 'value="0"' in exact.text
    )
    from app.web.size import FIELDS, size_request

    request, errors = size_request({**FIELDS, **QUERY, "front_tolerance_pct": "0"})
    assert not errors and request is not None and request.front_tolerance_pct == 0
    bad = client.get("/size", params={**QUERY, "front_tolerance_pct": "90"})
    assert bad.status_code == 422 and 'value="90"' in bad.text
    assert 'id="z-front_tolerance_pct" name="front_tolerance_pct" aria-invalid="true"' in bad.text
