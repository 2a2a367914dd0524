"""Issue 17, item 3, on every form and chart: a field in error carries aria-invalid="true" and aria-describedby
naming the element that says what is wrong; fields without an error carry neither mark; the "how" toggles have
distinct names; every chart's accessible name reads numbers (no raw arrays, no NaN)."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

from bench_fixtures import synthetic_h100_result
from fastapi.testclient import TestClient

from app.settings import Settings
from app.web.forms import DEFAULTS, to_query
from app.web.security import CSRF_COOKIE

SMALL = {**DEFAULTS, "model": "llama3.1-8b", "gpus": "8", "tp": "1", "global_batch": "16", "seq_len": "4096"}


class Elements(HTMLParser):
    """Every element's attributes, and the text under each id."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: dict[str, str] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag not in ("input", "br", "img", "meta", "link", "hr", "source"):
            self._open.append(attributes.get("id"))
            if attributes.get("id"):
                self.text.setdefault(attributes["id"], "")

    def handle_endtag(self, tag: str) -> None:
        if self._open and tag not in ("input", "br", "img", "meta", "link", "hr", "source"):
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for element_id in self._open:
            if element_id:
                self.text[element_id] += data


def invalid_fields(page: str) -> dict[str, str]:
    """name or id of each field marked invalid → the text of what its aria-describedby names (asserting both)."""
    parsed = Elements()
    parsed.feed(page)
    out = {}
    for tag, attrs in parsed.elements:
        if attrs.get("aria-invalid") != "true":
            continue
        assert tag in ("input", "select", "textarea"), (tag, attrs)
        described = attrs.get("aria-describedby", "").split()
        assert described, f"{attrs.get('name')} is marked invalid but names no message"
        message = " ".join(parsed.text.get(i, "").strip() for i in described).strip()
        assert message, f"{attrs.get('name')}: its message ({described}) is empty"
        out[attrs.get("name") or attrs.get("id", "")] = message
    return out


def test_planner_fields_in_error(client: TestClient, hub_cache) -> None:
    page = client.get("/?" + to_query({**SMALL, "tp": "eight", "fabric": "nope", "tokens": ""}))
    assert page.status_code == 422
    marked = invalid_fields(page.text)
    assert (
        set(marked) == {"tp", "tokens"} and "whole number" in marked["tp"] and "required" in marked["tokens"]
    )
    config = invalid_fields(client.get("/?" + to_query({**SMALL, "model": "hf", "hf_config": "{nope"})).text)
    assert set(config) == {"hf_config"} and "not valid JSON" in config["hf_config"]
    hub = invalid_fields(client.get("/?" + to_query({**SMALL, "model": "hub", "hf_id": "acme/absent"})).text)
    assert set(hub) == {"hf_id"} and "models--acme--absent" in hub["hf_id"]
    node = invalid_fields(client.get("/?" + to_query({**SMALL, "node": "p4d.24xlarge"})).text)  # an A100 node
    assert set(node) == {"node"}, node
    assert invalid_fields(client.get("/?" + to_query(SMALL)).text) == {}


def test_search_fields_in_error(client: TestClient) -> None:
    page = client.get("/search?" + to_query(SMALL) + "&gpus_range=lots&top_k=x&deadline_days=soon")
    marked = invalid_fields(page.text)
    assert set(marked) == {"gpus_range", "top_k", "deadline_days"}, marked
    assert "e.g. 512:4096" in marked["gpus_range"] and "finite number" in marked["top_k"]
    assert invalid_fields(client.get("/search?" + to_query(SMALL) + "&top_k=2").text) == {}


def test_save_scenario_without_a_name(client: TestClient) -> None:
    page = client.post("/scenarios", data={"name": " ", "query": to_query(SMALL)})
    assert page.status_code == 422 and 'class="verdict' in page.text  # the results stay, beside the form
    assert invalid_fields(page.text) == {"name": "give the scenario a name"}


def test_login_with_a_wrong_password(sqlite_url: str) -> None:
    from app.db.migrate import upgrade
    from app.main import create_app

    upgrade(sqlite_url)
    settings = Settings(
        database_url=sqlite_url, ui_password="s3cret", secret_key="k" * 32, log_level="WARNING"
    )
    with TestClient(create_app(settings)) as c:
        assert invalid_fields(c.get("/login").text) == {}
        token = c.cookies[CSRF_COOKIE]
        wrong = c.post("/login", data={"password": "nope", "next": "/", "csrf_token": token})
        assert wrong.status_code == 401 and invalid_fields(wrong.text) == {"password": "Wrong password."}


def test_how_toggles_have_distinct_names(client: TestClient) -> None:
    page = client.get("/?" + to_query({**SMALL, "tokens": "1e10"})).text
    names = [
        re.sub(r"<[^>]+>", "", s.split("</summary>")[0]).strip()
        for s in page.split('<details class="note"><summary>')[1:]
    ]
    assert len(names) >= 8 and len(set(names)) == len(names), names
    assert all(n.startswith("how") and len(n) > len("how ") for n in names)


def test_every_chart_description_reads_numbers(client: TestClient) -> None:
    body = json.loads(synthetic_h100_result().model_dump_json(by_alias=True))
    run = client.post("/api/v1/benchmarks", json=body, headers={"Authorization": "Bearer test-token"}).json()
    for gpus, tp in ((8, 1), (16, 2)):
        client.post("/scenarios", data={"name": f"{gpus}", "query": to_query({**SMALL, "gpus": str(gpus), "tp": str(tp),
                                                                                "tokens": "1e10"})})  # fmt: skip
    pages = {
        "planner": "/?"
        + to_query(
            {**SMALL, "model": "llama3.1-70b", "gpus": "64", "tp": "8", "pp": "2", "tokens": "1e10"}
        ),  # fmt: skip
        "search": "/search?" + to_query(SMALL) + "&top_k=5&tokens=1e10",
        "compare": "/scenarios/compare?ids=1&ids=2",
        "accuracy": "/accuracy",
        "benchmark": f"/benchmarks/{run['id']}",
    }
    seen = 0
    for name, path in pages.items():
        response = client.get(path)
        assert response.status_code == 200, (name, response.text[:300])
        labels = [html.unescape(m) for m in re.findall(r'<x-chart[^>]*aria-label="([^"]*)"', response.text)]
        options = re.findall(
            r'<x-chart[^>]*>\s*<script type="application/json">(.*?)</script>', response.text, re.S
        )
        for label in labels:
            assert re.search(r"\d", label), (name, label)
            for bad in ("NaN", "nan", "None", "null", "undefined", "[", "Infinity"):
                assert bad not in label, (name, bad, label)
        for option in options:  # ECharts reads its own aria description from the option
            description = json.loads(option).get("aria", {}).get("description", "")
            assert description in labels, (name, description)
        seen += len(labels)
    assert seen >= 9
