"""Published training runs (held-out validation set) and published reliability statistics.

Transcribed from ``shared/reference/published_runs.json`` into ``data/published_runs.toml``. Every figure is a
plain typed field; a figure that the reference marked as inferred (rather than read from the source) is named in
``inferred`` with how it was inferred, so consumers can tell measured from derived numbers.

TFLOP/s figures are only comparable under the same accounting; :class:`FlopsAccounting` names the formula each
source used and :func:`accounting_flops_per_iteration` reproduces it from the run's own fields.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from app.domain.estimator.plan import Fp8Recipe
from app.domain.model.architecture import Architecture, architecture_by_slug
from app.domain.provenance import CatalogEntry, Confidence, FigureProvenance, Frozen

PUBLISHED_RUNS_FILE = "published_runs.toml"
PUBLISHED_RUNS_DIR = "published_runs"
PUBLISHED_RUNS_TABLE = "published_run"
RELIABILITY_TABLE = "reliability_stats"


class Sharding(StrEnum):
    """How model states are sharded across data-parallel ranks."""

    ddp = "ddp"  # replicated (plain DDP / Megatron without distributed optimizer)
    zero1 = "zero1"  # optimizer states sharded
    zero2 = "zero2"  # + gradients
    zero3 = "zero3"  # + parameters
    fsdp_full = "fsdp-full"  # FSDP / FSDP2 FULL_SHARD (parameters, gradients, optimizer states)
    fsdp_grad_op = "fsdp-grad-op"  # FSDP SHARD_GRAD_OP (parameters kept after the forward)
    fsdp_hybrid = "fsdp-hybrid"  # HSDP: FULL_SHARD inside groups of shard_group_size, replicated across them
    megatron_distopt = "megatron-distopt"  # Megatron distributed optimizer (ZeRO-1-like)


class FlopsAccounting(StrEnum):
    """Which FLOP count a source's TFLOP/s or MFU figure uses (B = global batch, s = seq, l = layers, h = hidden)."""

    megatron_96_hfu = "megatron-96-hfu"
    """96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration: includes the recompute forward, non-causal attention."""
    megatron_72_mfu = "megatron-72-mfu"
    """72·B·s·l·h²·(1 + s/6h + V/12lh) per iteration: model FLOPs, no recompute, non-causal attention."""
    mfu_6n_plus_attention = "mfu-6n-plus-attention"
    """(6·N + 12·l·h·s) per token (non-causal attention); HFU uses 8·N + 16·l·h·s with full recompute."""
    six_n = "6n"
    """6·N per token, no attention term."""
    none_reported = "none-reported"
    """The source reports throughput (tokens/s) only, no FLOP/s or MFU."""


Precision = Literal["fp16", "bf16", "fp8", "nvfp4"]
Recompute = Literal["none", "selective", "full"]
Framework = Literal[
    "megatron-lm",  # NVIDIA/Megatron-LM (Megatron-Core, Transformer Engine in recent releases)
    "nemo",  # NVIDIA NeMo / Megatron-Bridge: Megatron-Core + Transformer Engine underneath
    "megatron-deepspeed",  # Megatron's model code with DeepSpeed's engine (ZeRO-1, pipeline)
    "deepspeed",  # DeepSpeed ZeRO (stage 1/2/3) on a plain PyTorch / Hugging Face model
    "torchtitan",  # PyTorch-native: FSDP2 + DTensor TP + torch.distributed.pipelining
    "pytorch-fsdp",  # PyTorch FSDP on a plain PyTorch model (FSDP1 FlatParameter unless fsdp_flat_params = false)
    "composer",  # MosaicML Composer / llm-foundry (FSDP1 with fused kernels)
]
ArchitectureTemplate = Literal["gpt", "bloom", "llama"]

# Software stacks: runs of one stack share kernels and overlap behaviour, so accuracy is reported per stack.
STACK_OF_FRAMEWORK: dict[str, str] = {
    "megatron-lm": "megatron",
    "nemo": "megatron",
    "megatron-deepspeed": "deepspeed",
    "deepspeed": "deepspeed",
    "torchtitan": "fsdp",
    "pytorch-fsdp": "fsdp",
    "composer": "composer",
}


class PublishedMemory(Frozen):
    """Per-GPU memory figures the source published (GiB)."""

    what: str | None = None
    peak_gib_max_over_ranks: float | None = Field(default=None, ge=0)
    includes_runtime: bool = Field(
        default=False,
        description="the peak was read outside PyTorch's allocator (nvidia-smi, DCGM), so it includes the CUDA "
        "context and NCCL's buffers; otherwise it is torch.cuda.max_memory_reserved",
    )
    params_grads_optimizer_gib: float | None = Field(default=None, ge=0)
    activations_gib_selective_sp: float | None = Field(default=None, ge=0)
    activations_gib_no_recompute_no_sp: float | None = Field(default=None, ge=0)
    fig7_activation_pct_of_baseline: dict[str, float] = Field(default_factory=dict)


class RunVariant(Frozen):
    """A neighbouring configuration reported next to the headline row (ablation, other schedule, CP degree)."""

    technique: str | None = None
    model: str | None = None
    n_gpus: int | None = Field(default=None, gt=0)
    tp: int | None = Field(default=None, gt=0)
    pp: int | None = Field(default=None, gt=0)
    dp: int | None = Field(default=None, gt=0, description="data-parallel / FSDP degree")
    cp: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0)
    schedule: str | None = None
    recompute: Recompute | None = None
    sequence_parallel: bool | None = None
    tokens_per_sec_per_gpu: float | None = Field(default=None, gt=0)
    peak_gib: float | None = Field(default=None, gt=0)
    mfu: float | None = Field(default=None, gt=0, lt=1)


class AnchorPrediction(Frozen):
    """What another estimator predicted for the same run (a yardstick, not ground truth)."""

    tool: str
    iteration_time_s: float | None = None
    mem_total_gib: float | None = None
    params_grads_optimizer_gib: float | None = None
    activations_gib_no_recompute: float | None = None
    activations_gib_selective_sp: float | None = None


_INFERABLE = {
    "optimizations",  # a kernel or optimizer the source does not name but the run's stack used (e.g. bf16-optimizer)
    "n_heads",
    "n_kv_heads",
    "ffn_hidden_size",
    "activation",
    "vocab_size",
    "seq_len",
    "total_params_b_reported",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "etp",
    "mtp_layers",
    "pipeline_layout",
    "vpp",
    "n_experts",
    "experts_top_k",
    "micro_batch",
    "global_batch",
    "grad_accum",
    "recompute",
    "recompute_layers",
    "precision",
    "sequence_parallel",
    "cp_comm_type",
    "moe_dispatcher",
    "moe_a2a_overlap",
    "tp_comm_overlap",
    "fp8_attention",
    "fp8_recipe",
    "nvfp4_rht",
    "fused_loss",
    "fsdp_flat_params",
    "zero_init",
    "recompute_modules",
    "sharding",
    "tflops_per_gpu_reported",
    "model_tflops_per_gpu",
    "mfu",
    "hfu",
    "tokens_per_sec_per_gpu",
    "iteration_time_s",
}


class PublishedRun(CatalogEntry):
    """One published training run: model, hardware, parallel plan, and the throughput it reported.

    ``slug`` is the run id. ``source`` is the paper/report key; ``source_where`` the table or file within it.
    """

    priority: Literal[1, 2] = Field(
        description="1 = core held-out set; 2 = supplementary / weaker provenance"
    )
    source_family: str | None = Field(
        default=None,
        description="the group left out together in cross-validation (default: the source key); runs of "
        "one paper, one benchmark table or one framework's published numbers share it",
    )
    source_year: int = Field(ge=2000, le=2100)
    source_where: str
    source_read_via: str = ""

    # model
    model: str
    architecture: str | None = Field(
        default=None, description="preset slug when the run trained exactly that model"
    )
    architecture_template: ArchitectureTemplate | None = Field(
        default=None,
        description="how to build the architecture from the fields below when there is no preset",
    )
    n_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int | None = Field(default=None, gt=0, description="None = multi-head attention (= n_heads)")
    ffn_hidden_size: int = Field(gt=0)
    activation: Literal["gelu", "swiglu"]
    mlp_type_text: str | None = None
    vocab_size: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    n_experts: int = Field(default=0, ge=0)
    experts_top_k: int = Field(default=0, ge=0)
    total_params_b_reported: float | None = Field(default=None, gt=0)
    tied_embeddings: bool | None = Field(
        default=None, description="template models: input and output embeddings shared (gpt/bloom: yes)"
    )

    # hardware
    gpu_name: str
    accelerator: str | None = Field(
        default=None, description="our accelerator slug; None = not in the catalog"
    )
    gpu_memory_gb: float | None = Field(
        default=None, gt=0, description="when the card differs from the catalog SKU"
    )
    gpu_memory_bandwidth_gb_per_s: float | None = Field(
        default=None,
        gt=0,
        description="HBM bandwidth as the source states it, when the card differs from the catalog SKU",
    )
    gpu_power_limit_w: int | None = Field(default=None, gt=0)
    gpu_peak_tflops_16bit: float | None = Field(
        default=None, gt=0, description="peak the source used for MFU"
    )
    hardware_caveat: str | None = None
    n_gpus: int = Field(gt=0)
    node: str | None = Field(
        default=None, description="node slug the run ran on (default: the reference server of its GPU)"
    )
    scale_out_gbit_per_s_per_node: float | None = Field(
        default=None,
        gt=0,
        description="compute-fabric bandwidth per node, one direction, as the source states it, when it differs "
        "from the node's (e.g. 4 x 100 Gb/s Omni-Path on Jean Zay against a DGX's 8 x 200 Gb/s)",
    )

    # plan
    model_parallel_size: int | None = Field(default=None, gt=0)
    tp: int | None = Field(default=None, gt=0)
    pp: int | None = Field(default=None, gt=0)
    dp: int | None = Field(default=None, gt=0)
    cp: int | None = Field(default=None, gt=0)
    ep: int | None = Field(default=None, gt=0, description="expert-parallel degree (MoE)")
    etp: int | None = Field(
        default=None, gt=0,
        description="the routed experts' tensor-parallel degree (Megatron's expert_tensor_parallel_size); None = tp",
    )  # fmt: skip
    mtp_layers: int = Field(
        default=0,
        ge=0,
        le=8,
        description="multi-token prediction modules the run trained (Megatron's mtp_num_layers)",
    )
    pipeline_layout: str | None = Field(
        default=None,
        description="Megatron-Core's pipeline_model_parallel_layout the run's configuration sets",
    )
    vpp: int | None = Field(default=None, gt=0)
    micro_batch: int | None = Field(default=None, gt=0)
    global_batch: int | None = Field(default=None, gt=0, description="sequences per optimizer step")
    grad_accum: int | None = Field(default=None, gt=0)
    recompute: Recompute
    recompute_layers: int | None = Field(
        default=None,
        ge=0,
        description="with full recompute: layers per pipeline chunk that recompute (block-level checkpointing of "
        "only some layers); absent = every layer",
    )
    sequence_parallel: bool
    recompute_modules: list[str] | None = Field(
        default=None,
        description="with selective recompute: Megatron's --recompute-modules as the run's recipe sets them",
    )
    cp_comm_type: Literal["p2p", "all_gather"] = Field(
        default="p2p",
        description="how the run's context parallelism exchanged K/V: p2p (a ring: Transformer Engine's default, "
        "PyTorch's ring attention) or all_gather (K/V gathered once, no ring: Llama 3, TE's 'all_gather')",
    )
    cp_comm_type_text: str | None = None  # the source's words for it
    moe_dispatcher: Literal["alltoall", "deepep", "hybridep"] = Field(
        default="alltoall",
        description="MoE token dispatcher the run used (Megatron's flex dispatcher backend: deepep, hybridep)",
    )
    moe_a2a_overlap: bool = Field(
        default=False, description="MoE all-to-all overlap on (Megatron's overlap_moe_expert_parallel_comm)"
    )
    tp_comm_overlap: bool | None = Field(
        default=None,
        description="TP communication overlap on (Megatron's --tp-comm-overlap, torchtitan's async TP); None = "
        "from the run's optimizations and stack (app.domain.estimator.validation.run_plan)",
    )
    fp8_attention: bool = Field(
        default=False,
        description="attention in FP8 (Transformer Engine's fp8_dot_product_attention; NeMo / Megatron-Bridge's "
        "fp8_dot_product_attention, megatron-core's TransformerConfig field)",
    )
    fp8_recipe: Fp8Recipe = Field(
        default=Fp8Recipe.auto,
        description="how the FP8 run scaled its tensors, where the source states it (NVIDIA's 'FP8-CS' = tensorwise, "
        "'FP8-MX' = mxfp8; MLPerf configs' FP8_RECIPE; DeepSeek-V3's tile/block scaling = blockwise); auto = not "
        "stated: the stack's default (Plan.fp8_recipe)",
    )
    nvfp4_rht: bool = Field(
        default=True,
        description="NVFP4 runs: whether Transformer Engine's random Hadamard transform ran (its default); false where "
        "the configuration sets NVTE_NVFP4_DISABLE_RHT=1",
    )
    fused_loss: bool | None = Field(
        default=None,
        description="the cross-entropy ran as one fused or compiled kernel (true) or as eager PyTorch on fp32 logits "
        "(false), as the run's training script configured it; None = from the run's optimizations and stack "
        "(app.domain.estimator.validation.run_plan)",
    )
    fsdp_flat_params: bool | None = Field(
        default=None,
        description="PyTorch FSDP: the run's FSDP kept each unit's parameters in one flat buffer (FSDP1, FairScale, "
        "Composer: true) or sharded them one by one (FSDP2's fully_shard: false); None = from the framework "
        "(pytorch-fsdp and composer: FSDP1; torchtitan: FSDP2)",
    )
    zero_init: bool = Field(
        default=True,
        description="DeepSpeed ZeRO-3: the model was created under deepspeed.zero.Init; false when it was built "
        "whole and handed to deepspeed.initialize (the whole model on each GPU at start-up)",
    )
    sharding: Sharding
    shard_group_size: int | None = Field(default=None, gt=0, description="HSDP shard group (GPUs)")
    offload: Literal["none", "optimizer-cpu", "params-cpu", "nvme"] = Field(
        default="none",
        description="what the run kept off the GPU (ZeRO-Offload / ZeRO-Infinity / FSDP CPUOffload)",
    )
    sharding_text: str
    framework: Framework
    precision: Precision
    precision_text: str
    optimizations: tuple[str, ...] = ()
    parallelism_note: str | None = None

    # reported figures
    tflops_per_gpu_reported: float | None = Field(
        default=None, gt=0, description="as printed; see flops_accounting"
    )
    model_tflops_per_gpu: float | None = Field(default=None, gt=0)
    pct_of_peak_reported: float | None = Field(default=None, gt=0, le=100)
    aggregate_pflops_reported: float | None = Field(default=None, gt=0)
    mfu: float | None = Field(default=None, gt=0, lt=1)
    hfu: float | None = Field(default=None, gt=0, lt=1)
    tokens_per_sec_per_gpu: float | None = Field(default=None, gt=0)
    iteration_time_s: float | None = Field(default=None, gt=0)
    flops_accounting: FlopsAccounting
    flops_accounting_text: str

    memory: PublishedMemory | None = None
    variants: tuple[RunVariant, ...] = ()
    anchor_predictions: tuple[AnchorPrediction, ...] = ()
    inferred: dict[str, str] = Field(default_factory=dict, description="field → how it was inferred")
    excluded_from_validation: str | None = Field(default=None, description="why, when the run cannot be used")

    @model_validator(mode="after")
    def _check(self) -> PublishedRun:
        problems = []
        unknown = sorted(set(self.inferred) - _INFERABLE)
        if unknown:
            problems.append(f"inferred names unknown figures {unknown}; allowed: {sorted(_INFERABLE)}")
        if (self.architecture is None) == (self.architecture_template is None):
            problems.append("give exactly one of architecture (a preset slug) or architecture_template")
        if self.accelerator is None and not self.excluded_from_validation:
            problems.append("a run on an accelerator we do not catalog must give excluded_from_validation")
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            problems.append(f"n_heads ({self.n_heads}) is not divisible by n_kv_heads ({self.n_kv_heads})")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def id(self) -> str:
        return self.slug

    @property
    def family(self) -> str:
        """The cross-validation group: ``source_family`` or the source key."""
        return self.source_family or self.source

    @property
    def stack(self) -> str:
        """The software stack (megatron, fsdp, deepspeed, composer) the run's framework belongs to."""
        return STACK_OF_FRAMEWORK[str(self.framework)]

    @property
    def included_in_validation(self) -> bool:
        return self.excluded_from_validation is None

    def is_inferred(self, field: str) -> bool:
        return field in self.inferred

    def figure_provenance(self, field: str) -> FigureProvenance:
        if field in self.provenance:
            return self.provenance[field]
        if field in self.inferred:
            return FigureProvenance(
                source=self.source,
                as_of=self.as_of,
                confidence=Confidence.medium,
                note=f"inferred: {self.inferred[field]}",
            )
        return super().figure_provenance(field)

    def parallel_degrees_product(self) -> int | None:
        """tp·pp·dp·cp, or None when any degree is unknown."""
        degrees = (self.tp, self.pp, self.dp, self.cp)
        if any(d is None for d in degrees):
            return None
        product = 1
        for d in degrees:
            product *= d  # type: ignore[operator]
        return product

    def validation_gaps(self) -> tuple[str, ...]:
        """Inputs an estimate of this run needs that the source did not give."""
        needed = ("tp", "pp", "dp", "micro_batch", "global_batch")
        return tuple(f for f in needed if getattr(self, f) is None)


class InterruptionCause(Frozen):
    component: str
    category: str
    interruption_count: int = Field(ge=0)
    pct_of_interruptions_as_printed: float = Field(ge=0, le=100)


class OtherReliabilityReport(Frozen):
    source: str
    summary: str


class PublishedReliabilityStats(Frozen):
    """Interruption statistics of a published large run (Llama 3 405B pre-training)."""

    source: str
    as_of: str
    source_where: str
    window_days: float = Field(gt=0)
    n_gpus: int = Field(gt=0)
    job_interruptions_total: int = Field(ge=0)
    planned: int = Field(ge=0)
    unexpected: int = Field(ge=0)
    effective_training_time_text: str
    manual_interventions: int = Field(ge=0)
    unexpected_attributed_to_hardware_pct: float = Field(ge=0, le=100)
    gpu_issues_pct_of_unexpected: float = Field(ge=0, le=100)
    causes: tuple[InterruptionCause, ...]
    caveat: str = ""
    other_reports: tuple[OtherReliabilityReport, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> PublishedReliabilityStats:
        if self.planned + self.unexpected != self.job_interruptions_total:
            raise ValueError(
                f"planned ({self.planned}) + unexpected ({self.unexpected}) != total ({self.job_interruptions_total})"
            )
        return self

    @property
    def gpu_hours(self) -> float:
        return self.n_gpus * self.window_days * 24

    @property
    def unexpected_interruptions_per_gpu_hour(self) -> float:
        return self.unexpected / self.gpu_hours

    @property
    def job_mtbf_hours(self) -> float:
        """Mean time between unexpected interruptions of the whole job."""
        return self.window_days * 24 / self.unexpected

    def source_keys(self) -> set[str]:
        return {self.source, *(r.source for r in self.other_reports)}


def architecture_for_run(run: PublishedRun, presets: tuple[Architecture, ...]) -> Architecture:
    """The model the run trained: its preset, or one built from the run's fields and its template.

    ``gpt``: learned positions (a table of ``seq_len`` rows), LayerNorm with bias, biases on every linear layer,
    GELU MLP, tied embeddings — Megatron-LM GPT defaults, and also llm-foundry's MPT benchmark configs (their
    published parameter counts match this layout exactly). ``bloom``: ALiBi, an extra LayerNorm after the
    embedding, biases, tied embeddings. ``llama``: rotary positions, RMSNorm, no biases, SwiGLU (or GELU as the
    run says), grouped-query attention from ``n_kv_heads``, untied embeddings unless ``tied_embeddings``.
    """
    if run.architecture is not None:
        return architecture_by_slug(presets, run.architecture)
    if run.n_experts:
        raise ValueError(
            f"{run.slug}: the templates build dense models only; name an MoE preset in architecture"
        )
    common = dict(
        slug=f"run-{run.slug}"[:64],
        name=f"{run.model} (as trained in {run.slug})",
        source=run.source,
        as_of=run.as_of,
        confidence=Confidence.medium,
        notes=f"Built from the published run's fields with the '{run.architecture_template}' template.",
        family=run.architecture_template,
        n_layers=run.n_layers,
        hidden_size=run.hidden_size,
        n_heads=run.n_heads,
        n_kv_heads=run.n_kv_heads or run.n_heads,
        head_dim=run.hidden_size // run.n_heads,
        ffn_hidden_size=run.ffn_hidden_size,
        activation=run.activation,
        vocab_size=run.vocab_size,
        tied_embeddings=True,
        max_context=run.seq_len,
        norm="layernorm",
        norm_bias=True,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
    )
    if run.architecture_template == "llama":
        llama = {
            **common,
            "tied_embeddings": bool(run.tied_embeddings),
            "norm": "rmsnorm",
            "norm_bias": False,
            "qkv_bias": False,
            "attn_out_bias": False,
            "mlp_bias": False,
        }
        return Architecture(position="rotary", **llama)
    if run.architecture_template == "gpt":
        return Architecture(position="learned", max_position_embeddings=run.seq_len, **common)
    return Architecture(position="alibi", embedding_norm=True, **common)


def accounting_flops_per_iteration(
    run: PublishedRun, accounting: FlopsAccounting | None = None
) -> float | None:
    """FLOPs of one optimizer step under ``accounting`` (default: the run's own), from the run's fields.

    None when the accounting has no formula (``none-reported``) or an input is unknown. For the 6N forms, N is
    the source's own reported parameter count, as the source computed its MFU from it.
    """
    accounting = FlopsAccounting(accounting or run.flops_accounting)
    if run.global_batch is None:
        return None
    b, s, n_layers, h, v = run.global_batch, run.seq_len, run.n_layers, run.hidden_size, run.vocab_size
    if accounting == FlopsAccounting.megatron_96_hfu:
        return 96 * b * s * n_layers * h * h * (1 + s / (6 * h) + v / (16 * n_layers * h))
    if accounting == FlopsAccounting.megatron_72_mfu:
        return 72 * b * s * n_layers * h * h * (1 + s / (6 * h) + v / (12 * n_layers * h))
    if run.total_params_b_reported is None:
        return None
    n = run.total_params_b_reported * 1e9
    if accounting == FlopsAccounting.mfu_6n_plus_attention:
        return b * s * (6 * n + 12 * n_layers * h * s)
    if accounting == FlopsAccounting.six_n:
        return b * s * 6 * n
    return None


__all__ = [
    "AnchorPrediction",
    "FlopsAccounting",
    "InterruptionCause",
    "PublishedMemory",
    "PublishedReliabilityStats",
    "PublishedRun",
    "RunVariant",
    "Sharding",
    "accounting_flops_per_iteration",
    "architecture_for_run",
]
