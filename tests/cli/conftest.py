"""The command-line tests keep the catalog cache (app/cli/catalog_cache.py) in a folder of their own, not in the
user's ~/.cache: one folder for the session, so most commands read the cached catalog as a user's would."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def catalog_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("catalog-cache")


@pytest.fixture(autouse=True)
def _catalog_cache(catalog_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_CATALOG_CACHE", str(catalog_cache_dir))
