"""In a real browser (issue 17): export the cost table as CSV and find the table's figures in it; compare three
saved scenarios side by side, cost per pricing option with differences marked, readable on a 390 px phone (the
table scrolls inside its own box, the page does not)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from playwright.sync_api import Page, expect

from app.web.forms import DEFAULTS, parse_planner, to_query
from app.web.templating import fmt_usd

RUN = {**DEFAULTS, "model": "llama3.1-8b", "gpus": "16", "tp": "1", "global_batch": "64", "seq_len": "4096",
       "tokens": "3e11"}  # fmt: skip
"""8B on 16 H100 for 3e11 tokens: a run of weeks, so the commitments owe more than the run uses."""


def _unexpected(errors: list[str]) -> list[str]:
    return [e for e in errors if "status of 422" not in e]


def _charts_ready(page: Page, *ids: str) -> None:
    for chart_id in ids:
        expect(page.locator(f"x-chart[data-chart={chart_id}]")).to_have_attribute("data-ready", "true")


def _cost_row(page: Page, label: str):  # noqa: ANN202 - a Playwright locator
    return page.locator("#cost-table tbody tr").filter(
        has=page.locator("th", has_text=re.compile(rf"^{re.escape(label)}$"))
    )


def test_export_the_cost_csv(
    page: Page, live_url: str, console_errors: list[str], tmp_path: Path, screenshot_dir: Path
) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_url}/?{to_query(RUN)}")
    _charts_ready(page, "chart-cost")
    expect(page.locator("#cost-rankings [data-ranking=amortised]")).to_contain_text("amortised basis")
    expect(page.locator("#cost-rankings [data-ranking=cash]")).to_contain_text("cash basis")
    # the chart draws this run's share and writes the whole commitment on its bar
    chart = page.locator("x-chart[data-chart=chart-cost]")
    expect(chart).to_have_attribute("aria-label", re.compile("Cash paid out is larger for .*commit-3yr"))
    expect(chart.locator("svg text").filter(has_text="cash $").first).to_be_visible()
    with page.expect_download() as info:
        page.locator("p.downloads a", has_text="CSV").click()
    assert info.value.suggested_filename == "cost.csv"
    path = tmp_path / "cost.csv"
    info.value.save_as(path)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {"cash_usd", "amortised_usd", "days", "usd_per_m_tokens_amortised", "prices_as_of"} <= set(rows[0])
    aws = [r for r in rows if r["provider"] == "aws" and r["available"] == "True"]
    assert {r["option"] for r in aws} >= {"on-demand", "commit-3yr", "spot", "self-build"}
    for r in aws:  # every figure of the table is the file's
        row = _cost_row(page, r["option"])
        expect(row.locator("td.cash")).to_contain_text(fmt_usd(float(r["cash_usd"])))
        expect(row.locator("td.amortised")).to_contain_text(fmt_usd(float(r["amortised_usd"])))
        expect(row.locator("td").nth(2)).to_have_text(f"{float(r['days']):.1f}")
    commit = next(r for r in aws if r["option"] == "commit-3yr")
    assert float(commit["cash_usd"]) > float(
        commit["amortised_usd"]
    )  # the whole term, against the run's share
    json_href = page.locator("p.downloads a", has_text="JSON").get_attribute("href")
    assert json_href is not None
    doc = page.request.get(live_url + json_href.replace("&amp;", "&")).json()
    assert [o["cash_usd"] for o in doc["options"] if o["available"]] == [
        float(r["cash_usd"]) for r in rows if r["available"] == "True"
    ]
    page.locator("#h-cost").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / "planner-cost.png"))
    assert _unexpected(console_errors) == []


def _save_scenario(page: Page, live_url: str, name: str, params: dict[str, str]) -> int:
    form = parse_planner(params)
    assert form.request is not None, form.errors
    body = {"name": name, "inputs": form.request.model_dump(mode="json", exclude_none=True),
            "overrides": form.overrides.model_dump(mode="json", exclude_none=True)}  # fmt: skip
    response = page.request.post(
        f"{live_url}/api/v1/scenarios", data=body, headers={"Authorization": "Bearer e2e-token"}
    )
    assert response.status == 201, response.text()
    return int(response.json()["id"])


def test_compare_three_scenarios(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path
) -> None:
    scenarios = {
        "8B on 16 H100": RUN,
        "8B on 32 H100": {**RUN, "gpus": "32"},
        "8B on 16 H100 at $40/h": {**RUN, "o.on_demand_usd_per_hour": "40"},
    }
    ids = [_save_scenario(page, live_url, name, params) for name, params in scenarios.items()]
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_url}/scenarios")
    for scenario_id in ids:
        page.check(f"#cmp-{scenario_id}")
    page.click("#compare-form button[type=submit]")
    table = page.locator("#compare-table")
    for name in scenarios:
        expect(table.locator("thead")).to_contain_text(name)
    for option in ("on-demand", "commit-3yr", "self-build"):
        group = table.locator(f"tbody[data-option={option}]")
        expect(group).to_contain_text("cash $ (paid out)")
        expect(group).to_contain_text("amortised $ (this run's share)")
        expect(group).to_contain_text("$ / M tokens (amortised)")
        expect(group).to_contain_text("days after failures")
    cash = table.locator("tbody[data-option=on-demand] tr", has_text="cash $ (paid out)")
    expect(cash).to_have_class(re.compile(r"\bdiffers\b"))
    expect(cash.locator("td.best")).to_have_count(1)  # the $40/h scenario pays least for on-demand
    expect(cash.locator("td").nth(2)).to_contain_text("vs 8B on 16 H100")
    expect(table.locator("tr", has_text="model").first).to_have_class(re.compile(r"\bsame\b"))
    _charts_ready(page, "chart-compare-options", "chart-compare", "chart-compare-cost")
    page.screenshot(
        path=str(screenshot_dir / "scenarios-compare-three.png")
    )  # the first screenful, as in README

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    _charts_ready(page, "chart-compare-options")
    assert (
        page.evaluate("document.documentElement.scrollWidth") <= 390
    )  # the page itself never scrolls sideways
    wrap = page.locator("#compare-wrap")
    scroll_width, client_width = wrap.evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert scroll_width > client_width  # the table scrolls inside its own box
    box = wrap.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    wrap.evaluate("e => { e.scrollLeft = e.scrollWidth; }")
    last = table.locator("thead th").last
    expect(last).to_be_in_viewport()
    label = table.locator("th[scope=row]", has_text="cash $ (paid out)").first
    label_box = label.bounding_box()
    assert (
        label_box is not None and label_box["x"] >= box["x"] - 1
    )  # row labels stay in view while it scrolls
    group = table.locator("tbody[data-option=self-build] .group-name").bounding_box()
    assert (
        group is not None
        and box["x"] - 1 <= group["x"]
        and group["x"] + group["width"] <= box["x"] + box["width"]
    )
    page.screenshot(path=str(screenshot_dir / "scenarios-compare-phone.png"), full_page=True)
    assert _unexpected(console_errors) == []
