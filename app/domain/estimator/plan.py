"""The parallelism and training plan, and its validation.

A plan is everything the user chooses about *how* to train: parallel degrees (tp, pp, vpp, dp, cp, ep),
the data-parallel sharding strategy, offload, batch shape, recompute, precision, optimizer and the framework
profile whose conventions (bytes per parameter, runtime buffers) the estimate follows.

:func:`plan_violations` explains every problem and how to fix it; nothing here raises on a bad plan.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from app.domain.provenance import Frozen

# The fused attention kernel a plan runs (see compute.attention_efficiency); "auto" = the stack's own.
AttentionKernel = Literal["auto", "fa1", "fa2", "fa3", "fa4", "cudnn"]


class Sharding(StrEnum):
    """Data-parallel sharding of model states."""

    ddp = "ddp"  # replicated params, grads, optimizer; one all-reduce per step (FSDP NO_SHARD is the same)
    zero1 = "zero1"  # optimizer state sharded over dp
    zero2 = "zero2"  # optimizer state and gradients sharded
    zero3 = "zero3"  # everything sharded; params gathered per layer (DeepSpeed)
    fsdp_full = "fsdp-full"  # FSDP FULL_SHARD / FSDP2 fully_shard(reshard_after_forward=True)
    fsdp_grad_op = "fsdp-grad-op"  # FSDP SHARD_GRAD_OP / fully_shard(reshard_after_forward=False)
    fsdp_hybrid = "fsdp-hybrid"  # HSDP: fully sharded inside groups of shard_group_size, replicated across
    megatron_distopt = "megatron-distopt"  # Megatron distributed optimizer (ZeRO-1-like, fp32 main grads)

    @property
    def shards_optimizer(self) -> bool:
        return self is not Sharding.ddp

    @property
    def shards_grads(self) -> bool:
        return self in {
            Sharding.zero2,
            Sharding.zero3,
            Sharding.fsdp_full,
            Sharding.fsdp_grad_op,
            Sharding.fsdp_hybrid,
        }

    @property
    def shards_params(self) -> bool:
        return self in {Sharding.zero3, Sharding.fsdp_full, Sharding.fsdp_grad_op, Sharding.fsdp_hybrid}


class Offload(StrEnum):
    none = "none"
    optimizer_cpu = "optimizer-cpu"  # ZeRO-Offload: optimizer state (and fp32 master) in host RAM
    params_cpu = "params-cpu"  # ZeRO-Infinity / FSDP CPUOffload: params, grads and optimizer in host RAM
    nvme = "nvme"  # ZeRO-Infinity: optimizer state and params on local NVMe


class Recompute(StrEnum):
    none = "none"
    selective = "selective"  # attention core recomputed (Korthikanti et al. 2022)
    selective_op = (
        "selective-op"  # torchtitan's per-op SAC: keeps every other matmul output + attention outputs
    )
    full = "full"  # every layer recomputed from its input


class Precision(StrEnum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"  # fp8 GEMMs (TransformerEngine / torchao); bf16 activations elsewhere, fp32 optimizer state
    fp32 = "fp32"


class Optimizer(StrEnum):
    adamw = "adamw"
    adamw_8bit = "adamw-8bit"
    sgd = "sgd"  # with momentum


class MoeDispatcher(StrEnum):
    """How MoE tokens reach their experts across the expert-parallel group."""

    alltoall = "alltoall"  # NCCL all-to-all: one copy per routed expert (Megatron's default dispatcher)
    deepep = "deepep"  # DeepEP: once per destination node over RDMA, NVLink fan-out inside the node
    hybridep = "hybridep"  # NVIDIA HybridEP (NVL8 and NVL72 domains): the same per-node deduplication

    @property
    def dedups_per_node(self) -> bool:
        return self is not MoeDispatcher.alltoall


def moe_a2a_overlap_runs(ep, pp, vpp, recompute_full, fp32):
    """Where Megatron-Core runs its MoE all-to-all overlap (``overlap_moe_expert_parallel_comm``): expert
    parallelism, an interleaved schedule when pipelined, no full recompute, a bf16/fp16 model (FP8 training keeps a
    bf16 model). Read from TransformerConfig.__post_init__ at core_v0.16.1. Comparisons and ``&`` only, so it runs
    on one plan's numbers and on the search's arrays alike."""
    return (ep > 1) & ((pp == 1) | (vpp > 1)) & (recompute_full == False) & (fp32 == False)  # noqa: E712


class Framework(StrEnum):
    megatron = "megatron"
    fsdp2 = "fsdp2"
    deepspeed = "deepspeed"


class Plan(Frozen):
    """How to train: parallel degrees, sharding, batch shape, recompute, precision, optimizer, framework."""

    tp: int = Field(default=1, ge=1, le=1024, description="tensor-parallel degree")
    pp: int = Field(default=1, ge=1, le=1024, description="pipeline-parallel degree")
    vpp: int = Field(default=1, ge=1, le=64, description="virtual pipeline chunks per rank (interleaving)")
    dp: int = Field(default=1, ge=1, le=1_048_576, description="data-parallel degree")
    cp: int = Field(default=1, ge=1, le=1024, description="context-parallel degree")
    ep: int = Field(default=1, ge=1, le=1024, description="expert-parallel degree (carved out of dp·cp)")
    sharding: Sharding = Sharding.fsdp_full
    shard_group_size: int | None = Field(default=None, ge=1, description="HSDP shard group (GPUs)")
    offload: Offload = Offload.none
    micro_batch: int = Field(default=1, ge=1, le=4096, description="sequences per micro-batch per rank")
    global_batch: int = Field(default=1, ge=1, le=16_777_216, description="sequences per optimizer step")
    seq_len: int = Field(default=4096, ge=1, le=4_194_304, description="tokens per sequence")
    recompute: Recompute = Recompute.none
    recompute_layers: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="with full recompute: layers per pipeline chunk that recompute (Megatron's --recompute-method "
        "block --recompute-num-layers; torchtitan's and fms-fsdp's every-n-th-layer checkpointing); the other "
        "layers keep their activations. None = every layer",
    )
    sequence_parallel: bool = False
    moe_dispatcher: MoeDispatcher = Field(
        default=MoeDispatcher.alltoall,
        description="MoE token dispatcher: alltoall (NCCL, one copy per routed expert), deepep or hybridep "
        "(Megatron's flex dispatcher: one copy per destination node over the scale-out network)",
    )
    moe_a2a_overlap: bool = Field(
        default=False,
        description="Megatron-Core's overlap_moe_expert_parallel_comm: the MoE all-to-alls of one micro-batch run "
        "behind another's compute (needs ep > 1, interleaving when pp > 1, no full recompute)",
    )
    flash_attention: bool = True
    attention_kernel: AttentionKernel = Field(
        default="auto",
        description="fused attention kernel: auto = the framework's own (SDPA's FlashAttention-2; cuDNN under "
        "Transformer Engine); fa1 = FlashAttention-1-class kernels (2022 to mid-2023); fa3 = FlashAttention-3 "
        "(Hopper); fa4 = FlashAttention-4 (Blackwell, also Hopper)",
    )
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adamw
    framework: Framework = Framework.fsdp2
    fused_kernels: bool | None = Field(
        default=None,
        description="fused norm/rotary/activation/cross-entropy kernels (torch.compile, TransformerEngine); "
        "None = the framework's default (Megatron and DeepSpeed fused, FSDP2 eager)",
    )
    fused_cross_entropy: bool = Field(
        default=False,
        description="fused linear cross-entropy (Liger-Kernel's FusedLinearCrossEntropy, Cut Cross-Entropy): the "
        "output GEMM and the loss run in token chunks, so the b·s·V logits are never held",
    )

    @property
    def uses_fused_kernels(self) -> bool:
        if self.fused_kernels is not None:
            return self.fused_kernels
        return self.framework is not Framework.fsdp2

    def layers_per_chunk(self, n_layers: int) -> int:
        """Layers of the largest pipeline chunk: ⌈n_layers / (pp·vpp)⌉."""
        return -(-n_layers // (self.pp * self.vpp))

    def recompute_share(self, n_layers: int) -> float:
        """Share of the layers that recompute fully: 1 for full recompute of every layer, 0 without full
        recompute, else recompute_layers / (layers per pipeline chunk)."""
        if self.recompute is not Recompute.full:
            return 0.0
        if self.recompute_layers is None:
            return 1.0
        return min(1.0, self.recompute_layers / max(1, self.layers_per_chunk(n_layers)))

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per step: global batch / (micro-batch · dp)."""
        return max(1, self.global_batch // (self.micro_batch * self.dp))

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def dp_shard_size(self) -> int:
        """How many data-parallel ranks one copy of the model states is split over."""
        if self.sharding is Sharding.fsdp_hybrid and self.shard_group_size:
            return min(self.shard_group_size, self.dp)
        return self.dp


class Violation(Frozen):
    """One reason a plan cannot run as given, with the fix."""

    field: str
    code: str
    message: str
    fix: str


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]


def plan_violations(
    plan: Plan,
    *,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    n_experts: int,
    gpus: int,
    gpus_per_node: int,
    nvlink_domain_size: int,
    allow_tp_across_nodes: bool = False,
    tied_embeddings: bool = False,
) -> list[Violation]:
    """Every violation of ``plan`` for this model and cluster, each with how to fix it (empty = valid).

    Ends with what the plan's framework refuses (``app.domain.capabilities``, the table the search and
    export share)."""
    out: list[Violation] = []

    def add(field: str, code: str, message: str, fix: str) -> None:
        out.append(Violation(field=field, code=code, message=message, fix=fix))

    if plan.gpus != gpus:
        add(
            "dp",
            "gpu-count",
            f"tp·pp·dp·cp = {plan.tp}·{plan.pp}·{plan.dp}·{plan.cp} = {plan.gpus} ≠ {gpus} GPUs",
            f"set dp = {gpus // plan.model_parallel}"
            if gpus % plan.model_parallel == 0
            else f"choose tp·pp·cp dividing {gpus}",
        )
    if n_heads % plan.tp:
        add(
            "tp",
            "heads-not-divisible",
            f"{n_heads} attention heads are not divisible by tp={plan.tp}",
            f"use tp in {_divisors(n_heads, min(n_heads, 64))}",
        )
    if n_kv_heads % plan.tp and plan.tp % n_kv_heads:
        add(
            "tp",
            "kv-heads-not-divisible",
            f"{n_kv_heads} KV heads neither divide nor are divisible by tp={plan.tp}",
            f"use tp dividing {n_kv_heads} or a multiple of it",
        )
    if plan.tp > nvlink_domain_size and not allow_tp_across_nodes:
        add(
            "tp",
            "tp-across-nodes",
            f"tp={plan.tp} spans beyond one NVLink domain of {nvlink_domain_size} GPUs; "
            "every layer's all-reduce would cross the scale-out network",
            f"keep tp ≤ {nvlink_domain_size}, or allow TP across nodes explicitly",
        )
    if plan.pp > n_layers:
        add(
            "pp",
            "pp-exceeds-layers",
            f"pp={plan.pp} exceeds the model's {n_layers} layers",
            f"use pp ≤ {n_layers}",
        )
    elif plan.pp * plan.vpp > n_layers:
        add(
            "vpp",
            "chunks-exceed-layers",
            f"pp·vpp = {plan.pp * plan.vpp} chunks exceed the model's {n_layers} layers",
            f"use vpp ≤ {n_layers // plan.pp}",
        )
    if plan.vpp > 1 and plan.pp == 1:
        add(
            "vpp",
            "vpp-without-pp",
            "interleaving (vpp > 1) needs pipeline parallelism",
            "set vpp = 1 or pp > 1",
        )
    per_step = plan.micro_batch * plan.dp
    if plan.global_batch % per_step:
        add(
            "global_batch",
            "batch-not-divisible",
            f"global batch {plan.global_batch} is not divisible by micro-batch·dp = {plan.micro_batch}·{plan.dp}"
            f" = {per_step}",
            f"use a global batch that is a multiple of {per_step}, e.g. {max(1, round(plan.global_batch / per_step)) * per_step}",
        )
    elif plan.vpp > 1 and plan.micro_batches % plan.pp:
        add(
            "global_batch",
            "interleave-microbatches",
            f"interleaved schedules need micro-batches per step ({plan.micro_batches}) to be a multiple of pp={plan.pp}",
            f"use a global batch that is a multiple of {per_step * plan.pp}",
        )
    if plan.seq_len % plan.cp:
        add(
            "cp",
            "seq-not-divisible",
            f"sequence length {plan.seq_len} is not divisible by cp={plan.cp}",
            "choose cp dividing the sequence length",
        )
    elif plan.cp > 1 and (plan.seq_len // plan.cp) % 2:
        add(
            "cp",
            "cp-load-balance",
            f"causal context parallelism splits each sequence into 2·cp chunks; "
            f"{plan.seq_len} is not divisible by 2·cp = {2 * plan.cp}",
            "choose cp with seq_len divisible by 2·cp",
        )
    if plan.recompute_layers is not None:
        per_chunk = plan.layers_per_chunk(n_layers)
        if plan.recompute is not Recompute.full:
            add(
                "recompute_layers",
                "recompute-layers-without-full",
                "recompute_layers counts the layers that recompute fully; it needs recompute = full",
                "set recompute = full, or leave recompute_layers empty",
            )
        elif plan.recompute_layers > per_chunk:
            add(
                "recompute_layers",
                "recompute-layers-exceed-chunk",
                f"recompute_layers={plan.recompute_layers} exceeds the {per_chunk} layers of a pipeline chunk "
                f"({n_layers} layers / pp·vpp = {plan.pp * plan.vpp})",
                f"use recompute_layers ≤ {per_chunk}, or leave it empty to recompute every layer",
            )
    if plan.sequence_parallel and plan.tp == 1:
        add(
            "sequence_parallel",
            "sp-without-tp",
            "sequence parallelism needs tp > 1",
            "turn it off or raise tp",
        )
    if plan.ep > 1:
        if n_experts == 0:
            add("ep", "ep-dense-model", "expert parallelism needs an MoE model", "set ep = 1")
        elif n_experts % plan.ep:
            add(
                "ep",
                "experts-not-divisible",
                f"{n_experts} experts are not divisible by ep={plan.ep}",
                f"use ep in {_divisors(n_experts, min(n_experts, 256))}",
            )
        if (plan.dp * plan.cp) % plan.ep:
            add(
                "ep",
                "ep-not-in-dp",
                f"ep={plan.ep} must divide dp·cp = {plan.dp * plan.cp}",
                "choose ep dividing dp·cp",
            )
    if plan.sharding is Sharding.fsdp_hybrid:
        group = plan.shard_group_size
        if group is None:
            add(
                "shard_group_size",
                "hsdp-group",
                "HSDP needs a shard group size",
                f"e.g. {min(plan.dp, gpus_per_node)}",
            )
        elif plan.dp % group:
            add(
                "shard_group_size",
                "hsdp-group",
                f"shard group {group} does not divide dp={plan.dp}",
                f"use a divisor of {plan.dp}",
            )
    elif plan.shard_group_size is not None:
        add(
            "shard_group_size",
            "group-without-hsdp",
            "a shard group size only applies to fsdp-hybrid",
            "remove it or choose sharding fsdp-hybrid",
        )
    fw = plan.framework
    if fw is Framework.megatron and plan.sharding not in {
        Sharding.ddp,
        Sharding.megatron_distopt,
        Sharding.fsdp_full,
    }:
        add(
            "sharding",
            "framework-sharding",
            f"Megatron-LM does not offer {plan.sharding.value}",
            "use ddp, megatron-distopt or fsdp-full (Megatron FSDP)",
        )
    if fw is Framework.deepspeed and plan.sharding not in {
        Sharding.ddp,
        Sharding.zero1,
        Sharding.zero2,
        Sharding.zero3,
    }:
        add(
            "sharding",
            "framework-sharding",
            f"DeepSpeed does not offer {plan.sharding.value}",
            "use ddp, zero1, zero2 or zero3",
        )
    if fw is Framework.fsdp2 and plan.sharding in {
        Sharding.zero1,
        Sharding.zero2,
        Sharding.zero3,
        Sharding.megatron_distopt,
    }:
        add(
            "sharding",
            "framework-sharding",
            f"FSDP2 does not offer {plan.sharding.value}",
            "use ddp, fsdp-full, fsdp-grad-op or fsdp-hybrid",
        )
    if plan.offload is not Offload.none:
        if fw is Framework.megatron and plan.offload is not Offload.optimizer_cpu:
            add(
                "offload",
                "framework-offload",
                "Megatron-LM offloads only the optimizer to CPU",
                "use optimizer-cpu",
            )
        if plan.offload in {Offload.params_cpu, Offload.nvme} and not plan.sharding.shards_params:
            add(
                "offload",
                "offload-needs-sharding",
                f"{plan.offload.value} offload needs fully sharded parameters",
                "use zero3 or fsdp-full",
            )
        if plan.offload is Offload.nvme and fw is not Framework.deepspeed:
            add(
                "offload",
                "framework-offload",
                "NVMe offload is DeepSpeed ZeRO-Infinity only",
                "use framework deepspeed",
            )
    if not out:
        from app.domain.estimator.capabilities import capability_violations

        out.extend(capability_violations(plan, tied_embeddings=tied_embeddings))
    return out
