"""Scaling an architecture down by layers for benchmarking (torch-free: the CLI and the reports use it)."""

from __future__ import annotations

from app.domain.model.architecture import Architecture


def scaled_arch(arch: Architecture, n_layers: int) -> Architecture:
    """The same architecture with ``n_layers`` layers (MoE layout rules kept); the scaling is recorded.

    The slug gets a ``-l{n}`` suffix and ``notes`` says from how many layers it was scaled, so a benchmark
    of the scaled model is never mistaken for the full one.
    """
    if n_layers < 1:
        raise ValueError("n_layers must be at least 1")
    if n_layers == arch.n_layers:
        return arch
    if arch.is_moe and arch.first_k_dense_layers >= n_layers:
        raise ValueError(
            f"{arch.slug} has {arch.first_k_dense_layers} leading dense layers; keep more than that"
        )
    note = f"Scaled from {arch.n_layers} to {n_layers} layers for benchmarking (layer scale {arch.n_layers / n_layers:g})."
    data = arch.model_dump()
    data.update(
        n_layers=n_layers,
        slug=f"{arch.slug[:56]}-l{n_layers}",
        name=f"{arch.name} ({n_layers} of {arch.n_layers} layers)"[:200],
        notes=f"{arch.notes} {note}".strip(),
    )
    return Architecture.model_validate(data)


def layer_scale(arch: Architecture, scaled: Architecture) -> float:
    """How many times more layers ``arch`` has than ``scaled`` (to scale per-layer measurements back up)."""
    return arch.n_layers / scaled.n_layers
