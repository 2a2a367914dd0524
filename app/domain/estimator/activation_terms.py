"""The building blocks of the activation-memory terms (:mod:`app.domain.estimator.activations` for the layers,
:mod:`app.domain.estimator.head_activations` for the embedding and the head): the per-rank sizes of a
micro-batch (:class:`Shape`), the rows of saved tensors a formula is rendered from (:class:`Terms`), the
accounting conventions (``FrameworkStyle``) and the element sizes of indices, fp32 statistics and masks."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from app.domain.model.architecture import Architecture
from app.domain.provenance import Frozen

FrameworkStyle = Literal["megatron", "torch"]

INDEX_BYTES = 8  # int64 token ids, routing indices
FP32_BYTES = 4
MASK_BYTES = 1  # Megatron dropout masks are uint8 / bool


class ActivationTerms(Frozen):
    """One layer's activation memory for one micro-batch on one rank."""

    saved_bytes: int = Field(description="kept from this layer's forward until its backward")
    peak_extra_bytes: int = Field(
        description="transient working set during this layer's backward (recomputed tensors + gradients)"
    )
    by_component: dict[str, int] = Field(description="saved_bytes split by component; adds up to saved_bytes")
    formula: str


class Terms:
    """Accumulates (component, label, symbolic expression, bytes) rows and renders the formula."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, int]] = []

    def add(self, component: str, label: str, expr: str, nbytes: int | float) -> None:
        value = math.ceil(nbytes)
        if value:
            self.rows.append((component, label, expr, value))

    def total(self) -> int:
        return sum(r[3] for r in self.rows)

    def by_component(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for component, _, _, value in self.rows:
            out[component] = out.get(component, 0) + value
        return out

    def render(self) -> str:
        return " + ".join(f"{label}[{expr}={value}]" for _, label, expr, value in self.rows) or "0"


def ceil_div(n: int, d: int) -> int:
    return -(-n // d)


def default_dropout(arch: Architecture, style: FrameworkStyle) -> bool:
    return style == "megatron" and arch.activation == "gelu"


def check_sizes(micro_batch: int, seq_len: int, tp: int, cp: int, act_bytes: int) -> None:
    for name, value in (("micro_batch", micro_batch), ("seq_len", seq_len), ("tp", tp), ("cp", cp)):
        if value < 1:
            raise ValueError(f"{name} must be ≥ 1, got {value}")
    if act_bytes not in (1, 2, 4):
        raise ValueError(f"act_bytes must be 1, 2 or 4, got {act_bytes}")


class Shape:
    """Per-rank sizes shared by the layer terms."""

    def __init__(
        self,
        arch: Architecture,
        micro_batch: int,
        seq_len: int,
        tp: int,
        cp: int,
        sp: bool,
        act_bytes: int,
        etp: int | None = None,
        gathered_inputs: bool = False,
    ) -> None:
        self.arch = arch
        self.b, self.t, self.c, self.sp = micro_batch, tp, cp, sp
        self.etp = tp if etp is None else etp
        self.s_local = ceil_div(seq_len, cp)  # sequence on this CP rank
        self.s_full = seq_len
        self.tokens = micro_batch * self.s_local  # T
        # the routed experts' tokens on this rank: an expert-TP group of etp ranks works on the sequence-parallel
        # shards of its etp members, T·etp/t (all T when etp = tp); each expert's FFN is split f_e/etp
        self.expert_tokens = self.tokens * self.etp // tp if self.etp < tp else self.tokens
        # their labels in the formulas: T and f_e/t when the experts' TP is tp
        self.te = "T" if self.etp == tp else f"T·{self.etp}/t"
        self.fe = "f_e/t" if self.etp == tp else "f_e/e"
        # replicated-across-TP tensors (norm inputs, linear inputs) are split over the sequence with SP
        self.tokens_rep = micro_batch * ceil_div(self.s_local, tp) if sp and tp > 1 else self.tokens
        self.tr = "T/t" if sp and tp > 1 else "T"
        # the input a column-parallel linear saves for its weight gradient: Megatron and Transformer Engine keep
        # the sequence-parallel shard and all-gather it again in the backward (T/t with SP); PyTorch DTensor's
        # tensor parallelism (torchtitan: PrepareModuleInput(Shard(1) -> Replicate()) before wq/wk/wv and
        # w1/w3) all-gathers the shard into a plain tensor that autograd keeps whole (T), once for the
        # linears that share it (``gathered_inputs``)
        gathered = gathered_inputs and tp > 1
        self.tokens_in = self.tokens if gathered else self.tokens_rep
        self.tin = "T" if gathered else self.tr
        self.B = act_bytes
        self.heads = ceil_div(arch.n_heads, tp)
        self.kv_heads = ceil_div(arch.n_kv_heads, tp)

    def sharded(self, width: int) -> int:
        return ceil_div(width, self.t)

    def expert_sharded(self, width: int) -> int:
        return ceil_div(width, self.etp)
