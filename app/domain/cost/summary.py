"""The cost of one run as a buyer reads it, per pricing option: days after failures, **cash** (what is paid out)
and **amortised** (this run's share) dollars side by side, $ per million tokens on both bases, which option is
cheapest on each basis and which is fastest — ties reported as ties — with the day and region of the prices and
every figure the cost used.

One record, :class:`CostSummary`, built from a :class:`~app.domain.cost.training.TrainingCost` by
:func:`cost_summary`; the plan document (capplan.plan/v1 ``cost``), the planner's cost CSV/JSON and the scenario
comparison carry it, so they cannot disagree.
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import Field

from app.domain.cost.inputs import CostOption
from app.domain.cost.training import OptionCost, Ranking, TrainingCost, option_label
from app.domain.estimator.estimate import Assumption
from app.domain.provenance import Frozen

MILLION = 1e6
SECONDS_PER_DAY = 86_400.0
BEYOND_RUN_FRACTION = 0.01
"""Cash above the amortised figure by more than this share is called out ("paid out beyond this run")."""


class OptionSummary(Frozen):
    """One pricing option of one run."""

    label: str = Field(
        description="how rankings name it: 'on-demand', 'self-build', 'gcp a3-highgpu-8g commit-3yr'"
    )
    option: CostOption
    provider: str = Field(description="aws (and self-build), gcp, azure, or a GPU cloud")
    instance: str | None = Field(default=None, description="instance or server slug")
    instances: int = 0
    available: bool
    reason: str | None = Field(default=None, description="why the option is not priced")
    days_before_failures: float | None = Field(default=None, description="tokens ÷ tokens/s, compute only")
    days: float | None = Field(default=None, description="wall-clock days after failures (compute ÷ goodput)")
    lead_time_days: float = Field(default=0.0, description="self-build: days before training can start")
    goodput: float | None = None
    cash_usd: float | None = Field(
        default=None, description="paid out for this run: whole commitment terms, capex"
    )
    amortised_usd: float | None = Field(default=None, description="this run's share of the cost")
    beyond_run_usd: float | None = Field(
        default=None,
        description="cash − amortised: paid out but not attributable to this run (the unused rest of a commitment, "
        "the self-built cluster's remaining life)",
    )
    usd_per_m_tokens_cash: float | None = None
    usd_per_m_tokens_amortised: float | None = None
    usd_per_gpu_hour: float | None = None
    price_confidence: str | None = Field(default=None, description="other clouds: the price's confidence")
    notes: tuple[str, ...] = ()

    @property
    def outlay_exceeds_run(self) -> bool:
        """Whether the cash outlay is materially above this run's share (a longer commitment, capex)."""
        if self.cash_usd is None or self.amortised_usd is None:
            return False
        return self.cash_usd > self.amortised_usd * (1.0 + BEYOND_RUN_FRACTION)


class RankingSummary(Frozen):
    """The best option on one basis; ``winner`` is None on a tie, and ``tied`` names the tied options."""

    basis: Literal["cash", "amortised", "days"]
    winner: str | None
    tied: tuple[str, ...] = ()
    description: str

    @property
    def text(self) -> str:
        """'self-build', 'tie: a = b' or '—'."""
        if self.winner:
            return self.winner
        return "tie: " + " = ".join(self.tied) if self.tied else "—"


class CostAssumption(Frozen):
    """A figure the cost used, with its source and date."""

    name: str
    value: float | int | str | bool | None
    unit: str = ""
    source: str
    as_of: str | None = None
    confidence: str | None = None
    note: str | None = None


class CostSummary(Frozen):
    """Cash and amortised cost, $/M tokens and days after failures of one run, per pricing option."""

    tokens: float = Field(gt=0)
    region: str = Field(description="region of the AWS prices")
    prices_as_of: date = Field(description="the prices are those in force on this day")
    prices_as_of_stated: bool = Field(
        description="true: the day was given (prices_as_of); false: the day computed"
    )
    instance: str = Field(description="the AWS instance the cloud options price")
    instances: int
    self_build_node: str | None = None
    self_build_nodes: int | None = None
    goodput: float
    job_mtbf_hours: float
    checkpoint_interval_s: float
    cheapest_cash: RankingSummary
    cheapest_amortised: RankingSummary
    fastest: RankingSummary
    options: tuple[OptionSummary, ...]
    notes: tuple[str, ...] = ()
    assumptions: tuple[CostAssumption, ...] = Field(default=(), description="every figure the cost used")

    def option(self, label: str) -> OptionSummary | None:
        return next((o for o in self.options if o.label == label), None)


def _per_million(usd: float | None, tokens: float) -> float | None:
    return None if usd is None else usd / (tokens / MILLION)


def option_summary(row: OptionCost, tokens: float) -> OptionSummary:
    beyond = None
    if row.cash_usd is not None and row.amortised_usd is not None:
        beyond = max(0.0, row.cash_usd - row.amortised_usd)
    return OptionSummary(
        label=option_label(row), option=row.option, provider=row.provider, instance=row.instance,
        instances=row.instances, available=row.available, reason=row.reason,
        days_before_failures=tokens / row.tokens_per_s / SECONDS_PER_DAY if row.tokens_per_s else None,
        days=row.days, lead_time_days=row.lead_time_days, goodput=row.goodput, cash_usd=row.cash_usd,
        amortised_usd=row.amortised_usd, beyond_run_usd=beyond,
        usd_per_m_tokens_cash=_per_million(row.cash_usd, tokens),
        usd_per_m_tokens_amortised=_per_million(row.amortised_usd, tokens),
        usd_per_gpu_hour=row.usd_per_gpu_hour, price_confidence=row.price_confidence, notes=row.notes,
    )  # fmt: skip


def _ranking(r: Ranking) -> RankingSummary:
    return RankingSummary(basis=r.basis, winner=r.winner, tied=r.tied, description=r.description)  # type: ignore[arg-type]


def _assumption(a: Assumption) -> CostAssumption:
    value = a.value if isinstance(a.value, float | int | str | bool) or a.value is None else str(a.value)
    return CostAssumption(name=a.name, value=value, unit=a.unit, source=a.source, as_of=a.as_of,
                          confidence=a.confidence, note=a.note)  # fmt: skip


FASTEST = "fewest wall-clock days to results: the run after failures (goodput), plus a self-build's lead time"


def cost_summary(cost: TrainingCost, *, prices_as_of: date) -> CostSummary:
    """The buyer's view of ``cost``: every option (AWS, self-build, other clouds) on both bases. ``prices_as_of`` is
    the day the prices are in force: the one the cost was asked for, else the day it was computed."""
    by_basis = {r.basis: r for r in cost.rankings}
    stated = cost.prices.on is not None
    return CostSummary(
        tokens=cost.tokens, region=cost.prices.region, prices_as_of=cost.prices.on or prices_as_of,
        prices_as_of_stated=stated, instance=cost.instance, instances=cost.instances,
        self_build_node=cost.self_build_node, self_build_nodes=cost.self_build_nodes, goodput=cost.goodput,
        job_mtbf_hours=cost.job_mtbf_hours, checkpoint_interval_s=cost.checkpoint_interval_s,
        cheapest_cash=_ranking(by_basis["cash"]), cheapest_amortised=_ranking(by_basis["amortised"]),
        fastest=RankingSummary(basis="days", winner=cost.fastest, tied=cost.fastest_tied, description=FASTEST),
        options=tuple(option_summary(r, cost.tokens) for r in (*cost.options, *cost.other_clouds)),
        notes=cost.notes, assumptions=tuple(_assumption(a) for a in cost.assumptions),
    )  # fmt: skip
