"""Which saved tensors of a layer two Megatron/Transformer Engine features change, on the rows
:mod:`app.domain.estimator.activations` builds — ``(component, label, expression, bytes)``:

* :func:`drop_recomputed` — Megatron's ``--recompute-modules`` (TransformerConfig.recompute_modules at
  core_v0.16.1): ``layernorm``, ``mla_up_proj`` and ``moe_act`` discard their outputs and re-run them in backward;
  ``mlp``, ``moe`` and ``shared_experts`` checkpoint their block (its input kept); ``core_attn`` is the attention
  core, handled by the caller (its default selective recompute).
* :func:`fp8_linear_inputs` — Transformer Engine under FP8 keeps the FP8 copy (1 byte) of a linear layer's input
  for its weight gradient, not the 16-bit tensor.
"""

from __future__ import annotations

import math

Row = tuple[str, str, str, int]

# What each module stops keeping: (component, row label) pairs, or a component with "*" (every row but the
# block's input).
MODULE_ROWS: dict[str, frozenset[tuple[str, str]]] = {
    "layernorm": frozenset({("attention", "qkv input"), ("mlp", "mlp input"), ("router", "router input")}),
    "mla_up_proj": frozenset(
        {("attention", "q, k (qk_head wide)"), ("attention", "v"), ("attention", "v (whole wkv_b output)")}
    ),  # fmt: skip
    "moe_act": frozenset({("experts", "expert activation output")}),
    "mlp": frozenset({("mlp", "*")}),
    "moe": frozenset({("router", "*"), ("experts", "*"), ("shared_experts", "*")}),
    "shared_experts": frozenset({("shared_experts", "*")}),
}
BLOCK_INPUTS = frozenset({("mlp", "mlp input"), ("router", "router input")})

# The share of each Megatron-style row that is a linear layer's input (the rest stays 16-bit). The router runs
# in fp32 and keeps its 16-bit input.
LINEAR_INPUT_SHARE: dict[tuple[str, str], float] = {
    ("attention", "qkv input"): 1.0,
    ("attention", "attention output = wo input"): 1.0,
    ("attention", "wo input"): 1.0,
    ("attention", "q latent (norm input, wq_b input)"): 0.5,
    ("attention", "kv latent norm out (wkv_b input)"): 1.0,
    ("mlp", "mlp input"): 1.0,
    ("mlp", "fc1 out (gate‖up), product"): 1 / 3,  # the product is fc2's input
    ("mlp", "gelu input, fc2 input"): 0.5,
    ("experts", "permuted tokens (fc1 input) + unpermute input"): 0.5,
    ("experts", "expert activation output"): 1.0,
}


def drop_recomputed(rows: list[Row], modules: frozenset[str]) -> tuple[list[Row], int]:
    """The rows ``modules`` still keep, and the bytes of those they re-materialise in backward."""
    kept: list[Row] = []
    dropped = 0
    for row in rows:
        component, label = row[0], row[1]
        gone = any(
            (component, label) in MODULE_ROWS[m]
            or ((component, "*") in MODULE_ROWS[m] and (component, label) not in BLOCK_INPUTS)
            for m in modules
            if m in MODULE_ROWS
        )
        if gone:
            dropped += row[3]
        else:
            kept.append(row)
    return kept, dropped


# an NVFP4 value: 4 bits and one E4M3 scale per block of 16 (Transformer Engine's NVFP4BlockScaling)
NVFP4_ELEMENT_B = 0.5 + 1 / 16


def fp8_linear_inputs(rows: list[Row]) -> list[Row]:
    """The rows with their linear-input share kept at 1 byte instead of 2 (``LINEAR_INPUT_SHARE``)."""
    return quantized_linear_inputs(rows, 1.0, "fp8")


def quantized_linear_inputs(rows: list[Row], element_bytes: float, what: str) -> list[Row]:
    """The rows with their linear-input share kept at ``element_bytes`` a value instead of 2: Transformer Engine
    saves a low-precision linear's input as the quantized copy its weight-gradient GEMM reads — FP8, 1 B; NVFP4,
    the column-wise copy, 0.5 B and one E4M3 scale per 16 values (0.5625 B)."""
    out: list[Row] = []
    for component, label, expr, value in rows:
        share = LINEAR_INPUT_SHARE.get((component, label), 0.0)
        kept = 1 - share * (1 - element_bytes / 2)
        out.append((component, label, expr + (f" ({what} inputs)" if share else ""), math.ceil(value * kept)))
    return out


# The rows that hold the fused attention's inputs (Q after rotary, K and V), which Transformer Engine's FP8 attention
# saves for its backward as the FP8 tensors it computed with
ATTENTION_INPUT_ROWS = frozenset({("attention", "q"), ("attention", "k, v")})


def fp8_attention_inputs(rows: list[Row], act_bytes: float) -> list[Row]:
    """The rows with the attention's inputs kept at 1 B a value instead of ``act_bytes`` (FP8 attention:
    Transformer Engine's FusedAttention saves the FP8 Q, K and V it ran on; its output is a linear's input,
    already counted at 1 B under FP8 / NVFP4 by :func:`quantized_linear_inputs`). Llama 3.1 8B at 8,192 tokens,
    tp 1: Q 8,192·32·128·2 = 67,108,864 B → 33,554,432 B, K and V 2·8,192·8·128·2 = 33,554,432 B → 16,777,216 B."""
    out: list[Row] = []
    for component, label, expr, value in rows:
        if (component, label) in ATTENTION_INPUT_ROWS:
            out.append((component, label, expr + " (FP8 attention)", math.ceil(value / act_bytes)))
        else:
            out.append((component, label, expr, value))
    return out
