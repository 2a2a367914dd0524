"""Browser tests: Debian's chromium driven by Playwright, against a live uvicorn on a free loopback port."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import serve

from app.settings import REPO_ROOT

ARTIFACTS = REPO_ROOT / "test-results" / "screenshots"


def _chromium() -> str | None:
    return os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.xdist_group("e2e"))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    path = _chromium()
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but no chromium found (.ci/run installs Debian's chromium)")
        pytest.skip("browser tests need Debian's chromium (apt-get install chromium) or CHROMIUM_PATH")
    return {
        **browser_type_launch_args,
        "executable_path": path,
        "args": [
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    }


@pytest.fixture(scope="session")
def live_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve(tmp_path_factory.mktemp("e2e")) as url:
        yield url


@pytest.fixture
def screenshot_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def console_errors(page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return errors
