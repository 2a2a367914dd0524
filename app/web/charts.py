"""ECharts options built by pure functions from domain results: plain JSON (no callbacks), so they are testable.

The one function ECharts needs, the Gantt bar renderer, is registered in static/js/app.js as the custom
series ``pipeline-gantt`` and named here by that string. Values are rounded server-side; formatters are
ECharts string templates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from app.domain.estimator.memory import StageMemory
from app.domain.estimator.schedule import Schedule
from app.domain.estimator.schedule_sample import ScheduleFigures
from app.domain.estimator.step import StepTime

GIB = 1024**3
GANTT_RENDERER = "pipeline-gantt"

MEMORY_TERMS: tuple[tuple[str, str, str], ...] = (
    ("params_bytes", "params", "#4e79a7"),
    ("grads_bytes", "grads", "#f28e2b"),
    ("optimizer_bytes", "optimizer", "#e15759"),
    ("activations_bytes", "activations", "#76b7b2"),
    ("logits_bytes", "logits", "#59a14f"),
    ("gathered_params_bytes", "gathered params", "#edc948"),
    ("buffers_bytes", "buffers + workspace", "#b07aa1"),
    ("fragmentation_bytes", "fragmentation", "#ff9da7"),
    ("runtime_bytes", "runtime (CUDA, NCCL)", "#9c755f"),
)

STEP_TERMS: tuple[tuple[str, str, str], ...] = (
    ("compute_s", "compute", "#4e79a7"),
    ("recompute_s", "recompute", "#a0cbe8"),
    ("tp_exposed_s", "TP comm (exposed)", "#f28e2b"),
    ("cp_exposed_s", "CP K/V exchange (exposed)", "#ffbe7d"),
    ("ep_exposed_s", "EP all-to-all (exposed)", "#edc948"),
    ("fsdp_exposed_s", "FSDP gather (exposed)", "#b07aa1"),
    ("pp_p2p_s", "PP send/recv", "#9c755f"),
    ("bubble_s", "pipeline bubble", "#bab0ac"),
    ("dp_exposed_s", "DP reduction (exposed)", "#e15759"),
    ("optimizer_s", "optimizer step", "#59a14f"),
    ("sync_s", "waiting for stragglers", "#ff9da7"),
)

OPTION_COLORS = {
    "on-demand": "#4e79a7",
    "commit-1yr": "#76b7b2",
    "commit-3yr": "#59a14f",
    "spot": "#f28e2b",
    "capacity-block": "#edc948",
    "off-peak": "#b07aa1",
    "reserved-spot-mix": "#ff9da7",
    "self-build": "#e15759",
}
SCENARIO_COLORS = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b")


def _r(value: float, digits: int = 3) -> float:
    return round(float(value), digits)


def _base(title: str) -> dict[str, Any]:
    return {
        "animation": False,
        "aria": {"enabled": True},
        "title": {"text": title, "left": 0, "textStyle": {"fontSize": 13, "fontWeight": 600}},
        "grid": {"left": 8, "right": 16, "top": 76, "bottom": 8, "containLabel": True},
    }


def memory_bars_option(stages: Sequence[StageMemory], usable_bytes: int) -> dict[str, Any]:
    """One stacked bar per pipeline stage (GiB by term) and a line at the usable memory."""
    categories = [
        f"stage {s.rank}" + (" (first)" if s.first and len(stages) > 1 else "") + (" (last)" if s.last and len(stages) > 1 else "")
        for s in stages
    ]  # fmt: skip
    usable = _r(usable_bytes / GIB, 2)
    series: list[dict[str, Any]] = []
    for attr, label, color in MEMORY_TERMS:
        data = []
        for s in stages:
            value = getattr(s, attr) + (s.workspace_bytes if attr == "buffers_bytes" else 0)
            data.append(_r(value / GIB, 2))
        if not any(data):
            continue
        series.append({
            "name": label, "type": "bar", "stack": "memory", "data": data, "itemStyle": {"color": color}, "barMaxWidth": 90,
            "emphasis": {"focus": "series"},
        })  # fmt: skip
    if any(
        s.startup_bytes for s in stages
    ):  # beside the training bar: DeepSpeed's start-up copy of the model
        series.append({
            "name": "start-up copy (whole model before ZeRO-3 partitions it)", "type": "bar", "stack": "startup",
            "data": [_r(s.startup_bytes / GIB, 2) for s in stages], "itemStyle": {"color": "#bab0ac"}, "barMaxWidth": 90,
        })  # fmt: skip
    if series:
        series[0]["markLine"] = {
            "symbol": "none",
            "lineStyle": {"color": "#b42318", "type": "dashed", "width": 2},
            "label": {"formatter": f"usable {usable} GiB", "position": "insideEndTop"},
            "data": [{"yAxis": usable}],
        }
    peak = max((s.total_bytes for s in stages), default=0) / GIB
    option = _base("Memory per GPU, by pipeline stage")
    option.update({
        "tooltip": {"trigger": "axis", "axisPointer": {"type": "shadow"}},
        "legend": {"top": 28, "type": "scroll"},
        "xAxis": {"type": "category", "data": categories},
        "yAxis": {"type": "value", "name": "GiB", "max": math.ceil(max(usable, peak) * 1.05 / 10) * 10},
        "series": series,
    })  # fmt: skip
    return option


def step_breakdown_option(step: StepTime) -> dict[str, Any]:
    """The step time as one horizontal stacked bar (seconds by term), in the order the step model adds them."""
    series = [
        {"name": label, "type": "bar", "stack": "step", "data": [_r(getattr(step, attr), 4)],
         "itemStyle": {"color": color}, "label": {"show": False}}
        for attr, label, color in STEP_TERMS
        if getattr(step, attr) > 0
    ]  # fmt: skip
    option = _base(f"Step time {step.step_s:.3g} s")
    option.update({
        "tooltip": {"trigger": "item", "formatter": "{a}: {c} s"},
        "legend": {"top": 28, "type": "scroll"},
        "grid": {"left": 8, "right": 16, "top": 76, "bottom": 8, "containLabel": True},
        "xAxis": {"type": "value", "name": "s"},
        "yAxis": {"type": "category", "data": ["step"]},
        "series": series,
    })  # fmt: skip
    return option


def gantt_option(schedule: Schedule, whole: ScheduleFigures | None = None) -> dict[str, Any]:
    """Stages as rows, forward/backward chunk-micro-batches as bars (custom series ``pipeline-gantt``). The title
    states the whole step's figures (``whole``) when the bars are a sample of it."""
    stages = [f"stage {r}" for r in range(schedule.pp)]
    series = []
    for kind, color in (("forward", "#4e79a7"), ("backward", "#f28e2b")):
        data = [
            [s.stage, _r(s.start_s, 4), _r(s.end_s, 4), s.micro_batch, s.chunk]
            for s in schedule.slots
            if s.kind == kind
        ]
        series.append({
            "name": kind, "type": "custom", "renderItem": GANTT_RENDERER, "itemStyle": {"color": color},
            "encode": {"x": [1, 2], "y": 0}, "data": data,
        })  # fmt: skip
    if whole is not None and whole.drawn < whole.micro_batches:
        title = (f"Pipeline schedule: {schedule.name}, {whole.micro_batches} micro-batches (first {whole.drawn} "
                 f"drawn), bubble {whole.bubble_fraction:.1%}")  # fmt: skip
    else:
        title = f"Pipeline schedule: {schedule.name}, {schedule.micro_batches} micro-batches, bubble {schedule.bubble_fraction:.1%}"
    option = _base(title)
    option.update({
        "tooltip": {"trigger": "item", "formatter": "{a}: micro-batch {@[3]}, chunk {@[4]}, {@[1]}–{@[2]} s"},
        "legend": {"top": 28, "data": ["forward", "backward"]},
        "xAxis": {"type": "value", "name": "s", "min": 0, "max": _r(schedule.makespan_s, 5),
                  "axisLabel": {"showMaxLabel": False}},  # the end is the makespan, not a round tick
        "yAxis": {"type": "category", "data": stages, "inverse": True},
        "series": series,
    })  # fmt: skip
    return option


def _short_usd(value: float) -> str:
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            scaled = value / size
            return f"${scaled:,.{2 if abs(scaled) < 10 else 1 if abs(scaled) < 100 else 0}f}{suffix}"
    return f"${value:,.0f}"


def cost_options_option(options: Sequence[Any]) -> dict[str, Any]:
    """The cost attributable to this run (amortised $: bars, left axis) and days after failures (points, right
    axis) per available pricing option (:class:`~app.domain.cost.summary.OptionSummary`). A commitment longer than
    the run, or a self-build's capex, is not drawn to the scale of the run: its cash outlay is written on its bar
    and in the subtitle, so it cannot dominate the chart unannounced."""
    avail = [o for o in options if o.available and o.amortised_usd is not None]
    names = [o.option.value for o in avail]
    outlays = [o for o in avail if o.outlay_exceeds_run]
    bars = []
    for o in avail:
        bar: dict[str, Any] = {
            "value": _r(o.amortised_usd, 0),
            "itemStyle": {"color": OPTION_COLORS.get(o.option.value, "#888")},
        }
        if o.outlay_exceeds_run:
            bar["label"] = {
                "show": True,
                "position": "top",
                "fontSize": 10,
                "formatter": f"cash {_short_usd(o.cash_usd)}",
            }
        bars.append(bar)
    option = _base("Cost of this run (amortised $) and days, per pricing option")
    if outlays:
        option["title"]["subtext"] = (
            "Bars: this run's share. Cash paid out is larger for "
            + ", ".join(f"{o.option.value} ({_short_usd(o.cash_usd)})" for o in outlays)
            + ": whole commitment terms and capex, written on the bar, not drawn to scale."
        )
        option["title"]["subtextStyle"] = {"fontSize": 11, "width": 640, "overflow": "break"}
        option["grid"] = {**option["grid"], "top": 104}
    option.update({
        "tooltip": {"trigger": "axis"},
        "legend": {"top": 28 if not outlays else 62},
        "xAxis": {"type": "category", "data": names, "axisLabel": {"interval": 0, "rotate": 20}},
        "yAxis": [{"type": "value", "name": "$"}, {"type": "value", "name": "days after failures", "splitLine": {"show": False}}],
        "series": [
            {"name": "this run's cost (amortised $)", "type": "bar", "data": bars},
            {"name": "days after failures", "type": "line", "yAxisIndex": 1, "symbolSize": 9, "lineStyle": {"width": 0},
             "itemStyle": {"color": "#1d232a"}, "data": [_r(o.days or 0, 1) for o in avail]},
        ],
    })  # fmt: skip
    return option


def cumulative_cost_option(
    months: Sequence[int], usd: Mapping[str, Sequence[float]], break_even: Mapping[str, float | None]
) -> dict[str, Any]:
    """Cumulative $ after each month per option; self-build's break-even with each option as a marked point."""
    series: list[dict[str, Any]] = []
    for name, values in usd.items():
        s: dict[str, Any] = {
            "name": name, "type": "line", "showSymbol": False, "data": [_r(v, 0) for v in values],
            "itemStyle": {"color": OPTION_COLORS.get(name, "#888")},
            "lineStyle": {"width": 3 if name == "self-build" else 2},
        }  # fmt: skip
        series.append(s)
    points = []
    self_build = usd.get("self-build")
    for name, month in break_even.items():
        if month is None or self_build is None or not months or month > months[-1]:
            continue
        idx = min(range(len(months)), key=lambda i: abs(months[i] - month))
        points.append({
            "name": f"break-even vs {name}: month {month:.1f}", "coord": [idx, _r(self_build[idx], 0)],
            "value": f"{month:.1f}",
        })  # fmt: skip
    for s in series:
        if s["name"] == "self-build" and points:
            s["markPoint"] = {"symbol": "pin", "symbolSize": 38, "data": points, "label": {"fontSize": 10}}
    return _months_option("Cumulative cost over months (self-build: capex up front)", months, series)


def pareto_option(candidates: Sequence[Any], pareto: Sequence[Any]) -> dict[str, Any]:
    """Search plans as points: days to train after failures (or step time without tokens) against $ per million
    tokens, coloured by memory headroom; the Pareto front (no plan beats it on days, $ and headroom at once)
    as larger points — in two dimensions a point of the front may look dominated: it has more headroom."""
    use_days = any(c.time_to_train_days is not None for c in candidates)

    def point(c: Any) -> list[Any]:
        x = c.time_to_train_days if use_days and c.time_to_train_days is not None else c.step_time_s
        p = c.plan
        label = f"{c.gpus} GPUs, tp {p.tp} · pp {p.pp} · cp {p.cp} · ep {p.ep} · dp {p.dp}"
        return [_r(x, 3), _r(c.usd_per_million_tokens or 0, 4), _r(c.margin_bytes / GIB, 1), label]

    x_name = "days to train (after failures)" if use_days else "step time (s)"
    margins = [c.margin_bytes / GIB for c in (*candidates, *pareto)] or [0.0]
    option = _base("Plans: days against cost, coloured by headroom")
    option.update({
        "tooltip": {"trigger": "item", "formatter": "{a}: {@[3]} — {@[0]} / ${@[1]} per M tokens / {@[2]} GiB headroom"},
        "legend": {"top": 28},
        "grid": {"left": 70, "right": 90, "top": 70, "bottom": 55},
        "xAxis": {"type": "value", "name": x_name, "nameLocation": "middle", "nameGap": 30, "scale": True},
        "yAxis": {"type": "value", "name": "$ / M tokens", "nameLocation": "middle", "nameGap": 50, "scale": True},
        "visualMap": {"type": "continuous", "dimension": 2, "min": _r(min(margins), 1), "max": _r(max(margins), 1),
                      "text": ["more headroom (GiB)", "less"], "right": 0, "top": "middle", "calculable": False,
                      "inRange": {"color": ["#e15759", "#f1ce63", "#59a14f"]}},
        "series": [
            {"name": "plans", "type": "scatter", "symbolSize": 9, "data": [point(c) for c in candidates]},
            {"name": "Pareto front (days, $, headroom)", "type": "scatter", "symbol": "diamond", "symbolSize": 15,
             "itemStyle": {"borderColor": "#1d232a", "borderWidth": 1.5}, "data": [point(c) for c in pareto]},
        ],
    })  # fmt: skip
    return option


def compare_option(
    names: Sequence[str], steps: Sequence[StepTime], peaks_gib: Sequence[float]
) -> dict[str, Any]:
    """Scenarios side by side: step-time terms stacked per scenario, and the peak memory as points."""
    series: list[dict[str, Any]] = []
    for attr, label, color in STEP_TERMS:
        data = [_r(getattr(s, attr), 4) for s in steps]
        if any(data):
            series.append(
                {"name": label, "type": "bar", "stack": "step", "data": data, "itemStyle": {"color": color}}
            )
    series.append({
        "name": "peak memory GiB", "type": "line", "yAxisIndex": 1, "symbolSize": 10, "lineStyle": {"width": 0},
        "itemStyle": {"color": "#1d232a"}, "data": [_r(p, 1) for p in peaks_gib],
    })  # fmt: skip
    option = _base("Step time and peak memory, per scenario")
    option.update({
        "tooltip": {"trigger": "axis", "axisPointer": {"type": "shadow"}},
        "legend": {"top": 28, "type": "scroll"},
        "xAxis": {"type": "category", "data": list(names)},
        "yAxis": [{"type": "value", "name": "s"}, {"type": "value", "name": "GiB", "splitLine": {"show": False}}],
        "series": series,
    })  # fmt: skip
    return option


def compare_cost_option(
    names: Sequence[str], months: Sequence[int], usd: Sequence[Sequence[float] | None]
) -> dict[str, Any]:
    """Cumulative on-demand cost of each scenario's cluster over months, overlaid."""
    series = [
        {"name": n, "type": "line", "showSymbol": False, "data": [_r(v, 0) for v in u],
         "itemStyle": {"color": SCENARIO_COLORS[i % len(SCENARIO_COLORS)]}}
        for i, (n, u) in enumerate(zip(names, usd, strict=True))
        if u is not None
    ]  # fmt: skip
    return _months_option("Cumulative on-demand cost of each scenario's cluster", months, series)


def compare_options_option(names: Sequence[str], options: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """This run's cost (amortised $) per pricing option, one bar per scenario side by side; ``options`` holds each
    scenario's :class:`~app.domain.cost.summary.OptionSummary` rows (AWS and self-build)."""
    order = [
        o for o in OPTION_COLORS if any(r.option.value == o and r.available for rows in options for r in rows)
    ]
    series = []
    for i, (name, rows) in enumerate(zip(names, options, strict=True)):
        by = {r.option.value: r for r in rows if r.available and r.amortised_usd is not None}
        series.append({"name": name, "type": "bar", "itemStyle": {"color": SCENARIO_COLORS[i % len(SCENARIO_COLORS)]},
                       "data": [_r(by[o].amortised_usd, 0) if o in by else None for o in order]})  # fmt: skip
    option = _base("This run's cost (amortised $) per pricing option, per scenario")
    option.update({
        "tooltip": {"trigger": "axis", "axisPointer": {"type": "shadow"}},
        "legend": {"top": 28, "type": "scroll"},
        "xAxis": {"type": "category", "data": order, "axisLabel": {"interval": 0, "rotate": 20}},
        "yAxis": {"type": "value", "name": "$"},
        "series": series,
    })  # fmt: skip
    return option


def _months_option(title: str, months: Sequence[int], series: list[dict[str, Any]]) -> dict[str, Any]:
    """Dollar lines over months (the cumulative-cost charts of the planner and the scenario comparison)."""
    option = _base(title)
    option.update({
        "tooltip": {"trigger": "axis"},
        "legend": {"top": 28, "type": "scroll"},
        "xAxis": {"type": "category", "name": "month", "data": list(months), "boundaryGap": False},
        "yAxis": {"type": "value", "name": "$"},
        "series": series,
    })  # fmt: skip
    return option


def accuracy_option(rows: Sequence[Any]) -> dict[str, Any]:
    """Published runs: error of the predicted throughput, one point per run — out of sample (the run's source
    family left out of the fit: the accuracy) and in sample (the fit error) — with ±10 % and ±25 % bands. The
    error axis spans ±80 % or, when a run is further off, the next 20 % beyond the worst: no point is drawn off the
    chart."""
    scored = [r for r in rows if r.fit_error is not None]
    names = [r.run for r in scored]
    worst = max((abs(e) for r in scored for e in (r.fit_error, r.cv_error) if e is not None), default=0.0)
    bound = max(80, 20 * math.ceil(100 * worst / 20))
    option = _base("Predicted vs published throughput (error, %)")
    option.update({
        "tooltip": {"trigger": "item", "formatter": "{a} · {b}: {c} %"},
        "legend": {"top": 24},
        "xAxis": {"type": "category", "data": names, "name": "published runs (hover for the name)",
                  "nameLocation": "middle", "nameGap": 12, "axisLabel": {"show": False}},
        "yAxis": {"type": "value", "name": "error %", "min": -bound, "max": bound},
        "grid": {"left": 8, "right": 36, "top": 64, "bottom": 24, "containLabel": True},
        "series": [
            {"name": "out of sample (family left out)", "type": "scatter", "symbolSize": 7,
             "itemStyle": {"color": "#e15759"},
             "data": [[i, _r(100 * r.cv_error, 1)] for i, r in enumerate(scored) if r.cv_error is not None]},
            {"name": "fit (in sample)", "type": "scatter", "symbolSize": 5, "itemStyle": {"color": "#4e79a7"},
             "data": [[i, _r(100 * r.fit_error, 1)] for i, r in enumerate(scored)],
             "markLine": {"silent": True, "symbol": "none", "lineStyle": {"type": "dashed"}, "data": [
                 {"yAxis": 10, "lineStyle": {"color": "#59a14f"}}, {"yAxis": -10, "lineStyle": {"color": "#59a14f"}},
                 {"yAxis": 25, "lineStyle": {"color": "#e15759"}}, {"yAxis": -25, "lineStyle": {"color": "#e15759"}},
                 {"yAxis": 0, "lineStyle": {"color": "#999"}},
             ]}},
        ],
    })  # fmt: skip
    return option


# -- text descriptions: what a screen reader (and ECharts' aria) says about a chart, in numbers ----------------

MAX_DESCRIBED = 12
"""Categories or points named one by one; past that, a summary (count, range)."""


def _fmt(value: float, unit: str) -> str:
    if unit == "$":
        return f"${value:,.0f}"
    text = f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def _value(item: Any) -> float | None:
    if isinstance(item, dict):
        item = item.get("value")
    if isinstance(item, list | tuple):
        item = item[1] if len(item) > 1 else None
    if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
        return None
    return float(item)


def _axis_unit(option: dict[str, Any], series: dict[str, Any]) -> str:
    axes = option.get("yAxis")
    if isinstance(axes, list):
        axes = axes[series.get("yAxisIndex", 0)] if axes else {}
    if isinstance(axes, dict) and axes.get("type") == "category":  # horizontal bars: the value is on x
        axes = option.get("xAxis") or {}
    return str((axes or {}).get("name") or "") if isinstance(axes, dict) else ""


def describe_chart(option: dict[str, Any]) -> str:
    """One or two sentences naming the chart's numbers: per series, each category's value with its unit (bars,
    lines), or a count and range (scatter, many points). Never raw arrays; missing values are left out."""
    title = str((option.get("title") or {}).get("text") or "Chart")
    x_axis = option.get("xAxis") if isinstance(option.get("xAxis"), dict) else {}
    y_axis = option.get("yAxis") if isinstance(option.get("yAxis"), dict) else {}
    categories = (x_axis or {}).get("data") or (y_axis or {}).get("data") or []
    parts: list[str] = []
    for s in option.get("series", []):
        name = str(s.get("name") or s.get("type") or "series")
        unit = _axis_unit(option, s)
        data = s.get("data") or []
        if s.get("type") == "custom":
            parts.append(f"{name}: {len(data)} bars")
            continue
        values = [(categories[i] if i < len(categories) else i + 1, _value(d)) for i, d in enumerate(data)]
        values = [(c, v) for c, v in values if v is not None]
        if not values:
            continue
        if s.get("type") == "scatter" or len(values) > MAX_DESCRIBED:
            nums = [v for _, v in values]
            parts.append(
                f"{name}: {len(nums)} points from {_fmt(min(nums), unit)} to {_fmt(max(nums), unit)}"
            )
        elif len(values) == 1:
            parts.append(f"{name} {_fmt(values[0][1], unit)}")
        else:
            parts.append(f"{name}: " + ", ".join(f"{c} {_fmt(v, unit)}" for c, v in values))
    subtext = str((option.get("title") or {}).get("subtext") or "")
    described = f"{title}. " + ("; ".join(parts) + "." if parts else "No data.")
    return f"{described} {subtext}" if subtext else described
