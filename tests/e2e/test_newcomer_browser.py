"""Issue 17 in a real browser: every page loads without a console error; links stay short (an uploaded
config.json is named by id, the address bar follows each update); a Hugging Face id from the server's cache;
fields in error carry aria-invalid after an htmx update too."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_fixtures import synthetic_h100_result
from live_server import serve
from playwright.sync_api import Page, expect

SMALL = "/?model=llama3.1-8b&gpus=8&tp=1&global_batch=16&seq_len=4096&tokens=1e10"
LLAMA = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer e2e-token", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def seeded_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server of this module's own (its benchmark run calibrates H100s: other tests must not see it) with two
    scenarios and one benchmark run."""
    with serve(tmp_path_factory.mktemp("e2e-pages")) as url:
        for gpus, tp in ((8, 1), (16, 2)):
            _post(f"{url}/api/v1/scenarios", {"name": f"8B on {gpus}", "inputs": {
                "model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": gpus, "tp": tp, "global_batch": 16,
                "seq_len": 4096, "tokens": 1e10}})  # fmt: skip
        _post(f"{url}/api/v1/benchmarks", json.loads(synthetic_h100_result().model_dump_json(by_alias=True)))
        yield url


PAGES = [
    "/", SMALL, SMALL.replace("tp=1", "tp=3"), "/search" + SMALL[1:] + "&top_k=3",
    "/size?model=llama3.1-8b&tokens=1e12&accelerators=h100-sxm&options=on-demand&gpus_range=64:128",
    "/size", "/scenarios", "/scenarios/1", "/scenarios/1/delete", "/scenarios/compare?ids=1&ids=2", "/catalog",
    *[f"/catalog/{kind}" for kind in ("accelerators", "nodes", "fabrics", "switches", "topologies", "prices",
                                      "architectures")],
    "/catalog/accelerators/h100-sxm", "/catalog/nodes/dgx-h100", "/catalog/prices/p5.48xlarge",
    "/catalog/architectures/llama3.1-8b", "/accuracy", "/glossary", "/benchmarks", "/benchmarks/1",
    "/benchmarks/shipped", "/api", "/login",
]  # fmt: skip
"""Every page the app serves (app/web: each GET route, path parameters filled in)."""


def test_every_page_loads_without_console_errors(
    page: Page, seeded_url: str, console_errors: list[str]
) -> None:
    seen: dict[str, list[str]] = {}
    for path in PAGES:
        response = page.goto(seeded_url + path)
        assert response is not None and response.status in (200, 422), (path, response and response.status)
        charts = page.locator("x-chart")
        for i in range(charts.count()):
            expect(charts.nth(i)).to_have_attribute("data-ready", "true")
        errors = [e for e in console_errors if "status of 422" not in e]  # the invalid plan is answered 422
        if errors:
            seen[path] = list(errors)
        console_errors.clear()
    assert seen == {}


def test_an_uploaded_config_is_linked_by_id(
    page: Page, live_url: str, console_errors, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({**LLAMA, "id2label": {str(i): f"label {i}" for i in range(1500)}}, indent=2)
    )
    page.goto(f"{live_url}/?model=llama3.1-8b&gpus=8&tp=1&global_batch=16&seq_len=4096")
    page.set_input_files("#hf-file", str(config))
    page.click("#hf-upload button[type=submit]")
    expect(page.locator("#model-summary")).to_contain_text("8.0 B parameters")
    assert "config=" in page.url and len(page.url) < 200, page.url  # not the 40 KB of the file
    # the upload opened with the search's layout for 8 GPUs; a batch that 16 GPUs also divide, then 16 GPUs
    page.fill("#f-global_batch", "256")
    expect(page.locator(".verdict")).to_contain_text("on 8 ×")
    page.fill("#f-gpus", "16")  # the config travels by its id, not whole
    expect(page.locator(".verdict")).to_contain_text("on 16 ×")
    expect(page).to_have_url(re.compile(r"gpus=16"))
    assert "config=" in page.url and len(page.url) < 200, page.url
    first = re.search(r"config=([0-9a-f]{20})", page.url)[1]
    text = page.input_value("#f-hf_config").replace('"num_hidden_layers":32', '"num_hidden_layers":16')
    page.fill("#f-hf_config", text)  # edited: the text goes, is stored, and the address names the new id
    expect(page.locator("#model-summary")).to_contain_text("4.5 B parameters")
    expect(page).to_have_url(re.compile(rf"config=(?!{first})[0-9a-f]{{20}}"))
    assert len(page.url) < 200, page.url
    page.reload()
    expect(page.locator("#model-summary")).to_contain_text("4.5 B parameters")
    assert [e for e in console_errors if "status of 422" not in e] == []


def test_the_address_bar_holds_only_what_differs(
    page: Page, live_url: str, console_errors: list[str]
) -> None:
    page.goto(f"{live_url}/")
    expect(page.locator(".verdict")).to_be_visible()
    page.fill("#f-gpus", "128")
    expect(page.locator(".verdict")).to_contain_text("on 128 ×")
    expect(page).to_have_url(f"{live_url}/?gpus=128")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_url)
    page.click("button[data-copy=share-url]")
    assert page.evaluate("navigator.clipboard.readText()") == f"{live_url}/?gpus=128"
    page.click("text=Find the best plan")
    expect(page.locator("#search-table")).to_be_visible()
    assert page.url == f"{live_url}/search?gpus=128"
    page.fill("#s-top_k", "3")
    page.locator("#s-top_k").dispatch_event("change")
    expect(page).to_have_url(f"{live_url}/search?gpus=128&top_k=3")
    page.click("button[data-copy=search-share-url]")
    assert page.evaluate("navigator.clipboard.readText()") == f"{live_url}/search?gpus=128&top_k=3"
    assert console_errors == []


def test_a_hugging_face_id_from_the_servers_cache(
    page: Page, live_url: str, console_errors, hub_cache
) -> None:
    hub_cache.add("acme/tiny-llama")
    page.goto(f"{live_url}/?model=llama3.1-8b&gpus=8&tp=1&global_batch=16&seq_len=4096")
    page.fill("#f-hf_id", "acme/tiny-llama")  # typing an id chooses "Hugging Face id" as the model
    expect(page.locator("#model-summary")).to_contain_text("8.0 B parameters")
    expect(page.locator("#f-model")).to_have_value("hub")
    expect(page).to_have_url(re.compile(r"model=hub&hf_id=acme%2Ftiny-llama"))
    page.fill("#f-hf_id", "acme/absent")
    expect(page.locator("#err-hf_id")).to_contain_text("models--acme--absent")
    expect(page.locator("#f-hf_id")).to_have_attribute("aria-invalid", "true")
    assert [e for e in console_errors if "status of 422" not in e] == []


def test_fields_follow_their_messages_after_an_update(page: Page, live_url: str, console_errors) -> None:
    page.goto(f"{live_url}{SMALL}")
    expect(page.locator(".verdict")).to_be_visible()
    expect(page.locator("#f-tp")).not_to_have_attribute("aria-invalid", "true")
    page.fill("#f-tp", "eight")
    expect(page.locator("#err-tp")).to_contain_text("a whole number")
    expect(page.locator("#f-tp")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#f-tp")).to_have_attribute("aria-describedby", "err-tp")
    page.fill("#f-tp", "1")
    expect(page.locator(".verdict")).to_be_visible()
    expect(page.locator("#f-tp")).not_to_have_attribute("aria-invalid", "true")
    page.goto(f"{live_url}/search{SMALL[1:]}")
    page.fill("#s-gpus_range", "lots")
    page.locator("#s-gpus_range").dispatch_event("change")
    expect(page.locator("#s-err-gpus_range")).to_contain_text("e.g. 512:4096")
    expect(page.locator("#s-gpus_range")).to_have_attribute("aria-invalid", "true")
    assert [e for e in console_errors if "status of 422" not in e] == []
