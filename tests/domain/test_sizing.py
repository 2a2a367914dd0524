"""Sizing (issue 16 part 1): pricing a sized plan, the Pareto front is a true non-dominated set, the winner is
on it, a deadline nothing meets is named, and the service searches the catalog as the planner does."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from app.domain.estimator.plan import Plan
from app.domain.search.engine import Candidate
from app.domain.search.sizing import REASON_DEADLINE, Offer, SizedPlan, choose, pareto_front, price_plan
from app.services_size import SizeRequest, run_size

PLAN = Plan(tp=8, pp=1, dp=8, global_batch=64, seq_len=8192)


def _cand(gpus: int = 64, tps: float = 1e6) -> Candidate:
    return Candidate(plan=PLAN, gpus=gpus, tokens_per_s=tps, step_time_s=1.0, peak_memory_bytes=60 * 2**30,
                     margin_bytes=10 * 2**30, mfu=0.4, usd_per_hour=None, usd_per_million_tokens=None,
                     time_to_train_days=None, cost_to_train_usd=None)  # fmt: skip


def _point(days: float, usd: float) -> SizedPlan:
    return SizedPlan(accelerator="x", node="n", vendor="aws", offer="n", option="on-demand", gpus=8, nodes=1,
                     candidate=_cand(), goodput=1.0, days=days, usd_amortised=usd, usd_cash=usd,
                     usd_per_million_tokens=1.0, mfu=0.4, headroom_gib=1.0)  # fmt: skip


def test_price_plan_divides_by_goodput_and_charges_a_commitment_term_in_cash() -> None:
    cand = _cand(gpus=64, tps=1e6)
    od = price_plan("h100-sxm", Offer("p5", "aws", "p5", "on-demand", 2.0), cand, 8, 8.64e10, goodput=0.9)
    assert od.days == pytest.approx(1 / 0.9)  # 8.64e10 tokens at 1e6/s is one day of compute
    assert od.usd_amortised == pytest.approx(2.0 * 64 * 24 / 0.9) == od.usd_cash
    commit = price_plan("h100-sxm", Offer("p5", "aws", "p5", "commit-1yr", 1.0), cand, 8, 8.64e10, 0.9)
    assert commit.usd_cash == pytest.approx(1.0 * 64 * 8766)  # the whole year, not the run
    own = price_plan("h100-sxm", Offer("s", "self-build", "s", "self-build", 1.5, 300_000.0, 1.0), cand, 8,
                     8.64e10, 0.9)  # fmt: skip
    assert own.usd_cash == pytest.approx(8 * 300_000 + 0.5 * 64 * 24 / 0.9)


def test_pareto_front_is_exactly_the_non_dominated_set() -> None:
    rng = random.Random(16)
    points = [_point(rng.uniform(1, 100), rng.uniform(1, 100)) for _ in range(300)]
    front = pareto_front(points)

    def dominated(p: SizedPlan) -> bool:
        return any(
            q.days <= p.days and q.usd_amortised <= p.usd_amortised
            and (q.days < p.days or q.usd_amortised < p.usd_amortised) for q in points
        )  # fmt: skip

    assert {id(p) for p in front} == {id(p) for p in points if not dominated(p)}
    assert [p.days for p in front] == sorted(p.days for p in front)


def test_choose_winner_is_cheapest_within_deadline_and_on_the_front() -> None:
    points = [_point(10, 50), _point(20, 30), _point(40, 10), _point(30, 40)]
    out = choose(points, Counter(), deadline_days=25, budget_usd=None, top_k=10)
    assert out.ranked[0].usd_amortised == 30 and out.lost == {REASON_DEADLINE: 2}
    assert out.ranked[0] in out.pareto


def test_a_deadline_nothing_meets_names_the_deadline() -> None:
    out = choose([_point(40, 10), _point(30, 40)], Counter(), deadline_days=5, budget_usd=None, top_k=10)
    assert not out.ranked and "deadline of 5 days" in (out.message or "") and "30.0 days" in out.message


def test_sizing_searches_each_size_as_the_planner_and_the_winner_is_non_dominated(catalog) -> None:
    seen: list[tuple[str, int, int]] = []
    result = run_size(catalog, SizeRequest(
        model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm"], options=["on-demand", "self-build"],
        gpus_range="64:256", calibrated=False,
    ), progress=lambda node, done, total: seen.append((node, done, total)))  # fmt: skip
    assert result.ranked and result.plan_document is not None
    assert seen[-1][1] == seen[-1][2] == result.searched["nodes"] >= 2
    win = result.ranked[0]
    assert {r.gpus for r in result.ranked} <= {64, 128, 256}
    assert not any(
        r.days <= win.days and r.usd_amortised <= win.usd_amortised
        and (r.days < win.days or r.usd_amortised < win.usd_amortised) for r in result.pareto
    )  # fmt: skip
    usd = [r.usd_amortised for r in result.ranked]
    assert usd == sorted(usd)
    assert result.plan_document["plan"]["tp"] == win.plan["tp"]


def test_sizing_deadline_nobody_meets_is_named(catalog) -> None:
    result = run_size(catalog, SizeRequest(
        model="llama3.1-8b", tokens=1e13, deadline_days=0.5, accelerators=["h100-sxm"], options=["on-demand"],
        gpus_range="8:64", calibrated=False,
    ))  # fmt: skip
    assert not result.ranked and result.plan_document is None
    assert "deadline of 0.5 days" in (result.message or "")
    assert result.lost.get(REASON_DEADLINE)
