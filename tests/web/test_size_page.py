""" "Size a cluster" page: linked from the nav, the form alone without a query, the ranked table and the Pareto
chart with one, the htmx partial, and errors that keep what the user typed."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

from fastapi.testclient import TestClient

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
