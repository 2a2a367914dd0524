"""Cost and reliability catalog: AWS instance prices, pricing terms, self-build assumptions, failure
statistics and checkpoint figures, loaded from ``data/prices.toml``, ``data/selfbuild.toml`` and
``data/reliability.toml``.

Figures only: the cost and goodput computations live elsewhere and consume these records.

Conventions:
- Every record is a frozen :class:`CatalogEntry` (slug, name, default source/as_of/confidence, per-field
  provenance overrides). Figures nested in lists (dated prices, spot snapshots) carry their own provenance:
  they subclass :class:`FigureProvenance`.
- Effective dates are half-open: ``effective_from`` inclusive, ``effective_to`` exclusive; ``None`` is
  unbounded. ``on=None`` in the lookups means "current": the open-ended (``effective_to is None``) record.
- Ranges from the sources (``[low, high]``) are :class:`Span` values; ``Span.mid`` is the figure used by
  default. A plain number in TOML is a span of width zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date
from statistics import median
from typing import Annotated, Literal, TypeVar

from pydantic import Field, model_validator

from app.domain.provenance import CatalogEntry, Confidence, FigureProvenance, Frozen

HOURS_PER_DAY = 24.0


# --------------------------------------------------------------------------------------------------
# Small shared pieces
# --------------------------------------------------------------------------------------------------


class Span(Frozen):
    """A figure the sources give as a number or a ``[low, high]`` range (both non-negative)."""

    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_number_or_pair(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"low": value, "high": value}
        if isinstance(value, list | tuple):
            if len(value) != 2:
                raise ValueError("a range is [low, high]")
            return {"low": value[0], "high": value[1]}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.low > self.high:
            raise ValueError(f"range low {self.low} is above high {self.high}")
        return self

    @property
    def mid(self) -> float:
        """The value used by default: the midpoint of the range (the number itself when not a range)."""
        return (self.low + self.high) / 2

    @property
    def is_range(self) -> bool:
        return self.low != self.high


class EffectiveDated(FigureProvenance):
    """A figure with its own provenance, in force on ``[effective_from, effective_to)``."""

    effective_from: date | None = None
    effective_to: date | None = None

    @model_validator(mode="after")
    def _dates_ordered(self) -> EffectiveDated:
        if self.effective_from and self.effective_to and self.effective_from >= self.effective_to:
            raise ValueError(
                f"effective_from {self.effective_from} is not before effective_to {self.effective_to}"
            )
        return self

    def in_force(self, on: date) -> bool:
        starts_ok = self.effective_from is None or self.effective_from <= on
        ends_ok = self.effective_to is None or on < self.effective_to
        return starts_ok and ends_ok

    def overlaps(self, other: EffectiveDated) -> bool:
        self_before_other = (
            self.effective_to is not None
            and other.effective_from is not None
            and (self.effective_to <= other.effective_from)
        )
        other_before_self = (
            other.effective_to is not None
            and self.effective_from is not None
            and (other.effective_to <= self.effective_from)
        )
        return not (self_before_other or other_before_self)

    def window(self) -> str:
        return f"[{self.effective_from or '-inf'}, {self.effective_to or '+inf'})"


D = TypeVar("D", bound=EffectiveDated)
E = TypeVar("E", bound=CatalogEntry)


def _start(item: EffectiveDated) -> date:
    return item.effective_from or date.min


def in_force(items: Iterable[D], on: date | None) -> D | None:
    """The item in force on ``on``; with ``on=None`` the current (open-ended) one. None when there is none."""
    if on is None:
        candidates = [i for i in items if i.effective_to is None]
    else:
        candidates = [i for i in items if i.in_force(on)]
    return max(candidates, key=_start, default=None)


def first_overlap(items: Sequence[D]) -> tuple[D, D] | None:
    """The first pair of items whose effective windows overlap, if any."""
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            if a.overlaps(b):
                return a, b
    return None


def _check_no_overlap(what: str, items: Sequence[EffectiveDated]) -> None:
    pair = first_overlap(items)
    if pair is not None:
        raise ValueError(f"{what}: effective dates overlap: {pair[0].window()} and {pair[1].window()}")


def by_slug(items: Sequence[E], slug: str, kind: str) -> E:
    """The entry with ``slug``; KeyError listing the known slugs otherwise."""
    for item in items:
        if item.slug == slug:
            return item
    raise KeyError(f"unknown {kind} {slug!r}; known: {', '.join(i.slug for i in items)}")


def _nested_sources(*groups: Iterable[FigureProvenance | None]) -> set[str]:
    return {p.source for group in groups for p in group if p is not None}


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

Fraction = Annotated[float, Field(ge=0, le=1)]


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


# --------------------------------------------------------------------------------------------------
# Self-build assumptions (selfbuild.toml)
# --------------------------------------------------------------------------------------------------


class ServerPrice(CatalogEntry):
    """Purchase price of one server (or rack, for NVL72); ``nodes`` are the reference nodes it prices."""

    system: str
    nodes: tuple[str, ...] = ()
    price_usd: Span
    includes: str = ""


class ComponentPrice(CatalogEntry):
    """A fabric or capex component price, per ``per`` (item, node, gpu or whole cluster)."""

    item: str
    kind: Literal["switch", "cables-optics", "optics", "nic", "gpu", "all-in"]
    per: Literal["item", "node", "gpu", "cluster"]
    price_usd: Span
    fabric_tiers: int | None = Field(default=None, ge=1, le=3)
    cluster_nodes: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _cluster_size(self) -> ComponentPrice:
        if (self.per == "cluster") != (self.cluster_nodes is not None):
            raise ValueError("cluster_nodes is required exactly when per = 'cluster'")
        return self

    @property
    def usd_per_node(self) -> float | None:
        """Per-node value for cluster-wide figures (midpoint), or the per-node figure itself."""
        if self.per == "node":
            return self.price_usd.mid
        if self.per == "cluster" and self.cluster_nodes:
            return self.price_usd.mid / self.cluster_nodes
        return None


class SystemPower(CatalogEntry):
    """Maximum power of a system (``servers`` of them for a scalable unit)."""

    system: str
    nodes: tuple[str, ...] = ()
    servers: int = Field(default=1, ge=1)
    max_kw: Span


class PueOption(CatalogEntry):
    pue: Span

    @model_validator(mode="after")
    def _at_least_one(self) -> PueOption:
        if self.pue.low < 1:
            raise ValueError("PUE is at least 1.0")
        return self


class ElectricityPrice(CatalogEntry):
    region: str
    usd_per_kwh: float = Field(ge=0)


class ColocationPrice(CatalogEntry):
    market: str
    usd_per_kw_month: Span


class DepreciationOption(CatalogEntry):
    years: float = Field(gt=0)


class StaffAssumptions(CatalogEntry):
    engineer_base_salary_usd_per_year: float = Field(ge=0)
    facility_and_ops_lifetime_usd_per_node: float = Field(ge=0)
    fte_per_1000_gpus: float | None = Field(default=None, ge=0)
    loaded_cost_multiplier: float | None = Field(default=None, ge=1)


class SelfBuildFactors(CatalogEntry):
    avg_power_fraction_during_training: Fraction
    interconnect_cost_fraction: Fraction


class SelfBuildDefaults(Frozen):
    """The default choice for each option list, and why; overridable per scenario."""

    server_price: dict[str, str]
    switch_price: str
    pue: str
    electricity: str
    colocation: str
    depreciation: str
    reasons: dict[str, str] = Field(default_factory=dict)


class SelfBuild(Frozen):
    server_prices: tuple[ServerPrice, ...]
    component_prices: tuple[ComponentPrice, ...]
    system_power: tuple[SystemPower, ...]
    pue_options: tuple[PueOption, ...]
    electricity_prices: tuple[ElectricityPrice, ...]
    colocation_prices: tuple[ColocationPrice, ...]
    depreciation_options: tuple[DepreciationOption, ...]
    staff: StaffAssumptions
    factors: SelfBuildFactors
    defaults: SelfBuildDefaults

    def server_price_for(self, node: str) -> ServerPrice:
        """The default server price of a reference node."""
        if node not in self.defaults.server_price:
            raise KeyError(
                f"no default server price for node {node!r}; known: {', '.join(self.defaults.server_price)}"
            )
        return by_slug(self.server_prices, self.defaults.server_price[node], "server price")

    def system_power_for(self, node: str) -> SystemPower:
        matches = [p for p in self.system_power if node in p.nodes]
        if not matches:
            known = sorted({n for p in self.system_power for n in p.nodes})
            raise KeyError(f"no system power for node {node!r}; known: {', '.join(known)}")
        return matches[0]

    def pue_option(self, slug: str | None = None) -> PueOption:
        return by_slug(self.pue_options, slug or self.defaults.pue, "PUE option")

    def electricity(self, slug: str | None = None) -> ElectricityPrice:
        return by_slug(self.electricity_prices, slug or self.defaults.electricity, "electricity price")

    def colocation(self, slug: str | None = None) -> ColocationPrice:
        return by_slug(self.colocation_prices, slug or self.defaults.colocation, "colocation price")

    def depreciation(self, slug: str | None = None) -> DepreciationOption:
        return by_slug(self.depreciation_options, slug or self.defaults.depreciation, "depreciation option")

    def component(self, slug: str) -> ComponentPrice:
        return by_slug(self.component_prices, slug, "component price")

    def switch_price(self) -> ComponentPrice:
        return self.component(self.defaults.switch_price)


# --------------------------------------------------------------------------------------------------
# Reliability (reliability.toml)
# --------------------------------------------------------------------------------------------------


class FailureCause(Frozen):
    cause: str
    count: int = Field(ge=0)
    share_pct: float = Field(ge=0, le=100)
    confidence: Confidence = Confidence.high


class MttfPoint(Frozen):
    gpus: int = Field(ge=1)
    mttf_hours: float = Field(gt=0)
    projected: bool = False
    note: str = ""


class EttrPoint(Frozen):
    gpus: int = Field(ge=1)
    checkpoint_interval_s: float | None = Field(default=None, gt=0)
    restart_s: float | None = Field(default=None, gt=0)
    ettr: Fraction


class FailureRecord(CatalogEntry):
    """Failure figures of one published run or study.

    :attr:`failures_per_gpu_hour` is derived, never typed in: from unexpected interruptions over GPU-hours,
    else from a failure rate per 1000 node-days, else from a job MTTI over the job's GPUs.
    """

    run: str
    accelerator: str
    gpus: int | None = Field(default=None, ge=1)
    gpus_per_node: int = Field(default=8, ge=1)
    duration_days: float | None = Field(default=None, gt=0)
    unexpected_interruptions: int | None = Field(default=None, ge=0)
    planned_interruptions: int | None = Field(default=None, ge=0)
    failures_per_1000_node_days: float | None = Field(default=None, ge=0)
    job_mtti_hours: float | None = Field(default=None, gt=0)
    job_mtti_is_upper_bound: bool = False
    job_uptime: Span | None = None
    effective_training_time_fraction: float | None = Field(default=None, ge=0, le=1)
    hardware_share_of_unexpected: float | None = Field(default=None, ge=0, le=1)
    gpu_share_of_unexpected: float | None = Field(default=None, ge=0, le=1)
    manual_interventions: int | None = Field(default=None, ge=0)
    manual_restarts_min: int | None = Field(default=None, ge=0)
    automatic_recoveries_min: int | None = Field(default=None, ge=0)
    hosts_cycled_min: int | None = Field(default=None, ge=0)
    model_params_b: float | None = Field(default=None, gt=0)
    started: date | None = None
    causes: tuple[FailureCause, ...] = ()
    mttf_points: tuple[MttfPoint, ...] = ()
    ettr_points: tuple[EttrPoint, ...] = ()

    @property
    def rate_basis(self) -> str | None:
        if self.unexpected_interruptions is not None and self.gpus and self.duration_days:
            return "unexpected interruptions / GPU-hours"
        if self.failures_per_1000_node_days is not None:
            return "failures per 1000 node-days"
        if self.job_mtti_hours is not None and self.gpus:
            return "job MTTI (lower bound on the rate)" if self.job_mtti_is_upper_bound else "job MTTI"
        return None

    @property
    def failures_per_gpu_hour(self) -> float | None:
        basis = self.rate_basis
        if basis is None:
            return None
        if basis.startswith("unexpected"):
            assert self.unexpected_interruptions is not None and self.gpus and self.duration_days
            return self.unexpected_interruptions / (self.gpus * self.duration_days * HOURS_PER_DAY)
        if basis.startswith("failures per 1000"):
            assert self.failures_per_1000_node_days is not None
            return self.failures_per_1000_node_days / 1000 / (HOURS_PER_DAY * self.gpus_per_node)
        assert self.job_mtti_hours is not None and self.gpus
        return 1 / (self.job_mtti_hours * self.gpus)

    def job_mtbf_hours(self, gpus: int | None = None) -> float | None:
        """Mean time between failures of a job on ``gpus`` GPUs (the run's own size when None)."""
        rate = self.failures_per_gpu_hour
        n = gpus or self.gpus
        if rate is None or not n or rate == 0:
            return None
        return 1 / (rate * n)


class RestartTime(CatalogEntry):
    """Time lost per failure to detection, rescheduling and reload (not sourced separately)."""

    restart_s: float = Field(gt=0)
    checkpoint_overhead_s: float | None = Field(default=None, gt=0)


class TypicalMfu(CatalogEntry):
    mfu: Span

    @model_validator(mode="after")
    def _fraction(self) -> TypicalMfu:
        if self.mfu.high > 1:
            raise ValueError("MFU is a fraction <= 1")
        return self


class ReliabilityDefaults(Frozen):
    failure_rate: str
    failure_rate_reason: str
    restart_time: str
    restart_time_reason: str


class Reliability(Frozen):
    failure_records: tuple[FailureRecord, ...]
    restart_times: tuple[RestartTime, ...]
    typical_mfu: tuple[TypicalMfu, ...]
    defaults: ReliabilityDefaults

    def failure_record(self, slug: str | None = None) -> FailureRecord:
        return by_slug(self.failure_records, slug or self.defaults.failure_rate, "failure record")

    @property
    def default_failure_record(self) -> FailureRecord:
        return self.failure_record()

    def restart_time(self, slug: str | None = None) -> RestartTime:
        return by_slug(self.restart_times, slug or self.defaults.restart_time, "restart time")


# --------------------------------------------------------------------------------------------------
# Checkpointing (reliability.toml)
# --------------------------------------------------------------------------------------------------


class CheckpointFormula(CatalogEntry):
    formula: str
    variables: dict[str, str] = Field(default_factory=dict)


class CheckpointSize(CatalogEntry):
    """Bytes per parameter of a checkpoint or training-state layout."""

    bytes_per_param: Span
    layout: str


class MeasuredCheckpoint(CatalogEntry):
    """A published checkpoint size; bytes per parameter derived."""

    params_b: float = Field(gt=0)
    full_checkpoint_tbyte: float = Field(gt=0)
    weights_gbyte: float | None = Field(default=None, gt=0)

    @property
    def bytes_per_param(self) -> float:
        return self.full_checkpoint_tbyte * 1e12 / (self.params_b * 1e9)

    @property
    def weights_bytes_per_param(self) -> float | None:
        return None if self.weights_gbyte is None else self.weights_gbyte * 1e9 / (self.params_b * 1e9)


class AsyncCheckpoint(CatalogEntry):
    """A measured checkpoint save: blocking time (sync/async) and background phase."""

    model: str
    gpus: int | None = Field(default=None, ge=1)
    accelerator: str | None = None
    sync_blocking_s: float | None = Field(default=None, gt=0)
    async_blocking_s: Span | None = None
    background_before_s: float | None = Field(default=None, gt=0)
    background_after_s: float | None = Field(default=None, gt=0)
    tokens_per_s_normal: float | None = Field(default=None, gt=0)
    tokens_per_s_during_background: float | None = Field(default=None, gt=0)

    @property
    def background_slowdown(self) -> float | None:
        """Share of throughput lost while the background write runs: 1 − tokens/s during it / normal."""
        if self.tokens_per_s_normal is None or self.tokens_per_s_during_background is None:
            return None
        return max(0.0, 1.0 - self.tokens_per_s_during_background / self.tokens_per_s_normal)

    @property
    def async_speedup(self) -> float | None:
        if self.sync_blocking_s is None or self.async_blocking_s is None:
            return None
        return self.sync_blocking_s / self.async_blocking_s.mid


class StorageBandwidth(CatalogEntry):
    """Storage throughput reference; ``scope`` says whether per node or for the whole storage system."""

    scope: Literal["aggregate", "per-node"]
    direction: Literal["read", "write", "unspecified"]
    sustained_gbyte_per_s: float | None = Field(default=None, gt=0)
    peak_gbyte_per_s: float | None = Field(default=None, gt=0)
    capacity_pbyte: float | None = Field(default=None, gt=0)
    servers: int | None = Field(default=None, ge=1)


class StorageTier(CatalogEntry):
    """How checkpoint bandwidth scales with the cluster: per-node write and read limits (kept apart), and the
    storage system's aggregate, either fixed or a share per compute node (a system sized with the cluster)."""

    write_gbyte_per_s_per_node: float = Field(gt=0)
    read_gbyte_per_s_per_node: float = Field(gt=0)
    aggregate_write_gbyte_per_s: float | None = Field(default=None, gt=0)
    aggregate_read_gbyte_per_s: float | None = Field(default=None, gt=0)
    aggregate_write_gbyte_per_s_per_node: float | None = Field(default=None, gt=0)
    aggregate_read_gbyte_per_s_per_node: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_aggregate_each(self) -> StorageTier:
        for d in ("write", "read"):
            fixed = getattr(self, f"aggregate_{d}_gbyte_per_s")
            scaled = getattr(self, f"aggregate_{d}_gbyte_per_s_per_node")
            if (fixed is None) == (scaled is None):
                raise ValueError(
                    f"give exactly one of aggregate_{d}_gbyte_per_s and aggregate_{d}_gbyte_per_s_per_node"
                )
        return self

    def aggregate_gbyte_per_s(self, direction: Literal["write", "read"], nodes: int) -> float:
        """The storage system's bandwidth for a cluster of ``nodes``: fixed, or nodes × the per-node share."""
        fixed = getattr(self, f"aggregate_{direction}_gbyte_per_s")
        if fixed is not None:
            return float(fixed)
        return nodes * getattr(self, f"aggregate_{direction}_gbyte_per_s_per_node")

    def aggregate_field(self, direction: Literal["write", "read"]) -> str:
        fixed = f"aggregate_{direction}_gbyte_per_s"
        return fixed if getattr(self, fixed) is not None else f"{fixed}_per_node"


class CheckpointDefaults(Frozen):
    checkpoint_size: str
    checkpoint_size_reason: str
    storage_tier: str
    storage_tier_reason: str
    async_background: str


class Checkpointing(Frozen):
    formulas: tuple[CheckpointFormula, ...]
    sizes: tuple[CheckpointSize, ...]
    measured: tuple[MeasuredCheckpoint, ...]
    async_saves: tuple[AsyncCheckpoint, ...]
    storage_bandwidths: tuple[StorageBandwidth, ...]
    storage_tiers: tuple[StorageTier, ...]
    cpu_memory_overhead: str
    defaults: CheckpointDefaults

    def storage_tier(self, slug: str | None = None) -> StorageTier:
        return by_slug(self.storage_tiers, slug or self.defaults.storage_tier, "storage tier")

    def size(self, slug: str | None = None) -> CheckpointSize:
        return by_slug(self.sizes, slug or self.defaults.checkpoint_size, "checkpoint size")

    def formula(self, slug: str) -> CheckpointFormula:
        return by_slug(self.formulas, slug, "checkpoint formula")


class CheckpointNotes(Frozen):
    cpu_memory_overhead: str


# --------------------------------------------------------------------------------------------------
# The catalog and its loader
# --------------------------------------------------------------------------------------------------


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
