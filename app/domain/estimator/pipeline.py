"""How layers fall on pipeline ranks, and how many micro-batches each rank holds in flight.

Layers split into ``pp·vpp`` chunks of consecutive layers; rank ``r`` owns chunks ``r, r+pp, r+2·pp, …``. A
multi-token prediction module (``mtp`` of them, Megatron-Core's ``--mtp-num-layers``) is one more layer of the
model's last kind on the last rank, as Megatron-Core places it with the loss (its head passes: evaluate).
When ``n_layers`` does not divide evenly, the extra layers go to the middle chunks first, so the first and
last ranks (which also hold the embedding and the output layer and logits) are the lighter ones — what Llama
3 405B did with 126 layers over 16 stages.
"""

from __future__ import annotations

import re
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
    dense_layers: int  # including multi-token prediction layers of that kind
    moe_layers: int
    mtp_layers: int = 0  # multi-token prediction modules' layers (the last rank's; not in ``layers``)

    @property
    def n_layers(self) -> int:
        return len(self.layers) + self.mtp_layers

    def count(self, kind: LayerKind) -> int:
        return self.dense_layers if kind == "dense" else self.moe_layers


def chunk_layer_counts(n_layers: int, chunks: int, last_relief: int = 0) -> tuple[int, ...]:
    """Layers per chunk; the remainder goes to the middle chunks first. ``last_relief``: layers' worth of other work
    the last chunk holds (multi-token prediction, :func:`mtp_relief`): the split is of ``n_layers + last_relief``
    and the last chunk gives that many up — down to none, the rest then off the outermost other chunks."""
    if chunks < 1 or chunks > n_layers:
        raise ValueError(f"{chunks} chunks for {n_layers} layers")
    relief = last_relief if chunks > 1 else 0
    base, extra = divmod(n_layers + relief, chunks)
    order = sorted(range(chunks), key=lambda c: (abs(c - (chunks - 1) / 2), c))
    counts = [base] * chunks
    for c in order[:extra]:
        counts[c] += 1
    short = relief - min(relief, counts[-1])
    counts[-1] -= relief - short
    for c in reversed(order):
        if short and c != chunks - 1 and counts[c] > 0:
            counts[c] -= 1
            short -= 1
    return tuple(counts)


def mtp_relief(arch: Architecture, mtp: int) -> int:
    """Decoder layers the last stage gives up in capplan's split for ``mtp`` multi-token prediction modules: each
    module's layer plus its pass of the shared output head and its 2h→h projection, in units of one layer of the
    model's last kind by active weights (FLOPs a token ∝ weights), rounded: mtp·(1 + (1 + 2h/V)·V·h / W_layer).
    DeepSeek-V3: W = 0.583·10⁹, V·h = 0.927·10⁹ → 2.76 → 3 — the three layers Megatron-Bridge's DeepSeek-V3 layouts
    take off the stage holding MTP and the loss (4 → 1 of 16 stages, 8 → 5 of 8, 2 → 0 of 32)."""
    if not mtp:
        return 0
    from app.domain.model.counts import layer_parameter_counts, mtp_module_matmul_weights

    layer = layer_parameter_counts(arch, arch.layer_kinds()[-1]).matmul_weights_active
    return round(mtp * mtp_module_matmul_weights(arch) / layer)


class LayoutError(ValueError):
    """A pipeline layout string that cannot be read, or does not fit the model and plan."""


MAX_LAYOUT_LAYERS = (
    4096  # the most a repeat may ask for; an expanded layout holds at most 4× that many letters
)
_REPEAT_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_REPEAT_ONE = re.compile(r"(.)\*(\d+)")


def layout_stages(layout: str) -> tuple[str, ...]:
    """Megatron-Core's ``--pipeline-model-parallel-layout`` as one string of layer letters per virtual stage, in
    layer order: ``E`` the embedding, ``t`` a transformer (decoder) layer, ``m`` a multi-token prediction layer, ``L``
    the loss (output head); ``|`` ends a stage, ``(…)*n`` and ``x*n`` repeat, commas are cosmetic — the grammar of
    megatron/core/transformer/pipeline_parallel_layer_layout.py (parse_str_to_list). Example: DeepSeek-V3 on 1,024
    H100 (Megatron-Bridge's recipe) ``Et|(tt|)*30mL`` → ``Et``, 30 × ``tt``, ``mL``."""
    text = layout.replace(",", "").replace(" ", "")
    for pattern in (_REPEAT_GROUP, _REPEAT_ONE):
        # a repeat count is bounded before anything is expanded, and so is the expanded text: a short string must
        # not ask for gigabytes
        if any(int(m.group(2)) > MAX_LAYOUT_LAYERS for m in pattern.finditer(text)):
            raise LayoutError(f"a repeat count above {MAX_LAYOUT_LAYERS:,}")
        if (
            sum(len(m.group(1)) * int(m.group(2)) for m in pattern.finditer(text)) + len(text)
            > MAX_LAYOUT_LAYERS * 4
        ):
            raise LayoutError(f"the layout expands to more than {MAX_LAYOUT_LAYERS * 4:,} letters")
        text = pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)
    stages = tuple(text.split("|"))
    bad = sorted({ch for stage in stages for ch in stage} - set("EtmL"))
    if bad:
        raise LayoutError(f"unknown layer letter(s) {', '.join(bad)}: a layout uses E, t, m, L, | and (…)*n")
    return stages


def layout_problem(layout: str, n_layers: int, chunks: int, mtp: int) -> str | None:
    """Why ``layout`` does not fit a model of ``n_layers`` on ``chunks`` = pp·vpp virtual stages with ``mtp``
    multi-token prediction layers (Megatron-Core's checks: embedding first and loss last, once each; every decoder
    layer once; MTP layers after every decoder layer) — and capplan's: the MTP layers sit with the loss in the last
    stage (Megatron's standalone MTP stage is not modelled). None when it fits."""
    try:
        stages = layout_stages(layout)
    except LayoutError as exc:
        return str(exc)
    flat = "".join(stages)
    if len(stages) != chunks:
        return f"{len(stages)} stages where pp·vpp = {chunks}"
    if flat.count("E") != 1 or not stages[0].startswith("E"):
        return "the embedding E must open the first stage, once"
    if flat.count("L") != 1 or not stages[-1].endswith("L"):
        return "the loss L must close the last stage, once"
    if flat.count("t") != n_layers:
        return f"{flat.count('t')} transformer layers t where the model has {n_layers}"
    if flat.count("m") != mtp:
        return f"{flat.count('m')} MTP layers m where mtp_layers = {mtp}"
    if mtp and stages[-1].count("m") != mtp:
        return "the MTP layers m must share the last stage with the loss (a standalone MTP stage is not modelled)"
    if "t" in flat[flat.find("m") :] and mtp:
        return "decoder layers t must come before the MTP layers m"
    return None


def layout_counts(layout: str) -> tuple[int, ...]:
    """Transformer layers per virtual stage of a layout (see :func:`layout_stages`)."""
    return tuple(stage.count("t") for stage in layout_stages(layout))


def _mtp_on(arch: Architecture, rank: int, pp: int, mtp: int) -> tuple[int, int]:
    """(dense, MoE) multi-token prediction layers on ``rank``: ``mtp`` of the model's last layer kind on the last."""
    if rank != pp - 1 or not mtp:
        return 0, 0
    return (0, mtp) if arch.layer_kinds()[-1] == "moe" else (mtp, 0)


def rank_layers(
    arch: Architecture, pp: int, vpp: int, mtp: int = 0, counts: tuple[int, ...] | None = None
) -> tuple[RankLayers, ...]:
    """The layers of each pipeline rank: ``counts`` per virtual stage (a layout's, :func:`layout_counts`) or capplan's
    even split (:func:`chunk_layer_counts`), and ``mtp`` multi-token prediction layers on the last rank."""
    counts = counts or chunk_layer_counts(arch.n_layers, pp * vpp, mtp_relief(arch, mtp))
    starts = [sum(counts[:c]) for c in range(len(counts))]
    kinds = arch.layer_kinds()
    out = []
    for r in range(pp):
        layers = tuple(i for c in range(r, pp * vpp, pp) for i in range(starts[c], starts[c] + counts[c]))
        moe = sum(1 for i in layers if kinds[i] == "moe")
        extra_dense, extra_moe = _mtp_on(arch, r, pp, mtp)
        out.append(
            RankLayers(
                rank=r,
                first=r == 0,
                last=r == pp - 1,
                layers=layers,
                dense_layers=len(layers) - moe + extra_dense,
                moe_layers=moe + extra_moe,
                mtp_layers=extra_dense + extra_moe,
            )
        )
    return tuple(out)


def rank_counts(
    arch: Architecture, pp: int, vpp: int, mtp: int = 0, counts: tuple[int, ...] | None = None
) -> tuple[tuple[int, int, int, bool, bool], ...]:
    """(rank, dense layers, MoE layers, first, last) of each rank of :func:`rank_layers`, without its layer lists
    (the plan search asks for every pipeline of its space)."""
    counts = counts or chunk_layer_counts(arch.n_layers, pp * vpp, mtp_relief(arch, mtp))
    starts = list(accumulate(counts, initial=0))
    moe_before = list(accumulate((kind == "moe" for kind in arch.layer_kinds()), initial=0))
    out = []
    for r in range(pp):
        chunks = range(r, pp * vpp, pp)
        layers = sum(counts[c] for c in chunks)
        moe = sum(moe_before[starts[c + 1]] - moe_before[starts[c]] for c in chunks)
        extra_dense, extra_moe = _mtp_on(arch, r, pp, mtp)
        out.append((r, layers - moe + extra_dense, moe + extra_moe, r == 0, r == pp - 1))
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
