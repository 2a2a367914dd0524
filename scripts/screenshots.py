"""Screenshots of the main pages for README, at a desktop (1440×900) and a phone (390×844) viewport.

    python scripts/screenshots.py [--out docs/screenshots] [--chromium /usr/bin/chromium] [--only planner,search]

Serves the app on a free loopback port (a temporary SQLite database with two saved scenarios and the repository's
data/), drives Debian's chromium headless through Playwright the way tests/e2e does (never `playwright install`),
waits for each page's charts, and writes one PNG per shot (the viewport, not the whole page, so each stays well
under 300 KB). Console errors of any page are printed and make the exit code 1; a shot over 300 KB is reported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DESKTOP = (1440, 900)
PHONE = (390, 844)
MAX_BYTES = 300_000
TOKEN = "screenshots"
SMALL = "/?model=llama3.1-8b&gpus=8&tp=1&global_batch=16&seq_len=4096&tokens=1e11"
BIG = "/?model=llama3.1-405b&gpus=1024&pp=16&global_batch=2048&tokens=1e12"
SCENARIOS = [
    {"name": "8B on 8 H100", "inputs": {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 16,
                                        "seq_len": 4096, "tokens": 1e11}},
    {"name": "8B on 16 H100, TP 2", "inputs": {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 16, "tp": 2,
                                               "global_batch": 32, "seq_len": 4096, "tokens": 1e11}},
]  # fmt: skip


@dataclass(frozen=True)
class Shot:
    name: str
    path: str
    viewport: tuple[int, int]
    ready: str  # a selector that is visible once the page is drawn
    charts: tuple[str, ...] = ()
    scroll_to: str | None = None  # scrolled to the top of the viewport (or of its scrolling panel)
    block: str = "start"


SIZE = "/size?model=llama3.1-70b&tokens=1.5e13&deadline_days=120&accelerators=h100-sxm,h200-sxm,b200&gpus_range=512:4096"
SHOTS = [
    Shot("size", SIZE, DESKTOP, "#size-table", ("chart-size-pareto",)),
    Shot("planner", BIG, DESKTOP, ".verdict", ("chart-memory", "chart-step")),
    Shot(
        "planner-schedule-cost", BIG, DESKTOP, ".verdict", ("chart-gantt", "chart-cost"), scroll_to="#h-gantt"
    ),
    Shot("planner-phone", SMALL, PHONE, ".verdict", ("chart-memory",)),
    Shot("planner-phone-results", SMALL, PHONE, ".verdict", ("chart-memory",), scroll_to=".verdict"),
    Shot(
        "planner-invalid",
        SMALL.replace("tp=1", "tp=3"),
        DESKTOP,
        "#search-from-invalid",
        scroll_to="#f-tp",
        block="center",
    ),  # fmt: skip
    Shot("search", "/search" + SMALL[1:] + "&top_k=8", DESKTOP, "#search-table", ("chart-pareto",)),
    Shot("search-phone", "/search" + SMALL[1:] + "&top_k=8", PHONE, "#search-table"),
    Shot(
        "scenarios-compare",
        "/scenarios/compare?ids=1&ids=2",
        DESKTOP,
        "#compare-table",
        ("chart-compare", "chart-compare-cost"),
    ),  # fmt: skip
    Shot("prices", "/catalog/prices", DESKTOP, "#catalog-results"),
    Shot("prices-phone", "/catalog/prices", PHONE, "#catalog-results"),
    Shot("accuracy", "/accuracy", DESKTOP, "table.catalog"),
]


@contextmanager
def serve() -> Iterator[str]:
    """The app on a free loopback port with a fresh SQLite database holding two scenarios."""
    import json
    import urllib.request

    from app.live_server import serve as serve_app

    with tempfile.TemporaryDirectory() as tmp, serve_app(Path(tmp) / "shots.db", TOKEN) as url:
        for body in SCENARIOS:
            request = urllib.request.Request(
                f"{url}/api/v1/scenarios", data=json.dumps(body).encode(), method="POST",
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )  # fmt: skip
            urllib.request.urlopen(request).close()
        yield url


def take(shots: list[Shot], out: Path, chromium: str) -> list[str]:
    """Write each shot under ``out``; the console errors seen (page, message)."""
    from playwright.sync_api import expect, sync_playwright

    problems: list[str] = []
    with serve() as url, sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium,
            args=["--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        for shot in shots:
            context = browser.new_context(viewport={"width": shot.viewport[0], "height": shot.viewport[1]})
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda m, e=errors: e.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc, e=errors: e.append(str(exc)))
            page.goto(url + shot.path)
            expect(page.locator(shot.ready).first).to_be_visible(timeout=60_000)
            for chart in shot.charts:
                expect(page.locator(f"x-chart[data-chart={chart}]")).to_have_attribute("data-ready", "true")
            if shot.scroll_to:
                page.evaluate("([s, b]) => { document.querySelector(s).scrollIntoView({block: b}); "
                              "if (b === 'start') { window.scrollBy(0, -8); } }", [shot.scroll_to, shot.block])  # fmt: skip
            page.wait_for_timeout(300)  # let ECharts finish its first animation frame
            target = out / f"{shot.name}.png"
            page.screenshot(path=str(target), animations="disabled")
            size = target.stat().st_size
            width = page.evaluate("document.documentElement.scrollWidth")
            print(f"{target.relative_to(REPO) if target.is_relative_to(REPO) else target}: {size / 1000:.0f} KB"
                  + (f"  (page {width}px wide: scrolls sideways)" if width > shot.viewport[0] else ""))  # fmt: skip
            if size > MAX_BYTES:
                problems.append(f"{shot.name}: {size / 1000:.0f} KB, over {MAX_BYTES / 1000:.0f} KB")
            problems += [
                f"{shot.name} ({shot.path}): console: {e}" for e in errors if "status of 422" not in e
            ]
            context.close()
        browser.close()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM_PATH") or shutil.which("chromium"))
    parser.add_argument("--only", default="", help="comma-separated shot names (default: all)")
    args = parser.parse_args()
    if not args.chromium:
        print("no chromium: apt-get install chromium, or pass --chromium PATH", file=sys.stderr)
        return 2
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    shots = [s for s in SHOTS if not wanted or s.name in wanted]
    args.out.mkdir(parents=True, exist_ok=True)
    problems = take(shots, args.out, args.chromium)
    for problem in problems:
        print("problem:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
