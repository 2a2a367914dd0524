"""Issue 17, items 1 and 2 in the browser's pages: planner links name only what differs from the defaults, an
uploaded config.json is stored and named by id (never 100 KB in the URL), and a Hugging Face id is read from
the server's local cache."""

from __future__ import annotations

import html
import json
import re
from urllib.parse import parse_qs, parse_qsl, urlsplit

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select
from sqlalchemy.exc import OperationalError
from test_planner import LLAMA_CONFIG as LLAMA

from app.db.tables import Scenario, SharedConfig
from app.web.forms import DEFAULTS, OVERRIDES, form_values, to_query

SMALL = {**DEFAULTS, "model": "llama3.1-8b", "gpus": "8", "tp": "1", "global_batch": "16", "seq_len": "4096"}
PARTIAL = {"HX-Request": "true", "HX-Request-Type": "partial"}


def share_url(page: str) -> str:
    return html.unescape(re.search(r'<span id="share-url" hidden>([^<]*)</span>', page)[1])


def browser_query(values: dict[str, str]) -> str:
    """What a browser sends for the planner form: every field, blanks included, overrides too."""
    from urllib.parse import urlencode

    return urlencode({**values, **{k: values.get(k, "") for k in OVERRIDES}})


def rows(settings, table) -> int:
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(table)).scalar_one()
    finally:
        engine.dispose()


def test_links_name_only_what_differs_from_the_defaults(client: TestClient) -> None:
    query = to_query(SMALL)
    assert query == "model=llama3.1-8b&gpus=8&seq_len=4096&global_batch=16&tp=1"
    cleared = {
        **SMALL,
        "tokens": "",
    }  # a field the user emptied stays in the link, empty: it is not the default
    assert "tokens=&" in to_query(cleared) + "&" and form_values(dict(parse_qsl(to_query(cleared), True))) == {
        **cleared, **{k: "" for k in OVERRIDES}
    }  # fmt: skip
    page = client.get("/?" + query).text
    link = share_url(page)
    assert link == "http://testserver/?" + query and "o." not in link and "=&" not in link + "&"


def test_a_form_sent_without_javascript_is_redirected_to_the_short_link(client: TestClient) -> None:
    sent = browser_query(SMALL)
    assert sent.count("&") > 30  # the ~30 empty override parameters of the issue
    response = client.get("/?" + sent, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/?" + to_query(SMALL)
    invalid = client.get("/?" + browser_query({**SMALL, "tp": "eight"}), follow_redirects=False)
    assert invalid.headers["location"] == "/?" + to_query({**SMALL, "tp": "eight"})  # kept as typed
    page = client.get(invalid.headers["location"])
    assert page.status_code == 422 and 'value="eight"' in page.text


def test_htmx_updates_replace_the_address_with_the_short_link(client: TestClient) -> None:
    response = client.get("/?" + browser_query(SMALL), headers=PARTIAL)
    assert response.status_code == 200 and response.headers["HX-Replace-Url"] == "/?" + to_query(SMALL)
    search = client.get("/search?" + browser_query(SMALL) + "&top_k=3", headers=PARTIAL)
    assert search.headers["HX-Replace-Url"] == "/search?" + to_query(SMALL) + "&top_k=3"


def test_an_uploaded_config_is_stored_and_named_by_id(client: TestClient, settings) -> None:
    padded = {**LLAMA, "id2label": {str(i): f"label {i}" for i in range(2000)}}  # a 40 KB config.json
    upload = client.post(
        "/planner/hf-config", files={"file": ("config.json", json.dumps(padded))},
        data={"current": to_query(SMALL)}, follow_redirects=False,
    )  # fmt: skip
    location = upload.headers["location"]
    assert upload.status_code == 303 and len(location) < 120 and "hf_config" not in location
    key = parse_qs(urlsplit(location).query)["config"][0]
    page = client.get(location)
    assert page.status_code == 200 and "8.0 B parameters" in page.text
    # a new model opens with the search's layout (app/web/plan_start.py): the upload's link redirects to it, still
    # naming the stored config by id
    final = str(page.url).removeprefix("http://testserver")
    assert f"config={key}" in final and len(final) < 200
    assert share_url(page.text).endswith(final) and "label 1999" in page.text  # the textarea holds it
    again = client.post(
        "/planner/hf-config", files={"file": ("config.json", json.dumps(padded, indent=2))},
        data={"current": to_query(SMALL)}, follow_redirects=False,
    )  # fmt: skip
    assert again.headers["location"] == location and rows(settings, SharedConfig) == 1  # same config, same id
    # editing the config in the form (what htmx sends) names the edited config by its own id
    values = form_values(dict(parse_qsl(urlsplit(location).query)))
    edited = json.dumps({**LLAMA, "num_hidden_layers": 16})  # (the page's script sends it only once edited)
    response = client.get("/?" + browser_query({**values, "hf_config": edited}), headers=PARTIAL)
    new_url = response.headers["HX-Replace-Url"]
    assert "config=" in new_url and key not in new_url and len(new_url) < 120
    assert "4.5 B parameters" in client.get(new_url).text
    # the search, its rows, the exports and a saved scenario all read the id
    search = client.get(f"/search?{urlsplit(location).query}&top_k=2")
    assert search.status_code == 200 and f"config={key}" in search.text and "hf_config=" not in search.text
    doc = client.get(f"/planner/export?{urlsplit(location).query}&format=json").json()
    assert doc["model"]["hf_config"]["num_hidden_layers"] == 32
    saved = client.post("/scenarios", data={"name": "from a link", "query": urlsplit(location).query})
    assert saved.status_code == 200 and "from a link" in saved.text
    engine = create_engine(settings.database_url)
    with engine.connect() as conn:
        (inputs,) = conn.execute(select(Scenario.inputs)).one()
    engine.dispose()
    assert inputs["hf_config"]["num_hidden_layers"] == 32  # the scenario holds the config itself


def test_an_unknown_config_id_says_so_at_the_field(client: TestClient) -> None:
    page = client.get("/?" + to_query(SMALL) + "&model=hf&config=0123456789abcdef0123")
    assert page.status_code == 422
    assert "no config.json is stored under the id" in page.text
    textarea = page.text[page.text.index('<textarea id="f-hf_config"') :]
    assert 'aria-invalid="true"' in textarea[: textarea.index(">")]
    current = re.search(r'name="current" value="([^"]*)"', page.text)[1]
    assert "config=0123456789abcdef0123" in html.unescape(current)  # the inputs still name it


def test_without_a_writable_database_the_link_carries_the_config(client: TestClient, monkeypatch) -> None:
    def down(*_a, **_k):
        raise OperationalError("insert", {}, Exception("database is locked"))

    monkeypatch.setattr("app.web.share.store_config", down)
    text = json.dumps(LLAMA, separators=(",", ":"), sort_keys=True)
    page = client.get("/?" + to_query({**SMALL, "model": "hf", "hf_config": text}))
    assert page.status_code == 200 and "8.0 B parameters" in page.text
    assert "hf_config=" in share_url(page.text) and "config=" not in share_url(page.text).replace(
        "hf_config=", ""
    )


def test_a_hugging_face_id_from_the_local_cache(client: TestClient, hub_cache) -> None:
    hub_cache.add("acme/tiny-llama")
    page = client.get("/?" + to_query({**SMALL, "model": "hub", "hf_id": "acme/tiny-llama"}))
    assert page.status_code == 200, page.text[:300]
    assert "8.0 B parameters" in page.text and 'value="acme/tiny-llama"' in page.text
    assert '<option value="hub" selected>' in page.text
    by_hand = client.get("/?model=acme/tiny-llama&gpus=8&tp=1&global_batch=16&seq_len=4096")
    assert by_hand.status_code == 200 and "8.0 B parameters" in by_hand.text
    search = client.get(
        "/search?" + to_query({**SMALL, "model": "hub", "hf_id": "acme/tiny-llama"}) + "&top_k=2"
    )
    assert (
        search.status_code == 200 and "Load this plan" in search.text and "acme/tiny-llama on" in search.text
    )


def test_a_missing_hugging_face_id_names_the_paths_at_the_field(client: TestClient, hub_cache) -> None:
    page = client.get("/?" + to_query({**SMALL, "model": "hub", "hf_id": "acme/absent"}))
    assert page.status_code == 422
    field = page.text[page.text.index('<input id="f-hf_id"') :]
    field = field[: field.index(">")]
    assert 'value="acme/absent"' in field and 'aria-invalid="true"' in field  # kept as typed, marked
    message = page.text[page.text.index('id="err-hf_id"') :]
    message = html.unescape(message[: message.index("</span>")])
    assert str(hub_cache.root / "models--acme--absent") in message and "never downloads" in message
    bad = client.get("/?" + to_query({**SMALL, "model": "hub", "hf_id": "../../etc/passwd"}))
    assert bad.status_code == 422 and "not a Hugging Face model id" in bad.text
