"""Chart options are plain JSON built by pure functions from domain results."""

from __future__ import annotations

import json

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.schedule import StageTimes, pipeline_schedule
from app.schemas import EstimateRequest, MonthlyCostRequest
from app.services.cost import run_monthly_cost
from app.services.estimate import run_estimate
from app.settings import REPO_ROOT
from app.web import charts

GIB = 1024**3


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(REPO_ROOT / "data")


@pytest.fixture(scope="module")
def est(catalog):
    req = EstimateRequest(model="llama3.1-70b", gpu="h100-sxm", gpus=64, tp=8, pp=4, global_batch=64,
                          seq_len=4096, recompute="selective", tokens=1e11)  # fmt: skip
    return run_estimate(catalog, req)


def test_memory_bars_stack_every_term_per_stage_against_usable(est) -> None:
    option = charts.memory_bars_option(est.memory_by_stage, est.usable_memory_bytes)
    json.dumps(option)
    assert option["xAxis"]["data"][0].startswith("stage 0") and len(option["xAxis"]["data"]) == 4
    assert all(s["stack"] == "memory" for s in option["series"])
    for i, stage in enumerate(est.memory_by_stage):
        stacked = sum(s["data"][i] for s in option["series"])
        assert stacked == pytest.approx(stage.total_bytes / GIB, abs=0.05)
    assert option["series"][0]["markLine"]["data"] == [{"yAxis": round(est.usable_memory_bytes / GIB, 2)}]


def test_deepspeed_start_up_copy_is_a_bar_beside_the_training_stack(catalog) -> None:
    """DeepSpeed ZeRO-3 outside zero.Init holds the whole 16-bit model at start-up: the chart draws it as its own
    bar (stack "startup"), not on top of the training terms, and the training stack still adds up to the allocated
    peak + fragmentation + runtime."""
    req = EstimateRequest(model="llama3.1-8b", gpu="h200-sxm", gpus=8, framework="deepspeed", sharding="zero3",
                          offload="optimizer-cpu", micro_batch=1, global_batch=8, seq_len=8192, recompute="full",
                          fused_cross_entropy=True, zero_init=False)  # fmt: skip
    stage = run_estimate(catalog, req).memory_by_stage[0]
    option = charts.memory_bars_option((stage,), stage.usable_bytes)
    startup = [s for s in option["series"] if s["stack"] == "startup"]
    assert len(startup) == 1 and startup[0]["data"] == [round(stage.startup_bytes / GIB, 2)] == [14.96]
    training = sum(s["data"][0] for s in option["series"] if s["stack"] == "memory")
    expected = stage.allocated_peak_bytes + stage.fragmentation_bytes + stage.runtime_bytes
    assert training == pytest.approx(expected / GIB, abs=0.05)
    zero_init = run_estimate(catalog, req.model_copy(update={"zero_init": True})).memory_by_stage[0]
    assert not [s for s in charts.memory_bars_option((zero_init,), 1)["series"] if s["stack"] == "startup"]


def test_step_breakdown_adds_up_to_the_step(est) -> None:
    option = charts.step_breakdown_option(est.step)
    total = sum(s["data"][0] for s in option["series"])
    assert total == pytest.approx(est.step_time_s, rel=1e-3)
    assert {s["name"] for s in option["series"]} >= {"compute", "pipeline bubble"}


def test_gantt_uses_the_registered_renderer_and_one_bar_per_slot() -> None:
    schedule = pipeline_schedule(4, 2, 8, [StageTimes(1.0, 2.0)])
    option = charts.gantt_option(schedule)
    json.dumps(option)
    assert all(s["type"] == "custom" and s["renderItem"] == charts.GANTT_RENDERER for s in option["series"])
    assert sum(len(s["data"]) for s in option["series"]) == len(schedule.slots) == 4 * 8 * 2 * 2
    assert option["yAxis"]["data"] == ["stage 0", "stage 1", "stage 2", "stage 3"]
    assert option["xAxis"]["max"] == pytest.approx(schedule.makespan_s)
    stage, start, end, mb, chunk = option["series"][0]["data"][0]
    assert stage == 0 and start == 0 and end == pytest.approx(0.5) and mb == 0 and chunk == 0


def test_cumulative_cost_marks_break_even_on_the_self_build_line(catalog) -> None:
    monthly = run_monthly_cost(catalog, MonthlyCostRequest(node="dgx-h100", nodes=8))
    breaks = {r.option.value: r.break_even_month for r in monthly.rows if r.option.value != "self-build"}
    option = charts.cumulative_cost_option(monthly.cumulative.months, monthly.cumulative.usd, breaks)
    json.dumps(option)
    names = [s["name"] for s in option["series"]]
    assert "self-build" in names and "on-demand" in names
    sb = option["series"][names.index("self-build")]
    points = sb["markPoint"]["data"]
    on_demand = next(p for p in points if "on-demand" in p["name"])
    assert on_demand["value"] == f"{breaks['on-demand']:.1f}"
    assert option["series"][names.index("self-build")]["data"][0] > 0  # capex up front


def _option(option: str, amortised: float | None, cash: float | None, days: float | None = 10.0):
    from app.domain.cost.inputs import CostOption
    from app.domain.cost.summary import OptionSummary

    return OptionSummary(label=option, option=CostOption(option), provider="aws", available=amortised is not None,
                         days=days, amortised_usd=amortised, cash_usd=cash)  # fmt: skip


def test_cost_options_chart_skips_unavailable_options() -> None:
    opts = [_option("on-demand", 1000.0, 1000.0), _option("spot", None, None, None)]
    option = charts.cost_options_option(opts)
    assert option["xAxis"]["data"] == ["on-demand"]
    assert option["series"][0]["data"][0]["value"] == 1000 and option["series"][1]["data"] == [10.0]
    assert "subtext" not in option["title"]  # nothing paid out beyond the run: nothing to announce


def test_cost_chart_draws_the_run_and_labels_a_longer_commitment() -> None:
    """An 81-day run on a 3-year commitment: the bar is the run's share, the whole term is written on it and in the
    subtitle (and so in the chart's accessible name), never drawn to the run's scale."""
    opts = [_option("on-demand", 489_411.0, 489_411.0, 81.0), _option("commit-3yr", 176_237.0, 4_165_856.0, 81.0),
            _option("self-build", 136_519.0, 2_738_622.0, 80.0)]  # fmt: skip
    option = charts.cost_options_option(opts)
    bars = option["series"][0]["data"]
    assert [b["value"] for b in bars] == [489_411, 176_237, 136_519]
    assert max(b["value"] for b in bars) == 489_411  # the run's share, not the $4.17M term, sets the scale
    assert "label" not in bars[0] and bars[1]["label"]["formatter"] == "cash $4.17M"
    assert bars[2]["label"]["formatter"] == "cash $2.74M"
    assert (
        "commit-3yr ($4.17M)" in option["title"]["subtext"]
        and "self-build ($2.74M)" in option["title"]["subtext"]
    )
    described = charts.describe_chart(option)
    assert (
        "this run's cost (amortised $): on-demand $489,411" in described
        and "commit-3yr ($4.17M)" in described
    )


def test_pareto_and_compare_options() -> None:
    from types import SimpleNamespace as NS

    plan = NS(tp=8, pp=4, cp=2, ep=1, dp=2)
    cands = [NS(time_to_train_days=d, step_time_s=1.0, usd_per_million_tokens=c, gpus=128, tokens_per_s=1e5,
                margin_bytes=m * 2**30, plan=plan)
             for d, c, m in ((10, 3.0, 5), (8, 4.0, 1), (12, 2.5, 9))]  # fmt: skip
    option = charts.pareto_option(cands, [cands[1], cands[0]])
    assert option["xAxis"]["name"] == "days to train (after failures)"
    assert option["yAxis"]["name"] == "$ / M tokens"
    assert [p[0] for p in option["series"][1]["data"]] == [8, 10]
    assert [p[2] for p in option["series"][0]["data"]] == [5, 1, 9]  # headroom is the colour dimension
    assert "cp 2" in option["series"][0]["data"][0][3]  # every degree in the label
    steps = [NS(**{a: 1.0 for a, _, _ in charts.STEP_TERMS})] * 2
    cmp = charts.compare_option(["a", "b"], steps, [40.0, 50.0])
    assert cmp["xAxis"]["data"] == ["a", "b"] and cmp["series"][-1]["data"] == [40.0, 50.0]
    cost = charts.compare_cost_option(["a", "b"], [0, 1], [[0, 10], None])
    assert [s["name"] for s in cost["series"]] == ["a"]


def test_the_cp_bar_names_the_exchange_not_the_ring(catalog) -> None:
    """An all-gather CP plan (Transformer Engine's AttnFuncWithCPAndKVAllGather) has no ring: the step chart calls
    the CP term the K/V exchange, which is true of both exchanges."""
    req = EstimateRequest(model="llama3.1-8b", gpu="h100-sxm", gpus=8, framework="megatron", tp=2, cp=4,
                          cp_comm_type="all_gather", micro_batch=1, global_batch=1, seq_len=32768)  # fmt: skip
    est = run_estimate(catalog, req)
    names = {s["name"]: s["data"][0] for s in charts.step_breakdown_option(est.step)["series"]}
    assert names["CP K/V exchange (exposed)"] > 0
    assert not [n for n in names if "ring" in n]
