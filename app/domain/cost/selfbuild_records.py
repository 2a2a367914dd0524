"""Self-build assumption records of ``data/selfbuild.toml``: server and component prices, system power,
PUE, electricity, colocation, depreciation, staff, and the defaults that pick among them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from app.domain.figures import Fraction, Span, by_slug
from app.domain.provenance import CatalogEntry, Frozen

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
