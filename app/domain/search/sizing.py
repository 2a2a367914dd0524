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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.cost.training import self_build_useful_months
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.compute import head_times, layer_times
from app.domain.estimator.evaluate import straggler_factor
from app.domain.estimator.plan import Plan, Recompute
from app.domain.estimator.xp import SCALAR
from app.domain.model.architecture import Architecture
from app.domain.reliability.formulas import HOURS_PER_MONTH
from app.domain.search.spec import Candidate

GIB = 1024**3
HOURS_PER_YEAR = 12 * HOURS_PER_MONTH  # 8,760 h: the cost model's year (app.domain.cost.cloud.commitment_usd)
TERM_HOURS = {"commit-1yr": HOURS_PER_YEAR, "commit-3yr": 3 * HOURS_PER_YEAR}
BASES = ("amortised", "cash")

# Reasons a (node, size, offer) lost, in the order they are checked.
REASON_MEMORY = "no plan fits in memory"
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

    def spot_instances(self, instances: int) -> int:
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
    offer: Offer, gpus: int, gpus_per_node: int, tokens: float, tokens_per_s: float, goodput: float
) -> tuple[float, float, float]:
    """(wall hours, amortised $, cash $) of ``tokens`` at ``tokens_per_s`` on ``gpus`` paid through ``offer``, as
    :func:`app.domain.cost.training_cost` computes them for the same cluster, throughput and goodput (tested
    option by option): wall time = compute time ÷ goodput; a cloud pays its rate × GPUs × wall hours plus storage
    and transfer, a commitment's cash its whole term (the used part amortised), the reserved + spot mix its
    reserved instances' term and its spot instances' hours; a self-build pays capex + opex in cash, and amortised
    its capital × run / useful life + opex. All three fall as ``tokens_per_s`` rises, so a speed bound gives a
    bound of each."""
    assert offer.usd_per_gpu_hour is not None
    wall_h = tokens / tokens_per_s / 3600 / goodput
    months = wall_h / HOURS_PER_MONTH
    sb = offer.self_build
    if sb is not None:
        useful, _ = self_build_useful_months(months, sb.depreciation_years, sb.use_after_run_years, sb.runs)
        share = min(1.0, months / useful) if useful > 0 else 1.0
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
        cash = mix.reserved_usd_per_hour * reserved * max(wall_h, HOURS_PER_YEAR) + spot_usd + extra
        return wall_h, amortised, cash
    used = offer.usd_per_gpu_hour * gpus * wall_h
    cash = used
    if offer.option in TERM_HOURS:
        cash = offer.usd_per_gpu_hour * gpus * max(wall_h, TERM_HOURS[offer.option])
    return wall_h, used + extra, cash + extra


def price_plan(
    accelerator: str, offer: Offer, cand: Candidate, gpus_per_node: int, tokens: float, goodput: float
) -> SizedPlan:
    """Days and dollars of ``tokens`` on ``cand`` paid through ``offer`` (:func:`money`)."""
    wall_h, amortised, cash = money(offer, cand.gpus, gpus_per_node, tokens, cand.tokens_per_s, goodput)
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

        tokens/s ≤ B·s·pp / ((1 + cv·√(2 ln N)) · (m + (pp − 1)/vpp_max) · W)

    maximised over every (tp, cp, mb, pp) the search may choose (tp within the NVLink domain and dividing the
    heads, cp and mb from the search's defaults, any pp ≤ the layers; divisibility beyond tp·cp·pp | N and m ≥ 1 is
    not required, so the set is a superset and the maximum a bound). ``keys``: (tp, cp, mb, W)."""

    seq_len: int
    batch: int
    layers: int
    domain: int
    max_pp: int
    vpp_max: int
    straggler_cv: float
    keys: tuple[tuple[int, int, int, float], ...]

    def tokens_per_s(self, gpus: int) -> float:
        best = 0.0
        for tp, cp, mb, w in self.keys:
            if gpus % (tp * cp) or tp > min(self.domain, gpus):
                continue
            rest = gpus // (tp * cp)
            for pp in range(1, min(rest, self.max_pp, self.layers) + 1):
                if rest % pp:
                    continue
                m = self.batch * tp * cp * pp / (mb * gpus)
                if m < 1:
                    continue
                bubble = (pp - 1) / (self.vpp_max if pp > 1 else 1)
                best = max(best, self.batch * self.seq_len * pp / ((m + bubble) * w))
        return best / (1 + straggler_factor(SCALAR, gpus, self.straggler_cv))


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
) -> SpeedBound:
    """The :class:`SpeedBound` of ``cluster`` for plans shaped like ``shape`` (framework, precision, optimizer,
    sequence length, attention and kernel switches) with a global batch of ``batch`` sequences. Reads only the
    cluster's accelerator, efficiencies, scale terms and stacks (not its size, node or fabrics)."""
    domain = cluster.nvlink_domain
    tps = [
        t
        for t in range(1, domain + 1)
        if arch.n_heads % t == 0 and (arch.n_kv_heads % t == 0 or t % arch.n_kv_heads == 0)
    ]
    eps = [e for e in range(1, arch.n_experts + 1) if arch.n_experts % e == 0] if arch.is_moe else [1]
    keys = []
    for tp in tps:
        for cp in cps:
            for mb in micro_batches:

                def plan(ep: int, tp: int = tp, cp: int = cp, mb: int = mb) -> Plan:
                    return shape.model_copy(update=dict(
                        tp=tp, pp=1, vpp=1, dp=1, cp=cp, ep=ep, micro_batch=mb, global_batch=mb,
                        recompute=Recompute.none, sequence_parallel=tp > 1,
                    ))  # fmt: skip

                w = sum(head_times(arch, plan(1), cluster))
                if arch.n_dense_layers:
                    t = layer_times(arch, "dense", plan(1), cluster)
                    w += arch.n_dense_layers * (t.fwd_s + t.bwd_s)
                if arch.n_moe_layers:
                    w += arch.n_moe_layers * min(
                        (t := layer_times(arch, "moe", plan(ep), cluster)).fwd_s + t.bwd_s for ep in eps
                    )
                keys.append((tp, cp, mb, w))
    return SpeedBound(
        seq_len=shape.seq_len, batch=batch, layers=arch.n_layers, domain=domain, max_pp=max_pp,
        vpp_max=max(vpps), straggler_cv=cluster.scale.straggler_cv, keys=tuple(keys),
    )  # fmt: skip


def state_fits_bound(
    state_bytes: float, gpus: int, nodes: int, gpu_bytes: float, host_bytes: float, nvme_bytes: float
) -> bool:
    """False when the training state (``state_bytes``: parameters × the bytes a checkpoint keeps per parameter,
    which every plan holds somewhere) exceeds all the memory the cluster may hold it in: the GPUs' usable memory
    plus, where the framework can offload, the nodes' host RAM and NVMe. Then no plan fits."""
    return state_bytes <= gpus * gpu_bytes + nodes * (host_bytes + nvme_bytes)


class Frontier:
    """The points found so far that meet the deadline and budget, to test a pair's bounds against."""

    def __init__(self, top_k: int) -> None:
        self.top_k = top_k
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
        is at least as fast and as cheap, and better on one)."""
        if bisect.bisect_left(self._usd, usd) < self.top_k:
            return False
        return any(d <= days and u <= usd and (d < days or u < usd) for d, u in self._front)


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
