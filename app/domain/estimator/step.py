"""Step time: compute per micro-batch and stage, exposed communication, pipeline bubble, optimizer.

    step = m·t_mb + (pp − 1)/vpp · t_mb          (1F1B / interleaved: bubble (pp−1)/(vpp·m) of the work)
         + pipeline point-to-point transfers
         + exposed data-parallel gradient reduction (once per step: no_sync under gradient accumulation)
         + optimizer step
    t_mb = max over pipeline ranks of (forward + backward + recompute
                                       + exposed TP, CP, EP and FSDP communication of one micro-batch)

Overlap rules: TP and EP collectives are on the critical path except the stack's overlapped share; each CP ring
transfer overlaps one ring step's attention (1/cp of the layer's) and the rest is exposed, with the ring's merges
and per-step kernels (context_parallel.py); FSDP/ZeRO-3 gathers and reduce-scatters overlap the micro-batch's compute
except the first unit's gather; DDP/ZeRO-1/2 and Megatron gradient reduction overlaps the last
micro-batch's backward except the last bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from app.domain.estimator.network import Groups
from app.domain.provenance import Frozen


@dataclass(frozen=True, slots=True)
class RankTime:
    """Seconds on one pipeline rank: one micro-batch's compute (forward + backward), recompute and exposed
    TP/CP/EP/FSDP communication; ``dp_s`` is the exposed per-step gradient reduction."""

    rank: int
    compute_s: float
    recompute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    fsdp_s: float
    micro_batch_s: float
    dp_s: float
    optimizer_s: float


class StepTime(Frozen):
    step_s: float
    micro_batches: int
    micro_batch_s: float
    compute_s: float = Field(description="forward + backward over the step on the slowest stage")
    recompute_s: float
    tp_exposed_s: float
    cp_exposed_s: float = Field(
        description="context parallelism's ring attention beyond the attention itself: transfers no ring step hides, "
        "merges of the partial results and the per-step kernels"
    )
    ep_exposed_s: float
    fsdp_exposed_s: float
    pp_p2p_s: float
    bubble_s: float
    dp_exposed_s: float
    optimizer_s: float
    sync_s: float = Field(
        default=0.0, description="waiting for the slowest rank at synchronous collectives (straggler term)"
    )
    slowest_rank: int
    ranks: tuple[RankTime, ...]
    groups: Groups
