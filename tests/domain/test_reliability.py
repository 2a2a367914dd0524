"""Reliability and goodput: hand-worked Young/Daly intervals, Llama 3's MTBF, checkpoint cost, restart, properties."""

from __future__ import annotations

import doctest
import importlib
import math
import pkgutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import app.domain.reliability as reliability
from app.domain.catalog import load_catalog
from app.domain.estimator.plan import Framework, Plan
from app.domain.reliability.formulas import (
    ReliabilityOverrides,
    daly_interval_s,
    first_order_waste,
    goodput,
    job_mtbf_hours,
    plan_checkpoint_bytes_per_param,
    young_interval_s,
)
from app.domain.reliability.report import reliability_report
from app.settings import REPO_ROOT

PARAMS_405B = 405_000_000_000


@pytest.fixture(scope="module")
def cost_catalog():
    return load_catalog(REPO_ROOT / "data").cost


def report(cc, gpus: int = 16_384, parameters: int = PARAMS_405B, **overrides):
    return reliability_report(
        cc,
        gpus=gpus,
        nodes=max(1, gpus // 8),
        parameters=parameters,
        plan_bytes_per_param=14,
        overrides=ReliabilityOverrides(**overrides),
    )


def test_docstring_examples() -> None:
    modules = [
        importlib.import_module(f"{reliability.__name__}.{m.name}")
        for m in pkgutil.iter_modules(reliability.__path__)
    ]
    results = [doctest.testmod(module) for module in modules]
    assert sum(r.attempted for r in results) >= 10 and sum(r.failed for r in results) == 0


def test_young_and_daly_by_hand() -> None:
    # M = 3 h = 10,800 s, δ = 60 s. Young: √(2·60·10,800) = √1,296,000 = 1,138.42 s.
    assert young_interval_s(60, 10_800) == pytest.approx(1138.42, abs=0.01)
    # Daly: x = 60 / 21,600; 1,138.42 × (1 + √x/3 + x/9) − 60 = 1,098.77 s.
    x = 60 / 21_600
    assert daly_interval_s(60, 10_800) == pytest.approx(
        1138.4199 * (1 + math.sqrt(x) / 3 + x / 9) - 60, rel=1e-6
    )
    assert daly_interval_s(60, 10_800) == pytest.approx(1098.77, abs=0.01)
    # δ ≥ 2M: checkpoint every M.
    assert daly_interval_s(7200, 3600) == 3600


def test_reference_worked_rows() -> None:
    """The reference's table (R = 5 min): M = 186 min, δ = 1 min → τ ≈ 19 min, waste ≈ 13 %."""
    m, delta, r = 186 * 60, 60, 300
    tau = young_interval_s(delta, m)
    assert tau / 60 == pytest.approx(19, abs=0.5)
    assert first_order_waste(tau, delta, r, m) == pytest.approx(0.13, abs=0.005)
    # M = 108 min, δ = 5 min → τ ≈ 30 min (Daly; Young gives 32.9), waste ≈ 35 %.
    tau = daly_interval_s(300, 108 * 60)
    assert tau / 60 == pytest.approx(30, abs=0.5)
    assert first_order_waste(tau, 300, r, 108 * 60) == pytest.approx(0.35, abs=0.01)


def test_llama3_405b_mtbf_is_about_3_hours(cost_catalog) -> None:
    rep = report(cost_catalog)
    assert rep.failure_record == "llama3-405b"
    assert rep.job_mtbf_hours == pytest.approx(54 * 24 / 419, rel=1e-9)
    assert 2.9 < rep.job_mtbf_hours < 3.2
    source = next(a for a in rep.assumptions if a.name == "failure rate per GPU-hour")
    assert source.source == "LLAMA3" and source.as_of == "2024-07"


def test_other_failure_records_and_overrides(cost_catalog) -> None:
    rsc1 = report(cost_catalog, failure_record="meta-rsc1-kokolis")
    # Kokolis' r_f model projects 1.8 h at 16,384 GPUs.
    assert rsc1.job_mtbf_hours == pytest.approx(1.8, abs=0.1)
    fixed = report(cost_catalog, failures_per_gpu_hour=1e-5)
    assert fixed.job_mtbf_hours == pytest.approx(1 / (1e-5 * 16_384))
    assert any(a.source == "override" for a in fixed.assumptions)
    with pytest.raises(KeyError, match="llama3-405b"):
        report(cost_catalog, failure_record="nope")


def test_checkpoint_size_from_the_plan() -> None:
    assert plan_checkpoint_bytes_per_param(Plan(framework=Framework.megatron)) == 14
    assert plan_checkpoint_bytes_per_param(Plan(framework=Framework.deepspeed)) == 14
    assert plan_checkpoint_bytes_per_param(Plan(framework=Framework.fsdp2)) == 12


def test_checkpoint_size_defaults_to_the_catalog(cost_catalog) -> None:
    rep = reliability_report(cost_catalog, gpus=8, nodes=1, parameters=7_000_000_000)
    assert rep.checkpoint_bytes_per_param == 14
    assert rep.checkpoint_bytes == pytest.approx(98e9)  # the reference's "7B ≈ 98 GB"


def test_write_time_from_per_node_and_aggregate_bandwidth(cost_catalog) -> None:
    small = report(
        cost_catalog, gpus=32, storage_write_gbyte_per_s_per_node=5, storage_write_gbyte_per_s_aggregate=100
    )
    assert small.storage_write_gbyte_per_s == 20  # 4 nodes × 5 GB/s, under the 100 GB/s cap
    assert small.checkpoint_write_s == pytest.approx(PARAMS_405B * 14 / 20e9)
    big = report(cost_catalog, storage_write_gbyte_per_s_per_node=5, storage_write_gbyte_per_s_aggregate=100)
    assert big.storage_write_gbyte_per_s == 100


def test_sync_blocks_for_the_whole_write_async_for_staging(cost_catalog) -> None:
    sync = report(cost_catalog, checkpoint_mode="sync", storage_write_gbyte_per_s_aggregate=100)
    async_ = report(cost_catalog, checkpoint_mode="async", storage_write_gbyte_per_s_aggregate=100)
    assert sync.checkpoint_blocking_s == pytest.approx(sync.checkpoint_write_s)
    assert async_.checkpoint_blocking_s < sync.checkpoint_blocking_s / 10
    assert async_.goodput > sync.goodput
    # An async save cannot start before the previous background write finished.
    assert async_.checkpoint_interval_s >= async_.checkpoint_write_s
    assert async_.rework_s == pytest.approx(async_.checkpoint_write_s) and sync.rework_s == 0
    fixed = report(cost_catalog, async_blocking_s=2.0)
    assert fixed.checkpoint_blocking_s == 2.0


def test_restart_components_and_elastic(cost_catalog) -> None:
    plain = report(cost_catalog)
    elastic = report(cost_catalog, elastic=True)
    assert plain.restart.reload_s == pytest.approx(
        plain.checkpoint_bytes / (plain.storage_read_gbyte_per_s * 1e9)
    )
    assert plain.restart_s == pytest.approx(60 + 180 + 60 + plain.restart.reload_s)
    assert elastic.restart_s < plain.restart_s and elastic.goodput > plain.goodput


def test_spot_and_rollbacks_add_to_the_failure_rate(cost_catalog) -> None:
    base = report(cost_catalog)
    spot = reliability_report(
        cost_catalog, gpus=16_384, nodes=2048, parameters=PARAMS_405B, spot_instances=2048
    )
    assert spot.spot_interruptions_per_hour == pytest.approx(0.10 * 2048 / 730)
    assert spot.job_mtbf_hours < base.job_mtbf_hours and spot.goodput < base.goodput
    rollbacks = report(cost_catalog, rollbacks_per_day=2)
    assert 1 / rollbacks.job_mtbf_hours == pytest.approx(1 / base.job_mtbf_hours + 2 / 24)


def test_thirty_minute_rule_against_the_optimum(cost_catalog) -> None:
    rep = report(cost_catalog)
    rule = rep.rule_of_thumb
    assert rule.interval_s == 1800
    assert rule.goodput < rep.goodput and rule.goodput_loss > 0.01
    assert rule.extra_wall_clock_fraction == pytest.approx(rep.goodput / rule.goodput - 1)
    fixed = report(cost_catalog, checkpoint_interval_s=1800)
    assert fixed.goodput == pytest.approx(rule.goodput) and fixed.interval_formula == "fixed"


def test_daly_is_near_the_true_optimum_of_the_goodput_model() -> None:
    m, delta, r = 10_800.0, 60.0, 300.0
    best = max(goodput(t, delta, r, m) for t in range(60, 10_000, 5))
    assert goodput(daly_interval_s(delta, m), delta, r, m) == pytest.approx(best, abs=1e-4)


def test_goodput_matches_first_order_when_small(cost_catalog) -> None:
    rep = report(cost_catalog, gpus=1024)
    assert rep.waste_fraction == pytest.approx(rep.first_order_waste_fraction, abs=0.005)


# -- properties ----------------------------------------------------------------------------------------------

rates = st.floats(min_value=1e-8, max_value=1e-2)
gpu_counts = st.integers(min_value=1, max_value=500_000)
seconds = st.floats(min_value=0.01, max_value=1e6)


@given(rate=rates, a=gpu_counts, b=gpu_counts)
def test_more_gpus_shorter_mtbf(rate: float, a: int, b: int) -> None:
    small, large = sorted((a, b))
    assert job_mtbf_hours(rate, large) <= job_mtbf_hours(rate, small)
    if large > small:
        assert job_mtbf_hours(rate, large) < job_mtbf_hours(rate, small)


@given(delta=seconds, mtbf=seconds)
def test_optimal_interval_between_its_bounds(delta: float, mtbf: float) -> None:
    daly = daly_interval_s(delta, mtbf)
    young = young_interval_s(delta, mtbf)
    assert 0 < daly <= mtbf * (1 + 1e-12)
    if delta < 2 * mtbf:
        assert daly <= young * (1 + 1e-12)
    else:
        assert daly == mtbf


@given(interval=seconds, delta=st.floats(min_value=0, max_value=1e5), restart=st.floats(min_value=0, max_value=1e5),
       mtbf=seconds)  # fmt: skip
def test_goodput_in_zero_one(interval: float, delta: float, restart: float, mtbf: float) -> None:
    g = goodput(interval, delta, restart, mtbf)
    assert 0 <= g <= 1
    if restart / mtbf < 50 and (interval + delta) / mtbf < 50:
        assert g > 0


@settings(max_examples=30, deadline=None)
@given(
    gpus=st.integers(min_value=1, max_value=16_384).map(lambda n: n * 8),
    params_b=st.floats(min_value=0.1, max_value=2000),
)
def test_report_goodput_in_zero_one_and_falls_with_scale(cost_catalog, gpus: int, params_b: float) -> None:
    # whole nodes: the default storage grows with the node count, so 12 GPUs on 1 node vs 24 on 3 is not a fair pair
    small = report(cost_catalog, gpus=gpus, parameters=int(params_b * 1e9))
    large = report(cost_catalog, gpus=gpus * 2, parameters=int(params_b * 1e9))
    assert 0 < large.goodput <= small.goodput <= 1
