"""FSDP2 sharding arithmetic: which slice of each parameter a rank holds, and its model-state bytes.

``fully_shard`` splits every parameter on dim 0 with ``torch.chunk`` semantics: chunk size
``c = ceil(dim0 / world_size)``, rank ``r`` gets rows ``[r·c, min((r+1)·c, dim0))`` — later ranks may get fewer
rows or none. The local shard (``DTensor.to_local()``) has exactly those rows; FSDP2 allocates the parameter
shard padded to ``c`` rows (so all-gather inputs are equal-sized), which :func:`fsdp_padded_shard_numel` gives.
Gradients and AdamW's ``exp_avg`` / ``exp_avg_sq`` follow the local (unpadded) shard; AdamW also keeps one
``step`` tensor per parameter (a 0-d fp32 tensor on the host unless ``capturable``/``fused``).

Pure (stdlib only), so the memory model and the benchmark tests share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

Shape = Sequence[int]


def _check(world_size: int, rank: int) -> None:
    if world_size < 1:
        raise ValueError(f"world_size must be ≥ 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside 0..{world_size - 1}")


def fsdp_shard_rows(dim0: int, world_size: int, rank: int) -> int:
    """Rows of a ``dim0``-row parameter that ``rank`` holds (``torch.chunk`` on dim 0)."""
    _check(world_size, rank)
    chunk = -(-dim0 // world_size)
    return max(0, min(chunk, dim0 - rank * chunk))


def fsdp_shard_numel(shape: Shape, world_size: int, rank: int) -> int:
    """Elements of the local shard (``DTensor.to_local().numel()``) of a parameter of ``shape``."""
    if not shape:  # a 0-d parameter cannot be chunked; FSDP2 would reject it, count it whole on rank 0
        return 1 if rank == 0 else 0
    return fsdp_shard_rows(shape[0], world_size, rank) * math.prod(shape[1:])


def fsdp_padded_shard_numel(shape: Shape, world_size: int) -> int:
    """Elements FSDP2 allocates for every rank's shard: ``ceil(dim0 / world_size)`` rows (rank 0's chunk)."""
    _check(world_size, 0)
    if not shape:
        return 1
    return -(-shape[0] // world_size) * math.prod(shape[1:])


def sharded_state_bytes(
    shapes: Iterable[Shape],
    world_size: int,
    rank: int,
    *,
    param_bytes: int = 4,
    grad_bytes: int = 4,
    optimizer_bytes_per_param: int = 8,
    step_bytes_per_tensor: int = 4,
) -> dict[str, int]:
    """Model-state bytes ``rank`` holds under FSDP2 ``fully_shard`` for parameters of ``shapes``.

    Defaults: fp32 sharded parameters (4 B), fp32 gradients (``MixedPrecisionPolicy(reduce_dtype=fp32)``,
    4 B), AdamW ``exp_avg`` + ``exp_avg_sq`` in fp32 (8 B), plus one fp32 ``step`` per parameter tensor
    (``step_bytes_per_tensor=4``; counted on every rank, even one whose shard is empty).

    Returns ``param_numel``, ``param_bytes``, ``param_padded_bytes`` and ``grad_padded_bytes`` (what FSDP2
    allocates: shards padded to ``ceil(dim0/world_size)`` rows; gradients are views of padded buffers),
    ``grad_bytes``, ``optimizer_bytes`` (moments + steps), ``optimizer_step_bytes`` and ``total``
    (``param_bytes + grad_bytes + optimizer_bytes``).
    """
    return sharded_state_bytes_counted(
        [(tuple(s), 1) for s in shapes], world_size, rank, param_bytes=param_bytes, grad_bytes=grad_bytes,
        optimizer_bytes_per_param=optimizer_bytes_per_param, step_bytes_per_tensor=step_bytes_per_tensor,
    )  # fmt: skip


def sharded_state_bytes_counted(
    shape_counts: Iterable[tuple[Shape, int]],
    world_size: int,
    rank: int,
    *,
    param_bytes: int = 4,
    grad_bytes: int = 4,
    optimizer_bytes_per_param: int = 8,
    step_bytes_per_tensor: int = 4,
) -> dict[str, int]:
    """:func:`sharded_state_bytes` for ``(shape, number of tensors with that shape)`` pairs."""
    _check(world_size, rank)
    pairs = list(shape_counts)
    numel = sum(n * fsdp_shard_numel(s, world_size, rank) for s, n in pairs)
    padded = sum(n * fsdp_padded_shard_numel(s, world_size) for s, n in pairs)
    steps = step_bytes_per_tensor * sum(n for _, n in pairs)
    out = {
        "param_numel": numel,
        "param_bytes": numel * param_bytes,
        "param_padded_bytes": padded * param_bytes,
        "grad_padded_bytes": padded * grad_bytes,
        "grad_bytes": numel * grad_bytes,
        "optimizer_bytes": numel * optimizer_bytes_per_param + steps,
        "optimizer_step_bytes": steps,
    }
    out["total"] = out["param_bytes"] + out["grad_bytes"] + out["optimizer_bytes"]
    return out
