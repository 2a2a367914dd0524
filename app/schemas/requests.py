"""The request models of the estimate, the cost and the plan search: the API's bodies, the planner's form and the
command line's options (app/cli/options.py generates them from these fields)."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from app.domain.cost.inputs import CostOption, CostOverrides
from app.domain.estimator.plan import (
    AttentionKernel,
    CPCommType,
    Fp8Recipe,
    Framework,
    MoeDispatcher,
    Offload,
    Optimizer,
    Precision,
    Recompute,
    RecomputeModule,
    Sharding,
)
from app.domain.search.spec import Objective
from app.schemas.bounds import HfConfig, StrictNumbers

FigureOverrides = dict[Annotated[str, Field(max_length=80)], Annotated[float, Field(ge=0, le=1e15)]]
"""Catalog figures replaced for one plan or search (keys in app/domain/estimator/overrides.py)."""

# Kernel and precision settings the estimate and the search both take, declared once (each with its description)
FusedLoss = Annotated[
    bool | None,
    Field(
        description="cross-entropy as a fused or compiled kernel rather than eager fp32 log-softmax (default: as "
        "fused_kernels)",
    ),
]
TpCommOverlap = Annotated[
    bool | None,
    Field(
        description="TP communication overlapped with GEMMs (Megatron's --tp-comm-overlap, torchtitan's async TP; "
        "needs sequence parallelism); default: on for Megatron, off otherwise",
    ),
]
Fp8Attention = Annotated[
    bool,
    Field(
        description="attention in FP8 (Transformer Engine's fp8_dot_product_attention, megatron-core's "
        "TransformerConfig.fp8_dot_product_attention as NeMo / Megatron-Bridge set it): Megatron only, with precision "
        "fp8 or nvfp4; Megatron-LM's command line has no flag for it, so the Megatron-LM exports refuse it",
    ),
]
Fp8RecipeField = Annotated[
    Fp8Recipe,
    Field(
        description="how FP8 tensors are scaled (precision fp8): delayed (Transformer Engine's default), tensorwise "
        "(current scaling, NVIDIA's FP8-CS; torchao's default), rowwise (torchao, torchtitan 0.3.0's default), mxfp8 "
        "(Blackwell), blockwise (Hopper and Blackwell); auto = the framework's default",
    ),
]
Nvfp4Rht = Annotated[
    bool,
    Field(
        description="precision nvfp4: Transformer Engine's random Hadamard transform of the weight gradient's operands "
        "(NVFP4BlockScaling's default); off = NVTE_NVFP4_DISABLE_RHT=1, as NVIDIA's MLPerf Training v5.1 runs set it, "
        "one quantization pass fewer over every input and output gradient",
    ),
]
ZeroInit = Annotated[
    bool,
    Field(
        description="DeepSpeed ZeRO-3: model created under deepspeed.zero.Init (partitioned as it is made); off: "
        "deepspeed.initialize moves the whole 16-bit model to every GPU before partitioning it (a start-up peak)",
    ),
]
RepeatKv = Annotated[
    bool,
    Field(
        description="PyTorch stacks: K/V heads repeated to every query head before attention (torchtitan before "
        "2026-01); context parallelism's ring moves the repeated K/V",
    ),
]
FsdpFlatParams = Annotated[
    bool,
    Field(
        description="PyTorch FSDP1 / FairScale / Composer flat parameters (the all-gather fills them in place); off: "
        "FSDP2, which copies every gathered parameter out of the all-gather buffer",
    ),
]
FusedCrossEntropy = Annotated[
    bool,
    Field(
        description="fused linear cross-entropy (Liger-Kernel): the logits are never held whole",
    ),
]
ZLoss = Annotated[
    bool,
    Field(
        description="the loss adds the z-loss (PaLM, OLMo): extra passes over the fp32 logits when the loss is eager",
    ),
]
FusedSwiglu = Annotated[
    bool,
    Field(
        description="PyTorch stacks: fused SwiGLU kernel (Liger-Kernel) saving only the gate and up outputs",
    ),
]
GradAccumFp32 = Annotated[
    bool,
    Field(
        description="DeepSpeed bf16: accumulate gradients in fp32 (data_types.grad_accum_dtype); with ZeRO-1 that is "
        "BF16_Optimizer and its whole fp32 gradient buffer",
    ),
]
MoeCapacityFactor = Annotated[
    float | None,
    Field(
        default=None,
        gt=0,
        le=64,
        description="MoE token dropping: each expert takes at most this factor × its mean share of the routed tokens "
        "(Megatron's --moe-expert-capacity-factor); empty = dropless",
    ),
]
MoePadToCapacity = Annotated[
    bool,
    Field(
        description="with a capacity factor: expert inputs padded to the capacity (Megatron's "
        "--moe-pad-expert-input-to-capacity)",
    ),
]
GradReduceBf16 = Annotated[
    bool,
    Field(
        description="Megatron: gradients accumulated and reduced in bf16 (--grad-reduce-in-bf16; NVIDIA's NeMo / "
        "Megatron-Bridge performance recipes set grad_reduce_in_fp32=False) instead of fp32 main gradients",
    ),
]


class EstimateRequest(StrictNumbers):
    """Inputs of one estimate. ``model`` (a preset slug) or ``hf_config`` (a Hugging Face config.json object)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        default=None,
        max_length=200,
        description="architecture preset slug, e.g. llama3.1-70b, or a Hugging Face id (org/name[@revision]) "
        "whose config.json is in the server's local Hugging Face cache (never downloaded)",
    )
    hf_config: HfConfig | None = Field(
        default=None,
        description="a Hugging Face config.json, as JSON (nesting ≤ 20, integers ≤ 18 digits, "
        "num_hidden_layers ≤ 1,024, experts ≤ 4,096, vocab ≤ 4,194,304, …)",
    )
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
    expert_tp: int | None = Field(
        default=None, ge=1, le=1024,
        description="the routed experts' tensor-parallel degree (Megatron's --expert-tensor-parallel-size); "
        "default: tp; 1 = MoE parallel folding (experts whole, the EP group spans the TP ranks)",
    )  # fmt: skip
    mtp_layers: int = Field(
        default=0, ge=0, le=8,
        description="multi-token prediction modules trained (Megatron's --mtp-num-layers; DeepSeek-V3: 1): each one "
        "more layer, projection and output-head pass on the last pipeline stage",
    )  # fmt: skip
    pipeline_layout: str | None = Field(
        default=None, min_length=1, max_length=512,
        description="Megatron's --pipeline-model-parallel-layout, e.g. 'Et|(tt|)*30mL' (E embedding, t layer, "
        "m MTP layer, L loss, | ends a virtual stage); default: capplan's even split",
    )  # fmt: skip
    sharding: Sharding = Sharding.fsdp_full
    shard_group_size: int | None = Field(default=None, ge=1, le=1_048_576)
    offload: Offload = Offload.none
    micro_batch: int = Field(default=1, ge=1, le=4096)
    global_batch: int = Field(ge=1, le=16_777_216, description="sequences per optimizer step")
    seq_len: int = Field(ge=1, le=4_194_304)
    recompute: Recompute = Recompute.none
    recompute_layers: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="with full recompute: layers per pipeline chunk that recompute (the rest keep their "
        "activations); empty = every layer",
    )
    recompute_modules: list[RecomputeModule] | None = Field(
        default=None,
        max_length=len(RecomputeModule),
        description="with selective recompute: Megatron's --recompute-modules (core_attn, layernorm, mla_up_proj, "
        "mlp, moe_act, moe, shared_experts); empty = the attention core only",
    )
    sequence_parallel: bool = False
    cp_comm_type: CPCommType = Field(
        default=CPCommType.p2p,
        description="with cp > 1: p2p (ring) or all_gather (Transformer Engine's K/V all-gather, Megatron only)",
    )
    moe_dispatcher: MoeDispatcher = Field(
        default=MoeDispatcher.alltoall,
        description="MoE token dispatcher: alltoall, or deepep / hybridep (one copy per destination node)",
    )
    moe_a2a_overlap: bool = Field(
        default=False, description="Megatron-Core's MoE all-to-all overlap (overlap_moe_expert_parallel_comm)"
    )
    moe_capacity_factor: MoeCapacityFactor = None
    moe_pad_to_capacity: MoePadToCapacity = False
    flash_attention: bool = True
    attention_kernel: AttentionKernel = Field(
        default="auto", description="fused attention kernel: auto = the framework's own"
    )
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adamw
    framework: Framework = Framework.fsdp2
    fused_kernels: bool | None = None
    fused_loss: FusedLoss = None
    tp_comm_overlap: TpCommOverlap = None
    fp8_attention: Fp8Attention = False
    fp8_recipe: Fp8RecipeField = Fp8Recipe.auto
    nvfp4_rht: Nvfp4Rht = True
    repeat_kv: RepeatKv = False
    fsdp_flat_params: FsdpFlatParams = False
    zero_init: ZeroInit = True
    fused_cross_entropy: FusedCrossEntropy = False
    fused_swiglu: FusedSwiglu = False
    z_loss: ZLoss = False
    grad_accum_fp32: GradAccumFp32 = False
    grad_reduce_bf16: GradReduceBf16 = False
    tokens: float | None = Field(
        default=None, gt=0, le=1e16, description="tokens to train (for time to train)"
    )
    oversubscription: float = Field(default=1.0, ge=1.0, le=64.0)
    power_limit_w: float | None = Field(default=None, gt=0, le=5000)
    allow_tp_across_nodes: bool = False
    calibrated: bool = Field(
        default=True,
        description="use the calibration fitted from benchmark runs on this accelerator, when there is one "
        "(false: catalog defaults only, to compare)",
    )
    figure_overrides: FigureOverrides = Field(
        default_factory=dict,
        max_length=40,
        description="catalog figures replaced for this plan, e.g. {'accelerator.bf16_dense_tflops': 900, "
        "'efficiency.gemm_efficiency': 0.6}; see app/domain/estimator/overrides.py for the keys",
    )

    @model_validator(mode="after")
    def _one_model(self) -> EstimateRequest:
        if (self.model is None) == (self.hf_config is None):
            raise ValueError("give exactly one of model (a preset slug) or hf_config (a config.json object)")
        return self


# --------------------------------------------------------------------------------------------------
# Cost and reliability (issue 5): `POST /api/v1/cost`, `POST /api/v1/cost/monthly`, `capplan cost`.


class CostRequest(EstimateRequest):
    """ "Train ``tokens`` tokens with this plan": the estimate's inputs, plus the options to price and overrides
    of any cost or reliability figure (omitted figures come from the catalog, with their sources)."""

    tokens: float = Field(gt=0, le=1e16, description="tokens to train")
    options: list[CostOption] | None = Field(
        default=None, max_length=len(CostOption), description="pricing options (default: all)"
    )
    overrides: CostOverrides = Field(default_factory=CostOverrides)

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_a_number(cls, value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a number, got {value}")
        if isinstance(value, str) and value.strip().lower() in {
            "nan",
            "inf",
            "+inf",
            "-inf",
            "infinity",
            "-infinity",
        }:
            raise ValueError(f"must be a number, got {value.strip()}")
        return value


class MonthlyCostRequest(StrictNumbers):
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


# --------------------------------------------------------------------------------------------------
# Plan search (issue 4): `POST /api/v1/plans/search`, `capplan plan`.

RANGE_PATTERN = r"^\s*\d+(\.\d+)?([eE]\d+)?\s*:\s*\d+(\.\d+)?([eE]\d+)?\s*$"
MAX_GPUS = 1_048_576  # the largest GPU count (or range end) any request takes
# the largest end of a global-batch range: 16,777,216 sequences of 4,194,304 tokens
MAX_BATCH_TOKENS = 1 << 46


def parse_range(text: str) -> tuple[float, float]:
    """The two ends of an 'A:B' range that passed :data:`RANGE_PATTERN` and the range checks, low first."""
    low, high = (float(part) for part in text.split(":"))
    return low, high


def _range_shape(example: str) -> BeforeValidator:
    def check(value: object) -> object:
        """Refuse what is not 'A:B' with a message a person reads (the pattern's own error shows the regex)."""
        if isinstance(value, str) and not re.match(RANGE_PATTERN, value):
            shown = value if len(value) <= 40 else value[:40] + "…"
            raise ValueError(
                f"must be a range 'A:B' of two non-negative numbers, e.g. {example}, got {shown!r}"
            )
        return value

    return BeforeValidator(check)


def _range_ends(unit: str, largest: float) -> AfterValidator:
    def check(text: str) -> str:
        low, high = parse_range(text)
        if not (math.isfinite(low) and math.isfinite(high)) or max(low, high) > largest:
            raise ValueError(
                f"the ends of the range must be at most {largest:,.0f} {unit}, got {text.strip()!r}"
            )
        if low > high:
            raise ValueError(f"the start ({low:g}) is above the end ({high:g}): write {high:g}:{low:g}")
        if high < 1:
            raise ValueError(
                f"the end of the range must be at least 1 {unit.rstrip('s')}, got {text.strip()!r}"
            )
        return text

    return AfterValidator(check)


GpusRange = Annotated[
    str,
    Field(pattern=RANGE_PATTERN),
    _range_shape("512:4096 (whole nodes in between)"),
    _range_ends("GPUs", MAX_GPUS),
]
"""'A:B' GPUs: two finite numbers, A ≤ B ≤ :data:`MAX_GPUS`, each refusal a sentence naming the problem."""
TokensRange = Annotated[
    str, Field(pattern=RANGE_PATTERN), _range_shape("1e6:4e6"), _range_ends("tokens", MAX_BATCH_TOKENS)
]
"""'A:B' tokens per step, checked like :data:`GpusRange`."""


class PlanSearchRequest(StrictNumbers):
    """Find the best plan: the model, the hardware, the cluster size (or a range of whole-node sizes), the
    batch (or a range in tokens), the objective, the constraints and, optionally, a narrower space."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        default=None,
        max_length=200,
        description="preset slug or Hugging Face id (org/name), as in the estimate",
    )
    hf_config: HfConfig | None = None
    gpu: str = Field(max_length=64)
    node: str | None = Field(default=None, max_length=64)
    fabric: str | None = Field(default=None, max_length=64)
    figure_overrides: FigureOverrides = Field(
        default_factory=dict,
        max_length=40,
        description="catalog figures replaced for every plan of the search, as for an estimate (the planner's "
        "overrides reach its search)",
    )
    gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS, description="a fixed GPU count")
    gpus_range: GpusRange | None = Field(default=None, description="'A:B' GPUs, whole nodes")
    calibrated: bool = Field(
        default=True,
        description="use the accelerator's calibration from benchmark runs (false: catalog defaults)",
    )
    global_batch: int | None = Field(default=None, ge=1, le=16_777_216, description="sequences per step")
    global_batch_tokens: TokensRange | None = Field(
        default=None, description="'A:B' tokens per step; power-of-two batches inside"
    )
    seq_len: int = Field(ge=1, le=4_194_304)
    objective: Objective = Objective.max_tokens_per_s
    top_k: int = Field(default=10, ge=1, le=100)
    headroom_gib: float = Field(default=0.0, ge=0, le=1024)
    headroom_percent: float = Field(default=0.0, ge=0, lt=90)
    framework: Framework = Framework.fsdp2
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adamw
    flash_attention: bool = True
    fused_kernels: bool | None = None
    fused_loss: FusedLoss = None
    tp_comm_overlap: TpCommOverlap = None
    fp8_attention: Fp8Attention = False
    fp8_recipe: Fp8RecipeField = Fp8Recipe.auto
    nvfp4_rht: Nvfp4Rht = True
    repeat_kv: RepeatKv = False
    fsdp_flat_params: FsdpFlatParams = False
    zero_init: ZeroInit = True
    fused_cross_entropy: FusedCrossEntropy = False
    fused_swiglu: FusedSwiglu = False
    z_loss: ZLoss = False
    grad_accum_fp32: GradAccumFp32 = False
    grad_reduce_bf16: GradReduceBf16 = False
    attention_kernel: AttentionKernel = Field(
        default="auto", description="fused attention kernel: auto = the framework's own"
    )
    moe_dispatcher: MoeDispatcher = Field(
        default=MoeDispatcher.alltoall,
        description="MoE token dispatcher of every plan searched: alltoall, or deepep / hybridep",
    )
    cp_comm_type: CPCommType = Field(
        default=CPCommType.p2p,
        description="how every plan with cp > 1 exchanges K/V: p2p (ring) or all_gather (Megatron only)",
    )
    mtp_layers: int = Field(
        default=0,
        ge=0,
        le=8,
        description="multi-token prediction modules of every plan searched (Megatron only)",
    )
    expert_tp: int | None = Field(
        default=None, ge=1, le=1024,
        description="the routed experts' tensor-parallel degree of every plan searched (1: MoE parallel folding); "
        "default: Megatron tries both tp and 1 for every plan, DeepSpeed runs tp, FSDP2 1",
    )  # fmt: skip
    moe_a2a_overlap: bool = Field(
        default=False, description="Megatron-Core's MoE all-to-all overlap, where a plan allows it"
    )
    moe_capacity_factor: MoeCapacityFactor = None
    moe_pad_to_capacity: MoePadToCapacity = False
    shardings: list[Sharding] | None = Field(default=None, max_length=len(Sharding))
    offloads: list[Offload] | None = Field(default=None, max_length=len(Offload))
    micro_batches: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(default=None, max_length=12)
    recomputes: list[Recompute] | None = Field(default=None, max_length=len(Recompute))
    vpps: list[Annotated[int, Field(ge=1, le=64)]] | None = Field(default=None, max_length=8)
    cps: list[Annotated[int, Field(ge=1, le=1024)]] | None = Field(default=None, max_length=8)
    max_pp: int = Field(default=64, ge=1, le=1024)
    max_tp: int | None = Field(default=None, ge=1, le=1024)
    allow_tp_across_nodes: bool = False
    tokens: float | None = Field(default=None, gt=0, le=1e16, description="tokens to train")
    deadline_days: float | None = Field(default=None, gt=0, le=3650)
    budget_usd: float | None = Field(default=None, gt=0, le=1e12)
    price_option: CostOption = Field(default=CostOption.on_demand, description="pricing for cost figures")
    overrides: CostOverrides = Field(
        default_factory=CostOverrides,
        description="price, reliability and storage figures replaced, as for the cost (the planner's price overrides "
        "reach its search)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PlanSearchRequest:
        if (self.model is None) == (self.hf_config is None):
            raise ValueError("give exactly one of model (a preset slug) or hf_config (a config.json object)")
        if (self.gpus is None) == (self.gpus_range is None):
            raise ValueError("give exactly one of gpus or gpus_range ('A:B')")
        if (self.global_batch is None) == (self.global_batch_tokens is None):
            raise ValueError("give exactly one of global_batch (sequences) or global_batch_tokens ('A:B')")
        if (self.deadline_days or self.budget_usd) and not self.tokens:
            raise ValueError("a deadline or a budget needs tokens (how many tokens to train)")
        return self
