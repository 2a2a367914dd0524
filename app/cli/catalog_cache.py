"""The parsed catalog, cached between command-line runs.

Reading the catalog parses some 70 TOML files and validates every entry (and, calibrated, fits the shipped
benchmark runs): most of what a quick command such as `capplan plan` spends after its imports. The result is
pickled under ``$XDG_CACHE_HOME/capplan`` (``~/.cache/capplan``) and reused while nothing it was built from has
changed: the key covers every file under the data directory and every ``.py`` file of ``app/`` (path, size,
modification time), the Python and pydantic versions and whether the catalog is calibrated. Anything unusual
(unreadable cache, a write that fails, a pickle from elsewhere) falls back to reading the catalog; the cache never
changes a figure. ``CAPPLAN_CATALOG_CACHE=off`` turns it off, ``CAPPLAN_CATALOG_CACHE=DIR`` moves it.
Only the catalog as shipped (optionally with the shipped calibration) is cached: ``--calibration-run`` files and
``--calibration-db`` runs are fitted on every run.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

APP_DIR = Path(__file__).resolve().parent.parent
PREFIX = "catalog-"


def cache_dir() -> Path | None:
    """Where the cache lives; None when it is off."""
    setting = os.environ.get("CAPPLAN_CATALOG_CACHE", "")
    if setting.lower() in {"off", "0", "no", "false"}:
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "capplan"


def _key(data_dir: Path, calibrated: bool) -> str:
    import pydantic

    digest = hashlib.sha256(f"{sys.version}|{pydantic.VERSION}|{calibrated}|{data_dir}".encode())
    for root, pattern in ((data_dir, "*"), (APP_DIR, "*.py")):
        for path in sorted(root.rglob(pattern)):
            if "__pycache__" in path.parts:
                continue
            stat = path.stat()
            digest.update(f"{path}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def cached(data_dir: Path, calibrated: bool, build: Callable[[], Any]) -> Any:
    """``build()``'s catalog, from the cache when its sources are unchanged (stored there otherwise)."""
    where = cache_dir()
    if where is None:
        return build()
    data_dir = Path(data_dir).resolve()
    try:
        key = _key(data_dir, calibrated)
    except OSError:
        return build()
    path = where / f"{PREFIX}{key}.pickle"
    try:
        with path.open("rb") as f:
            return pickle.load(f)  # the user's own cache, written below
    except FileNotFoundError:
        pass
    except Exception:  # a damaged or foreign file: rebuild and replace it
        path.unlink(missing_ok=True)
    catalog = build()
    _store(where, path, catalog, keep={path.name})
    return catalog


def _store(where: Path, path: Path, catalog: Any, keep: set[str]) -> None:
    """Write atomically (readers see the old file or the new one); drop entries unused for a day."""
    temp: str | None = None
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".tmp-", delete=False) as f:
            temp = f.name
            pickle.dump(catalog, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temp, path)
        temp = None
        for old in where.glob(f"{PREFIX}*.pickle"):
            if old.name not in keep and old.stat().st_atime < path.stat().st_mtime - 86_400:
                old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass
    finally:
        if temp is not None:
            Path(temp).unlink(missing_ok=True)
