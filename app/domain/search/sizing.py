"""Sizing: which accelerator, how many, which plan and which way to pay, for a model and a token count.

The plan search (:mod:`app.domain.search`) gives, for each node and whole-node cluster size, the fastest
feasible plan (for a fixed cluster and price, the fastest plan is also the cheapest). This module prices each
of those plans under every offer that pays for that node (AWS options, other clouds, self-build), divides by
the reliability model's goodput, applies the deadline and budget, ranks, and finds the Pareto front of days
vs dollars across the whole catalog. Pure: the caller supplies prices and goodput.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.search.engine import Candidate

GIB = 1024**3
HOURS_PER_YEAR = 8766.0
TERM_HOURS = {"commit-1yr": HOURS_PER_YEAR, "commit-3yr": 3 * HOURS_PER_YEAR}

# Reasons a (node, size, offer) lost, in the order they are checked.
REASON_MEMORY = "no plan fits in memory"
REASON_NO_PRICE = "no price for this option"
REASON_DEADLINE = "misses the deadline"
REASON_BUDGET = "over budget"
REASON_NOT_SEARCHED = "space over CAPPLAN_SEARCH_MAX_PLANS (not searched)"


@dataclass(frozen=True, slots=True)
class Offer:
    """One way to pay for GPUs of ``node``: ``vendor`` (aws, gcp, …, self-build), its ``slug`` (instance,
    provider price or server), the option and its $ per GPU-hour (None: the catalog has no such price).
    ``capital_usd_per_node``: self-build's up-front cash per node (None for clouds); ``capital_usd_per_gpu_hour``:
    the part of ``usd_per_gpu_hour`` that repays it."""

    node: str
    vendor: str
    slug: str
    option: str
    usd_per_gpu_hour: float | None
    capital_usd_per_node: float | None = None
    capital_usd_per_gpu_hour: float = 0.0


@dataclass(frozen=True, slots=True)
class SizedPlan:
    accelerator: str
    node: str
    vendor: str
    offer: str
    option: str
    gpus: int
    nodes: int
    candidate: Candidate
    goodput: float
    days: float
    usd_amortised: float
    usd_cash: float
    usd_per_million_tokens: float
    mfu: float
    headroom_gib: float

    @property
    def plan(self):  # noqa: ANN201 - app.domain.plan.Plan
        return self.candidate.plan


@dataclass(frozen=True, slots=True)
class SizingOutcome:
    ranked: tuple[SizedPlan, ...]
    pareto: tuple[SizedPlan, ...]
    lost: dict[str, int]
    feasible: int
    message: str | None
    basis: str


def price_plan(
    accelerator: str, offer: Offer, cand: Candidate, gpus_per_node: int, tokens: float, goodput: float
) -> SizedPlan:
    """Days and dollars of ``tokens`` on ``cand`` paid through ``offer``: wall time = compute time ÷ goodput;
    amortised $ = rate × GPUs × wall hours; cash $ adds what is paid regardless of the run's length (a
    commitment's whole term, a self-build's hardware up front in place of its repayment)."""
    assert offer.usd_per_gpu_hour is not None
    wall_h = tokens / cand.tokens_per_s / 3600 / goodput
    gpu_h = wall_h * cand.gpus
    amortised = offer.usd_per_gpu_hour * gpu_h
    nodes = -(-cand.gpus // gpus_per_node)
    if offer.option in TERM_HOURS:
        cash = offer.usd_per_gpu_hour * cand.gpus * max(wall_h, TERM_HOURS[offer.option])
    elif offer.capital_usd_per_node is not None:
        cash = (
            offer.capital_usd_per_node * nodes
            + (offer.usd_per_gpu_hour - offer.capital_usd_per_gpu_hour) * gpu_h
        )
    else:
        cash = amortised
    return SizedPlan(
        accelerator=accelerator, node=offer.node, vendor=offer.vendor, offer=offer.slug, option=offer.option,
        gpus=cand.gpus, nodes=nodes, candidate=cand, goodput=goodput, days=wall_h / 24, usd_amortised=amortised,
        usd_cash=cash, usd_per_million_tokens=amortised / tokens * 1e6, mfu=cand.mfu,
        headroom_gib=cand.margin_bytes / GIB,
    )  # fmt: skip


def pareto_front(points: Sequence[SizedPlan]) -> list[SizedPlan]:
    """The non-dominated points in (days ↓, amortised $ ↓): no other point is at least as good on both and
    better on one. Sorted by days. O(n log n): sweep by days, keep a point when it is cheaper than all faster."""
    order = sorted(points, key=lambda p: (p.days, p.usd_amortised))
    front: list[SizedPlan] = []
    cheapest = float("inf")
    for p in order:
        if p.usd_amortised < cheapest:
            front.append(p)
            cheapest = p.usd_amortised
    return front


def choose(
    priced: Sequence[SizedPlan],
    lost: Counter[str],
    *,
    deadline_days: float | None,
    budget_usd: float | None,
    top_k: int,
) -> SizingOutcome:
    """Apply the deadline and budget (on amortised $), rank the survivors and find the Pareto front.

    Ranking: with a deadline, the cheapest plan that meets it; otherwise the cheapest (amortised $, the basis
    every option shares; cash $ is shown beside it), ties by fewer days."""
    ok: list[SizedPlan] = []
    fastest = min(priced, key=lambda p: p.days, default=None)
    cheapest = min(priced, key=lambda p: p.usd_amortised, default=None)
    for p in priced:
        if deadline_days is not None and p.days > deadline_days:
            lost[REASON_DEADLINE] += 1
        elif budget_usd is not None and p.usd_amortised > budget_usd:
            lost[REASON_BUDGET] += 1
        else:
            ok.append(p)
    ranked = sorted(ok, key=lambda p: (p.usd_amortised, p.days))
    basis = (
        "amortised $ (cheapest first" + (f", within {deadline_days:g} days" if deadline_days else "") + ")"
    )
    message = None
    if not ranked:
        message = _nothing(lost, deadline_days, budget_usd, fastest, cheapest)
    return SizingOutcome(
        ranked=tuple(ranked[:top_k]), pareto=tuple(pareto_front(ok or list(priced))),
        lost={k: n for k, n in lost.most_common() if n}, feasible=len(ok), message=message, basis=basis,
    )  # fmt: skip


def _nothing(
    lost: Counter[str],
    deadline_days: float | None,
    budget_usd: float | None,
    fastest: SizedPlan | None,
    cheapest: SizedPlan | None,
) -> str:
    if fastest is None and deadline_days is not None and lost.get(REASON_DEADLINE):
        return (
            f"nothing meets the deadline of {deadline_days:g} days: even at full peak FLOPs no accelerator and "
            "cluster size in the range trains the tokens in time; give more days, fewer tokens or a larger range"
        )
    if fastest is None:
        reason = lost.most_common(1)[0][0] if lost else "nothing to search"
        return f"no accelerator, cluster size and option can run this model: {reason}"
    parts = []
    if deadline_days is not None and lost.get(REASON_DEADLINE):
        parts.append(
            f"nothing meets the deadline of {deadline_days:g} days: the fastest is {fastest.days:,.1f} days "
            f"({fastest.gpus:,} × {fastest.accelerator}, {fastest.vendor} {fastest.option})"
        )
    if budget_usd is not None and lost.get(REASON_BUDGET):
        parts.append(
            f"nothing fits the budget of ${budget_usd:,.0f}: the cheapest is ${cheapest.usd_amortised:,.0f} "  # type: ignore[union-attr]
            f"({cheapest.gpus:,} × {cheapest.accelerator}, {cheapest.vendor} {cheapest.option}, "  # type: ignore[union-attr]
            f"{cheapest.days:,.1f} days)"  # type: ignore[union-attr]
        )
    if deadline_days is not None and budget_usd is not None and not parts:
        parts.append(
            f"nothing meets both the deadline of {deadline_days:g} days and the budget of ${budget_usd:,.0f}"
        )
    return "; ".join(parts) or "no plan meets the constraints"
