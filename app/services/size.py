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
from datetime import date
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from app.domain.catalog import Catalog
from app.domain.cost.cloud import catalog_regions, cloud_prices
from app.domain.cost.gpu_hour import usd_per_gpu_hour
from app.domain.cost.inputs import CostInputError, CostOption, CostOverrides
from app.domain.cost.selfbuild import self_build_inputs, self_build_tco
from app.domain.cost.storage import storage_cost
from app.domain.estimator.calibration import apply_calibration
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.compute import model_flops_per_token
from app.domain.estimator.estimate import build_cluster
from app.domain.estimator.memory import host_capacity_bytes
from app.domain.estimator.plan import Offload, Plan, Sharding
from app.domain.model.counts import parameter_counts
from app.domain.reliability.formulas import plan_checkpoint_bytes_per_param
from app.domain.reliability.report import reliability_report
from app.domain.search.fastest import FastestPlanFinder
from app.domain.search.sizing import (
    REASON_BUDGET,
    REASON_DEADLINE,
    REASON_DOMINATED,
    REASON_MEMORY,
    REASON_NO_LAYOUT,
    REASON_NO_PRICE,
    REASON_NOT_SEARCHED,
    Frontier,
    Offer,
    ReservedSpotMix,
    SelfBuildCapital,
    SizedPlan,
    choose,
    money,
    price_plan,
    speed_bound,
    state_fits_bound,
)
from app.domain.search.spec import OFFLOADS_BY_FRAMEWORK, Candidate, SearchCancelled, SearchTooLarge
from app.schemas import EstimateRequest, GpusRange, PlanSearchRequest, StrictNumbers, parse_range
from app.services.documents import plan_document_from_request
from app.services.errors import InputError
from app.services.errors import field_error as _error
from app.services.estimate import PLAN_FIELDS
from app.services.search import SearchBudget, SearchBusy, run_search, search_spec

DEFAULT_OPTIONS = (
    CostOption.on_demand, CostOption.commit_1yr, CostOption.commit_3yr, CostOption.spot,
    CostOption.capacity_block, CostOption.self_build,
)  # fmt: skip
DEFAULT_GPUS_RANGE = "8:65536"
# What the speed bound's per-rank compute terms read of a cluster besides its NVLink domain (tested).
BOUND_READS = {"accelerator", "efficiency", "scale", "stacks", "power_limit_w"}


class SizeRequest(StrictNumbers):
    """Size a cluster: a model preset, the tokens to train and optional deadline and budget; every
    accelerator (or those asked), every whole-node size in ``gpus_range``, every plan and every pricing option."""

    model: str = Field(max_length=64)
    tokens: float = Field(gt=0, le=1e16, description="tokens to train")  # finite: StrictNumbers
    deadline_days: float | None = Field(default=None, gt=0, le=3650)
    budget_usd: float | None = Field(default=None, gt=0, le=1e12)
    accelerators: list[str] | None = Field(
        default=None, max_length=32, description="default: the whole catalog"
    )
    options: list[CostOption] | None = Field(default=None, max_length=len(CostOption))
    gpus_range: GpusRange = Field(default=DEFAULT_GPUS_RANGE, description="'A:B' GPUs")
    seq_len: int = Field(default=8192, ge=128, le=1_048_576)
    global_batch_tokens: int = Field(default=16_777_216, ge=1024, le=1 << 30, description="tokens per step")
    top_k: int = Field(default=20, ge=1, le=200)
    front_tolerance_pct: float = Field(
        default=1.0, ge=0, le=50,
        description="the Pareto front is exact to this many % of days and $ (0: exact, every near-equal size)",
    )  # fmt: skip
    calibrated: bool = True
    basis: Literal["amortised", "cash"] = Field(
        default="amortised",
        description="rank, apply the budget and draw the front on amortised $ (the run's share) or cash $ (what is "
        "paid out: a commitment's whole term, a self-build's hardware up front)",
    )
    region: str | None = Field(
        default=None,
        max_length=32,
        description="AWS region whose prices to use, e.g. us-west-2 (default: us-east-1)",
    )
    prices_as_of: date | None = Field(default=None, description="prices in force that day (default: current)")
    use_after_run_years: float | None = Field(
        default=None, ge=0, le=30,
        description="self-build: years the cluster keeps working after this run (default: its depreciation life)",
    )  # fmt: skip
    runs: int | None = Field(
        default=None, ge=1, le=10_000,
        description="self-build: runs of this length the cluster serves in all (instead of use_after_run_years)",
    )  # fmt: skip

    @model_validator(mode="after")
    def _batch(self) -> SizeRequest:
        if self.global_batch_tokens < self.seq_len:
            raise ValueError("global_batch_tokens must be at least seq_len")
        if self.use_after_run_years is not None and self.runs is not None:
            raise ValueError("give use_after_run_years or runs, not both")
        return self

    def cost_overrides(self) -> CostOverrides:
        """The cost model's inputs this request states (the rest are the catalog's)."""
        return CostOverrides(region=self.region, prices_as_of=self.prices_as_of,
                             use_after_run_years=self.use_after_run_years, runs=self.runs)  # fmt: skip


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
    ranked_on: Literal["amortised", "cash"] = Field(description="the basis of the ranking, budget and front")
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


def _self_build_at(
    catalog: Catalog, offer: Offer, node: Any, gpus: int, request: SizeRequest, storage_tb: float
) -> tuple[Offer, str | None]:
    """``offer`` (self-build on ``node``) for a cluster of ``gpus``: the cost model's TCO of that many servers
    (:func:`app.domain.cost.self_build_tco`, its fabric sized to the cluster, its storage system to the dataset and
    checkpoints), as ``capplan cost`` prices it — capex, capital, opex and the request's useful life. No price
    (None), and why, when the cost model cannot price that cluster."""
    nodes = -(-gpus // node.accelerators_per_node)
    try:
        inputs, _ = self_build_inputs(catalog.cost, catalog.hardware, node, storage_tb=storage_tb)
        tco = self_build_tco(inputs, node=node.slug, nodes=nodes, gpus_per_node=node.accelerators_per_node,
                             nics_per_node=node.scale_out_nics)  # fmt: skip
    except (CostInputError, KeyError, ValueError) as exc:  # e.g. a fabric larger than 3 tiers of its switch
        return replace(offer, usd_per_gpu_hour=None), str(exc)
    capital = SelfBuildCapital(
        capex_usd=tco.capex_usd, capital_total_usd=tco.capital_usd_per_month * tco.depreciation_years * 12.0,
        opex_usd_per_month=tco.opex_usd_per_month, depreciation_years=tco.depreciation_years,
        use_after_run_years=request.use_after_run_years, runs=request.runs,
    )  # fmt: skip
    return replace(offer, usd_per_gpu_hour=tco.usd_per_gpu_hour, self_build=capital), None


def offers_by_node(
    catalog: Catalog,
    accelerators: set[str],
    options: set[CostOption],
    overrides: CostOverrides | None = None,
    notes: list[str] | None = None,
) -> dict[str, list[Offer]]:
    """Every way to pay for every node carrying one of ``accelerators``, keyed by the node it runs on, at the prices
    ``overrides`` state (region, the day in force; default: us-east-1, current). An AWS instance the region has no
    price for is offered without one (``notes`` says so)."""
    hw, cc = catalog.hardware, catalog.cost
    o = overrides or CostOverrides()
    out: dict[str, list[Offer]] = {}
    aws = {p.slug for p in cc.instance_prices}
    for node in sorted(hw.nodes, key=lambda n: n.slug):
        if node.accelerator not in accelerators:
            continue
        gpn = node.accelerators_per_node
        if node.kind == "cloud-instance" and node.slug in aws:
            try:
                prices = cloud_prices(cc, node.slug, o)
                if notes is not None:
                    notes.extend(f"{node.slug}: {n}" for n in prices.notes)
            except CostInputError as exc:
                prices = None
                if notes is not None:
                    notes.append(f"{node.slug}: no price ({exc})")
            for opt in sorted(options - {CostOption.self_build}):
                rate = prices.usd_per_hour(opt) if prices is not None else None
                mix = None
                if opt is CostOption.reserved_spot_mix and rate is not None:
                    assert prices is not None and prices.commit_1yr is not None and prices.spot is not None
                    mix = ReservedSpotMix(prices.commit_1yr, prices.spot, prices.reserved_fraction,
                                          prices.gpus_per_instance)  # fmt: skip
                per_gpu = None if rate is None or prices is None else rate / prices.gpus_per_instance
                out.setdefault(node.slug, []).append(
                    Offer(node.slug, "aws", node.slug, opt.value, per_gpu, mix=mix)
                )
        if node.kind == "server" and CostOption.self_build in options:
            rate = usd_per_gpu_hour(cc, node.slug, CostOption.self_build, gpus_per_node=gpn)
            if rate is not None:  # priced per cluster size when searched (_self_build_at)
                out.setdefault(node.slug, []).append(
                    Offer(node.slug, "self-build", node.slug, "self-build", rate)
                )
    for p in cc.provider_prices:
        node = hw.node(p.like_node)
        if node.accelerator not in accelerators:
            continue
        for opt in sorted(options & {CostOption.on_demand, CostOption.commit_1yr, CostOption.commit_3yr}):
            rate = usd_per_gpu_hour(cc, p.slug, opt, on=o.prices_as_of)
            out.setdefault(node.slug, []).append(Offer(node.slug, p.provider, p.slug, opt.value, rate))
    return out


def _sizes(request: SizeRequest, gpus_per_node: int) -> np.ndarray:
    """Every whole-node cluster size (GPUs) in the request's range."""
    low, high = parse_range(request.gpus_range)
    nodes = np.arange(max(1, math.ceil(low / gpus_per_node)), int(high // gpus_per_node) + 1, dtype=np.int64)
    return nodes * gpus_per_node


def _sample_nodes(nodes: np.ndarray) -> np.ndarray:
    """The node counts a self-build is priced at before the search (powers of two and the ends of ``nodes``):
    its capital and opex grow with the cluster (tested), so a size's values are at least those of the largest
    sample at or below it."""
    picks = {
        int(nodes[0]),
        int(nodes[-1]),
        *(1 << k for k in range(0, 40) if nodes[0] <= 1 << k <= nodes[-1]),
    }
    return np.array(sorted(picks), dtype=np.int64)


class _Dominated:
    """A pair the fastest-plan search's bound shows cannot enter the answer (it is not searched)."""


DOMINATED = _Dominated()


@dataclass
class _Pair:
    """One (node, cluster size) and the offers still in the running, with each offer's bound: (offer, goodput,
    lowest days, lowest $ on the request's basis)."""

    order: (
        int  # place in the exhaustive order (node slug, size): ties are ranked as the exhaustive search would
    )
    node: Any
    gpus: int
    tps_bound: float
    live: list[tuple[Offer, float, float, float]]


class _Goodput:
    """The reliability model's goodput of a size (and spot's interruptions), computed once: it depends on the plan
    only through its checkpoint bytes per parameter, which the framework, precision and optimizer fix."""

    def __init__(self, catalog: Catalog, params: int, bytes_per_param: float) -> None:
        self.catalog, self.params, self.bytes_per_param = catalog, params, bytes_per_param
        self.cache: dict[tuple[int, int, int], float] = {}

    def __call__(self, gpus: int, nodes: int, offer: Offer) -> float:
        """Goodput on ``gpus`` in ``nodes`` instances paid through ``offer``: spot's instances (all of them, or the
        mix's spot share) add their interruptions, as in the cost model."""
        spot = 0
        if offer.option == CostOption.spot.value:
            spot = nodes
        elif offer.mix is not None:
            spot = offer.mix.spot_instances(nodes)
        key = (gpus, nodes, spot)
        if key not in self.cache:
            try:
                self.cache[key] = self.report(gpus, nodes, spot).goodput
            except (KeyError, ValueError):
                self.cache[key] = 1.0
        return self.cache[key]

    def report(self, gpus: int, nodes: int, spot_instances: int = 0):  # noqa: ANN201 - ReliabilityReport
        return reliability_report(
            self.catalog.cost, gpus=gpus, nodes=nodes, parameters=self.params,
            plan_bytes_per_param=self.bytes_per_param, spot_instances=spot_instances,
        )  # fmt: skip


_BOUND_REASONS = (REASON_DEADLINE, REASON_BUDGET)  # codes 1, 2 of a bound table's ``why``
_DEADLINE_CODE, _BUDGET_CODE = (1 + _BOUND_REASONS.index(r) for r in (REASON_DEADLINE, REASON_BUDGET))
_NO_PRICE_CODE = len(_BOUND_REASONS) + 1


class _BoundTable:
    """The (node, size) pairs the memory and layout bounds keep, as arrays: per pair its place in the exhaustive
    order, GPUs, speed bound, and per offer of its node the lower bounds of days and $ and ``why`` it is out (0:
    live, 1 deadline, 2 budget, 3 no price). Pairs are read in order of their cheapest live bound, then fastest."""

    def __init__(self) -> None:
        self._parts: list[tuple] = []

    def add(self, node: Any, offers: list[Offer], order: np.ndarray, gpus: np.ndarray, speed: np.ndarray,
            days: np.ndarray, usd: np.ndarray, why: np.ndarray) -> None:  # fmt: skip
        self._parts.append((node, offers, order, gpus, speed, days, usd, why))

    def finish(self) -> np.ndarray:
        """The rows with a live offer, most promising first (the rest are read only if the bounds break)."""
        width = max((len(part[1]) for part in self._parts), default=1)

        def padded(col: int, fill: float) -> np.ndarray:
            blocks = [np.pad(part[col], ((0, 0), (0, width - part[col].shape[1])), constant_values=fill)
                      for part in self._parts]  # fmt: skip
            return np.concatenate(blocks) if blocks else np.zeros((0, width))

        self.days, self.usd = padded(5, np.inf), padded(6, np.inf)
        self.why = padded(7, _NO_PRICE_CODE).astype(np.int8)
        self.part = np.concatenate(
            [np.full(len(p[3]), i) for i, p in enumerate(self._parts)] or [np.zeros(0)]
        )
        self.local = np.concatenate([np.arange(len(p[3])) for p in self._parts] or [np.zeros(0)])
        self.part, self.local = self.part.astype(np.int64), self.local.astype(np.int64)
        live = self.why == 0
        key_usd = np.where(live, self.usd, np.inf).min(axis=1) if len(live) else np.zeros(0)
        key_days = np.where(live, self.days, np.inf).min(axis=1) if len(live) else np.zeros(0)
        rows = np.nonzero(live.any(axis=1))[0]
        return rows[np.lexsort((key_days[rows], key_usd[rows]))]

    def __len__(self) -> int:
        return len(self.part)

    def row(self, r: int) -> tuple:
        """(node, offers, order, GPUs, speed bound, the offers' ``why``) of row ``r``."""
        node, offers, order, gpus, speed, _, _, _ = self._parts[self.part[r]]
        j = self.local[r]
        return node, offers, int(order[j]), int(gpus[j]), float(speed[j]), self.why[r]

    def live_count(self, r: int) -> int:
        return int((self.why[r] == 0).sum())

    def beaten(self, rows: np.ndarray, frontier: Frontier) -> np.ndarray:
        """Rows whose every live offer the frontier beats at its bound (dead offers count as beaten)."""
        live = self.why[rows] == 0
        days = np.where(live, self.days[rows], np.inf)
        usd = np.where(live, self.usd[rows], np.inf)
        beats = frontier.beats_many(days.ravel(), usd.ravel()).reshape(days.shape)
        return (beats | ~live).all(axis=1)


def _self_build_floor(
    catalog: Catalog, offer: Offer, node: Any, nodes: np.ndarray, request: SizeRequest, storage_tb: float
) -> tuple[Offer | None, np.ndarray, str]:
    """``offer`` (self-build on ``node``) with its capital and opex at each count of ``nodes`` no greater than the
    cost model's own (those of the largest sample size at or below; :func:`_sample_nodes`), or None when no sample
    can be priced; the counts it cannot be priced on (at or above the first sample that cannot be), and why."""
    gpn = node.accelerators_per_node
    samples = _sample_nodes(nodes)
    values, reason, unpriced_from = [], "", math.inf
    for n in samples.tolist():
        priced, why = _self_build_at(catalog, offer, node, n * gpn, request, storage_tb)
        if why:
            reason, unpriced_from = why, n
            break
        sb = priced.self_build
        life = sb.depreciation_years
        values.append((sb.capex_usd, sb.capital_total_usd, sb.opex_usd_per_month, priced.usd_per_gpu_hour))
    unpriced = nodes >= unpriced_from
    if not values:
        return None, unpriced, reason
    at = np.clip(np.searchsorted(samples[: len(values)], nodes, side="right") - 1, 0, None)
    columns = np.array(values)[at]
    capital = SelfBuildCapital(
        capex_usd=columns[:, 0], capital_total_usd=columns[:, 1], opex_usd_per_month=columns[:, 2],
        depreciation_years=life,
        use_after_run_years=request.use_after_run_years, runs=request.runs,
    )  # fmt: skip
    return replace(offer, usd_per_gpu_hour=float(columns[0, 3]), self_build=capital), unpriced, reason


def _unpriced_from(unpriced: dict[str, list], slug: str, gpus: int, reason: str) -> None:
    """Keep, per self-build node, the smallest cluster the cost model could not price and why."""
    if gpus < unpriced.setdefault(slug, [math.inf, reason])[0]:
        unpriced[slug] = [gpus, reason]


def _bound_miss(request: SizeRequest, days_bound: float, usd_bound: float) -> str | None:
    if request.deadline_days is not None and days_bound > request.deadline_days:
        return REASON_DEADLINE
    if request.budget_usd is not None and usd_bound > request.budget_usd:
        return REASON_BUDGET
    return None


def _bound_cluster(catalog: Catalog, node: Any, calibrated: bool) -> Any:
    """The node's cluster as the plan search builds it (calibrated when asked): what the speed bound reads."""
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=node.accelerator,
                            gpus=node.accelerators_per_node, node=node.slug)  # fmt: skip
    return apply_calibration(cluster, catalog.calibrations if calibrated else None)[0]


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
    goodput = _Goodput(catalog, params, plan_checkpoint_bytes_per_param(shape))
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
    table = _BoundTable()
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
        cluster = clusters[node_slug] = _bound_cluster(catalog, node, request.calibrated)
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
        why = np.zeros((len(idx), len(node_offers)), dtype=np.int8)  # 0 live, else _BOUND_REASONS[why - 1]
        for k, offer in enumerate(node_offers):
            floor: Offer | None = offer
            if offer.option == CostOption.self_build.value:
                floor, unpriced, reason = _self_build_floor(catalog, offer, node, kept_nodes, request,
                                                            storage.stored_tb)  # fmt: skip
                if unpriced.any():  # from a size the cost model cannot price on (tested: it stays so)
                    _unpriced_from(unpriced_self_build, node.slug, int(kept[unpriced].min()), reason)
                    why[unpriced, k] = _NO_PRICE_CODE
            elif offer.usd_per_gpu_hour is None:
                floor = None
            if floor is None:
                why[:, k] = _NO_PRICE_CODE
                continue
            priced_here = why[:, k] == 0
            d, u = bound_point(floor, kept, gpn, speed, 1.0)
            days[priced_here, k], usd[priced_here, k] = d[priced_here], u[priced_here]
            if prune:  # as _bound_miss: the deadline first, then the budget
                if request.deadline_days is not None:
                    why[priced_here & (days[:, k] > request.deadline_days), k] = _DEADLINE_CODE
                if request.budget_usd is not None:
                    why[(why[:, k] == 0) & (usd[:, k] > request.budget_usd), k] = _BUDGET_CODE
        for code, reason in enumerate(_BOUND_REASONS, 1):
            lost[reason] += int((why == code).sum())
        lost[REASON_NO_PRICE] += int((why == _NO_PRICE_CODE).sum())
        stats["bound_points"] += int(((why > 0) & (why < _NO_PRICE_CODE)).sum())
        table.add(node, node_offers, first + idx, kept, speed, days, usd, why)
    order = table.finish()

    def refine(row: int, bounded: bool = True) -> _Pair | None:
        """The row's pair with each live offer at its own goodput and (self-build) its own price; None when no
        offer is left (the deadline or the budget drops them at those, or the self-build cannot be priced).
        ``bounded=False`` (the bounds broke): every priced offer, none dropped by a bound."""
        node, offers_here, order_, gpus, tps, why_b = table.row(row)
        gpn = node.accelerators_per_node
        nodes = -(-gpus // gpn)
        pair = _Pair(order_, node, gpus, tps, [])
        for k, offer in enumerate(offers_here):
            if why_b[k] == _NO_PRICE_CODE or (why_b[k] and bounded):
                continue
            if offer.option == CostOption.self_build.value:
                offer, reason = _self_build_at(catalog, offer, node, gpus, request, storage.stored_tb)
                if reason:
                    _unpriced_from(unpriced_self_build, node.slug, gpus, reason)
                    lost[REASON_NO_PRICE] += 1
                    continue
            g = goodput(gpus, nodes, offer)
            d, u = bound_point(offer, gpus, gpn, tps, g)
            x = (offer, g, float(d), float(u))
            miss = _bound_miss(request, x[2], x[3]) if prune and bounded else None
            if miss:
                lost[miss] += 1
                stats["bound_points"] += 1
            else:
                pair.live.append(x)
        return pair if pair.live else None

    def _fastest_within_limits(
        pair: _Pair, cluster: Cluster, should_stop: Callable[[], bool] | None, dominance: bool
    ) -> Candidate | None | _Dominated:
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
        pair: _Pair, should_stop: Callable[[], bool] | None, dominance: bool
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

    def search_pair(pair: _Pair, should_stop: Callable[[], bool] | None, dominance: bool = False) -> bool:
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
            for reason in (REASON_DOMINATED, *_BOUND_REASONS):
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
