"""Sizing use-case (issue 16, part 1): every accelerator × whole-node cluster size × plan × pricing option.

For each node that some offer pays for (an AWS instance, the node another cloud's instance stands for, a
self-build server), the plan search runs exactly as ``capplan plan`` does (:func:`app.services.search.run_search`,
same arrays, rules, calibration and fabric) over the cluster sizes, and hands back each size's fastest
feasible plan. Each is then priced under every offer for that node with the reliability model's goodput
(spot adds its interruptions), and :mod:`app.domain.sizing` ranks them and draws the Pareto front.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import Field, model_validator

from app.domain.catalog import Catalog
from app.domain.cost.gpu_hour import usd_per_gpu_hour
from app.domain.cost.inputs import (
    CABLES_OPTICS,
    DEFAULT_COST_OF_CAPITAL,
    DEFAULT_INSTALLATION_FRACTION,
    DEFAULT_RESIDUAL_FRACTION,
    SWITCHES_PER_NODE_2TIER,
    CostOption,
)
from app.domain.cost.selfbuild import capital_usd_per_month
from app.domain.estimator.compute import model_flops_per_token
from app.domain.model.counts import parameter_counts
from app.domain.reliability.formulas import HOURS_PER_MONTH, plan_checkpoint_bytes_per_param
from app.domain.reliability.report import reliability_report
from app.domain.search.engine import SearchCancelled
from app.domain.search.sizing import (
    REASON_DEADLINE,
    REASON_MEMORY,
    REASON_NO_PRICE,
    REASON_NOT_SEARCHED,
    Offer,
    SizedPlan,
    choose,
    price_plan,
)
from app.schemas import RANGE_PATTERN, EstimateRequest, PlanSearchRequest, StrictNumbers
from app.services.documents import plan_document_from_request
from app.services.errors import InputError
from app.services.errors import field_error as _error
from app.services.search import SearchBudget, SearchBusy, run_search

DEFAULT_OPTIONS = (
    CostOption.on_demand, CostOption.commit_1yr, CostOption.commit_3yr, CostOption.spot,
    CostOption.capacity_block, CostOption.self_build,
)  # fmt: skip
DEFAULT_GPUS_RANGE = "8:65536"


class SizeRequest(StrictNumbers):
    """Size a cluster: a model preset, the tokens to train and optional deadline and budget; every
    accelerator (or those asked), every whole-node size in ``gpus_range`` (powers of two of nodes and the
    ends), every plan and every pricing option."""

    model: str = Field(max_length=64)
    tokens: float = Field(gt=0, le=1e16, allow_inf_nan=False, description="tokens to train")
    deadline_days: float | None = Field(default=None, gt=0, le=3650, allow_inf_nan=False)
    budget_usd: float | None = Field(default=None, gt=0, le=1e12, allow_inf_nan=False)
    accelerators: list[str] | None = Field(
        default=None, max_length=32, description="default: the whole catalog"
    )
    options: list[CostOption] | None = Field(default=None, max_length=len(CostOption))
    gpus_range: str = Field(default=DEFAULT_GPUS_RANGE, pattern=RANGE_PATTERN, description="'A:B' GPUs")
    seq_len: int = Field(default=8192, ge=128, le=1_048_576)
    global_batch_tokens: int = Field(default=16_777_216, ge=1024, le=1 << 30, description="tokens per step")
    top_k: int = Field(default=20, ge=1, le=200)
    calibrated: bool = True

    @model_validator(mode="after")
    def _batch(self) -> SizeRequest:
        if self.global_batch_tokens < self.seq_len:
            raise ValueError("global_batch_tokens must be at least seq_len")
        return self


class SizeRow(StrictNumbers):
    rank: int
    accelerator: str
    node: str
    vendor: str
    offer: str
    option: str
    gpus: int
    nodes: int
    plan: dict[str, Any]
    days: float
    goodput: float
    usd_amortised: float
    usd_cash: float
    usd_per_million_tokens: float
    mfu: float
    headroom_gib: float
    tokens_per_s: float


class SizeResult(StrictNumbers):
    model: str
    tokens: float
    deadline_days: float | None
    budget_usd: float | None
    basis: str
    ranked: list[SizeRow]
    pareto: list[SizeRow]
    lost: dict[str, int]
    searched: dict[str, Any]
    message: str | None
    plan_document: dict[str, Any] | None
    notes: list[str]


def _row(rank: int, p: SizedPlan) -> SizeRow:
    plan = p.plan
    return SizeRow(
        rank=rank, accelerator=p.accelerator, node=p.node, vendor=p.vendor, offer=p.offer, option=p.option,
        gpus=p.gpus, nodes=p.nodes,
        plan={"tp": plan.tp, "pp": plan.pp, "vpp": plan.vpp, "dp": plan.dp, "cp": plan.cp, "ep": plan.ep,
              "sharding": plan.sharding.value, "offload": plan.offload.value, "micro_batch": plan.micro_batch,
              "global_batch": plan.global_batch, "recompute": plan.recompute.value},
        days=p.days, goodput=p.goodput, usd_amortised=p.usd_amortised, usd_cash=p.usd_cash,
        usd_per_million_tokens=p.usd_per_million_tokens, mfu=p.mfu, headroom_gib=p.headroom_gib,
        tokens_per_s=p.candidate.tokens_per_s,
    )  # fmt: skip


def _self_build_capital(catalog: Catalog, slug: str, gpus_per_node: int) -> tuple[float, float] | None:
    """(capex per node, its repayment per GPU-hour) as ``usd_per_gpu_hour``'s self-build figure counts them."""
    sb = catalog.cost.self_build
    if slug not in sb.defaults.server_price:
        return None
    fabric = (
        sb.component(SWITCHES_PER_NODE_2TIER).price_usd.mid + sb.component(CABLES_OPTICS[2]).price_usd.mid
    )
    capex = (sb.server_price_for(slug).price_usd.mid + fabric) * (1 + DEFAULT_INSTALLATION_FRACTION)
    per_month = capital_usd_per_month(
        capex, capex * DEFAULT_RESIDUAL_FRACTION, sb.depreciation().years, DEFAULT_COST_OF_CAPITAL
    )
    return capex, per_month / (gpus_per_node * HOURS_PER_MONTH)


def offers_by_node(
    catalog: Catalog, accelerators: set[str], options: set[CostOption]
) -> dict[str, list[Offer]]:
    """Every way to pay for every node carrying one of ``accelerators``, keyed by the node it runs on."""
    hw, cc = catalog.hardware, catalog.cost
    out: dict[str, list[Offer]] = {}
    aws = {p.slug for p in cc.instance_prices}
    for node in sorted(hw.nodes, key=lambda n: n.slug):
        if node.accelerator not in accelerators:
            continue
        gpn = node.accelerators_per_node
        if node.kind == "cloud-instance" and node.slug in aws:
            for opt in sorted(options - {CostOption.self_build}):
                out.setdefault(node.slug, []).append(
                    Offer(
                        node.slug,
                        "aws",
                        node.slug,
                        opt.value,
                        usd_per_gpu_hour(cc, node.slug, opt, gpus_per_node=gpn),
                    )
                )
        if node.kind == "server" and CostOption.self_build in options:
            capital = _self_build_capital(catalog, node.slug, gpn)
            if capital is not None:
                out.setdefault(node.slug, []).append(
                    Offer(
                        node.slug,
                        "self-build",
                        node.slug,
                        "self-build",
                        usd_per_gpu_hour(cc, node.slug, CostOption.self_build, gpus_per_node=gpn),
                        capital_usd_per_node=capital[0],
                        capital_usd_per_gpu_hour=capital[1],
                    )  # fmt: skip
                )
    for p in cc.provider_prices:
        node = hw.node(p.like_node)
        if node.accelerator not in accelerators:
            continue
        for opt in sorted(options & {CostOption.on_demand, CostOption.commit_1yr, CostOption.commit_3yr}):
            out.setdefault(node.slug, []).append(
                Offer(node.slug, p.provider, p.slug, opt.value, usd_per_gpu_hour(cc, p.slug, opt))
            )
    return out


def _sizes(request: SizeRequest, gpus_per_node: int) -> list[int]:
    low, high = sorted(float(x) for x in request.gpus_range.split(":"))
    nodes = range(max(1, math.ceil(low / gpus_per_node)), int(high // gpus_per_node) + 1)
    if not nodes:
        return []
    picks = {nodes[0], nodes[-1], *(1 << k for k in range(0, 20) if nodes[0] <= 1 << k <= nodes[-1])}
    return sorted(n * gpus_per_node for n in picks)


def run_size(
    catalog: Catalog,
    request: SizeRequest,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    max_plans: int | None = None,
    budget: SearchBudget | None = None,
) -> SizeResult:
    """The sizing search. ``progress(node, done, total)`` is called before each node's search and at the end;
    ``max_plans`` (CAPPLAN_SEARCH_MAX_PLANS) bounds each node's plan space; ``budget`` bounds the wall time
    of the whole search (CAPPLAN_SEARCH_TIMEOUT_S) and the searches running at once."""
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
    options = set(request.options or DEFAULT_OPTIONS)
    offers = offers_by_node(catalog, accelerators, options)
    if not offers:
        raise InputError([_error("options", "no offer in the catalog for these accelerators and options",
                                 "value_error.price")])  # fmt: skip
    batch = max(1, request.global_batch_tokens // request.seq_len)
    params = parameter_counts(arch).total
    lost: Counter[str] = Counter()
    priced: list[SizedPlan] = []
    evaluated = considered = pruned = 0
    flops = model_flops_per_token(arch, request.seq_len, parameter_counts(arch).matmul_weights_active).total
    notes = [f"global batch {batch:,} sequences of {request.seq_len:,} tokens"]
    start = time.perf_counter()

    def search_all(should_stop: Callable[[], bool] | None) -> None:
        nonlocal evaluated, considered, pruned
        for i, (node_slug, node_offers) in enumerate(sorted(offers.items())):
            if should_stop is not None and should_stop():
                raise SearchCancelled("sizing stopped")
            if progress:
                progress(node_slug, i, len(offers))
            node = catalog.hardware.node(node_slug)
            gpn = node.accelerators_per_node
            sizes = _sizes(request, gpn)
            if not sizes:
                continue
            if all(o.usd_per_gpu_hour is None for o in node_offers):
                lost[REASON_NO_PRICE] += len(sizes) * len(node_offers)
                continue
            peak = catalog.hardware.accelerator(node.accelerator).peak_tflops("bf16") * 1e12
            if request.deadline_days is not None:  # bound: MFU ≤ 1 and goodput ≤ 1 cannot meet it
                late = [
                    g for g in sizes if request.tokens * flops / (g * peak) / 86_400 > request.deadline_days
                ]
                lost[REASON_DEADLINE] += len(late) * len(node_offers)
                pruned += len(late)
                sizes = [g for g in sizes if g not in late]
            best: dict[int, Any] = {}
            skipped: list[int] = []
            reason = ""
            pending = _chunks(sizes)  # the planner's search thins more than 12 sizes; keep them all
            while pending:
                chunk = pending.pop(0)
                try:
                    found = run_search(catalog, PlanSearchRequest(
                        model=request.model, gpu=node.accelerator, node=node_slug,
                        gpus_range=f"{chunk[0]}:{chunk[-1]}", global_batch=batch, seq_len=request.seq_len,
                        tokens=request.tokens, top_k=1, calibrated=request.calibrated,
                    ), max_plans=max_plans or 10**12)  # fmt: skip
                except InputError as exc:
                    too_large = any(e.get("type") == "value_error.search_too_large" for e in exc.errors)
                    if too_large and len(chunk) > 1:  # split until each search fits CAPPLAN_SEARCH_MAX_PLANS
                        half = len(chunk) // 2
                        pending[:0] = [chunk[:half], chunk[half:]]
                        continue
                    skipped += chunk
                    reason = str(exc)
                    continue
                evaluated += found.evaluated_plans
                considered += found.considered_plans
                best.update({c.gpus: c for c in found.best_by_gpus})
            lost[REASON_NOT_SEARCHED] += len(skipped) * len(node_offers)
            if skipped:
                notes.append(
                    f"{node_slug} at {', '.join(f'{g:,}' for g in sorted(skipped))} GPUs: not searched ({reason})"
                )
            searched = [g for g in sizes if g not in skipped]
            for gpus in searched:
                cand = best.get(gpus)
                for offer in node_offers:
                    if cand is None:
                        lost[REASON_MEMORY] += 1
                    elif offer.usd_per_gpu_hour is None:
                        lost[REASON_NO_PRICE] += 1
                    else:
                        priced.append(price_plan(node.accelerator, offer, cand, gpn, request.tokens,
                                                 _goodput(catalog, cand, gpn, params, offer.option)))  # fmt: skip
        if progress:
            progress("done", len(offers), len(offers))

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
    outcome = choose(priced, lost, deadline_days=request.deadline_days, budget_usd=request.budget_usd,
                     top_k=request.top_k)  # fmt: skip
    doc = None
    if outcome.ranked:
        doc = winner_document(catalog, request, outcome.ranked[0]).model_dump(mode="json", by_alias=True)
    return SizeResult(
        model=request.model, tokens=request.tokens, deadline_days=request.deadline_days,
        budget_usd=request.budget_usd, basis=outcome.basis,
        ranked=[_row(i + 1, p) for i, p in enumerate(outcome.ranked)],
        pareto=[_row(0, p) for p in outcome.pareto], lost=outcome.lost,
        searched={"accelerators": sorted(accelerators), "nodes": len(offers), "offers": sum(map(len, offers.values())),
                  "priced_points": len(priced), "feasible_points": outcome.feasible, "evaluated_plans": evaluated,
                  "grid_points": considered, "sizes_pruned_by_deadline_bound": pruned, "elapsed_s": elapsed,
                  "plans_per_s": evaluated / elapsed if elapsed > 0 else 0.0},
        message=outcome.message, plan_document=doc, notes=notes,
    )  # fmt: skip


def _chunks(sizes: list[int], n: int = 12) -> list[list[int]]:
    return [sizes[i : i + n] for i in range(0, len(sizes), n)]


def _goodput(catalog: Catalog, cand: Any, gpus_per_node: int, params: int, option: str) -> float:
    nodes = -(-cand.gpus // gpus_per_node)
    try:
        return reliability_report(
            catalog.cost, gpus=cand.gpus, nodes=nodes, parameters=params,
            plan_bytes_per_param=plan_checkpoint_bytes_per_param(cand.plan),
            spot_instances=nodes if option == CostOption.spot.value else 0,
        ).goodput  # fmt: skip
    except (KeyError, ValueError):
        return 1.0


def winner_document(catalog: Catalog, request: SizeRequest, p: SizedPlan):  # noqa: ANN201 - PlanDocument
    """The capplan.plan/v1 document of a sized plan, as the planner and ``capplan export`` produce it."""
    plan = p.plan
    est = EstimateRequest(
        model=request.model, gpu=p.accelerator, node=p.node, gpus=p.gpus, tp=plan.tp, pp=plan.pp, vpp=plan.vpp,
        dp=plan.dp, cp=plan.cp, ep=plan.ep, sharding=plan.sharding, shard_group_size=plan.shard_group_size,
        offload=plan.offload, micro_batch=plan.micro_batch, global_batch=plan.global_batch, seq_len=plan.seq_len,
        recompute=plan.recompute, sequence_parallel=plan.sequence_parallel, flash_attention=plan.flash_attention,
        precision=plan.precision, optimizer=plan.optimizer, framework=plan.framework,
        fused_kernels=plan.fused_kernels, tokens=request.tokens, calibrated=request.calibrated,
    )  # fmt: skip
    return plan_document_from_request(catalog, est)
