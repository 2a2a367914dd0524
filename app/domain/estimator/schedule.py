"""The pipeline schedule as a timeline: which stage runs which micro-batch's forward or backward, and when.

1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): stage ``r`` runs ``min(pp − r − 1, m)`` warm-up
forwards, then alternates one forward and one backward, then drains the remaining backwards.
Interleaved 1F1B (Megatron, ``vpp`` model chunks per stage): stage ``r`` runs ``2·(pp − r − 1) + (vpp − 1)·pp``
warm-up chunk-forwards, then alternates; chunk-forward ``k`` is chunk ``(k ÷ pp) mod vpp`` of micro-batch
``(k ÷ (pp·vpp))·pp + k mod pp``, and chunk-backwards visit the chunks in reverse. Megatron requires the
micro-batch count to be a multiple of ``pp`` for the interleaved schedule.

Each stage executes its own order one operation at a time; an operation starts when the stage is free and the
operation it depends on has finished (the previous stage's forward of the same chunk-micro-batch, the next
stage's backward). Point-to-point transfer time is not drawn (the estimate counts it separately).

With equal stage times the simulated makespan is ``(m + (pp − 1)/vpp) · (t_f + t_b)``: the bubble the step model
uses, ``(pp − 1)/vpp`` micro-batch times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["forward", "backward"]

FORWARD_SHARE = 1 / 3
"""Share of a micro-batch's compute spent in the forward pass (2·N of the 6·N FLOPs per token)."""


class ScheduleError(ValueError):
    """Inputs that do not describe a schedule (no stages, no micro-batches, negative times…)."""


@dataclass(frozen=True, slots=True)
class Slot:
    stage: int
    micro_batch: int
    chunk: int
    kind: Kind
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class StageTimes:
    """Seconds one stage spends on one micro-batch (all its chunks): forward, and backward with recompute."""

    forward_s: float
    backward_s: float


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str
    pp: int
    vpp: int
    micro_batches: int
    slots: tuple[Slot, ...]
    makespan_s: float
    busy_s: tuple[float, ...]
    bubble_fraction: float
    formula: str


def stage_times_from_rank(
    micro_batch_s: float, compute_s: float, recompute_s: float, forward_share: float = FORWARD_SHARE
) -> StageTimes:
    """Split one rank's micro-batch time into forward and backward: compute in ``forward_share`` :
    ``1 − forward_share``, recompute before the backward, exposed communication in the same ratio as compute."""
    if micro_batch_s < 0 or compute_s < 0 or recompute_s < 0:
        raise ScheduleError("times must be ≥ 0")
    comm = max(0.0, micro_batch_s - compute_s - recompute_s)
    forward = (compute_s + comm) * forward_share
    return StageTimes(forward_s=forward, backward_s=micro_batch_s - forward)


def _order_1f1b(stage: int, pp: int, m: int) -> list[tuple[Kind, int, int]]:
    warmup = min(pp - stage - 1, m)
    ops: list[tuple[Kind, int, int]] = [("forward", i, 0) for i in range(warmup)]
    f, b = warmup, 0
    while f < m:
        ops.append(("forward", f, 0))
        f += 1
        ops.append(("backward", b, 0))
        b += 1
    ops.extend(("backward", i, 0) for i in range(b, m))
    return ops


def _chunk_op(k: int, pp: int, vpp: int, forward: bool) -> tuple[int, int]:
    group = k // (pp * vpp)
    chunk = (k // pp) % vpp
    if not forward:
        chunk = vpp - 1 - chunk
    return group * pp + k % pp, chunk


def _order_interleaved(stage: int, pp: int, vpp: int, m: int) -> list[tuple[Kind, int, int]]:
    total = m * vpp
    warmup = min(2 * (pp - stage - 1) + (vpp - 1) * pp, total)
    ops: list[tuple[Kind, int, int]] = []
    for k in range(warmup):
        mb, c = _chunk_op(k, pp, vpp, True)
        ops.append(("forward", mb, c))
    f, b = warmup, 0
    while f < total:
        mb, c = _chunk_op(f, pp, vpp, True)
        ops.append(("forward", mb, c))
        f += 1
        mb, c = _chunk_op(b, pp, vpp, False)
        ops.append(("backward", mb, c))
        b += 1
    while b < total:
        mb, c = _chunk_op(b, pp, vpp, False)
        ops.append(("backward", mb, c))
        b += 1
    return ops


def _dependency(kind: Kind, stage: int, mb: int, chunk: int, pp: int, vpp: int) -> tuple | None:
    if kind == "forward":
        if stage > 0:
            return ("forward", stage - 1, mb, chunk)
        return ("forward", pp - 1, mb, chunk - 1) if chunk > 0 else None
    if stage < pp - 1:
        return ("backward", stage + 1, mb, chunk)
    if chunk < vpp - 1:
        return ("backward", 0, mb, chunk + 1)
    return ("forward", pp - 1, mb, vpp - 1)


def pipeline_schedule(pp: int, vpp: int, micro_batches: int, stages: list[StageTimes]) -> Schedule:
    """Simulate the 1F1B (``vpp == 1``) or interleaved 1F1B schedule of ``micro_batches`` micro-batches over
    ``pp`` stages whose per-micro-batch times are ``stages`` (one per stage, or one for all)."""
    if pp < 1 or vpp < 1 or micro_batches < 1:
        raise ScheduleError("pp, vpp and micro-batches must be ≥ 1")
    if len(stages) == 1 and pp > 1:
        stages = stages * pp
    if len(stages) != pp:
        raise ScheduleError(f"{len(stages)} stage times for {pp} stages")
    interleaved = vpp > 1 and pp > 1
    if interleaved and micro_batches % pp:
        raise ScheduleError(
            f"the interleaved schedule needs micro-batches ({micro_batches}) to be a multiple of pp ({pp})"
        )
    v = vpp if interleaved else 1
    orders = [
        _order_interleaved(r, pp, v, micro_batches) if interleaved else _order_1f1b(r, pp, micro_batches)
        for r in range(pp)
    ]
    done: dict[tuple, float] = {}
    free = [0.0] * pp
    nxt = [0] * pp
    slots: list[Slot] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            while nxt[r] < len(orders[r]):
                kind, mb, c = orders[r][nxt[r]]
                dep = _dependency(kind, r, mb, c, pp, v)
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep is not None else 0.0)
                t = stages[r]
                dur = (t.forward_s if kind == "forward" else t.backward_s) / v
                end = start + dur
                done[(kind, r, mb, c)] = end
                free[r] = end
                slots.append(Slot(stage=r, micro_batch=mb, chunk=c, kind=kind, start_s=start, end_s=end))
                nxt[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise ScheduleError("schedule deadlocked")
    makespan = max(free)
    busy = tuple(micro_batches * (t.forward_s + t.backward_s) for t in stages)
    bubble = 1 - sum(busy) / (pp * makespan) if makespan > 0 else 0.0
    name = f"interleaved 1F1B (vpp {v})" if interleaved else ("1F1B" if pp > 1 else "no pipeline")
    formula = (
        f"bubble ≈ (pp − 1)/(vpp·m) = ({pp} − 1)/({v}·{micro_batches}) = {(pp - 1) / (v * micro_batches):.1%} "
        "of the busy time, with equal stages"
    )
    slots.sort(key=lambda s: (s.stage, s.start_s))
    return Schedule(
        name=name, pp=pp, vpp=v, micro_batches=micro_batches, slots=tuple(slots), makespan_s=makespan,
        busy_s=busy, bubble_fraction=bubble, formula=formula,
    )  # fmt: skip


MAX_BARS = 2048  # forward and backward slots a chart draws at most (keeps the page small and fast)


def displayed_micro_batches(pp: int, vpp: int, micro_batches: int, limit: int = 32) -> int:
    """How many micro-batches a chart shows: all of them up to ``limit`` (at least 2·pp, a multiple of pp
    for interleaving), since the steady state repeats — and never more than ``MAX_BARS`` slots in all
    (2 per micro-batch, stage and chunk), which for deep interleaved pipelines shows warm-up and cool-down."""
    cap = max(limit, 2 * pp)
    cap = min(cap, max(1, MAX_BARS // (2 * pp * max(1, vpp))))
    m = min(micro_batches, cap)
    if vpp > 1 and pp > 1:
        m = max(pp, m - m % pp)
    return m
