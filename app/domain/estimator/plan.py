"""The parallelism and training plan, and its validation.

A plan is everything the user chooses about *how* to train: parallel degrees (tp, pp, vpp, dp, cp, ep),
the data-parallel sharding strategy, offload, batch shape, recompute, precision, optimizer and the framework
profile whose conventions (bytes per parameter, runtime buffers) the estimate follows.

:func:`plan_violations` explains every problem and how to fix it (the rules themselves are one table in
:mod:`app.domain.estimator.rules`, shared with the search); nothing here raises on a bad plan.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator

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
    # NVFP4 GEMMs (Transformer Engine's NVFP4BlockScaling recipe, Blackwell): the transformer layers' linears in
    # block-scaled FP4, attention, the output head and the optimizer as in bf16
    nvfp4 = "nvfp4"
    fp32 = "fp32"

    @property
    def quantized_gemms(self) -> bool:
        """The linears' GEMMs run below 16 bits (FP8 or NVFP4): the output head, attention and everything else stay
        16-bit, the GEMM inputs are cast (compute.cast_bytes) and the GEMMs run at their own fraction of their own
        peak."""
        return self in (Precision.fp8, Precision.nvfp4)


class Fp8Recipe(StrEnum):
    """How an FP8 plan scales its linears' FP8 tensors (Transformer Engine's recipes; torchao's under FSDP2).
    ``auto``: the framework's default (:func:`default_fp8_recipe`). What each costs is
    :data:`app.domain.estimator.casts.FP8_CAST`; where each runs, :func:`app.domain.estimator.hardware.
    fp8_recipe_problem` (GPU) and the framework capability table (app/domain/estimator/capabilities.py)."""

    auto = "auto"
    delayed = "delayed"  # one scale per tensor from the amax history (TE DelayedScaling)
    tensorwise = "tensorwise"  # one scale per tensor from its current amax (TE Float8CurrentScaling, torchao)
    rowwise = "rowwise"  # one scale per row, separate column-wise casts for the weight gradient (torchao)
    mxfp8 = "mxfp8"  # one E8M0 scale per 32 values (TE MXFP8BlockScaling, torchao MX; Blackwell)
    blockwise = "blockwise"  # one FP32 scale per 1x128 / 128x128 block (TE Float8BlockScaling, DeepSeek-V3's)

    @property
    def code(self) -> int:
        """The recipe as an index (the plan rules' Facts): its position in the enum."""
        return list(Fp8Recipe).index(self)


def default_fp8_recipe(framework: Framework) -> Fp8Recipe:
    """The recipe an FP8 plan runs when it names none: Transformer Engine's DelayedScaling (its default recipe, and
    Megatron-LM's --fp8-recipe default) under Megatron and DeepSpeed; under FSDP2 torchao's rowwise recipe, the one
    torchtitan 0.3.0's Float8LinearConverter runs by default (source TORCHTITAN-FLOAT8)."""
    return Fp8Recipe.rowwise if framework is Framework.fsdp2 else Fp8Recipe.delayed


def resolve_fp8_recipe(recipe: Fp8Recipe, framework: Framework) -> Fp8Recipe:
    """``recipe`` as ``framework`` runs it: ``auto`` becomes the framework's default (:func:`default_fp8_recipe`)."""
    return default_fp8_recipe(framework) if recipe is Fp8Recipe.auto else recipe


class Optimizer(StrEnum):
    adamw = "adamw"
    adamw_8bit = "adamw-8bit"
    sgd = "sgd"  # with momentum


class RecomputeModule(StrEnum):
    """Megatron-Core's ``--recompute-modules`` under selective recompute (TransformerConfig, core_v0.16.1):
    core_attn and the layer blocks are checkpointed (input kept); layernorm, mla_up_proj and moe_act discard
    their outputs and re-run them in backward."""

    core_attn = "core_attn"  # the attention core (Megatron's default)
    layernorm = "layernorm"  # input_layernorm and pre_mlp_layernorm outputs
    mla_up_proj = "mla_up_proj"  # MLA's q/kv up-projections and RoPE
    mlp = "mlp"  # the dense MLP block
    moe_act = "moe_act"  # the experts' activation function
    moe = "moe"  # the whole MoE layer (its all-to-alls run again)
    shared_experts = "shared_experts"


DEFAULT_RECOMPUTE_MODULES = (RecomputeModule.core_attn,)


class MoeDispatcher(StrEnum):
    """How MoE tokens reach their experts across the expert-parallel group."""

    alltoall = "alltoall"  # NCCL all-to-all: one copy per routed expert (Megatron's default dispatcher)
    deepep = "deepep"  # DeepEP: once per destination node over RDMA, NVLink fan-out inside the node
    hybridep = "hybridep"  # NVIDIA HybridEP: the same per-node deduplication inside NVL72 domains (not across NVL8 nodes)

    @property
    def dedups_per_node(self) -> bool:
        return self is not MoeDispatcher.alltoall

    @property
    def dedup_kind(self) -> int:
        """How the dispatcher's inter-node path deduplicates (:func:`app.domain.estimator.network.dispatch_dedups`):
        0 never (NCCL all-to-all), 1 always (DeepEP), 2 only in NVLink domains above 8 GPUs (HybridEP)."""
        return {MoeDispatcher.alltoall: 0, MoeDispatcher.deepep: 1, MoeDispatcher.hybridep: 2}[self]


class CPCommType(StrEnum):
    """How context parallelism moves keys and values between its ranks (Transformer Engine's ``cp_comm_type``,
    Megatron-Core's ``--cp-comm-type``)."""

    # a ring: each step attends one received K/V block while the next is sent (TE's default)
    p2p = "p2p"
    # K/V all-gathered once; each query chunk attends its whole prefix (Llama 3's CP)
    all_gather = "all_gather"


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


def fused_kernels_on(framework: Framework, fused_kernels: bool | None) -> bool:
    """Fused kernels (torch.compile, Transformer Engine) run: as asked, else the framework's default (Megatron and
    DeepSpeed fused, FSDP2 eager). One rule for a plan (:attr:`Plan.uses_fused_kernels`) and the search's spec."""
    return framework is not Framework.fsdp2 if fused_kernels is None else fused_kernels


def default_expert_tp(framework: Framework, tp):  # noqa: ANN001, ANN201 - int or numpy array alike
    """The routed experts' tensor-parallel degree when a plan names none: tp for Megatron (its
    expert_tensor_parallel_size default) and DeepSpeed-MoE (its experts follow the model's TP), 1 for FSDP2 —
    torchtitan 0.3.0 has no expert TP: its EP borrows ranks from FSDP and TP (``efsdp = dp_shard·cp·tp / ep``,
    torchtitan/config/configs.py ParallelismConfig), every expert whole on one GPU. One rule for a plan
    (:attr:`Plan.etp`) and the search's grid."""
    return tp * 0 + 1 if framework is Framework.fsdp2 else tp


def folded_text(tp: int, expert_tp: int | None) -> str:
    """ " (expert tp e)" for a plan that sets its experts' TP to something else than tp (MoE parallel folding),
    else "": what every plan line appends to its ep."""
    return f" (expert tp {expert_tp})" if expert_tp is not None and expert_tp != tp else ""


def folds_experts(framework: Framework) -> bool:
    """Whether the framework runs the routed experts at TP 1 under a larger attention TP when asked (MoE parallel
    folding, ``expert_tensor_parallel_size`` 1): Megatron. DeepSpeed-MoE's experts follow the model's TP and
    torchtitan's are always whole (:func:`default_expert_tp`), so the search has only one layout to try there."""
    return framework is Framework.megatron


class Plan(Frozen):
    """How to train: parallel degrees, sharding, batch shape, recompute, precision, optimizer, framework."""

    tp: int = Field(default=1, ge=1, le=1024, description="tensor-parallel degree")
    pp: int = Field(default=1, ge=1, le=1024, description="pipeline-parallel degree")
    vpp: int = Field(default=1, ge=1, le=64, description="virtual pipeline chunks per rank (interleaving)")
    dp: int = Field(default=1, ge=1, le=1_048_576, description="data-parallel degree")
    cp: int = Field(default=1, ge=1, le=1024, description="context-parallel degree")
    ep: int = Field(
        default=1, ge=1, le=1024,
        description="expert-parallel degree: ep × expert_tp ranks hold one copy of the experts, carved out of the "
        "tp·dp·cp ranks of a pipeline stage (with expert_tp = tp: out of dp·cp)",
    )  # fmt: skip
    expert_tp: int | None = Field(
        default=None, ge=1, le=1024,
        description="tensor-parallel degree of the routed experts (Megatron's --expert-tensor-parallel-size). "
        "None = the framework's: tp for Megatron and DeepSpeed, 1 for FSDP2 (torchtitan has no expert TP); 1 = MoE "
        "parallel folding: "
        "each expert whole on one GPU and the expert-parallel group free to span the tensor-parallel ranks, as "
        "NVIDIA's performance recipes run MoE models",
    )  # fmt: skip
    mtp_layers: int = Field(
        default=0, ge=0, le=8,
        description="multi-token prediction modules trained (Megatron-Core's --mtp-num-layers; DeepSeek-V3 trains "
        "1): each is one more transformer layer of the model's last kind, a 2h→h projection and one more pass of the "
        "shared output head and loss, all on the last pipeline stage",
    )  # fmt: skip
    pipeline_layout: str | None = Field(
        default=None, max_length=512,
        description="Megatron-Core's --pipeline-model-parallel-layout: the layers of each virtual pipeline stage "
        "(E embedding, t transformer layer, m MTP layer, L loss; | ends a stage; (…)*n repeats), e.g. "
        "'Et|(tt|)*30mL'; None = capplan's even split (the remainder to the middle stages)",
    )  # fmt: skip
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
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None,
        max_length=len(RecomputeModule),
        description="with selective recompute: Megatron's --recompute-modules (core_attn, layernorm, mla_up_proj, "
        "mlp, moe_act, moe, shared_experts); None = the attention core only",
    )
    sequence_parallel: bool = False
    cp_comm_type: CPCommType = Field(
        default=CPCommType.p2p,
        description="with cp > 1, how K/V move between the context-parallel ranks: p2p (a ring, Transformer "
        "Engine's and Megatron-Core's default; torchtitan always runs PyTorch's ring) or all_gather (Transformer "
        "Engine's cp_comm_type 'all_gather', as Meta trained Llama 3: K/V all-gathered in the open, no ring; "
        "Megatron only)",
    )
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
    moe_capacity_factor: float | None = Field(
        default=None,
        gt=0,
        le=64,
        description="MoE token dropping: each expert takes at most this factor × its mean share of a rank's routed "
        "tokens and drops the rest (Megatron's --moe-expert-capacity-factor; DeepSpeed-MoE's capacity_factor). "
        "None = dropless",
    )
    moe_pad_to_capacity: bool = Field(
        default=False,
        description="with a capacity factor: every expert's input padded to the capacity (Megatron's "
        "--moe-pad-expert-input-to-capacity), so dispatch and expert GEMMs always carry capacity × the mean",
    )
    tp_comm_overlap: bool | None = Field(
        default=None,
        description="tensor-parallel collectives split into chunks that run behind the neighbouring GEMMs: "
        "Megatron's --tp-comm-overlap (Transformer Engine userbuffers), torchtitan's async TP; both need sequence "
        "parallelism. None = the framework's default: on for Megatron (NVIDIA's NeMo / Megatron-Bridge "
        "performance recipes turn it on wherever tp > 1), off for FSDP2 and DeepSpeed",
    )
    fp8_attention: bool = Field(
        default=False,
        description="the attention's two batched matmuls and their backward in FP8: Transformer Engine's "
        "fp8_dot_product_attention under an FP8 or NVFP4 recipe (megatron-core's TransformerConfig field, which NeMo / "
        "Megatron-Bridge recipes set and Megatron-LM's command line has no flag for; NVIDIA's "
        "MLPerf single-node Llama 3.1 8B configurations and its DeepSeek-V3 MXFP8 recipe on GB300 set it). Megatron "
        "only; needs precision fp8 or nvfp4",
    )
    fp8_recipe: Fp8Recipe = Field(
        default=Fp8Recipe.auto,
        description="how FP8 tensors are scaled (precision fp8 only): delayed (Transformer Engine's DelayedScaling, "
        "its default), tensorwise (current per-tensor scaling: TE's Float8CurrentScaling, NVIDIA's 'FP8-CS'; "
        "torchao's default), rowwise (torchao; torchtitan 0.3.0's default), mxfp8 (MXFP8BlockScaling, 'FP8-MX'; "
        "Blackwell), blockwise (Float8BlockScaling, DeepSeek-V3's 1x128 / 128x128 blocks; Hopper and Blackwell). "
        "auto = the framework's default: delayed for Megatron and DeepSpeed, rowwise for FSDP2 (torchtitan 0.3.0)",
    )
    nvfp4_rht: bool = Field(
        default=True,
        description="NVFP4 plans: Transformer Engine's random Hadamard transform of the weight gradient's operands "
        "(NVFP4BlockScaling's default; NVTE_NVFP4_DISABLE_RHT=1 turns it off, as NVIDIA's MLPerf Training v5.1 "
        "configurations do). It costs a second quantization pass over each input and output gradient",
    )
    repeat_kv: bool = Field(
        default=False,
        description="PyTorch stacks: K/V heads repeated to every query head before the attention kernel "
        "(torchtitan until 2026-01: repeat_kv, then SDPA; since then enable_gqa): context parallelism's ring "
        "then moves the repeated K/V",
    )
    fsdp_flat_params: bool = Field(
        default=False,
        description="PyTorch FSDP1 (FullyShardedDataParallel), FairScale and Composer: each unit's parameters are "
        "views of one flat buffer that the all-gather fills in place; FSDP2 (fully_shard, torchtitan) shards every "
        "parameter on its own and copies each gathered parameter out of the all-gather buffer on the compute stream "
        "(read and write, 4 B a 16-bit parameter per gather)",
    )
    zero_init: bool = Field(
        default=True,
        description="DeepSpeed ZeRO-3: the model is created under deepspeed.zero.Init, each parameter partitioned "
        "as it is made (Hugging Face Trainer / Accelerate with a ZeRO-3 config, Megatron-DeepSpeed). Off: a model "
        "built whole (from_pretrained without the DeepSpeed integration) is moved to the GPU whole by "
        "deepspeed.initialize before ZeRO-3 partitions it, so every GPU holds the full 16-bit model at start-up. "
        "No effect elsewhere",
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
    fused_loss: bool | None = Field(
        default=None,
        description="the cross-entropy as one fused or compiled kernel on the 16-bit logits (Transformer Engine's "
        "Triton cross-entropy under Megatron, torch.compile of the loss) instead of an fp32 log-softmax and its "
        "gradients (eager PyTorch; Megatron's default vocab-parallel loss); None = as fused_kernels (torchtitan "
        "compiled only the model until 2025-04, the loss since)",
    )
    fused_cross_entropy: bool = Field(
        default=False,
        description="fused linear cross-entropy (Liger-Kernel's FusedLinearCrossEntropy, Cut Cross-Entropy): the "
        "output GEMM and the loss run in token chunks, so the b·s·V logits are never held",
    )
    z_loss: bool = Field(
        default=False,
        description="the loss adds the z-loss, (log Σ exp logits)² times a small multiplier (PaLM, OLMo): free inside a "
        "fused or compiled loss; an eager loss runs logsumexp and its gradient as extra passes over the fp32 logits "
        "(60 B per logit). Model code: none of the exported frameworks has an option for it",
    )
    fused_swiglu: bool = Field(
        default=False,
        description="PyTorch stacks: SwiGLU as one fused kernel that saves only the gate and up outputs and "
        "writes their gradients in place (Liger-Kernel's LigerSiLUMulFunction); Megatron's is always fused",
    )
    grad_accum_fp32: bool = Field(
        default=False,
        description="DeepSpeed in bf16: gradients accumulated in fp32 (data_types.grad_accum_dtype = fp32, "
        "DeepSpeed's default from 0.8 to mid-2025); with ZeRO-1 this runs BF16_Optimizer, which keeps a whole fp32 "
        "gradient buffer beside the bf16 gradients",
    )
    grad_reduce_bf16: bool = Field(
        default=False,
        description="Megatron: gradients accumulated and reduced in bf16 (grad_reduce_in_fp32=False, as NVIDIA's "
        "NeMo / Megatron-Bridge performance recipes set it) instead of fp32 main gradients",
    )

    @field_validator("recompute_modules")
    @classmethod
    def _canonical_modules(
        cls, value: tuple[RecomputeModule, ...] | None
    ) -> tuple[RecomputeModule, ...] | None:
        """One spelling per set: each module once, in the enum's order."""
        if value is None:
            return None
        return tuple(m for m in RecomputeModule if m in set(value))

    @property
    def recompute_module_set(self) -> frozenset[RecomputeModule]:
        """The modules selective recompute re-runs (empty unless recompute is selective)."""
        if self.recompute is not Recompute.selective:
            return frozenset()
        return frozenset(
            DEFAULT_RECOMPUTE_MODULES if self.recompute_modules is None else self.recompute_modules
        )

    @property
    def uses_fused_kernels(self) -> bool:
        return fused_kernels_on(self.framework, self.fused_kernels)

    @property
    def fp8_recipe_used(self) -> Fp8Recipe:
        """The FP8 recipe the plan runs: as asked, else the framework's default (:func:`default_fp8_recipe`)."""
        return self.fp8_recipe_on(self.framework)

    def fp8_recipe_on(self, framework: Framework) -> Fp8Recipe:
        """The FP8 recipe the plan runs under ``framework`` (an export for another framework than the plan's)."""
        return resolve_fp8_recipe(self.fp8_recipe, framework)

    @property
    def asks_tp_comm_overlap(self) -> bool:
        """:attr:`tp_comm_overlap`, else the framework's default (on for Megatron)."""
        return self.framework is Framework.megatron if self.tp_comm_overlap is None else self.tp_comm_overlap

    @property
    def cp_gathers_kv(self) -> bool:
        """Context parallelism by K/V all-gather (Transformer Engine's ``all_gather``), not a ring: cp > 1 and
        asked; only Megatron runs it (the capability table refuses it elsewhere)."""
        return self.cp > 1 and self.cp_comm_type is CPCommType.all_gather

    @property
    def uses_tp_comm_overlap(self) -> bool:
        """TP communication overlap runs: asked (:attr:`asks_tp_comm_overlap`) and possible in the stack —
        Megatron (Transformer Engine's userbuffers), FSDP2 only with torch.compile (torchtitan's async TP is a
        compiler pass); DeepSpeed has none. It also needs sequence parallelism, which the step time checks
        (:func:`app.domain.estimator.evaluate.rank_time`) and the exports state."""
        if self.framework is Framework.deepspeed:
            return False
        if self.framework is Framework.fsdp2:
            return self.asks_tp_comm_overlap and self.uses_fused_kernels
        return self.asks_tp_comm_overlap

    @property
    def uses_fused_loss(self) -> bool:
        """The loss runs fused (or compiled): :attr:`fused_loss`, else :attr:`uses_fused_kernels`."""
        return self.uses_fused_kernels if self.fused_loss is None else self.fused_loss

    @property
    def eager_z_loss(self) -> bool:
        """The z-loss runs as eager passes over the fp32 logits: asked for, and neither a fused or compiled loss nor a
        fused linear cross-entropy computes it in its own pass."""
        return self.z_loss and not self.uses_fused_loss and not self.fused_cross_entropy

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
    def chunk_counts(self) -> tuple[int, ...] | None:
        """Transformer layers per virtual stage of :attr:`pipeline_layout` (None: the even split)."""
        from app.domain.estimator.pipeline import layout_counts

        return layout_counts(self.pipeline_layout) if self.pipeline_layout else None

    @property
    def etp(self) -> int:
        """The routed experts' tensor-parallel degree: :attr:`expert_tp`, else the framework's: tp for Megatron
        (its default) and DeepSpeed, 1 for FSDP2 — torchtitan 0.3.0 has no expert TP: its EP borrows ranks from
        FSDP and TP (``efsdp = dp_shard·cp·tp / ep``), the experts whole on each GPU."""
        return default_expert_tp(self.framework, self.tp) if self.expert_tp is None else self.expert_tp

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
    mla: bool = False,
    capabilities: bool = True,
) -> list[Violation]:
    """Every violation of ``plan`` for this model and cluster, each with how to fix it (empty = valid).

    The rules are one table (:mod:`app.domain.estimator.rules`), the same the search evaluates on its grid; the
    framework's refusals (``capabilities``) are reported once no plan rule is broken, each naming the nearest
    plan the framework runs (``capabilities`` False: not checked, for a published run on a stack the table does not
    describe)."""
    from app.domain.estimator.rules import Context, violations

    context = Context(
        gpus=gpus, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, n_experts=n_experts,
        gpus_per_node=gpus_per_node, nvlink_domain=nvlink_domain_size, allow_tp_across_nodes=allow_tp_across_nodes,
        tied_embeddings=tied_embeddings, mla=mla, capabilities=capabilities,
    )  # fmt: skip
    return violations(plan, context)
