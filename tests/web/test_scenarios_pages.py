"""Scenarios in the browser (no JS needed): save, open, rename (with its version), duplicate, delete with a
confirmation page, compare 2–4; overrides marked."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.web.forms import DEFAULTS, to_query

PARTIAL = {"HX-Request": "true", "HX-Request-Type": "partial"}


def _save(client: TestClient, name: str, **changes: str) -> str:
    response = client.post(
        "/scenarios", data={"name": name, "query": to_query({**DEFAULTS, **changes})}, follow_redirects=False
    )
    assert response.status_code == 303
    return response.headers["location"]


def test_save_and_open_shows_the_planner_with_its_inputs_and_overrides(client: TestClient) -> None:
    url = _save(client, "70B at 1.3 PUE", gpus="128", **{"o.self_build.pue": "1.3"})
    page = client.get(url)
    assert page.status_code == 200
    html = page.text
    assert "70B at 1.3 PUE" in html and 'value="128"' in html
    assert 'class="badge override"' in html and "PUE = 1.3" in html
    assert "HX-Request-Type" in page.headers["vary"]
    partial = client.get(url, headers=PARTIAL).text
    assert partial.lstrip().startswith('<section id="results"')
    listing = client.get("/scenarios").text
    assert "70B at 1.3 PUE" in listing and "PUE = 1.3" in listing


def test_save_without_a_name_is_a_422_keeping_the_inputs(client: TestClient) -> None:
    response = client.post("/scenarios", data={"name": " ", "query": to_query({**DEFAULTS, "gpus": "32"})})
    assert (
        response.status_code == 422
        and 'value="32"' in response.text
        and "give the scenario a name" in response.text
    )


def test_rename_duplicate_and_conflict(client: TestClient) -> None:
    url = _save(client, "first")
    sid = url.rsplit("/", 1)[1]
    renamed = client.post(
        f"/scenarios/{sid}/rename", data={"name": "second", "version": "1"}, follow_redirects=False
    )
    assert renamed.status_code == 303
    assert "second" in client.get(url).text
    stale = client.post(f"/scenarios/{sid}/rename", data={"name": "third", "version": "1"})
    assert stale.status_code == 409 and "version 2" in stale.text
    dup = client.post(f"/scenarios/{sid}/duplicate", follow_redirects=False)
    assert dup.status_code == 303
    assert "second (copy)" in client.get(dup.headers["location"]).text


def test_delete_asks_first(client: TestClient) -> None:
    url = _save(client, "doomed")
    sid = url.rsplit("/", 1)[1]
    confirm = client.get(f"/scenarios/{sid}/delete")
    assert (
        confirm.status_code == 200 and "Delete “doomed”?" in confirm.text and 'method="post"' in confirm.text
    )
    assert client.post(f"/scenarios/{sid}/delete", follow_redirects=False).status_code == 303
    assert client.get(url).status_code == 404


def test_compare_two_side_by_side(client: TestClient) -> None:
    a = _save(client, "tp8").rsplit("/", 1)[1]
    b = _save(client, "tp4 pp2", tp="4", pp="2").rsplit("/", 1)[1]
    page = client.get(f"/scenarios/compare?ids={a}&ids={b}")
    assert page.status_code == 200
    html = page.text
    assert 'id="compare-table"' in html and "tp8" in html and "tp4 pp2" in html
    assert (
        "tp 4 · pp 2" in html
        and 'data-chart="chart-compare"' in html
        and 'data-chart="chart-compare-cost"' in html
    )
    assert client.get(f"/scenarios/compare?ids={a}").status_code == 422
    assert client.get("/scenarios/compare?ids=1&ids=2&ids=3&ids=4&ids=5").status_code == 422


def test_edit_a_scenario_in_place_and_save_changes(client: TestClient) -> None:
    """Editing on the scenario page stays on it (the form targets the scenario), shows "unsaved changes" and
    a "save changes" form; saving bumps the version and stores the new inputs; a stale version is a 409."""
    url = _save(client, "edit me", gpus="128")
    sid = url.rsplit("/", 1)[-1]
    page = client.get(url).text
    assert f'action="/scenarios/{sid}"' in page and f'hx-get="/scenarios/{sid}"' in page
    edited = client.get(url + "?" + to_query({**DEFAULTS, "gpus": "256"}))
    assert edited.status_code == 200 and "Unsaved changes" in edited.text and 'value="256"' in edited.text
    saved = client.post(f"/scenarios/{sid}/update", data={"version": "1", "query": to_query({**DEFAULTS, "gpus": "256"})},
                        follow_redirects=False)  # fmt: skip
    assert saved.status_code == 303 and saved.headers["location"].endswith("msg=saved")
    api = client.get(f"/api/v1/scenarios/{sid}").json()
    assert api["version"] == 2 and api["inputs"]["gpus"] == 256
    stale = client.post(f"/scenarios/{sid}/update", data={"version": "1", "query": to_query(DEFAULTS)})
    assert stale.status_code == 409
    bad = client.post(
        f"/scenarios/{sid}/update", data={"version": "2", "query": to_query({**DEFAULTS, "gpus": "0"})}
    )
    assert bad.status_code == 422 and 'value="0"' in bad.text


def test_hardware_override_survives_save_and_reopen(client: TestClient) -> None:
    url = _save(client, "tuned", **{"o.figure.efficiency.gemm_efficiency": "0.6"})
    page = client.get(url).text
    assert 'name="o.figure.efficiency.gemm_efficiency"' in page and 'value="0.6"' in page
    assert 'class="badge override"' in page and "GEMM efficiency = 0.6" in page
