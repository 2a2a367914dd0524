"""Issue 17, cost as a demanding newcomer reads it: cash and amortised side by side with the basis of every ranking
named, a commitment longer than the run written on the chart instead of dominating it, ties reported as ties, the
cost table as CSV and JSON, the cost in the plan document, and 2–4 scenarios compared so a buyer can decide.

Every expected figure comes from the cost model through ``/api/v1/cost`` (or the planner's own JSON); nothing is
hard-coded."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.domain.catalog.clock import today
from app.web.forms import DEFAULTS, parse_planner, to_query
from app.web.templating import fmt_usd

LONG = {**DEFAULTS, "tokens": "1e11"}
"""70B on 64 H100 for 1e11 tokens: a run of weeks, priced against 1- and 3-year commitments and a bought cluster."""
TIE = {**LONG, "o.on_demand_usd_per_hour": "50", "o.capacity_block_usd_per_hour": "50", "o.off_peak_discount": "0",
       "o.spot_usd_per_hour": "500", "o.other_clouds": "off"}  # fmt: skip
"""On-demand, a capacity block and off-peak at one rate: three options that cost exactly the same."""


def api_cost(client: TestClient, params: dict[str, str], **extra: Any) -> dict[str, Any]:
    """The cost model's answer for the planner inputs ``params`` (the API, not the page under test)."""
    form = parse_planner(params)
    assert form.request is not None, form.errors
    body = form.request.model_dump(mode="json", exclude_none=True)
    overrides = form.overrides.model_dump(mode="json", exclude_none=True)
    response = client.post("/api/v1/cost", json={**body, "overrides": overrides, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def aws_rows(cost: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["option"]: o for o in cost["options"] if o["available"]}


def table_row(page: str, table_id: str, label: str) -> str:
    table = page[page.index(f'id="{table_id}"') :]
    table = table[: table.index("</table>")]
    start = table.index(f'<th scope="row">{label}')
    return table[start : table.index("</tr>", start)]


def chart_option(page: str, chart_id: str) -> dict[str, Any]:
    block = page[page.index(f'data-chart="{chart_id}"') :]
    opening = '<script type="application/json">'
    raw = block[block.index(opening) + len(opening) : block.index("</script>")]
    return json.loads(raw)


def ranking_line(page: str, key: str) -> str:
    block = page[page.index(f'data-ranking="{key}"') :]
    return html.unescape(re.sub(r"<[^>]+>", "", block[: block.index("</li>")]))


def test_cash_and_amortised_side_by_side_each_ranking_names_its_basis(client: TestClient) -> None:
    cost = api_cost(client, LONG)
    rows = aws_rows(cost)
    page = client.get("/?" + to_query(LONG)).text
    header = page[page.index('id="cost-table"') :]
    header = header[: header.index("</thead>")]
    assert header.index("cash $") < header.index("amortised $") < header.index("days after failures")
    for label in ("commit-1yr", "commit-3yr", "self-build", "on-demand"):
        o, row = rows[label], table_row(page, "cost-table", label)
        assert fmt_usd(o["cash_usd"]) in row and fmt_usd(o["amortised_usd"]) in row, label
        assert (
            f"{o['days']:.1f}" in row and f"{o['amortised_usd'] / 1e5:.2f}" in row
        )  # $/M tokens of 1e11 tokens
    commit = rows["commit-3yr"]
    assert commit["cash_usd"] > 5 * commit["amortised_usd"]  # a run of weeks owes the whole 36-month term

    bases = {r["basis"]: r for r in cost["rankings"]}
    for key in ("amortised", "cash"):
        line = ranking_line(page, key)
        assert f"{key} basis" in line
        winner = bases[key]["winner"]
        assert winner is not None and winner in line
    amortised_winner = next(
        o for o in (*cost["options"], *cost["other_clouds"])
        if (o["option"] if o["provider"] == "aws" else f"{o['provider']} {o['instance']} {o['option']}")
        == bases["amortised"]["winner"]
    )  # fmt: skip
    if amortised_winner["cash_usd"] > 1.01 * amortised_winner["amortised_usd"]:
        assert f"cash outlay of {fmt_usd(amortised_winner['cash_usd'])}" in ranking_line(page, "amortised")
    assert "Cheapest: " not in page  # no unqualified "cheapest"


def test_the_cost_chart_draws_the_run_and_labels_what_is_paid_beyond_it(client: TestClient) -> None:
    cost = api_cost(client, LONG)
    rows = aws_rows(cost)
    option = chart_option(client.get("/?" + to_query(LONG)).text, "chart-cost")
    bars = dict(zip(option["xAxis"]["data"], option["series"][0]["data"], strict=True))
    assert set(bars) == set(rows)
    for label, bar in bars.items():
        assert bar["value"] == round(rows[label]["amortised_usd"])  # the cost attributable to the run
    tallest = max(b["value"] for b in bars.values())
    assert tallest < rows["commit-3yr"]["cash_usd"] and tallest < rows["self-build"]["cash_usd"]
    assert bars["commit-3yr"]["label"]["formatter"].startswith("cash $")
    assert "label" not in bars["on-demand"]  # on-demand pays nothing beyond the run
    assert "commit-3yr" in option["title"]["subtext"] and "not drawn to scale" in option["title"]["subtext"]


def test_ties_are_reported_as_ties(client: TestClient) -> None:
    cost = api_cost(client, TIE)
    cash = next(r for r in cost["rankings"] if r["basis"] == "cash")
    assert cash["winner"] is None and set(cash["tied"]) == {"on-demand", "capacity-block", "off-peak"}
    page = client.get("/?" + to_query(TIE)).text
    line = ranking_line(page, "cash")
    assert "tie: " in line and all(name in line for name in cash["tied"])
    for name in cash["tied"]:
        assert 'class="num total cash best"' in table_row(page, "cost-table", name)
    assert 'class="num total cash best"' not in table_row(page, "cost-table", "spot")
    # the fastest too: the same instance under two prices finishes at the same time
    two = api_cost(client, LONG, options=["on-demand", "commit-1yr"])
    assert two["fastest"] is None and set(two["fastest_tied"]) >= {"on-demand", "commit-1yr"}
    csv_rows = list(csv.DictReader(io.StringIO(client.get(f"/planner/cost?{to_query(TIE)}&format=csv").text)))
    standing = {r["option"]: r["cheapest_cash"] for r in csv_rows if r["provider"] == "aws"}
    assert {k for k, v in standing.items() if v == "tie"} == set(
        cash["tied"]
    ) and "winner" not in standing.values()


def test_cost_csv_and_json_carry_both_bases_the_rankings_and_the_prices_day(client: TestClient) -> None:
    cost = api_cost(client, LONG)
    rows = aws_rows(cost)
    query = to_query(LONG)
    exported = list(csv.DictReader(io.StringIO(client.get(f"/planner/cost?{query}&format=csv").text)))
    doc = client.get(f"/planner/cost?{query}&format=json").json()
    assert list(exported[0]) == doc["columns"]
    for r in exported:
        if r["provider"] != "aws" or r["available"] != "True":
            continue
        o = rows[r["option"]]
        for column, key in (("cash_usd", "cash_usd"), ("amortised_usd", "amortised_usd"), ("days", "days")):
            assert float(r[column]) == pytest.approx(o[key], rel=1e-12), (r["option"], column)
        assert float(r["usd_per_m_tokens_cash"]) == pytest.approx(o["cash_usd"] / 1e5, rel=1e-12)
        assert float(r["usd_per_m_tokens_amortised"]) == pytest.approx(o["amortised_usd"] / 1e5, rel=1e-12)
        assert float(r["days_before_failures"]) < float(r["days"])  # failures only add days
        assert r["region"] == "us-east-1" and r["prices_as_of"] == today().isoformat()
    bases = {r["basis"]: r for r in cost["rankings"]}
    assert doc["cheapest_cash"]["winner"] == bases["cash"]["winner"]
    assert doc["cheapest_amortised"]["winner"] == bases["amortised"]["winner"]
    assert doc["prices_as_of"] == today().isoformat() and doc["prices_as_of_stated"] is False
    on_demand_price = next(a for a in doc["assumptions"] if a["name"] == "p5.48xlarge on-demand")
    assert on_demand_price["as_of"] and on_demand_price["source"]
    dated = client.get(
        f"/planner/cost?{to_query({**LONG, 'o.prices_as_of': '2025-03-01'})}&format=json"
    ).json()
    assert dated["prices_as_of"] == "2025-03-01" and dated["prices_as_of_stated"] is True
    old = api_cost(client, {**LONG, "o.prices_as_of": "2025-03-01"})
    assert next(o for o in dated["options"] if o["label"] == "on-demand")["cash_usd"] == pytest.approx(
        aws_rows(old)["on-demand"]["cash_usd"], rel=1e-12
    )


def test_bad_cost_input_names_the_field_and_keeps_what_was_typed(client: TestClient) -> None:
    typed = {**LONG, "tokens": "lots", "o.prices_as_of": "yesterday"}
    page = client.get("/?" + to_query(typed))
    assert (
        page.status_code == 422 and 'value="lots"' in page.text and "a number, e.g. 1e12 or 15T" in page.text
    )
    export = client.get(f"/planner/cost?{to_query(typed)}&format=csv")
    assert export.status_code == 422  # the error page names each field and its reason
    assert "tokens: a number" in export.text and "o.prices_as_of: Input should be a valid date" in export.text
    form = parse_planner(LONG)
    assert form.request is not None
    body = form.request.model_dump(mode="json", exclude_none=True)
    api = client.post("/api/v1/cost", json={**body, "overrides": {"prices_as_of": "yesterday"}})
    assert api.status_code == 422
    assert any(e["loc"][-2:] == ["overrides", "prices_as_of"] for e in api.json()["detail"])


def test_the_plan_document_carries_the_cost_with_its_assumptions(client: TestClient) -> None:
    """The plan.json the planner downloads and the API exports: cash, amortised, $/M tokens and days per option,
    priced with the planner's overrides, with the prices' day and region."""
    params = {**LONG, "o.on_demand_usd_per_hour": "40"}
    query = to_query(params)
    doc = client.get(f"/planner/export?{query}&format=json").json()
    table = client.get(f"/planner/cost?{query}&format=json").json()
    assert doc["cost"] is not None
    assert doc["cost"]["options"] == table["options"]  # the same numbers, priced with the override
    od = next(o for o in doc["cost"]["options"] if o["label"] == "on-demand")
    assert od["cash_usd"] == pytest.approx(
        aws_rows(api_cost(client, params))["on-demand"]["cash_usd"], rel=1e-12
    )
    for key in ("cash_usd", "amortised_usd", "usd_per_m_tokens_cash", "usd_per_m_tokens_amortised", "days",
                "days_before_failures"):  # fmt: skip
        assert od[key] is not None, key
    assert doc["cost"]["region"] == "us-east-1" and doc["cost"]["prices_as_of"] == today().isoformat()
    assert any(
        a["source"] == "override" and a["name"] == "p5.48xlarge on-demand" for a in doc["cost"]["assumptions"]
    )
    page = client.get("/?" + query).text  # the export panel shows the same document
    assert "&#34;usd_per_m_tokens_amortised&#34;" in page

    form = parse_planner(LONG)
    assert form.request is not None
    body = form.request.model_dump(mode="json", exclude_none=True)
    api_doc = client.post("/api/v1/plans/export?format=json", json=body).json()
    api_cost_rows = aws_rows(api_cost(client, LONG))
    for o in api_doc["cost"]["options"]:
        if o["provider"] == "aws" and o["available"]:
            assert o["cash_usd"] == pytest.approx(api_cost_rows[o["label"]]["cash_usd"], rel=1e-12)
            assert o["amortised_usd"] == pytest.approx(api_cost_rows[o["label"]]["amortised_usd"], rel=1e-12)
            assert o["days"] == pytest.approx(api_cost_rows[o["label"]]["days"], rel=1e-12)
    again = client.post(
        "/api/v1/plans/export?format=json", json=api_doc
    )  # a document with its cost reads back
    assert again.status_code == 200 and again.json()["cost"] == api_doc["cost"]
    without = client.post("/api/v1/plans/export?format=json", json={**body, "tokens": None})
    assert without.status_code == 200 and without.json()["cost"] is None  # no tokens, no cost
    bad = client.post("/api/v1/plans/export?format=json", json={**body, "tokens": -1})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "tokens"


def compare_table(page: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The comparison as {(group, figure): {"differs": bool, "cells": [(text, best, delta)]}}."""
    table = page[page.index('id="compare-table"') : page.index("</table>", page.index('id="compare-table"'))]
    out: dict[tuple[str, str], dict[str, Any]] = {}
    group = ""
    for chunk in re.split(r"(?=<tbody|<tr)", table):
        opened = re.match(r'<tbody class="option-group" data-option="([^"]+)"', chunk)
        if opened:
            group = opened.group(1)
            continue
        row = re.match(r'<tr class="(differs|same)"><th scope="row">([^<]+)', chunk)
        if not row:
            continue
        cells = []
        for cls, body in re.findall(r'<td class="([^"]*)">(.*?)</td>', chunk, flags=re.S):
            delta = re.search(r'<small class="delta">([^<]*)</small>', body)
            text = re.sub(r'<small class="delta">.*?</small>|<span class="sr-only">.*?</span>', "", body)
            cells.append(
                (html.unescape(text).strip(), "best" in cls.split(), delta.group(1) if delta else "")
            )
        out[(group, html.unescape(row.group(2)).strip())] = {
            "differs": row.group(1) == "differs",
            "cells": cells,
        }
    return out


def _save(client: TestClient, name: str, params: dict[str, str]) -> int:
    saved = client.post("/scenarios", data={"name": name, "query": to_query(params)}, follow_redirects=False)
    assert saved.status_code == 303, saved.text[:500]
    return int(saved.headers["location"].rsplit("/", 1)[1])


def test_compare_three_scenarios_a_buyer_can_decide_from(client: TestClient) -> None:
    """Per pricing option, self-build included: days after failures, cash and amortised $ and $/M tokens of each
    scenario, from each scenario's own cost table; rows that differ marked, the best bold, changes against the first."""
    scenarios = {
        "64 H100": LONG,
        "128 H100": {**LONG, "gpus": "128"},
        "64 H100 at $40/h": {**LONG, "o.on_demand_usd_per_hour": "40"},
    }
    ids = [_save(client, name, params) for name, params in scenarios.items()]
    page = client.get("/scenarios/compare?" + "&".join(f"ids={i}" for i in ids))
    assert page.status_code == 200
    table = compare_table(page.text)
    costs = [client.get(f"/planner/cost?{to_query(p)}&format=json").json() for p in scenarios.values()]
    for option in ("on-demand", "commit-1yr", "commit-3yr", "spot", "self-build"):
        mine = [next(o for o in c["options"] if o["label"] == option) for c in costs]
        for figure, key, fmt in (
            ("days after failures", "days", lambda v: f"{v:,.1f} days"),
            ("cash $ (paid out)", "cash_usd", fmt_usd),
            ("amortised $ (this run's share)", "amortised_usd", fmt_usd),
            ("$ / M tokens (amortised)", "usd_per_m_tokens_amortised", lambda v: f"${v:,.2f}"),
        ):
            row = table[(option, figure)]
            values = [o[key] for o in mine]
            assert [c[0] for c in row["cells"]] == [fmt(v) for v in values], (option, figure)
            texts = {fmt(v) for v in values}
            assert row["differs"] == (len(texts) > 1), (option, figure)
            if row["differs"]:
                best = min(values)
                assert [c[1] for c in row["cells"]] == [abs(v - best) <= 1e-4 * best for v in values]
                first = values[0]
                change = (
                    "same"
                    if abs(values[1] - first) / first < 0.0005
                    else f"{(values[1] - first) / first:+.1%}"
                )
                assert row["cells"][1][2] == f"{change} vs 64 H100" and row["cells"][0][2] == ""
    # 128 GPUs finish sooner; a cheaper on-demand rate costs less but runs as long
    assert table[("on-demand", "days after failures")]["cells"][1][1]
    assert table[("on-demand", "cash $ (paid out)")]["cells"][2][1]
    # what is the same is not marked as a difference
    assert not table[("", "model")]["differs"] and table[("", "hardware")]["differs"]
    for c, (text, _, _) in zip(costs, table[("rankings", "cheapest, amortised basis")]["cells"], strict=True):
        ranking = c["cheapest_amortised"]
        assert text == (ranking["winner"] or "tie: " + " = ".join(ranking["tied"]))
    prices = table[("rankings", "prices")]["cells"]
    assert all(cell[0] == f"us-east-1, in force on {today().isoformat()}" for cell in prices)
    assert 'data-chart="chart-compare-options"' in page.text
    options_chart = chart_option(page.text, "chart-compare-options")
    assert [s["name"] for s in options_chart["series"]] == list(scenarios)


def test_compare_needs_two_to_four_scenarios(client: TestClient) -> None:
    ids = [_save(client, f"s{i}", LONG) for i in range(5)]
    one = client.get(f"/scenarios/compare?ids={ids[0]}")
    assert one.status_code == 422 and "Choose 2 to 4 scenarios to compare." in one.text
    five = client.get("/scenarios/compare?" + "&".join(f"ids={i}" for i in ids))
    assert five.status_code == 422
    four = client.get("/scenarios/compare?" + "&".join(f"ids={i}" for i in ids[:4]))
    assert four.status_code == 200 and len(compare_table(four.text)[("", "model")]["cells"]) == 4
    assert client.get(f"/scenarios/compare?ids={ids[0]}&ids=999999").status_code == 404
