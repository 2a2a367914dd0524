"""What the cost model takes besides the catalog: the pricing options, the overrides of every input
(:class:`CostOverrides`, :class:`SelfBuildOverrides`), :class:`CostInputError`, the documented defaults
used when the catalog has no figure, and the helpers that record each figure as an assumption.
"""

from __future__ import annotations

from datetime import date
from enum import StrEnum
from typing import Any

from pydantic import Field, model_validator

from app.domain.estimator.estimate import Assumption
from app.domain.provenance import CatalogEntry, FigureProvenance, Frozen
from app.domain.reliability.formulas import ReliabilityOverrides

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
OTHER_CLOUD_OPTIONS = (CostOption.on_demand, CostOption.commit_1yr, CostOption.commit_3yr)
"""The options other clouds' prices are quoted for (on-demand and their commitment discounts)."""
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
