"""Issue 16's cost inputs on the planner page, not only in `capplan cost` and the API: the region of the prices,
the day they are in force, and the self-build cluster's use after the run (years, or runs of this length) are
fields of the overrides panel and reach the cost table; the reliability panel shows the checkpoint interval's
sensitivity and the async save's background slowdown, and no "every 30 minutes instead" line when the interval is
already 30 minutes."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient
from test_cost_buyer import LONG, api_cost, aws_rows, table_row

from app.web.forms import to_query
from app.web.templating import fmt_usd


def _page(client: TestClient, **extra: str) -> str:
    response = client.get("/?" + to_query({**LONG, **extra}))
    assert response.status_code == 200, response.text[:500]
    return response.text


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def test_region_prices_day_and_use_after_the_run_are_planner_fields(client: TestClient) -> None:
    page = _page(client)
    for name in ("o.region", "o.prices_as_of", "o.use_after_run_years", "o.runs"):
        assert f'name="{name}"' in page, name
    for extra in ({"o.region": "us-west-1"}, {"o.prices_as_of": "2025-01-01"}):
        shown = _page(client, **extra)
        expected = aws_rows(api_cost(client, {**LONG, **extra}))["on-demand"]["cash_usd"]
        assert expected != aws_rows(api_cost(client, LONG))["on-demand"]["cash_usd"]
        assert fmt_usd(expected) in table_row(shown, "cost-table", "on-demand"), extra
    for extra in ({"o.runs": "3"}, {"o.use_after_run_years": "0"}):
        shown = _page(client, **extra)
        own = aws_rows(api_cost(client, {**LONG, **extra}))["self-build"]
        assert own["amortised_usd"] != aws_rows(api_cost(client, LONG))["self-build"]["amortised_usd"]
        assert fmt_usd(own["amortised_usd"]) in table_row(shown, "cost-table", "self-build"), extra


def test_the_reliability_panel_shows_the_intervals_sensitivity_and_the_async_cost(client: TestClient) -> None:
    text = _text(_page(client))
    assert "Interval ½× / 2×" in text and "goodput if the checkpoint interval were: 0.5× =" in text
    assert "2× =" in text and "slower training for the" in text and "lost per save" in text
    assert "Every-30-min rule" in text  # the optimum is not 30 minutes here


def test_no_every_30_minutes_line_when_the_interval_is_30_minutes(client: TestClient) -> None:
    text = _text(_page(client, **{"o.reliability.checkpoint_interval_s": "1800"}))
    assert "Every-30-min rule" not in text and "Interval ½× / 2×" in text
