"""A synthetic H100 runner result (torch-free) built through app.bench.report, for API and page tests."""

from __future__ import annotations

from app.bench.presets import get_preset
from app.bench.report import build_result, predictions, resolve_architecture
from app.domain.catalog import load_catalog
from app.schemas import BenchmarkResultIn
from app.settings import REPO_ROOT

CATALOG = load_catalog(REPO_ROOT / "data")


def synthetic_h100_result(slowdown: float = 1.25, world_size: int = 8) -> BenchmarkResultIn:
    """A run of llama3_8b_fsdp8_h100 whose steps take ``slowdown`` × the predicted time; bytes as predicted."""
    preset = get_preset("llama3_8b_fsdp8_h100", steps=2)
    predicted, _ = predictions(preset, resolve_architecture(preset, CATALOG), CATALOG, world_size)
    measured = []
    for rank in range(world_size):
        p = predicted[rank]
        measured.append({
            "step_time_s": p["step_time_s"] * slowdown, "tokens_per_s": p["tokens_per_s"] / slowdown,
            "param_bytes": p["param_bytes"], "grad_bytes": p["grad_bytes"], "optimizer_bytes": p["optimizer_bytes"],
            "flops_per_step": p["flops_per_step"], "peak_allocated_bytes": p["peak_allocated_bytes"] * 0.9,
            "peak_reserved_bytes": p["peak_allocated_bytes"] * 0.99, "cuda_context_bytes": 0.55 * 2**30,
            "outside_tensors_bytes": 1.3 * 2**30,
        })  # fmt: skip
    gemm = [("bf16", s, s, s, 700.0 * s / (s + 512)) for s in (1024, 4096, 8192)]
    collectives = [("all_reduce", 8, 1, 2**e, 360.0 * 2**e / (2**e + 2**22)) for e in (20, 24, 28, 30)]
    return build_result(
        preset, CATALOG, world_size=world_size, nodes=1, measured=measured, gemm=gemm, collectives=collectives,
        device_name="NVIDIA H100 80GB HBM3", hardware={"gpu": "NVIDIA H100 80GB HBM3"},
        software={"torch": "2.13.0", "cuda": "12.8", "nccl": "2.27.3"},
    )  # fmt: skip
