"""In a real browser: the catalog filter updates in place through htmx, the URL follows, no console errors."""

from __future__ import annotations

from playwright.sync_api import Page, expect


def test_catalog_filter_updates_in_place(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir
) -> None:
    page.goto(f"{live_url}/catalog/accelerators")
    expect(page.locator("#catalog-results")).to_contain_text("h100-sxm")
    page.screenshot(path=str(screenshot_dir / "catalog-accelerators.png"), full_page=True)
    page.evaluate("window.__marker = 'same-page'")  # survives only if the page is not reloaded
    with page.expect_response(lambda r: "/catalog/accelerators?" in r.url) as info:
        page.fill("#q", "h200")
    assert info.value.status == 200
    expect(page.locator("#catalog-results")).not_to_contain_text("h100-sxm")
    expect(page.locator("#catalog-results")).to_contain_text("h200-sxm")
    assert page.evaluate("window.__marker") == "same-page"
    expect(page).to_have_url(f"{live_url}/catalog/accelerators?q=h200&confidence=any")
    page.screenshot(path=str(screenshot_dir / "catalog-filtered.png"), full_page=True)
    assert console_errors == []


def test_catalog_works_without_javascript(browser, live_url: str, screenshot_dir) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{live_url}/catalog/nodes")
    page.fill("#q", "p5")
    page.click("button[type=submit]")
    expect(page.locator("#catalog-results")).to_contain_text("p5.48xlarge")
    expect(page.locator("#catalog-results")).not_to_contain_text("dgx-a100")
    assert "q=p5" in page.url
    page.screenshot(path=str(screenshot_dir / "catalog-nojs.png"), full_page=True)
    context.close()


def test_entry_page_and_back(page: Page, live_url: str, console_errors: list[str], screenshot_dir) -> None:
    page.goto(f"{live_url}/catalog/prices")
    page.click("text=p5.48xlarge")
    expect(page.locator("h1")).to_contain_text("p5.48xlarge")
    page.screenshot(path=str(screenshot_dir / "price-entry.png"), full_page=True)
    page.go_back()
    expect(page.locator("#catalog-results")).to_contain_text("p5.48xlarge")
    assert console_errors == []


def test_prices_are_readable_at_desktop_and_phone_width(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir
) -> None:
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{live_url}/catalog/prices")
        row = page.locator("tr", has=page.locator('a[href="/catalog/prices/p5.48xlarge"]'))
        expect(row.locator("td[data-option=on_demand]")).to_contain_text("$55.04")
        expect(row.locator("td[data-option=capacity_block]")).to_contain_text("/GPU-h")
        page.goto(f"{live_url}/catalog/prices/p5.48xlarge")
        expect(page.locator("#capacity-block")).to_contain_text("$39.33")
        # records are tables in scrolling boxes: the page itself never runs off-screen
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(screenshot_dir / f"price-entry-{width}.png"), full_page=True)
    assert console_errors == []


def test_new_pages_have_no_console_errors(page: Page, live_url: str, console_errors: list[str]) -> None:
    for path in ("/glossary", "/benchmarks", "/catalog/prices/p5e.48xlarge", "/catalog/prices?q=p5"):
        response = page.goto(f"{live_url}{path}")
        assert response is not None and response.status == 200, path
    expect(page.locator("#catalog-results")).to_contain_text("p5.48xlarge")
    assert console_errors == []


def test_accuracy_errors_are_in_view_on_a_phone(page: Page, live_url: str, console_errors: list[str]) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_url}/accuracy")
    cell = page.locator("table.catalog").nth(1).locator("tbody tr").first.locator("td").first
    cell.scroll_into_view_if_needed()
    box = cell.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390, box  # the out-of-sample error, unscrolled
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert console_errors == []
