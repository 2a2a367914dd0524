"""In a real browser: "Size a cluster" from the nav, the form submits through htmx, the ranked table and the
Pareto chart (ECharts, drawn as SVG) appear, no console errors."""

from __future__ import annotations

from playwright.sync_api import Page, expect


def test_size_a_cluster_in_the_browser(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir
) -> None:
    page.goto(f"{live_url}/")
    page.click("nav >> text=Size a cluster")
    expect(page).to_have_url(f"{live_url}/size")
    page.fill("#z-model", "llama3.1-8b")
    page.fill("#z-tokens", "1e12")
    page.fill("#z-accelerators", "h100-sxm")
    page.fill("#z-options", "on-demand,spot")
    page.fill("#z-gpus_range", "64:128")
    with page.expect_response(lambda r: "/size?" in r.url) as info:
        page.click("#size-form button[type=submit]")
    assert info.value.status == 200
    expect(page.locator("#size-table tbody tr").first).to_be_visible()
    expect(
        page.locator('x-chart[data-chart="chart-size-pareto"] svg').first
    ).to_be_visible()  # ECharts, SVG renderer
    assert "tokens=1e12" in page.url
    page.screenshot(path=str(screenshot_dir / "size.png"), full_page=True)
    assert console_errors == []
