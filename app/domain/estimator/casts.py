"""What casting 16-bit tensors into FP8 or NVFP4 GEMMs costs in HBM traffic, by recipe and GPU generation.

:func:`cast_bytes` is what :func:`app.domain.estimator.compute.layer_work` adds to a linear layer's memory-bound time
for plans whose GEMMs run below 16 bits (``Plan.precision.quantized_gemms``); :func:`fp8_cast_b` is the per-element
figure of one FP8 recipe (``Plan.fp8_recipe``). Sources: TE-FP8-RECIPES (Transformer Engine's documentation of its
recipes), Transformer Engine's cublaslt_gemm.cu (which GEMM layouts FP8 takes on Hopper and Blackwell), its
pytorch/csrc/quantizer.cpp (NVFP4's amax pass and Hadamard transform) and extensions/normalization.cpp (which recipes
the norm quantizes itself, :func:`norm_fed_cast_b`).
"""

from __future__ import annotations

from app.domain.estimator.plan import Fp8Recipe, Framework, Precision, resolve_fp8_recipe
from app.domain.estimator.saved_rows import NVFP4_ELEMENT_B

# HBM traffic per element to bring a 16-bit tensor into FP8 GEMMs, by recipe (Plan.fp8_recipe): (bytes read, bytes
# written per usage, whether each usage has scales of its own). A linear's three GEMMs use each tensor in two
# layouts — row-wise (forward, data gradient) and column-wise (weight gradient):
# * delayed (Transformer Engine's DelayedScaling): the scale comes from the amax history, so the cast reads the
#   tensor once and records its amax on the way: 2 B read;
# * tensorwise (TE's Float8CurrentScaling, torchao's tensorwise dynamic scaling): the scale is the tensor's current
#   amax, "two tensor reads per quantization: one to compute amax, one to cast" (TE's documentation): 4 B read;
# * rowwise (torchao): one scale per row for the row-wise copy and one per column for the column-wise copy, each
#   quantization with its own amax pass over the 16-bit tensor: 2 × (2 + 2) = 8 B read — from the recipe's
#   structure, not a measurement;
# * mxfp8 (TE's MXFP8BlockScaling, Blackwell): one E8M0 scale per 32 values along each layout's reduction axis,
#   computed inside the one cast that writes both copies: 2 B read, 1 + 1/32 B written per copy;
# * blockwise (TE's Float8BlockScaling, DeepSeek-V3's recipe): one FP32 scale per 128 values, likewise:
#   2 B read, 1 + 4/128 B written per copy.
# Per-tensor scales are the same in both layouts, so the copies only differ by a transpose, which Hopper's (and Ada's)
# FP8 GEMMs need ("Hopper only supports TN GEMMs for FP8", TE's cublaslt_gemm.cu) and Blackwell's do not ("Blackwell
# supports any GEMM layout for FP8"): under Transformer Engine on Blackwell a per-tensor recipe writes one copy.
FP8_CAST = {
    Fp8Recipe.delayed: (2.0, 1.0, False),
    Fp8Recipe.tensorwise: (4.0, 1.0, False),
    Fp8Recipe.rowwise: (8.0, 1.0, True),
    Fp8Recipe.mxfp8: (2.0, 1 + 1 / 32, True),
    Fp8Recipe.blockwise: (2.0, 1 + 4 / 128, True),
}
# NVFP4 (Transformer Engine's NVFP4BlockScaling): an element is 4 bits plus one E4M3 scale per 16 (0.5625 B), under a
# per-tensor FP32 scale from the tensor's current amax. TE's NVFP4Quantizer::quantize_impl (pytorch/csrc/quantizer.cpp)
# first reads the 16-bit tensor for that amax (nvte_compute_amax, or nvte_hadamard_transform_amax, which takes the
# amax of the input and of its Hadamard transform in one read), then:
# * without the random Hadamard transform (NVTE_NVFP4_DISABLE_RHT=1): one quantize pass writes both usages the three
#   GEMMs need — row-wise for the forward and data gradient, column-wise for the weight gradient:
#   2 + 2 + 2·0.5625 = 5.125 B per element;
# * with it (the recipe's default, on the weight gradient's operands): the row-wise usage is quantized from the input
#   and the column-wise one from the transformed transpose, in a second pass (the fused RHT-cast kernel):
#   2 + (2 + 0.5625) + (2 + 0.5625) = 7.125 B per element.
# The weight's copies are made once per step, as FP8's (its quantizer has no RHT).
NVFP4_AMAX_READ_B = 2.0
NVFP4_CAST_B = NVFP4_AMAX_READ_B + 2.0 + 2 * NVFP4_ELEMENT_B
NVFP4_RHT_CAST_B = NVFP4_AMAX_READ_B + 2 * (2.0 + NVFP4_ELEMENT_B)
# GPU generations whose FP8 GEMMs take any operand layout (no transposed copy for per-tensor scales)
FP8_ANY_LAYOUT_ARCHS = ("Blackwell",)


def fp8_cast_b(recipe: Fp8Recipe, any_layout: bool = False) -> float:
    """HBM bytes per element of one FP8 cast under ``recipe`` (:data:`FP8_CAST`): the reads plus a written copy per
    layout the GEMMs need — one when the GEMMs take ``any_layout`` and the recipe's scale is per tensor, else two.
    delayed 2 + 2·1 = 4 B (Hopper), 2 + 1 = 3 B (Blackwell); tensorwise 6 B, 5 B; rowwise 10 B; mxfp8 4.0625 B;
    blockwise 4.0625 B."""
    read, write, per_layout = FP8_CAST[recipe]
    return read + write * (2 if per_layout or not any_layout else 1)


def fp8_any_layout(arch: str) -> bool:
    """Whether a GPU of architecture ``arch`` runs FP8 GEMMs in any operand layout (:data:`FP8_ANY_LAYOUT_ARCHS`)."""
    return arch.startswith(FP8_ANY_LAYOUT_ARCHS)


def cast_element_b(framework: str, recipe: Fp8Recipe, any_layout: bool) -> float:
    """HBM bytes per element a ``framework`` pays to cast under ``recipe`` (``auto``: its default) on a GPU whose
    FP8 GEMMs take ``any_layout``: only Transformer Engine writes a single copy there; torchao (FSDP2) writes both
    layouts everywhere. Example: Megatron current scaling on Blackwell 5 B, FSDP2 tensorwise on Blackwell 6 B."""
    fw = Framework(framework)
    return fp8_cast_b(resolve_fp8_recipe(recipe, fw), any_layout and fw is not Framework.fsdp2)


def norm_fed_cast_b(
    framework: str, recipe: Fp8Recipe, any_layout: bool, precision: Precision, nvfp4_rht: bool = True
) -> float:
    """HBM bytes per element, beyond the 16-bit norm output the step already counts, of quantizing a GEMM input
    that Transformer Engine's fused norm produces (LayerNormLinear: Megatron's QKV and dense FC1), per TE's
    rmsnorm_fwd / layernorm_fwd (pytorch/csrc/extensions/normalization.cpp):
    * delayed scaling: the norm writes FP8 itself (FULLY_FUSED), one byte instead of the 16-bit output's two; where
      the GEMMs need the transposed copy (Hopper) a transpose kernel reads and writes it: −1 B on Blackwell, +1 B on
      Hopper;
    * current scaling (tensorwise) and NVFP4 without the Hadamard transform: the norm computes the amax on the way
      (FUSED_NORM_AMAX_*), so the quantize reads the tensor once: 2 + 1 B (Blackwell), 2 + 2 B (Hopper), NVFP4
      2 + 1.125 B;
    * MXFP8, block scaling (cuDNN's fused MXFP8 norm is opt-in) and NVFP4 with the transform: unfused, as any input.
    """
    if not norm_fuses_quantization(framework, recipe, precision, nvfp4_rht):
        return (
            NVFP4_RHT_CAST_B
            if precision is Precision.nvfp4
            else cast_element_b(framework, recipe, any_layout)
        )
    if precision is Precision.nvfp4:
        # without the transform the norm's amax saves the quantizer's
        return NVFP4_CAST_B - NVFP4_AMAX_READ_B
    copies = 1 if any_layout else 2
    if resolve_fp8_recipe(recipe, Framework(framework)) is Fp8Recipe.delayed:
        # the norm's FP8 write, the transpose kernel's read and write of the second copy, less the 16-bit write
        return 1.0 + (copies - 1) * 2.0 - 2.0
    return 2.0 + copies * 1.0  # current scaling: the quantize's one read and its copies


def norm_fuses_quantization(
    framework: str, recipe: Fp8Recipe, precision: Precision, nvfp4_rht: bool = True
) -> bool:
    """Whether Transformer Engine's fused norm takes part in quantizing its output (:func:`norm_fed_cast_b`,
    :func:`cast_kernels`): under delayed scaling it writes the FP8 itself, under current scaling and NVFP4 without the
    Hadamard transform it takes the amax; MXFP8, block scaling and NVFP4 with the transform stay unfused."""
    if precision is Precision.nvfp4:
        return not nvfp4_rht
    return resolve_fp8_recipe(recipe, Framework(framework)) in (Fp8Recipe.delayed, Fp8Recipe.tensorwise)


def cast_kernels(
    framework: str, precision: Precision, recipe: Fp8Recipe, nvfp4_rht: bool = True, norm_fed: bool = False
) -> int:
    """Kernels one quantization of a 16-bit tensor launches: one per pass over it (:data:`FP8_CAST`'s reads at 2 B
    a pass: delayed and the block-scaled recipes 1, tensorwise 2 — amax, then cast —, rowwise 4; NVFP4 2, or 3
    with the Hadamard transform). A tensor that Transformer Engine's fused norm produces (``norm_fed``) saves one:
    under delayed scaling the norm writes FP8 itself, under current scaling and NVFP4 without the transform it
    takes the amax on the way (:func:`norm_fed_cast_b`); MXFP8, block scaling and NVFP4 with the transform are
    unfused. Each launch costs the step ``kernel_overhead_us`` beyond its traffic (compute.layer_work)."""
    if precision is Precision.nvfp4:
        passes = 3 if nvfp4_rht else 2
    else:
        passes = round(FP8_CAST[resolve_fp8_recipe(recipe, Framework(framework))][0] / 2)
    return passes - (
        1 if norm_fed and norm_fuses_quantization(framework, recipe, precision, nvfp4_rht) else 0
    )


def amax_all_reduced(framework: str, precision: Precision, recipe: Fp8Recipe) -> bool:
    """Whether quantizing a sequence-parallel tensor waits for an all-reduce of its amax across the tensor-parallel
    group: the recipes whose one per-tensor scale comes from the tensor's current amax — current scaling
    (tensorwise: TE's Float8CurrentScalingQuantizer with ``with_amax_reduction`` over the TP group for a
    column-parallel input under sequence parallelism, linear.py / layernorm_linear.py / layernorm_mlp.py, and the
    row-parallel output gradient; torchao's tensorwise amax of a sharded DTensor) and NVFP4 (its per-tensor FP32
    scale, the same quantizer option). Delayed scaling reduces its amax history once per step; the block-scaled
    recipes (rowwise, MXFP8, blockwise) scale from local blocks."""
    if precision is Precision.nvfp4:
        return True
    return resolve_fp8_recipe(recipe, Framework(framework)) is Fp8Recipe.tensorwise


def cast_bytes(
    framework: str,
    m: float,
    n: float,
    k: float,
    groups: int = 1,
    precision: Precision = Precision.fp8,
    recipe: Fp8Recipe = Fp8Recipe.auto,
    any_layout: bool = False,
    nvfp4_rht: bool = True,
    input_shards: int = 1,
    grad_shards: int = 1,
    norm_fed: bool = False,
) -> tuple[float, float]:
    """(forward, backward) HBM bytes of one FP8 (or NVFP4) linear's casts, for its forward GEMM (m×k)·(k×n),
    ``groups`` of them. NVFP4 (Transformer Engine only): the input and the output gradient at
    :data:`NVFP4_RHT_CAST_B` each with the Hadamard transform (``nvfp4_rht``), :data:`NVFP4_CAST_B` without —
    m = 8,192, k = 4,096, n = 14,336: 7.125·8,192·4,096 = 239,075,328 B forward, 7.125·8,192·14,336 = 836,763,648 B
    backward (5.125 B: 171,966,464 B and 601,882,624 B). ``input_shards`` / ``grad_shards``: the input or output
    gradient is quantized on a 1/shards sequence shard (sequence parallelism); ``norm_fed``: the input comes from
    Transformer Engine's fused norm (:func:`norm_fed_cast_b`).

    Forward: the input (m·k) and the weight (k·n); backward: the output gradient (m·n), each at
    :func:`fp8_cast_b` of the ``recipe`` (``auto``: the framework's default,
    :func:`~app.domain.estimator.plan.default_fp8_recipe`); ``any_layout``: Transformer Engine on a GPU whose FP8
    GEMMs take any layout (Blackwell). Transformer Engine (Megatron, DeepSpeed) casts a weight once per step and
    reuses it over the micro-batches (``is_first_microbatch``): its weight casts are not counted. torchao under FSDP2
    re-casts the weight every micro-batch (FSDP2 gathers the bf16 weight for each). Example: torchao tensorwise,
    m = 8,192 tokens, k = 4,096, n = 14,336: forward 6·(8,192·4,096 + 4,096·14,336) = 553,648,128 B, backward
    6·8,192·14,336 = 704,643,072 B; Transformer Engine delayed on Hopper 134,217,728 B and 469,762,048 B, current
    scaling (tensorwise) on Blackwell 5 B an element: 167,772,160 B and 587,202,560 B."""
    if precision is Precision.nvfp4:
        b = NVFP4_RHT_CAST_B if nvfp4_rht else NVFP4_CAST_B
    else:
        b = cast_element_b(framework, recipe, any_layout)
        if Framework(framework) is Framework.fsdp2:
            return b * (m * k / input_shards + k * n) * groups, b * m * n * groups / grad_shards
    b_in = norm_fed_cast_b(framework, recipe, any_layout, precision, nvfp4_rht) if norm_fed else b
    return b_in * m * k * groups / input_shards, b * m * n * groups / grad_shards
