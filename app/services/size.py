"""Sizing use-case (issue 16, part 1): every accelerator × whole-node cluster size × plan × pricing option.

For each node that some offer pays for (an AWS instance, the node another cloud's instance stands for, a
self-build server), each cluster size's fastest feasible plan is found on that node's own cluster (calibrated, its
own fabric) by :class:`app.domain.search.fastest.FastestPlanFinder`: the plan ``capplan plan --node … --gpus …``
ranks first (same arrays, rules, capability table and ordering), found by branch and bound instead of evaluating
every plan. Each is then priced under every offer for that node with the reliability model's goodput (spot adds
its interruptions), and :mod:`app.domain.search.sizing` ranks them and draws the Pareto front. ``prune=False``
runs the planner's exhaustive search on every pair instead: the reference the tests compare with.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.domain.catalog import Catalog
from app.domain.cost.cloud import catalog_regions
from app.domain.cost.inputs import CostOption
from app.domain.cost.storage import storage_cost
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.compute import model_flops_per_token
from app.domain.estimator.memory import host_capacity_bytes
from app.domain.estimator.plan import Offload, Plan, Sharding
from app.domain.model.counts import parameter_counts
from app.domain.reliability.formulas import plan_checkpoint_bytes_per_param
from app.domain.search.fastest import FastestPlanFinder
from app.domain.search.sizing import (
    REASON_DOMINATED,
    REASON_MEMORY,
    REASON_NO_LAYOUT,
    REASON_NO_PRICE,
    REASON_NOT_SEARCHED,
    Frontier,
    Offer,
    SizedPlan,
    choose,
    money,
    price_plan,
    speed_bound,
    state_fits_bound,
)
from app.domain.search.spec import OFFLOADS_BY_FRAMEWORK, Candidate, SearchCancelled, SearchTooLarge
from app.schemas import EstimateRequest, PlanSearchRequest, parse_range
from app.schemas.size import DEFAULT_GPUS_RANGE, DEFAULT_OPTIONS, SizeRequest, SizeResult, SizeRow
from app.services.documents import plan_document_from_request
from app.services.errors import InputError
from app.services.errors import field_error as _error
from app.services.estimate import PLAN_FIELDS
from app.services.search import SearchBudget, SearchBusy, run_search, search_spec
from app.services.size_bounds import (
    BOUND_REASONS,
    BUDGET_CODE,
    DEADLINE_CODE,
    DOMINATED,
    NO_PRICE_CODE,
    BoundTable,
    Dominated,
    GoodputCache,
    SizePair,
    bound_cluster,
    bound_miss,
)
from app.services.size_offers import note_unpriced, offers_by_node, self_build_at, self_build_floor

__all__ = [
    "DEFAULT_GPUS_RANGE", "DEFAULT_OPTIONS", "SizeRequest", "SizeResult", "SizeRow", "SizingProgress",
    "check_size_request", "offers_by_node", "run_size", "winner_document",
]  # fmt: skip

# What the speed bound's per-rank compute terms read of a cluster besides its NVLink domain (tested).
BOUND_READS = {"accelerator", "efficiency", "scale", "stacks", "power_limit_w"}


def _row(rank: int, p: SizedPlan) -> SizeRow:
    plan = p.plan
    return SizeRow(
        rank=rank, accelerator=p.accelerator, node=p.node, vendor=p.vendor, offer=p.offer, option=p.option,
        gpus=p.gpus, nodes=p.nodes,
        plan={"tp": plan.tp, "pp": plan.pp, "vpp": plan.vpp, "dp": plan.dp, "cp": plan.cp, "ep": plan.ep,
              "expert_tp": plan.expert_tp,
              "sharding": plan.sharding.value, "offload": plan.offload.value, "micro_batch": plan.micro_batch,
              "global_batch": plan.global_batch, "recompute": plan.recompute.value},
        days=p.days, goodput=p.goodput, usd_amortised=p.usd_amortised, usd_cash=p.usd_cash,
        usd_per_million_tokens=p.usd_per_million_tokens, mfu=p.mfu, headroom_gib=p.headroom_gib,
        tokens_per_s=p.candidate.tokens_per_s,
    )  # fmt: skip


def _sizes(request: SizeRequest, gpus_per_node: int) -> np.ndarray:
    """Every whole-node cluster size (GPUs) in the request's range."""
    low, high = parse_range(request.gpus_range)
    nodes = np.arange(max(1, math.ceil(low / gpus_per_node)), int(high // gpus_per_node) + 1, dtype=np.int64)
    return nodes * gpus_per_node


def check_size_request(
    catalog: Catalog, request: SizeRequest, notes: list[str] | None = None
) -> tuple[Any, set[str], dict[str, list[Offer]]]:
    """The model, the accelerators and the offers by node of ``request`` (``notes`` gets what the prices say);
    InputError naming the field when the catalog has no such model, accelerator or region, or no offer for them
    (checked before any search starts)."""
    try:
        arch = catalog.architecture(request.model)
    except KeyError as exc:
        raise InputError([_error("model", str(exc), "value_error.unknown_slug")]) from None
    known = sorted({n.accelerator for n in catalog.hardware.nodes})
    if request.accelerators:
        unknown = [a for a in request.accelerators if a not in known]
        if unknown:
            raise InputError([_error("accelerators", f"no node or instance in the catalog carries "
                                     f"{', '.join(unknown)}; known: {', '.join(known)}", "value_error.unknown_slug")])  # fmt: skip
    accelerators = set(request.accelerators or known)
    if request.region is not None and request.region not in catalog_regions(catalog.cost):
        raise InputError([_error("region", f"unknown region {request.region!r}; regions with prices: "
                                 f"{', '.join(catalog_regions(catalog.cost))}", "value_error.unknown_slug")])  # fmt: skip
    offers = offers_by_node(catalog, accelerators, set(request.options or DEFAULT_OPTIONS), request.cost_overrides(),
                            notes)  # fmt: skip
    if not offers:
        raise InputError([_error("options", "no offer in the catalog for these accelerators and options",
                                 "value_error.price")])  # fmt: skip
    return arch, accelerators, offers


@dataclass(frozen=True, slots=True)
class SizingProgress:
    """Where a sizing run stands: ``phase`` "bounds" (``done`` of ``total`` nodes bounded), "search" (``done`` of
    ``total`` (node, size) pairs settled — searched, or dropped by the dominance bound — ``label`` the pair being
    searched) or "done"; the valid plans the searched pairs hold, the plans evaluated exactly (the others were
    bounded) and the seconds so far."""

    phase: str
    done: int
    total: int
    label: str = ""
    valid_plans: int = 0
    evaluated_plans: int = 0
    elapsed_s: float = 0.0


def run_size(
    catalog: Catalog,
    request: SizeRequest,
    *,
    progress: Callable[[SizingProgress], None] | None = None,
    max_plans: int | None = None,
    budget: SearchBudget | None = None,
    prune: bool = True,
) -> SizeResult:
    """The sizing search. ``progress`` is called as the bounds are computed, after each (node, size) is settled
    and at the end; ``max_plans`` (CAPPLAN_SEARCH_MAX_PLANS) bounds the plans evaluated on each size (the
    fastest-plan search's chunks; its grid may be larger: the bounds leave most of it unevaluated); ``budget`` bounds the
    wall time of the whole search (CAPPLAN_SEARCH_TIMEOUT_S) and the searches running at once. ``prune=False``
    searches every pair with the planner's exhaustive search (:func:`run_search`), no bound applied: the
    reference the tests compare the pruned search with."""
    notes: list[str] = []
    arch, accelerators, offers = check_size_request(catalog, request, notes)
    known = sorted({n.accelerator for n in catalog.hardware.nodes})
    batch = max(1, request.global_batch_tokens // request.seq_len)
    # no tokens: with them the planner's search moves the plans to the node its default price option pays for
    # (an AWS instance), and a self-build server or another cloud's node would be modelled on EFA
    base = dict(model=request.model, global_batch=batch, seq_len=request.seq_len, top_k=1,
                calibrated=request.calibrated)  # fmt: skip
    template = PlanSearchRequest(**base, gpu=known[0], gpus=1)  # the search's framework, precision, …
    spec = search_spec(template, [1], max_plans=max_plans or 10**12)
    shape = Plan(framework=template.framework, precision=template.precision, optimizer=template.optimizer,
                 seq_len=request.seq_len, flash_attention=template.flash_attention,
                 fused_kernels=template.fused_kernels, sharding=Sharding.ddp)  # fmt: skip
    bounds: dict[str, Any] = {}
    counts = parameter_counts(arch)
    params = counts.total
    state_bytes = params * plan_checkpoint_bytes_per_param(shape)
    offloads = set(OFFLOADS_BY_FRAMEWORK[template.framework]) - {Offload.none}
    goodput = GoodputCache(catalog, params, plan_checkpoint_bytes_per_param(shape))
    # the dataset and kept checkpoints in object storage and the transfers, as the cost model adds them to every
    # cloud option (a self-build's storage system is sized to the same bytes, in its capex)
    storage = storage_cost(catalog.cost, request.cost_overrides(), request.tokens, params,
                           goodput.report(8, 1).checkpoint_bytes)  # fmt: skip
    offers = {
        slug: [o if o.vendor == "self-build" else replace(o, storage_usd_per_month=storage.usd_per_month,
                                                            transfer_usd=storage.egress_usd + storage.inter_region_usd)
               for o in node_offers]
        for slug, node_offers in offers.items()
    }  # fmt: skip
    basis = request.basis
    flops = model_flops_per_token(arch, request.seq_len, counts.matmul_weights_active).total
    finder = FastestPlanFinder(arch, spec, flops)
    clusters: dict[
        str, Cluster
    ] = {}  # each node's cluster as the planner builds it, once: only its size varies
    lost: Counter[str] = Counter()
    priced: list[tuple[int, SizedPlan]] = []
    frontier = Frontier(request.top_k, request.front_tolerance_pct / 100 if prune else 0.0)
    stats = Counter()
    notes.insert(0, f"global batch {batch:,} sequences of {request.seq_len:,} tokens")
    start = time.perf_counter()

    def report(phase: str, done: int, total: int, label: str = "") -> None:
        if progress is not None:
            progress(SizingProgress(phase, done, total, label, stats["valid"], stats["evaluated"],
                                    time.perf_counter() - start))  # fmt: skip

    def bound_point(offer: Offer, gpus: Any, gpn: int, tokens_per_s: Any, g: Any) -> tuple[Any, Any]:
        """(days, $ on the ranking's basis) of the request's tokens at ``tokens_per_s`` (numbers or arrays)."""
        wall_h, amortised, cash = money(offer, gpus, gpn, request.tokens, tokens_per_s, g)
        return wall_h / 24, cash if basis == "cash" else amortised

    def all_beaten(points: list[tuple[float, float]]) -> bool:
        """Whether the frontier beats every (days, $) of ``points``: the pair can neither rank nor be on the front."""
        days, usd = np.array(points, dtype=float).reshape(-1, 2).T
        return bool(frontier.beats_many(days, usd).all())

    def ok(p: SizedPlan) -> bool:
        return (request.deadline_days is None or p.days <= request.deadline_days) and (
            request.budget_usd is None or p.usd(basis) <= request.budget_usd
        )

    # 1. every (node, whole-node size), a node's sizes at once, with a lower bound of each offer's days and $: the
    # speed bound, goodput 1 and a self-build's capital at the largest sample size at or below (both only lower
    # them). The memory, layout, deadline and budget bounds drop sizes here; a pair is refined to its own goodput
    # and self-build price just before it would be searched.
    table = BoundTable()
    unpriced_self_build: dict[str, list] = {}  # node → [smallest cluster the cost model cannot price, why]
    for i, (node_slug, node_offers) in enumerate(sorted(offers.items())):
        report("bounds", i, len(offers), node_slug)
        node = catalog.hardware.node(node_slug)
        gpn = node.accelerators_per_node
        sizes = _sizes(request, gpn)
        first = stats["sizes"]
        stats["sizes"] += len(sizes)
        if all(o.usd_per_gpu_hour is None for o in node_offers):
            lost[REASON_NO_PRICE] += len(sizes) * len(node_offers)
            continue
        if not len(sizes):
            continue
        cluster = clusters[node_slug] = bound_cluster(catalog, node, request.calibrated)
        context = f"{cluster.nvlink_domain} " + cluster.model_dump_json(include=BOUND_READS)
        if context not in bounds:  # nodes with the same accelerator, figures and NVLink domain share it
            bounds[context] = speed_bound(arch, cluster, shape, batch=batch, micro_batches=spec.micro_batches,
                                          cps=spec.cps, vpps=spec.vpps, max_pp=template.max_pp,
                                          work=lambda keys, c=cluster: finder.key_work(c, keys))  # fmt: skip
        tps = bounds[context].tokens_per_s_many(sizes)
        nodes = -(-sizes // gpn)
        keep = np.ones(len(sizes), dtype=bool)
        if prune:
            host, nvme = host_capacity_bytes(node.host_memory_gib, node.local_nvme_tb)
            fits = state_fits_bound(state_bytes, sizes, nodes, cluster.accelerator.memory_usable_bytes,
                                    host if offloads else 0.0, nvme if Offload.nvme in offloads else 0.0)  # fmt: skip
            stats["memory"] += int((~fits).sum())
            lost[REASON_MEMORY] += int((~fits).sum()) * len(node_offers)
            no_layout = fits & (tps <= 0)
            stats["no_layout"] += int(no_layout.sum())
            lost[REASON_NO_LAYOUT] += int(no_layout.sum()) * len(node_offers)
            keep = fits & (tps > 0)
        idx = np.nonzero(keep)[0]
        if not len(idx):
            continue
        kept, kept_nodes = sizes[idx], nodes[idx]
        speed = np.where(
            tps[idx] > 0, tps[idx], np.inf
        )  # unpruned: a size without a layout is searched anyway
        days = np.full((len(idx), len(node_offers)), np.inf)
        usd = np.full((len(idx), len(node_offers)), np.inf)
        why = np.zeros((len(idx), len(node_offers)), dtype=np.int8)  # 0 live, else BOUND_REASONS[why - 1]
        for k, offer in enumerate(node_offers):
            floor: Offer | None = offer
            if offer.option == CostOption.self_build.value:
                floor, unpriced, reason = self_build_floor(catalog, offer, node, kept_nodes, request,
                                                            storage.stored_tb)  # fmt: skip
                if unpriced.any():  # from a size the cost model cannot price on (tested: it stays so)
                    note_unpriced(unpriced_self_build, node.slug, int(kept[unpriced].min()), reason)
                    why[unpriced, k] = NO_PRICE_CODE
            elif offer.usd_per_gpu_hour is None:
                floor = None
            if floor is None:
                why[:, k] = NO_PRICE_CODE
                continue
            priced_here = why[:, k] == 0
            d, u = bound_point(floor, kept, gpn, speed, 1.0)
            days[priced_here, k], usd[priced_here, k] = d[priced_here], u[priced_here]
            if prune:  # as bound_miss: the deadline first, then the budget
                if request.deadline_days is not None:
                    why[priced_here & (days[:, k] > request.deadline_days), k] = DEADLINE_CODE
                if request.budget_usd is not None:
                    why[(why[:, k] == 0) & (usd[:, k] > request.budget_usd), k] = BUDGET_CODE
        for code, reason in enumerate(BOUND_REASONS, 1):
            lost[reason] += int((why == code).sum())
        lost[REASON_NO_PRICE] += int((why == NO_PRICE_CODE).sum())
        stats["bound_points"] += int(((why > 0) & (why < NO_PRICE_CODE)).sum())
        table.add(node, node_offers, first + idx, kept, speed, days, usd, why)
    order = table.finish()

    def refine(row: int, bounded: bool = True) -> SizePair | None:
        """The row's pair with each live offer at its own goodput and (self-build) its own price; None when no
        offer is left (the deadline or the budget drops them at those, or the self-build cannot be priced).
        ``bounded=False`` (the bounds broke): every priced offer, none dropped by a bound."""
        node, offers_here, order_, gpus, tps, why_b = table.row(row)
        gpn = node.accelerators_per_node
        nodes = -(-gpus // gpn)
        pair = SizePair(order_, node, gpus, tps, [])
        for k, offer in enumerate(offers_here):
            if why_b[k] == NO_PRICE_CODE or (why_b[k] and bounded):
                continue
            if offer.option == CostOption.self_build.value:
                offer, reason = self_build_at(catalog, offer, node, gpus, request, storage.stored_tb)
                if reason:
                    note_unpriced(unpriced_self_build, node.slug, gpus, reason)
                    lost[REASON_NO_PRICE] += 1
                    continue
            g = goodput(gpus, nodes, offer)
            d, u = bound_point(offer, gpus, gpn, tps, g)
            x = (offer, g, float(d), float(u))
            miss = bound_miss(request, x[2], x[3]) if prune and bounded else None
            if miss:
                lost[miss] += 1
                stats["bound_points"] += 1
            else:
                pair.live.append(x)
        return pair if pair.live else None

    def _fastest_within_limits(
        pair: SizePair, cluster: Cluster, should_stop: Callable[[], bool] | None, dominance: bool
    ) -> Candidate | None | Dominated:
        """The fastest-plan search of one pair (``fastest`` below); SearchTooLarge past the limits."""
        node, gpus = pair.node, pair.gpus
        if dominance:
            tps = finder.upper_tokens_per_s(cluster, gpus, batch)
            pair.tps_bound = min(pair.tps_bound, tps) if tps > 0 else pair.tps_bound
            gpn = node.accelerators_per_node
            if tps > 0 and all_beaten([bound_point(o, gpus, gpn, tps, g) for o, g, _, _ in pair.live]):
                return DOMINATED
        found = finder.find(cluster, gpus, batch, should_stop=should_stop)
        stats["broken"] += found.bound_broken  # the bounds are unsafe: what they dropped is searched
        stats["valid"] += found.valid_plans
        stats["evaluated"] += found.evaluated_plans
        stats["considered"] += found.grid_points
        stats["plan_bound_broken"] += found.bound_broken
        return found.candidate

    def fastest(
        pair: SizePair, should_stop: Callable[[], bool] | None, dominance: bool
    ) -> Candidate | None | str:
        """The pair's fastest plan that fits (None: none fits), why it was not searched, or DOMINATED when (with
        ``dominance``) the fastest-plan search's own bound — tighter than the speed bound: communication, every
        rank, memory — shows it can neither be ranked nor be on the front."""
        node, gpus = pair.node, pair.gpus
        if not prune:  # the planner's own exhaustive search, as `capplan plan --node … --gpus …` runs it
            try:
                found = run_search(catalog, PlanSearchRequest(**base, gpu=node.accelerator, node=node.slug,
                                                              gpus=gpus), max_plans=spec.max_plans)  # fmt: skip
            except InputError as exc:
                return str(exc)
            stats["valid"] += found.evaluated_plans
            stats["evaluated"] += found.evaluated_plans
            stats["considered"] += found.considered_plans
            return next((c for c in found.best_by_gpus if c.gpus == gpus), None)
        cluster = clusters[node.slug].model_copy(update={"gpus": gpus})
        try:
            return _fastest_within_limits(pair, cluster, should_stop, dominance)
        except SearchTooLarge as exc:  # the plans to evaluate (not the grid) exceed CAPPLAN_SEARCH_MAX_PLANS
            return str(exc)

    def search_pair(pair: SizePair, should_stop: Callable[[], bool] | None, dominance: bool = False) -> bool:
        """Search the pair and price its plan under each offer; False when it turned out dominated (unsearched)."""
        node, gpn = pair.node, pair.node.accelerators_per_node
        cand = fastest(pair, should_stop, dominance)
        if cand is DOMINATED:
            return False
        if isinstance(cand, str):
            lost[REASON_NOT_SEARCHED] += len(pair.live)
            notes.append(f"{node.slug} at {pair.gpus:,} GPUs: not searched ({cand})")
            return True
        stats["searched"] += 1
        if cand is None:
            lost[REASON_MEMORY] += len(pair.live)
            return True
        if cand.tokens_per_s > pair.tps_bound * (1 + 1e-9):
            stats["broken"] += 1
        for offer, g, _, _ in pair.live:
            p = price_plan(node.accelerator, offer, cand, gpn, request.tokens, g)
            priced.append((pair.order, p))
            if ok(p):
                frontier.add(p.days, p.usd(basis))
        return True

    def search_all(should_stop: Callable[[], bool] | None) -> None:
        """Read the pairs most promising first; skip those the frontier beats at their bounds (a chunk at once),
        refine the rest and search what is still not beaten."""
        searched: set[int] = set()
        total, i, chunk = len(order), 0, 64
        while i < total:
            rows = order[i : i + chunk]
            beaten = (
                table.beaten(rows, frontier) if prune and not stats["broken"] else np.zeros(len(rows), bool)
            )
            for row, skip in zip(rows.tolist(), beaten.tolist(), strict=True):
                if should_stop is not None and should_stop():
                    raise SearchCancelled("sizing stopped")
                if skip:
                    stats["dominated"] += 1
                    lost[REASON_DOMINATED] += table.live_count(row)
                    continue
                pair = refine(row)
                if pair is None:
                    continue
                dominance = prune and not stats["broken"]
                if dominance and all_beaten([(d, u) for _, _, d, u in pair.live]):
                    stats["dominated"] += 1
                    lost[REASON_DOMINATED] += len(pair.live)
                    continue
                report(
                    "search", i, total, f"{pair.node.slug} at {pair.gpus:,} GPUs ({pair.node.accelerator})"
                )
                searched.add(row)
                if not search_pair(pair, should_stop, dominance=dominance):
                    stats["dominated_by_plan_bound"] += 1
                    stats["dominated"] += 1
                    searched.discard(row)
                    lost[REASON_DOMINATED] += len(pair.live)
            i += len(rows)
            chunk = min(2 * chunk, 4096)
        if stats[
            "broken"
        ]:  # a searched plan beat its speed bound: the bounds are unsafe, search what they dropped
            notes.append("a plan beat its speed bound: every size the bounds had dropped was searched")
            for reason in (REASON_DOMINATED, *BOUND_REASONS):
                lost[reason] = 0  # every size is priced now; choose() counts the misses
            for row in range(len(table)):
                if row not in searched and (pair := refine(row, bounded=False)) is not None:
                    search_pair(pair, should_stop)
        if stats["plan_bound_broken"]:
            notes.append(f"a plan beat its step-time bound on {stats['plan_bound_broken']} cluster sizes: every plan "
                         "of those was evaluated")  # fmt: skip
        report("done", total, total)

    if budget is None:
        search_all(None)
    else:
        with budget.slot() as should_stop:
            try:
                search_all(should_stop)
            except SearchCancelled:
                raise SearchBusy(
                    f"the sizing search ran past its {budget.timeout_s:g} s budget (CAPPLAN_SEARCH_TIMEOUT_S); "
                    "narrow it (fewer accelerators, options or a smaller GPU range)",
                    retry_after_s=max(1, math.ceil(budget.timeout_s)),
                ) from None
    elapsed = time.perf_counter() - start
    for slug, (at, reason) in sorted(unpriced_self_build.items()):
        notes.append(f"self-build {slug} not priced at {at:,} GPUs and above: {reason}")
    points = [p for _, p in sorted(priced, key=lambda x: x[0])]  # the exhaustive order, for equal ranks
    outcome = choose(points, lost, deadline_days=request.deadline_days, budget_usd=request.budget_usd,
                     top_k=request.top_k, basis=basis)  # fmt: skip
    doc = None
    if outcome.ranked:
        doc = winner_document(catalog, request, outcome.ranked[0]).model_dump(mode="json", by_alias=True)
        notes.extend(_slow_winner_note(request, outcome.ranked[0], outcome.pareto))
    return SizeResult(
        model=request.model, tokens=request.tokens, deadline_days=request.deadline_days,
        budget_usd=request.budget_usd, basis=outcome.basis, ranked_on=request.basis,
        ranked=[_row(i + 1, p) for i, p in enumerate(outcome.ranked)],
        pareto=[_row(0, p) for p in outcome.pareto], lost=outcome.lost,
        searched={"accelerators": sorted(accelerators), "nodes": len(offers), "offers": sum(map(len, offers.values())),
                  "sizes": stats["sizes"], "sizes_searched": stats["searched"],
                  "sizes_pruned_by_memory_bound": stats["memory"], "sizes_pruned_by_dominance": stats["dominated"],
                  "sizes_pruned_by_dominance_of_the_plan_bound": stats["dominated_by_plan_bound"],
                  "sizes_pruned_by_layout": stats["no_layout"],
                  "points_pruned_by_deadline_or_budget_bound": stats["bound_points"],
                  "priced_points": len(priced), "feasible_points": outcome.feasible, "grid_points": stats["considered"],
                  "valid_plans": stats["valid"], "evaluated_plans": stats["evaluated"], "elapsed_s": elapsed,
                  "plans_per_s": stats["valid"] / elapsed if elapsed > 0 else 0.0,
                  "evaluated_plans_per_s": stats["evaluated"] / elapsed if elapsed > 0 else 0.0},
        message=outcome.message, plan_document=doc, notes=notes,
    )  # fmt: skip


def _slow_winner_note(request: SizeRequest, winner: SizedPlan, front: tuple[SizedPlan, ...]) -> list[str]:
    """Without a deadline the cheapest point wins however slow it is: when it takes more than a year, say so and
    name the fastest point of the front, so a newcomer does not plan a three-year run by accident."""
    if request.deadline_days is not None or winner.days <= 365:
        return []
    fastest = min(front, key=lambda p: p.days, default=winner)
    return [
        f"no deadline given, so the cheapest wins however slow: {winner.gpus:,} × {winner.accelerator} takes "
        f"{winner.days:,.0f} days ({winner.days / 365:.1f} years); the fastest point of the front takes "
        f"{fastest.days:,.1f} days ({fastest.gpus:,} × {fastest.accelerator}) — give a deadline to rank within it"
    ]


def winner_document(catalog: Catalog, request: SizeRequest, p: SizedPlan):  # noqa: ANN201 - PlanDocument
    """The capplan.plan/v1 document of a sized plan, as the planner and ``capplan export`` produce it."""
    # every field of the sized plan, as the search's winner document carries it (services/search.py)
    fields = {f: getattr(p.plan, f) for f in (*PLAN_FIELDS, "dp")}
    est = EstimateRequest(
        model=request.model, gpu=p.accelerator, node=p.node, gpus=p.gpus, tokens=request.tokens,
        calibrated=request.calibrated, **fields,
    )  # fmt: skip
    return plan_document_from_request(catalog, est)
