"""Per-plan overrides of catalog figures (hardware, efficiency, runtime memory): a user's value replaces the
catalog's for one estimate, validated by the same model as data/, and marked with provenance ``override``.

Keys name the part of the cluster and the figure, e.g. ``accelerator.bf16_dense_tflops``,
``node.scale_out_gbit_per_s_per_nic``, ``efficiency.gemm_efficiency``, ``scale_out_network.efficiency``,
``runtime.fragmentation_fraction``. Nothing is written into the catalog.
"""

from __future__ import annotations

from datetime import date

from pydantic import ValidationError

from app.domain.catalog.clock import today
from app.domain.estimator.cluster import Cluster
from app.domain.provenance import Confidence, FigureProvenance

OVERRIDABLE: dict[str, tuple[str, ...]] = {
    "accelerator": (
        "bf16_dense_tflops", "fp16_dense_tflops", "fp8_dense_tflops", "fp4_dense_tflops", "tf32_dense_tflops", "memory_marketed_gb",
        "memory_usable_bytes",
        "memory_bandwidth_gb_per_s", "nvlink_bandwidth_gb_per_s", "tdp_w",
    ),
    "node": ("scale_out_nics", "scale_out_gbit_per_s_per_nic", "host_memory_gib", "local_nvme_tb"),
    "efficiency": ("gemm_efficiency", "gemm_overhead_us", "attention_efficiency", "hbm_efficiency", "scale_up_efficiency"),
    "scale_up_network": ("efficiency", "hop_latency_us"),
    "scale_out_network": ("efficiency", "hop_latency_us"),
    "runtime": (
        "cuda_context_bytes", "nccl_bytes_per_communicator", "nccl_bytes_per_communicator_scale_out",
        "workspace_bytes", "fragmentation_fraction", "cpu_optimizer_gb_per_s", "nvme_gb_per_s",
    ),
}  # fmt: skip
INTEGER_FIGURES = {
    "memory_usable_bytes", "scale_out_nics", "cuda_context_bytes", "nccl_bytes_per_communicator",
    "nccl_bytes_per_communicator_scale_out", "workspace_bytes",
}  # fmt: skip
OVERRIDE_KEYS = tuple(f"{part}.{name}" for part, names in OVERRIDABLE.items() for name in names)


class OverrideError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


def apply_overrides(cluster: Cluster, overrides: dict[str, float], *, on: date | None = None) -> Cluster:
    """``cluster`` with each overridden figure replaced and marked ``override``; OverrideError names a bad key."""
    by_part: dict[str, dict[str, float]] = {}
    for key, value in overrides.items():
        part, _, name = key.partition(".")
        if name not in OVERRIDABLE.get(part, ()):
            raise OverrideError(key, f"cannot override {key!r}; overridable: {', '.join(OVERRIDE_KEYS)}")
        by_part.setdefault(part, {})[name] = int(value) if name in INTEGER_FIGURES else float(value)
    updates = {}
    stamp = (on or today()).isoformat()
    for part, figures in by_part.items():
        entry = getattr(cluster, part)
        provenance = dict(entry.provenance)
        for name in figures:
            default = getattr(entry, name)
            was = entry.figure_provenance(name).source if name in entry.provenance else ""
            origin = "calibrated" if was.startswith("calibrated") else "catalog"
            provenance[name] = FigureProvenance(
                source="override", as_of=stamp, confidence=Confidence.high,
                note=f"set for this plan; {origin} {default:g}" if default is not None else "set for this plan",
            )  # fmt: skip
        try:
            updates[part] = type(entry).model_validate(
                {**entry.model_dump(), **figures, "provenance": provenance}
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else next(iter(figures))
            raise OverrideError(f"{part}.{field}", err["msg"]) from None
    return cluster.model_copy(update=updates)
