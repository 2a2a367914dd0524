"""What it costs: train N tokens on AWS (every pricing option) or on a cluster you build, and the monthly
bill of a cluster either way.

The model (every input overridable through :class:`CostOverrides`; defaults from ``data/prices.toml`` and
``data/selfbuild.toml`` with their sources and dates, or documented defaults marked ``default``):

**Cloud**, per instance-hour of the AWS instance that carries the plan's accelerator (p5.48xlarge for
H100), prices in force on ``prices_as_of`` (default: the current, open-ended price):

- ``on-demand``; ``commit-1yr`` / ``commit-3yr``: the instance's own commitment rate, else on-demand ×
  (1 − the catalog's average commitment discount). A run shorter than the term still pays the term:
  ``run_usd`` is the usage at the committed rate, ``committed_usd`` what is owed (rate × instances ×
  max(run, term)); ``total_usd`` counts the committed amount.
- ``spot``: the median of the latest observed per-AZ prices; interruptions (per instance-month, an input)
  join the failure rate, so spot runs have a lower goodput; capacity for multi-node jobs is not guaranteed.
- ``capacity-block``: the dated Capacity Block rate (limits on duration and instances noted).
- ``off-peak``: on-demand less the article's ~30 % (an input, not an AWS price); ``off_peak_hours_per_day``
  below 24 stretches the calendar.
- ``reserved-spot-mix``: a share of the instances on a 1-year commitment, the rest on spot.
- Storage (S3 Standard tiers) for the dataset and kept checkpoints over the run, data movement (internet
  egress tiers, inter-region) — the article's "data locality".

**Self-build**: servers + fabric sized from the topology (:func:`app.domain.hardware.fat_tree_switch_counts`:
switches, cables, transceivers; NICs) + storage + installation = capex; opex per month = power (nodes ×
kW × average draw × PUE × $/kWh × 730 h) + colocation ($/kW-month on the provisioned IT kW) + staff +
maintenance; capital per month = the annuity that repays capex less residual value over the depreciation
years at the cost of capital. Monthly equivalent = capital + opex. Break-even month (cash: capex up front
+ opex against the cloud bill) and the utilisation above which owning is cheaper than paying per hour.

Time: compute hours = tokens / tokens per second; wall clock = compute / goodput
(:mod:`app.domain.reliability`). A month is 730 hours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from app.domain.architecture import Architecture, kv_cache_width
from app.domain.cost_catalog import CostCatalog, InstancePrice, OnDemandPrice, SelfBuild, Tier, in_force
from app.domain.estimate import Assumption
from app.domain.hardware import FatTreeSize, HardwareCatalog, Node, fat_tree_switch_counts
from app.domain.provenance import CatalogEntry, FigureProvenance, Frozen
from app.domain.reliability import (
    HOURS_PER_MONTH,
    ReliabilityOverrides,
    ReliabilityReport,
    expected_failures,
    reliability_report,
    wall_clock_hours,
)

__all__ = [
    "CLOUD_OPTIONS",
    "HOURS_PER_MONTH",
    "CloudPrices",
    "CostInputError",
    "CostOption",
    "CostOverrides",
    "MonthlyCost",
    "OptionCost",
    "option_label",
    "other_cloud_options",
    "Ranking",
    "SelfBuildInputs",
    "SelfBuildOverrides",
    "SelfBuildTco",
    "ServingCheck",
    "TrainingCost",
    "TrainingJob",
    "break_even_month",
    "capital_usd_per_month",
    "cloud_prices",
    "commitment_usd",
    "cumulative_usd",
    "fabric_cost",
    "instance_for_accelerator",
    "monthly_cost",
    "rank_options",
    "self_build_inputs",
    "self_build_node_for",
    "self_build_tco",
    "self_build_useful_months",
    "self_build_wins_at_utilisation",
    "serving_check",
    "tiered_usd",
    "training_cost",
    "usd_per_gpu_hour",
]

HOURS_PER_YEAR = 8760.0
SECONDS_PER_HOUR = 3600.0
GB = 1e9
TB = 1e12

# Defaults without a catalog figure (reported with source "default", confidence "low").
DEFAULT_RESERVED_FRACTION = 0.5
DEFAULT_DATASET_BYTES_PER_TOKEN = 4.0
DEFAULT_CHECKPOINTS_KEPT = 2
DEFAULT_STAFF_FTE_PER_1000_GPUS = 4.0
DEFAULT_LOADED_COST_MULTIPLIER = 1.3
DEFAULT_MAINTENANCE_FRACTION_PER_YEAR = 0.05
DEFAULT_INSTALLATION_FRACTION = 0.02
DEFAULT_RESIDUAL_FRACTION = 0.0
DEFAULT_COST_OF_CAPITAL = 0.08
DEFAULT_STORAGE_USD_PER_TB = 200.0
DEFAULT_FRONTEND_PORTS = 2
DEFAULT_SPARES_FRACTION = 0.0
DEFAULT_LEAD_TIME_MONTHS = 0.0
NIC_LINE = "dgx-h100-nic-line-semianalysis"
CABLES_OPTICS = {1: "ib-cables-optics-1tier", 2: "ib-cables-optics-2tier", 3: "ib-cables-optics-3tier"}
CABLES_OPTICS_NICS = 8  # Cheah's per-node figures are for 8-NIC nodes
SWITCHES_PER_NODE_2TIER = "ib-switches-per-node-2tier"


class CostInputError(ValueError):
    """An input the cost model cannot use; ``field`` is its path in the request (e.g. ``overrides.instance``)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class CostOption(StrEnum):
    on_demand = "on-demand"
    commit_1yr = "commit-1yr"
    commit_3yr = "commit-3yr"
    spot = "spot"
    capacity_block = "capacity-block"
    off_peak = "off-peak"
    reserved_spot_mix = "reserved-spot-mix"
    self_build = "self-build"


CLOUD_OPTIONS = tuple(o for o in CostOption if o is not CostOption.self_build)
TERM_YEARS = {CostOption.commit_1yr: 1, CostOption.commit_3yr: 3}
SPOT_CAPACITY_RISK = (
    "capacity risk: spot capacity for multi-node EFA jobs is not guaranteed and some AZs have none "
    "(spot price = on-demand); a 2-minute notice precedes each interruption"
)


# --------------------------------------------------------------------------------------------------
# Overrides


class SelfBuildOverrides(Frozen):
    """Self-build inputs; ``None`` means the catalog default (or the documented default)."""

    server_price: str | None = Field(default=None, max_length=64, description="server price slug")
    server_usd: float | None = Field(default=None, ge=0, le=1e9, description="per node (server or rack)")
    switch_usd: float | None = Field(default=None, ge=0, le=1e8)
    switch_radix: int | None = Field(default=None, ge=2, le=4096)
    oversubscription: float | None = Field(default=None, ge=1, le=64)
    cables_optics_usd_per_port: float | None = Field(default=None, ge=0, le=1e6, description="per NIC port")
    nic_usd: float | None = Field(
        default=None, ge=0, le=1e6, description="per NIC (0 when in the server price)"
    )
    storage_tb: float | None = Field(default=None, ge=0, le=1e7)
    storage_usd_per_tb: float | None = Field(default=None, ge=0, le=1e6)
    installation_fraction: float | None = Field(default=None, ge=0, le=1)
    max_kw_per_node: float | None = Field(default=None, gt=0, le=10_000)
    avg_power_fraction: float | None = Field(default=None, gt=0, le=1)
    pue: float | None = Field(default=None, ge=1, le=5)
    electricity_usd_per_kwh: float | None = Field(default=None, ge=0, le=10)
    colocation_usd_per_kw_month: float | None = Field(default=None, ge=0, le=100_000)
    staff_fte_per_1000_gpus: float | None = Field(default=None, ge=0, le=1000)
    staff_usd_per_fte_year: float | None = Field(default=None, ge=0, le=1e8, description="fully loaded")
    maintenance_fraction_per_year: float | None = Field(default=None, ge=0, le=1)
    depreciation_years: float | None = Field(default=None, gt=0, le=30)
    residual_fraction: float | None = Field(default=None, ge=0, le=1)
    cost_of_capital_per_year: float | None = Field(default=None, ge=0, le=1)
    frontend_usd_per_node: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="frontend/storage Ethernet per node (default: derived from CHEAH)",
    )
    frontend_ports_per_node: int | None = Field(default=None, ge=0, le=64)
    spares_fraction: float | None = Field(
        default=None, ge=0, le=1, description="spare servers, share of the fleet"
    )
    lead_time_months: float | None = Field(
        default=None, ge=0, le=60, description="order to first training step: results come this much later"
    )


PRICE_OVERRIDE = "USD per instance-hour, > 0 (a $0 price is refused: omit the override to use the catalog's)"


class CostOverrides(Frozen):
    """Every cost input; ``None`` means the catalog default. Prices are per instance-hour (USD)."""

    instance: str | None = Field(default=None, max_length=64, description="AWS instance slug")
    region: str | None = Field(
        default=None,
        max_length=32,
        description="region whose prices to use (default: the instance's, us-east-1)",
    )
    prices_as_of: date | None = Field(default=None, description="prices in force that day (default: current)")
    on_demand_usd_per_hour: float | None = Field(default=None, gt=0, le=1e6, description=PRICE_OVERRIDE)
    commit_1yr_usd_per_hour: float | None = Field(default=None, gt=0, le=1e6, description=PRICE_OVERRIDE)
    commit_3yr_usd_per_hour: float | None = Field(default=None, gt=0, le=1e6, description=PRICE_OVERRIDE)
    commit_1yr_discount: float | None = Field(default=None, ge=0, lt=1)
    commit_3yr_discount: float | None = Field(default=None, ge=0, lt=1)
    spot_usd_per_hour: float | None = Field(default=None, gt=0, le=1e6, description=PRICE_OVERRIDE)
    capacity_block_usd_per_hour: float | None = Field(default=None, gt=0, le=1e6, description=PRICE_OVERRIDE)
    off_peak_discount: float | None = Field(default=None, ge=0, lt=1)
    off_peak_hours_per_day: float = Field(default=24.0, gt=0, le=24)
    reserved_fraction: float | None = Field(default=None, ge=0, le=1, description="reserved-spot-mix")
    dataset_tb: float | None = Field(default=None, ge=0, le=1e7, description="default: tokens × 4 B")
    dataset_bytes_per_token: float | None = Field(default=None, gt=0, le=1000)
    checkpoints_kept: int | None = Field(default=None, ge=0, le=10_000)
    storage_usd_per_gb_month: float | None = Field(default=None, ge=0, le=100)
    egress_tb: float | None = Field(default=None, ge=0, le=1e7, description="default: final bf16 weights")
    inter_region_tb: float = Field(default=0.0, ge=0, le=1e7)
    inter_region_usd_per_gb: float | None = Field(default=None, ge=0, le=100)
    serving_context_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    serving_batch: int = Field(default=1, ge=1, le=100_000)
    serving_weight_bytes_per_param: float = Field(default=2.0, gt=0, le=8)
    other_clouds: bool = Field(
        default=True, description="also price Google Cloud, Azure and GPU-cloud instances"
    )
    use_after_run_years: float | None = Field(
        default=None,
        ge=0,
        le=30,
        description="self-build: years the cluster keeps working after this run (default: its depreciation life)",
    )
    runs: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="self-build: runs of this length the cluster serves in all (instead of use_after_run_years)",
    )
    self_build: SelfBuildOverrides = Field(default_factory=SelfBuildOverrides)
    reliability: ReliabilityOverrides = Field(default_factory=ReliabilityOverrides)

    @model_validator(mode="after")
    def _one_use_statement(self) -> CostOverrides:
        if self.use_after_run_years is not None and self.runs is not None:
            raise ValueError("give use_after_run_years or runs, not both")
        return self


# --------------------------------------------------------------------------------------------------
# Assumption helpers


def _prov(name: str, value: Any, unit: str, prov: FigureProvenance, note: str | None = None) -> Assumption:
    return Assumption(name=name, value=value, unit=unit, source=prov.source, as_of=prov.as_of,
                      confidence=prov.confidence.value, note=note or prov.note)  # fmt: skip


def _entry(
    entry: CatalogEntry, field: str, name: str, value: Any, unit: str, note: str | None = None
) -> Assumption:
    return _prov(name, value, unit, entry.figure_provenance(field), note)


def _override(name: str, value: Any, unit: str) -> Assumption:
    return Assumption(name=name, value=value, unit=unit, source="override")


def _default(name: str, value: Any, unit: str, note: str) -> Assumption:
    return Assumption(name=name, value=value, unit=unit, source="default", confidence="low", note=note)


def _choose(
    override: float | None, name: str, unit: str, fallback: tuple[float, Assumption]
) -> tuple[float, Assumption]:
    if override is not None:
        return override, _override(name, override, unit)
    return fallback


# --------------------------------------------------------------------------------------------------
# Cloud prices


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

    def usd_per_hour(self, option: CostOption) -> float | None:
        if option is CostOption.self_build:
            return None
        return getattr(self, option.name)


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
    return CloudPrices(
        instance=instance, gpus_per_instance=price.gpus_per_instance, region=region, on=on,
        on_demand=on_demand, commit_1yr=c1, commit_3yr=commits[CostOption.commit_3yr], spot=spot,
        capacity_block=block, off_peak=off_peak, reserved_spot_mix=mix, reserved_fraction=reserved_fraction,
        off_peak_discount=off_discount, assumptions=tuple(out), notes=notes,
    )  # fmt: skip


def catalog_regions(cost_catalog: CostCatalog) -> tuple[str, ...]:
    """Every region the catalog has a price in (home regions, regional on-demand, spot, capacity blocks)."""
    regions: set[str] = set()
    for p in cost_catalog.instance_prices:
        regions |= {p.region, *(r.region for r in p.regional_on_demand), *(s.region for s in p.spot)}
        if p.capacity_block is not None:
            regions |= set(p.capacity_block.regions)
    return tuple(sorted(regions))


def _region(cost_catalog: CostCatalog, price: InstancePrice, wanted: str | None) -> str:
    """The region to price in: the instance's own unless ``wanted``; CostInputError for an unknown region or one
    where the catalog has no on-demand price for this instance."""
    if wanted is None or wanted == price.region:
        return price.region
    known = catalog_regions(cost_catalog)
    if wanted not in known:
        raise CostInputError(
            "overrides.region", f"unknown region {wanted!r}; regions with prices: {', '.join(known)}"
        )
    priced = sorted({price.region, *(r.region for r in price.regional_on_demand)})
    if wanted not in priced:
        raise CostInputError(
            "overrides.region",
            f"no {price.slug} on-demand price for region {wanted!r} in the catalog; priced in: {', '.join(priced)}",
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


# --------------------------------------------------------------------------------------------------
# Self-build


def self_build_node_for(hardware: HardwareCatalog, cost_catalog: CostCatalog, accelerator: str) -> str | None:
    """The reference server for ``accelerator`` that has a default server price, if any."""
    priced = cost_catalog.self_build.defaults.server_price
    for node in sorted(hardware.nodes, key=lambda n: n.slug):
        if node.kind == "server" and node.accelerator == accelerator and node.slug in priced:
            return node.slug
    return None


class SelfBuildInputs(Frozen):
    """Every self-build figure, resolved (USD, kW, fractions per year)."""

    server_usd: float = Field(ge=0)
    switch_usd: float = Field(ge=0)
    switch_radix: int = Field(ge=2)
    oversubscription: float = Field(default=1.0, ge=1)
    cables_optics_usd_per_port: tuple[float, float, float] = Field(
        description="per NIC port, 1/2/3-tier fabric"
    )
    nic_usd: float = Field(ge=0)
    storage_tb: float = Field(ge=0)
    storage_usd_per_tb: float = Field(ge=0)
    installation_fraction: float = Field(ge=0, le=1)
    max_kw_per_node: float = Field(gt=0)
    avg_power_fraction: float = Field(gt=0, le=1)
    pue: float = Field(ge=1)
    electricity_usd_per_kwh: float = Field(ge=0)
    colocation_usd_per_kw_month: float = Field(ge=0)
    staff_fte_per_1000_gpus: float = Field(ge=0)
    staff_usd_per_fte_year: float = Field(ge=0)
    maintenance_fraction_per_year: float = Field(ge=0, le=1)
    depreciation_years: float = Field(gt=0)
    residual_fraction: float = Field(ge=0, le=1)
    cost_of_capital_per_year: float = Field(ge=0, le=1)
    frontend_usd_per_node: float = Field(default=0.0, ge=0)
    spares_fraction: float = Field(default=0.0, ge=0, le=1)
    lead_time_months: float = Field(default=0.0, ge=0)


class FabricCost(Frozen):
    size: FatTreeSize | None = Field(description="None for a single node: no scale-out fabric")
    switches: int
    cables: int
    transceivers: int
    nics: int
    switches_usd: float
    cables_optics_usd: float
    nics_usd: float

    @property
    def total_usd(self) -> float:
        return self.switches_usd + self.cables_optics_usd + self.nics_usd


class SelfBuildTco(Frozen):
    node: str
    nodes: int
    gpus: int
    fabric: FabricCost
    servers_usd: float
    fabric_usd: float
    storage_usd: float
    frontend_usd: float = 0.0
    spares_usd: float = 0.0
    installation_usd: float
    capex_usd: float
    lead_time_months: float = 0.0
    it_kw_max: float
    it_kw_average: float
    facility_kw_average: float
    power_usd_per_month: float
    colocation_usd_per_month: float
    staff_usd_per_month: float
    maintenance_usd_per_month: float
    opex_usd_per_month: float
    depreciation_years: float
    residual_usd: float
    cost_of_capital_per_year: float
    capital_usd_per_month: float
    monthly_equivalent_usd: float
    usd_per_gpu_hour: float
    assumptions: tuple[Assumption, ...] = ()


def capital_usd_per_month(capex_usd: float, residual_usd: float, years: float, rate_per_year: float) -> float:
    """Monthly payment that repays ``capex`` less the present value of the residual over ``years`` at
    ``rate_per_year`` (an annuity); straight-line (capex − residual) / months when the rate is 0.

    >>> capital_usd_per_month(300_000, 0, 5, 0.0)
    5000.0
    >>> round(capital_usd_per_month(300_000, 0, 5, 0.08), 2)  # the usual 8 %, 60-month loan payment
    6082.92
    """
    months = years * 12.0
    i = rate_per_year / 12.0
    if i == 0:
        return (capex_usd - residual_usd) / months
    discount = (1.0 + i) ** -months
    return (capex_usd - residual_usd * discount) * i / (1.0 - discount)


def fabric_cost(inputs: SelfBuildInputs, nodes: int, nics_per_node: int) -> FabricCost:
    """The scale-out fabric of ``nodes`` servers: one NIC port per endpoint, a non-blocking (or
    ``inputs.oversubscription``) fat tree sized by :func:`app.domain.hardware.fat_tree_switch_counts`,
    switches at ``switch_usd``, cables and optics per NIC port by tier count, NICs at ``nic_usd``. A single
    node needs no fabric.

    128 DGX H100 (1,024 GPUs, 8 × 400G NICs each) on 64-port NDR switches: 2 tiers, 32 leaves and 16 spines,
    as in NVIDIA's DGX SuperPOD reference (4 scalable units); 1,024 node-leaf + 1,024 leaf-spine cables.

    >>> inputs = SelfBuildInputs(server_usd=0, switch_usd=36_000, switch_radix=64,
    ...     cables_optics_usd_per_port=(1_320, 2_560, 3_800), nic_usd=0, storage_tb=0, storage_usd_per_tb=0,
    ...     installation_fraction=0, max_kw_per_node=10.2, avg_power_fraction=0.75, pue=1.55,
    ...     electricity_usd_per_kwh=0.08, colocation_usd_per_kw_month=184, staff_fte_per_1000_gpus=0,
    ...     staff_usd_per_fte_year=0, maintenance_fraction_per_year=0, depreciation_years=5,
    ...     residual_fraction=0, cost_of_capital_per_year=0)
    >>> fabric = fabric_cost(inputs, nodes=128, nics_per_node=8)
    >>> fabric.size.tiers, fabric.size.leaf_switches, fabric.size.spine_switches, fabric.cables
    (2, 32, 16, 2048)
    >>> fabric.switches_usd, fabric.cables_optics_usd  # 48 × $36k; 1,024 ports × $2,560
    (1728000.0, 2621440.0)
    """
    nics = nodes * nics_per_node
    nics_usd = nics * inputs.nic_usd
    if nodes <= 1:
        return FabricCost(size=None, switches=0, cables=0, transceivers=0, nics=nics, switches_usd=0.0,
                          cables_optics_usd=0.0, nics_usd=nics_usd)  # fmt: skip
    size = fat_tree_switch_counts(nics, inputs.switch_radix, inputs.oversubscription)
    per_port = inputs.cables_optics_usd_per_port[size.tiers - 1]
    return FabricCost(
        size=size, switches=size.switches, cables=size.cables, transceivers=size.transceivers, nics=nics,
        switches_usd=size.switches * inputs.switch_usd, cables_optics_usd=nics * per_port, nics_usd=nics_usd,
    )  # fmt: skip


def self_build_tco(
    inputs: SelfBuildInputs, *, node: str, nodes: int, gpus_per_node: int, nics_per_node: int,
    assumptions: Sequence[Assumption] = (),
) -> SelfBuildTco:  # fmt: skip
    """Capex, opex per month and monthly equivalent of ``nodes`` servers.

    A 12-month TCO by hand — one $300,000 server (no fabric for a single node), 10 kW, 75 % average draw,
    PUE 1.5, $0.10/kWh, colocation $200/kW-month, no staff, storage, installation or maintenance,
    5 years straight line to zero:

    - power: 10 × 0.75 × 1.5 × 0.10 × 730 = $821.25/month; colocation: 10 × 200 = $2,000/month
    - capital: 300,000 / 60 = $5,000/month; monthly equivalent $7,821.25
    - 12 months: cash 300,000 + 12 × 2,821.25 = $333,855; amortised 12 × 7,821.25 = $93,855

    >>> inputs = SelfBuildInputs(server_usd=300_000, switch_usd=0, switch_radix=64,
    ...     cables_optics_usd_per_port=(0, 0, 0), nic_usd=0, storage_tb=0, storage_usd_per_tb=0,
    ...     installation_fraction=0, max_kw_per_node=10, avg_power_fraction=0.75, pue=1.5,
    ...     electricity_usd_per_kwh=0.10, colocation_usd_per_kw_month=200, staff_fte_per_1000_gpus=0,
    ...     staff_usd_per_fte_year=0, maintenance_fraction_per_year=0, depreciation_years=5,
    ...     residual_fraction=0, cost_of_capital_per_year=0)
    >>> tco = self_build_tco(inputs, node="dgx-h100", nodes=1, gpus_per_node=8, nics_per_node=8)
    >>> round(tco.power_usd_per_month, 2), tco.colocation_usd_per_month, tco.monthly_equivalent_usd
    (821.25, 2000.0, 7821.25)
    >>> cumulative_usd(tco.capex_usd, tco.opex_usd_per_month, 12)[-1], round(12 * tco.monthly_equivalent_usd, 2)
    (333855.0, 93855.0)
    """
    if nodes < 1:
        raise CostInputError("nodes", "a cluster has at least one node")
    i = inputs
    fabric = fabric_cost(i, nodes, nics_per_node)
    servers = nodes * i.server_usd
    storage = i.storage_tb * i.storage_usd_per_tb
    frontend = nodes * i.frontend_usd_per_node if nodes > 1 else 0.0  # one node joins the existing LAN
    spares = servers * i.spares_fraction
    hardware_usd = servers + fabric.total_usd + storage + frontend + spares
    installation = hardware_usd * i.installation_fraction
    capex = hardware_usd + installation
    it_max = nodes * i.max_kw_per_node
    it_avg = it_max * i.avg_power_fraction
    facility = it_avg * i.pue
    power = facility * i.electricity_usd_per_kwh * HOURS_PER_MONTH
    colocation = it_max * i.colocation_usd_per_kw_month
    gpus = nodes * gpus_per_node
    staff = gpus / 1000.0 * i.staff_fte_per_1000_gpus * i.staff_usd_per_fte_year / 12.0
    maintenance = hardware_usd * i.maintenance_fraction_per_year / 12.0
    opex = power + colocation + staff + maintenance
    residual = capex * i.residual_fraction
    capital = capital_usd_per_month(capex, residual, i.depreciation_years, i.cost_of_capital_per_year)
    monthly = capital + opex
    return SelfBuildTco(
        node=node, nodes=nodes, gpus=gpus, fabric=fabric, servers_usd=servers, fabric_usd=fabric.total_usd,
        storage_usd=storage, frontend_usd=frontend, spares_usd=spares, installation_usd=installation,
        capex_usd=capex, lead_time_months=i.lead_time_months, it_kw_max=it_max,
        it_kw_average=it_avg, facility_kw_average=facility, power_usd_per_month=power,
        colocation_usd_per_month=colocation, staff_usd_per_month=staff, maintenance_usd_per_month=maintenance,
        opex_usd_per_month=opex, depreciation_years=i.depreciation_years, residual_usd=residual,
        cost_of_capital_per_year=i.cost_of_capital_per_year, capital_usd_per_month=capital,
        monthly_equivalent_usd=monthly, usd_per_gpu_hour=monthly / (gpus * HOURS_PER_MONTH),
        assumptions=tuple(assumptions),
    )  # fmt: skip


def _server_price(
    cost_catalog: CostCatalog, node: str, o: SelfBuildOverrides
) -> tuple[float, Assumption, bool]:
    sb = cost_catalog.self_build
    if o.server_usd is not None:
        return o.server_usd, _override(f"{node} server price", o.server_usd, "USD/node"), False
    try:
        entry = (
            next(p for p in sb.server_prices if p.slug == o.server_price)
            if o.server_price
            else sb.server_price_for(node)
        )
    except StopIteration:
        known = ", ".join(p.slug for p in sb.server_prices)
        raise CostInputError(
            "overrides.self_build.server_price", f"unknown server price {o.server_price!r}; known: {known}"
        ) from None
    except KeyError as exc:
        raise CostInputError(
            "overrides.self_build.server_usd", f"{exc.args[0]}; give overrides.self_build.server_usd"
        ) from None
    includes_nics = "nic" in entry.includes.lower() or entry.system.upper().startswith("DGX")
    note = f"{entry.name}" + (
        f"; {sb.defaults.reasons.get('server_price', '')}" if not o.server_price else ""
    )
    return (
        entry.price_usd.mid,
        _entry(entry, "price_usd", f"{node} server price", entry.price_usd.mid, "USD/node", note),
        includes_nics,
    )


def _max_kw_per_node(sb: SelfBuild, node: Node, override: float | None) -> tuple[float, Assumption]:
    """Maximum power per node: the override when given (read before looking for a catalog figure), else the
    system power entry of the node, else the node's own figure; CostInputError asking for the override."""
    if override is not None:
        return override, _override("max power per node", override, "kW")
    try:
        power_entry = sb.system_power_for(node.slug)
    except KeyError:
        if node.max_power_kw is None:
            raise CostInputError(
                "overrides.self_build.max_kw_per_node",
                f"no power figure for {node.slug}; give overrides.self_build.max_kw_per_node",
            ) from None
        return node.max_power_kw, _entry(node, "max_power_kw", "max power per node", node.max_power_kw, "kW")
    kw = power_entry.max_kw.mid / power_entry.servers
    return kw, _entry(power_entry, "max_kw", "max power per node", kw, "kW")


def self_build_inputs(
    cost_catalog: CostCatalog, hardware: HardwareCatalog, node: Node, overrides: SelfBuildOverrides | None = None,
    *, storage_tb: float = 0.0,
) -> tuple[SelfBuildInputs, tuple[Assumption, ...]]:  # fmt: skip
    """Resolve self-build figures for ``node`` from the catalog and the overrides, with their provenance."""
    o = overrides or SelfBuildOverrides()
    sb = cost_catalog.self_build
    out: list[Assumption] = []

    server_usd, a, includes_nics = _server_price(cost_catalog, node.slug, o)
    out.append(a)
    switch = sb.switch_price()
    switch_usd, a = _choose(o.switch_usd, "switch price", "USD/switch",
                            (switch.price_usd.mid, _entry(switch, "price_usd", "switch price", switch.price_usd.mid,
                                                          "USD/switch", f"{switch.name}; {sb.defaults.reasons.get('switch_price', '')}")))  # fmt: skip
    out.append(a)
    radix_default = next((s.radix for s in hardware.switches if s.fabric == node.scale_out_fabric), 64)
    radix = o.switch_radix or radix_default
    out.append(_override("switch radix", radix, "ports") if o.switch_radix else
               Assumption(name="switch radix", value=radix, unit="ports", source="formula",
                          note=f"the catalog switch for {node.scale_out_fabric}"))  # fmt: skip
    oversub = o.oversubscription or 1.0

    per_port: list[float] = []
    for tiers in (1, 2, 3):
        comp = sb.component(CABLES_OPTICS[tiers])
        per_port.append(comp.price_usd.mid / CABLES_OPTICS_NICS)
    if o.cables_optics_usd_per_port is not None:
        per_port = [o.cables_optics_usd_per_port] * 3
        out.append(_override("cables + transceivers per NIC port", o.cables_optics_usd_per_port, "USD/port"))
    else:
        comp = sb.component(CABLES_OPTICS[2])
        out.append(_entry(comp, "price_usd", "cables + transceivers per NIC port (1/2/3 tiers)",
                          [round(p, 2) for p in per_port], "USD/port", "Cheah's per-node figures ÷ 8 NIC ports"))  # fmt: skip

    if o.nic_usd is not None:
        nic_usd = o.nic_usd
        out.append(_override("NIC price", nic_usd, "USD/NIC"))
    elif includes_nics:
        nic_usd = 0.0
        out.append(Assumption(name="NIC price", value=0.0, unit="USD/NIC", source="formula",
                              note="the server price includes its NICs"))  # fmt: skip
    else:
        line = sb.component(NIC_LINE)
        nic_usd = line.price_usd.mid / 8
        out.append(
            _entry(line, "price_usd", "NIC price", nic_usd, "USD/NIC", "SemiAnalysis BoM NIC line ÷ 8")
        )

    st_tb = o.storage_tb if o.storage_tb is not None else storage_tb
    st_usd, a = _choose(o.storage_usd_per_tb, "storage capex per TB", "USD/TB",
                        (DEFAULT_STORAGE_USD_PER_TB, _default("storage capex per TB", DEFAULT_STORAGE_USD_PER_TB, "USD/TB",
                                                              "no authoritative on-prem $/TB (reference §7): an input")))  # fmt: skip
    out.append(a)
    inst, a = _choose(o.installation_fraction, "installation", "fraction of hardware capex",
                      (DEFAULT_INSTALLATION_FRACTION, _default("installation", DEFAULT_INSTALLATION_FRACTION,
                                                               "fraction of hardware capex", "unsourced")))  # fmt: skip
    out.append(a)
    kw, a = _max_kw_per_node(sb, node, o.max_kw_per_node)
    out.append(a)
    f = sb.factors
    avg, a = _choose(o.avg_power_fraction, "average draw while training", "fraction of max",
                     (f.avg_power_fraction_during_training, _entry(f, "avg_power_fraction_during_training",
                      "average draw while training", f.avg_power_fraction_during_training, "fraction of max")))  # fmt: skip
    out.append(a)
    pue_entry = sb.pue_option()
    pue, a = _choose(o.pue, "PUE", "", (pue_entry.pue.mid, _entry(pue_entry, "pue", "PUE", pue_entry.pue.mid, "",
                                                                  sb.defaults.reasons.get("pue"))))  # fmt: skip
    out.append(a)
    el = sb.electricity()
    kwh, a = _choose(o.electricity_usd_per_kwh, "electricity", "USD/kWh",
                     (el.usd_per_kwh, _entry(el, "usd_per_kwh", "electricity", el.usd_per_kwh, "USD/kWh",
                                             f"{el.name}; {sb.defaults.reasons.get('electricity', '')}")))  # fmt: skip
    out.append(a)
    colo = sb.colocation()
    colo_usd, a = _choose(o.colocation_usd_per_kw_month, "colocation", "USD/kW-month",
                          (colo.usd_per_kw_month.mid, _entry(colo, "usd_per_kw_month", "colocation",
                           colo.usd_per_kw_month.mid, "USD/kW-month",
                           f"{colo.name}; charged on provisioned (max) IT kW")))  # fmt: skip
    out.append(a)
    staff = sb.staff
    fte_default = staff.fte_per_1000_gpus
    fte, a = _choose(o.staff_fte_per_1000_gpus, "staff FTE per 1,000 GPUs", "FTE",
                     (fte_default, _entry(staff, "fte_per_1000_gpus", "staff FTE per 1,000 GPUs", fte_default, "FTE"))
                     if fte_default is not None else
                     (DEFAULT_STAFF_FTE_PER_1000_GPUS, _default("staff FTE per 1,000 GPUs", DEFAULT_STAFF_FTE_PER_1000_GPUS,
                                                                "FTE", "no public staffing ratio (reference §4.3): an input")))  # fmt: skip
    out.append(a)
    mult = staff.loaded_cost_multiplier or DEFAULT_LOADED_COST_MULTIPLIER
    loaded = staff.engineer_base_salary_usd_per_year * mult
    fte_usd, a = _choose(o.staff_usd_per_fte_year, "staff cost per FTE (fully loaded)", "USD/year",
                         (loaded, _entry(staff, "engineer_base_salary_usd_per_year", "staff cost per FTE (fully loaded)",
                                         loaded, "USD/year",
                                         f"base ${staff.engineer_base_salary_usd_per_year:,.0f} × {mult:g} loaded-cost multiplier (default)")))  # fmt: skip
    out.append(a)
    maint, a = _choose(o.maintenance_fraction_per_year, "maintenance and support", "fraction of hardware capex per year",
                       (DEFAULT_MAINTENANCE_FRACTION_PER_YEAR, _default("maintenance and support",
                        DEFAULT_MAINTENANCE_FRACTION_PER_YEAR, "fraction of hardware capex per year",
                        f"unsourced; cross-check: Cheah assumes ${staff.facility_and_ops_lifetime_usd_per_node:,.0f} "
                        "per node over its life for facility and operations")))  # fmt: skip
    out.append(a)
    dep = sb.depreciation()
    years, a = _choose(o.depreciation_years, "depreciation", "years",
                       (dep.years, _entry(dep, "years", "depreciation", dep.years, "years",
                                          sb.defaults.reasons.get("depreciation"))))  # fmt: skip
    out.append(a)
    residual, a = _choose(o.residual_fraction, "residual value", "fraction of capex",
                          (DEFAULT_RESIDUAL_FRACTION, _default("residual value", DEFAULT_RESIDUAL_FRACTION,
                           "fraction of capex", "no sourced resale figure: straight line to zero")))  # fmt: skip
    out.append(a)
    rate, a = _choose(o.cost_of_capital_per_year, "cost of capital", "per year",
                      (DEFAULT_COST_OF_CAPITAL, _default("cost of capital", DEFAULT_COST_OF_CAPITAL, "per year",
                                                         "unsourced; 0 gives straight-line depreciation")))  # fmt: skip
    out.append(a)
    ports = o.frontend_ports_per_node if o.frontend_ports_per_node is not None else DEFAULT_FRONTEND_PORTS
    if o.frontend_usd_per_node is not None:
        frontend = o.frontend_usd_per_node
        out.append(_override("frontend network per node", frontend, "USD/node"))
    else:
        frontend = ports * (per_port[0] + switch_usd / radix)
        out.append(_default("frontend network per node", round(frontend, 2), "USD/node",
                            f"derived, low confidence: {ports} Ethernet ports per node (frontend and storage; a DGX "
                            f"H100 has two BlueField-3 DPUs) × (1-tier cables and optics per port ${per_port[0]:,.0f} "
                            f"+ a switch port ${switch_usd / radix:,.0f}), InfiniBand figures (CHEAH) standing in for "
                            "Ethernet; none for a single node"))  # fmt: skip
    spares, a = _choose(o.spares_fraction, "spare servers", "fraction of servers",
                        (DEFAULT_SPARES_FRACTION, _default("spare servers", DEFAULT_SPARES_FRACTION, "fraction of servers",
                         "no sourced figure: give the share of spare or hot-standby servers you buy")))  # fmt: skip
    out.append(a)
    lead, a = _choose(o.lead_time_months, "build lead time", "months",
                      (DEFAULT_LEAD_TIME_MONTHS, _default("build lead time", DEFAULT_LEAD_TIME_MONTHS, "months",
                       "no sourced figure: months from order to the first training step; results come that much later")))  # fmt: skip
    out.append(a)
    inputs = SelfBuildInputs(
        frontend_usd_per_node=frontend, spares_fraction=spares, lead_time_months=lead,
        server_usd=server_usd, switch_usd=switch_usd, switch_radix=radix, oversubscription=oversub,
        cables_optics_usd_per_port=tuple(per_port), nic_usd=nic_usd, storage_tb=st_tb, storage_usd_per_tb=st_usd,
        installation_fraction=inst, max_kw_per_node=kw, avg_power_fraction=avg, pue=pue,
        electricity_usd_per_kwh=kwh, colocation_usd_per_kw_month=colo_usd, staff_fte_per_1000_gpus=fte,
        staff_usd_per_fte_year=fte_usd, maintenance_fraction_per_year=maint, depreciation_years=years,
        residual_fraction=residual, cost_of_capital_per_year=rate,
    )  # fmt: skip
    return inputs, tuple(out)


def break_even_month(capex_usd: float, opex_usd_per_month: float, cloud_usd_per_month: float) -> float | None:
    """Month at which cumulative self-build cash (capex + opex·m) falls below the cloud bill (cloud·m);
    None when the cloud option costs no more per month than self-build's opex (never).

    >>> break_even_month(300_000, 2_821.25, 40_179.2) is not None
    True
    >>> round(break_even_month(300_000, 2_821.25, 40_179.2), 2)
    8.03
    """
    margin = cloud_usd_per_month - opex_usd_per_month
    return capex_usd / margin if margin > 0 else None


def self_build_wins_at_utilisation(
    monthly_equivalent_usd: float, cloud_full_month_usd: float
) -> float | None:
    """Utilisation above which owning beats paying per hour: self-build costs its monthly equivalent
    whether used or not, a pay-per-hour option costs utilisation × its full-month price. > 1: never."""
    return monthly_equivalent_usd / cloud_full_month_usd if cloud_full_month_usd > 0 else None


def cumulative_usd(upfront_usd: float, usd_per_month: float, months: int) -> tuple[float, ...]:
    """Cumulative cost at months 0, 1, …, ``months``."""
    return tuple(upfront_usd + usd_per_month * m for m in range(months + 1))


# --------------------------------------------------------------------------------------------------
# Storage and data movement


def tiered_usd(gb: float, tiers: Sequence[Tier]) -> float:
    """Price ``gb`` gigabytes through cumulative tiers (``up_to_tb`` decimal TB; last tier unbounded).

    >>> from app.domain.cost_catalog import Tier
    >>> tiered_usd(60_000, [Tier(up_to_tb=50, usd_per_gb=0.023), Tier(usd_per_gb=0.022)])
    1370.0
    """
    total, lower = 0.0, 0.0
    for tier in tiers:
        upper = math.inf if tier.up_to_tb is None else tier.up_to_tb * 1000.0
        amount = max(0.0, min(gb, upper) - lower)
        total += amount * tier.usd_per_gb
        lower = upper
        if gb <= upper:
            break
    return round(total, 9)


class StorageCost(Frozen):
    dataset_tb: float
    checkpoint_tb: float
    checkpoints_kept: int
    stored_tb: float
    usd_per_month: float
    egress_tb: float
    egress_usd: float
    inter_region_tb: float
    inter_region_usd: float
    assumptions: tuple[Assumption, ...]


def _storage(
    cc: CostCatalog, o: CostOverrides, tokens: float, parameters: int, checkpoint_bytes: float
) -> StorageCost:
    out: list[Assumption] = []
    terms = cc.pricing_terms
    per_token, a = _choose(o.dataset_bytes_per_token, "dataset bytes per token", "B",
                           (DEFAULT_DATASET_BYTES_PER_TOKEN, _default("dataset bytes per token",
                            DEFAULT_DATASET_BYTES_PER_TOKEN, "B", "tokenised, uint32 token ids")))  # fmt: skip
    if o.dataset_tb is not None:
        dataset_tb = o.dataset_tb
        out.append(_override("dataset size", dataset_tb, "TB"))
    else:
        dataset_tb = tokens * per_token / TB
        out.append(a)
    kept, a = _choose(o.checkpoints_kept, "checkpoints kept", "",
                      (DEFAULT_CHECKPOINTS_KEPT, _default("checkpoints kept", DEFAULT_CHECKPOINTS_KEPT, "",
                                                          "the latest and one before it")))  # fmt: skip
    out.append(a)
    kept = int(kept)
    checkpoint_tb = checkpoint_bytes / TB
    stored_tb = dataset_tb + kept * checkpoint_tb
    if o.storage_usd_per_gb_month is not None:
        per_month = stored_tb * 1000.0 * o.storage_usd_per_gb_month
        out.append(_override("storage price", o.storage_usd_per_gb_month, "USD/GB-month"))
    else:
        per_month = tiered_usd(stored_tb * 1000.0, terms.storage.s3_standard_tiers)
        out.append(_entry(terms.storage, "s3_standard_tiers", "S3 Standard storage", "tiered 0.023/0.022/0.021",
                          "USD/GB-month", terms.storage.notes))  # fmt: skip
    if o.egress_tb is not None:
        egress_tb = o.egress_tb
        out.append(_override("internet egress", egress_tb, "TB"))
    else:
        egress_tb = parameters * 2.0 / TB
        out.append(_default("internet egress", egress_tb, "TB", "one download of the final bf16 weights"))
    egress_usd = tiered_usd(egress_tb * 1000.0, terms.data_transfer.internet_egress_tiers)
    out.append(_entry(terms.data_transfer, "internet_egress_tiers", "internet egress price",
                      "tiered 0 (100 GB)/0.09/0.085/0.07/0.05", "USD/GB"))  # fmt: skip
    xr_price, a = _choose(o.inter_region_usd_per_gb, "inter-region transfer", "USD/GB",
                          (terms.data_transfer.inter_region_usd_per_gb,
                           _entry(terms.data_transfer, "inter_region_usd_per_gb", "inter-region transfer",
                                  terms.data_transfer.inter_region_usd_per_gb, "USD/GB",
                                  "keep data in the training region (data locality): ingress and same-region S3 are free")))  # fmt: skip
    out.append(a)
    return StorageCost(
        dataset_tb=dataset_tb, checkpoint_tb=checkpoint_tb, checkpoints_kept=kept, stored_tb=stored_tb,
        usd_per_month=per_month, egress_tb=egress_tb, egress_usd=egress_usd, inter_region_tb=o.inter_region_tb,
        inter_region_usd=o.inter_region_tb * 1000.0 * xr_price, assumptions=tuple(out),
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Serving check


class ServingFit(Frozen):
    instance: str
    accelerator: str
    gpus_per_instance: int
    usable_gib_per_gpu: float
    gpus_needed: int | None = Field(
        description="smallest tensor-parallel degree that holds it; None: none does"
    )
    fits: bool
    usd_per_hour: float | None = Field(description="on-demand, whole instance")
    usd_per_gpu_hour: float | None


class ServingCheck(Frozen):
    model: str
    parameters: int
    context_tokens: int
    batch: int
    weight_bytes_per_param: float
    kv_cache_bytes_per_token: float
    weights_bytes: float
    kv_cache_bytes: float
    needed_bytes: float
    reserve_fraction: float
    instances: tuple[ServingFit, ...]
    cheapest_fitting: str | None


def serving_check(
    arch: Architecture, parameters: int, hardware: HardwareCatalog, cost_catalog: CostCatalog, *,
    context_tokens: int, batch: int = 1, weight_bytes_per_param: float = 2.0, kv_bytes_per_value: float = 2.0,
    reserve_fraction: float = 0.1, on: date | None = None,
) -> ServingCheck:  # fmt: skip
    """Which AWS instances hold the trained model's weights plus the KV cache for ``batch`` sequences of
    ``context_tokens`` (tensor parallel over the instance's GPUs, ``reserve_fraction`` of memory kept for
    activations and the runtime), and their on-demand $/hour. KV cache per token = layers × K/V width ×
    bytes (the MLA latent for DeepSeek-style attention)."""
    kv_per_token = arch.n_layers * kv_cache_width(arch) * kv_bytes_per_value
    weights = parameters * weight_bytes_per_param
    kv = kv_per_token * context_tokens * batch
    needed = weights + kv
    fits: list[ServingFit] = []
    for price in cost_catalog.instance_prices:
        node = hardware.node(price.slug)
        acc = hardware.accelerator(node.accelerator)
        per_gpu = acc.memory_usable_bytes * (1.0 - reserve_fraction)
        degrees = [d for d in (1, 2, 4, 8, 16, 32, 64, 72) if d <= node.accelerators_per_node
                   and node.accelerators_per_node % d == 0]  # fmt: skip
        need = next((d for d in degrees if d * per_gpu >= needed), None)
        od = price.on_demand_usd_per_hour(on)
        fits.append(ServingFit(
            instance=price.slug, accelerator=acc.slug, gpus_per_instance=node.accelerators_per_node,
            usable_gib_per_gpu=acc.memory_usable_bytes / 2**30, gpus_needed=need, fits=need is not None,
            usd_per_hour=od, usd_per_gpu_hour=price.per_gpu(od),
        ))  # fmt: skip
    fits.sort(key=lambda f: (not f.fits, f.usd_per_hour is None, f.usd_per_hour or 0.0, f.instance))
    cheapest = next((f.instance for f in fits if f.fits and f.usd_per_hour is not None), None)
    return ServingCheck(
        model=arch.slug, parameters=parameters, context_tokens=context_tokens, batch=batch,
        weight_bytes_per_param=weight_bytes_per_param, kv_cache_bytes_per_token=kv_per_token, weights_bytes=weights,
        kv_cache_bytes=kv, needed_bytes=needed, reserve_fraction=reserve_fraction, instances=tuple(fits),
        cheapest_fitting=cheapest,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Train N tokens


class TrainingJob(Frozen):
    """What the estimate says about the run: size, throughput on the cloud instance and on the server."""

    model: str
    accelerator: str
    gpus: int = Field(ge=1)
    parameters: int = Field(ge=1)
    tokens: float = Field(gt=0)
    cloud_tokens_per_s: float = Field(gt=0)
    self_build_tokens_per_s: float | None = Field(default=None, gt=0)
    plan_checkpoint_bytes_per_param: float | None = Field(default=None, gt=0)
    fits: bool = True
    seq_len: int = Field(default=4096, ge=1)
    cloud_estimate_node: str | None = Field(
        default=None, description="node the cloud throughput was estimated on"
    )
    self_build_estimate_node: str | None = Field(
        default=None, description="node the self-build throughput was estimated on"
    )


class OptionCost(Frozen):
    option: CostOption
    available: bool
    provider: str = Field(default="aws", description="aws (and self-build), gcp, azure, or a GPU cloud")
    price_confidence: str | None = Field(
        default=None, description="other clouds: the confidence of the price used"
    )
    reason: str | None = None
    instance: str | None = None
    instances: int = 0
    usd_per_instance_hour: float | None = None
    usd_per_gpu_hour: float | None = None
    tokens_per_s: float | None = None
    goodput: float | None = None
    job_mtbf_hours: float | None = None
    expected_failures: float | None = None
    compute_hours: float | None = None
    wall_clock_hours: float | None = None
    days: float | None = Field(default=None, description="calendar days (wall clock, after goodput)")
    lead_time_days: float = Field(default=0.0, description="self-build: days before training can start")
    run_usd: float | None = Field(default=None, description="compute actually used")
    committed_usd: float | None = Field(
        default=None, description="compute owed: the whole term for commitments, cash outlay for self-build"
    )
    storage_usd: float = 0.0
    data_transfer_usd: float = 0.0
    total_usd: float | None = None
    usd_per_1b_tokens: float | None = None
    cash_usd: float | None = Field(
        default=None,
        description="cash basis: what is paid out for this run (whole commitment terms, all capex)",
    )
    amortised_usd: float | None = Field(
        default=None,
        description="amortised basis: this run's share when the capacity keeps working after it (commitment usage "
        "only; self-build capital × run / useful life + opex)",
    )
    notes: tuple[str, ...] = ()


class Ranking(Frozen):
    """Options from cheapest to dearest on one basis; ``winner`` is None when the cheapest ones tie."""

    basis: str = Field(description="cash or amortised")
    description: str
    order: tuple[str, ...]
    winner: str | None
    tied: tuple[str, ...] = Field(default=(), description="options tied for cheapest (within $1 or 0.01 %)")


class TrainingCost(Frozen):
    model: str
    accelerator: str
    gpus: int
    tokens: float
    fits: bool
    instance: str
    instances: int
    self_build_node: str | None
    self_build_nodes: int | None
    tokens_per_s: float
    compute_hours: float
    job_mtbf_hours: float
    checkpoint_interval_s: float
    goodput: float
    expected_failures: float
    reliability: ReliabilityReport
    options: tuple[OptionCost, ...]
    cheapest: str | None = Field(description="the amortised ranking's winner (None on a tie); see rankings")
    cheapest_basis: str = "amortised"
    rankings: tuple[Ranking, ...] = ()
    fastest: str | None
    other_clouds: tuple[OptionCost, ...] = Field(
        default=(),
        description="on-demand and commitments on Google Cloud, Azure and GPU clouds with this GPU",
    )
    rule_of_thumb_extra_days: float
    rule_of_thumb_extra_usd: float | None = Field(description="on-demand cost of checkpointing every 30 min")
    prices: CloudPrices
    self_build: SelfBuildTco | None
    storage: StorageCost
    serving: ServingCheck | None
    assumptions: tuple[Assumption, ...]
    notes: tuple[str, ...] = Field(
        default=(), description="warnings: partial instances, price dates and inversions"
    )


def _unavailable(option: CostOption, reason: str, instance: str | None = None) -> OptionCost:
    return OptionCost(option=option, available=False, reason=reason, instance=instance)


def _cloud_option(
    option: CostOption, prices: CloudPrices, job: TrainingJob, instances: int, base: ReliabilityReport,
    spot_rel: dict[int, ReliabilityReport], storage: StorageCost, o: CostOverrides, cc: CostCatalog,
) -> OptionCost:  # fmt: skip
    rate = prices.usd_per_hour(option)
    if rate is None:
        return _unavailable(
            option, f"{prices.instance} has no {option.value} price in the catalog", prices.instance
        )
    notes: list[str] = []
    rel = base
    spot_instances = 0
    if option is CostOption.spot:
        spot_instances = instances
        notes.append(SPOT_CAPACITY_RISK)
        if prices.on_demand is not None and rate > prices.on_demand:
            notes.append(f"spot ${rate:,.2f}/h is above on-demand ${prices.on_demand:,.2f}/h")
    elif option is CostOption.reserved_spot_mix:
        spot_instances = instances - round(prices.reserved_fraction * instances)
        notes.append(f"{instances - spot_instances} instances on a 1-yr commitment, {spot_instances} on spot")
        if spot_instances:
            notes.append(SPOT_CAPACITY_RISK)
    if spot_instances:
        rel = spot_rel[spot_instances]
    compute_h = job.tokens / job.cloud_tokens_per_s / SECONDS_PER_HOUR
    wall_h = wall_clock_hours(compute_h, rel.goodput)
    days = wall_h / 24.0
    run = rate * instances * wall_h
    committed = run
    if option in TERM_YEARS:
        run, committed = commitment_usd(rate, instances, wall_h, TERM_YEARS[option])
        if committed > run:
            notes.append(f"the run uses {wall_h / HOURS_PER_MONTH:.1f} months of a {TERM_YEARS[option] * 12}-month term: "
                         f"${committed - run:,.0f} committed but unused")  # fmt: skip
    elif option is CostOption.reserved_spot_mix:
        reserved = instances - spot_instances
        assert prices.commit_1yr is not None and prices.spot is not None
        r_run, r_committed = commitment_usd(prices.commit_1yr, reserved, wall_h, 1)
        run = r_run + prices.spot * spot_instances * wall_h
        committed = r_committed + prices.spot * spot_instances * wall_h
    elif option is CostOption.capacity_block:
        terms = cc.pricing_terms.capacity_blocks
        if instances > terms.max_instances:
            notes.append(
                f"{instances} instances exceed one block's {terms.max_instances} (catalog terms; verify)"
            )
        if days > terms.max_duration_days:
            notes.append(f"{days:.0f} days need {math.ceil(days / terms.max_duration_days)} consecutive blocks "
                         f"of at most {terms.max_duration_days:g} days (availability not guaranteed)")  # fmt: skip
        notes.append("block rates float with demand: the catalog rate is dated " + (
            cc.instance_price(prices.instance).capacity_block.as_of  # type: ignore[union-attr]
            if o.capacity_block_usd_per_hour is None else "(override)"))  # fmt: skip
    elif option is CostOption.off_peak:
        days = wall_h / o.off_peak_hours_per_day
        notes.append("AWS publishes no off-peak rate: the discount is the article's assumption")
        if o.off_peak_hours_per_day < 24:
            notes.append(f"runs {o.off_peak_hours_per_day:g} h a day, so the calendar stretches")
    storage_usd = storage.usd_per_month * wall_h / HOURS_PER_MONTH
    transfer = storage.egress_usd + storage.inter_region_usd
    total = committed + storage_usd + transfer
    return OptionCost(
        option=option, available=True, instance=prices.instance, instances=instances, usd_per_instance_hour=rate,
        usd_per_gpu_hour=rate / prices.gpus_per_instance, tokens_per_s=job.cloud_tokens_per_s, goodput=rel.goodput,
        job_mtbf_hours=rel.job_mtbf_hours, expected_failures=expected_failures(wall_h, rel.job_mtbf_hours),
        compute_hours=compute_h, wall_clock_hours=wall_h, days=days, run_usd=run, committed_usd=committed,
        storage_usd=storage_usd, data_transfer_usd=transfer, total_usd=total,
        usd_per_1b_tokens=total / (job.tokens / 1e9), cash_usd=total, amortised_usd=run + storage_usd + transfer,
        notes=tuple(notes),
    )  # fmt: skip


def self_build_useful_months(
    run_months: float,
    depreciation_years: float,
    use_after_run_years: float | None = None,
    runs: int | None = None,
) -> tuple[float, str]:
    """Months the cluster works in all, over which its capital is shared, and how that was decided: ``runs`` runs
    of this length, else the run plus ``use_after_run_years``, else the depreciation life.

    >>> self_build_useful_months(6, 5)[0], self_build_useful_months(6, 5, use_after_run_years=0.5)[0]
    (60.0, 12.0)
    >>> self_build_useful_months(6, 5, runs=3)[0]
    18
    """
    if runs is not None:
        return run_months * runs, f"{runs} runs of {run_months:.1f} months (stated)"
    if use_after_run_years is not None:
        return (
            run_months + use_after_run_years * 12.0,
            f"the run + {use_after_run_years:g} years of further use (stated)",
        )
    return (
        depreciation_years * 12.0,
        f"the {depreciation_years:g}-year depreciation life (default: fully used after the run)",
    )


def _self_build_option(
    job: TrainingJob, tco: SelfBuildTco, rel: ReliabilityReport, o: CostOverrides
) -> OptionCost:
    tps = job.self_build_tokens_per_s or job.cloud_tokens_per_s
    compute_h = job.tokens / tps / SECONDS_PER_HOUR
    wall_h = wall_clock_hours(compute_h, rel.goodput)
    months = wall_h / HOURS_PER_MONTH
    useful, why = self_build_useful_months(months, tco.depreciation_years, o.use_after_run_years, o.runs)
    share = min(1.0, months / useful) if useful > 0 else 1.0
    capital_total = tco.capital_usd_per_month * tco.depreciation_years * 12.0
    run = capital_total * share + tco.opex_usd_per_month * months
    cash = tco.capex_usd + tco.opex_usd_per_month * months
    notes = (
        f"amortised: {share:.1%} of the capital (${capital_total:,.0f} over {tco.depreciation_years:g} years with "
        f"financing) + opex for {months:.1f} months; useful life {useful:.1f} months = {why}",
        f"cash outlay ${cash:,.0f}: capex ${tco.capex_usd:,.0f} up front + opex for the run",
        "storage for the dataset and checkpoints is in the capex",
        *((f"the cluster arrives after {tco.lead_time_months:g} months: results after "
           f"{tco.lead_time_months * HOURS_PER_MONTH / 24 + wall_h / 24:,.0f} days",) if tco.lead_time_months else ()),
    )  # fmt: skip
    return OptionCost(
        option=CostOption.self_build, available=True, instance=tco.node, instances=tco.nodes,
        usd_per_instance_hour=tco.monthly_equivalent_usd / tco.nodes / HOURS_PER_MONTH,
        usd_per_gpu_hour=tco.usd_per_gpu_hour, tokens_per_s=tps, goodput=rel.goodput,
        job_mtbf_hours=rel.job_mtbf_hours, expected_failures=expected_failures(wall_h, rel.job_mtbf_hours),
        compute_hours=compute_h, wall_clock_hours=wall_h, days=wall_h / 24.0, run_usd=run, committed_usd=cash,
        total_usd=run, usd_per_1b_tokens=run / (job.tokens / 1e9), cash_usd=cash, amortised_usd=run, notes=notes,
        lead_time_days=tco.lead_time_months * HOURS_PER_MONTH / 24.0,
    )  # fmt: skip


def option_label(row: OptionCost) -> str:
    """How rankings name an option: ``on-demand`` (AWS), ``self-build``, ``gcp a3-highgpu-8g on-demand``."""
    if row.provider == "aws":
        return row.option.value
    return f"{row.provider} {row.instance} {row.option.value}"


OTHER_CLOUD_OPTIONS = (CostOption.on_demand, CostOption.commit_1yr, CostOption.commit_3yr)


def other_cloud_options(
    cc: CostCatalog, hardware: HardwareCatalog, job: TrainingJob, *, wanted: Sequence[CostOption],
    o: CostOverrides, storage: StorageCost, reliability: dict[int, ReliabilityReport],
) -> tuple[OptionCost, ...]:  # fmt: skip
    """On-demand and 1-/3-year commitments on every non-AWS instance carrying the job's GPU. ``reliability``
    maps an instance count to its report (filled in by the caller). Throughput: the estimate on the node that
    stands for the instance (``like_node``) when it is one of the two estimated, else the AWS instance's."""
    rows: list[OptionCost] = []
    for p in cc.provider_prices:
        node = hardware.node(p.like_node)
        if node.accelerator != job.accelerator:
            continue
        instances = math.ceil(job.gpus / p.gpus_per_instance)
        rel = reliability[instances]
        if p.like_node == job.self_build_estimate_node and job.self_build_tokens_per_s:
            tps, basis = job.self_build_tokens_per_s, f"throughput as estimated on {p.like_node}"
        else:
            tps = job.cloud_tokens_per_s
            basis = f"throughput as estimated on {job.cloud_estimate_node or 'the AWS instance'}" + (
                "" if p.like_node == job.cloud_estimate_node else f" (stands in for {p.like_node})")  # fmt: skip
        od = p.on_demand_price(o.prices_as_of)
        for option in OTHER_CLOUD_OPTIONS:
            if option not in wanted:
                continue
            if od is None:
                rows.append(OptionCost(option=option, available=False, provider=p.provider, instance=p.instance_type,
                                       reason=f"no {p.provider} {p.instance_type} price in force"
                                       + (f" on {o.prices_as_of}" if o.prices_as_of else "")))  # fmt: skip
                continue
            notes = [f"{p.name}: on-demand ${od.usd_per_hour:,.2f}/h ({od.source}, {od.as_of}, {od.confidence.value} "
                     f"confidence){'; ' + od.note if od.note else ''}", basis,
                     "storage and transfer priced at the AWS S3 rates (a proxy)"]  # fmt: skip
            rate = od.usd_per_hour
            if option in TERM_YEARS:
                years = TERM_YEARS[option]
                discount = p.commit_discount(years)
                if discount is None:
                    rows.append(OptionCost(option=option, available=False, provider=p.provider,
                                           instance=p.instance_type,
                                           reason=f"{p.provider} publishes no {years}-year commitment rate for "
                                           f"{p.instance_type} in the catalog"))  # fmt: skip
                    continue
                prov = p.figure_provenance(f"commit_{years}yr_discount")
                rate = od.usd_per_hour * (1.0 - discount)
                notes.append(f"{years}-yr commitment: on-demand less the average {p.provider} discount "
                             f"{discount:.0%} ({prov.source}, {prov.as_of})")  # fmt: skip
            compute_h = job.tokens / tps / SECONDS_PER_HOUR
            wall_h = wall_clock_hours(compute_h, rel.goodput)
            run = committed = rate * instances * wall_h
            if option in TERM_YEARS:
                run, committed = commitment_usd(rate, instances, wall_h, TERM_YEARS[option])
            notes += _whole_units_notes(job.gpus, instances, p.gpus_per_instance, p.instance_type)
            storage_usd = storage.usd_per_month * wall_h / HOURS_PER_MONTH
            transfer = storage.egress_usd + storage.inter_region_usd
            total = committed + storage_usd + transfer
            rows.append(OptionCost(
                option=option, available=True, provider=p.provider, instance=p.instance_type, instances=instances,
                usd_per_instance_hour=rate, usd_per_gpu_hour=rate / p.gpus_per_instance, tokens_per_s=tps,
                goodput=rel.goodput, job_mtbf_hours=rel.job_mtbf_hours,
                expected_failures=expected_failures(wall_h, rel.job_mtbf_hours), compute_hours=compute_h,
                wall_clock_hours=wall_h, days=wall_h / 24.0, run_usd=run, committed_usd=committed,
                storage_usd=storage_usd, data_transfer_usd=transfer, total_usd=total,
                usd_per_1b_tokens=total / (job.tokens / 1e9), cash_usd=total,
                amortised_usd=run + storage_usd + transfer, price_confidence=od.confidence.value, notes=tuple(notes),
            ))  # fmt: skip
    return tuple(rows)


TIE_USD = 1.0
TIE_FRACTION = 1e-4
RANKING_BASES = {
    "cash": "what is paid out for this run: commitments' whole terms, self-build's capex + opex (nothing is "
            "assumed about use after the run)",
    "amortised": "this run's share: commitments' usage only (the rest of the term used by other work), "
                 "self-build's capital × run / useful life + opex (useful life: use_after_run_years or runs, "
                 "default the depreciation life)",
}  # fmt: skip


def rank_options(options: Sequence[OptionCost], basis: str) -> Ranking:
    """Available options ordered by ``cash_usd`` or ``amortised_usd``; no single winner when the cheapest tie
    (within $1 or 0.01 %)."""
    priced = [(getattr(r, f"{basis}_usd"), option_label(r)) for r in options if r.available]
    priced = sorted((v, name) for v, name in priced if v is not None)
    if not priced:
        return Ranking(basis=basis, description=RANKING_BASES[basis], order=(), winner=None)
    best = priced[0][0]
    tied = tuple(name for v, name in priced if v - best <= max(TIE_USD, TIE_FRACTION * abs(best)))
    return Ranking(basis=basis, description=RANKING_BASES[basis], order=tuple(n for _, n in priced),
                   winner=tied[0] if len(tied) == 1 else None, tied=tied if len(tied) > 1 else ())  # fmt: skip


def training_cost(
    cost_catalog: CostCatalog,
    hardware: HardwareCatalog,
    job: TrainingJob,
    *,
    options: Sequence[CostOption] | None = None,
    overrides: CostOverrides | None = None,
    arch: Architecture | None = None,
) -> TrainingCost:
    """Wall-clock days and total $ of "train ``job.tokens`` tokens with this plan" for every option.

    Raises :class:`CostInputError` naming the offending input."""
    o = overrides or CostOverrides()
    wanted = tuple(options) if options else tuple(CostOption)
    instance = o.instance or instance_for_accelerator(cost_catalog, hardware, job.accelerator)
    inst_node = hardware.node(instance)
    if inst_node.accelerator != job.accelerator:
        raise CostInputError(
            "overrides.instance", f"{instance} carries {inst_node.accelerator}, not {job.accelerator}"
        )
    prices = cloud_prices(cost_catalog, instance, o)
    instances = math.ceil(job.gpus / prices.gpus_per_instance)

    def rel(spot_instances: int = 0) -> ReliabilityReport:
        try:
            return reliability_report(
                cost_catalog, gpus=job.gpus, nodes=instances, parameters=job.parameters,
                plan_bytes_per_param=job.plan_checkpoint_bytes_per_param, overrides=o.reliability,
                spot_instances=spot_instances,
            )  # fmt: skip
        except KeyError as exc:
            what = "storage_tier" if "storage tier" in str(exc.args[0]) else "failure_record"
            raise CostInputError(f"overrides.reliability.{what}", str(exc.args[0])) from None
        except ValueError as exc:
            raise CostInputError("overrides.reliability", str(exc)) from None

    base = rel()

    def rel_on(nodes: int) -> ReliabilityReport:
        return reliability_report(
            cost_catalog, gpus=job.gpus, nodes=nodes, parameters=job.parameters,
            plan_bytes_per_param=job.plan_checkpoint_bytes_per_param, overrides=o.reliability,
        )  # fmt: skip

    spot_rel: dict[int, ReliabilityReport] = {}
    if CostOption.spot in wanted:
        spot_rel[instances] = rel(instances)
    if CostOption.reserved_spot_mix in wanted:
        n_spot = instances - round(prices.reserved_fraction * instances)
        if n_spot and n_spot not in spot_rel:
            spot_rel[n_spot] = rel(n_spot)
    storage = _storage(cost_catalog, o, job.tokens, job.parameters, base.checkpoint_bytes)

    results: list[OptionCost] = []
    for option in wanted:
        if option is not CostOption.self_build:
            results.append(
                _cloud_option(option, prices, job, instances, base, spot_rel, storage, o, cost_catalog)
            )
    tco: SelfBuildTco | None = None
    sb_node_slug = self_build_node_for(hardware, cost_catalog, job.accelerator)
    sb_nodes: int | None = None
    if CostOption.self_build in wanted:
        if sb_node_slug is None and o.self_build.server_usd is None:
            results.append(_unavailable(CostOption.self_build, f"no server price for a {job.accelerator} server; "
                                        "give overrides.self_build.server_usd"))  # fmt: skip
        else:
            sb_node = hardware.node(sb_node_slug) if sb_node_slug else inst_node
            sb_nodes = math.ceil(job.gpus / sb_node.accelerators_per_node)
            inputs, sb_assumptions = self_build_inputs(cost_catalog, hardware, sb_node, o.self_build,
                                                       storage_tb=storage.stored_tb)  # fmt: skip
            tco = self_build_tco(inputs, node=sb_node.slug, nodes=sb_nodes, gpus_per_node=sb_node.accelerators_per_node,
                                 nics_per_node=sb_node.scale_out_nics, assumptions=sb_assumptions)  # fmt: skip
            results.append(_self_build_option(job, tco, base, o))

    others: tuple[OptionCost, ...] = ()
    if o.other_clouds:
        counts = {math.ceil(job.gpus / p.gpus_per_instance) for p in cost_catalog.provider_prices}
        reports = {n: base if n == instances else rel_on(n) for n in counts}
        others = other_cloud_options(cost_catalog, hardware, job, wanted=wanted, o=o, storage=storage,
                                     reliability=reports)  # fmt: skip
    available = [r for r in results if r.available and r.total_usd is not None]
    rankings = (rank_options((*results, *others), "cash"), rank_options((*results, *others), "amortised"))
    cheapest = rankings[1].winner
    fastest = (
        min(available, key=lambda r: (r.days or 0.0) + r.lead_time_days).option.value if available else None
    )
    compute_h = job.tokens / job.cloud_tokens_per_s / SECONDS_PER_HOUR
    wall_h = compute_h / base.goodput
    extra_h = wall_h * base.rule_of_thumb.extra_wall_clock_fraction
    extra_usd = None if prices.on_demand is None else extra_h * prices.on_demand * instances

    serving = None
    if arch is not None:
        serving = serving_check(
            arch, job.parameters, hardware, cost_catalog, context_tokens=o.serving_context_tokens or job.seq_len,
            batch=o.serving_batch, weight_bytes_per_param=o.serving_weight_bytes_per_param, on=o.prices_as_of,
        )  # fmt: skip
    assumptions = [
        *prices.assumptions,
        *base.assumptions,
        *storage.assumptions,
        *(tco.assumptions if tco else ()),
        Assumption(name="hours per month", value=HOURS_PER_MONTH, unit="h", source="formula", note="8,760 h / 12"),
        Assumption(name="throughput on the cloud instance", value=job.cloud_tokens_per_s, unit="tokens/s",
                   source="formula", note=f"the estimate on {job.cloud_estimate_node or instance}"),
    ]  # fmt: skip
    if tco is not None and job.self_build_tokens_per_s:
        assumptions.append(Assumption(name="throughput on the self-built cluster", value=job.self_build_tokens_per_s,
                                      unit="tokens/s", source="formula",
                                      note=f"the estimate on {job.self_build_estimate_node or tco.node}"))  # fmt: skip
    notes = list(prices.notes)
    by_label = {option_label(r): r for r in (*results, *others)}
    for ranking in rankings:
        won = by_label.get(ranking.winner or "")
        if won is not None and won.price_confidence == "low":
            notes.append(f"the cheapest on the {ranking.basis} basis, {ranking.winner}, rests on a low-confidence "
                         "price (an aggregator figure or an estimate): get a quote before deciding")  # fmt: skip
    notes += _whole_units_notes(job.gpus, instances, prices.gpus_per_instance, instance)
    if tco is not None:
        notes += _whole_units_notes(job.gpus, tco.nodes, tco.gpus // tco.nodes, tco.node)
    return TrainingCost(
        model=job.model, accelerator=job.accelerator, gpus=job.gpus, tokens=job.tokens, fits=job.fits,
        instance=instance, instances=instances, self_build_node=tco.node if tco else sb_node_slug,
        self_build_nodes=sb_nodes, tokens_per_s=job.cloud_tokens_per_s, compute_hours=compute_h,
        job_mtbf_hours=base.job_mtbf_hours, checkpoint_interval_s=base.checkpoint_interval_s, goodput=base.goodput,
        expected_failures=expected_failures(wall_h, base.job_mtbf_hours), reliability=base, options=tuple(results),
        cheapest=cheapest, rankings=rankings, fastest=fastest, other_clouds=others, rule_of_thumb_extra_days=extra_h / 24.0, rule_of_thumb_extra_usd=extra_usd,
        prices=prices, self_build=tco, storage=storage, serving=serving, assumptions=tuple(assumptions),
        notes=tuple(notes),
    )  # fmt: skip


def _whole_units_notes(gpus: int, units: int, gpus_per_unit: int, unit: str) -> list[str]:
    """A note when ``gpus`` is not a whole number of instances or servers: the rest are paid for but idle.

    >>> _whole_units_notes(12, 2, 8, "p5.48xlarge")
    ['12 GPUs are not a whole number of p5.48xlarge (8 GPUs each): 2 are billed (16 GPUs), 4 GPUs paid for but idle']
    """
    paid = units * gpus_per_unit
    if paid == gpus:
        return []
    return [f"{gpus} GPUs are not a whole number of {unit} ({gpus_per_unit} GPUs each): {units} are billed "
            f"({paid} GPUs), {paid - gpus} GPUs paid for but idle"]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Monthly cost of a cluster


class MonthlyRow(Frozen):
    option: CostOption
    available: bool
    usd_per_month: float | None
    upfront_usd: float = 0.0
    break_even_month: float | None = Field(
        default=None, description="self-build cash ≤ this option's bill from then"
    )
    self_build_wins_at_utilisation: float | None = Field(
        default=None, description="pay-per-hour options: utilisation above which self-build is cheaper"
    )
    notes: tuple[str, ...] = ()


class CumulativeSeries(Frozen):
    months: tuple[int, ...]
    usd: dict[str, tuple[float, ...]]


class MonthlyCost(Frozen):
    instance: str
    self_build_node: str | None
    nodes: int
    gpus: int
    hours_per_month: float
    on_demand_usd_per_month: float | None
    commit_1yr_usd_per_month: float | None
    commit_3yr_usd_per_month: float | None
    spot_usd_per_month: float | None
    capacity_block_usd_per_month: float | None
    off_peak_usd_per_month: float | None
    reserved_spot_mix_usd_per_month: float | None
    self_build_capex_usd: float | None
    self_build_opex_usd_per_month: float | None
    self_build_monthly_equivalent_usd: float | None
    rows: tuple[MonthlyRow, ...]
    self_build: SelfBuildTco | None
    cumulative: CumulativeSeries
    prices: CloudPrices
    assumptions: tuple[Assumption, ...]


PAY_PER_HOUR = (CostOption.on_demand, CostOption.spot, CostOption.capacity_block, CostOption.off_peak)


def monthly_cost(
    cost_catalog: CostCatalog,
    hardware: HardwareCatalog,
    *,
    instance: str,
    nodes: int,
    self_build_node: str | None = None,
    overrides: CostOverrides | None = None,
    options: Sequence[CostOption] | None = None,
    months: int = 36,
) -> MonthlyCost:
    """Cost per month of ``nodes`` instances running all month (730 h) for each option, self-build capex
    and monthly cost, break-even months and the cumulative cost series for charts."""
    if nodes < 1:
        raise CostInputError("nodes", "a cluster has at least one node")
    o = overrides or CostOverrides()
    wanted = tuple(options) if options else tuple(CostOption)
    prices = cloud_prices(cost_catalog, instance, o)
    inst_node = hardware.node(instance)
    gpus = nodes * prices.gpus_per_instance
    tco: SelfBuildTco | None = None
    sb_slug = self_build_node or self_build_node_for(hardware, cost_catalog, inst_node.accelerator)
    if CostOption.self_build in wanted and (sb_slug is not None or o.self_build.server_usd is not None):
        sb_node = hardware.node(sb_slug) if sb_slug else inst_node
        inputs, sb_assumptions = self_build_inputs(cost_catalog, hardware, sb_node, o.self_build)
        sb_count = math.ceil(gpus / sb_node.accelerators_per_node)
        tco = self_build_tco(inputs, node=sb_node.slug, nodes=sb_count, gpus_per_node=sb_node.accelerators_per_node,
                             nics_per_node=sb_node.scale_out_nics, assumptions=sb_assumptions)  # fmt: skip

    per_month: dict[CostOption, float | None] = {}
    rows: list[MonthlyRow] = []
    series: dict[str, tuple[float, ...]] = {}
    for option in wanted:
        if option is CostOption.self_build:
            continue
        rate = prices.usd_per_hour(option)
        usd = None if rate is None else rate * nodes * HOURS_PER_MONTH
        per_month[option] = usd
        notes: list[str] = []
        if option in TERM_YEARS:
            notes.append(f"{TERM_YEARS[option] * 12}-month term, billed monthly")
        if option in (CostOption.spot, CostOption.reserved_spot_mix):
            notes.append(SPOT_CAPACITY_RISK)
        if option is CostOption.off_peak:
            notes.append("AWS publishes no off-peak rate: the discount is the article's assumption")
        rows.append(MonthlyRow(
            option=option, available=usd is not None, usd_per_month=usd,
            break_even_month=(break_even_month(tco.capex_usd, tco.opex_usd_per_month, usd)
                              if tco and usd is not None else None),
            self_build_wins_at_utilisation=(self_build_wins_at_utilisation(tco.monthly_equivalent_usd, usd)
                                            if tco and usd and option in PAY_PER_HOUR else None),
            notes=tuple(notes),
        ))  # fmt: skip
        if usd is not None:
            series[option.value] = cumulative_usd(0.0, usd, months)
    if CostOption.self_build in wanted:
        if tco is None:
            rows.append(MonthlyRow(option=CostOption.self_build, available=False, usd_per_month=None,
                                   notes=("no server price for this accelerator; give overrides.self_build.server_usd",)))  # fmt: skip
        else:
            rows.append(MonthlyRow(
                option=CostOption.self_build, available=True, usd_per_month=tco.opex_usd_per_month,
                upfront_usd=tco.capex_usd,
                notes=(f"monthly equivalent ${tco.monthly_equivalent_usd:,.0f} (capital ${tco.capital_usd_per_month:,.0f} "
                       f"over {tco.depreciation_years:g} years + opex ${tco.opex_usd_per_month:,.0f})",),
            ))  # fmt: skip
            series["self-build"] = cumulative_usd(tco.capex_usd, tco.opex_usd_per_month, months)
    return MonthlyCost(
        instance=instance, self_build_node=tco.node if tco else sb_slug, nodes=nodes, gpus=gpus,
        hours_per_month=HOURS_PER_MONTH,
        on_demand_usd_per_month=per_month.get(CostOption.on_demand),
        commit_1yr_usd_per_month=per_month.get(CostOption.commit_1yr),
        commit_3yr_usd_per_month=per_month.get(CostOption.commit_3yr),
        spot_usd_per_month=per_month.get(CostOption.spot),
        capacity_block_usd_per_month=per_month.get(CostOption.capacity_block),
        off_peak_usd_per_month=per_month.get(CostOption.off_peak),
        reserved_spot_mix_usd_per_month=per_month.get(CostOption.reserved_spot_mix),
        self_build_capex_usd=tco.capex_usd if tco else None,
        self_build_opex_usd_per_month=tco.opex_usd_per_month if tco else None,
        self_build_monthly_equivalent_usd=tco.monthly_equivalent_usd if tco else None,
        rows=tuple(rows), self_build=tco,
        cumulative=CumulativeSeries(months=tuple(range(months + 1)), usd=series),
        prices=prices,
        assumptions=(*prices.assumptions, *(tco.assumptions if tco else ()),
                     Assumption(name="hours per month", value=HOURS_PER_MONTH, unit="h", source="formula",
                                note="8,760 h / 12; the cluster runs all month")),
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# For the plan search


def usd_per_gpu_hour(
    cost_catalog: CostCatalog,
    node_slug: str,
    option: CostOption | str,
    *,
    on: date | None = None,
    gpus_per_node: int = 8,
) -> float | None:
    """Price of one GPU-hour of allocation on ``node_slug`` under ``option`` — the hook the plan search
    uses for min-cost objectives (cost per token = this × GPUs / (tokens/s × 3600 × goodput)).

    - Cloud options need an AWS instance slug (``p5.48xlarge``): on-demand, the commitment rate (own rate,
      else the average discount), the median spot price, the capacity-block rate, on-demand less the
      off-peak discount, or the 50/50 reserved + spot mix, in force on ``on`` (default: current), ÷ GPUs
      per instance. A server slug gets None.
    - A provider price slug (``gcp-a3-highgpu-8g``, ``prices.toml`` ``[[provider_prices]]``): on-demand, or
      ``commit-1yr`` / ``commit-3yr`` at the provider's average discount; None for other options.
    - ``self-build`` needs a server slug with a default server price (``dgx-h100``): the per-node monthly
      equivalent with the catalog's per-node 2-tier fabric figures (switches, cables, optics), default
      power, PUE, electricity, colocation, staff, maintenance, depreciation and cost of capital, ÷
      (``gpus_per_node`` × 730 h). An instance slug gets None.

    None also when the catalog has no such price. Goodput is not included: divide by it.
    With the catalog as shipped: ``p5.48xlarge`` on-demand → 6.88 (55.04 / 8); ``p5e.48xlarge``
    on-demand → None (Capacity Blocks only).
    """
    option = CostOption(option)
    if option is CostOption.self_build:
        return _self_build_usd_per_gpu_hour(cost_catalog, node_slug, gpus_per_node)
    other = next((p for p in cost_catalog.provider_prices if p.slug == node_slug), None)
    if other is not None:
        od = other.on_demand_price(on)
        if od is None or option not in OTHER_CLOUD_OPTIONS:
            return None
        discount = 0.0 if option is CostOption.on_demand else other.commit_discount(TERM_YEARS[option])
        return None if discount is None else od.usd_per_hour * (1.0 - discount) / other.gpus_per_instance
    if not any(p.slug == node_slug for p in cost_catalog.instance_prices):
        return None
    prices = cloud_prices(cost_catalog, node_slug, CostOverrides(prices_as_of=on))
    rate = prices.usd_per_hour(option)
    return None if rate is None else rate / prices.gpus_per_instance


def _self_build_usd_per_gpu_hour(cc: CostCatalog, node_slug: str, gpus_per_node: int) -> float | None:
    sb = cc.self_build
    if node_slug not in sb.defaults.server_price:
        return None
    server = sb.server_price_for(node_slug)
    try:
        power = sb.system_power_for(node_slug)
    except KeyError:
        return None
    fabric = (
        sb.component(SWITCHES_PER_NODE_2TIER).price_usd.mid + sb.component(CABLES_OPTICS[2]).price_usd.mid
    )
    hardware_usd = server.price_usd.mid + fabric
    capex = hardware_usd * (1 + DEFAULT_INSTALLATION_FRACTION)
    kw = power.max_kw.mid / power.servers
    loaded = sb.staff.engineer_base_salary_usd_per_year * (
        sb.staff.loaded_cost_multiplier or DEFAULT_LOADED_COST_MULTIPLIER
    )
    fte = sb.staff.fte_per_1000_gpus or DEFAULT_STAFF_FTE_PER_1000_GPUS
    opex = (
        kw * sb.factors.avg_power_fraction_during_training * sb.pue_option().pue.mid * sb.electricity().usd_per_kwh
        * HOURS_PER_MONTH
        + kw * sb.colocation().usd_per_kw_month.mid
        + gpus_per_node / 1000 * fte * loaded / 12
        + hardware_usd * DEFAULT_MAINTENANCE_FRACTION_PER_YEAR / 12
    )  # fmt: skip
    capital = capital_usd_per_month(
        capex, capex * DEFAULT_RESIDUAL_FRACTION, sb.depreciation().years, DEFAULT_COST_OF_CAPITAL
    )
    return (capital + opex) / (gpus_per_node * HOURS_PER_MONTH)
