"""Fixtures shared by the domain tests: the repository's data directory, its sources and its catalog, each
loaded once per session (tests that need a broken copy make one under ``tmp_path``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.catalog import Catalog, load_catalog
from app.domain.catalog.toml_io import load_sources
from app.domain.provenance import Source
from app.settings import REPO_ROOT


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The repository's data/ directory (read only: copy it to ``tmp_path`` to break it)."""
    return REPO_ROOT / "data"


@pytest.fixture(scope="session")
def sources(data_dir: Path) -> dict[str, Source]:
    """data/sources*.toml."""
    return load_sources(data_dir)


@pytest.fixture(scope="session")
def catalog(data_dir: Path) -> Catalog:
    """The repository's catalog (data/)."""
    return load_catalog(data_dir)
