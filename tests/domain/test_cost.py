"""Cost model: dated cloud prices per option, commitments, self-build TCO and fabric, monthly table, properties."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import app.domain.cost as cost
from app.domain.cost.cloud import cloud_prices, commitment_usd, instance_for_accelerator
from app.domain.cost.gpu_hour import usd_per_gpu_hour
from app.domain.cost.inputs import CostInputError, CostOption, CostOverrides, SelfBuildOverrides
from app.domain.cost.monthly import monthly_cost
from app.domain.cost.selfbuild import (
    SelfBuildInputs,
    break_even_month,
    cumulative_usd,
    self_build_inputs,
    self_build_tco,
    self_build_wins_at_utilisation,
)
from app.domain.cost.serving import serving_check
from app.domain.cost.training import TrainingJob, training_cost
from app.domain.reliability.formulas import ReliabilityOverrides

HOURS = 730.0
P5_OD = 55.04
P5_SPOT_MEDIAN = (19.2531 + 21.1543) / 2  # median of the four post-cut us-east-1 AZ prices


def job(**changes) -> TrainingJob:
    values = dict(model="llama3.1-70b", accelerator="h100-sxm", gpus=1024, parameters=70_000_000_000, tokens=1e12,
                  cloud_tokens_per_s=1.0e6, self_build_tokens_per_s=1.0e6, plan_checkpoint_bytes_per_param=14)  # fmt: skip
    values.update(changes)
    return TrainingJob(**values)


def option(result, name: str):
    return next(o for o in result.options if o.option.value == name)


def hand_inputs(**changes) -> SelfBuildInputs:
    values = dict(server_usd=300_000, switch_usd=0, switch_radix=64, cables_optics_usd_per_port=(0, 0, 0), nic_usd=0,
                  storage_tb=0, storage_usd_per_tb=0, installation_fraction=0, max_kw_per_node=10,
                  avg_power_fraction=0.75, pue=1.5, electricity_usd_per_kwh=0.10, colocation_usd_per_kw_month=200,
                  staff_fte_per_1000_gpus=0, staff_usd_per_fte_year=0, maintenance_fraction_per_year=0,
                  depreciation_years=5, residual_fraction=0, cost_of_capital_per_year=0)  # fmt: skip
    values.update(changes)
    return SelfBuildInputs(**values)


def test_docstring_examples() -> None:
    modules = [
        importlib.import_module(f"{cost.__name__}.{m.name}") for m in pkgutil.iter_modules(cost.__path__)
    ]
    results = [doctest.testmod(module) for module in modules]
    assert sum(r.attempted for r in results) >= 10 and sum(r.failed for r in results) == 0


# -- cloud prices -------------------------------------------------------------------------------------------


def test_instance_for_accelerator(catalog) -> None:
    assert instance_for_accelerator(catalog.cost, catalog.hardware, "h100-sxm") == "p5.48xlarge"
    # H200: p5en has an on-demand price, p5e only capacity blocks.
    assert instance_for_accelerator(catalog.cost, catalog.hardware, "h200-sxm") == "p5en.48xlarge"
    with pytest.raises(CostInputError, match="gb200") as err:
        instance_for_accelerator(catalog.cost, catalog.hardware, "gb200")
    assert err.value.field == "gpu"


def test_p5_prices_current_and_before_the_cut(catalog) -> None:
    now = cloud_prices(catalog.cost, "p5.48xlarge")
    assert now.on_demand == P5_OD
    assert now.commit_1yr == pytest.approx(P5_OD * (1 - 0.41))  # no post-cut rate: average discount
    assert now.commit_3yr == pytest.approx(P5_OD * (1 - 0.64))
    assert now.spot == pytest.approx(P5_SPOT_MEDIAN)
    assert now.capacity_block == 39.33
    assert now.off_peak == pytest.approx(P5_OD * 0.7)
    assert now.reserved_spot_mix == pytest.approx(0.5 * now.commit_1yr + 0.5 * now.spot)
    before = cloud_prices(catalog.cost, "p5.48xlarge", CostOverrides(prices_as_of=date(2025, 1, 15)))
    assert before.on_demand == 98.32 and before.commit_1yr == 57.63 and before.commit_3yr == 43.16
    od = next(a for a in now.assumptions if a.name == "p5.48xlarge on-demand")
    assert od.source == "SKY8" and od.as_of == "2026"


def test_price_overrides(catalog) -> None:
    o = CostOverrides(
        on_demand_usd_per_hour=40, commit_1yr_discount=0.5, spot_usd_per_hour=10, off_peak_discount=0.1
    )
    prices = cloud_prices(catalog.cost, "p5.48xlarge", o)
    assert (prices.on_demand, prices.commit_1yr, prices.spot, prices.off_peak) == (40, 20, 10, 36)
    assert any(a.source == "override" for a in prices.assumptions)


def test_usd_per_gpu_hour_for_the_plan_search(catalog) -> None:
    cc = catalog.cost
    assert usd_per_gpu_hour(cc, "p5.48xlarge", "on-demand") == pytest.approx(6.88)
    assert usd_per_gpu_hour(cc, "p5.48xlarge", CostOption.spot) == pytest.approx(P5_SPOT_MEDIAN / 8)
    assert usd_per_gpu_hour(cc, "p5.48xlarge", "on-demand", on=date(2025, 1, 1)) == pytest.approx(98.32 / 8)
    assert usd_per_gpu_hour(cc, "p5e.48xlarge", "on-demand") is None  # capacity blocks only
    assert usd_per_gpu_hour(cc, "p5e.48xlarge", "capacity-block") == pytest.approx(43.26 / 8)
    assert usd_per_gpu_hour(cc, "dgx-h100", "on-demand") is None
    assert usd_per_gpu_hour(cc, "p5.48xlarge", "self-build") is None
    own = usd_per_gpu_hour(cc, "dgx-h100", "self-build")
    assert own is not None and 1.0 < own < usd_per_gpu_hour(cc, "p5.48xlarge", "on-demand")
    with pytest.raises(ValueError):
        usd_per_gpu_hour(cc, "p5.48xlarge", "layaway")


# -- commitments ------------------------------------------------------------------------------------------


def test_commitment_pays_the_whole_term() -> None:
    run, committed = commitment_usd(10.0, 2, 1000.0, 1)
    assert run == 20_000 and committed == 10.0 * 2 * 8760
    run, committed = commitment_usd(10.0, 2, 20_000.0, 1)  # longer than the term: renewed at the same rate
    assert run == committed == 400_000


@given(rate=st.floats(min_value=0.01, max_value=500), instances=st.integers(min_value=1, max_value=10_000),
       hours=st.floats(min_value=0.1, max_value=100_000), years=st.sampled_from([1, 3]))  # fmt: skip
def test_commitment_never_cheaper_than_its_rate_allows(
    rate: float, instances: int, hours: float, years: int
) -> None:
    run, committed = commitment_usd(rate, instances, hours, years)
    assert committed >= run * (1 - 1e-12)
    assert committed >= rate * instances * years * 8760 * (1 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(discount=st.floats(min_value=0, max_value=0.9), tokens=st.floats(min_value=1e9, max_value=1e14))
def test_training_commitment_never_below_the_discounted_rate(catalog, discount: float, tokens: float) -> None:
    o = CostOverrides(commit_1yr_discount=discount, commit_3yr_discount=discount)
    result = training_cost(catalog.cost, catalog.hardware, job(tokens=tokens), overrides=o,
                           options=[CostOption.commit_1yr, CostOption.commit_3yr])  # fmt: skip
    for row in result.options:
        floor = P5_OD * (1 - discount) * row.instances * row.wall_clock_hours
        assert row.total_usd >= floor * (1 - 1e-9)
        years = 1 if row.option is CostOption.commit_1yr else 3
        assert row.committed_usd >= P5_OD * (1 - discount) * row.instances * years * 8760 * (1 - 1e-9)


# -- training cost ------------------------------------------------------------------------------------------


def test_training_cost_every_option(catalog) -> None:
    result = training_cost(catalog.cost, catalog.hardware, job())
    assert result.instance == "p5.48xlarge" and result.instances == 128
    assert {o.option for o in result.options} == set(CostOption)
    od = option(result, "on-demand")
    compute_h = 1e12 / 1e6 / 3600
    assert od.compute_hours == pytest.approx(compute_h)
    assert od.wall_clock_hours == pytest.approx(compute_h / result.goodput)
    assert od.days == pytest.approx(od.wall_clock_hours / 24)
    assert od.run_usd == pytest.approx(P5_OD * 128 * od.wall_clock_hours)
    assert od.total_usd == pytest.approx(od.run_usd + od.storage_usd + od.data_transfer_usd)
    assert od.usd_per_1b_tokens == pytest.approx(od.total_usd / 1000)
    assert od.expected_failures == pytest.approx(od.wall_clock_hours / od.job_mtbf_hours)
    # A 12-day run on a 1-year commitment pays for the year.
    c1 = option(result, "commit-1yr")
    assert c1.committed_usd == pytest.approx(P5_OD * 0.59 * 128 * 8760)
    assert c1.run_usd < c1.committed_usd and "committed but unused" in c1.notes[0]
    spot = option(result, "spot")
    assert spot.goodput < od.goodput and spot.days > od.days
    assert any("capacity risk" in n for n in spot.notes)
    block = option(result, "capacity-block")
    assert any("64" in n for n in block.notes)  # 128 instances exceed one block
    own = option(result, "self-build")
    assert own.total_usd < own.committed_usd  # amortised share < cash outlay
    assert (
        result.self_build.fabric.size.leaf_switches == 32
        and result.self_build.fabric.size.spine_switches == 16
    )
    from app.domain.cost.training import option_label

    assert result.cheapest in {option_label(o) for o in (*result.options, *result.other_clouds)}
    assert result.job_mtbf_hours == pytest.approx(result.reliability.job_mtbf_hours)
    assert result.rule_of_thumb_extra_days > 0


def test_off_peak_window_stretches_the_calendar(catalog) -> None:
    full = option(
        training_cost(catalog.cost, catalog.hardware, job(), options=[CostOption.off_peak]), "off-peak"
    )
    night = training_cost(catalog.cost, catalog.hardware, job(), options=[CostOption.off_peak],
                          overrides=CostOverrides(off_peak_hours_per_day=8))  # fmt: skip
    assert option(night, "off-peak").days == pytest.approx(full.days * 3)
    assert option(night, "off-peak").total_usd == pytest.approx(full.total_usd)


def test_unavailable_options_say_why(catalog) -> None:
    result = training_cost(catalog.cost, catalog.hardware, job(accelerator="h200-sxm"),
                           overrides=CostOverrides(instance="p5e.48xlarge"))  # fmt: skip
    od = option(result, "on-demand")
    assert not od.available and "p5e.48xlarge" in od.reason
    assert option(result, "capacity-block").available


def test_instance_must_carry_the_accelerator(catalog) -> None:
    with pytest.raises(CostInputError) as err:
        training_cost(catalog.cost, catalog.hardware, job(), overrides=CostOverrides(instance="p4d.24xlarge"))
    assert err.value.field == "overrides.instance"


def test_storage_and_data_movement(catalog) -> None:
    result = training_cost(catalog.cost, catalog.hardware, job(), options=[CostOption.on_demand])
    st_ = result.storage
    assert st_.dataset_tb == pytest.approx(4.0)  # 1e12 tokens × 4 B
    assert st_.stored_tb == pytest.approx(4.0 + 2 * 70e9 * 14 / 1e12)
    assert st_.usd_per_month == pytest.approx(st_.stored_tb * 1000 * 0.023)
    assert st_.egress_tb == pytest.approx(0.14)
    assert st_.egress_usd == pytest.approx((140 - 100) * 0.09)  # first 100 GB free
    moved = training_cost(catalog.cost, catalog.hardware, job(), options=[CostOption.on_demand],
                          overrides=CostOverrides(inter_region_tb=10))  # fmt: skip
    assert moved.storage.inter_region_usd == pytest.approx(10_000 * 0.02)
    assert option(moved, "on-demand").total_usd == pytest.approx(option(result, "on-demand").total_usd + 200)


def test_reliability_overrides_reach_the_cost(catalog) -> None:
    o = CostOverrides(
        reliability=ReliabilityOverrides(checkpoint_mode="sync", storage_write_gbyte_per_s_aggregate=10)
    )
    slow = training_cost(catalog.cost, catalog.hardware, job(), overrides=o, options=[CostOption.on_demand])
    fast = training_cost(catalog.cost, catalog.hardware, job(), options=[CostOption.on_demand])
    assert slow.goodput < fast.goodput
    assert option(slow, "on-demand").total_usd > option(fast, "on-demand").total_usd


@settings(max_examples=30, deadline=None)
@given(low=st.floats(min_value=0.5, max_value=500), extra=st.floats(min_value=0.01, max_value=500))
def test_cost_monotonic_in_price(catalog, low: float, extra: float) -> None:
    def total(price: float) -> float:
        o = CostOverrides(on_demand_usd_per_hour=price)
        return option(training_cost(catalog.cost, catalog.hardware, job(), overrides=o,
                                    options=[CostOption.on_demand]), "on-demand").total_usd  # fmt: skip

    assert total(low + extra) > total(low)


@settings(max_examples=20, deadline=None)
@given(low=st.floats(min_value=0, max_value=1e6), extra=st.floats(min_value=1, max_value=1e6))
def test_self_build_monotonic_in_server_price(catalog, low: float, extra: float) -> None:
    def total(price: float) -> float:
        o = CostOverrides(self_build=SelfBuildOverrides(server_usd=price))
        return option(training_cost(catalog.cost, catalog.hardware, job(), overrides=o,
                                    options=[CostOption.self_build]), "self-build").total_usd  # fmt: skip

    assert total(low + extra) > total(low)


# -- self-build ---------------------------------------------------------------------------------------------


def test_twelve_month_tco_by_hand() -> None:
    tco = self_build_tco(hand_inputs(), node="dgx-h100", nodes=1, gpus_per_node=8, nics_per_node=8)
    assert tco.power_usd_per_month == pytest.approx(10 * 0.75 * 1.5 * 0.10 * 730)  # 821.25
    assert tco.colocation_usd_per_month == 2000
    assert tco.capital_usd_per_month == 5000
    assert tco.monthly_equivalent_usd == pytest.approx(7821.25)
    assert cumulative_usd(tco.capex_usd, tco.opex_usd_per_month, 12)[12] == pytest.approx(333_855)
    assert 12 * tco.monthly_equivalent_usd == pytest.approx(93_855)
    # With staff, maintenance and 8 % cost of capital.
    tco = self_build_tco(hand_inputs(staff_fte_per_1000_gpus=125, staff_usd_per_fte_year=120_000,
                                     maintenance_fraction_per_year=0.04, cost_of_capital_per_year=0.08),
                         node="dgx-h100", nodes=1, gpus_per_node=8, nics_per_node=8)  # fmt: skip
    assert tco.staff_usd_per_month == pytest.approx(8 / 1000 * 125 * 120_000 / 12)  # one FTE: 10,000
    assert tco.maintenance_usd_per_month == pytest.approx(1000)
    assert tco.capital_usd_per_month == pytest.approx(6082.92, abs=0.01)


def test_fat_tree_1024_gpus_matches_the_superpod(catalog) -> None:
    node = catalog.hardware.node("dgx-h100")
    inputs, _ = self_build_inputs(catalog.cost, catalog.hardware, node)
    tco = self_build_tco(inputs, node="dgx-h100", nodes=128, gpus_per_node=8, nics_per_node=8)
    size = tco.fabric.size
    assert (size.tiers, size.leaf_switches, size.spine_switches, size.core_switches) == (2, 32, 16, 0)
    assert (size.cables_endpoint_leaf, size.cables_leaf_spine) == (1024, 1024)
    assert tco.fabric.switches_usd == 48 * 36_000
    assert tco.fabric.cables_optics_usd == pytest.approx(1024 * 20_480 / 8)
    assert tco.fabric.nics_usd == 0  # the Cheah server price includes 8 × 400G NICs
    # 4,096 GPUs go to three tiers: 128 leaves, 128 spines, 64 cores.
    big = self_build_tco(inputs, node="dgx-h100", nodes=512, gpus_per_node=8, nics_per_node=8).fabric.size
    assert (big.tiers, big.leaf_switches, big.spine_switches, big.core_switches) == (3, 128, 128, 64)
    # The Cheah all-in cross-check: $47-52k per GPU including the fabric.
    assert 40_000 < tco.capex_usd / 1024 < 55_000


def test_self_build_defaults_carry_sources(catalog) -> None:
    inputs, assumptions = self_build_inputs(catalog.cost, catalog.hardware, catalog.hardware.node("dgx-h100"))
    assert inputs.server_usd == 310_000 and inputs.pue == pytest.approx(1.55)
    assert inputs.electricity_usd_per_kwh == 0.0806 and inputs.colocation_usd_per_kw_month == 184.06
    assert (
        inputs.max_kw_per_node == 10.2
        and inputs.avg_power_fraction == 0.75
        and inputs.depreciation_years == 5
    )
    by_name = {a.name: a for a in assumptions}
    assert by_name["electricity"].source == "EIA" and by_name["colocation"].source == "CBRE"
    assert by_name["cost of capital"].source == "default" and by_name["cost of capital"].confidence == "low"
    with pytest.raises(CostInputError) as err:
        self_build_inputs(catalog.cost, catalog.hardware, catalog.hardware.node("dgx-h100"),
                          SelfBuildOverrides(server_price="nope"))  # fmt: skip
    assert err.value.field == "overrides.self_build.server_price"


def test_break_even_and_utilisation() -> None:
    assert break_even_month(300_000, 3_000, 33_000) == 10
    assert break_even_month(300_000, 3_000, 3_000) is None
    assert self_build_wins_at_utilisation(10_000, 40_000) == 0.25


# -- monthly table ------------------------------------------------------------------------------------------


def test_eight_h100_monthly_table(catalog) -> None:
    """The seed article's table (on-demand ~$60K, reserved ~$30K, self-build ~$300K + ~$8K/month, spot ~$15K),
    recomputed from the dated catalog prices."""
    table = monthly_cost(catalog.cost, catalog.hardware, instance="p5.48xlarge", nodes=1)
    assert table.gpus == 8 and table.self_build_node == "dgx-h100"
    assert table.on_demand_usd_per_month == pytest.approx(P5_OD * HOURS)  # 40,179
    assert table.commit_1yr_usd_per_month == pytest.approx(P5_OD * 0.59 * HOURS)  # 23,706
    assert table.commit_3yr_usd_per_month == pytest.approx(P5_OD * 0.36 * HOURS)  # 14,465
    assert table.spot_usd_per_month == pytest.approx(P5_SPOT_MEDIAN * HOURS)  # 14,749
    assert table.capacity_block_usd_per_month == pytest.approx(39.33 * HOURS)
    assert table.self_build_capex_usd == pytest.approx(310_000 * 1.02)  # one node: no fabric
    assert 3_000 < table.self_build_opex_usd_per_month < 8_000
    on_demand = next(r for r in table.rows if r.option is CostOption.on_demand)
    assert on_demand.break_even_month == pytest.approx(
        table.self_build_capex_usd / (table.on_demand_usd_per_month - table.self_build_opex_usd_per_month)
    )
    assert on_demand.self_build_wins_at_utilisation == pytest.approx(
        table.self_build_monthly_equivalent_usd / table.on_demand_usd_per_month
    )
    series = table.cumulative
    assert series.months[:3] == (0, 1, 2) and len(series.months) == 37
    assert series.usd["self-build"][0] == table.self_build_capex_usd
    assert series.usd["on-demand"][12] == pytest.approx(12 * table.on_demand_usd_per_month)


def test_monthly_table_before_the_price_cut(catalog) -> None:
    table = monthly_cost(catalog.cost, catalog.hardware, instance="p5.48xlarge", nodes=1,
                         overrides=CostOverrides(prices_as_of=date(2025, 3, 1)))  # fmt: skip
    assert table.on_demand_usd_per_month == pytest.approx(98.32 * HOURS)  # 71,774: the article's era
    assert table.commit_1yr_usd_per_month == pytest.approx(57.63 * HOURS)


def test_monthly_options_subset(catalog) -> None:
    table = monthly_cost(catalog.cost, catalog.hardware, instance="p5.48xlarge", nodes=4,
                         options=[CostOption.on_demand, CostOption.self_build])  # fmt: skip
    assert {r.option for r in table.rows} == {CostOption.on_demand, CostOption.self_build}
    assert table.spot_usd_per_month is None and table.on_demand_usd_per_month == pytest.approx(
        4 * P5_OD * HOURS
    )
    assert table.self_build.nodes == 4 and table.self_build.fabric.size.tiers == 1


# -- serving ------------------------------------------------------------------------------------------------


def test_serving_check(catalog) -> None:
    arch = catalog.architecture("llama3.1-405b")
    check = serving_check(arch, 405_853_388_800, catalog.hardware, catalog.cost, context_tokens=8192, batch=1)
    fits = {f.instance: f for f in check.instances}
    assert not fits["p5.48xlarge"].fits  # 8 × 80 GB < 812 GB of bf16 weights
    assert fits["p5en.48xlarge"].fits and fits["p5en.48xlarge"].gpus_needed == 8
    assert check.cheapest_fitting == "p5en.48xlarge"
    assert check.kv_cache_bytes_per_token == 126 * 2 * 8 * 128 * 2
    small = serving_check(catalog.architecture("llama3.1-8b"), 8_030_261_248, catalog.hardware, catalog.cost,
                          context_tokens=8192, batch=4)  # fmt: skip
    g5 = next(f for f in small.instances if f.instance == "g5.48xlarge")
    assert g5.fits and g5.gpus_needed == 1 and small.cheapest_fitting == "g5.48xlarge"
