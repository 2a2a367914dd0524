"""The "find the best plan" page: ranked plans that load into the planner, Pareto chart, rejected reasons."""

from __future__ import annotations

import re
from html import unescape

from fastapi.testclient import TestClient

from app.web.forms import DEFAULTS, to_query

PARTIAL = {"HX-Request": "true", "HX-Request-Type": "partial"}


def test_search_ranks_plans_and_each_loads_into_the_planner(client: TestClient) -> None:
    response = client.get("/search?" + to_query(DEFAULTS))
    assert response.status_code == 200
    html = response.text
    assert (
        'id="search-table"' in html and 'data-chart="chart-pareto"' in html and 'id="rejected-table"' in html
    )
    links = [unescape(h) for h in re.findall(r'href="(/\?[^"]+)" *>Load this plan', html)]
    assert len(links) == 10
    planner = client.get(links[0])
    assert planner.status_code == 200 and "Fits" in planner.text
    assert "HX-Request-Type" in response.headers["vary"]


def test_search_partial_and_errors(client: TestClient) -> None:
    partial = client.get("/search?" + to_query(DEFAULTS) + "&objective=min-cost", headers=PARTIAL)
    assert partial.status_code == 200 and partial.text.lstrip().startswith('<section id="search-results"')
    bad = client.get("/search?" + to_query(DEFAULTS) + "&objective=fastest")
    assert bad.status_code == 422 and "objective" in bad.text


def test_forms_carry_a_progress_note(client) -> None:
    """Shown by CSS while htmx marks the form .htmx-request (long searches, slow estimates)."""
    for url in ("/", "/search"):
        assert 'class="busy" role="status"' in client.get(url).text
