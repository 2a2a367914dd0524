"""What a plan search is asked (SearchSpec) and what it answers (Candidate, SearchResult), with the
framework tables of the space (shardings, offloads and recomputes each framework offers)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import Field

from app.domain.estimator.estimate import Estimate
from app.domain.estimator.plan import (
    AttentionKernel,
    CPCommType,
    Fp8Recipe,
    Framework,
    MoeDispatcher,
    Offload,
    Optimizer,
    Plan,
    Precision,
    Recompute,
    Sharding,
    default_expert_tp,
    moe_a2a_overlap_runs,
)
from app.domain.estimator.rules import (  # noqa: F401 - the grid's codes and shardings are the rules' own
    OFFLOADS,
    RECOMPUTES,
    SHARDINGS,
    SHARDINGS_BY_FRAMEWORK,
)
from app.domain.provenance import Frozen

GIB = 1024**3
OFFLOADS_BY_FRAMEWORK = {
    Framework.fsdp2: (Offload.none, Offload.params_cpu),
    Framework.megatron: (Offload.none, Offload.optimizer_cpu),
    Framework.deepspeed: (Offload.none, Offload.optimizer_cpu, Offload.params_cpu, Offload.nvme),
}
# Per-op selective activation checkpointing is torchtitan's (FSDP2 stack); the others recompute layers or the
# attention core (the capability table refuses selective-op for them).
RECOMPUTES_BY_FRAMEWORK = {
    Framework.fsdp2: tuple(Recompute),
    Framework.megatron: (Recompute.none, Recompute.selective, Recompute.full),
    Framework.deepspeed: (Recompute.none, Recompute.selective, Recompute.full),
}


class Objective(StrEnum):
    max_tokens_per_s = "max-tokens-per-s"
    min_time = "min-time"
    min_cost = "min-cost"
    max_headroom = "max-headroom"


class SearchTooLarge(ValueError):
    """The space would take too long; the message says how to narrow it."""


class SearchCancelled(RuntimeError):
    """The caller's ``should_stop`` hook said stop (a deadline passed); the search gave up between grids."""


class SearchSpec(Frozen):
    """What to search over and under which constraints (everything the user can set)."""

    gpus: tuple[int, ...] = Field(min_length=1, description="cluster sizes to consider (GPUs)")
    global_batches: tuple[int, ...] = Field(min_length=1, description="global batch sizes, in sequences")
    seq_len: int = Field(ge=1)
    framework: Framework = Framework.fsdp2
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adamw
    flash_attention: bool = True
    fused_kernels: bool | None = None
    fused_loss: bool | None = None  # None: as fused_kernels
    tp_comm_overlap: bool | None = None  # None: the framework's default (on for Megatron)
    fp8_attention: bool = False  # Megatron: attention in FP8 (Transformer Engine's fp8_dot_product_attention)
    fp8_recipe: Fp8Recipe = Fp8Recipe.auto  # how every FP8 plan scales its tensors (Plan.fp8_recipe)
    nvfp4_rht: bool = True  # NVFP4 plans: TE's random Hadamard transform on (Plan.nvfp4_rht)
    repeat_kv: bool = (
        False  # PyTorch: K/V repeated to every query head before attention (torchtitan < 2026-01)
    )
    fsdp_flat_params: bool = False  # PyTorch FSDP1 / FairScale flat parameters (no FSDP2 copy-out)
    zero_init: bool = (
        True  # DeepSpeed ZeRO-3: model built under zero.Init (off: whole on each GPU at start-up)
    )
    fused_cross_entropy: bool = False
    fused_swiglu: bool = False  # Liger-Kernel's SwiGLU in a PyTorch model (activations only)
    z_loss: bool = False  # the loss adds the z-loss (eager: extra passes over the logits)
    grad_reduce_bf16: bool = False  # Megatron: bf16 gradient buffers and reduce (NeMo's performance recipes)
    grad_accum_fp32: bool = False  # DeepSpeed bf16 ZeRO-1: BF16_Optimizer's fp32 gradient buffer
    attention_kernel: AttentionKernel = "auto"
    moe_dispatcher: MoeDispatcher = MoeDispatcher.alltoall
    cp_comm_type: CPCommType = CPCommType.p2p  # how every plan with cp > 1 exchanges K/V
    expert_tp: int | None = Field(
        default=None, ge=1, le=1024
    )  # the experts' TP of every plan (None: framework's)
    mtp_layers: int = Field(default=0, ge=0, le=8)  # multi-token prediction modules of every plan
    moe_a2a_overlap: bool = (
        False  # where a plan allows it (ep > 1, interleaving with pp > 1, no full recompute)
    )
    moe_capacity_factor: float | None = Field(
        default=None, gt=0, le=64
    )  # MoE token dropping (None: dropless)
    moe_pad_to_capacity: bool = False  # expert inputs padded to the capacity
    shardings: tuple[Sharding, ...] | None = None  # None: every strategy the framework offers
    offloads: tuple[Offload, ...] | None = None  # None: every offload the framework offers
    micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16)
    recomputes: tuple[Recompute, ...] = tuple(Recompute)
    vpps: tuple[int, ...] = (1, 2, 4)
    cps: tuple[int, ...] = (1, 2, 4, 8)
    max_pp: int = Field(default=64, ge=1)
    max_tp: int | None = None  # None: the NVLink domain (or any divisor of the GPUs when across nodes)
    allow_tp_across_nodes: bool = False
    hsdp_group: int | None = None  # HSDP shard group; None: one node
    headroom_bytes: float = Field(default=0, ge=0)
    headroom_fraction: float = Field(default=0, ge=0, lt=1)
    tokens_to_train: float | None = Field(default=None, gt=0)
    deadline_days: float | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)
    usd_per_gpu_hour: float | None = Field(default=None, gt=0, description="price used for cost objectives")
    objective: Objective = Objective.max_tokens_per_s
    top_k: int = Field(default=10, ge=1, le=100)
    max_plans: int = Field(default=2_000_000, ge=1)

    def etp(self, tp: Any) -> Any:
        """The routed experts' tensor-parallel degree of a plan of the space: the spec's ``expert_tp`` (the
        search keeps it), else the framework's default (numbers for one plan, arrays for the grid)."""
        default = default_expert_tp(self.framework, tp)
        return default if self.expert_tp is None else default * 0 + self.expert_tp

    def a2a_overlap(self, ep: Any, pp: Any, vpp: Any, recompute_full: Any) -> Any:
        """Whether a plan of the space runs the MoE all-to-all overlap: asked for, and where Megatron runs it
        (numbers for one plan, arrays for the grid)."""
        return self.moe_a2a_overlap & moe_a2a_overlap_runs(
            ep, pp, vpp, recompute_full, self.precision is Precision.fp32
        )


@dataclass(frozen=True, slots=True)
class Candidate:
    """One plan of the search with the figures it was ranked on."""

    plan: Plan
    gpus: int
    tokens_per_s: float
    step_time_s: float
    peak_memory_bytes: float
    margin_bytes: float
    mfu: float
    usd_per_hour: float | None
    usd_per_million_tokens: float | None
    time_to_train_days: float | None  # wall-clock days after failures (see goodput)
    cost_to_train_usd: float | None
    time_to_train_days_before_failures: float | None = None
    goodput: float = 1.0


class SearchResult(Frozen):
    considered_plans: int = Field(description="points of the grid, including impossible degree combinations")
    evaluated_plans: int = Field(description="valid plans evaluated by the model")
    feasible_plans: int
    elapsed_s: float
    plans_per_s: float
    plans: tuple[Candidate, ...]
    best: Estimate | None = Field(default=None, description="the winner's full estimate")
    pareto: tuple[Candidate, ...] = ()
    best_by_gpus: tuple[Candidate, ...] = Field(
        default=(), description="the fastest feasible plan of each cluster size (the sizing search's input)"
    )
    rejected: dict[str, int]
    explanation: str
    message: str | None = None
    notes: tuple[str, ...] = ()
