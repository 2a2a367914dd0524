"""The loaded catalog: every data/*.toml file's records in one frozen object (built by
:func:`app.domain.catalog.load.load_catalog`), its listable kinds, and entries as plain data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.domain.cost.price_records import CostCatalog
from app.domain.estimator.efficiency import EfficiencyCatalog
from app.domain.estimator.hardware import HardwareCatalog
from app.domain.model.architecture import Architecture
from app.domain.provenance import CatalogEntry, Source

# Types of fields the catalog holds and never uses itself (the CLI's cache reads them back when first asked for).
if TYPE_CHECKING:
    from app.domain.estimator.calibration import Calibrations
    from app.domain.estimator.fitted import FitRecord
    from app.domain.estimator.published import PublishedRun

__all__ = ["Catalog", "CATALOG_KINDS", "entry_record", "UnknownSlugError"]


class UnknownSlugError(KeyError):
    """A slug that is not in the catalog; carries the known slugs for the error message."""

    def __init__(self, kind: str, slug: str, known: list[str]) -> None:
        self.kind, self.slug, self.known = kind, slug, known
        super().__init__(f"unknown {kind} {slug!r}; known: {', '.join(known)}")

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class Catalog:
    sources: dict[str, Source]
    hardware: HardwareCatalog
    cost: CostCatalog
    architectures: tuple[Architecture, ...]
    published_runs: tuple[PublishedRun, ...]
    efficiency: EfficiencyCatalog
    data_dir: Path
    # data/efficiency.toml as written (the fit's priors) and the record of the last fit overlaid on them.
    efficiency_priors: EfficiencyCatalog | None = None
    fit: FitRecord | None = None
    # Fitted from benchmark runs (shipped under data/calibration and stored by the server); estimates whose
    # request says ``calibrated`` use them. None: catalog defaults only.
    calibrations: Calibrations | None = None

    def with_calibrations(self, calibrations: Calibrations | None) -> Catalog:
        """This catalog with ``calibrations`` (the same object when they are already the ones it has)."""
        return self if calibrations is self.calibrations else replace(self, calibrations=calibrations)

    def entries(self, kind: str) -> tuple[CatalogEntry, ...]:
        """Entries of one listable kind (see CATALOG_KINDS)."""
        try:
            getter = CATALOG_KINDS[kind]
        except KeyError:
            raise UnknownSlugError("catalog kind", kind, list(CATALOG_KINDS)) from None
        return getter(self)

    def entry(self, kind: str, slug: str) -> CatalogEntry:
        entries = self.entries(kind)
        for entry in entries:
            if entry.slug == slug:
                return entry
        raise UnknownSlugError(kind.rstrip("s"), slug, [e.slug for e in entries])

    def architecture(self, slug: str) -> Architecture:
        return self.entry("architectures", slug)  # type: ignore[return-value]

    def counts(self) -> dict[str, int]:
        return {kind: len(self.entries(kind)) for kind in CATALOG_KINDS}


CATALOG_KINDS: dict[str, Callable[[Catalog], tuple[CatalogEntry, ...]]] = {
    "accelerators": lambda c: c.hardware.accelerators,
    "nodes": lambda c: c.hardware.nodes,
    "fabrics": lambda c: c.hardware.fabrics,
    "switches": lambda c: c.hardware.switches,
    "topologies": lambda c: c.hardware.topologies,
    "prices": lambda c: c.cost.instance_prices,
    "architectures": lambda c: c.architectures,
}


def entry_record(entry: CatalogEntry, sources: dict[str, Source]) -> dict[str, Any]:
    """An entry as plain data, with each figure's provenance resolved (source title/url, as_of, confidence)."""
    record = entry.model_dump(mode="json", exclude={"provenance"})
    figures: dict[str, Any] = {}
    for name in entry.figure_names():
        prov = entry.figure_provenance(name)
        src = sources.get(prov.source)
        figures[name] = {
            "value": record.get(name),
            "source": prov.source,
            "source_title": src.title if src else None,
            "source_url": src.url if src else None,
            "as_of": prov.as_of,
            "confidence": prov.confidence.value,
            "note": prov.note,
        }
    record["figures"] = figures
    return record
