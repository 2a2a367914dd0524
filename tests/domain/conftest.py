"""Fixtures shared by the domain tests."""

from __future__ import annotations

import pytest

from app.domain.catalog import Catalog, load_catalog
from app.settings import REPO_ROOT


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    """The repository's catalog (data/), loaded once per test session."""
    return load_catalog(REPO_ROOT / "data")
