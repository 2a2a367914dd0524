"""Sizing: which accelerator, how many, which plan and which way to pay, for a model and a token count.

The plan search (:mod:`app.domain.search`) gives, for each node and whole-node cluster size, the fastest
feasible plan (for a fixed cluster and price, the fastest plan is also the cheapest). This module prices each
of those plans under every offer that pays for that node (AWS options, other clouds, self-build), divides by
the reliability model's goodput, applies the deadline and budget, ranks, and finds the Pareto front of days
vs dollars across the whole catalog. Pure: the caller supplies prices and goodput.

Pruning. Most (node, size) pairs cannot enter the answer, and proving it costs far less than searching them:
:class:`SpeedBound` is an upper bound of any plan's tokens/s on a cluster (its compute alone, with the pipeline
bubble and the synchronisation stretch every step pays), hence a lower bound of its days and dollars under each
offer; :func:`state_fits_bound` is the memory
bound (the training state must fit in the GPUs plus the host RAM and NVMe the framework may offload to); and a
:class:`Frontier` of the points found so far says when a pair's bound is already beaten: at least ``top_k``
found points are cheaper (it cannot be ranked) and one is at least as fast and as cheap (it cannot be on the
Pareto front). Such a pair is not searched; the winner, the ranked rows and the front are those of the
exhaustive search.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.domain.cost.training import useful_months
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.compute import head_times, layer_times
from app.domain.estimator.evaluate import Num, straggler_factor
from app.domain.estimator.plan import Plan, Recompute
from app.domain.estimator.xp import VECTOR
from app.domain.model.architecture import Architecture
from app.domain.reliability.formulas import HOURS_PER_MONTH
from app.domain.search.space import expert_layouts, layout_ep, layout_folded
from app.domain.search.spec import Candidate

GIB = 1024**3
HOURS_PER_YEAR = 12 * HOURS_PER_MONTH  # 8,760 h: the cost model's year (app.domain.cost.cloud.commitment_usd)
TERM_HOURS = {"commit-1yr": HOURS_PER_YEAR, "commit-3yr": 3 * HOURS_PER_YEAR}
BASES = ("amortised", "cash")

# Reasons a (node, size, offer) lost, in the order they are checked.
REASON_MEMORY = "no plan fits in memory"
REASON_NO_LAYOUT = "no parallel layout divides this size and the global batch"
REASON_NO_PRICE = "no price for this option"
REASON_DEADLINE = "misses the deadline"
REASON_BUDGET = "over budget"
REASON_NOT_SEARCHED = "more plans to evaluate than CAPPLAN_SEARCH_MAX_PLANS (not searched)"
REASON_DOMINATED = "beaten by a found plan even at its best possible speed (not searched)"


@dataclass(frozen=True, slots=True)
class SelfBuildCapital:
    """A self-built cluster of some size as the cost model prices it (:func:`app.domain.cost.self_build_tco`):
    capex paid up front, the capital to repay over the depreciation life (with financing, less the residual),
    opex per month, and how long the cluster works in all (``use_after_run_years`` or ``runs``, else the life)."""

    capex_usd: float
    capital_total_usd: float
    opex_usd_per_month: float
    depreciation_years: float
    use_after_run_years: float | None = None
    runs: int | None = None


@dataclass(frozen=True, slots=True)
class ReservedSpotMix:
    """The reserved + spot mix per instance: the 1-year commitment's and spot's $ per instance-hour, the reserved
    share of the instances and the GPUs per instance (the cost model rounds the reserved count per cluster)."""

    reserved_usd_per_hour: float
    spot_usd_per_hour: float
    reserved_fraction: float
    gpus_per_instance: int

    def spot_instances(self, instances: Num) -> Num:
        """Instances bought on spot (one count or an array): the rest of the reserved share, rounded per cluster
        half to even as the cost model's ``round`` does."""
        if isinstance(instances, np.ndarray):
            return instances - np.round(self.reserved_fraction * instances).astype(instances.dtype)
        return instances - round(self.reserved_fraction * instances)


@dataclass(frozen=True, slots=True)
class Offer:
    """One way to pay for GPUs of ``node``: ``vendor`` (aws, gcp, …, self-build), its ``slug`` (instance,
    provider price or server), the option and its $ per GPU-hour (None: the catalog has no such price).
    ``self_build``: a self-build cluster's capital and opex (priced per cluster size); ``mix``: the reserved + spot
    mix's two rates; ``storage_usd_per_month`` and ``transfer_usd``: the dataset and checkpoints in object storage
    over the run and the egress and inter-region transfer, which the cost model adds to every cloud option (a
    self-build's storage is in its capex)."""

    node: str
    vendor: str
    slug: str
    option: str
    usd_per_gpu_hour: float | None
    self_build: SelfBuildCapital | None = None
    mix: ReservedSpotMix | None = None
    storage_usd_per_month: float = 0.0
    transfer_usd: float = 0.0


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

    def usd(self, basis: str) -> float:
        """The dollars of ``basis``: "amortised" or "cash"."""
        return self.usd_cash if basis == "cash" else self.usd_amortised


@dataclass(frozen=True, slots=True)
class SizingOutcome:
    ranked: tuple[SizedPlan, ...]
    pareto: tuple[SizedPlan, ...]
    lost: dict[str, int]
    feasible: int
    message: str | None
    basis: str


def money(
    offer: Offer, gpus: Num, gpus_per_node: int, tokens: float, tokens_per_s: Num, goodput: Num
) -> tuple[Num, Num, Num]:
    """(wall hours, amortised $, cash $) of ``tokens`` at ``tokens_per_s`` on ``gpus`` paid through ``offer``, as
    :func:`app.domain.cost.training_cost` computes them for the same cluster, throughput and goodput (tested
    option by option): wall time = compute time ÷ goodput; a cloud pays its rate × GPUs × wall hours plus storage
    and transfer, a commitment's cash its whole term (the used part amortised), the reserved + spot mix its
    reserved instances' term and its spot instances' hours; a self-build pays capex + opex in cash, and amortised
    its capital × run / useful life + opex. All three fall as ``tokens_per_s`` rises, so a speed bound gives a
    bound of each. Numbers or numpy arrays of sizes alike (a self-build's capital may be arrays too)."""
    assert offer.usd_per_gpu_hour is not None
    wall_h = tokens / tokens_per_s / 3600 / goodput
    months = wall_h / HOURS_PER_MONTH
    sb = offer.self_build
    if sb is not None:
        useful = useful_months(months, sb.depreciation_years, sb.use_after_run_years, sb.runs)
        share = np.where(useful > 0, np.minimum(1.0, months / np.maximum(useful, 1e-300)), 1.0)
        amortised = sb.capital_total_usd * share + sb.opex_usd_per_month * months
        return wall_h, amortised, sb.capex_usd + sb.opex_usd_per_month * months
    extra = offer.storage_usd_per_month * months + offer.transfer_usd
    if offer.mix is not None:
        mix = offer.mix
        instances = -(-gpus // mix.gpus_per_instance)
        spot = mix.spot_instances(instances)
        reserved = instances - spot
        spot_usd = mix.spot_usd_per_hour * spot * wall_h
        amortised = mix.reserved_usd_per_hour * reserved * wall_h + spot_usd + extra
        cash = mix.reserved_usd_per_hour * reserved * np.maximum(wall_h, HOURS_PER_YEAR) + spot_usd + extra
        return wall_h, amortised, cash
    used = offer.usd_per_gpu_hour * gpus * wall_h
    cash = used
    if offer.option in TERM_HOURS:
        cash = offer.usd_per_gpu_hour * gpus * np.maximum(wall_h, TERM_HOURS[offer.option])
    return wall_h, used + extra, cash + extra


def price_plan(
    accelerator: str, offer: Offer, cand: Candidate, gpus_per_node: int, tokens: float, goodput: float
) -> SizedPlan:
    """Days and dollars of ``tokens`` on ``cand`` paid through ``offer`` (:func:`money`)."""
    wall_h, amortised, cash = (
        float(x) for x in money(offer, cand.gpus, gpus_per_node, tokens, cand.tokens_per_s, goodput)
    )
    return SizedPlan(
        accelerator=accelerator, node=offer.node, vendor=offer.vendor, offer=offer.slug, option=offer.option,
        gpus=cand.gpus, nodes=-(-cand.gpus // gpus_per_node), candidate=cand, goodput=goodput, days=wall_h / 24,
        usd_amortised=amortised, usd_cash=cash, usd_per_million_tokens=amortised / tokens * 1e6, mfu=cand.mfu,
        headroom_gib=cand.margin_bytes / GIB,
    )  # fmt: skip


# -- bounds ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpeedBound:
    """An upper bound of the tokens/s any plan of the search reaches on a cluster of some size (the estimator's
    model), from the per-rank compute terms alone.

    A plan's step is (m + (pp − 1)/vpp) · t_mb + p2p + exposed DP + optimizer, stretched by 1 + cv·√(2 ln N)
    (:func:`app.domain.evaluate.combine_step`); t_mb, the slowest rank's micro-batch, is at least its compute,
    which is at least the average over the pp stages: W/pp, W being the compute of one micro-batch through every
    layer and the head for the plan's (tp, cp, micro-batch, ep) — :func:`layer_times` and :func:`head_times`
    without recompute, the cheapest ep for the MoE layers. Everything else (communication, recompute, memory) is
    ≥ 0. With m = B·tp·cp·pp/(mb·N) micro-batches of the global batch B on N GPUs:

        tokens/s ≤ B·s·pp / ((1 + cv·√(2 ln N)) · (m + (pp − 1)/vpp) · W)

    maximised over every (tp, cp, mb, pp, dp) the search may choose with tp·cp·pp·dp = N: tp within the NVLink
    domain and dividing the heads, cp and mb from the search's defaults, any pp ≤ the layers, and dp·mb dividing B
    (every plan's rule "batch-not-divisible", :mod:`app.domain.estimator.rules`: m = B/(mb·dp) whole micro-batches).
    vpp is the largest of the search's with pp·vpp ≤ the layers ("chunks-exceed-layers"), and 1 unless m is a
    multiple of pp ("interleave-microbatches": so a cluster too large for its batch to fill an interleaved pipeline
    pays the plain 1F1B bubble). Nothing else is required (pp need not divide the layers), so the set holds every
    plan the search may run and its maximum is a bound; a size no (tp, cp, pp, dp, mb) divides has none (0).
    ``keys``: (tp, cp, mb, W)."""

    seq_len: int
    batch: int
    layers: int
    domain: int
    max_pp: int
    vpps: tuple[int, ...]
    straggler_cv: float
    keys: tuple[tuple[int, int, int, float], ...]

    def tokens_per_s(self, gpus: int) -> float:
        return float(self.tokens_per_s_many(np.array([gpus]))[0])

    def tokens_per_s_many(self, gpus: np.ndarray) -> np.ndarray:
        """The bound at each cluster size of ``gpus`` (an array of GPU counts), 0 where no layout divides it.
        Enumerated from the layouts' side: for each tp·cp, mb (the least W among the keys sharing them), pp and
        dp dividing B/mb, the size N = tp·cp·pp·dp gets that layout's tokens/s; each size keeps its maximum."""
        gpus = np.asarray(gpus, dtype=np.int64)
        order = np.argsort(gpus, kind="stable")
        ordered = gpus[order]
        best = np.zeros(len(gpus))
        least_w: dict[tuple[int, int], float] = {}
        for tp, cp, mb, w in self.keys:
            if tp <= self.domain and self.batch % mb == 0:
                key = (tp * cp, mb)
                least_w[key] = min(w, least_w.get(key, math.inf))
        pps = np.arange(1, min(self.max_pp, self.layers) + 1, dtype=np.int64)[:, None]
        deepest = np.array([max([v for v in self.vpps if p * v <= self.layers] or [1]) if p > 1 else 1
                            for p in pps[:, 0].tolist()])[:, None]  # fmt: skip
        for (tc, mb), w in least_w.items():
            q = self.batch // mb
            dps = np.array([d for d in range(1, q + 1) if q % d == 0], dtype=np.int64)[None, :]
            sizes = (tc * pps * dps).ravel()
            m = q // dps
            vpp = np.where(m % pps == 0, deepest, 1)
            rate = (self.batch * self.seq_len * pps / ((m + (pps - 1) / vpp) * w)).ravel()
            at = np.searchsorted(ordered, sizes)
            hit = at < len(ordered)
            hit[hit] = ordered[at[hit]] == sizes[hit]
            np.maximum.at(best, at[hit], rate[hit])
        out = np.empty(len(gpus))
        out[order] = best
        return out / (1 + straggler_factor(VECTOR, gpus, self.straggler_cv))


def speed_bound(
    arch: Architecture,
    cluster: Cluster,
    shape: Plan,
    *,
    batch: int,
    micro_batches: Sequence[int],
    cps: Sequence[int],
    vpps: Sequence[int],
    max_pp: int,
    work: Callable[[list[tuple[int, int, int, int]]], Sequence[float]] | None = None,
) -> SpeedBound:
    """The :class:`SpeedBound` of ``cluster`` for plans shaped like ``shape`` (framework, precision, optimizer,
    sequence length, attention and kernel switches) with a global batch of ``batch`` sequences. Reads only the
    cluster's accelerator, efficiencies, scale terms and stacks (not its size, node or fabrics).

    ``work`` gives W of each (tp, cp, mb, ep) at once: by default its compute alone (:func:`layer_times`,
    :func:`head_times`); the sizing passes the fastest-plan search's per-key terms without recompute (compute and
    the exposed TP, CP and EP time of a rank, :meth:`FastestPlanFinder.key_work`), which are also at most any
    plan's and make the bound tighter where communication is large (MoE)."""
    domain = cluster.nvlink_domain
    tps = [
        t
        for t in range(1, domain + 1)
        if arch.n_heads % t == 0 and (arch.n_kv_heads % t == 0 or t % arch.n_kv_heads == 0)
    ]
    eps = expert_layouts(arch, shape.framework, shape.expert_tp)  # the search's own: a plan has no other
    combos = [(tp, cp, mb, ep) for tp in tps for cp in cps for mb in micro_batches for ep in eps]
    if work is None:

        def plan(tp: int, cp: int, mb: int, ep: int) -> Plan:
            return shape.model_copy(update=dict(
                tp=tp, pp=1, vpp=1, dp=1, cp=cp, ep=layout_ep(ep), micro_batch=mb, global_batch=mb,
                expert_tp=1 if layout_folded(ep) else shape.expert_tp,
                recompute=Recompute.none, sequence_parallel=tp > 1,
            ))  # fmt: skip

        def one(tp: int, cp: int, mb: int, ep: int) -> float:
            w = sum(head_times(arch, plan(tp, cp, mb, 1), cluster))
            if arch.n_dense_layers:
                t = layer_times(arch, "dense", plan(tp, cp, mb, 1), cluster)
                w += arch.n_dense_layers * (t.fwd_s + t.bwd_s)
            if arch.n_moe_layers:
                t = layer_times(arch, "moe", plan(tp, cp, mb, ep), cluster)
                w += arch.n_moe_layers * (t.fwd_s + t.bwd_s)
            return w

        works = [one(*c) for c in combos]
    else:
        works = list(work(combos))
    least: dict[tuple[int, int, int], float] = {}
    for (tp, cp, mb, _), w in zip(combos, works, strict=True):
        least[(tp, cp, mb)] = min(w, least.get((tp, cp, mb), math.inf))
    keys = [(tp, cp, mb, w) for (tp, cp, mb), w in least.items()]
    return SpeedBound(
        seq_len=shape.seq_len, batch=batch, layers=arch.n_layers, domain=domain, max_pp=max_pp,
        vpps=tuple(vpps), straggler_cv=cluster.scale.straggler_cv, keys=tuple(keys),
    )  # fmt: skip


def state_fits_bound(
    state_bytes: float, gpus: int, nodes: int, gpu_bytes: float, host_bytes: float, nvme_bytes: float
) -> bool:
    """False when the training state (``state_bytes``: parameters × the bytes a checkpoint keeps per parameter,
    which every plan holds somewhere) exceeds all the memory the cluster may hold it in: the GPUs' usable memory
    plus, where the framework can offload, the nodes' host RAM and NVMe. Then no plan fits."""
    return state_bytes <= gpus * gpu_bytes + nodes * (host_bytes + nvme_bytes)


class Frontier:
    """The points found so far that meet the deadline and budget, to test a pair's bounds against.

    ``tolerance`` (a fraction, 0 = exact): a pair whose bound lies within it of a found point in both days and $
    is not searched for the front — the front is then exact to that tolerance (every point of the exhaustive
    front is within it, in both days and $, of a point shown) instead of holding every near-equal cluster size.
    The ranking stays exact: a pair is skipped only when ``top_k`` found points are strictly cheaper."""

    def __init__(self, top_k: int, tolerance: float = 0.0) -> None:
        self.top_k, self.tolerance = top_k, tolerance
        self._usd: list[float] = []  # every point's $ on the ranking's basis, sorted
        self._front: list[tuple[float, float]] = []  # (days, $) of the non-dominated points, by days

    def add(self, days: float, usd: float) -> None:
        bisect.insort(self._usd, usd)
        if any(d <= days and u <= usd for d, u in self._front):
            return
        self._front = sorted([(d, u) for d, u in self._front if not (days <= d and usd <= u)] + [(days, usd)])

    def beats(self, days: float, usd: float) -> bool:
        """True when a point no faster than ``days`` and no cheaper than ``usd`` can neither be ranked in the
        top ``top_k`` (that many found points are strictly cheaper) nor lie on the Pareto front (a found point
        is at least as fast and as cheap, and better on one; with a tolerance, within it of both)."""
        return bool(self.beats_many(np.array([days]), np.array([usd]))[0])

    def beats_many(self, days: np.ndarray, usd: np.ndarray) -> np.ndarray:
        """:meth:`beats` of each (days, $) pair of two arrays. The front is a staircase (days rising, $ falling),
        so the found point that can beat a query is the last one no slower than it: the cheapest of those."""
        if not self._front:
            return np.zeros(np.shape(days), dtype=bool)
        unranked = np.searchsorted(np.asarray(self._usd), usd, side="left") >= self.top_k
        front_days = np.array([d for d, _ in self._front])
        front_usd = np.array([u for _, u in self._front])
        slack = 1 + self.tolerance
        k = np.searchsorted(front_days, days * slack, side="right") - 1
        found = k >= 0
        k = np.maximum(k, 0)
        if self.tolerance > 0:
            beaten = front_usd[k] <= usd * slack
        else:
            beaten = (front_usd[k] < usd) | ((front_usd[k] == usd) & (front_days[k] < days))
        return unranked & found & beaten


def pareto_front(points: Sequence[SizedPlan], basis: str = "amortised") -> list[SizedPlan]:
    """The non-dominated points in (days ↓, $ of ``basis`` ↓): no other point is at least as good on both and
    better on one. Sorted by days. O(n log n): sweep by days, keep a point when it is cheaper than all faster."""
    order = sorted(points, key=lambda p: (p.days, p.usd(basis)))
    front: list[SizedPlan] = []
    cheapest = float("inf")
    for p in order:
        if p.usd(basis) < cheapest:
            front.append(p)
            cheapest = p.usd(basis)
    return front


BASIS_WORDS = {
    "amortised": "amortised $: the run's share (a commitment's used part; a self-build's capital × run / useful "
    "life + opex)",
    "cash": "cash $: what is paid out for the run (a commitment's whole term; a self-build's hardware up front + "
    "opex)",
}


def choose(
    priced: Sequence[SizedPlan],
    lost: Counter[str],
    *,
    deadline_days: float | None,
    budget_usd: float | None,
    top_k: int,
    basis: str = "amortised",
) -> SizingOutcome:
    """Apply the deadline and the budget (on ``basis``), rank the survivors and find the Pareto front.

    Ranking: with a deadline, the cheapest plan that meets it; otherwise the cheapest, on ``basis`` ("amortised",
    the default, or "cash"; the other is shown beside it), ties by fewer days."""
    ok: list[SizedPlan] = []
    fastest = min(priced, key=lambda p: p.days, default=None)
    cheapest = min(priced, key=lambda p: p.usd(basis), default=None)
    for p in priced:
        if deadline_days is not None and p.days > deadline_days:
            lost[REASON_DEADLINE] += 1
        elif budget_usd is not None and p.usd(basis) > budget_usd:
            lost[REASON_BUDGET] += 1
        else:
            ok.append(p)
    ranked = sorted(ok, key=lambda p: (p.usd(basis), p.days))
    words = f"{basis} $ (cheapest first" + (f", within {deadline_days:g} days" if deadline_days else "") + ")"
    message = None
    if not ranked:
        message = _nothing(lost, deadline_days, budget_usd, fastest, cheapest, basis)
    return SizingOutcome(
        ranked=tuple(ranked[:top_k]), pareto=tuple(pareto_front(ok or list(priced), basis)),
        lost={k: n for k, n in lost.most_common() if n}, feasible=len(ok), message=message, basis=words,
    )  # fmt: skip


def _nothing(
    lost: Counter[str],
    deadline_days: float | None,
    budget_usd: float | None,
    fastest: SizedPlan | None,
    cheapest: SizedPlan | None,
    basis: str = "amortised",
) -> str:
    if fastest is None and deadline_days is not None and lost.get(REASON_DEADLINE):
        return (
            f"nothing meets the deadline of {deadline_days:g} days: even at full peak FLOPs no accelerator and "
            "cluster size in the range trains the tokens in time; give more days, fewer tokens or a larger range"
        )
    if fastest is None and budget_usd is not None and lost.get(REASON_BUDGET):
        return (
            f"nothing fits the budget of ${budget_usd:,.0f} ({basis}): even at full peak FLOPs no accelerator, "
            "cluster size and option in the range trains the tokens for that much; give a larger budget, fewer "
            "tokens or more options"
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
            f"nothing fits the budget of ${budget_usd:,.0f} ({basis}): the cheapest is ${cheapest.usd(basis):,.0f} "  # type: ignore[union-attr]
            f"({cheapest.gpus:,} × {cheapest.accelerator}, {cheapest.vendor} {cheapest.option}, "  # type: ignore[union-attr]
            f"{cheapest.days:,.1f} days)"  # type: ignore[union-attr]
        )
    if deadline_days is not None and budget_usd is not None and not parts:
        parts.append(
            f"nothing meets both the deadline of {deadline_days:g} days and the budget of ${budget_usd:,.0f}"
        )
    return "; ".join(parts) or "no plan meets the constraints"
