"""The plan search: the space from the request, the clusters (calibrated, overridden) and the price, then the
domain's search on arrays; a budget of concurrent searches; the estimate request of any found plan."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from app.domain.catalog import Catalog
from app.domain.cost.gpu_hour import usd_per_gpu_hour
from app.domain.cost.inputs import CostInputError, CostOption
from app.domain.estimator.calibration import calibration_assumption
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.compute import model_flops_per_token
from app.domain.estimator.plan import Plan
from app.domain.model.architecture import Architecture
from app.domain.model.counts import parameter_counts
from app.domain.reliability.formulas import plan_checkpoint_bytes_per_param
from app.domain.search.engine import search
from app.domain.search.run_pricing import CurvePricing, RunFigures
from app.domain.search.space import tries_folding
from app.domain.search.spec import Candidate, SearchCancelled, SearchResult, SearchSpec, SearchTooLarge
from app.schemas import CostRequest, EstimateRequest, PlanSearchRequest, parse_range
from app.services.errors import InputError, field_error
from app.services.estimate import PLAN_FIELDS, resolve_architecture, scenario_cluster
from app.services.scenario import (
    ScenarioResult,
    priced_instance,
    run_scenario,
    self_build_server,
    usd_per_million_tokens,
)

MAX_CLUSTER_SIZES = 12
MAX_BATCH_SIZES = 8


def _range(text: str) -> tuple[float, float]:
    return parse_range(text)  # the request checked it: finite, low ≤ high


def cluster_sizes(request: PlanSearchRequest, gpus_per_node: int) -> tuple[list[int], list[str]]:
    """GPU counts to search: the fixed one, or whole-node sizes in the range (thinned geometrically)."""
    if request.gpus is not None:
        return [request.gpus], []
    low, high = _range(request.gpus_range or "")
    nodes = list(range(max(1, math.ceil(low / gpus_per_node)), int(high // gpus_per_node) + 1))
    if not nodes:
        raise InputError([field_error("gpus_range", f"no whole number of {gpus_per_node}-GPU nodes between "
                                 f"{low:g} and {high:g} GPUs", "value_error.range")])  # fmt: skip
    notes = []
    if len(nodes) > MAX_CLUSTER_SIZES:
        picks = sorted({nodes[0], nodes[-1], *(n for n in nodes if n & (n - 1) == 0)})
        if len(picks) > MAX_CLUSTER_SIZES:
            step = len(picks) / MAX_CLUSTER_SIZES
            picks = sorted({picks[int(i * step)] for i in range(MAX_CLUSTER_SIZES)} | {nodes[-1]})
        notes.append(
            f"{len(nodes)} cluster sizes in the range: searched {len(picks)} (powers of two of nodes and the ends)"
        )
        nodes = picks
    return [n * gpus_per_node for n in nodes], notes


def batch_sizes(request: PlanSearchRequest) -> list[int]:
    if request.global_batch is not None:
        return [request.global_batch]
    low, high = _range(request.global_batch_tokens or "")
    lo_seq, hi_seq = max(1, math.ceil(low / request.seq_len)), int(high // request.seq_len)
    sizes = [2**k for k in range(0, 25) if lo_seq <= 2**k <= hi_seq]
    if not sizes:
        raise InputError([field_error("global_batch_tokens", f"no global batch of {request.seq_len}-token sequences "
                                 f"lies between {low:g} and {high:g} tokens", "value_error.range")])  # fmt: skip
    return sizes[-MAX_BATCH_SIZES:]


class SearchBusy(RuntimeError):
    """The server's search budget is spent: all slots busy, or the search ran past its deadline (503)."""

    status_code = 503

    def __init__(self, message: str, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class SearchBudget:
    """At most ``concurrency`` searches at once (a caller waits up to ``queue_s`` for a slot, then gets
    :class:`SearchBusy`), each stopped after ``timeout_s`` of work."""

    def __init__(self, concurrency: int, timeout_s: float, queue_s: float = 2.0) -> None:
        self.concurrency, self.timeout_s, self.queue_s = concurrency, timeout_s, queue_s
        self._slots = threading.BoundedSemaphore(concurrency)

    @contextmanager
    def slot(self) -> Iterator[Callable[[], bool]]:
        """Hold a slot for one search; yields its ``should_stop`` deadline check."""
        if not self._slots.acquire(timeout=self.queue_s):
            raise SearchBusy(
                f"all {self.concurrency} plan-search slots are busy (CAPPLAN_SEARCH_CONCURRENCY); retry shortly",
                retry_after_s=max(1, math.ceil(self.timeout_s / 2)),
            )
        deadline = time.monotonic() + self.timeout_s
        try:
            yield lambda: time.monotonic() > deadline
        finally:
            self._slots.release()


def run_search(
    catalog: Catalog,
    request: PlanSearchRequest,
    max_plans: int | None = None,
    budget: SearchBudget | None = None,
) -> SearchResult:
    if budget is None:
        return _run_search(catalog, request, max_plans, None)
    with budget.slot() as should_stop:
        try:
            return _run_search(catalog, request, max_plans, should_stop)
        except SearchCancelled:
            raise SearchBusy(
                f"the search ran past its {budget.timeout_s:g} s budget (CAPPLAN_SEARCH_TIMEOUT_S) and was "
                "stopped; narrow the space (fewer cluster or batch sizes, a fixed sharding or recompute, a "
                "lower max pp) or retry when the server is less busy",
                retry_after_s=max(1, math.ceil(budget.timeout_s)),
            ) from None


def search_pick_request(request: PlanSearchRequest, result: SearchResult, pick: int = 1) -> EstimateRequest:
    """The estimate request that reproduces the search's ``pick``-th plan (1 = the winner) on its cluster: what
    ``capplan plan --output`` turns into a plan document. With tokens it is a CostRequest carrying the search's
    cost overrides, so the document's cost is priced as the search priced it. InputError when there is no such
    plan."""
    if not 1 <= pick <= len(result.plans):
        found = f"it found {len(result.plans)}" if result.plans else "it found none that fits"
        raise InputError([field_error("pick", f"no plan #{pick}: {found}", "value_error")])
    cand = result.plans[pick - 1]
    fields = {f: getattr(cand.plan, f) for f in (*PLAN_FIELDS, "dp")}
    common = dict(
        model=request.model, hf_config=request.hf_config, gpu=request.gpu, node=request.node,
        fabric=request.fabric, gpus=cand.gpus, calibrated=request.calibrated,
        allow_tp_across_nodes=request.allow_tp_across_nodes, figure_overrides=request.figure_overrides, **fields,
    )  # fmt: skip
    if request.tokens:
        return CostRequest(**common, tokens=request.tokens, overrides=request.overrides)
    return EstimateRequest(**common)


def _run_search(
    catalog: Catalog,
    request: PlanSearchRequest,
    max_plans: int | None,
    should_stop: Callable[[], bool] | None,
) -> SearchResult:
    """The search as the pipeline on arrays: each cluster is built as an estimate builds it (calibration, then
    the figure overrides), on the node the price option pays for (with its own fabric) when days and dollars
    are asked for, and each plan's days (after failures) and dollars come from the cost model, with the price
    overrides, exactly as the cost table computes them."""
    arch = resolve_architecture(catalog, request)  # type: ignore[arg-type]
    probe, changes = scenario_cluster(catalog, request, gpus=1)
    node, notes = probe.node.slug, []
    pricing: CurvePricing | None = None
    usd_gpu_h: float | None = None
    if request.tokens:
        priced = _priced_node(catalog, request, node)
        if isinstance(priced, str):
            if priced != node:
                probe, changes = scenario_cluster(catalog, request, gpus=1, node=priced)
                notes.append(f"plans are modelled on {priced} (its own fabric), the node {request.price_option.value} "
                             f"pays for, as the cost table models it")  # fmt: skip
            node = priced
        else:
            notes.append(f"no {request.price_option.value} price: {priced}")
        pricing = _pricing(catalog, request, arch, probe, node)
    else:  # no run to price: $ per M tokens at the option's rate per GPU-hour, before failures
        usd_gpu_h = _rate_per_gpu_hour(catalog, request, node, probe.gpus_per_node)
        if usd_gpu_h is not None:
            notes.append(f"$ / M tokens at {request.price_option.value} ${usd_gpu_h:.2f} per GPU-hour, before "
                         "failures (give tokens for days and dollars after failures, as the cost table states them)")  # fmt: skip
    sizes, size_notes = cluster_sizes(request, probe.gpus_per_node)
    notes += size_notes
    clusters = {g: scenario_cluster(catalog, request, gpus=g, node=node)[0] for g in sizes}
    cal = calibration_assumption(request.gpu, list(changes), enabled=request.calibrated)
    notes.append(f"calibration: {cal.value}" + (f" ({cal.note})" if changes else ""))
    if request.expert_tp is not None:
        notes.append(
            f"every plan runs its routed experts at tensor-parallel degree {request.expert_tp}"
            + (" (MoE parallel folding)" if request.expert_tp == 1 else "")
            + ": the search keeps it"
        )
    elif tries_folding(arch, request.framework, request.expert_tp):
        notes.append(
            "expert TP: every plan is tried with its routed experts at the plan's tp and at 1 (MoE parallel "
            "folding: EP carved out of tp·dp·cp); give expert_tp to keep one"
        )
    has_price = (
        pricing is not None and pricing.figures(sizes[0], 1e6).usd is not None
    ) or usd_gpu_h is not None
    if not has_price and (request.budget_usd or request.objective.value == "min-cost"):
        raise InputError([field_error("price_option", f"no {request.price_option.value} price in the catalog for "
                                      f"{request.gpu}; choose another price option", "value_error.price")])  # fmt: skip
    if pricing is not None and not has_price:
        notes.append(
            f"days after failures (goodput) on {node}; no dollars without a {request.price_option.value} price"
        )
    elif pricing is not None:
        notes.append(f"days after failures (goodput) and dollars of {request.price_option.value} on {node}, with "
                     "storage and your price overrides, as the cost table states them; cost per token in $/M tokens")  # fmt: skip
    spec = search_spec(request, sizes, usd_gpu_h, max_plans)
    flops = model_flops_per_token(
        arch, request.seq_len, parameter_counts(arch).matmul_weights_active, mtp_layers=request.mtp_layers
    ).total
    try:
        result = search(arch, clusters, spec, flops, should_stop, pricing=pricing)
    except SearchTooLarge as exc:
        raise too_large(exc) from None
    message = result.message if result.plans else constraint_message(request, result)
    pareto = pareto_front(result.pareto)
    result = result.model_copy(update={"message": message, "pareto": pareto})
    best = result.best
    if result.plans:  # the winner re-estimated by the pipeline, on the node the search modelled it on
        try:
            best = winner_scenario(catalog, request, result).modelled_estimate(request.price_option)
        except InputError as exc:
            notes.append(f"the winner's full estimate: {exc}")
            best = best.model_copy(update={"assumptions": (*best.assumptions, cal)}) if best else None
    return result.model_copy(update={"notes": tuple(notes), "best": best})


def too_large(exc: SearchTooLarge) -> InputError:
    return InputError([field_error("gpus", str(exc), "value_error.search_too_large")])


def search_spec(
    request: PlanSearchRequest,
    sizes: Sequence[int],
    usd_gpu_h: float | None = None,
    max_plans: int | None = None,
) -> SearchSpec:
    """The domain search's space and constraints for ``request`` on cluster sizes ``sizes``."""
    defaults = SearchSpec.model_fields
    return SearchSpec(
        gpus=tuple(sizes), global_batches=tuple(batch_sizes(request)), seq_len=request.seq_len,
        framework=request.framework, precision=request.precision, optimizer=request.optimizer,
        flash_attention=request.flash_attention, fused_kernels=request.fused_kernels, fused_loss=request.fused_loss,
        fused_cross_entropy=request.fused_cross_entropy, attention_kernel=request.attention_kernel,
        grad_reduce_bf16=request.grad_reduce_bf16, fused_swiglu=request.fused_swiglu, z_loss=request.z_loss,
        grad_accum_fp32=request.grad_accum_fp32, tp_comm_overlap=request.tp_comm_overlap, repeat_kv=request.repeat_kv,
        fsdp_flat_params=request.fsdp_flat_params, fp8_attention=request.fp8_attention, fp8_recipe=request.fp8_recipe, nvfp4_rht=request.nvfp4_rht,
        zero_init=request.zero_init,
        moe_dispatcher=request.moe_dispatcher, moe_a2a_overlap=request.moe_a2a_overlap, expert_tp=request.expert_tp,
        cp_comm_type=request.cp_comm_type,
        mtp_layers=request.mtp_layers, moe_capacity_factor=request.moe_capacity_factor, moe_pad_to_capacity=request.moe_pad_to_capacity,
        shardings=tuple(request.shardings) if request.shardings else None,
        offloads=tuple(request.offloads) if request.offloads else None,
        micro_batches=tuple(request.micro_batches or defaults["micro_batches"].default),
        recomputes=tuple(request.recomputes or defaults["recomputes"].default),
        vpps=tuple(request.vpps or defaults["vpps"].default), cps=tuple(request.cps or defaults["cps"].default),
        max_pp=request.max_pp, max_tp=request.max_tp, allow_tp_across_nodes=request.allow_tp_across_nodes,
        headroom_bytes=request.headroom_gib * 2**30, headroom_fraction=request.headroom_percent / 100,
        tokens_to_train=request.tokens, deadline_days=request.deadline_days, budget_usd=request.budget_usd,
        usd_per_gpu_hour=usd_gpu_h, objective=request.objective, top_k=request.top_k,
        **({"max_plans": max_plans} if max_plans else {}),
    )  # fmt: skip


def winner_scenario(
    catalog: Catalog, request: PlanSearchRequest, result: SearchResult, pick: int = 1
) -> ScenarioResult:
    """The search's ``pick``-th plan through the pipeline, priced with the search's option and overrides: its
    days and dollars are the search row's."""
    est_request = search_pick_request(request, result, pick)
    if not request.tokens:
        return run_scenario(catalog, est_request, cost=False, document=False)
    cost_request = CostRequest(
        **est_request.model_dump(exclude_none=True, exclude={"overrides", "options"}),
        overrides=request.overrides.model_copy(
            update={"other_clouds": False}
        ),  # the option's row is all it needs
        options=[request.price_option],
    )
    return run_scenario(catalog, cost_request, document=False)


def _priced_node(catalog: Catalog, request: PlanSearchRequest, node: str) -> str | CostInputError:
    """The node the price option pays for: the AWS instance of the cloud options, the self-build server."""
    try:
        if request.price_option is CostOption.self_build:
            return self_build_server(catalog, request.gpu) or node
        return priced_instance(catalog, request.gpu, node, request.overrides)
    except CostInputError as exc:
        return exc


def _rate_per_gpu_hour(
    catalog: Catalog, request: PlanSearchRequest, node: str, gpus_per_node: int
) -> float | None:
    priced = _priced_node(catalog, request, node)
    if isinstance(priced, CostInputError):
        return None
    try:
        return usd_per_gpu_hour(catalog.cost, priced, request.price_option, gpus_per_node=gpus_per_node)
    except CostInputError:
        return None


def _pricing(
    catalog: Catalog, request: PlanSearchRequest, arch: Architecture, probe: Cluster, node: str
) -> CurvePricing:
    """Days and dollars of a run at a given tokens/s on a given cluster size: the cost model's own figures for
    the request's price option (the function the scenario pipeline prices with). The cost model is imported
    here: a search without tokens (`capplan plan` as usually run) does not load it."""
    from app.domain.cost.training import TrainingJob, training_cost
    from app.domain.reliability.report import reliability_report

    assert request.tokens is not None
    tokens = request.tokens
    option = request.price_option
    o = request.overrides.model_copy(update={"other_clouds": False})
    if (
        option is not CostOption.self_build
        and o.instance is None
        and catalog.hardware.node(node).kind == "cloud-instance"
    ):
        o = o.model_copy(update={"instance": node})
    bytes_per_param = plan_checkpoint_bytes_per_param(
        Plan(framework=request.framework, precision=request.precision, optimizer=request.optimizer)
    )
    parameters = parameter_counts(arch).total

    def price(gpus: int, tps: float) -> RunFigures:
        before = tokens / tps / 86_400
        job = TrainingJob(
            model=arch.slug, accelerator=request.gpu, gpus=gpus, parameters=parameters, tokens=tokens,
            cloud_tokens_per_s=tps, self_build_tokens_per_s=tps, plan_checkpoint_bytes_per_param=bytes_per_param,
            seq_len=request.seq_len,
        )  # fmt: skip
        try:
            cost = training_cost(catalog.cost, catalog.hardware, job, options=[option], overrides=o)
        except CostInputError:  # no price for this node: the days after failures still count
            goodput = _goodput(gpus)
            return RunFigures(before, before / goodput if goodput else None, goodput or 1.0, None, None)
        row = cost.options[0]
        if not row.available or row.total_usd is None:
            return RunFigures(before, before / cost.goodput, cost.goodput, None, None)
        return RunFigures(before, row.days, row.goodput or cost.goodput, row.total_usd,
                          usd_per_million_tokens(row.total_usd, tokens))  # fmt: skip

    def _goodput(gpus: int) -> float | None:
        try:
            return reliability_report(
                catalog.cost, gpus=gpus, nodes=-(-gpus // probe.gpus_per_node), parameters=parameters,
                plan_bytes_per_param=bytes_per_param, overrides=o.reliability,
            ).goodput  # fmt: skip
        except (KeyError, ValueError):
            return None

    return CurvePricing(price)


def timed_search(
    catalog: Catalog,
    request: PlanSearchRequest,
    metrics: Any,
    surface: str,
    max_plans: int | None = None,
    budget: SearchBudget | None = None,
) -> SearchResult:
    result = run_search(catalog, request, max_plans, budget)
    if metrics is not None:
        metrics.searches_total.labels(surface=surface).inc()
    return result


def constraint_message(request: PlanSearchRequest, result: SearchResult) -> str | None:
    """Why nothing was found, naming the constraint that rejected the plans that otherwise fit: the deadline or
    the budget are checked last, on plans that fit in memory, so when they rejected any plan it is they that
    emptied the result, however many other plans failed memory."""
    late = result.rejected.get("misses the deadline", 0)
    over = result.rejected.get("over budget", 0)
    if not late and not over:
        return result.message
    parts = []
    if late:
        parts.append(f"{late:,} plans fit but miss the deadline of {request.deadline_days:g} days "
                     f"(wall-clock, after failures)")  # fmt: skip
    if over:
        parts.append(f"{over:,} plans fit but cost more than the budget of ${request.budget_usd:,.0f} "
                     f"({request.price_option.value})")  # fmt: skip
    hint = (
        "more GPUs or a later deadline" if late else "a larger budget, fewer tokens or a cheaper price option"
    )
    return "no plan meets the constraints: " + "; ".join(parts) + f". Try {hint}."


def pareto_front(cands: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """The plans no other plan beats on all of days (after failures), dollars and memory headroom, on the priced
    figures (without days or dollars: tokens/s and headroom), fastest first."""

    def key(c: Candidate) -> tuple[float, float, float]:
        days = c.time_to_train_days if c.time_to_train_days is not None else 1 / c.tokens_per_s
        usd = c.cost_to_train_usd if c.cost_to_train_usd is not None else 0.0
        return days, usd, -c.margin_bytes

    keys = [key(c) for c in cands]
    front = [
        c for c, a in zip(cands, keys, strict=True)
        if not any(all(x <= y for x, y in zip(b, a, strict=True)) and b != a for b in keys)
    ]  # fmt: skip
    return tuple(sorted(front, key=lambda c: key(c)[0]))
