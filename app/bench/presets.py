"""Benchmark presets: named functions ``<model>_<parallelism>_<hardware>`` returning a :class:`Preset`.

Torch-free (the CLI imports this to list presets and build launch commands). A preset says which catalog
architecture to train (scaled down to ``layers`` when the full model does not fit the machine — the
scaling is recorded in the result), the batch shape and recompute mode, how many warm-up and measured
steps, the device and the catalog accelerator the predictions are made for, and the GEMM and collective
sweeps that feed calibration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Device = Literal["cpu", "cuda"]

TINY_ARCH: dict[str, Any] = dict(
    slug="tiny-llama",
    name="tiny llama (bench CPU preset)",
    source="CAPPLAN-FIT",
    as_of="2026-12",
    n_layers=2,
    hidden_size=128,
    n_heads=4,
    n_kv_heads=2,
    head_dim=32,
    ffn_hidden_size=344,
    activation="swiglu",
    vocab_size=1031,  # odd: embedding and head shard unevenly over 2 ranks (FSDP2 padding is exercised)
    tied_embeddings=False,
    position="rotary",
    max_context=512,
    norm="rmsnorm",
)


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    model: str  # catalog architecture slug, or "tiny" for TINY_ARCH
    device: Device = "cuda"
    accelerator: str | None = None  # catalog slug the predictions are made for (None: no time predictions)
    nproc: int = 1  # default processes per node
    nodes: int = 1  # nodes the preset is meant for (multi-node: `capplan bench launch-cmd --nodes`)
    layers: int | None = None  # scale the model to this many layers (None: full model)
    micro_batch: int = 1
    seq_len: int = 2048
    recompute: Literal["none", "selective", "full"] = "none"
    warmup_steps: int = 2
    steps: int = 5
    gemm_sizes: tuple[tuple[int, int, int], ...] = ()
    gemm_dtypes: tuple[str, ...] = ("bf16",)
    collective_sizes: tuple[int, ...] = ()  # bytes
    collective_ops: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
    arch_overrides: dict[str, Any] = field(default_factory=dict)

    def as_config(self) -> dict[str, Any]:
        data = asdict(self)
        data["gemm_sizes"] = [list(s) for s in self.gemm_sizes]
        return data


def _square(*sizes: int) -> tuple[tuple[int, int, int], ...]:
    return tuple((s, s, s) for s in sizes)


# GEMM shapes of real layers too (tokens × hidden → FFN), so the fit sees the sizes training runs.
GPU_GEMMS = _square(256, 512, 1024, 2048, 4096, 8192, 16384) + (
    (8192, 14336, 4096),
    (8192, 4096, 14336),
    (8192, 6144, 4096),
    (16384, 28672, 8192),
)
GPU_MESSAGES = tuple(2**e for e in range(16, 32, 2))  # 64 KiB … 1 GiB
CPU_GEMMS = _square(64, 128, 256, 512)
CPU_MESSAGES = (2**12, 2**16, 2**20)


def tiny_fsdp2_cpu() -> Preset:
    """~1M-parameter Llama-style model, FSDP2 on CPU with gloo: the CI preset (2 processes)."""
    return Preset(
        name="tiny_fsdp2_cpu", description="tiny Llama-style model, FSDP2 on CPU (gloo); CI smoke and ground truth",
        model="tiny", device="cpu", nproc=2, micro_batch=2, seq_len=128, warmup_steps=1, steps=3,
        gemm_sizes=CPU_GEMMS, collective_sizes=CPU_MESSAGES,
    )  # fmt: skip


def tiny_fsdp2_cpu_full_recompute() -> Preset:
    """The CI model with full activation checkpointing."""
    p = tiny_fsdp2_cpu()
    return Preset(**{**asdict(p), "name": "tiny_fsdp2_cpu_full_recompute", "recompute": "full",
                     "description": "tiny model, FSDP2 on CPU, full recompute", "gemm_sizes": (),
                     "collective_sizes": ()})  # fmt: skip


def llama3_8b_fsdp1_h200() -> Preset:
    """Llama 3.1 8B scaled to 8 of 32 layers on one H200 (FSDP2 world 1): step, memory, FLOPs, GEMM sweep."""
    return Preset(
        name="llama3_8b_fsdp1_h200", description="Llama 3.1 8B (8 of 32 layers) on 1 × H200, bf16, seq 4096",
        model="llama3.1-8b", device="cuda", accelerator="h200-sxm", nproc=1, layers=8, micro_batch=2,
        seq_len=4096, warmup_steps=3, steps=10, gemm_sizes=GPU_GEMMS,
    )  # fmt: skip


def llama3_8b_fsdp1_h200_selective() -> Preset:
    """The same with selective recompute (checks the recompute FLOPs and activation terms on GPU)."""
    p = llama3_8b_fsdp1_h200()
    return Preset(**{**asdict(p), "name": "llama3_8b_fsdp1_h200_selective", "recompute": "selective",
                     "description": "Llama 3.1 8B (8 layers) on 1 × H200, selective recompute", "gemm_sizes": ()})  # fmt: skip


def llama3_8b_fsdp8_h100() -> Preset:
    """Llama 3.1 8B (all 32 layers) on 8 × H100 SXM, FSDP2, seq 8192: step + GEMM + NCCL sweeps."""
    return Preset(
        name="llama3_8b_fsdp8_h100", description="Llama 3.1 8B on 8 × H100 SXM, FSDP2, seq 8192",
        model="llama3.1-8b", device="cuda", accelerator="h100-sxm", nproc=8, micro_batch=1, seq_len=8192,
        recompute="none", warmup_steps=3, steps=10, gemm_sizes=GPU_GEMMS, collective_sizes=GPU_MESSAGES,
    )  # fmt: skip


def llama3_8b_fsdp8_h200() -> Preset:
    p = llama3_8b_fsdp8_h100()
    return Preset(**{**asdict(p), "name": "llama3_8b_fsdp8_h200", "accelerator": "h200-sxm",
                     "description": "Llama 3.1 8B on 8 × H200, FSDP2, seq 8192"})  # fmt: skip


def llama3_70b_fsdp64_h100() -> Preset:
    """Llama 3.1 70B on 8 nodes × 8 H100 (multi-node: use `capplan bench launch-cmd --nodes 8`)."""
    return Preset(
        name="llama3_70b_fsdp64_h100", description="Llama 3.1 70B on 64 × H100 SXM (8 nodes), FSDP2, full recompute",
        model="llama3.1-70b", device="cuda", accelerator="h100-sxm", nproc=8, nodes=8, micro_batch=1, seq_len=8192,
        recompute="full", warmup_steps=3, steps=10, gemm_sizes=GPU_GEMMS, collective_sizes=GPU_MESSAGES,
    )  # fmt: skip


def gemm_sweep_gpu() -> Preset:
    """GEMM and (with ≥ 2 GPUs) collective sweeps only, no training step; ``--accelerator`` names the GPU."""
    return Preset(
        name="gemm_sweep_gpu", description="GEMM TFLOP/s and NCCL busbw sweeps only (no training step)",
        model="none", device="cuda", nproc=1, steps=0, warmup_steps=0, gemm_sizes=GPU_GEMMS,
        collective_sizes=GPU_MESSAGES,
    )  # fmt: skip


PRESETS: dict[str, Callable[[], Preset]] = {
    f.__name__: f
    for f in (
        tiny_fsdp2_cpu,
        tiny_fsdp2_cpu_full_recompute,
        llama3_8b_fsdp1_h200,
        llama3_8b_fsdp1_h200_selective,
        llama3_8b_fsdp8_h100,
        llama3_8b_fsdp8_h200,
        llama3_70b_fsdp64_h100,
        gemm_sweep_gpu,
    )
}


class UnknownPreset(KeyError):
    def __str__(self) -> str:
        return f"unknown preset {self.args[0]!r}; known: {', '.join(PRESETS)}"


def get_preset(name: str, **overrides: Any) -> Preset:
    """The preset called ``name`` with ``overrides`` (fields of :class:`Preset`) applied."""
    if name not in PRESETS:
        raise UnknownPreset(name)
    preset = PRESETS[name]()
    clean = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(clean) - set(Preset.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown preset fields {sorted(unknown)}")
    return Preset(**{**asdict(preset), **clean}) if clean else preset
