"""The Prices pages: each AWS instance's prices per pricing option in $/h and $/GPU-h, read as the planner
reads them (``cloud_prices``), and one instance's price records as tables (on-demand over time, regions,
commitments, spot per availability zone, capacity blocks), each row with the provenance of its own record."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from app.domain.catalog import Catalog
from app.domain.cost.cloud import cloud_prices
from app.domain.cost.price_records import InstancePrice
from app.domain.estimator.estimate import Assumption
from app.domain.figures import EffectiveDated
from app.domain.provenance import FigureProvenance

OPTIONS = (
    ("on_demand", "On-demand", "on-demand"),
    ("commit_1yr", "1-yr commitment", "1-yr commitment"),
    ("commit_3yr", "3-yr commitment", "3-yr commitment"),
    ("spot", "Spot (median AZ)", "spot"),
    ("capacity_block", "Capacity block", "capacity block"),
)
"""(CloudPrices attribute, column title, words in the planner's assumption name)."""


@dataclass(frozen=True)
class PriceCell:
    usd_per_hour: float | None
    usd_per_gpu_hour: float | None
    source: str | None = None
    source_title: str | None = None
    as_of: str | None = None
    confidence: str | None = None
    note: str | None = None

    @property
    def title(self) -> str:
        if self.usd_per_hour is None:
            return "not offered or not in the catalog"
        parts = [f"source: {self.source_title or self.source}", f"as of {self.as_of}"]
        if self.confidence:
            parts.append(f"confidence {self.confidence}")
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)


@dataclass(frozen=True)
class PriceRow:
    slug: str
    name: str
    gpus_per_instance: int
    region: str
    cells: dict[str, PriceCell]
    as_of: str


def _source_title(catalog: Catalog, key: str | None) -> str | None:
    src = catalog.sources.get(key) if key else None
    return src.title if src else None


def _cell(
    catalog: Catalog, value: float | None, gpus: int, a: Assumption | None, note: str = ""
) -> PriceCell:
    if value is None:
        return PriceCell(None, None)
    extra = note or (a.note if a else None)
    return PriceCell(
        usd_per_hour=value, usd_per_gpu_hour=value / gpus,
        source=a.source if a else None, source_title=_source_title(catalog, a.source if a else None),
        as_of=a.as_of if a else None, confidence=a.confidence if a else None, note=extra or None,
    )  # fmt: skip


def _assumption(assumptions: tuple[Assumption, ...], words: str) -> Assumption | None:
    return next((a for a in assumptions if words in a.name), None)


def price_row(catalog: Catalog, price: InstancePrice) -> PriceRow:
    """The prices in force today, as the planner uses them (a commitment with no rate of its own is on-demand
    less the average AWS committed-use discount; its provenance is that discount's)."""
    prices = cloud_prices(catalog.cost, price.slug)
    cells: dict[str, PriceCell] = {}
    for attr, _title, words in OPTIONS:
        value = getattr(prices, attr)
        a = _assumption(prices.assumptions, f"{price.slug} {words}")
        note = ""
        if a is None and attr.startswith("commit_"):
            a = _assumption(prices.assumptions, f"{attr[-3]}-yr commitment discount")
            if a is not None:
                note = f"on-demand less {a.value:.0%} (no instance-specific rate in force)"
        cells[attr] = _cell(catalog, value, price.gpus_per_instance, a, note)
    return PriceRow(price.slug, price.name, price.gpus_per_instance, price.region, cells, price.as_of)


def price_rows(catalog: Catalog, slugs: list[str]) -> list[PriceRow]:
    return [price_row(catalog, catalog.cost.instance_price(slug)) for slug in slugs]


def _prov(catalog: Catalog, p: FigureProvenance) -> dict[str, Any]:
    return {
        "source": p.source, "source_title": _source_title(catalog, p.source),
        "source_url": getattr(catalog.sources.get(p.source), "url", None), "as_of": p.as_of,
        "confidence": p.confidence.value, "note": p.note,
    }  # fmt: skip


def _window(p: EffectiveDated) -> str:
    start = p.effective_from.isoformat() if p.effective_from else "…"
    end = p.effective_to.isoformat() if p.effective_to else "now"
    return f"{start} – {end}"


def _in_force(p: EffectiveDated, today: date) -> bool:
    return p.in_force(today)


def price_detail(catalog: Catalog, slug: str, today: date) -> dict[str, Any]:
    """One instance's price records, grouped into tables; every row carries its own record's provenance."""
    price = catalog.cost.instance_price(slug)
    gpus = price.gpus_per_instance

    def dated(p: EffectiveDated, usd_h: float, **extra: Any) -> dict[str, Any]:
        return {"window": _window(p), "current": _in_force(p, today), "usd_per_hour": usd_h,
                "usd_per_gpu_hour": usd_h / gpus, **extra, **_prov(catalog, p)}  # fmt: skip

    on_demand = [dated(p, p.usd_per_hour, region=price.region) for p in price.on_demand]
    on_demand += [dated(p, p.usd_per_hour, region=p.region) for p in price.regional_on_demand]
    committed = [
        dated(c, c.instance_usd_per_hour(gpus), kind=c.kind.replace("-", " "), term=f"{c.term_years}-yr")
        for c in price.committed
    ]
    spot = [
        dated(s, s.median_usd_per_hour, region=s.region, low=s.min_usd_per_hour, high=s.max_usd_per_hour,
              azs=len(s.usd_per_hour_by_az), by_az=", ".join(f"{v:,.2f}" for v in s.usd_per_hour_by_az))
        for s in price.spot
    ]  # fmt: skip
    block = None
    if price.capacity_block is not None:
        cb = price.capacity_block
        block = {"usd_per_hour": cb.usd_per_hour, "usd_per_gpu_hour": cb.usd_per_hour / gpus,
                 "regions": ", ".join(cb.regions), **_prov(catalog, cb)}  # fmt: skip
    return {
        "price": price, "row": price_row(catalog, price), "on_demand": on_demand, "committed": committed,
        "spot": spot, "capacity_block": block,
        "available_from": price.available_from, "on_demand_offered": price.on_demand_offered,
        "entry": _prov(catalog, price.figure_provenance("gpus_per_instance")),
    }  # fmt: skip
