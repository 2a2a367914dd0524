"""Microbenchmarks for the calibration curves: GEMM TFLOP/s over sizes and dtypes, collective bus bandwidth
over message sizes and group sizes (nccl-tests definitions: busbw = algbw × 2(n−1)/n for all-reduce,
× (n−1)/n for all-gather and reduce-scatter, with S the full, unsharded buffer).

Timing: CUDA events around ``iters`` launches after ``warmup`` on GPU; ``perf_counter`` on CPU. Collective
timings are the slowest rank's (a max all-reduce of the per-rank times), as nccl-tests reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist

from app.domain.estimator.calibration import bus_factor

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _timed(fn: Callable[[], object], device: torch.device, iters: int, warmup: int) -> float:
    """Seconds per call of ``fn``."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def _iters_for(flops: float, device: torch.device) -> int:
    budget = 2e13 if device.type == "cuda" else 2e9  # ~20–50 ms of work per size
    return int(max(3, min(200, budget / max(flops, 1.0))))


def gemm_sweep(
    sizes: Iterable[tuple[int, int, int]], dtypes: Iterable[str], device: torch.device
) -> list[tuple[str, int, int, int, float]]:
    """(dtype, m, n, k, TFLOP/s) for ``A(m×k) @ B(k×n)`` on ``device``."""
    out = []
    gen = torch.Generator(device=device).manual_seed(0)
    for dtype in dtypes:
        dt = DTYPES[dtype]
        for m, n, k in sizes:
            a = torch.randn(m, k, device=device, dtype=dt, generator=gen)
            b = torch.randn(k, n, device=device, dtype=dt, generator=gen)
            flops = 2.0 * m * n * k
            seconds = _timed(lambda a=a, b=b: torch.mm(a, b), device, _iters_for(flops, device), 2)
            out.append((dtype, m, n, k, flops / seconds / 1e12))
            del a, b
    return out


def _group_sizes(world: int) -> list[int]:
    sizes, n = [], 2
    while n <= world:
        sizes.append(n)
        n *= 2
    if world > 1 and world not in sizes:
        sizes.append(world)
    return sizes


def _collective(op: str, buf: torch.Tensor, shard: torch.Tensor, group) -> Callable[[], object]:
    if op == "all_reduce":
        return lambda: dist.all_reduce(buf, group=group)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(buf, shard, group=group)
    return lambda: dist.reduce_scatter_tensor(shard, buf, group=group)


def collective_sweep(
    sizes_bytes: Iterable[int], ops: Iterable[str], device: torch.device, *, local_world: int
) -> list[tuple[str, int, int, int, float]]:
    """(op, ranks, nodes, bytes, busbw GB/s) for groups of the first 2, 4, … ranks (every rank calls this).

    A group of n consecutive ranks spans ``ceil(n / local_world)`` nodes. Returns the list on every rank.
    """
    world = dist.get_world_size()
    rank = dist.get_rank()
    out = []
    ops = list(ops)
    sizes_bytes = list(sizes_bytes)
    for n in _group_sizes(world):
        group = dist.new_group(list(range(n))) if n < world else None
        nodes = -(-n // local_world)
        member = rank < n
        for op in ops:
            for size in sizes_bytes:
                elems = max(n, size // 4 // n * n)  # fp32, divisible by the group size
                seconds = torch.zeros(1, dtype=torch.float64, device=device)
                if member:
                    buf = torch.ones(elems, dtype=torch.float32, device=device)
                    shard = torch.empty(elems // n, dtype=torch.float32, device=device)
                    fn = _collective(op, buf, shard, group)
                    iters = 20 if device.type == "cuda" else 3
                    seconds[0] = _timed(fn, device, iters, 2)
                dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
                t = float(seconds[0])
                nbytes = elems * 4
                if t > 0:
                    out.append((op, n, nodes, nbytes, bus_factor(op, n) * nbytes / t / 1e9))
        if group is not None:
            dist.destroy_process_group(group)
    return out
