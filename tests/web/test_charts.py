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


def test_cost_options_chart_skips_unavailable_options() -> None:
    from types import SimpleNamespace as NS

    opts = [
        NS(option=NS(value="on-demand"), available=True, total_usd=1000.0, days=10.0),
        NS(option=NS(value="spot"), available=False, total_usd=None, days=None),
    ]
    option = charts.cost_options_option(opts)
    assert option["xAxis"]["data"] == ["on-demand"]
    assert option["series"][0]["data"][0]["value"] == 1000 and option["series"][1]["data"] == [10.0]


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
