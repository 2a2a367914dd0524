"""The command line's catalog cache: reused while the data and the code are unchanged, rebuilt when a file
changes, never a different figure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_cli_catalog import run_cli

import app.domain.catalog
from app.settings import REPO_ROOT

ESTIMATE = ["estimate", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "16",
            "--seq-len", "8192", "--micro-batch", "2", "--json"]  # fmt: skip


def estimate(monkeypatch, capsys) -> dict:  # noqa: ANN001
    code, out, err = run_cli(monkeypatch, capsys, *ESTIMATE)
    assert code == 0, err
    return json.loads(out)


def _no_reading(*args: object, **kwargs: object) -> None:
    raise AssertionError("the catalog was read although the cache holds it")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("CAPPLAN_CATALOG_CACHE", str(where))
    return where


def test_a_cached_catalog_gives_the_same_figures(monkeypatch, capsys, cache: Path) -> None:
    first = estimate(monkeypatch, capsys)
    assert len(list(cache.glob("catalog-*.pickle"))) == 1
    with monkeypatch.context() as m:
        m.setattr(app.domain.catalog, "load_catalog", _no_reading)
        again = estimate(monkeypatch, capsys)
    monkeypatch.setenv("CAPPLAN_CATALOG_CACHE", "off")
    fresh = estimate(monkeypatch, capsys)
    assert first == again == fresh


def test_a_changed_data_file_is_read_again(monkeypatch, capsys, cache: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(REPO_ROOT / "data", data)
    monkeypatch.setenv("CAPPLAN_DATA_DIR", str(data))
    show = ("catalog", "show", "architectures", "llama3.1-8b")
    code, out, _ = run_cli(monkeypatch, capsys, *show)
    assert code == 0 and "8,030,261,248 parameters" in json.loads(out)["notes"]
    text = (data / "architectures.toml").read_text()
    (data / "architectures.toml").write_text(text.replace("8,030,261,248 parameters", "edited note", 1))
    code, out, _ = run_cli(monkeypatch, capsys, *show)
    assert (
        code == 0 and "edited note" in json.loads(out)["notes"]
    )  # the file was read, not the cached catalog
    assert len(list(cache.glob("catalog-*.pickle"))) == 2


def test_a_damaged_cache_file_is_replaced(monkeypatch, capsys, cache: Path) -> None:
    first = estimate(monkeypatch, capsys)
    [path] = cache.glob("catalog-*.pickle")
    path.write_bytes(b"not a pickle")
    assert estimate(monkeypatch, capsys) == first
    assert path.read_bytes() != b"not a pickle"


def test_off_writes_nothing(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPPLAN_CATALOG_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    estimate(monkeypatch, capsys)
    assert not list(tmp_path.rglob("*.pickle"))


def test_deferred_fields_read_back_equal_the_catalog(cache: Path) -> None:
    """The published runs and the fit record are pickled apart and read back on first use, unchanged; a catalog
    derived from the cached one (calibrations replaced) holds them too."""
    from dataclasses import replace

    from app.cli.catalog_cache import DEFERRED, DeferredCatalog, cached
    from app.domain.catalog import load_catalog

    fresh = load_catalog(REPO_ROOT / "data")
    assert cached(REPO_ROOT / "data", False, lambda: fresh) is fresh  # stored
    again = cached(REPO_ROOT / "data", False, _no_reading)
    assert isinstance(again, DeferredCatalog) and "_deferred" in vars(again)
    assert not set(DEFERRED) & set(vars(again))  # not read back yet
    assert again.hardware == fresh.hardware and again.cost == fresh.cost
    assert again.published_runs == fresh.published_runs and again.fit == fresh.fit
    assert "_deferred" not in vars(again)
    derived = replace(cached(REPO_ROOT / "data", False, _no_reading), calibrations=None)
    assert derived.published_runs == fresh.published_runs and derived.fit == fresh.fit
    with pytest.raises(AttributeError):
        _ = again.no_such_field


def test_a_deferred_field_with_a_default_read_first_is_the_catalogs(cache: Path) -> None:
    """``fit`` has a class-level default (None): read before any other deferred field, it must still be the
    catalog's fit record, not that default (it was None until 2026-12-07, so the CLI's track record was empty)."""
    from app.cli.catalog_cache import cached
    from app.domain.catalog import load_catalog

    fresh = load_catalog(REPO_ROOT / "data")
    cached(REPO_ROOT / "data", False, lambda: fresh)
    again = cached(REPO_ROOT / "data", False, _no_reading)
    assert fresh.fit is not None
    assert again.fit == fresh.fit
