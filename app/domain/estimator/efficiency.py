"""Efficiency and runtime-memory defaults of the estimator (data/efficiency.toml), per accelerator.

These are the only tuning constants of the step-time and memory model. They are the same for every run on
a given accelerator; calibration from benchmark runs replaces them per cluster (with provenance).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.domain.provenance import CatalogEntry, Frozen

EFFICIENCY_FILE = "efficiency.toml"

Fraction = Field(gt=0, le=1)


class AcceleratorEfficiency(CatalogEntry):
    """Fractions of the catalog peaks one accelerator reaches in practice; slug == accelerator slug."""

    gemm_efficiency: float = Fraction
    gemm_overhead_us: float = Field(ge=0, le=1000)
    gemm_tile_fixed_k: float = Field(
        default=0.0, ge=0, le=4096,
        description="per-tile fixed cost (prologue, epilogue) of a GEMM in units of its reduction length k: a GEMM "
        "with reduction k runs at k/(k + this) of its rate",
    )  # fmt: skip
    attention_efficiency: float = Fraction
    fa3_attention_efficiency: float | None = Field(
        default=None, gt=0, le=0.95,
        description="FlashAttention-3 (Hopper) / -4 (Blackwell) forward+backward, fraction of peak: the asynchronous "
        "kernels' own rate, not a multiple of the FlashAttention-2-class rate (None: they do not run here)",
    )  # fmt: skip
    hbm_efficiency: float = Fraction
    scale_up_efficiency: float = Fraction
    fp8_attention_speedup: float = Field(
        default=1.0, ge=1.0, le=3.0,
        description="forward+backward fused attention in FP8 (Transformer Engine's fp8_dot_product_attention, cuDNN) "
        "against the same kernel in BF16: the time ratio at equal work (1: no gain measured here)",
    )  # fmt: skip


class NetworkEfficiency(CatalogEntry):
    """Collective bus-bandwidth efficiency and per-hop latency for one fabric kind (slug == fabric kind)."""

    efficiency: float = Fraction
    hop_latency_us: float = Field(ge=0, le=10_000)


class RuntimeMemory(CatalogEntry):
    """Memory outside tensors: CUDA context, NCCL buffers per communicator, workspaces, fragmentation."""

    cuda_context_bytes: int = Field(ge=0)
    nccl_bytes_per_communicator: int = Field(ge=0)
    nccl_bytes_per_communicator_scale_out: int = Field(ge=0)
    workspace_bytes: int = Field(ge=0)
    fragmentation_fraction: float = Field(ge=0, le=1)
    pcie_gb_per_s: dict[str, float] = Field(description="host↔GPU GB/s per direction by PCIe generation")
    host_link_gb_per_s_without_pcie: float = Field(gt=0)
    cpu_optimizer_gb_per_s: float = Field(gt=0)
    nvme_gb_per_s: float = Field(gt=0)

    def host_link_gb_per_s(self, pcie_generation: int | None) -> float:
        if pcie_generation is None:
            return self.host_link_gb_per_s_without_pcie
        return self.pcie_gb_per_s.get(str(pcie_generation), min(self.pcie_gb_per_s.values()))


class StackProfile(CatalogEntry):
    """How one software stack runs a plan (slug = the plan's framework: megatron, fsdp2, deepspeed).

    ``tp_overlap``: fraction of tensor-parallel collectives hidden behind GEMMs (Megatron-Core + Transformer
    Engine's userbuffers overlap; 0 for stacks that issue TP collectives on the critical path).
    ``dp_overlap``: fraction of the overlappable data-parallel traffic (FSDP/ZeRO-3 parameter gathers, gradient
    reduce-scatter or all-reduce) that the stack actually hides behind compute; the rest is exposed.
    ``ep_overlap``: fraction of the MoE token all-to-alls (dispatch and combine) hidden behind compute.
    """

    tp_overlap: float = Field(ge=0, le=1)
    dp_overlap: float = Field(ge=0, le=1)
    ep_overlap: float = Field(default=0.0, ge=0, le=1)
    attention_kernel: Literal["fa2", "cudnn"] = Field(
        default="fa2", description="fused attention the stack runs: FlashAttention-2 (SDPA) or cuDNN (TE)"
    )
    pp_overlap_interleaved: bool = Field(
        default=False,
        description="the interleaved pipeline schedule posts its sends and receives asynchronously and waits "
        "only when the next chunk needs them (Megatron-Core's overlap_p2p_comm); False = blocking transfers",
    )
    prefetch_bucket_params: float | None = Field(
        default=None,
        gt=0,
        description="sharded parameters: elements fetched ahead of their use (DeepSpeed ZeRO-3's "
        "stage3_prefetch_bucket_size); None = the whole next unit (FSDP)",
    )
    dp_bucket_params: float | None = Field(
        default=None,
        gt=0,
        description="data-parallel gradient reduction: elements a bucket holds, each bucket a collective of its own "
        "(DeepSpeed ZeRO-1/2's reduce_bucket_size); None = by bytes (dp_bucket_bytes) or, without either, "
        "Megatron-Core's max(4·10⁷, 10⁶·dp) elements, which grows with the data-parallel group",
    )
    dp_bucket_bytes: float | None = Field(
        default=None,
        gt=0,
        description="data-parallel gradient reduction: bytes of gradients a bucket holds (PyTorch DDP's "
        "bucket_cap_mb)",
    )
    live_params: float | None = Field(
        default=None,
        gt=0,
        description="sharded parameters: elements a rank keeps gathered between uses (DeepSpeed ZeRO-3's "
        "stage3_max_live_parameters and stage3_max_reuse_distance) beside the module in use, which it fetches and "
        "releases one module at a time; None = FSDP's units (one transformer block, and the next prefetched)",
    )
    pp_serial_p2p: bool = Field(
        default=False,
        description="each pipeline stage sends and receives one transfer after another (DeepSpeed's pipeline "
        "engine: four blocking transfers per micro-batch on an inner stage); False = a send paired with a receive",
    )
    pp_grad_reduce_after_schedule: bool = Field(
        default=False,
        description="with pipeline parallelism, gradients are reduced over data parallelism only after the last "
        "micro-batch's backward, on the critical path (DeepSpeed's pipeline engine turns the backward all-reduce "
        "off and runs ReduceGrads at the end of its TrainSchedule); False = during the last backward",
    )
    param_gather_in_step: bool = Field(
        default=False,
        description="a sharded optimizer all-gathers the updated 16-bit parameters inside its step, before the "
        "next forward can start (DeepSpeed ZeRO-1/2 and its BF16 optimizer); False = overlapped with the next "
        "step's first forward (Megatron's distributed optimizer with overlap_param_gather)",
    )


class ScaleTerms(CatalogEntry):
    """Terms shared by every stack and accelerator (slug = "scale-terms").

    ``straggler_cv``: relative per-rank jitter of a step; a synchronous step waits for the slowest of N ranks,
    ≈ t·cv·√(2 ln N) longer (expected maximum of N Gaussians). ``power_exponent``: sustained clock under a
    power cap ∝ (P/TDP)^γ. ``fp8_gemm_ratio``: an FP8 GEMM's fraction of the FP8 peak relative to a BF16 GEMM's
    fraction of the BF16 peak; ``fp4_gemm_ratio`` the same for NVFP4 GEMMs against the FP4 peak. ``comm_slowdown``: compute stretched by this fraction of the communication it
    hides (NCCL kernels occupy SMs and HBM bandwidth). ``cudnn_attention_ratio``: cuDNN fused attention's rate
    relative to FlashAttention-2 on Hopper and Blackwell. ``attention_half_length``: the attention block length
    (tokens) at which a fused attention kernel reaches half its long-sequence rate. ``fa1_attention_ratio``:
    FlashAttention-1-class kernels' rate relative to FlashAttention-2. ``kernel_overhead_us``: what one
    memory-bound kernel (norm, residual add, rotary, activation, cast) costs beyond its bytes over HBM bandwidth.
    ``ring_attention_ratio``: the attention kernel's rate inside a context-parallel ring step relative to the same
    kernel's on the same block outside a ring (every kernel class; 1 = no loss).
    """

    straggler_cv: float = Field(ge=0, le=0.5)
    power_exponent: float = Field(ge=0, le=2)
    fp8_gemm_ratio: float = Field(gt=0, le=1)
    fp4_gemm_ratio: float = Field(
        default=0.65,
        gt=0,
        le=1,
        description="an NVFP4 GEMM's fraction of the FP4 peak relative to a BF16 GEMM's fraction of the BF16 peak",
    )
    comm_slowdown: float = Field(ge=0, le=1)
    cudnn_attention_ratio: float = Field(default=1.0, ge=1, le=3)
    attention_half_length: float = Field(default=0.0, ge=0, le=65536)
    fa1_attention_ratio: float = Field(default=1.0, gt=0, le=1)
    ring_attention_ratio: float = Field(
        default=1.0,
        gt=0,
        le=1.5,
        description="a context-parallel ring step's attention rate relative to the single kernel's on the same block",
    )
    kernel_overhead_us: float = Field(
        default=0.0,
        ge=0,
        le=100,
        description="fixed cost of one memory-bound kernel beyond its bytes (launch gap, ramp and tail), µs",
    )


class EfficiencyCatalog(Frozen):
    accelerators: tuple[AcceleratorEfficiency, ...]
    networks: tuple[NetworkEfficiency, ...]
    runtime: RuntimeMemory
    stacks: tuple[StackProfile, ...]
    scale: ScaleTerms

    def for_stack(self, framework: str) -> StackProfile:
        for entry in self.stacks:
            if entry.slug == framework:
                return entry
        raise KeyError(f"no stack profile for framework {framework!r}; add it to data/{EFFICIENCY_FILE}")

    def for_accelerator(self, slug: str) -> AcceleratorEfficiency:
        for entry in self.accelerators:
            if entry.slug == slug:
                return entry
        raise KeyError(f"no efficiency defaults for accelerator {slug!r}; add them to data/{EFFICIENCY_FILE}")

    def for_network(self, kind: str) -> NetworkEfficiency:
        for entry in self.networks:
            if entry.slug == kind:
                return entry
        raise KeyError(f"no efficiency defaults for fabric kind {kind!r}; add them to data/{EFFICIENCY_FILE}")
