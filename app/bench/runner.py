"""The benchmark runner: real FSDP2 training steps of a catalog architecture under torchrun, measured per rank.

Launched as ``torchrun --nproc-per-node N -m app.bench --preset NAME --output FILE`` (``capplan bench run``
builds that command). Every rank:

1. (GPU) measures the CUDA context: device memory in use outside the caching allocator before any
   collective; then ``init_process_group`` (NCCL on GPU, gloo on CPU) and a 1-D device mesh;
2. builds the reference model (:mod:`app.bench.model`) from the Architecture on the meta device — scaled
   down by layers when the preset says so (recorded in the result) — applies ``fully_shard`` to every block
   and then the root with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, materialises the
   local shards and initialises them (normal 0.02, norms 1, biases 0) and the rotary tables;
3. trains on synthetic tokens (a different fixed batch per rank) with AdamW: warm-up steps, one step under
   ``FlopCounterMode`` (forward + backward FLOPs), then the measured steps (CUDA events on GPU,
   ``perf_counter`` on CPU), peak memory stats reset after warm-up;
4. reads exact parameter, gradient and optimizer-state bytes from the local shards, the saved-activation
   bytes of one micro-batch (saved-tensor hooks), and on GPU peak allocated / reserved, allocator retries,
   OOMs and memory outside tensors (in use − reserved);
5. runs the preset's collective sweep (all ranks) and GEMM sweep (rank 0).

Rank 0 gathers every rank's figures, adds the estimator's predictions (:mod:`app.bench.report`) and writes
one JSON file (:class:`app.schemas.BenchmarkResultIn`). A progress bar goes to rank 0's stderr.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import statistics
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from app.bench.measure import model_state_bytes, saved_activation_bytes
from app.bench.micro import collective_sweep, gemm_sweep
from app.bench.model import build_model, lm_loss, rope_tables
from app.bench.presets import Preset
from app.bench.report import build_result, resolve_architecture
from app.domain.catalog import Catalog
from app.schemas import BenchmarkResultIn

aten = torch.ops.aten


def _kv_heads_as_query(query_shape: Any, kv_shape: Any) -> tuple[int, ...]:
    """K/V shape with the query's head count: GQA kernels broadcast K/V heads, so the work is per query head.
    (torch < 2.13's formulas assert equal head counts and would crash on Llama's 32 query / 8 K/V heads.)"""
    return (kv_shape[0], query_shape[1], *kv_shape[2:])


def _sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(
        query_shape, _kv_heads_as_query(query_shape, key_shape), _kv_heads_as_query(query_shape, value_shape)
    )


def _sdpa_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    return sdpa_backward_flop_count(
        grad_out_shape, query_shape, _kv_heads_as_query(query_shape, key_shape),
        _kv_heads_as_query(query_shape, value_shape),
    )  # fmt: skip


def _sdpa_ops(*names: str) -> list[Any]:
    return [getattr(aten, n) for n in names if hasattr(aten, n)]


# One formula for every fused SDPA kernel, GQA included, on any torch: the CPU flash kernel (FlopCounterMode has
# no formula for it) and the CUDA flash / memory-efficient / cuDNN kernels. Non-causal, as torch counts them.
SDPA_FLOPS: dict[Any, Any] = {
    **{op: _sdpa_flop for op in _sdpa_ops(
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")},
    **{op: _sdpa_backward_flop for op in _sdpa_ops(
        "_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward")},
}  # fmt: skip


class Progress:
    """A one-line progress bar on rank 0's stderr."""

    def __init__(self, total: int, enabled: bool, width: int = 24) -> None:
        self.total, self.enabled, self.width, self.done = max(total, 1), enabled, width, 0

    def update(self, label: str, seconds: float | None = None) -> None:
        if not self.enabled:
            return
        self.done += 1
        filled = round(self.width * min(self.done, self.total) / self.total)
        tail = f" {seconds:.3f} s" if seconds is not None else ""
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {label}{tail}   "
        )
        sys.stderr.flush()

    def close(self, message: str = "") -> None:
        if self.enabled:
            sys.stderr.write(f"\n{message}\n" if message else "\n")
            sys.stderr.flush()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _init_env() -> tuple[int, int, int, int]:
    """(rank, world, local rank, local world) from torchrun's environment (single process without it)."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))  # fmt: skip
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return rank, world, local_rank, local_world


def software_versions(device: torch.device) -> dict[str, Any]:
    out: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version()}
    if device.type == "cuda":
        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version()
        try:
            out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # pragma: no cover - NCCL missing
            out["nccl"] = None
        try:
            import subprocess

            out["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10, check=False,
            ).stdout.strip().splitlines()[0]  # fmt: skip
        except Exception:  # pragma: no cover
            out["driver"] = None
    else:
        out["backend"] = "gloo"
    try:
        from importlib.metadata import version

        out["capplan"] = version("capplan")
    except Exception:  # pragma: no cover
        out["capplan"] = None
    return out


def hardware_info(device: torch.device, world: int, local_world: int) -> dict[str, Any]:
    info: dict[str, Any] = {"host": platform.node(), "machine": platform.machine(), "cpus": os.cpu_count(),
                            "world_size": world, "processes_per_node": local_world}  # fmt: skip
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_bytes=props.total_memory, sms=props.multi_processor_count,
                    capability=f"{props.major}.{props.minor}")  # fmt: skip
    else:
        info["cpu"] = platform.processor() or platform.machine()
    return info


@torch.no_grad()
def init_sharded(model: torch.nn.Module, device: torch.device, seed: int = 0) -> None:
    """Initialise the (sharded) parameters in place like ``Transformer.init_weights`` and the rope tables."""
    torch.manual_seed(seed)
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if p.dim() == 1 and leaf == "weight" and "norm" in name:
            p.fill_(1.0)
        elif p.dim() == 1 or leaf.startswith("b") or leaf == "expert_bias":
            p.zero_()
        else:
            p.normal_(0.0, 0.02)
    cos, sin = rope_tables(model.rot, model.max_seq_len, device=device)  # type: ignore[arg-type]
    model.rope_cos.copy_(cos)  # type: ignore[operator]
    model.rope_sin.copy_(sin)  # type: ignore[operator]


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def train_and_measure(
    preset: Preset,
    catalog: Catalog,
    device: torch.device,
    rank: int,
    world: int,
    progress: Progress,
    info: dict[str, Any] | None = None,
) -> dict[str, float]:
    """The training-step measurements of this rank (empty when the preset has no model). ``info`` receives
    what is not a number: the attention kernels that ran (``sdpa_kernels``)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    resolved = resolve_architecture(preset, catalog)
    arch = resolved.arch
    if arch is None:
        return {}
    model = build_model(arch, device="meta", checkpoint=preset.recompute, max_seq_len=preset.seq_len)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    # Blocks take the fp32 rotary tables as arguments: not casting block inputs keeps them model buffers (the
    # activations entering a block are bf16 already), so autograd saves no per-block bf16 copies of them.
    block_mp = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False
    )
    for block in model.layers:
        fully_shard(block, mp_policy=block_mp)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device=device)
    init_sharded(model, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(1000 + rank)
    tokens = torch.randint(0, arch.vocab_size, (preset.micro_batch, preset.seq_len), generator=gen).to(device)
    targets = torch.roll(tokens, -1, dims=1)
    losses: list[float] = []

    def forward_backward() -> torch.Tensor:
        loss = lm_loss(model(tokens), targets)
        loss.backward()
        return loss

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = forward_backward()
        optimizer.step()
        losses.append(float(loss.detach()))

    for _ in range(preset.warmup_steps):
        t0 = time.perf_counter()
        step()
        progress.update("warm-up", time.perf_counter() - t0)

    optimizer.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False, custom_mapping=SDPA_FLOPS) as counter:
        forward_backward()
    optimizer.step()
    flops = float(counter.get_total_flops())
    if info is not None:  # which SDPA kernel ran: a fallback to the math kernel changes FLOPs and memory
        info["sdpa_kernels"] = sorted(
            str(op) for op in counter.get_flop_counts().get("Global", {}) if "attention" in str(op)
        )
    progress.update("FLOP count")

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.reset_accumulated_memory_stats(device)  # alloc retries / OOMs of the measured steps only
    times: list[float] = []
    for _ in range(preset.steps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        progress.update("measured step", times[-1])

    state = model_state_bytes(model, optimizer)
    out: dict[str, float] = {
        "param_bytes": state.param_storage_bytes,
        "grad_bytes": state.grad_storage_bytes,
        "optimizer_bytes": state.optimizer_bytes,
        "flops_per_step": flops,
        "loss": losses[-1] if losses else float("nan"),
    }
    if times:
        p50 = statistics.median(times)
        tokens_per_step = preset.micro_batch * preset.seq_len
        out.update(
            step_time_s=p50,
            step_time_p90_s=_percentile(times, 0.9),
            tokens_per_s=tokens_per_step / p50,
            achieved_tflops=flops / p50 / 1e12,
        )
        if device.type == "cuda" and preset.accelerator:
            from app.domain.estimator.compute import model_flops_per_token
            from app.domain.model.counts import parameter_counts

            model_flops = model_flops_per_token(
                arch, preset.seq_len, parameter_counts(arch).matmul_weights_active
            )
            peak = catalog.hardware.accelerator(preset.accelerator).bf16_dense_tflops * 1e12
            out["mfu"] = model_flops.total * tokens_per_step / p50 / peak
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        free, total = torch.cuda.mem_get_info(device)
        out.update(
            peak_allocated_bytes=torch.cuda.max_memory_allocated(device),
            peak_reserved_bytes=torch.cuda.max_memory_reserved(device),
            outside_tensors_bytes=(total - free) - torch.cuda.memory_reserved(device),
            alloc_retries=stats.get("num_alloc_retries", 0),
            ooms=stats.get("num_ooms", 0),
        )
    saved = saved_activation_bytes(model, tokens, targets=targets)
    out["saved_activation_bytes"] = saved.total
    out["saved_activation_bytes_layers"] = sum(saved.per_block)
    progress.update("saved activations")
    return out


def run(preset: Preset, catalog: Catalog, output: Path | None) -> BenchmarkResultIn | None:
    """Run ``preset`` on this rank; rank 0 returns (and writes to ``output``) the result."""
    rank, world, local_rank, local_world = _init_env()
    use_cuda = preset.device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise SystemExit(f"preset {preset.name} needs a CUDA GPU; use a *_cpu preset on this machine")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    measured: dict[str, float] = {}
    if use_cuda:
        torch.cuda.set_device(device)
        torch.empty(1, device=device)  # create the context
        free, total = torch.cuda.mem_get_info(device)
        measured["cuda_context_bytes"] = (total - free) - torch.cuda.memory_reserved(device)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
        warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support")
    backend = "nccl" if use_cuda else "gloo"
    dist.init_process_group(backend, device_id=device if use_cuda else None)
    try:
        steps = preset.warmup_steps + preset.steps + 2 if preset.model != "none" else 0
        progress = Progress(steps + 2, enabled=rank == 0)
        info: dict[str, Any] = {}
        measured.update(train_and_measure(preset, catalog, device, rank, world, progress, info))
        collectives = []
        if preset.collective_sizes and world > 1:
            collectives = collective_sweep(preset.collective_sizes, preset.collective_ops, device,
                                           local_world=local_world)  # fmt: skip
        progress.update("collectives")
        gemms = (
            gemm_sweep(preset.gemm_sizes, preset.gemm_dtypes, device)
            if rank == 0 and preset.gemm_sizes
            else []
        )
        progress.update("GEMMs")
        gathered: list[dict[str, float] | None] = [None] * world
        dist.all_gather_object(gathered, measured)
        dist.barrier()  # leave together: a rank tearing the group down mid-exchange aborts its peer (gloo)
        if rank != 0:
            return None
        progress.close(f"{preset.name}: {world} rank(s) measured")
        name = torch.cuda.get_device_name(device) if use_cuda else f"CPU ({platform.machine()}, gloo)"
        result = build_result(
            preset, catalog, world_size=world, nodes=max(1, world // local_world),
            measured=[g or {} for g in gathered], gemm=gemms, collectives=collectives, device_name=name,
            hardware=hardware_info(device, world, local_world), software={**software_versions(device), **info},
        )  # fmt: skip
        if output is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(result.model_dump_json(indent=2, by_alias=True), encoding="utf-8")
        return result
    finally:
        # every rank, rank 0 after writing its result, meets here before any tears the group down: a rank that
        # destroys its gloo group while a peer is still connected can abort that peer (SIGABRT, "terminate called
        # without an active exception", seen under a loaded test suite). gloo's monitored barrier gives up after
        # 30 s, so a rank that failed does not hold its peers until the launcher's timeout.
        if backend == "gloo":
            with contextlib.suppress(Exception):
                dist.monitored_barrier(timeout=timedelta(seconds=30))
        dist.destroy_process_group()
