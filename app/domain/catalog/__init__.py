"""The catalog: the one place in the domain that reads files (``data/*.toml``) or the clock.

What lives where:

- ``toml_io``: reading a TOML file into validated entries; :class:`CatalogError` (file, key, reason);
  ``data/sources*.toml``.
- ``hardware_files``: accelerators, nodes, fabrics, switches, topologies → ``HardwareCatalog``.
- ``cost_files``: prices, self-build assumptions, reliability and checkpoint figures → ``CostCatalog``.
- ``published_files``: the published reference runs and their cross-checks.
- ``load``: :func:`load_catalog` (every file, cross-checked) and the small loaders (architecture presets,
  efficiency priors, the fit record).
- ``store``: the loaded :class:`Catalog` (frozen), its listable kinds and :func:`entry_record`.
- ``clock``: :func:`today`, the date the domain stamps on figures it creates (an override, an import).

Everything else in ``app.domain`` receives these records; none of it opens a file. The names below are
imported on first use, so a domain module may import ``catalog.clock`` (or ``toml_io``) without loading the
whole catalog, whose loaders import the domain's record types.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.domain.catalog.load import load_catalog
    from app.domain.catalog.store import CATALOG_KINDS, Catalog, UnknownSlugError, entry_record
    from app.domain.catalog.toml_io import CatalogError

__all__ = ["CATALOG_KINDS", "Catalog", "CatalogError", "UnknownSlugError", "entry_record", "load_catalog"]

_HOME = {
    "load_catalog": "load",
    "CATALOG_KINDS": "store",
    "Catalog": "store",
    "UnknownSlugError": "store",
    "entry_record": "store",
    "CatalogError": "toml_io",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
