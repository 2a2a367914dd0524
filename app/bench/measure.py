"""Measurements on the torch reference model: saved activations, live bytes, model-state bytes, FSDP2 state
bytes on CPU.

These are ground truth for the pure formulas in ``app.domain.activations`` and ``app.domain.sharding`` (the
tests compare them) and what the benchmark runner reports back to the app.

Saved activations are counted the way autograd holds them: every tensor a forward op saves for backward goes
through ``torch.autograd.graph.saved_tensors_hooks``; each distinct storage is counted once, at its full
``nbytes`` (a saved view keeps its whole storage alive), and storages that belong to model parameters or
buffers (weights, rotary tables — model state, not activations) are excluded. A saved tensor is attributed to
the transformer block executing when it was saved (forward pre/post hooks on each block), else to the part
before the first block (embedding) or after the last (final norm, output head, loss).

With non-reentrant checkpointing the region's inputs are saved through the same hooks (``_NoopSaveInputs``)
while the region's own ops are not, so full recompute shows exactly the block inputs it keeps.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from app.bench.model import lm_loss

BEFORE = "before_blocks"
AFTER = "after_blocks"


@dataclass(frozen=True)
class SavedTensor:
    """One saved tensor: where it was saved, its shape/dtype, and the bytes it added (0 if its storage was
    already counted or belongs to the model's state)."""

    scope: str
    shape: tuple[int, ...]
    dtype: str
    storage_nbytes: int
    counted_bytes: int
    state: bool = False


@dataclass(frozen=True)
class SavedBytes:
    """Bytes autograd keeps between forward and backward for one micro-batch, by where they were saved."""

    per_block: tuple[int, ...]
    before_blocks: int
    after_blocks: int
    tensors: tuple[SavedTensor, ...] = field(repr=False, default=())

    @property
    def outside_blocks(self) -> int:
        return self.before_blocks + self.after_blocks

    @property
    def total(self) -> int:
        return sum(self.per_block) + self.outside_blocks

    def block_tensors(self, index: int) -> list[SavedTensor]:
        return [t for t in self.tensors if t.scope == f"block{index}"]

    def describe(self, scope: str) -> str:
        """One line per saved tensor of ``scope`` (for failure messages)."""
        return "\n".join(
            f"  {t.shape} {t.dtype} storage={t.storage_nbytes} counted={t.counted_bytes}"
            + (" (model state)" if t.state else "")
            for t in self.tensors
            if t.scope == scope
        )


def _state_storages(model: nn.Module) -> set[int]:
    ptrs: set[int] = set()
    for t in [*model.parameters(), *model.buffers()]:
        local = t.to_local() if hasattr(t, "to_local") else t
        if local.device.type != "meta":
            ptrs.add(local.untyped_storage().data_ptr())
    return ptrs


def saved_activation_bytes(
    model: nn.Module,
    tokens: torch.Tensor,
    *,
    targets: torch.Tensor | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = lm_loss,
    blocks: list[nn.Module] | None = None,
    backward: bool = True,
) -> SavedBytes:
    """Run forward (+ loss) under saved-tensor hooks and count the saved bytes, per block and outside blocks.

    ``blocks`` defaults to ``model.layers``. ``targets`` defaults to ``tokens`` rolled by one. With
    ``backward`` the graph is then run backward (so recompute paths are exercised) and gradients cleared.
    """
    blocks = list(model.layers) if blocks is None else blocks  # type: ignore[attr-defined]
    base = _state_storages(model)
    state = set(base)
    root_state: set[int] = set()
    seen: set[int] = set()
    records: list[SavedTensor] = []
    scope = [BEFORE]

    def _reset(extra: set[int]) -> None:
        # Only storages alive *now* count as model state: FSDP2 frees a block's unsharded parameters after its
        # forward, and the allocator may hand those addresses to later activations.
        state.clear()
        state.update(base, root_state, extra)

    def root_pre(module: nn.Module, _args: object) -> None:
        # FSDP2 unshards the root's own parameters (embedding, output, final norm) in its pre-forward hook.
        root_state.update(_state_storages(module))
        _reset(set())

    def pre(index: int) -> Callable[..., None]:
        def hook(module: nn.Module, _args: object) -> None:
            scope[0] = f"block{index}"
            # FSDP2 swaps in unsharded parameters in its own pre-forward hook (which runs before this one).
            _reset(_state_storages(module))

        return hook

    def post(_module: nn.Module, _args: object, _out: object) -> None:
        scope[0] = AFTER
        _reset(set())

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == "meta":
            return t
        storage = t.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        is_state = ptr in state
        counted = 0
        if not is_state and ptr not in seen:
            seen.add(ptr)
            counted = nbytes
        records.append(
            SavedTensor(
                scope[0], tuple(t.shape), str(t.dtype).removeprefix("torch."), nbytes, counted, is_state
            )
        )
        return t

    handles = [model.register_forward_pre_hook(root_pre)]
    for i, blk in enumerate(blocks):
        handles.append(blk.register_forward_pre_hook(pre(i)))
        handles.append(blk.register_forward_hook(post))
    if targets is None:
        targets = torch.roll(tokens, -1, dims=1)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = loss_fn(model(tokens), targets)
    finally:
        for h in handles:
            h.remove()
    if backward:
        loss.backward()
        model.zero_grad(set_to_none=True)
    del loss
    per_block = tuple(
        sum(r.counted_bytes for r in records if r.scope == f"block{i}") for i in range(len(blocks))
    )
    return SavedBytes(
        per_block=per_block,
        before_blocks=sum(r.counted_bytes for r in records if r.scope == BEFORE),
        after_blocks=sum(r.counted_bytes for r in records if r.scope == AFTER),
        tensors=tuple(records),
    )


# -- live bytes ---------------------------------------------------------------------------------------------


class LiveBytes(TorchDispatchMode):
    """Bytes of the tensors created under the mode that are alive, and their peak: each new storage an op
    returns is counted at its full ``nbytes`` until it is garbage-collected (``weakref.finalize``). Tensors
    made before the mode (inputs, weights) are not counted. On CPU this stands in for
    ``torch.cuda.memory_allocated`` / ``max_memory_allocated`` of what runs under it, without the allocator's
    rounding."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def reset_peak(self) -> None:
        self.peak = self.current

    def _track(self, t: torch.Tensor) -> None:
        if t.device.type == "meta":
            return
        storage = t.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if nbytes == 0 or key in self._live:
            return
        self._live[key] = nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        tree_map_only(torch.Tensor, self._track, out)
        return out


# -- model states -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateBytes:
    """Model-state bytes held by this rank (local shards for DTensor parameters)."""

    param_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    optimizer_step_bytes: int = field(
        default=0, metadata={"doc": "the per-parameter ``step`` tensors Adam keeps (part of optimizer_bytes)"}
    )
    param_numel: int = 0
    param_storage_bytes: int = field(
        default=0, metadata={"doc": "distinct storages behind the local parameters (FSDP2 pads shards)"}
    )
    grad_storage_bytes: int = 0

    @property
    def total(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes

    def as_dict(self) -> dict[str, int]:
        return {
            "param_bytes": self.param_bytes,
            "grad_bytes": self.grad_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "optimizer_step_bytes": self.optimizer_step_bytes,
            "param_numel": self.param_numel,
            "param_storage_bytes": self.param_storage_bytes,
            "grad_storage_bytes": self.grad_storage_bytes,
        }


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(t: torch.Tensor) -> int:
    local = _local(t)
    return local.numel() * local.element_size()


def _storage_bytes(tensors: list[torch.Tensor]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        st = _local(t).untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def model_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> StateBytes:
    """Exact parameter, gradient and optimizer-state bytes on this rank (call after an optimizer step).

    Bytes are ``numel · element_size`` of each (local) tensor; ``param_storage_bytes`` /
    ``grad_storage_bytes`` are the distinct storages behind them (FSDP2 allocates each parameter shard padded
    to ``ceil(dim0 / world_size)`` rows). ``optimizer_step_bytes`` is the part of ``optimizer_bytes`` in Adam's
    per-parameter ``step`` tensors.
    """
    params = list(model.parameters())
    param_bytes = sum(_nbytes(p) for p in params)
    grad_bytes = sum(_nbytes(p.grad) for p in params if p.grad is not None)
    opt_bytes = step_bytes = 0
    if optimizer is not None:
        for st in optimizer.state.values():
            for key, value in st.items():
                if isinstance(value, torch.Tensor):
                    n = _nbytes(value)
                    opt_bytes += n
                    if key == "step":
                        step_bytes += n
    return StateBytes(
        param_bytes=param_bytes,
        grad_bytes=grad_bytes,
        optimizer_bytes=opt_bytes,
        optimizer_step_bytes=step_bytes,
        param_numel=sum(_local(p).numel() for p in params),
        param_storage_bytes=_storage_bytes(params),
        grad_storage_bytes=_storage_bytes([p.grad for p in params if p.grad is not None]),
    )


# -- FSDP2 on CPU (gloo) ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FSDPRankResult:
    rank: int
    world_size: int
    state: StateBytes
    param_shapes: dict[str, tuple[int, ...]]
    local_param_shapes: dict[str, tuple[int, ...]]
    loss: float


def _fsdp2_worker(
    rank: int,
    world_size: int,
    init_file: str,
    arch_json: str,
    micro_batch: int,
    seq_len: int,
    checkpoint: str,
    out: dict[int, FSDPRankResult],
) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from app.bench.model import build_model
    from app.domain.model.architecture import Architecture

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        arch = Architecture.model_validate_json(arch_json)
        torch.manual_seed(0)
        model = build_model(arch, dtype=torch.float32, checkpoint=checkpoint, max_seq_len=seq_len)  # type: ignore[arg-type]
        shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
        mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.layers:
            fully_shard(block, mp_policy=mp_policy)
        fully_shard(model, mp_policy=mp_policy)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(1234)
        tokens = torch.randint(0, arch.vocab_size, (micro_batch, seq_len), generator=gen)
        loss = lm_loss(model(tokens), torch.roll(tokens, -1, dims=1))
        loss.backward()
        optimizer.step()
        state = model_state_bytes(model, optimizer)
        local = {n: tuple(_local(p).shape) for n, p in model.named_parameters()}
        result = FSDPRankResult(rank, world_size, state, shapes, local, float(loss.detach()))
        gathered: list[FSDPRankResult | None] = [None] * world_size
        dist.all_gather_object(gathered, result)
        if rank == 0:
            for r in gathered:
                out[r.rank] = r  # type: ignore[union-attr]
        # every rank leaves together: a rank that tears gloo down while a peer is still in the gather's last
        # exchange aborts that peer ("terminate called without an active exception", seen under a loaded suite)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def fsdp2_state_bytes(
    arch_json: str,
    world_size: int,
    *,
    micro_batch: int = 1,
    seq_len: int = 16,
    checkpoint: str = "none",
) -> list[FSDPRankResult]:
    """Train one step of the reference model with FSDP2 on CPU (gloo, ``world_size`` spawned processes).

    ``fully_shard`` on every block and then the root, ``MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=fp32)``, AdamW. Returns each rank's :class:`StateBytes` after ``optimizer.step()``, plus the
    unsharded and local parameter shapes. ``arch_json`` is ``Architecture.model_dump_json()``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "pg_init")
        manager = mp.Manager()
        out = manager.dict()
        try:
            mp.start_processes(
                _fsdp2_worker,
                args=(world_size, init_file, arch_json, micro_batch, seq_len, checkpoint, out),
                nprocs=world_size,
                join=True,
                start_method="spawn",
            )
        except mp.ProcessExitedException:
            # A rank that aborts in gloo's teardown ("terminate called without an active exception", seen under
            # a loaded machine) after every rank's figures were gathered has measured everything: rank 0 stores
            # them only after the all-gather, so a complete set is the measurement. Anything less is a failure.
            if len(out) != world_size:
                raise
        results = [out[r] for r in range(world_size)]
        manager.shutdown()
    return results
