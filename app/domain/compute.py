"""FLOPs (model and hardware) and compute time per micro-batch on one rank.

Model FLOPs per token (the MFU numerator), stated formula:
    6·N_matmul  +  6·L·s·a·(d_qk + d_v) / 2          (causal attention: half of the s×s matrix)
where N_matmul counts every GEMM weight a token passes through (output head included, embedding lookup
excluded; for MoE only top-k and shared experts). Hardware FLOPs add recompute: full recompute repeats every
layer's forward (+2·N_layers + the attention forward), selective repeats the attention core forward.

Compute time: each GEMM takes F/(peak·gemm_efficiency) + gemm_overhead; fused attention takes
F/(peak·attention_efficiency); memory-bound kernels (norms, residual adds, rotary, activation function,
softmax/cross-entropy, optimizer) take bytes/(HBM bandwidth·hbm_efficiency). Backward = 2× forward GEMM
and attention FLOPs and 2× forward memory traffic.
"""

from __future__ import annotations

from pydantic import Field

from app.domain.architecture import (
    Architecture,
    LayerKind,
    attention_projection_weights,
    kv_dim,
    mlp_weights,
    q_dim,
)
from app.domain.cluster import Cluster
from app.domain.plan import Plan, Precision, Recompute
from app.domain.provenance import Frozen

# HBM bytes moved per activation element in the forward, by op, with fused kernels vs eager PyTorch.
# Eager RMSNorm upcasts to fp32 and runs ~7 kernels (x.float, pow, mean, rsqrt, mul, type_as, mul ≈ 38 B per
# element); a fused norm reads and writes once (4 B). Eager rotary goes through fp32 complex numbers
# (~20 B per q/k element) vs 4 B fused. SwiGLU: silu + mul eager ≈ 10 B per FFN element vs 6 B fused.
# Residual adds read two and write one 16-bit tensor (6 B) either way. Cross-entropy over the vocabulary:
# eager casts the logits to fp32 and runs log-softmax and its gradient (~14 B per logit) vs ~6 B fused.
TRAFFIC_BYTES = {
    True: {"norm": 4.0, "residual": 6.0, "rotary": 4.0, "glu": 6.0, "gelu": 4.0, "logit": 6.0},
    False: {"norm": 38.0, "residual": 6.0, "rotary": 20.0, "glu": 10.0, "gelu": 8.0, "logit": 14.0},
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
    arch: Architecture, seq_len: int, matmul_weights_active: int, causal: bool = True
) -> FlopsPerToken:
    matmul = 6.0 * matmul_weights_active
    attention = attention_flops_per_token(arch, seq_len, causal)
    return FlopsPerToken(
        matmul=matmul,
        attention=attention,
        total=matmul + attention,
        formula="6·N_matmul_active + 6·L·s·a·(d_qk+d_v)"
        + (" × 1/2 for the attention term (causal)" if causal else " (non-causal attention)"),
    )


def hardware_flops_per_token(
    model: FlopsPerToken, arch: Architecture, plan: Plan, head_weights: int
) -> float:
    """Model FLOPs plus what recompute repeats (forward = 1/3 of forward+backward)."""
    if plan.recompute is Recompute.full:
        return model.total + (model.matmul - 6.0 * head_weights) / 3 + model.attention / 3
    if plan.recompute is Recompute.selective:
        return model.total + model.attention / 3
    return model.total


class LayerTimes(Frozen):
    """Seconds for one layer of one kind, one micro-batch, on one rank."""

    gemm_fwd_s: float
    attention_fwd_s: float
    memory_fwd_s: float
    fwd_s: float
    bwd_s: float
    recompute_s: float
    gemms: int = Field(description="GEMM launches in the forward")


def _gemm_time(flops: float, gemms: int, peak: float, cluster: Cluster) -> float:
    eff = cluster.efficiency
    return flops / (peak * eff.gemm_efficiency) + gemms * eff.gemm_overhead_us * 1e-6


def _linear_peak(cluster: Cluster, plan: Plan) -> float:
    return cluster.peak_flops_for(plan.precision.value)


def layer_times(arch: Architecture, kind: LayerKind, plan: Plan, cluster: Cluster) -> LayerTimes:
    tp, cp = plan.tp, plan.cp
    tokens = plan.micro_batch * plan.seq_len / cp
    h = arch.hidden_size
    fused = plan.uses_fused_kernels
    traffic_b = TRAFFIC_BYTES[fused]
    peak_lin = _linear_peak(cluster, plan)
    peak_attn = cluster.peak_flops_for("fp32" if plan.precision is Precision.fp32 else "bf16")
    hbm = cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency
    act = 4 if plan.precision is Precision.fp32 else 2

    # GEMMs
    attn_w = attention_projection_weights(arch)
    attn_gemms = 6 if arch.attention == "mla" else (2 if fused else 4)
    flops = 2 * tokens * attn_w / tp
    gemms = attn_gemms
    act_width = 0.0  # activation-function (+ MoE permute) HBM bytes per token, 16-bit activations
    if kind == "dense":
        w = mlp_weights(arch, arch.ffn_hidden_size)
        flops += 2 * tokens * w / tp
        gemms += 2 if (fused or arch.activation == "gelu") else 3
        act_width += traffic_b["glu" if arch.activation == "swiglu" else "gelu"] * arch.ffn_hidden_size / tp
    else:
        k, e, ep = arch.experts_top_k, arch.n_experts, plan.ep
        fe = arch.expert_ffn_hidden_size or 0
        w_expert = mlp_weights(arch, fe)
        flops += 2 * tokens * k * w_expert / tp  # balanced routing: each rank processes tokens·k expert-FFNs
        local_experts = max(1, e // ep)
        per_expert = 2 if arch.activation == "gelu" else 3
        gemms += per_expert * (1 if fused else local_experts) + 1  # grouped GEMM when fused; + router
        flops += 2 * tokens * h * e  # router
        glu = traffic_b["glu" if arch.activation == "swiglu" else "gelu"]
        act_width += glu * fe * k / tp + 8 * h * k  # + permute/unpermute of the routed tokens
        if arch.n_shared_experts:
            fs = arch.shared_expert_ffn_hidden_size or fe
            flops += 2 * tokens * arch.n_shared_experts * mlp_weights(arch, fs) / tp
            gemms += per_expert
            act_width += glu * fs * arch.n_shared_experts / tp
    gemm_fwd = _gemm_time(flops, gemms, peak_lin, cluster)

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
        attention_fwd = attn_flops / (peak_attn * cluster.efficiency.attention_efficiency)
        score_traffic = 0.0
    else:
        attention_fwd = _gemm_time(attn_flops, 2, peak_attn, cluster)
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
    memory_fwd = traffic / hbm

    fwd = gemm_fwd + attention_fwd + memory_fwd
    bwd = 2 * gemm_fwd + 2 * attention_fwd + 2 * memory_fwd
    if plan.recompute is Recompute.full:
        recompute = fwd
    elif plan.recompute is Recompute.selective:
        recompute = attention_fwd + (score_traffic / hbm)
    else:
        recompute = 0.0
    return LayerTimes(
        gemm_fwd_s=gemm_fwd, attention_fwd_s=attention_fwd, memory_fwd_s=memory_fwd, fwd_s=fwd, bwd_s=bwd,
        recompute_s=recompute, gemms=gemms,
    )  # fmt: skip


def head_times(arch: Architecture, plan: Plan, cluster: Cluster) -> tuple[float, float]:
    """(forward, backward) seconds of the output layer and cross-entropy for one micro-batch on one rank."""
    tokens = plan.micro_batch * plan.seq_len / plan.cp
    flops = 2 * tokens * arch.hidden_size * arch.vocab_size / plan.tp
    gemm = _gemm_time(flops, 1, _linear_peak(cluster, plan), cluster)
    # logit traffic (forward and backward together) split evenly between the passes
    ce_traffic = TRAFFIC_BYTES[plan.uses_fused_kernels]["logit"] * tokens * arch.vocab_size / plan.tp
    ce = ce_traffic / (cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency)
    return gemm + ce / 2, 2 * gemm + ce / 2


def optimizer_time(sharded_params: float, plan: Plan, cluster: Cluster) -> float:
    """Adam step: memory-bound, ~28–30 bytes of traffic per local (sharded) parameter."""
    traffic = {"adamw": 30.0, "adamw-8bit": 18.0, "sgd": 20.0}[plan.optimizer.value]
    return sharded_params * traffic / (cluster.hbm_bytes_per_s * cluster.efficiency.hbm_efficiency)
