"""Sizing: pricing a sized plan, the Pareto front is a true non-dominated set, the winner is on it, a deadline
nothing meets is named, the service searches the catalog as the planner does, and the pruned search (speed,
memory and dominance bounds) returns what the exhaustive one does."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from app.domain.cost.selfbuild import self_build_inputs, self_build_tco
from app.domain.estimator.assemble import key_q
from app.domain.estimator.calibration import apply_calibration
from app.domain.estimator.compute import model_flops_per_token
from app.domain.estimator.estimate import build_cluster
from app.domain.estimator.memory import host_capacity_bytes
from app.domain.estimator.plan import Plan, Recompute, Sharding
from app.domain.model.counts import parameter_counts
from app.domain.reliability.formulas import HOURS_PER_MONTH
from app.domain.search import fastest
from app.domain.search.fastest import FastestPlanFinder
from app.domain.search.sizing import (
    REASON_BUDGET,
    REASON_DEADLINE,
    REASON_DOMINATED,
    REASON_MEMORY,
    REASON_NOT_SEARCHED,
    Frontier,
    Offer,
    SelfBuildCapital,
    SizedPlan,
    SpeedBound,
    choose,
    pareto_front,
    price_plan,
    speed_bound,
    state_fits_bound,
)
from app.domain.search.space import _axes
from app.domain.search.spec import Candidate, SearchTooLarge
from app.schemas import PlanSearchRequest
from app.services.errors import InputError
from app.services.search import run_search, search_spec
from app.services.size import BOUND_READS, SizeRequest, SizingProgress, _sizes, check_size_request, run_size
from app.settings import Settings

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
    assert commit.usd_cash == pytest.approx(1.0 * 64 * 8760)  # the whole year (the cost model's), not the run
    stored = price_plan("h100-sxm", Offer("p5", "aws", "p5", "on-demand", 2.0, storage_usd_per_month=730.0,
                                          transfer_usd=100.0), cand, 8, 8.64e10, 0.9)  # fmt: skip
    assert stored.usd_amortised == pytest.approx(od.usd_amortised + 24 / 0.9 + 100.0) == stored.usd_cash
    capital = SelfBuildCapital(capex_usd=2_400_000.0, capital_total_usd=3_000_000.0, opex_usd_per_month=7300.0,
                               depreciation_years=5.0)  # fmt: skip
    own = price_plan("h100-sxm", Offer("s", "self-build", "s", "self-build", 1.5, self_build=capital), cand, 8,
                     8.64e10, 0.9)  # fmt: skip
    months = 24 / 0.9 / 730
    assert own.usd_cash == pytest.approx(2_400_000 + 7300 * months)
    assert own.usd_amortised == pytest.approx(3_000_000 * months / 60 + 7300 * months)
    twice = price_plan("h100-sxm", Offer("s", "self-build", "s", "self-build", 1.5,
                                         self_build=replace(capital, runs=2)), cand, 8, 8.64e10, 0.9)  # fmt: skip
    assert twice.usd_amortised == pytest.approx(3_000_000 / 2 + 7300 * months)


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
    seen: list[SizingProgress] = []
    result = run_size(catalog, SizeRequest(
        model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm"], options=["on-demand", "self-build"],
        gpus_range="64:256", calibrated=False,
    ), progress=seen.append)  # fmt: skip
    assert result.ranked and result.plan_document is not None
    phases = [p.phase for p in seen]
    assert phases == sorted(phases, key=["bounds", "search", "done"].index) and phases[-1] == "done"
    assert {p.label for p in seen if p.phase == "bounds"} == {"dgx-h100", "p5.48xlarge"}
    searching = [p for p in seen if p.phase == "search"]
    s = result.searched  # a pair reported as searched may still be dropped by the plan search's own bound
    assert len(searching) == s["sizes_searched"] + s["sizes_pruned_by_dominance_of_the_plan_bound"]
    assert s["sizes_searched"] >= 2
    assert {p.label.split(" at ")[0] for p in searching} >= {"dgx-h100", "p5.48xlarge"}
    assert [p.done for p in searching] == sorted(p.done for p in searching)
    assert seen[-1].done == seen[-1].total and seen[-1].valid_plans == result.searched["valid_plans"]
    assert 0 < seen[-1].evaluated_plans == result.searched["evaluated_plans"] < seen[-1].valid_plans
    win = result.ranked[0]
    assert {r.gpus for r in result.ranked} <= set(range(64, 257, 8))  # every whole node of the range
    assert not any(
        r.days <= win.days and r.usd_amortised <= win.usd_amortised
        and (r.days < win.days or r.usd_amortised < win.usd_amortised) for r in result.pareto
    )  # fmt: skip
    usd = [r.usd_amortised for r in result.ranked]
    assert usd == sorted(usd)
    # the winner's plan document is the sized plan: every layout field the ranking shows
    assert {k: v for k, v in result.plan_document["plan"].items() if k in win.plan} == win.plan


def test_sizing_deadline_nobody_meets_is_named(catalog) -> None:
    result = run_size(catalog, SizeRequest(
        model="llama3.1-8b", tokens=1e13, deadline_days=0.5, accelerators=["h100-sxm"], options=["on-demand"],
        gpus_range="8:64", calibrated=False,
    ))  # fmt: skip
    assert not result.ranked and result.plan_document is None
    assert "deadline of 0.5 days" in (result.message or "")
    assert result.lost.get(REASON_DEADLINE)


# -- pruning ------------------------------------------------------------------------------------------------


def test_frontier_beats_only_what_can_be_neither_ranked_nor_on_the_front() -> None:
    f = Frontier(top_k=2)
    f.add(10, 100)
    assert not f.beats(20, 200)  # one cheaper point is not a full top 2
    f.add(30, 50)
    assert f.beats(20, 200) and f.beats(10, 101)
    assert not f.beats(10, 100)  # equal to a found point: not strictly beaten
    assert not f.beats(5, 300)  # faster than everything found: may be on the front
    assert not f.beats(40, 60)  # only one point is cheaper than 60: may be ranked second
    f.add(35, 40)
    assert f.beats(40, 60)


def _rows(rows) -> list[tuple]:
    return [
        (r.accelerator, r.offer, r.option, r.gpus, r.plan, r.days, r.usd_amortised, r.usd_cash) for r in rows
    ]


SLICES = {
    "dense, no deadline": dict(model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm", "a100-80gb"],
                               gpus_range="8:512", calibrated=False),
    "moe, deadline": dict(model="mixtral-8x7b", tokens=2e12, deadline_days=60, accelerators=["h100-sxm", "b200"],
                          options=["on-demand", "spot", "self-build"], gpus_range="8:256", top_k=5),
    "mla moe, memory-tight": dict(model="deepseek-v3", tokens=1e12, accelerators=["h200-sxm"],
                                  options=["on-demand", "self-build"], gpus_range="32:256", top_k=3),
    "dense, cash basis, mix and two runs": dict(model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm", "b200"],
                                                options=["on-demand", "commit-1yr", "reserved-spot-mix", "self-build"],
                                                gpus_range="8:512", basis="cash", runs=2, calibrated=False, top_k=3),
    "dense, large sizes": dict(model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm", "b200"],
                               options=["on-demand", "self-build"], gpus_range="16384:16640", top_k=2),
}  # fmt: skip
# slices where a pair the speed bound keeps is dropped by the fastest-plan search's own bound (the slowest rank,
# the memory floor, the pipeline's micro-batch count)
PLAN_BOUND_SLICES = {"dense, no deadline", "moe, deadline", "mla moe, memory-tight"}


@pytest.mark.parametrize("case", SLICES)
def test_pruned_sizing_returns_the_exhaustive_winner_ranking_and_front(catalog, case) -> None:
    request = SizeRequest(**SLICES[case], front_tolerance_pct=0)  # the exact front
    pruned, full = run_size(catalog, request), run_size(catalog, request, prune=False)
    assert pruned.searched["sizes_pruned_by_dominance"] > 0, "the slice must exercise the pruning"
    assert full.searched["sizes_pruned_by_dominance"] == 0
    assert pruned.searched["evaluated_plans"] < full.searched["evaluated_plans"]
    assert pruned.ranked and _rows(pruned.ranked) == _rows(full.ranked)
    assert _rows(pruned.pareto) == _rows(full.pareto)
    assert pruned.plan_document == full.plan_document
    assert pruned.lost[REASON_DOMINATED] > 0
    if case in PLAN_BOUND_SLICES:
        assert pruned.searched["sizes_pruned_by_dominance_of_the_plan_bound"] > 0


def test_a_speed_bound_a_plan_beats_is_caught_and_the_dropped_sizes_are_searched(
    catalog, monkeypatch
) -> None:
    request = SizeRequest(**SLICES["moe, deadline"])
    full = run_size(catalog, request, prune=False)
    real = SpeedBound.tokens_per_s_many
    monkeypatch.setattr(SpeedBound, "tokens_per_s_many", lambda self, gpus: 0.3 * real(self, gpus))
    broken = run_size(catalog, request)
    assert any("beat its speed bound" in n for n in broken.notes)
    assert _rows(broken.ranked) == _rows(full.ranked) and _rows(broken.pareto) == _rows(full.pareto)


def _cluster(catalog, node: str, gpus: int, calibrated: bool = True):
    n = catalog.hardware.node(node)
    c = build_cluster(catalog.hardware, catalog.efficiency, accelerator=n.accelerator, gpus=gpus, node=node)
    return apply_calibration(c, catalog.calibrations if calibrated else None)[0]


@pytest.mark.parametrize("work", ["compute", "per-rank terms"])
@pytest.mark.parametrize(("model", "node"), [("llama3.1-8b", "p5.48xlarge"), ("mixtral-8x7b", "dgx-b200")])
def test_no_searched_plan_beats_the_speed_bound(catalog, model, node, work) -> None:
    """Both forms of W hold: compute alone, and the fastest-plan search's per-rank terms (compute plus exposed TP,
    CP and EP time) the sizing uses."""
    arch = catalog.architecture(model)
    cluster = _cluster(catalog, node, 8)
    keys = None
    if work == "per-rank terms":
        spec = search_spec(PlanSearchRequest(model=model, gpu=cluster.accelerator.slug, gpus=1, global_batch=2048,
                                             seq_len=8192, top_k=1), [1], max_plans=10**9)  # fmt: skip
        finder = FastestPlanFinder(
            arch, spec, model_flops_per_token(arch, 8192, parameter_counts(arch).matmul_weights_active).total
        )
        keys = lambda combos: finder.key_work(cluster, combos)  # noqa: E731
    bound = speed_bound(arch, cluster, Plan(seq_len=8192, sharding=Sharding.ddp), batch=2048,
                        micro_batches=(1, 2, 4, 8, 16), cps=(1, 2, 4, 8), vpps=(1, 2, 4), max_pp=64, work=keys)  # fmt: skip
    for gpus in (8, 64, 512, 4096):
        found = run_search(catalog, PlanSearchRequest(model=model, gpu=catalog.hardware.node(node).accelerator,
                           node=node, gpus=gpus, global_batch=2048, seq_len=8192, top_k=1), max_plans=10**9)  # fmt: skip
        best = found.best_by_gpus[0].tokens_per_s
        assert best <= bound.tokens_per_s(gpus)
        if gpus <= 512:  # tight where communication is small: within 2x
            assert best >= 0.5 * bound.tokens_per_s(gpus)


def _other_everything(catalog, cluster, gpus: int):
    """The cluster with every field but the bound's (BOUND_READS) changed: size, node, fabrics, networks."""
    same_domain = next(n for n in catalog.hardware.nodes if n.slug != cluster.node.slug
                       and n.nvlink_domain_size == cluster.nvlink_domain and n.accelerator == cluster.node.accelerator)  # fmt: skip
    other = _cluster(catalog, same_domain.slug, gpus)
    update = {f: getattr(other, f) for f in type(cluster).model_fields if f not in BOUND_READS}
    update["oversubscription"] = 4.0
    update["node"] = other.node.model_copy(update={"host_memory_gib": 1.0, "scale_out_gbit_per_s": 1.0})
    return cluster.model_copy(update=update)


def test_per_rank_terms_do_not_depend_on_the_cluster_size_node_or_fabric(catalog) -> None:
    """The search caches per-rank terms (key_q) keyed without the GPU count, and the speed bound is shared by the
    nodes of one accelerator: both are sound only if those terms read none of it."""
    arch = catalog.architecture("mixtral-8x7b")
    small = _cluster(catalog, "p5.48xlarge", 8)
    large = _other_everything(catalog, small, 65536)
    assert large.gpus == 65536 and large.node.slug != small.node.slug
    for tp, cp, mb, ep, rc in [
        (1, 1, 1, 1, Recompute.none),
        (8, 2, 4, 8, Recompute.full),
        (2, 8, 1, 2, Recompute.selective),
    ]:
        plan = Plan(tp=tp, cp=cp, ep=ep, micro_batch=mb, global_batch=mb, seq_len=8192, recompute=rc,
                    sequence_parallel=tp > 1, sharding=Sharding.ddp)  # fmt: skip
        assert key_q(arch, plan, small) == key_q(arch, plan, large)
    kw = dict(batch=2048, micro_batches=(1, 4), cps=(1, 2), vpps=(1, 2), max_pp=64)
    shape = Plan(seq_len=8192, sharding=Sharding.ddp)
    assert speed_bound(arch, small, shape, **kw) == speed_bound(arch, large, shape, **kw)


def test_a_size_the_memory_bound_drops_has_no_plan_that_fits(catalog) -> None:
    arch = catalog.architecture("deepseek-v3")
    node = catalog.hardware.node("p5.48xlarge")
    usable = catalog.hardware.accelerator("h100-sxm").memory_usable_bytes
    host, _ = host_capacity_bytes(node.host_memory_gib, node.local_nvme_tb)
    state = parameter_counts(arch).total * 12  # FSDP2 AdamW checkpoint: fp32 params + moments
    assert not state_fits_bound(state, 8, 1, usable, host, 0.0)
    found = run_search(catalog, PlanSearchRequest(model="deepseek-v3", gpu="h100-sxm", node="p5.48xlarge", gpus=8,
                       global_batch=2048, seq_len=8192, top_k=1), max_plans=10**9)  # fmt: skip
    assert not found.best_by_gpus


def test_a_self_build_row_is_priced_by_the_cost_models_tco_of_that_cluster(catalog) -> None:
    """The same cluster costs the same in `capplan size` and `capplan cost`: rate, capex and opex from
    self_build_tco for that many servers (its fabric sized to the cluster, its storage system to the dataset and
    the kept checkpoints)."""
    from app.domain.cost.inputs import CostOverrides
    from app.domain.cost.storage import storage_cost

    request = SizeRequest(model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm"], options=["self-build"],
                          gpus_range="64:1024", calibrated=False)  # fmt: skip
    result = run_size(catalog, request)
    rows = [r for r in result.ranked if r.option == "self-build"]
    assert {r.gpus for r in rows} >= {64, 1024}
    node = catalog.hardware.node("dgx-h100")
    params = parameter_counts(catalog.architecture("llama3.1-8b")).total
    stored = storage_cost(
        catalog.cost, CostOverrides(), 1e12, params, params * 12.0
    ).stored_tb  # AdamW fp32 state
    inputs, _ = self_build_inputs(catalog.cost, catalog.hardware, node, storage_tb=stored)
    for r in rows:
        tco = self_build_tco(
            inputs, node="dgx-h100", nodes=r.nodes, gpus_per_node=8, nics_per_node=node.scale_out_nics
        )
        months = r.days * 24 / HOURS_PER_MONTH
        assert r.usd_amortised == pytest.approx(tco.monthly_equivalent_usd * months, rel=1e-9)
        assert r.usd_cash == pytest.approx(tco.capex_usd + tco.opex_usd_per_month * months, rel=1e-9)
    by_size = {r.gpus: r for r in rows}  # a larger fabric (more tiers) costs more per GPU-hour
    assert by_size[1024].usd_amortised / (1024 * by_size[1024].days) > by_size[64].usd_amortised / (
        64 * by_size[64].days
    )


def test_a_self_build_cluster_the_cost_model_cannot_price_is_named_not_raised(catalog) -> None:
    result = run_size(catalog, SizeRequest(model="llama3.1-8b", tokens=1e12, accelerators=["a100-80gb"],
                                           options=["self-build"], gpus_range="16384:16384", calibrated=False))  # fmt: skip
    assert not result.ranked and result.lost.get("no price for this option")
    assert any("self-build dgx-a100-80gb not priced at 16,384 GPUs and above" in n for n in result.notes)


def test_each_node_is_searched_on_its_own_fabric(catalog) -> None:
    """A self-build DGX H100 (InfiniBand) and the AWS p5 (EFA) carry the same GPU but not the same network: each
    (node, size) is searched on that node, as `capplan plan --node` searches it, not on the instance the search's
    default price option would pay for."""
    result = run_size(catalog, SizeRequest(model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm"],
                                           options=["on-demand", "self-build"], gpus_range="256:256",
                                           calibrated=False, top_k=50))  # fmt: skip
    speed = {r.node: r.tokens_per_s for r in result.ranked}
    assert set(speed) == {"dgx-h100", "p5.48xlarge"}
    for node in speed:
        found = run_search(catalog, PlanSearchRequest(model="llama3.1-8b", gpu="h100-sxm", node=node, gpus=256,
                           global_batch=2048, seq_len=8192, top_k=1, calibrated=False), max_plans=10**9)  # fmt: skip
        assert speed[node] == found.best_by_gpus[0].tokens_per_s
    assert speed["dgx-h100"] != speed["p5.48xlarge"]


GB200_SLICE = dict(model="deepseek-v3", tokens=14.8e12, accelerators=["gb200"], options=["self-build"],
                   gpus_range="144:288")  # fmt: skip


def test_gb200_sizes_above_one_rack_are_searched_under_the_server_limit(catalog) -> None:
    """CAPPLAN_SEARCH_MAX_PLANS bounds the plans the sizing evaluates, not the grid it lays out: DeepSeek-V3 on
    GB200 NVL72 at 2-4 racks (144-288 GPUs) has millions of grid points a size (over the 2 M default) but the
    bounds leave about a thousand to evaluate, so every size is searched, and each row is the fastest plan of the
    whole space."""
    limit = Settings.model_fields["search_max_plans"].default
    result = run_size(catalog, SizeRequest(**GB200_SLICE), max_plans=limit)
    assert REASON_NOT_SEARCHED not in result.lost and not any("not searched" in n for n in result.notes)
    assert sorted(r.gpus for r in result.ranked) == [144, 216, 288]
    assert result.searched["grid_points"] > 3 * limit  # every size's grid is over the limit
    # each row is the exhaustive evaluation's winner on that size
    arch = catalog.architecture("deepseek-v3")
    spec = search_spec(PlanSearchRequest(model="deepseek-v3", gpu="gb200", gpus=1, global_batch=2048,
                                         seq_len=8192, top_k=1), [1], max_plans=10**9)  # fmt: skip
    flops = model_flops_per_token(arch, 8192, parameter_counts(arch).matmul_weights_active).total
    finder = FastestPlanFinder(arch, spec, flops)
    for r in result.ranked:
        cluster = _cluster(catalog, "gb200-nvl72", r.gpus)
        best = finder.find(cluster, r.gpus, 2048, exhaustive=True).candidate
        assert (r.tokens_per_s, r.plan["tp"], r.plan["pp"], r.plan["ep"]) == (
            best.tokens_per_s,
            best.plan.tp,
            best.plan.pp,
            best.plan.ep,
        )


def test_the_limit_counts_evaluated_plans_and_names_itself(catalog) -> None:
    """A limit below the grid (3,000 against millions of points) still searches every size; one below the plans
    the bounds leave (200) lists the sizes as not searched, naming the setting."""
    roomy = run_size(catalog, SizeRequest(**GB200_SLICE), max_plans=3000)
    assert roomy.searched["sizes_searched"] == 3 and REASON_NOT_SEARCHED not in roomy.lost
    tight = run_size(catalog, SizeRequest(**GB200_SLICE), max_plans=200)
    assert tight.lost[REASON_NOT_SEARCHED] == 3 and not tight.ranked
    assert sum("CAPPLAN_SEARCH_MAX_PLANS" in n and "not searched" in n for n in tight.notes) == 3


def test_the_layout_guard_holds_the_catalogs_largest_grids(catalog, monkeypatch) -> None:
    """The grid laid out per size stays under MAX_LAYOUT for the catalog's largest space (DeepSeek-V3's 58 experts
    on a 72-GPU NVLink domain) at the sizes with the most divisors up to 1,048,576 GPUs; a grid over it is refused
    before anything is allocated."""
    arch = catalog.architecture("deepseek-v3")
    spec = search_spec(PlanSearchRequest(model="deepseek-v3", gpu="gb200", gpus=1, global_batch=2048,
                                         seq_len=8192, top_k=1), [1], max_plans=10**9)  # fmt: skip
    finder = FastestPlanFinder(arch, spec, 1.0)
    for gpus in (65_520, 665_280, 720_720):
        axes = _axes(arch, _cluster(catalog, "gb200-nvl72", gpus), spec, gpus)
        triples = sum(gpus % (t * c * p) == 0 for t in axes["tp"] for c in axes["cp"] for p in axes["pp"])
        assert triples * math.prod(len(axes[k]) for k in fastest.REST) < fastest.MAX_LAYOUT / 4
    monkeypatch.setattr(fastest, "MAX_LAYOUT", 1000)
    with pytest.raises(SearchTooLarge, match="points to lay out"):
        finder.find(_cluster(catalog, "gb200-nvl72", 144), 144, 2048)


# -- the sizing's dollars are the cost model's ----------------------------------------------------------------

ALL_OPTIONS = ["on-demand", "commit-1yr", "commit-3yr", "spot", "capacity-block", "off-peak", "reserved-spot-mix",
               "self-build"]  # fmt: skip
COST_CASES = {
    "catalog prices": {},
    "us-west-1 prices": {"region": "us-west-1"},
    "prices of 2025-01-01": {"prices_as_of": "2025-01-01"},
    "self-build over 3 runs, ranked on cash": {"runs": 3, "basis": "cash"},
    "self-build used half a year after the run": {"use_after_run_years": 0.5},
}


def _cost_row(catalog, request: SizeRequest, row):
    """The cost model's row for a sized row: ``training_cost`` of the same cluster, throughput and options."""
    from app.domain.cost.inputs import CostOption, CostOverrides
    from app.domain.cost.training import TrainingJob, training_cost
    from app.domain.reliability.formulas import plan_checkpoint_bytes_per_param

    arch = catalog.architecture(request.model)
    job = TrainingJob(model=request.model, accelerator=row.accelerator, gpus=row.gpus,
                      parameters=parameter_counts(arch).total, tokens=request.tokens,
                      cloud_tokens_per_s=row.tokens_per_s, self_build_tokens_per_s=row.tokens_per_s,
                      plan_checkpoint_bytes_per_param=plan_checkpoint_bytes_per_param(Plan()), seq_len=request.seq_len)  # fmt: skip
    o = request.cost_overrides()
    if row.vendor == "aws":
        o = o.model_copy(update={"instance": row.offer, "other_clouds": False})
    else:  # the region picks AWS prices only (and the cost model refuses one its AWS instance is not priced in)
        o = o.model_copy(update={"region": None})
    result = training_cost(catalog.cost, catalog.hardware, job, options=[CostOption(row.option)], overrides=o)
    if row.vendor in ("aws", "self-build"):
        assert row.vendor == "aws" or result.options[0].instance == row.offer
        return result.options[0]
    instance = next(p.instance_type for p in catalog.cost.provider_prices if p.slug == row.offer)
    assert isinstance(o, CostOverrides)
    return next(x for x in result.other_clouds if (x.provider, x.instance, x.option.value) ==
                (row.vendor, instance, row.option))  # fmt: skip


@pytest.mark.parametrize("case", COST_CASES)
def test_every_sized_row_costs_what_capplan_cost_says(catalog, case) -> None:
    """A finance reviewer reads the same figure on the sizing and on the cost of the same cluster: for every option
    (AWS's eight, the other clouds', self-build), days, amortised $ and cash $ equal ``training_cost``'s —
    storage and transfer, a commitment's whole 8,760-h year, the reserved + spot mix's term and its spot
    interruptions, the self-build storage system and the useful life stated, the region and the prices' day."""
    request = SizeRequest(model="llama3.1-70b", tokens=15e12, accelerators=["h100-sxm", "b200"],
                          gpus_range="512:512", options=ALL_OPTIONS, top_k=200, **COST_CASES[case])  # fmt: skip
    result = run_size(catalog, request)
    seen = {(r.vendor, r.option) for r in result.ranked}
    assert {("aws", o) for o in ALL_OPTIONS if o != "self-build"} - seen <= {("aws", "spot"), ("aws", "capacity-block"),
                                                                             ("aws", "reserved-spot-mix")}  # fmt: skip
    assert ("self-build", "self-build") in seen and any(v not in ("aws", "self-build") for v, _ in seen)
    for row in result.ranked:
        cost = _cost_row(catalog, request, row)
        assert cost.available, (row.offer, row.option)
        assert (row.days, row.usd_amortised, row.usd_cash) == pytest.approx(
            (cost.days, cost.amortised_usd, cost.cash_usd), rel=1e-9
        ), (row.vendor, row.offer, row.option, row.gpus)
    key = request.basis
    values = [r.usd_cash if key == "cash" else r.usd_amortised for r in result.ranked]
    assert values == sorted(values) and key in result.basis


def test_region_and_prices_day_reach_the_sizing(catalog) -> None:
    base = dict(model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm"], options=["on-demand"],
                gpus_range="64:64", calibrated=False)  # fmt: skip
    home = run_size(catalog, SizeRequest(**base)).ranked
    west = run_size(catalog, SizeRequest(**base, region="us-west-1")).ranked
    aws = {r.offer: r for r in home if r.vendor == "aws"}
    aws_west = {r.offer: r for r in west if r.vendor == "aws"}
    assert (
        aws_west["p5.48xlarge"].usd_amortised > aws["p5.48xlarge"].usd_amortised
    )  # $68.80/h against $55.04/h
    with pytest.raises(InputError) as err:
        run_size(catalog, SizeRequest(**base, region="mars-1"))
    assert err.value.errors[0]["loc"][-1] == "region"
    early = run_size(catalog, SizeRequest(**base, prices_as_of="2022-06-01"))
    assert any("before p5.48xlarge existed" in n for n in early.notes)
    with pytest.raises(ValueError, match="not both"):
        SizeRequest(**base, runs=2, use_after_run_years=1)


# -- audit (issue 16, "What to build" and "Done when") ---------------------------------------------------------


def test_every_whole_node_size_of_the_range_is_a_size() -> None:
    from app.services.size import _sizes

    request = SizeRequest(model="x", tokens=1e12, gpus_range="8:65536")
    assert _sizes(request, 8).tolist() == [8 * n for n in range(1, 8193)]
    assert _sizes(request, 72).tolist() == [72 * n for n in range(1, 911)]  # 910 racks end the range
    odd = SizeRequest(model="x", tokens=1e12, gpus_range="100:130")
    assert _sizes(odd, 8).tolist() == [104, 112, 120, 128]  # whole nodes inside the range
    assert _sizes(SizeRequest(model="x", tokens=1e12, gpus_range="1:4"), 8).tolist() == []


def test_a_size_the_layout_bound_drops_has_no_plan_and_one_it_keeps_has(catalog) -> None:
    """The speed bound is 0 where no (tp, cp, pp, dp, micro-batch) multiplies to the size with dp·mb dividing the
    global batch: the planner's own search finds no valid plan there (13 × 8 = 104 GPUs of Llama 3.1 8B at 2,048
    sequences: 13 must be pp, above the search's deepest pipeline), and finds one where the bound is positive."""
    arch = catalog.architecture("llama3.1-8b")
    bound = speed_bound(arch, _cluster(catalog, "p5.48xlarge", 8), Plan(seq_len=8192, sharding=Sharding.ddp),
                        batch=2048, micro_batches=(1, 2, 4, 8, 16), cps=(1, 2, 4, 8), vpps=(1, 2, 4), max_pp=8)  # fmt: skip
    rates = bound.tokens_per_s_many(np.array([96, 104, 112]))
    assert rates[1] == 0 and rates[0] > 0 and rates[2] > 0
    for gpus, rate in zip((96, 104, 112), rates.tolist(), strict=True):
        found = run_search(catalog, PlanSearchRequest(model="llama3.1-8b", gpu="h100-sxm", node="p5.48xlarge",
                           gpus=gpus, global_batch=2048, seq_len=8192, top_k=1, max_pp=8), max_plans=10**9)  # fmt: skip
        assert bool(found.best_by_gpus) == (rate > 0)


def test_self_build_prices_grow_with_the_cluster_so_a_smaller_sizes_bound_it(catalog) -> None:
    """The bounds price a self-build size at the largest sample size at or below it: sound only if capex, capital
    and opex never fall as nodes are added, and a size the cost model cannot price has no larger one it can."""
    from app.services.size_offers import self_build_at

    request = SizeRequest(model="llama3.1-8b", tokens=1e12)
    for slug in ("dgx-h100", "dgx-a100-80gb", "gb200-nvl72"):
        node = catalog.hardware.node(slug)
        offer = Offer(slug, "self-build", slug, "self-build", 1.0)
        previous, failed = (0.0, 0.0, 0.0), False
        for n in [*range(1, 300), *range(300, 9000, 37)]:
            priced, why = self_build_at(catalog, offer, node, n * node.accelerators_per_node, request, 100.0)
            if why:
                failed = True
                continue
            assert not failed, (slug, n)
            sb = priced.self_build
            now = (sb.capex_usd, sb.capital_total_usd, sb.opex_usd_per_month)
            assert all(a >= b for a, b in zip(now, previous, strict=True)), (slug, n)
            previous = now


def test_a_front_with_a_tolerance_covers_the_exact_front_and_keeps_the_ranking(catalog) -> None:
    """Every whole-node size makes near-equal points; with a 5 % tolerance the front searches fewer sizes, each
    point of the exact front is within 5 % (days and $) of a point shown, and the ranked rows are the same."""
    base = dict(model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm"], options=["on-demand", "self-build"],
                gpus_range="8:1024", calibrated=False, top_k=3)  # fmt: skip
    exact = run_size(catalog, SizeRequest(**base, front_tolerance_pct=0))
    loose = run_size(catalog, SizeRequest(**base, front_tolerance_pct=5))
    assert _rows(loose.ranked) == _rows(exact.ranked)
    assert loose.searched["sizes_searched"] < exact.searched["sizes_searched"]
    for p in exact.pareto:
        assert any(
            q.days <= p.days * 1.05 and q.usd_amortised <= p.usd_amortised * 1.05 for q in loose.pareto
        )


def test_the_default_searches_every_accelerator_that_has_a_node_or_an_instance(catalog) -> None:
    result = run_size(
        catalog, SizeRequest(model="llama3.1-8b", tokens=1e12, gpus_range="8:8", calibrated=False)
    )
    carried = {n.accelerator for n in catalog.hardware.nodes}
    assert set(result.searched["accelerators"]) == carried
    assert {r.accelerator for r in result.ranked} | {r.accelerator for r in result.pareto} <= carried
    assert result.searched["nodes"] >= len(
        {n.accelerator for n in catalog.hardware.nodes if n.kind == "server"}
    )


def test_a_budget_drops_what_costs_more_and_names_the_cheapest_when_nothing_fits(catalog) -> None:
    base = dict(model="llama3.1-8b", tokens=1e12, accelerators=["h100-sxm"], options=["on-demand", "spot"],
                gpus_range="64:256", calibrated=False, top_k=50)  # fmt: skip
    free = run_size(catalog, SizeRequest(**base))
    costs = sorted(r.usd_amortised for r in free.ranked)
    budget = (costs[0] + costs[-1]) / 2
    capped = run_size(catalog, SizeRequest(**base, budget_usd=budget))
    assert capped.ranked and all(r.usd_amortised <= budget for r in capped.ranked)
    assert capped.lost.get(REASON_BUDGET, 0) > 0
    broke = run_size(catalog, SizeRequest(**base, budget_usd=costs[0] / 2))
    assert not broke.ranked and f"nothing fits the budget of ${costs[0] / 2:,.0f}" in (broke.message or "")
    on_cash = run_size(catalog, SizeRequest(**base, budget_usd=budget, basis="cash"))
    assert all(r.usd_cash <= budget for r in on_cash.ranked)


def test_losses_are_counted_by_reason(catalog) -> None:
    result = run_size(catalog, SizeRequest(model="deepseek-v3", tokens=1e12, accelerators=["h100-sxm"],
                                           options=["on-demand"], gpus_range="8:256", deadline_days=200))  # fmt: skip
    assert result.lost.get(REASON_MEMORY, 0) > 0  # 671B parameters do not fit on 8-32 H100
    assert result.lost.get(REASON_DEADLINE, 0) > 0
    assert sum(result.lost.values()) + result.searched["feasible_points"] >= result.searched["sizes"]


@pytest.mark.parametrize(
    "request_fields",
    [dict(model="llama3.1-70b", tokens=15e12, deadline_days=120), dict(model="deepseek-v3", tokens=14.8e12)],
    ids=["llama3.1-70b 15T 120 days", "deepseek-v3 14.8T"],
)
def test_done_when_the_two_catalog_wide_cases_answer_with_a_plan_document(catalog, request_fields) -> None:
    """Issue 16's two cases over the whole catalog and 8-65,536 GPUs (the speed is `make bench`'s; here the answer):
    a winner, its plan document, a Pareto front, and every (node, size) settled — none left unsearched."""
    limit = Settings.model_fields["search_max_plans"].default
    result = run_size(catalog, SizeRequest(**request_fields), max_plans=limit)
    assert result.ranked and result.pareto and result.message is None
    doc = result.plan_document
    assert doc is not None and doc["schema"] == "capplan.plan/v1"
    assert doc["hardware"]["gpus"] == result.ranked[0].gpus
    assert REASON_NOT_SEARCHED not in result.lost
    s = result.searched
    request = SizeRequest(**request_fields)
    _, _, offers = check_size_request(catalog, request)
    every = sum(len(_sizes(request, catalog.hardware.node(slug).accelerators_per_node)) for slug in offers)
    assert s["sizes"] == every > 100_000 and len(s["accelerators"]) == len(
        {n.accelerator for n in catalog.hardware.nodes}
    )
    if "deadline_days" in request_fields:
        assert result.ranked[0].days <= request_fields["deadline_days"]


def test_a_winner_slower_than_a_year_without_a_deadline_is_named_with_the_fastest_point(catalog) -> None:
    """No deadline: the cheapest wins however slow; over a year, a note says so and names the front's fastest point;
    with a deadline there is no such note."""
    base = dict(model="llama3.1-8b", tokens=2e14, accelerators=["h100-sxm"], options=["on-demand"],
                gpus_range="8:64", calibrated=False)  # fmt: skip
    slow = run_size(catalog, SizeRequest(**base))
    assert slow.ranked[0].days > 365
    note = next(n for n in slow.notes if n.startswith("no deadline given"))
    fastest = min(slow.pareto, key=lambda r: r.days)
    assert f"{slow.ranked[0].days:,.0f} days" in note and f"{fastest.days:,.1f} days" in note
    bounded = run_size(catalog, SizeRequest(**base, deadline_days=3000))
    assert not any(n.startswith("no deadline given") for n in bounded.notes)
