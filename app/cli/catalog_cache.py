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

The published runs and the record of the last fit (:data:`DEFERRED`) are pickled apart and read back only when a
command first asks for them (`capplan validate` does, `capplan plan` does not): unpickling them would import the
modules that define them, which a command that never reads them need not load.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.domain.catalog.store import Catalog

APP_DIR = Path(__file__).resolve().parent.parent
PREFIX = "catalog-"
DEFERRED = ("published_runs", "fit")
"""Catalog fields kept pickled until first read (see :class:`DeferredCatalog`)."""


class DeferredCatalog(Catalog):
    """A :class:`Catalog` read back from the cache whose :data:`DEFERRED` fields are unpickled on first access.

    The instance holds every other field as usual and, in place of the deferred ones, their pickle; reading any of
    them (directly, or through ``replace``, ``==`` or ``repr``) unpickles them all once. Every figure is the
    catalog's own: only the moment they are read back differs."""

    def __getattribute__(self, name: str) -> Any:
        # Not __getattr__: a deferred field with a class-level default (``fit = None``) would be found on the
        # class, and read as that default, before __getattr__ was ever asked.
        if name in DEFERRED:
            state = object.__getattribute__(self, "__dict__")
            if "_deferred" in state:
                for field_name, value in pickle.loads(state["_deferred"]).items():
                    object.__setattr__(self, field_name, value)
                object.__delattr__(self, "_deferred")
        return object.__getattribute__(self, name)

    @classmethod
    def wrap(cls, catalog: Catalog) -> DeferredCatalog:
        """``catalog`` with its :data:`DEFERRED` fields pickled apart (what the cache stores)."""
        out = object.__new__(cls)
        for f in dataclasses.fields(Catalog):
            if f.name not in DEFERRED:
                object.__setattr__(out, f.name, getattr(catalog, f.name))
        deferred = {name: getattr(catalog, name) for name in DEFERRED}
        object.__setattr__(out, "_deferred", pickle.dumps(deferred, protocol=pickle.HIGHEST_PROTOCOL))
        return out


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
            stored = DeferredCatalog.wrap(catalog) if isinstance(catalog, Catalog) else catalog
            pickle.dump(stored, f, protocol=pickle.HIGHEST_PROTOCOL)
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
