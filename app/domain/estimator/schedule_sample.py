"""A pipeline schedule drawn on a sample of its micro-batches, with its figures computed for all of them.

A step of 256 micro-batches is drawn with the first 32 (the steady state repeats), but its bubble is that of
256: on the 32 drawn it would read several times too high. The makespan is affine in the micro-batch count
once the schedule is in its steady state, so two simulated samples (the drawn one and a longer one) give the
slope, and the whole step's makespan and bubble follow — exact in the steady state, and computed on the whole
schedule outright when it is small enough to simulate.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.estimator.schedule import Schedule, StageTimes, displayed_micro_batches, pipeline_schedule

SIMULATE_WHOLE_SLOTS = 4096
"""Schedules with at most this many forward/backward slots are simulated whole."""


@dataclass(frozen=True, slots=True)
class ScheduleFigures:
    """The whole step's schedule: all ``micro_batches``, of which ``drawn`` are drawn."""

    micro_batches: int
    drawn: int
    makespan_s: float
    bubble_fraction: float
    formula: str


def sampled_schedule(
    pp: int, vpp: int, micro_batches: int, stages: list[StageTimes]
) -> tuple[Schedule, ScheduleFigures]:
    """The drawn sample and the whole step's figures. Raises ScheduleError as :func:`pipeline_schedule`."""
    drawn_m = displayed_micro_batches(pp, vpp, micro_batches)
    drawn = pipeline_schedule(pp, vpp, drawn_m, stages)
    per_stage = stages * pp if len(stages) == 1 and pp > 1 else stages
    v = drawn.vpp
    if drawn_m == micro_batches:
        makespan = drawn.makespan_s
    elif 2 * pp * v * micro_batches <= SIMULATE_WHOLE_SLOTS:
        makespan = pipeline_schedule(pp, vpp, micro_batches, stages).makespan_s
    else:
        step = pp if v > 1 else max(pp, drawn_m)
        longer_m = min(micro_batches, drawn_m + step)
        longer = pipeline_schedule(pp, vpp, longer_m, stages)
        slope = (longer.makespan_s - drawn.makespan_s) / (longer_m - drawn_m)
        makespan = longer.makespan_s + (micro_batches - longer_m) * slope
    busy = sum(micro_batches * (t.forward_s + t.backward_s) for t in per_stage)
    bubble = 1 - busy / (pp * makespan) if makespan > 0 else 0.0
    ideal = (pp - 1) / (v * micro_batches)
    formula = (
        f"bubble {bubble:.1%} of the step over all {micro_batches} micro-batches (idle stage time ÷ pp × makespan); "
        f"with equal stages (pp − 1)/(vpp·m) = ({pp} − 1)/({v}·{micro_batches}) = {ideal:.1%} of the busy time"
    )
    return drawn, ScheduleFigures(
        micro_batches=micro_batches,
        drawn=drawn_m,
        makespan_s=makespan,
        bubble_fraction=bubble,
        formula=formula,
    )
