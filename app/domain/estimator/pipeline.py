"""How layers fall on pipeline ranks, and how many micro-batches each rank holds in flight.

Layers split into ``pp·vpp`` chunks of consecutive layers; rank ``r`` owns chunks ``r, r+pp, r+2·pp, …``.
When ``n_layers`` does not divide evenly, the extra layers go to the middle chunks first, so the first and
last ranks (which also hold the embedding and the output layer and logits) are the lighter ones — what Llama
3 405B did with 126 layers over 16 stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from app.domain.estimator.xp import SCALAR
from app.domain.model.architecture import Architecture, LayerKind


@dataclass(frozen=True, slots=True)
class RankLayers:
    rank: int
    first: bool
    last: bool
    layers: tuple[int, ...]
    dense_layers: int
    moe_layers: int

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def count(self, kind: LayerKind) -> int:
        return self.dense_layers if kind == "dense" else self.moe_layers


def chunk_layer_counts(n_layers: int, chunks: int) -> tuple[int, ...]:
    """Layers per chunk; the remainder goes to the middle chunks first."""
    if chunks < 1 or chunks > n_layers:
        raise ValueError(f"{chunks} chunks for {n_layers} layers")
    base, extra = divmod(n_layers, chunks)
    order = sorted(range(chunks), key=lambda c: (abs(c - (chunks - 1) / 2), c))
    counts = [base] * chunks
    for c in order[:extra]:
        counts[c] += 1
    return tuple(counts)


def rank_layers(arch: Architecture, pp: int, vpp: int) -> tuple[RankLayers, ...]:
    counts = chunk_layer_counts(arch.n_layers, pp * vpp)
    starts = [sum(counts[:c]) for c in range(len(counts))]
    kinds = arch.layer_kinds()
    out = []
    for r in range(pp):
        layers = tuple(i for c in range(r, pp * vpp, pp) for i in range(starts[c], starts[c] + counts[c]))
        moe = sum(1 for i in layers if kinds[i] == "moe")
        out.append(
            RankLayers(
                rank=r,
                first=r == 0,
                last=r == pp - 1,
                layers=layers,
                dense_layers=len(layers) - moe,
                moe_layers=moe,
            )
        )
    return tuple(out)


def rank_counts(arch: Architecture, pp: int, vpp: int) -> tuple[tuple[int, int, int, bool, bool], ...]:
    """(rank, dense layers, MoE layers, first, last) of each rank of :func:`rank_layers`, without its layer lists
    (the plan search asks for every pipeline of its space)."""
    counts = chunk_layer_counts(arch.n_layers, pp * vpp)
    starts = list(accumulate(counts, initial=0))
    moe_before = list(accumulate((kind == "moe" for kind in arch.layer_kinds()), initial=0))
    out = []
    for r in range(pp):
        chunks = range(r, pp * vpp, pp)
        layers = sum(counts[c] for c in chunks)
        moe = sum(moe_before[starts[c + 1]] - moe_before[starts[c]] for c in chunks)
        out.append((r, layers - moe, moe, r == 0, r == pp - 1))
    return tuple(out)


def inflight_microbatches(rank, pp, vpp, micro_batches, xp=SCALAR):
    """Micro-batches whose activations rank ``rank`` holds at its peak, in units of *all its layers*.

    1F1B: rank r has ``pp − r`` micro-batches in flight (the first stage ``pp``), capped by the number of
    micro-batches. Interleaved 1F1B (Megatron): the warm-up holds ``2·(pp − r − 1) + (vpp − 1)·pp + 1``
    chunk-micro-batches, each 1/vpp of the rank's layers; for rank 0 that equals Megatron's
    ``pp · (1 + (pp − 1)/(pp · vpp))``. Works on numbers and on numpy arrays (``xp``).
    """
    one_f_one_b = xp.minimum(micro_batches, pp - rank)
    interleaved = xp.minimum(micro_batches * vpp, 2 * (pp - rank - 1) + (vpp - 1) * pp + 1) / vpp
    return xp.where(pp == 1, 1.0, xp.where(vpp == 1, one_f_one_b * 1.0, interleaved))
