"""Pydantic I/O models shared by the API, the web layer, the CLI and the benchmark runner."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
