"""One price per GPU-hour for an option (cloud rate or self-build monthly equivalent), for the plan
search's ranking by cost.
"""

from __future__ import annotations

from datetime import date

from app.domain.cost.cloud import cloud_prices
from app.domain.cost.inputs import (
    CABLES_OPTICS,
    DEFAULT_COST_OF_CAPITAL,
    DEFAULT_INSTALLATION_FRACTION,
    DEFAULT_LOADED_COST_MULTIPLIER,
    DEFAULT_MAINTENANCE_FRACTION_PER_YEAR,
    DEFAULT_RESIDUAL_FRACTION,
    DEFAULT_STAFF_FTE_PER_1000_GPUS,
    OTHER_CLOUD_OPTIONS,
    SWITCHES_PER_NODE_2TIER,
    TERM_YEARS,
    CostOption,
    CostOverrides,
)
from app.domain.cost.price_records import CostCatalog
from app.domain.reliability.formulas import HOURS_PER_MONTH


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
    from app.domain.cost.selfbuild import capital_usd_per_month  # the self-build model, for this option only

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
