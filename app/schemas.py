"""Pydantic I/O models shared by the API, the web layer, the CLI and the benchmark runner."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from app.domain.export import PlanDocument
from app.domain.plan import Framework, Offload, Optimizer, Precision, Recompute, Sharding


class ErrorOut(BaseModel):
    """Error body of every 4xx answer the API gives."""

    detail: str
    known: list[str] | None = None


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    """422 body: one item per offending field, with the reason (and the fix for plan violations)."""

    detail: list[ErrorItem]


class EstimateRequest(BaseModel):
    """Inputs of one estimate. ``model`` (a preset slug) or ``hf_config`` (a Hugging Face config.json object)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        default=None, max_length=64, description="architecture preset slug, e.g. llama3.1-70b"
    )
    hf_config: dict[str, Any] | None = Field(default=None, description="a Hugging Face config.json, as JSON")
    gpu: str = Field(max_length=64, description="accelerator slug, e.g. h100-sxm")
    node: str | None = Field(
        default=None, max_length=64, description="node or instance slug (default: reference server)"
    )
    fabric: str | None = Field(
        default=None, max_length=64, description="scale-out fabric slug (default: the node's)"
    )
    gpus: int = Field(ge=1, le=1_048_576)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    vpp: int = Field(default=1, ge=1, le=64)
    dp: int | None = Field(default=None, ge=1, le=1_048_576, description="default: gpus / (tp·pp·cp)")
    cp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=1024)
    sharding: Sharding = Sharding.fsdp_full
    shard_group_size: int | None = Field(default=None, ge=1, le=1_048_576)
    offload: Offload = Offload.none
    micro_batch: int = Field(default=1, ge=1, le=4096)
    global_batch: int = Field(ge=1, le=16_777_216, description="sequences per optimizer step")
    seq_len: int = Field(ge=1, le=4_194_304)
    recompute: Recompute = Recompute.none
    sequence_parallel: bool = False
    flash_attention: bool = True
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adamw
    framework: Framework = Framework.fsdp2
    fused_kernels: bool | None = None
    tokens: float | None = Field(
        default=None, gt=0, le=1e16, description="tokens to train (for time to train)"
    )
    oversubscription: float = Field(default=1.0, ge=1.0, le=64.0)
    power_limit_w: float | None = Field(default=None, gt=0, le=5000)
    allow_tp_across_nodes: bool = False

    @model_validator(mode="after")
    def _one_model(self) -> EstimateRequest:
        if (self.model is None) == (self.hf_config is None):
            raise ValueError("give exactly one of model (a preset slug) or hf_config (a config.json object)")
        return self


# -- plan export (POST /api/v1/plans/export) ----------------------------------------------------------------


def _export_body_kind(value: Any) -> str:
    """A body with a ``schema`` key is a plan document; anything else is read as an estimate request."""
    if isinstance(value, dict):
        return "plan_document" if "schema" in value else "estimate_request"
    return "plan_document" if isinstance(value, PlanDocument) else "estimate_request"


PlanExportBody = Annotated[
    Annotated[EstimateRequest, Tag("estimate_request")] | Annotated[PlanDocument, Tag("plan_document")],
    Discriminator(_export_body_kind),
]
"""What the export endpoint takes: an estimate request (estimated first) or a capplan.plan/v1 document.
Validation errors name the branch: ``["body", "plan_document", "plan", "tp"]``."""


# --------------------------------------------------------------------------------------------------
# Cost and reliability (issue 5): `POST /api/v1/cost`, `POST /api/v1/cost/monthly`, `capplan cost`.

from app.domain.cost import CostOption, CostOverrides  # noqa: E402


class CostRequest(EstimateRequest):
    """ "Train ``tokens`` tokens with this plan": the estimate's inputs, plus the options to price and overrides
    of any cost or reliability figure (omitted figures come from the catalog, with their sources)."""

    tokens: float = Field(gt=0, le=1e16, description="tokens to train")
    options: list[CostOption] | None = Field(
        default=None, max_length=len(CostOption), description="pricing options (default: all)"
    )
    overrides: CostOverrides = Field(default_factory=CostOverrides)


class MonthlyCostRequest(BaseModel):
    """The monthly bill of ``nodes`` × an instance or node running all month, for every option."""

    model_config = ConfigDict(extra="forbid")

    instance: str | None = Field(
        default=None, max_length=64, description="AWS instance slug, e.g. p5.48xlarge"
    )
    node: str | None = Field(
        default=None, max_length=64, description="node slug: a server (self-build) or an instance"
    )
    nodes: int = Field(ge=1, le=1_000_000, description="how many of the instance or node")
    options: list[CostOption] | None = Field(default=None, max_length=len(CostOption))
    months: int = Field(default=36, ge=1, le=120, description="length of the cumulative-cost series")
    overrides: CostOverrides = Field(default_factory=CostOverrides)

    @model_validator(mode="after")
    def _instance_or_node(self) -> MonthlyCostRequest:
        if self.instance is None and self.node is None:
            raise ValueError("give instance (an AWS instance slug) or node (a node slug)")
        return self
