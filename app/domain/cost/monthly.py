"""The monthly bill of a cluster, rented or owned: per option per month and cumulative series."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from app.domain.cost.cloud import CloudPrices, cloud_prices
from app.domain.cost.inputs import SPOT_CAPACITY_RISK, TERM_YEARS, CostInputError, CostOption, CostOverrides
from app.domain.cost.price_records import CostCatalog
from app.domain.cost.selfbuild import (
    SelfBuildTco,
    break_even_month,
    cumulative_usd,
    self_build_inputs,
    self_build_node_for,
    self_build_tco,
    self_build_wins_at_utilisation,
)
from app.domain.estimator.estimate import Assumption
from app.domain.estimator.hardware import HardwareCatalog
from app.domain.provenance import Frozen
from app.domain.reliability.formulas import HOURS_PER_MONTH


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
