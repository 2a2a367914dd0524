"""FLOPs (model and hardware) and compute time per micro-batch on one rank.

Model FLOPs per token (the MFU numerator), stated formula:
    6·N_matmul  +  6·L·s·a·(d_qk + d_v) / 2          (causal attention: half of the s×s matrix)
where N_matmul counts every GEMM weight a token passes through (output head included, embedding lookup
excluded; for MoE only top-k and shared experts). Hardware FLOPs add recompute: full recompute repeats every
layer's forward (+2·N_layers + the attention forward), selective repeats the attention core forward.

Compute time, shape-aware: every GEMM (m×k by k×n) is timed from its own shape (:meth:`GemmRates.seconds`):

    t = max(2·m·n·(k + k₀) / (peak · gemm_efficiency · wave(m, n)),  bytes(m, n, k) / (HBM · hbm_efficiency))
        + gemm_overhead

where k₀ (``gemm_tile_fixed_k``) is each output tile's fixed cost — loading the first operand stages and
storing the tile — in steps of the reduction length: a GEMM with a short reduction (the output projection and
second MLP GEMM after a TP split, small models) runs at k/(k + k₀) of the rate (H800, M = N = 8192: K = 1024
at 82 % of K = 16,384, source TILELANG-H800-KSWEEP); wave(m, n) is the tile/wave quantisation of :func:`wave_efficiency` (a GEMM's output tiles run in waves
of one tile per SM; the last wave and the padding of edge tiles do useful work only in part — after a TP or CP
split the GEMMs shrink and lose more of it) and the second term is the roofline bound of a GEMM too thin to be
compute-bound. The backward runs each GEMM twice with transposed shapes (data gradient m×n·n×k, weight
gradient k×m·m×n). FP8 GEMMs (precision fp8) run against the FP8 peak at fp8_gemm_ratio × gemm_efficiency and
add the casts of their inputs by recipe (app/domain/estimator/casts.py: on the sequence shard under sequence
parallelism, fused into the norm for the inputs of Transformer Engine's LayerNormLinear); NVFP4 GEMMs (precision nvfp4,
the transformer layers' linears) against the FP4 peak at fp4_gemm_ratio × gemm_efficiency, with their quantization
(7.125 B an element with the Hadamard transform, 5.125 B without). Fused attention's forward + backward takes
3F/(peak·attention_efficiency(kernel)) (:func:`attention_efficiency`; F the forward FLOPs, the backward counted
2F as the model FLOPs count it), split between the passes by the kernel's own rates: the backward takes
ATTENTION_BACKWARD_RATIO (2.75, FlashAttention-3's measured forward and backward rates) times the forward's time,
so a recomputed attention forward costs 27 % of the pair, not a third;
memory-bound kernels (norms, residual adds, rotary, activation function, softmax/cross-entropy, optimizer) take
bytes/(HBM bandwidth·hbm_efficiency). Backward = 2× forward memory traffic (and 2× an unfused attention's GEMMs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from pydantic import Field

from app.domain.estimator.casts import amax_all_reduced, cast_bytes, cast_kernels, fp8_any_layout
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.context_parallel import ATTENTION_BACKWARD_RATIO
from app.domain.estimator.moe_load import capped_load_factor, expert_load_factor
from app.domain.estimator.network import group_shape, small_all_reduce_seconds
from app.domain.estimator.plan import Framework, Plan, Precision, Recompute, RecomputeModule
from app.domain.estimator.saved_rows import NVFP4_ELEMENT_B
from app.domain.estimator.xp import SCALAR
from app.domain.model.architecture import Architecture, LayerKind
from app.domain.model.counts import attention_projection_weights, kv_dim, mtp_module_matmul_weights, q_dim
from app.domain.provenance import Frozen

# HBM bytes moved per activation element in the forward, by op, with fused kernels vs eager PyTorch.
# Eager RMSNorm upcasts to fp32 and runs ~7 kernels (x.float, pow, mean, rsqrt, mul, type_as, mul ≈ 38 B per
# element); a fused norm reads and writes once (4 B). Eager rotary goes through fp32 complex numbers
# (~20 B per q/k element) vs 4 B fused. SwiGLU: silu + mul eager ≈ 10 B per FFN element vs 6 B fused.
# Residual adds read two and write one 16-bit tensor (6 B) either way. Cross-entropy over the vocabulary, forward
# and backward together: eager PyTorch casts the 16-bit logits to fp32 (read 2, write 4), its log-softmax reads
# each row three times (max, sum of exponentials, output — a row of 32K+ fp32 logits does not fit in shared
# memory) and writes the fp32 result (16), the NLL backward writes a zero-filled fp32 gradient (4), the
# log-softmax backward reads it twice and the saved output once and writes the input gradient (16) and the cast
# back to 16 bits reads 4 and writes 2: 48 B per logit. Megatron's vocab-parallel cross-entropy does the same in
# fp32 (calculate_logits_max casts .float(); in-place subtract, exp, sum and divide; the backward's multiply and
# cast: 52 B; its jit-fused variant ~40 B). A fused kernel (Liger, flash-attn's, Transformer Engine's Triton
# cross-entropy) reads the 16-bit logits and writes their gradient in place: ~6 B.
# The z-loss (PaLM's (log Σ exp logits)², OLMo's z_loss_multiplier) in eager PyTorch is logits.logsumexp(-1) and its
# gradient as separate passes over the fp32 logits (torch aten ReduceOps.cpp logsumexp_out_impl: amax reads 4,
# self − max reads 4 and writes 4, exp_ in place reads 4 and writes 4, sum reads 4: 24 B; logsumexp_backward's
# grad · (self − result).exp(): three element-wise kernels of read 4, write 4: 24 B) and autograd adds its gradient
# to the cross-entropy's (read 4 + 4, write 4: 12 B): 60 B per logit. A fused or compiled loss computes the
# log-sum-exp it already has (OLMo-core's Triton cross-entropy, Liger's lse_square_scale, inductor): ~0 B more.
TRAFFIC_BYTES = {
    True: {"norm": 4.0, "residual": 6.0, "rotary": 4.0, "glu": 6.0, "gelu": 4.0, "logit": 6.0, "z_loss": 0.0},
    False: {
        "norm": 38.0,
        "residual": 6.0,
        "rotary": 20.0,
        "glu": 10.0,
        "gelu": 8.0,
        "logit": 48.0,
        "z_loss": 60.0,
    },
}

# Memory-bound kernels one layer's forward launches, by kind, fused (Transformer Engine, Megatron's fused kernels,
# torch.compile) or eager PyTorch: a norm (eager RMSNorm: cast, square, mean, add + rsqrt, two multiplies), a residual
# add, the rotary embedding of q and of k (eager: cast, complex multiply, cast back, each), the activation function
# (eager SwiGLU: SiLU, multiply), and a MoE layer's router (score function, top-k) with its token permute and
# unpermute. The backward launches twice as many, as it moves twice the traffic (TRAFFIC_BYTES). Each launch costs
# ``scale.kernel_overhead_us`` beyond its bytes: its launch gap and the ramp and tail of a grid (layer_work).
ELEMENTWISE_KERNELS = {
    True: {"norm": 1, "residual": 1, "rotary": 2, "glu": 1, "gelu": 1, "moe": 4},
    False: {"norm": 6, "residual": 1, "rotary": 6, "glu": 2, "gelu": 1, "moe": 8},
}


class FlopsPerToken(Frozen):
    matmul: float
    attention: float
    total: float
    formula: str


def attention_flops_per_token(arch: Architecture, seq_len: int, causal: bool = True) -> float:
    """Forward+backward attention-core FLOPs per token: 6·L·s·a·(d_qk + d_v), halved if causal.

    Forward: Q·Kᵀ is 2·s·a·d_qk and P·V is 2·s·a·d_v FLOPs per token; backward doubles it (×3 in all). For
    MHA with d = h/a that is 12·L·s·h, Megatron's non-causal ``s/(6h)`` term of the 72-form."""
    per_layer = 6 * seq_len * arch.n_heads * (arch.qk_head_dim + arch.value_head_dim)
    return arch.n_layers * per_layer * (0.5 if causal else 1.0)


def model_flops_per_token(
    arch: Architecture, seq_len: int, matmul_weights_active: int, causal: bool = True, mtp_layers: int = 0
) -> FlopsPerToken:
    """Model FLOPs a token trains with; each multi-token prediction module adds one layer of the model's last kind
    (its matmul weights and attention core), one more pass of the shared output head (V·h) and its 2h→h projection
    — 6 FLOPs a weight — as NVIDIA's model TFLOP/s count it (DeepSeek-V3: 260 GFLOP a token with MTP, 250 without)."""
    matmul = 6.0 * matmul_weights_active
    attention = attention_flops_per_token(arch, seq_len, causal)
    if mtp_layers:
        matmul += 6.0 * mtp_layers * mtp_module_matmul_weights(arch)
        attention += mtp_layers * attention / arch.n_layers
    return FlopsPerToken(
        matmul=matmul,
        attention=attention,
        total=matmul + attention,
        formula="6·N_matmul_active + 6·L·s·a·(d_qk+d_v)"
        + (" × 1/2 for the attention term (causal)" if causal else " (non-causal attention)")
        + (
            f", + {mtp_layers} MTP module(s): a layer, a head pass and a 2h→h projection each"
            if mtp_layers
            else ""
        ),
    )


def hardware_flops_per_token(
    model: FlopsPerToken, arch: Architecture, plan: Plan, head_weights: int
) -> float:
    """Model FLOPs plus what recompute repeats (forward = 1/3 of forward+backward); full recompute of only
    ``recompute_layers`` per chunk repeats that share of the layers' forward."""
    if plan.recompute is Recompute.full:
        share = plan.recompute_share(arch.n_layers)
        return model.total + share * ((model.matmul - 6.0 * head_weights) / 3 + model.attention / 3)
    if plan.recompute is Recompute.selective:
        return model.total + model.attention / 3
    if plan.recompute is Recompute.selective_op:
        return model.total + (model.matmul - 6.0 * head_weights) / 3 * selective_op_matmul_share(arch)
    return model.total


def selective_op_matmul_share(arch: Architecture) -> float:
    """Share of a dense block's matmul FLOPs per-op selective AC recomputes: the even matmuls of the block in
    forward order (Llama: wk, wo, w3 of wq, wk, wv, wo, w1, w3, w2; GELU: wk, wo, w2 of wq, wk, wv, wo, w1, w2)."""
    h, q, kv = arch.hidden_size, q_dim(arch), kv_dim(arch)
    f = arch.ffn_hidden_size if not arch.is_moe else (arch.expert_ffn_hidden_size or arch.ffn_hidden_size)
    mlp = (h * f, h * f, f * h) if arch.activation == "swiglu" else (h * f, f * h)
    weights = (h * q, h * kv, h * kv, q * h, *mlp)
    return sum(w for i, w in enumerate(weights) if i % 2 == 1) / sum(weights)


class LayerTimes(Frozen):
    """Seconds for one layer of one kind, one micro-batch, on one rank."""

    gemm_fwd_s: float
    attention_fwd_s: float
    memory_fwd_s: float
    fwd_s: float
    bwd_s: float
    recompute_s: float
    gemms: int = Field(description="GEMM launches in the forward")


# Threadblock tiles (rows × columns of the output) a cuBLAS/CUTLASS GEMM picks from, with the rate of a full
# tile relative to a 128×128 tile. A smaller tile reuses each operand it loads fewer times (arithmetic
# intensity MN/(M+N): 64 for 128×128, 43 for 128×64, 32 for 64×64); its rate is assumed to scale with the
# square root of that intensity. The library picks the tile that finishes soonest.
GEMM_TILES: tuple[tuple[int, int, float], ...] = (
    (128, 256, 1.0),
    (128, 128, 1.0),
    (128, 64, 0.82),
    (64, 64, 0.71),
)


@lru_cache(maxsize=1 << 16)
def wave_efficiency(m: float, n: float, sm_count: int | None, groups: int = 1) -> float:
    """Fraction of the SMs' tile throughput a GEMM with an m×n output (``groups`` of them, grouped) uses.

    tiles = groups·⌈m/tm⌉·⌈n/tn⌉ run in ⌈tiles/SMs⌉ waves; useful = m·n/(⌈m/tm⌉tm·⌈n/tn⌉tn) of each tile's work.
    Efficiency = rate(tile) · useful · tiles / (waves · SMs), best tile chosen. 1.0 when the SM count is unknown.
    Example (H100, 132 SMs): m = 8192, n = 2304 → 128×128 tiles: 64·18 = 1,152 tiles in 9 waves → 0.97;
    m = 1024 (CP 8 at 8K tokens) → 144 tiles in 2 waves (0.55), 64×64: 576 tiles in 5 waves (0.87 × 0.71 = 0.62).
    """
    if not sm_count or m <= 0 or n <= 0:
        return 1.0
    best = 0.0
    for tm, tn, rate in GEMM_TILES:
        rows, cols = math.ceil(m / tm), math.ceil(n / tn)
        tiles = groups * rows * cols
        waves = math.ceil(tiles / sm_count)
        useful = (m * n) / (rows * tm * cols * tn)
        best = max(best, rate * useful * tiles / (waves * sm_count))
    return best


# bytes a GEMM operand element occupies, by precision (16-bit otherwise)
GEMM_ELEMENT_B = {Precision.fp8: 1.0, Precision.nvfp4: NVFP4_ELEMENT_B, Precision.fp32: 4.0}


@dataclass(frozen=True, slots=True)
class GemmRates:
    """What every GEMM of one precision on one cluster shares: FLOP/s it reaches before wave quantisation, HBM
    bytes/s, element size, SM count and launch overhead (computed once per layer, not once per GEMM)."""

    flops_per_s: float
    hbm_bytes_per_s: float
    elem_bytes: float
    sm_count: int | None
    overhead_s: float
    tile_fixed_k: float = 0.0

    @classmethod
    def of(cls, cluster: Cluster, precision: Precision) -> GemmRates:
        eff = cluster.efficiency
        ratio = (
            cluster.scale.fp8_gemm_ratio if precision is Precision.fp8
            else cluster.scale.fp4_gemm_ratio if precision is Precision.nvfp4
            else 1.0
        )  # fmt: skip
        rate = eff.gemm_efficiency * ratio
        return cls(
            flops_per_s=_linear_peak(cluster, precision) * rate,
            hbm_bytes_per_s=cluster.hbm_bytes_per_s * eff.hbm_efficiency,
            elem_bytes=GEMM_ELEMENT_B.get(precision, 2.0),
            sm_count=cluster.accelerator.sm_count,
            overhead_s=eff.gemm_overhead_us * 1e-6,
            tile_fixed_k=eff.gemm_tile_fixed_k,
        )

    def seconds(self, m: float, n: float, k: float, groups: int = 1) -> float:
        """``groups`` GEMMs (m×k)·(k×n): compute- or memory-bound (each tile's fixed cost adds ``tile_fixed_k``
        steps to its reduction), plus the launch overhead."""
        flops = 2.0 * m * n * (k + self.tile_fixed_k) * groups
        compute = flops / (self.flops_per_s * wave_efficiency(m, n, self.sm_count, groups))
        memory = self.elem_bytes * (m * k + k * n + m * n) * groups / self.hbm_bytes_per_s
        return max(compute, memory) + self.overhead_s

    def fwd_bwd(self, m: float, n: float, k: float, groups: int = 1) -> tuple[float, float]:
        """(forward, backward) of a linear layer: forward m×k·k×n; backward data gradient m×n·n×k and weight
        gradient k×m·m×n (the token dimension becomes the reduction)."""
        fwd = self.seconds(m, n, k, groups)
        return fwd, self.seconds(m, k, n, groups) + self.seconds(k, n, m, groups)


def attention_efficiency(cluster: Cluster, plan: Plan) -> float:
    """Fraction of peak the fused attention kernel reaches. ``attention_efficiency`` is FlashAttention-2's (what
    PyTorch SDPA's flash backend runs); a stack whose profile runs cuDNN fused attention (Transformer Engine) gets
    ``scale.cudnn_attention_ratio`` × that on Hopper and Blackwell, where cuDNN's kernels use the asynchronous
    tensor cores (wgmma/TMA) FlashAttention-2 does not — FA3 reports 1.5–2× FA2 on H100. On Ampere TE falls back
    to the FA2-class kernel (ratio 1). FlashAttention-1-class kernels (what stacks ran before FA2, July 2023) run at
    ``scale.fa1_attention_ratio`` × FA2 (FA2 reports ~2× FA1). FlashAttention-3 (Hopper) and FlashAttention-4 (its
    Blackwell successor, also built for Hopper) run at their own rate, the GPU's ``fa3_attention_efficiency`` of peak
    (the FA3 paper's 493 TFLOP/s forward+backward on H100, 0.50), not a multiple of the FA2-class rate; FA3 does not
    run on Blackwell nor FA3/FA4 on Ampere, where the FA2-class rate applies. ``attention_efficiency`` is the long-sequence rate; a block of L tokens
    runs at L/(L + ``scale.attention_half_length``) of it. FP8 attention (``plan.fp8_attention``, Transformer Engine's
    fp8_dot_product_attention) runs ``efficiency.fp8_attention_speedup`` × faster than the same kernel in BF16 — a
    time ratio at equal work, so the rate is expressed against the BF16 peak still (GB200 1.14, GB300 1.30 from
    cuDNN's own benchmark; 1 where none is measured). Under context parallelism (cp > 1) every ring step's kernel
    runs at ``scale.ring_attention_ratio`` × the rate of the same kernel on the same block outside a ring (fitted on
    the published CP runs, both Transformer Engine's and PyTorch's rings; prior 1): what a step loses beyond the
    transfers, merges and launches :mod:`app.domain.estimator.context_parallel` counts. All-gather CP
    (``plan.cp_gathers_kv``) runs no ring: its kernels attend whole prefixes, at the rate of the whole sequence."""
    fp8 = cluster.efficiency.fp8_attention_speedup if plan.fp8_attention else 1.0
    # Short blocks run further from peak (per-block softmax rescaling, tails, launch): the kernel's rate grows as
    # L/(L + L½) with the block length L — the sequence, or its 1/cp chunk under context parallelism, where each
    # ring step attends one chunk to another (FlashAttention-2's forward+backward sweep: ~0.6 of its long-sequence
    # rate at 512 tokens, ~0.8 at 1K, ~0.9 at 2K).
    # Under all-gather CP there is no ring: each query chunk attends its whole causal prefix (s/2 keys on average)
    block = plan.seq_len if plan.cp_gathers_kv else plan.seq_len / plan.cp
    half = cluster.scale.attention_half_length
    short = block / (block + half)
    # a ring step's kernel shares its SMs and HBM with the step's send/receive
    ring = cluster.scale.ring_attention_ratio if plan.cp > 1 and not plan.cp_gathers_kv else 1.0
    block_rate = short * ring  # of the kernel's long-sequence rate outside a ring
    kernel = plan.attention_kernel
    if kernel == "auto":
        kernel = cluster.stack(plan.framework.value).attention_kernel
    arch = cluster.accelerator.arch
    own = cluster.efficiency.fa3_attention_efficiency
    if own is not None and (
        (kernel == "fa3" and arch.startswith("Hopper"))
        or (kernel == "fa4" and arch.startswith(("Hopper", "Blackwell")))
    ):
        return own * block_rate * fp8
    eff = cluster.efficiency.attention_efficiency * block_rate
    if kernel == "fa1":
        eff = eff * cluster.scale.fa1_attention_ratio
    elif kernel == "cudnn" and arch.startswith(("Hopper", "Blackwell")):
        eff = min(0.95, eff * cluster.scale.cudnn_attention_ratio)
    return eff * fp8


def _linear_peak(cluster: Cluster, precision: Precision) -> float:
    return cluster.peak_flops_for(precision.value)


@dataclass(frozen=True, slots=True)
class LayerWork:
    """One layer's seconds before its recompute term (:func:`layer_work`): what every recompute mode of the same
    (tp, cp, micro-batch, ep) shares, so the plan search times a layer once for all of them."""

    gemm_fwd_s: float
    attention_fwd_s: float
    memory_fwd_s: float
    fwd_s: float
    bwd_s: float
    score_s: float  # the unfused attention's score traffic (HBM seconds); 0 with flash attention
    gemms: int
    modules_s: float | None = None  # selective recompute of the plan's named Megatron modules

    def recompute_s(self, arch: Architecture, recompute: Recompute) -> float:
        """Seconds ``recompute`` repeats in the backward."""
        if recompute is Recompute.full:
            return self.fwd_s
        if recompute is Recompute.selective:
            return self.attention_fwd_s + self.score_s if self.modules_s is None else self.modules_s
        if recompute is Recompute.selective_op:
            # the even matmuls and every elementwise op (norms, rotary, activation function) run again
            return self.gemm_fwd_s * selective_op_matmul_share(arch) + self.memory_fwd_s
        return 0.0


def layer_times(arch: Architecture, kind: LayerKind, plan: Plan, cluster: Cluster) -> LayerTimes:
    """Seconds for one ``kind`` layer of ``plan``, one micro-batch on one rank (:func:`layer_work` and its
    recompute term)."""
    w = layer_work(arch, kind, plan, cluster)
    return LayerTimes(
        gemm_fwd_s=w.gemm_fwd_s, attention_fwd_s=w.attention_fwd_s, memory_fwd_s=w.memory_fwd_s, fwd_s=w.fwd_s,
        bwd_s=w.bwd_s, recompute_s=w.recompute_s(arch, plan.recompute), gemms=w.gemms,
    )  # fmt: skip


def layer_work(arch: Architecture, kind: LayerKind, plan: Plan, cluster: Cluster) -> LayerWork:
    """:func:`layer_times` without the recompute term (``plan.recompute`` is not read)."""
    tp, cp = plan.tp, plan.cp
    tokens = plan.micro_batch * plan.seq_len / cp
    h = arch.hidden_size
    fused = plan.uses_fused_kernels
    traffic_b = TRAFFIC_BYTES[fused]
    peak_attn = cluster.peak_flops_for("fp32" if plan.precision is Precision.fp32 else "bf16")
    hbm = cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency
    act = 4 if plan.precision is Precision.fp32 else 2

    # GEMMs, each from its shape: (m, n, k, groups) per forward GEMM on this rank
    shapes: list[tuple[float, float, float, int]] = []
    # the GEMMs whose input a fused norm produces (Transformer Engine's LayerNormLinear)
    norm_fed: set[int] = set()
    if arch.attention == "mla":
        # MLA's down/up projections: one GEMM per projection would need the LoRA ranks; keep the FLOPs in one
        # GEMM of the same reduction width (h) and output width.
        shapes.append((tokens, attention_projection_weights(arch) / (h * tp), h, 1))
        gemms = 6
    else:
        qkv = (q_dim(arch) + 2 * kv_dim(arch)) / tp
        if fused:
            norm_fed.add(len(shapes))
            shapes.append((tokens, qkv, h, 1))
        else:
            shapes += [
                (tokens, q_dim(arch) / tp, h, 1),
                (tokens, kv_dim(arch) / tp, h, 1),
                (tokens, kv_dim(arch) / tp, h, 1),
            ]
        shapes.append((tokens, h, q_dim(arch) / tp, 1))
        gemms = 2 if fused else 4
    glu = arch.activation == "swiglu"
    act_width = 0.0  # activation-function (+ MoE permute) HBM bytes per token, 16-bit activations
    kernels_b = ELEMENTWISE_KERNELS[fused]
    act_kernels = kernels_b["glu" if glu else "gelu"]
    kernels = (
        2 * kernels_b["norm"]
        + 2 * kernels_b["residual"]
        + (kernels_b["rotary"] if arch.position == "rotary" else 0)
    )

    def mlp(width: float, m: float, groups: int) -> None:
        shapes.append((m, (2 if glu else 1) * width, h, groups))
        shapes.append((m, h, width, groups))

    if kind == "dense":
        if fused:
            norm_fed.add(len(shapes))
        mlp(arch.ffn_hidden_size / tp, tokens, 1)
        gemms += 2 if (fused or arch.activation == "gelu") else 3
        kernels += act_kernels
        act_width += traffic_b["glu" if glu else "gelu"] * arch.ffn_hidden_size / tp
    else:
        k, e, ep = arch.experts_top_k, arch.n_experts, plan.ep
        fe = arch.expert_ffn_hidden_size or 0
        local_experts = max(1, e // ep)
        # an expert-TP group of etp ranks runs its experts on its members' sequence shards (all tokens when
        # etp = tp), each expert's FFN split fe/etp (whole with etp = 1: MoE parallel folding)
        expert_tokens = tokens * plan.etp / tp
        # the EP group's tokens·ep·k expert slots spread over e experts; this rank holds e/ep of them and, as the
        # busiest rank sets the layer's pace, gets the expected maximum load (moe_load.expert_load_factor)
        load = capped_load_factor(
            SCALAR,
            expert_load_factor(SCALAR, expert_tokens * k, ep, e, k),
            plan.moe_capacity_factor or 0.0,
            plan.moe_pad_to_capacity,
        )
        mlp(fe / plan.etp, expert_tokens * ep * k / e * load, local_experts)
        per_expert = 2 if arch.activation == "gelu" else 3
        gemms += per_expert * (1 if fused else local_experts) + 1  # grouped GEMM when fused; + router
        shapes.append((tokens, e, h, 1))  # router
        kernels += kernels_b["moe"] + act_kernels * (1 if fused else local_experts)
        g = traffic_b["glu" if glu else "gelu"]
        act_width += (
            g * fe * k / tp + 8 * h * k * plan.etp / tp
        ) * load  # + permute/unpermute of routed tokens
        if arch.n_shared_experts:
            fs = arch.shared_expert_ffn_hidden_size or fe
            mlp(arch.n_shared_experts * fs / tp, tokens, 1)
            gemms += per_expert
            kernels += act_kernels
            act_width += g * fs * arch.n_shared_experts / tp
    gemm_fwd = gemm_bwd = 0.0
    cast_fwd_b = cast_bwd_b = 0.0
    rates = GemmRates.of(cluster, plan.precision)
    any_layout = fp8_any_layout(cluster.accelerator.arch)
    sp = tp if plan.sequence_parallel and tp > 1 else 1
    te_norm = plan.framework is Framework.megatron
    cast_kernels_fwd = cast_kernels_bwd = amax_fwd = amax_bwd = 0
    fw = plan.framework.value
    # an output gradient is never norm-fed: every GEMM's backward quantization launches the same kernels
    grad_cast_kernels = cast_kernels(fw, plan.precision, plan.fp8_recipe, plan.nvfp4_rht)
    amax_reduced = plan.precision.quantized_gemms and amax_all_reduced(fw, plan.precision, plan.fp8_recipe)
    for i, (m, n, kk, groups) in enumerate(shapes):
        f, b = rates.fwd_bwd(m, n, kk, groups)
        gemm_fwd += f
        gemm_bwd += b
        if plan.precision.quantized_gemms:
            # under sequence parallelism a column-parallel GEMM's input (h wide) and a row-parallel GEMM's output
            # gradient (h wide) are quantized on the rank's sequence shard, before their all-gather
            sequence_rows = groups == 1 and m == tokens
            input_shards = sp if sequence_rows and kk == h else 1
            grad_shards = sp if sequence_rows and n == h else 1
            fed = te_norm and i in norm_fed
            cf, cb = cast_bytes(
                fw, m, n, kk, groups, plan.precision, plan.fp8_recipe, any_layout, plan.nvfp4_rht,
                input_shards=input_shards, grad_shards=grad_shards, norm_fed=fed,
            )  # fmt: skip
            cast_fwd_b += cf
            cast_bwd_b += cb
            cast_kernels_fwd += cast_kernels(fw, plan.precision, plan.fp8_recipe, plan.nvfp4_rht, fed)
            cast_kernels_bwd += grad_cast_kernels
            # a sharded tensor's one scale needs the whole sequence's amax: an all-reduce across the TP group
            amax_fwd += amax_reduced and input_shards > 1
            amax_bwd += amax_reduced and grad_shards > 1
    # the per-launch overhead is counted per GEMM shape above; eager kernels add their extra launches
    gemm_fwd += max(0, gemms - len(shapes)) * cluster.efficiency.gemm_overhead_us * 1e-6

    # attention core: causal, per rank 1/(tp·cp) of the heads × sequence work
    attn_flops = (
        2
        * plan.micro_batch
        * plan.seq_len
        * plan.seq_len
        * (arch.n_heads / tp)
        * (arch.qk_head_dim + arch.value_head_dim)
        / 2
        / cp
    )
    if plan.flash_attention:
        pair = 3 * attn_flops / (peak_attn * attention_efficiency(cluster, plan))
        attention_fwd = pair / (1 + ATTENTION_BACKWARD_RATIO)
        attention_bwd = pair - attention_fwd
        score_traffic = 0.0
    else:
        attention_fwd = attn_flops / (peak_attn * cluster.efficiency.gemm_efficiency) + 2 * (
            cluster.efficiency.gemm_overhead_us * 1e-6
        )
        attention_bwd = 2 * attention_fwd
        score_traffic = 4 * plan.micro_batch * (arch.n_heads / tp) * plan.seq_len * (plan.seq_len / cp) * act

    # memory-bound elementwise work: norms (read+write), residual adds (2 reads + write), rotary, activation
    # 2 norms + 2 residual adds over h; without SP every TP rank repeats them on the full sequence.
    per_token = (
        (2 * traffic_b["norm"] + 2 * traffic_b["residual"]) * h / (tp if plan.sequence_parallel else 1)
    )
    if arch.position == "rotary":
        per_token += traffic_b["rotary"] * (q_dim(arch) + kv_dim(arch)) / tp
    per_token += act_width
    traffic = tokens * per_token * act / 2 + score_traffic  # byte counts above are for 16-bit activations
    # each memory-bound launch's fixed cost, and the amax all-reduces the casts wait for (the column-parallel
    # inputs' in the forward, the row-parallel output gradients' in the backward)
    launch_s = cluster.scale.kernel_overhead_us * 1e-6
    amax_s = float(small_all_reduce_seconds(SCALAR, tp, group_shape(SCALAR, tp, 1, cluster.nvlink_domain)[1]))
    memory_fwd = (traffic + cast_fwd_b) / hbm + (kernels + cast_kernels_fwd) * launch_s + amax_fwd * amax_s

    fwd = gemm_fwd + attention_fwd + memory_fwd
    bwd = gemm_bwd + attention_bwd + (2 * traffic + cast_bwd_b) / hbm
    bwd += (2 * kernels + cast_kernels_bwd) * launch_s + amax_bwd * amax_s
    # Megatron's recompute modules (scalar plans only: the search never names them): what selective recompute
    # re-runs when the plan names its modules
    modules_s = (
        None
        if plan.recompute_modules is None
        else _module_recompute_seconds(
            arch, kind, plan, frozenset(plan.recompute_modules), rates, tokens, hbm,
            attention_s=attention_fwd + score_traffic / hbm,
        )
    )  # fmt: skip
    return LayerWork(
        gemm_fwd_s=gemm_fwd, attention_fwd_s=attention_fwd, memory_fwd_s=memory_fwd, fwd_s=fwd, bwd_s=bwd,
        score_s=score_traffic / hbm, gemms=gemms, modules_s=modules_s,
    )  # fmt: skip


def _module_recompute_seconds(
    arch: Architecture, kind: LayerKind, plan: Plan, modules: frozenset[RecomputeModule], rates: GemmRates,
    tokens: float, hbm: float, *, attention_s: float,
) -> float:  # fmt: skip
    """Forward work selective recompute repeats in one layer's backward, per Megatron recompute module: the
    attention core (``attention_s``), the MLA up-projections (2·T·(q_lora·a·d_qk + kv_lora·a·(d_nope+d_v))/t
    FLOPs), the dense MLP's or the experts' GEMMs, the shared experts' GEMMs, and the memory-bound norms and
    expert activation (read + write of their tensors at 16 bits). A module the layer does not have costs 0."""
    tp, h, glu = plan.tp, arch.hidden_size, arch.activation == "swiglu"
    act = 4 if plan.precision is Precision.fp32 else 2

    def mlp_s(width: float, m: float, groups: int = 1) -> float:
        return rates.seconds(m, (2 if glu else 1) * width, h, groups) + rates.seconds(m, h, width, groups)

    out = attention_s if RecomputeModule.core_attn in modules else 0.0
    if RecomputeModule.layernorm in modules:
        rows = tokens / (tp if plan.sequence_parallel else 1)
        out += 2 * 2 * rows * h * act / hbm  # two norms, each reads its input and writes its output
    if RecomputeModule.mla_up_proj in modules and arch.attention == "mla":
        heads = arch.n_heads / tp
        if arch.q_lora_rank:
            out += rates.seconds(tokens, heads * arch.head_dim, arch.q_lora_rank)
        out += rates.seconds(tokens, heads * (arch.qk_nope_head_dim + arch.value_head_dim), arch.kv_lora_rank)
    if kind == "dense" and RecomputeModule.mlp in modules:
        out += mlp_s(arch.ffn_hidden_size / tp, tokens)
    if kind == "moe":
        k, e, fe = arch.experts_top_k, arch.n_experts, (arch.expert_ffn_hidden_size or 0) / plan.etp
        slots = tokens * plan.etp / tp * plan.ep * k / e  # tokens per local expert (balanced routing)
        shared = arch.n_shared_experts * (arch.shared_expert_ffn_hidden_size or 0) / tp
        if RecomputeModule.moe in modules:
            out += mlp_s(fe, slots, max(1, e // plan.ep)) + rates.seconds(tokens, e, h)
            out += mlp_s(shared, tokens) if shared else 0.0
        else:
            if RecomputeModule.moe_act in modules:
                out += ((3 if glu else 2) * tokens * k * fe) * act / hbm  # read gate‖up (or input), write
            if RecomputeModule.shared_experts in modules and shared:
                out += mlp_s(shared, tokens)
    return out


def head_times(arch: Architecture, plan: Plan, cluster: Cluster) -> tuple[float, float]:
    """(forward, backward) seconds of the output layer and cross-entropy for one micro-batch on one rank."""
    tokens = plan.micro_batch * plan.seq_len / plan.cp
    # the output layer runs in BF16 even in FP8 and NVFP4 recipes (Transformer Engine and torchao keep it in high
    # precision)
    precision = Precision.bf16 if plan.precision.quantized_gemms else plan.precision
    fwd, bwd = GemmRates.of(cluster, precision).fwd_bwd(tokens, arch.vocab_size / plan.tp, arch.hidden_size)
    # logit traffic (forward and backward together, with the z-loss's where the plan adds it) split evenly
    # between the passes
    traffic_b = TRAFFIC_BYTES[plan.uses_fused_loss]
    per_logit_b = traffic_b["logit"] + (traffic_b["z_loss"] if plan.eager_z_loss else 0.0)
    ce_traffic = per_logit_b * tokens * arch.vocab_size / plan.tp
    ce = ce_traffic / (cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency)
    return fwd + ce / 2, bwd + ce / 2


def optimizer_time(sharded_params: float, plan: Plan, cluster: Cluster) -> float:
    """Adam step: memory-bound, ~28–30 bytes of traffic per local (sharded) parameter."""
    traffic = {"adamw": 30.0, "adamw-8bit": 18.0, "sgd": 20.0}[plan.optimizer.value]
    return sharded_params * traffic / (cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency)
