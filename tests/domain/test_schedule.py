"""The pipeline-schedule timeline: 1F1B and interleaved orders, dependencies, and the bubble formula."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.estimator.schedule import (
    ScheduleError,
    StageTimes,
    displayed_micro_batches,
    pipeline_schedule,
    stage_times_from_rank,
)


@pytest.mark.parametrize(
    ("pp", "vpp", "m"), [(1, 1, 4), (2, 1, 1), (4, 1, 8), (4, 1, 2), (4, 2, 8), (8, 4, 16)]
)
def test_makespan_matches_the_bubble_formula_with_equal_stages(pp: int, vpp: int, m: int) -> None:
    s = pipeline_schedule(pp, vpp, m, [StageTimes(forward_s=1.0, backward_s=2.0)])
    v = vpp if pp > 1 else 1
    assert s.makespan_s == pytest.approx((m + (pp - 1) / v) * 3.0)
    assert len(s.slots) == 2 * pp * m * v
    busy = m * 3.0
    assert s.bubble_fraction == pytest.approx(1 - busy / s.makespan_s)


@settings(max_examples=40, deadline=None)
@given(
    pp=st.integers(1, 8),
    vpp=st.integers(1, 4),
    groups=st.integers(1, 4),
    fwd=st.lists(st.floats(0.1, 5), min_size=8, max_size=8),
)
def test_every_slot_respects_its_dependencies_and_stages_never_overlap(pp, vpp, groups, fwd) -> None:
    m = groups * pp
    times = [StageTimes(forward_s=f, backward_s=2 * f) for f in fwd[:pp]]
    s = pipeline_schedule(pp, vpp, m, times)
    end = {(x.kind, x.stage, x.micro_batch, x.chunk): x.end_s for x in s.slots}
    by_stage: dict[int, list] = {}
    for x in s.slots:
        by_stage.setdefault(x.stage, []).append(x)
        if x.kind == "forward" and x.stage > 0:
            assert x.start_s >= end[("forward", x.stage - 1, x.micro_batch, x.chunk)] - 1e-9
        if x.kind == "backward":
            assert x.start_s >= end[("forward", x.stage, x.micro_batch, x.chunk)] - 1e-9
            if x.stage < pp - 1:
                assert x.start_s >= end[("backward", x.stage + 1, x.micro_batch, x.chunk)] - 1e-9
    for slots in by_stage.values():
        slots.sort(key=lambda x: x.start_s)
        for a, b in zip(slots, slots[1:], strict=False):
            assert b.start_s >= a.end_s - 1e-9


def test_first_stage_holds_pp_micro_batches_in_flight_in_1f1b() -> None:
    s = pipeline_schedule(4, 1, 8, [StageTimes(1.0, 2.0)])
    first = [x for x in s.slots if x.stage == 0]
    kinds = [x.kind for x in first]
    assert kinds[:4] == ["forward"] * 4 and kinds[4] == "backward"  # 3 warm-up + 1 steady forward


def test_interleaving_needs_a_multiple_of_pp_and_positive_inputs() -> None:
    with pytest.raises(ScheduleError, match="multiple of pp"):
        pipeline_schedule(4, 2, 6, [StageTimes(1, 2)])
    with pytest.raises(ScheduleError):
        pipeline_schedule(0, 1, 1, [StageTimes(1, 2)])
    with pytest.raises(ScheduleError):
        pipeline_schedule(2, 1, 4, [StageTimes(1, 2)] * 3)


def test_stage_times_split_compute_one_to_two_and_put_recompute_in_backward() -> None:
    t = stage_times_from_rank(micro_batch_s=4.0, compute_s=3.0, recompute_s=0.5)
    assert t.forward_s == pytest.approx((3.0 + 0.5) / 3)
    assert t.forward_s + t.backward_s == pytest.approx(4.0)


def test_displayed_micro_batches_caps_and_keeps_interleaving_valid() -> None:
    assert displayed_micro_batches(4, 1, 8) == 8
    assert displayed_micro_batches(4, 1, 1000) == 32
    assert displayed_micro_batches(16, 2, 1000) == 32
    assert displayed_micro_batches(24, 2, 1000) % 24 == 0
