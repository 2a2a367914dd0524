"""The sizing request and its answer (``POST /api/v1/size``, the "Size a cluster" page, `capplan size`): what
to size, the ranked (accelerator, node, size, plan, offer) rows and the Pareto front. The use-case is
:mod:`app.services.size`."""

from __future__ import annotations

from datetime import date
from typing import Any, Literal

from pydantic import Field, model_validator

from app.domain.cost.inputs import CostOption, CostOverrides
from app.schemas.bounds import StrictNumbers
from app.schemas.requests import GpusRange

DEFAULT_OPTIONS = (
    CostOption.on_demand, CostOption.commit_1yr, CostOption.commit_3yr, CostOption.spot,
    CostOption.capacity_block, CostOption.self_build,
)  # fmt: skip
DEFAULT_GPUS_RANGE = "8:65536"


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
