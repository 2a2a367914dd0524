"""The plan search: the space from the request, the clusters (calibrated, overridden) and the price, then the
domain's search on arrays; a budget of concurrent searches; the estimate request of any found plan."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from app.domain.architecture import parameter_counts
from app.domain.calibration import Change, apply_calibration, calibration_assumption
from app.domain.catalog import Catalog
from app.domain.cluster import Cluster
from app.domain.compute import model_flops_per_token
from app.domain.cost import CostInputError, instance_for_accelerator, usd_per_gpu_hour
from app.domain.estimate import HardwareError, build_cluster
from app.domain.overrides import OverrideError, apply_overrides
from app.domain.search import SearchCancelled, SearchResult, SearchSpec, SearchTooLarge, search
from app.schemas import EstimateRequest, PlanSearchRequest
from app.services.errors import InputError, field_error
from app.services.estimate import PLAN_FIELDS, resolve_architecture

MAX_CLUSTER_SIZES = 12
MAX_BATCH_SIZES = 8


def _range(text: str) -> tuple[float, float]:
    low, high = (float(part) for part in text.split(":"))
    return (low, high) if low <= high else (high, low)


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
    ``capplan plan --output`` turns into a plan document. InputError when there is no such plan."""
    if not 1 <= pick <= len(result.plans):
        found = f"it found {len(result.plans)}" if result.plans else "it found none that fits"
        raise InputError([field_error("pick", f"no plan #{pick}: {found}", "value_error")])
    cand = result.plans[pick - 1]
    fields = {f: getattr(cand.plan, f) for f in (*PLAN_FIELDS, "dp")}
    return EstimateRequest(
        model=request.model, hf_config=request.hf_config, gpu=request.gpu, node=request.node,
        fabric=request.fabric, gpus=cand.gpus, tokens=request.tokens, calibrated=request.calibrated,
        allow_tp_across_nodes=request.allow_tp_across_nodes, figure_overrides=request.figure_overrides, **fields,
    )  # fmt: skip


def _run_search(
    catalog: Catalog,
    request: PlanSearchRequest,
    max_plans: int | None,
    should_stop: Callable[[], bool] | None,
) -> SearchResult:
    arch = resolve_architecture(catalog, request)  # type: ignore[arg-type]
    calibrations = catalog.calibrations if request.calibrated else None

    overrides = request.figure_overrides

    def cluster(gpus: int) -> tuple[Cluster, list[Change]]:
        """The cluster every plan of this size is estimated on: calibrated, then the request's overrides laid
        over it — exactly as run_estimate builds it, so a plan scores the same in the search and the estimate."""
        built = build_cluster(catalog.hardware, catalog.efficiency, accelerator=request.gpu, gpus=gpus,
                              node=request.node, fabric=request.fabric)  # fmt: skip
        built, changes = apply_calibration(built, calibrations)
        changes = [c for c in changes if f"{c.part}.{c.field}" not in overrides]
        if overrides:
            try:
                built = apply_overrides(built, overrides)
            except OverrideError as exc:
                raise InputError(
                    [field_error(f"figure_overrides.{exc.key}", str(exc), "value_error.override")]
                ) from None
        return built, changes

    try:
        probe, changes = cluster(1)
    except HardwareError as exc:
        raise InputError([field_error(exc.field, str(exc), "value_error.hardware")]) from None
    sizes, notes = cluster_sizes(request, probe.gpus_per_node)
    clusters = {g: cluster(g)[0] for g in sizes}
    cal = calibration_assumption(request.gpu, changes, enabled=request.calibrated)
    notes.append(f"calibration: {cal.value}" + (f" ({cal.note})" if changes else ""))
    price = None
    try:
        instance = (
            probe.node.slug
            if probe.node.provider == "aws"
            else instance_for_accelerator(catalog.cost, catalog.hardware, request.gpu)
        )
        node_for_price = probe.node.slug if request.price_option.value == "self-build" else instance
        price = usd_per_gpu_hour(catalog.cost, node_for_price, request.price_option,
                                 gpus_per_node=probe.gpus_per_node)  # fmt: skip
    except CostInputError as exc:
        notes.append(f"no price: {exc}")
    if price is None:
        if request.budget_usd or request.objective.value == "min-cost":
            raise InputError([field_error("price_option", f"no {request.price_option.value} price in the catalog for "
                                     f"{request.gpu}; choose another price option", "value_error.price")])  # fmt: skip
    else:
        notes.append(f"cost figures at {request.price_option.value} ${price:.2f} per GPU-hour")
    defaults = SearchSpec.model_fields
    spec = SearchSpec(
        gpus=tuple(sizes), global_batches=tuple(batch_sizes(request)), seq_len=request.seq_len,
        framework=request.framework, precision=request.precision, optimizer=request.optimizer,
        flash_attention=request.flash_attention, fused_kernels=request.fused_kernels,
        shardings=tuple(request.shardings) if request.shardings else None,
        offloads=tuple(request.offloads) if request.offloads else None,
        micro_batches=tuple(request.micro_batches or defaults["micro_batches"].default),
        recomputes=tuple(request.recomputes or defaults["recomputes"].default),
        vpps=tuple(request.vpps or defaults["vpps"].default), cps=tuple(request.cps or defaults["cps"].default),
        max_pp=request.max_pp, max_tp=request.max_tp, allow_tp_across_nodes=request.allow_tp_across_nodes,
        headroom_bytes=request.headroom_gib * 2**30, headroom_fraction=request.headroom_percent / 100,
        tokens_to_train=request.tokens, deadline_days=request.deadline_days, budget_usd=request.budget_usd,
        usd_per_gpu_hour=price, objective=request.objective, top_k=request.top_k,
        **({"max_plans": max_plans} if max_plans else {}),
    )  # fmt: skip
    flops = model_flops_per_token(arch, request.seq_len, parameter_counts(arch).matmul_weights_active).total
    try:
        result = search(arch, clusters, spec, flops, should_stop)
    except SearchTooLarge as exc:
        raise InputError([field_error("gpus", str(exc), "value_error.search_too_large")]) from None
    best = result.best
    if best is not None:  # the winner's estimate states its calibration, as a single estimate does
        best = best.model_copy(update={"assumptions": (*best.assumptions, cal)})
    return result.model_copy(update={"notes": tuple(notes), "best": best})


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
