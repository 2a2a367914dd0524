"""In a real browser: the planner updates in place, uploads a config.json, saves/reloads/compares scenarios,
searches and loads a plan, downloads an export, works without JavaScript — with no console errors."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Page, expect

from app.web.forms import DEFAULTS

LLAMA_CONFIG = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip


def _unexpected(errors: list[str]) -> list[str]:
    """Console errors other than the browser's log line for a 422 answer (invalid input is answered 422)."""
    return [e for e in errors if "status of 422" not in e]


def _charts_ready(page: Page, *ids: str) -> None:
    for chart_id in ids:
        expect(page.locator(f"x-chart[data-chart={chart_id}]")).to_have_attribute("data-ready", "true")


def test_pick_a_preset_and_the_estimate_updates_in_place(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path
) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_url}/")
    expect(page.locator(".verdict")).to_contain_text("llama3.1-70b")
    _charts_ready(page, "chart-memory", "chart-step", "chart-gantt", "chart-cost", "chart-cumulative")
    page.screenshot(path=str(screenshot_dir / "planner.png"), full_page=True)
    page.evaluate("window.__marker = 'same-page'")
    with page.expect_response(lambda r: "model=llama3.1-405b" in r.url) as info:
        page.select_option("#f-model", "llama3.1-405b")
    assert info.value.status == 200
    # the picked model opens with the search's layout for this cluster: the fields set in place, the address holds it
    expect(page.locator("#layout-note")).to_contain_text("Layout set by the search for llama3.1-405b")
    expect(page.locator("#f-plan_for")).to_have_value("llama3.1-405b")
    # the address names what differs from the defaults (short links): absent = the default
    query = parse_qs(urlsplit(page.url).query)
    for field in ("tp", "ep"):
        assert query.get(field, [DEFAULTS[field]])[0] == page.input_value(f"#f-{field}"), (field, page.url)
    page.fill("#f-gpus", "1024")
    page.fill("#f-pp", "16")
    page.fill("#f-global_batch", "2048")
    expect(page.locator(".verdict")).to_contain_text("llama3.1-405b on 1024")
    expect(page.locator(".verdict")).to_contain_text("pp 16")
    expect(page.locator("#model-summary")).to_contain_text("Llama 3.1 405B")
    assert page.evaluate("window.__marker") == "same-page"
    assert "model=llama3.1-405b" in page.url and "gpus=1024" in page.url
    _charts_ready(page, "chart-memory", "chart-gantt")
    assert page.locator("x-chart[data-chart=chart-gantt] svg path").count() > 100
    page.screenshot(path=str(screenshot_dir / "planner-405b.png"), full_page=True)
    # an invalid value: 422 swapped in, the field's message appears, the typed value stays
    page.fill("#f-tp", "eight")
    expect(page.locator("#err-tp")).to_contain_text("a whole number")
    expect(page.locator("#results")).to_contain_text("What to fix")
    assert page.input_value("#f-tp") == "eight"
    page.fill("#f-tp", "8")
    expect(page.locator("#err-tp")).to_be_empty()
    expect(page.locator(".verdict")).to_be_visible()
    page.reload()  # the URL alone reproduces the page
    expect(page.locator(".verdict")).to_contain_text("llama3.1-405b on 1024")
    assert _unexpected(console_errors) == []


def test_narrow_window(page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path) -> None:
    page.set_viewport_size({"width": 420, "height": 900})
    page.goto(f"{live_url}/")
    _charts_ready(page, "chart-memory")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 440, f"page scrolls sideways: {width}px"
    page.screenshot(path=str(screenshot_dir / "planner-narrow.png"), full_page=True)
    assert _unexpected(console_errors) == []


def test_upload_a_config_json(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_CONFIG))
    page.goto(f"{live_url}/?gpus=8&tp=1&global_batch=16&seq_len=4096")
    page.set_input_files("#hf-file", str(config))
    page.click("#hf-upload button[type=submit]")
    expect(page.locator("#model-summary")).to_contain_text("8.0 B parameters")
    expect(page.locator("#f-model")).to_have_value("hf")
    assert "model=hf" in page.url and "gpus=8" in page.url
    expect(page.locator(".verdict")).to_contain_text("on 8 ×")
    # edit the config: 16 layers instead of 32, and the counts follow
    text = page.input_value("#f-hf_config").replace('"num_hidden_layers":32', '"num_hidden_layers":16')
    page.fill("#f-hf_config", text)
    expect(page.locator("#model-summary")).to_contain_text("4.")
    page.screenshot(path=str(screenshot_dir / "planner-config-upload.png"), full_page=True)
    assert _unexpected(console_errors) == []


def test_save_reload_and_compare_scenarios(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path
) -> None:
    page.goto(
        f"{live_url}/?model=llama3.1-8b&gpu=h100-sxm&gpus=8&tp=1&global_batch=16&seq_len=4096&tokens=1e10"
    )
    page.fill("form.save input[name=name]", "8B on 8 H100")
    page.click("form.save button[type=submit]")
    expect(page.locator("h1.scenario-name")).to_contain_text("8B on 8 H100")
    first_url = page.url
    page.reload()
    expect(page.locator(".verdict")).to_contain_text("llama3.1-8b on 8")
    page.goto(f"{live_url}/?model=llama3.1-8b&gpu=h100-sxm&gpus=16&tp=2&global_batch=16&seq_len=4096&tokens=1e10"
              "&o.on_demand_usd_per_hour=40")  # fmt: skip
    page.fill("form.save input[name=name]", "8B on 16 H100, cheap")
    page.click("form.save button[type=submit]")
    expect(page.locator(".scenario-head")).to_contain_text("on-demand $/instance-hour = 40")
    page.goto(f"{live_url}/scenarios")
    page.locator("input[name=ids]").nth(0).check()
    page.locator("input[name=ids]").nth(1).check()
    page.click("#compare-form button[type=submit]")
    expect(page.locator("#compare-table")).to_contain_text("8B on 8 H100")
    expect(page.locator("#compare-table")).to_contain_text("8B on 16 H100, cheap")
    _charts_ready(page, "chart-compare", "chart-compare-cost")
    page.screenshot(path=str(screenshot_dir / "scenarios-compare.png"), full_page=True)
    page.goto(first_url)
    expect(page.locator("h1.scenario-name")).to_contain_text("8B on 8 H100")
    assert _unexpected(console_errors) == []


def test_search_and_load_a_plan(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path
) -> None:
    page.goto(f"{live_url}/")
    page.click("text=Find the best plan")
    expect(page.locator("#search-table")).to_be_visible()
    _charts_ready(page, "chart-pareto")
    page.screenshot(path=str(screenshot_dir / "search.png"), full_page=True)
    page.locator("a.load-plan").first.click()
    expect(page.locator(".verdict")).to_contain_text("Fits")
    assert "dp=" in page.url
    assert _unexpected(console_errors) == []


def test_copy_and_download_an_export(
    page: Page, live_url: str, console_errors: list[str], tmp_path: Path
) -> None:
    page.goto(f"{live_url}/")
    page.locator("details.export[data-format=slurm] summary").click()
    page.locator("details.export[data-format=slurm] button.copy").click()
    expect(page.locator("details.export[data-format=slurm] button.copy")).not_to_have_text("Copy")
    with page.expect_download() as info:
        page.locator("details.export[data-format=slurm] a[download]").click()
    download = info.value
    assert download.suggested_filename == "train.sbatch"
    path = tmp_path / "train.sbatch"
    download.save_as(path)
    assert path.read_text().startswith("#!/bin/bash") and "#SBATCH --nodes=8" in path.read_text()
    assert _unexpected(console_errors) == []


def test_planner_works_without_javascript(browser, live_url: str, screenshot_dir: Path) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{live_url}/")
    page.fill("#f-gpus", "128")
    page.click("#planner button[type=submit]")
    expect(page.locator(".verdict")).to_contain_text("on 128 ×")
    assert "gpus=128" in page.url
    page.fill("#f-tp", "x")
    page.click("#planner button[type=submit]")
    expect(page.locator("#err-tp")).to_contain_text("a whole number")
    page.screenshot(path=str(screenshot_dir / "planner-nojs-422.png"), full_page=True)
    context.close()


def test_a_too_large_config_json_keeps_the_form(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path, tmp_path: Path
) -> None:
    """Refused in the page before sending (JavaScript), and by the server without it: the inputs stay."""
    big = tmp_path / "config.json"
    big.write_text(json.dumps({**LLAMA_CONFIG, "id2label": {str(i): "x" * 40 for i in range(30_000)}}))
    page.goto(f"{live_url}/?gpus=16&tp=2&global_batch=32&seq_len=4096")
    page.set_input_files("#hf-file", str(big))
    page.click("#hf-upload button[type=submit]")
    expect(page.locator("#hf-upload-error")).to_contain_text("too large")
    expect(page.locator("#hf-upload-error")).to_contain_text("256,000 bytes")
    expect(page.locator("#f-gpus")).to_have_value("16")
    assert "gpus=16" in page.url
    page.screenshot(path=str(screenshot_dir / "planner-upload-too-large.png"))
    assert _unexpected(console_errors) == []


def test_a_too_large_config_json_without_javascript(
    browser, live_url: str, screenshot_dir: Path, tmp_path: Path
) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    for size, text in ((1_500_000, "1.5 MB"), (5_000_000, "5.0 MB")):
        big = tmp_path / f"config-{size}.json"
        pad = size - len(json.dumps(LLAMA_CONFIG)) - 20
        big.write_text(json.dumps({**LLAMA_CONFIG, "notes": "x" * pad}))
        page.goto(f"{live_url}/?gpus=16&tp=2&global_batch=32&seq_len=4096")
        page.set_input_files("#hf-file", str(big))
        page.click("#hf-upload button[type=submit]")
        expect(page.locator("#hf-upload-error")).to_contain_text("too large")
        expect(page.locator("#hf-upload-error")).to_contain_text(text)
        expect(page.locator("#f-gpus")).to_have_value("16")
        assert "detail" not in page.content()[:200]
    page.screenshot(path=str(screenshot_dir / "planner-upload-too-large-nojs.png"))
    context.close()


FAMILY_CONFIGS = Path(__file__).parents[1] / "domain" / "hf_configs"


def test_import_popular_families_and_a_llama_shaped_unknown(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path, tmp_path: Path
) -> None:
    page.goto(f"{live_url}/?gpus=8&tp=1&global_batch=16&seq_len=2048&tokens=1e9")
    for name, shown in (("gemma-2-9b", "9.2 B parameters"), ("phi-4", "14.7 B parameters"),
                        ("olmo-2-7b", "7.3 B parameters"), ("deepseek-v2-lite", "15.7 B parameters"),
                        ("falcon-7b", "6.9 B parameters"), ("command-r7b", "8.0 B parameters")):  # fmt: skip
        page.set_input_files("#hf-file", str(FAMILY_CONFIGS / f"{name}.json"))
        page.click("#hf-upload button[type=submit]")
        expect(page.locator("#model-summary")).to_contain_text(shown)
        expect(page.locator("#model-summary")).not_to_contain_text("user-")
        assert "gpus=8" in page.url
    unknown = tmp_path / "config.json"
    unknown.write_text(
        json.dumps({**LLAMA_CONFIG, "model_type": "newlm", "architectures": ["NewLMForCausalLM"]})
    )
    page.set_input_files("#hf-file", str(unknown))
    page.click("#hf-upload button[type=submit]")
    expect(page.locator("#import-llama-style")).to_be_visible()
    page.screenshot(path=str(screenshot_dir / "planner-llama-style-offer.png"))
    page.click("#import-llama-style")
    expect(page.locator("#model-summary")).to_contain_text("Llama-style 8.0B (NewLMForCausalLM)")
    assert _unexpected(console_errors) == []


def test_batch_unit_converts_and_the_search_opens_from_an_invalid_plan(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path
) -> None:
    page.goto(f"{live_url}/?model=llama3.1-8b&gpus=8&tp=1&global_batch=16&seq_len=4096&tokens=15T")
    expect(page.locator(".verdict")).to_be_visible()
    page.select_option("#f-batch_unit", "tokens")
    expect(page.locator("#f-global_batch")).to_have_value("65536")
    expect(page.locator(".verdict")).to_contain_text("llama3.1-8b")
    page.select_option("#f-batch_unit", "sequences")
    expect(page.locator("#f-global_batch")).to_have_value("16")
    page.fill("#f-tp", "3")  # 3 does not divide the heads
    expect(page.locator("#search-from-invalid")).to_be_visible()
    page.screenshot(path=str(screenshot_dir / "planner-invalid-offers-search.png"))
    page.click("#search-from-invalid")
    expect(page.locator("h1")).to_contain_text("Find the best plan")
    expect(page.get_by_text("Load this plan").first).to_be_visible()
    assert _unexpected(console_errors) == []


def test_on_a_phone_results_are_announced_and_the_cost_total_is_in_view(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir: Path
) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_url}/?model=llama3.1-8b&gpus=8&tp=1&global_batch=16&seq_len=4096&tokens=1e10")
    expect(page.locator(".results-below")).to_be_visible()
    page.click(".results-below a")
    expect(page.locator(".verdict")).to_be_in_viewport()
    amortised = page.locator("#cost-table tbody tr").first.locator("td.total.amortised")
    amortised.scroll_into_view_if_needed()
    box = amortised.bounding_box()
    # no sideways scroll needed for the two totals, cash and amortised (the amortised one is the further right)
    assert box is not None and box["x"] + box["width"] <= 390, box
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(screenshot_dir / "planner-phone-cost.png"))
    page.set_viewport_size({"width": 1440, "height": 900})
    expect(page.locator(".results-below")).to_be_hidden()
    assert _unexpected(console_errors) == []


def test_export_the_cost_csv_and_copy_the_share_link(
    page: Page, live_url: str, console_errors: list[str], tmp_path: Path
) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_url)
    page.goto(f"{live_url}/?model=llama3.1-8b&gpus=8&tp=1&global_batch=16&seq_len=4096&tokens=1e10")
    with page.expect_download() as info:
        page.click("text=CSV")
    path = tmp_path / "cost.csv"
    info.value.save_as(path)
    assert info.value.suggested_filename == "cost.csv"
    lines = path.read_text().splitlines()
    assert lines[0].startswith(
        "provider,instance,option,available,days,days_before_failures,cash_usd,amortised_usd"
    )
    assert len(lines) > 5
    page.click("button[data-copy=share-url]")
    expect(page.locator("button[data-copy=share-url]")).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith(live_url + "/?model=llama3.1-8b") and "gpus=8" in copied
    expect(page.locator("button[data-copy=share-url]")).to_have_text("Copy link")
    assert _unexpected(console_errors) == []
