"""In a real browser: "Size a cluster" from the nav, the form starts a background run through htmx, its progress
panel polls until the ranked table and the Pareto chart (ECharts, drawn as SVG) replace it, the address bar gets
the run's bookmarkable URL, a bad value is named without losing what was typed, no console errors."""

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
    with page.expect_response(lambda r: r.url.endswith("/size/jobs")) as started:
        page.click("#size-form button[type=submit]")
    assert started.value.status == 202
    expect(page.locator("#size-table tbody tr").first).to_be_visible(timeout=120_000)
    expect(page.locator("#size-progress")).to_have_count(0)  # the results replaced the polling panel
    expect(
        page.locator('x-chart[data-chart="chart-size-pareto"] svg').first
    ).to_be_visible()  # ECharts, SVG renderer
    assert "/size?" in page.url and "tokens=1e12" in page.url
    page.screenshot(path=str(screenshot_dir / "size.png"), full_page=True)
    page.fill("#z-tokens", "lots")
    with page.expect_response(lambda r: r.url.endswith("/size/jobs")) as refused:
        page.click("#size-form button[type=submit]")
    assert refused.value.status == 422
    expect(page.locator("#size-results .fix")).to_contain_text("tokens")
    expect(page.locator("#z-tokens")).to_have_value("lots")  # only the results panel was swapped
    # the browser logs a line for the 422 answer to the invalid value; nothing else
    assert [e for e in console_errors if "status of 422" not in e] == []


def test_the_progress_panel_shows_while_a_run_is_going(
    page: Page, live_url: str, console_errors: list[str], screenshot_dir
) -> None:
    """A catalog-wide run takes a few seconds: the panel with its progress bar is shown (and polls) meanwhile."""
    page.goto(f"{live_url}/size")
    page.fill("#z-model", "mixtral-8x7b")
    page.fill("#z-tokens", "2e12")
    page.fill("#z-accelerators", "")
    page.fill("#z-gpus_range", "8:65536")
    page.click("#size-form button[type=submit]")
    expect(page.locator("#size-progress progress")).to_be_visible()
    page.screenshot(path=str(screenshot_dir / "size-progress.png"))
    expect(page.locator("#size-table tbody tr").first).to_be_visible(timeout=300_000)
    assert console_errors == []


ONE_LINE = """() => [...document.querySelectorAll('#size-table td:not(.plan), #size-table th')].filter(cell => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
    return tops.size > 1;
}).map(cell => cell.textContent.trim())"""


def test_the_ranked_tables_figures_stay_on_one_line(
    page: Page, live_url: str, console_errors: list[str]
) -> None:
    """MFU ("40.5 %"), headroom, dollars, node and option never wrap under their own number at desktop width (the
    MFU column did); only the plan column wraps. At phone width the table scrolls in its box instead."""
    query = ("model=llama3.1-70b&tokens=1.5e13&deadline_days=120&accelerators=h100-sxm,h200-sxm,b200"
             "&gpus_range=512:4096")  # fmt: skip
    for width, height in ((1440, 900), (1280, 800), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{live_url}/size?{query}")
        expect(page.locator("#size-table tbody tr").first).to_be_visible(timeout=120_000)
        assert page.evaluate(ONE_LINE) == [], width
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), width
    assert console_errors == []
