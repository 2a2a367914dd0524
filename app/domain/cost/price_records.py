"""Price records of ``data/prices.toml``: AWS instance prices (on-demand, regional, committed, spot,
Capacity Blocks), other clouds' prices, the pricing terms (savings plans, spot, off-peak, storage and data
transfer tiers); and :class:`CostCatalog`, the cost figures of the catalog in one object (prices,
self-build assumptions, reliability and checkpoint figures).

Figures only: the computations live in the other ``app.domain.cost`` modules. Every record is a frozen
:class:`CatalogEntry`; figures nested in lists (dated prices, spot snapshots) carry their own provenance.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from statistics import median
from typing import Literal

from pydantic import Field, model_validator

from app.domain.cost.selfbuild_records import SelfBuild
from app.domain.figures import (
    EffectiveDated,
    Fraction,
    Span,
    _check_no_overlap,
    _nested_sources,
    by_slug,
    in_force,
)
from app.domain.provenance import CatalogEntry, FigureProvenance, Frozen
from app.domain.reliability.records import Checkpointing, Reliability

# --------------------------------------------------------------------------------------------------
# AWS instance prices
# --------------------------------------------------------------------------------------------------


class OnDemandPrice(EffectiveDated):
    """On-demand Linux price per instance-hour in the entry's region."""

    usd_per_hour: float = Field(ge=0)


class RegionalPrice(EffectiveDated):
    """On-demand price per instance-hour in another region."""

    region: str
    usd_per_hour: float = Field(ge=0)


class CommittedRate(EffectiveDated):
    """A 1-yr or 3-yr commitment rate, quoted per instance-hour or per GPU-hour (exactly one)."""

    kind: Literal["reserved-instance", "savings-plan"]
    term_years: Literal[1, 3]
    usd_per_hour: float | None = Field(default=None, ge=0)
    usd_per_gpu_hour: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _exactly_one_rate(self) -> CommittedRate:
        if (self.usd_per_hour is None) == (self.usd_per_gpu_hour is None):
            raise ValueError("give exactly one of usd_per_hour and usd_per_gpu_hour")
        return self

    def instance_usd_per_hour(self, gpus_per_instance: int) -> float:
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        assert self.usd_per_gpu_hour is not None
        return self.usd_per_gpu_hour * gpus_per_instance


class SpotObservation(EffectiveDated):
    """One snapshot of spot prices per instance-hour, one value per availability zone."""

    region: str
    usd_per_hour_by_az: tuple[float, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _non_negative(self) -> SpotObservation:
        if min(self.usd_per_hour_by_az) < 0:
            raise ValueError("spot prices must be >= 0")
        return self

    @property
    def min_usd_per_hour(self) -> float:
        return min(self.usd_per_hour_by_az)

    @property
    def max_usd_per_hour(self) -> float:
        return max(self.usd_per_hour_by_az)

    @property
    def median_usd_per_hour(self) -> float:
        return float(median(self.usd_per_hour_by_az))


class CapacityBlockPrice(FigureProvenance):
    """EC2 Capacity Block rate per instance-hour; rates float, so ``as_of`` matters."""

    usd_per_hour: float = Field(ge=0)
    regions: tuple[str, ...] = Field(min_length=1)


class InstancePrice(CatalogEntry):
    """Prices of one AWS instance type; ``slug`` is the instance slug (the hardware node slug)."""

    region: str = "us-east-1"
    gpus_per_instance: int = Field(ge=1)
    available_from: date | None = None
    on_demand_offered: bool = True
    on_demand: tuple[OnDemandPrice, ...] = ()
    regional_on_demand: tuple[RegionalPrice, ...] = ()
    committed: tuple[CommittedRate, ...] = ()
    spot: tuple[SpotObservation, ...] = ()
    capacity_block: CapacityBlockPrice | None = None

    @model_validator(mode="after")
    def _consistent(self) -> InstancePrice:
        if not self.on_demand_offered and self.on_demand:
            raise ValueError("on_demand_offered = false but on-demand prices are listed")
        _check_no_overlap("on_demand", self.on_demand)
        for region in {p.region for p in self.regional_on_demand}:
            _check_no_overlap(
                f"regional_on_demand {region}", [p for p in self.regional_on_demand if p.region == region]
            )
        for kind, term in {(c.kind, c.term_years) for c in self.committed}:
            same = [c for c in self.committed if (c.kind, c.term_years) == (kind, term)]
            _check_no_overlap(f"committed {kind} {term}-yr", same)
        for region in {s.region for s in self.spot}:
            _check_no_overlap(f"spot {region}", [s for s in self.spot if s.region == region])
        self._check_committed_below_on_demand()
        return self

    def _check_committed_below_on_demand(self) -> None:
        for rate in self.committed:
            committed = rate.instance_usd_per_hour(self.gpus_per_instance)
            for price in self.on_demand:
                if rate.overlaps(price) and committed > price.usd_per_hour:
                    raise ValueError(
                        f"committed {rate.term_years}-yr rate {committed:g} USD/h is above the on-demand "
                        f"price {price.usd_per_hour:g} USD/h in force over {price.window()}"
                    )

    def source_keys(self) -> set[str]:
        nested = _nested_sources(
            self.on_demand, self.regional_on_demand, self.committed, self.spot, [self.capacity_block]
        )
        return super().source_keys() | nested

    def per_gpu(self, usd_per_hour: float | None) -> float | None:
        """An instance-hour price divided over the instance's GPUs."""
        return None if usd_per_hour is None else usd_per_hour / self.gpus_per_instance

    def on_demand_regions(self) -> set[str]:
        """The regions with an on-demand price of this instance: its home region and the regional records."""
        return {self.region, *(r.region for r in self.regional_on_demand)}

    def regions(self) -> set[str]:
        """Every region the catalog has a price of this instance in: on-demand, spot, capacity blocks."""
        blocks = self.capacity_block.regions if self.capacity_block is not None else ()
        return self.on_demand_regions() | {s.region for s in self.spot} | set(blocks)

    # on-demand -----------------------------------------------------------------------------------
    def on_demand_price(self, on: date | None = None) -> OnDemandPrice | None:
        return in_force(self.on_demand, on)

    def on_demand_usd_per_hour(self, on: date | None = None) -> float | None:
        """On-demand price in force on ``on`` (current when None); None when not offered then."""
        price = self.on_demand_price(on)
        return None if price is None else price.usd_per_hour

    def on_demand_usd_per_gpu_hour(self, on: date | None = None) -> float | None:
        return self.per_gpu(self.on_demand_usd_per_hour(on))

    def regional_on_demand_usd_per_hour(self, region: str, on: date | None = None) -> float | None:
        if region == self.region:
            return self.on_demand_usd_per_hour(on)
        price = in_force([p for p in self.regional_on_demand if p.region == region], on)
        return None if price is None else price.usd_per_hour

    # commitments ---------------------------------------------------------------------------------
    def committed_rate(self, term_years: int, on: date | None = None) -> CommittedRate | None:
        """The instance-specific commitment rate in force (None: use the pricing-terms discount)."""
        return in_force([c for c in self.committed if c.term_years == term_years], on)

    def committed_usd_per_hour(self, term_years: int, on: date | None = None) -> float | None:
        rate = self.committed_rate(term_years, on)
        return None if rate is None else rate.instance_usd_per_hour(self.gpus_per_instance)

    def committed_usd_per_gpu_hour(self, term_years: int, on: date | None = None) -> float | None:
        return self.per_gpu(self.committed_usd_per_hour(term_years, on))

    # spot and capacity blocks ----------------------------------------------------------------------
    def spot_observation(self, on: date | None = None, region: str | None = None) -> SpotObservation | None:
        wanted = region or self.region
        return in_force([s for s in self.spot if s.region == wanted], on)

    def spot_median_usd_per_gpu_hour(self, on: date | None = None, region: str | None = None) -> float | None:
        obs = self.spot_observation(on, region)
        return None if obs is None else self.per_gpu(obs.median_usd_per_hour)

    def capacity_block_usd_per_hour(self) -> float | None:
        return None if self.capacity_block is None else self.capacity_block.usd_per_hour

    def capacity_block_usd_per_gpu_hour(self) -> float | None:
        return self.per_gpu(self.capacity_block_usd_per_hour())


# --------------------------------------------------------------------------------------------------
# Other clouds (Google Cloud, Azure, GPU clouds): on-demand prices and commitment discounts
# --------------------------------------------------------------------------------------------------


class ProviderPrice(CatalogEntry):
    """An instance outside AWS. ``like_node`` is the catalog node whose hardware (accelerator, network) stands
    for it in the estimate; commitments are a discount off on-demand (the provider's average), when published."""

    provider: Literal["gcp", "azure", "coreweave", "lambda", "spheron"]
    instance_type: str = Field(min_length=1, max_length=64)
    like_node: str
    gpus_per_instance: int = Field(ge=1)
    region: str | None = None
    on_demand: tuple[OnDemandPrice, ...] = Field(min_length=1)
    commit_1yr_discount: float | None = Field(default=None, ge=0, lt=1)
    commit_3yr_discount: float | None = Field(default=None, ge=0, lt=1)

    @model_validator(mode="after")
    def _no_overlap(self) -> ProviderPrice:
        _check_no_overlap("on_demand", self.on_demand)
        return self

    def source_keys(self) -> set[str]:
        return super().source_keys() | _nested_sources(self.on_demand)

    def on_demand_price(self, on: date | None = None) -> OnDemandPrice | None:
        return in_force(self.on_demand, on)

    def commit_discount(self, term_years: int) -> float | None:
        return self.commit_1yr_discount if term_years == 1 else self.commit_3yr_discount


# --------------------------------------------------------------------------------------------------
# Pricing terms (single tables in prices.toml)
# --------------------------------------------------------------------------------------------------


class PriceCut(CatalogEntry):
    """The June 2025 AWS GPU price cut."""

    effective_from: date
    max_reduction_fraction: Fraction


class SavingsPlanTerms(CatalogEntry):
    """Commitment discounts off on-demand, used where an instance has no commitment rate of its own."""

    commit_1yr_discount: Fraction
    commit_3yr_discount: Fraction
    compute_sp_max_discount: Fraction
    ec2_instance_sp_max_discount: Fraction

    def discount(self, term_years: int) -> float:
        if term_years == 1:
            return self.commit_1yr_discount
        if term_years == 3:
            return self.commit_3yr_discount
        raise ValueError(f"commitment terms are 1 or 3 years, got {term_years}")


class SpotTerms(CatalogEntry):
    max_discount: Fraction
    interruption_notice_s: float = Field(ge=0)
    observed_spot_to_on_demand_ratio: Span
    interruption_frequency_buckets: tuple[str, ...] = ()


class CapacityBlockTerms(CatalogEntry):
    min_duration_days: float = Field(ge=0)
    max_duration_days: float = Field(ge=0)
    max_advance_weeks: float = Field(ge=0)
    max_instances: int = Field(ge=1)
    pricing_model: str


class OffPeakTerms(CatalogEntry):
    """An input default, not a published price: a discount for running off-peak."""

    discount_fraction: Fraction
    is_assumption: bool = True


class Tier(Frozen):
    """One price tier: applies up to ``up_to_tb`` cumulative (None: everything beyond)."""

    up_to_tb: float | None = Field(default=None, ge=0)
    usd_per_gb: float = Field(ge=0)


def _check_tiers(tiers: Sequence[Tier], what: str) -> None:
    bounds = [t.up_to_tb for t in tiers]
    if not tiers or bounds[-1] is not None:
        raise ValueError(f"{what}: the last tier must be unbounded (no up_to_tb)")
    finite = [b for b in bounds[:-1] if b is not None]
    if len(finite) != len(bounds) - 1 or finite != sorted(set(finite)):
        raise ValueError(f"{what}: tier bounds must be strictly increasing, only the last unbounded")


class StoragePrices(CatalogEntry):
    """S3 storage prices per GB-month (``usd_per_gb`` of each tier is per GB-month)."""

    s3_standard_tiers: tuple[Tier, ...]
    s3_express_one_zone_usd_per_gb_month: float = Field(ge=0)

    @model_validator(mode="after")
    def _tiers(self) -> StoragePrices:
        _check_tiers(self.s3_standard_tiers, "s3_standard_tiers")
        return self


class DataTransferPrices(CatalogEntry):
    internet_egress_tiers: tuple[Tier, ...]
    inter_region_usd_per_gb: float = Field(ge=0)
    inter_region_cross_continent_usd_per_gb: Span
    inter_az_usd_per_gb_each_way: float = Field(ge=0)
    ingress_usd_per_gb: float = Field(ge=0)
    nat_gateway_usd_per_gb: float = Field(ge=0)
    nat_gateway_usd_per_hour: float = Field(ge=0)
    ec2_to_s3_same_region_usd_per_gb: float = Field(ge=0)

    @model_validator(mode="after")
    def _tiers(self) -> DataTransferPrices:
        _check_tiers(self.internet_egress_tiers, "internet_egress_tiers")
        return self


class PricingTerms(Frozen):
    price_cut_2025: PriceCut
    savings_plans: SavingsPlanTerms
    spot: SpotTerms
    capacity_blocks: CapacityBlockTerms
    off_peak: OffPeakTerms
    storage: StoragePrices
    data_transfer: DataTransferPrices

    def entries(self) -> tuple[CatalogEntry, ...]:
        return (
            self.price_cut_2025,
            self.savings_plans,
            self.spot,
            self.capacity_blocks,
            self.off_peak,
            self.storage,
            self.data_transfer,
        )


PRICING_TABLES: dict[str, type[CatalogEntry]] = {
    "price_cut_2025": PriceCut,
    "savings_plans": SavingsPlanTerms,
    "spot_terms": SpotTerms,
    "capacity_block_terms": CapacityBlockTerms,
    "off_peak": OffPeakTerms,
    "storage_prices": StoragePrices,
    "data_transfer": DataTransferPrices,
}


class CostCatalog(Frozen):
    instance_prices: tuple[InstancePrice, ...]
    provider_prices: tuple[ProviderPrice, ...] = ()
    pricing_terms: PricingTerms
    self_build: SelfBuild
    reliability: Reliability
    checkpointing: Checkpointing

    def instance_price(self, slug: str) -> InstancePrice:
        """Prices of one instance; KeyError listing the known instance slugs."""
        return by_slug(self.instance_prices, slug, "instance")
