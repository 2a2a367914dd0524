"""Cloud prices per instance-hour of the instance that carries the plan's accelerator: on-demand,
commitments, spot, Capacity Blocks, off-peak, regions; and what a commitment owes for a shorter run.
"""

from __future__ import annotations

from datetime import date

from pydantic import Field

from app.domain.cost.inputs import (
    CLOUD_OPTIONS,
    DEFAULT_RESERVED_FRACTION,
    HOURS_PER_YEAR,
    TERM_YEARS,
    CostInputError,
    CostOption,
    CostOverrides,
    _choose,
    _default,
    _entry,
    _override,
    _prov,
)
from app.domain.cost.price_records import CostCatalog, InstancePrice, OnDemandPrice
from app.domain.estimator.estimate import Assumption
from app.domain.estimator.hardware import HardwareCatalog
from app.domain.figures import in_force
from app.domain.provenance import Frozen


class CloudPrices(Frozen):
    """Prices per instance-hour of one instance for every cloud option (None: not offered / unknown)."""

    instance: str
    gpus_per_instance: int
    region: str
    on: date | None
    on_demand: float | None
    commit_1yr: float | None
    commit_3yr: float | None
    spot: float | None
    capacity_block: float | None
    off_peak: float | None
    reserved_spot_mix: float | None
    reserved_fraction: float
    off_peak_discount: float
    assumptions: tuple[Assumption, ...]
    notes: tuple[str, ...] = Field(default=(), description="warnings about these prices (dates, inversions)")
    missing: tuple[tuple[str, str], ...] = Field(
        default=(), description="(option, why it has no price here): options the asked region does not offer"
    )

    def usd_per_hour(self, option: CostOption) -> float | None:
        if option is CostOption.self_build:
            return None
        return getattr(self, option.name)

    def missing_reason(self, option: CostOption) -> str:
        """Why ``option`` has no price: the region's own reason, else the catalog has none for the instance."""
        return dict(self.missing).get(
            option.value, f"{self.instance} has no {option.value} price in the catalog"
        )


def instance_for_accelerator(cost_catalog: CostCatalog, hardware: HardwareCatalog, accelerator: str) -> str:
    """The AWS instance carrying ``accelerator``: one with an on-demand price first, then the cheapest."""
    candidates: list[InstancePrice] = []
    for price in cost_catalog.instance_prices:
        try:
            node = hardware.node(price.slug)
        except KeyError:
            continue
        if node.accelerator == accelerator:
            candidates.append(price)
    if not candidates:
        known = sorted({hardware.node(p.slug).accelerator for p in cost_catalog.instance_prices})
        raise CostInputError(
            "gpu", f"no AWS instance in the catalog carries {accelerator}; priced: {', '.join(known)}"
        )
    candidates.sort(
        key=lambda p: (p.on_demand_usd_per_hour() is None, p.on_demand_usd_per_hour() or 0.0, p.slug)
    )
    return candidates[0].slug


def _instance_price(cost_catalog: CostCatalog, slug: str) -> InstancePrice:
    try:
        return cost_catalog.instance_price(slug)
    except KeyError as exc:
        raise CostInputError("instance", str(exc.args[0])) from None


def cloud_prices(
    cost_catalog: CostCatalog, instance: str, overrides: CostOverrides | None = None
) -> CloudPrices:
    """Resolve every cloud option's price per instance-hour for ``instance`` (catalog, then overrides)."""
    o = overrides or CostOverrides()
    price = _instance_price(cost_catalog, instance)
    on = o.prices_as_of
    out: list[Assumption] = []
    terms = cost_catalog.pricing_terms

    region = _region(cost_catalog, price, o.region)
    home = region == price.region
    od_record = price.on_demand_price(on) if home else _regional_on_demand(price, region, on)
    if o.on_demand_usd_per_hour is not None:
        on_demand: float | None = o.on_demand_usd_per_hour
        out.append(_override(f"{instance} on-demand", on_demand, "USD/instance-h"))
    elif od_record is not None:
        on_demand = od_record.usd_per_hour
        out.append(_prov(f"{instance} on-demand", on_demand, "USD/instance-h", od_record, od_record.note))
    else:
        on_demand = None

    commits: dict[CostOption, float | None] = {}
    for option, years in TERM_YEARS.items():
        name = f"{instance} {years}-yr commitment"
        rate_override = getattr(o, f"commit_{years}yr_usd_per_hour")
        discount_override = getattr(o, f"commit_{years}yr_discount")
        record = (
            price.committed_rate(years, on) if home else None
        )  # the catalog's rates are home-region rates
        if rate_override is not None:
            commits[option] = rate_override
            out.append(_override(name, rate_override, "USD/instance-h"))
        elif record is not None and discount_override is None:
            commits[option] = record.instance_usd_per_hour(price.gpus_per_instance)
            out.append(
                _prov(name, commits[option], "USD/instance-h", record, f"{record.kind}; {record.note or ''}")
            )
        elif on_demand is not None:
            if discount_override is not None:
                discount = discount_override
                out.append(_override(f"{years}-yr commitment discount", discount, "fraction"))
            else:
                discount = terms.savings_plans.discount(years)
                out.append(_entry(terms.savings_plans, f"commit_{years}yr_discount", f"{years}-yr commitment discount",
                                  discount, "fraction", "no instance-specific rate in force: average AWS GPU "
                                  "committed-use discount off on-demand"))  # fmt: skip
            commits[option] = on_demand * (1.0 - discount)
        else:
            commits[option] = None

    spot_obs = price.spot_observation(on, region)
    if o.spot_usd_per_hour is not None:
        spot: float | None = o.spot_usd_per_hour
        out.append(_override(f"{instance} spot", spot, "USD/instance-h"))
    elif spot_obs is not None:
        spot = spot_obs.median_usd_per_hour
        out.append(_prov(f"{instance} spot (median of {len(spot_obs.usd_per_hour_by_az)} AZs, {spot_obs.region})",
                         spot, "USD/instance-h", spot_obs,
                         f"observed {spot_obs.min_usd_per_hour:g}–{spot_obs.max_usd_per_hour:g}; {spot_obs.note or ''}"))  # fmt: skip
    else:
        spot = None

    if o.capacity_block_usd_per_hour is not None:
        block: float | None = o.capacity_block_usd_per_hour
        out.append(_override(f"{instance} capacity block", block, "USD/instance-h"))
    elif price.capacity_block is not None and (home or region in price.capacity_block.regions):
        block = price.capacity_block.usd_per_hour
        out.append(_prov(f"{instance} capacity block ({', '.join(price.capacity_block.regions)})", block,
                         "USD/instance-h", price.capacity_block,
                         f"rates float with demand; {price.capacity_block.note or ''}"))  # fmt: skip
    else:
        block = None

    off_discount, a = _choose(o.off_peak_discount, "off-peak discount", "fraction",
                              (terms.off_peak.discount_fraction,
                               _entry(terms.off_peak, "discount_fraction", "off-peak discount",
                                      terms.off_peak.discount_fraction, "fraction", terms.off_peak.notes)))  # fmt: skip
    out.append(a)
    off_peak = None if on_demand is None else on_demand * (1.0 - off_discount)

    reserved_fraction, a = _choose(o.reserved_fraction, "reserved share of instances (mix)", "fraction",
                                   (DEFAULT_RESERVED_FRACTION, _default("reserved share of instances (mix)",
                                    DEFAULT_RESERVED_FRACTION, "fraction", "half reserved (1-yr), half spot")))  # fmt: skip
    out.append(a)
    c1 = commits[CostOption.commit_1yr]
    mix = None if c1 is None or spot is None else reserved_fraction * c1 + (1.0 - reserved_fraction) * spot
    notes = _price_notes(price, on, on_demand, spot, commits)
    prices = CloudPrices(
        instance=instance, gpus_per_instance=price.gpus_per_instance, region=region, on=on,
        on_demand=on_demand, commit_1yr=c1, commit_3yr=commits[CostOption.commit_3yr], spot=spot,
        capacity_block=block, off_peak=off_peak, reserved_spot_mix=mix, reserved_fraction=reserved_fraction,
        off_peak_discount=off_discount, assumptions=tuple(out), notes=notes,
    )  # fmt: skip
    return prices if home else prices.model_copy(update={"missing": _regional_gaps(price, prices)})


def _regional_gaps(price: InstancePrice, prices: CloudPrices) -> tuple[tuple[str, str], ...]:
    """Why each option ``prices`` has none of in its region (away from the instance's home region) is missing;
    the other options are still priced there (e.g. p5e.48xlarge in us-east-2: spot and Capacity Blocks only)."""
    od_regions = ", ".join(sorted(price.on_demand_regions()))
    where = f"{price.slug} in {prices.region}"
    no_od = f"no on-demand price for {where} in the catalog (on-demand priced in: {od_regions})"
    why = {
        CostOption.on_demand: no_od,
        CostOption.commit_1yr: f"the catalog's commitment rates are {price.region}'s, and there is {no_od} to discount",
        CostOption.off_peak: f"off-peak is on-demand less a discount, and there is {no_od}",
        CostOption.spot: f"no spot snapshot for {where} in the catalog",
        CostOption.capacity_block: f"no Capacity Block offer for {where} in the catalog",
        CostOption.reserved_spot_mix: f"the reserved + spot mix needs a 1-yr commitment and a spot price for {where}",
    }
    why[CostOption.commit_3yr] = why[CostOption.commit_1yr]
    return tuple(
        (option.value, why[option]) for option in CLOUD_OPTIONS if prices.usd_per_hour(option) is None
    )


def catalog_regions(cost_catalog: CostCatalog) -> tuple[str, ...]:
    """Every region the catalog has a price in (home regions, regional on-demand, spot, capacity blocks)."""
    return tuple(sorted(set().union(*(p.regions() for p in cost_catalog.instance_prices))))


def _region(cost_catalog: CostCatalog, price: InstancePrice, wanted: str | None) -> str:
    """The region to price in: the instance's own unless ``wanted``; CostInputError for an unknown region or one
    where the catalog has no price of any kind for this instance (a region with some options is priced for those,
    the others say why they are missing: :func:`_regional_gaps`)."""
    if wanted is None or wanted == price.region:
        return price.region
    known = catalog_regions(cost_catalog)
    if wanted not in known:
        raise CostInputError(
            "overrides.region", f"unknown region {wanted!r}; regions with prices: {', '.join(known)}"
        )
    priced = sorted(price.regions())
    if wanted not in priced:
        raise CostInputError(
            "overrides.region",
            f"no {price.slug} price of any kind for region {wanted!r} in the catalog; priced in: {', '.join(priced)}",
        )
    return wanted


def _regional_on_demand(price: InstancePrice, region: str, on: date | None) -> OnDemandPrice | None:
    """The on-demand price in force in ``region`` (a regional record, shaped like the home-region one)."""
    record = in_force([r for r in price.regional_on_demand if r.region == region], on)
    if record is None:
        return None
    return OnDemandPrice(usd_per_hour=record.usd_per_hour, effective_from=record.effective_from,
                         effective_to=record.effective_to, source=record.source, as_of=record.as_of,
                         confidence=record.confidence, note=f"{region}; {record.note or ''}".rstrip("; "))  # fmt: skip


def _price_notes(
    price: InstancePrice, on: date | None, on_demand: float | None, spot: float | None,
    commits: dict[CostOption, float | None],
) -> tuple[str, ...]:  # fmt: skip
    """Warnings about resolved prices: a date before the instance existed, spot or a commitment above
    on-demand (after overrides, or in a catalog snapshot where an AZ had no spot capacity)."""
    notes: list[str] = []
    if on is not None and price.available_from is not None and on < price.available_from:
        notes.append(f"prices_as_of {on} is before {price.slug} existed (available from {price.available_from}): "
                     + ("the price shown is the earliest listed, not one anybody paid then" if on_demand is not None
                        else "the catalog has no price in force then, so only overrides price it"))  # fmt: skip
    elif on is not None and price.on_demand and price.on_demand_price(on) is None and on_demand is None:
        first = min((p.effective_from for p in price.on_demand if p.effective_from), default=None)
        notes.append(f"{price.slug} had no on-demand price in force on {on}"
                     + (f" (first listed from {first})" if first else ""))  # fmt: skip
    if on_demand is not None and spot is not None and spot > on_demand:
        notes.append(f"spot ${spot:,.2f}/h is above on-demand ${on_demand:,.2f}/h: spot would cost more; check the "
                     "figures (an AZ without spot capacity quotes on-demand)")  # fmt: skip
    for option, rate in commits.items():
        if on_demand is not None and rate is not None and rate > on_demand:
            notes.append(f"{option.value} ${rate:,.2f}/h is above on-demand ${on_demand:,.2f}/h: a commitment that "
                         "costs more than paying per hour; check the figures")  # fmt: skip
    return tuple(notes)


def commitment_usd(
    usd_per_hour: float, instances: int, run_hours: float, term_years: int
) -> tuple[float, float]:
    """(run cost, committed cost) of a commitment: a run shorter than the term pays the whole term.

    >>> commitment_usd(10.0, 2, 1000.0, 1)  # 1,000 h of a 8,760 h term
    (20000.0, 175200.0)
    """
    run = usd_per_hour * instances * run_hours
    committed = usd_per_hour * instances * max(run_hours, term_years * HOURS_PER_YEAR)
    return run, committed
