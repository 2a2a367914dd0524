"""How unevenly routed tokens load the expert-parallel ranks of an MoE layer.

The all-to-all of an MoE layer and the grouped GEMM behind it finish when the busiest rank of the expert-parallel
group has received and processed its tokens, so both run at the busiest rank's load, not the mean. This module
gives that load as a factor of the mean: the floor set by routing statistics alone, which is what a router
reaches when its choices are uniformly random — Megatron-Core's ``moe_router_force_load_balancing`` (random
logits, "only for benchmark"), which NVIDIA's MoE performance tables use ("force-balance tokens among experts").
A trained router with an auxiliary balancing loss is at best this balanced; how much worse it is depends on the
data and the training step and is not modelled. Token dropping caps the load (:func:`capped_load_factor`).
"""

from __future__ import annotations

from typing import Any

# Abramowitz & Stegun 26.2.23: upper-tail normal quantile, |error| < 4.5e-4 for 0 < q ≤ 0.5
_C = (2.515517, 0.802853, 0.010328)
_D = (1.432788, 0.189269, 0.001308)


def expected_max_standard_normal(xp, n: Any) -> Any:
    """E[max of n independent standard normals] by Blom's plotting position, Φ⁻¹((n − 0.375)/(n + 0.25)), with
    Φ⁻¹ from Abramowitz & Stegun 26.2.23: n = 2 → 0.589 (exact 0.5642), 8 → 1.435 (exact 1.4236), 64 → 2.337;
    n = 1 → 0."""
    q = 1.0 - (n - 0.375) / (n + 0.25)  # upper-tail probability, in (0, 0.5]
    t = xp.sqrt(-2.0 * xp.log(q))
    z = t - (_C[0] + _C[1] * t + _C[2] * t * t) / (1.0 + _D[0] * t + _D[1] * t * t + _D[2] * t * t * t)
    return xp.maximum(z, 0.0)


def expert_load_factor(xp, slots_per_rank: Any, ep: Any, n_experts: Any, top_k: Any) -> Any:
    """Busiest expert-parallel rank's routed token slots over the mean, under uniformly random top-k routing.

    Every token of the EP group picks k distinct experts of E at random; a rank holds E/ep of them. The slots a
    rank receives are a sum over the group's tokens of hypergeometric counts: mean S (``slots_per_rank``, the
    rank's own tokens × k) and variance S·(1 − 1/ep)·(E − k)/(E − 1). The busiest of ep ranks expects
    mean + σ·E[max of ep standard normals] (:func:`expected_max_standard_normal`), so

        factor = 1 + z(ep) · √((1 − 1/ep)·(E − k)/(E − 1) / S)

    Mixtral 8×7B (E = 8, k = 2) at 4,096 tokens per rank and ep = 8: S = 8,192, variance factor
    0.875 · 6/7 = 0.75, z(8) = 1.435 → 1 + 1.435·√(0.75/8192) = 1.0137. DeepSeek-V3 (E = 256, k = 8) at 4,096
    tokens and ep = 64: z = 2.337, S = 32,768 → 1 + 2.337·√(0.984·0.973/32768) = 1.0126. ep = 1 (every expert local) or k = E: exactly 1.
    Checked against a Monte Carlo simulation of the routing (tests/domain/test_moe_load.py)."""
    ep = xp.maximum(ep, 1)
    spread = (1.0 - 1.0 / ep) * (n_experts - top_k) / xp.maximum(n_experts - 1, 1)
    return 1.0 + expected_max_standard_normal(xp, ep) * xp.sqrt(
        xp.maximum(spread, 0.0) / xp.maximum(slots_per_rank, 1.0)
    )


def capped_load_factor(xp, load: Any, capacity_factor: Any, pad: Any) -> Any:
    """The busiest rank's load under token dropping: each source rank sends an expert at most
    ``capacity_factor`` × its mean share (Megatron's router ``apply_token_drop``: capacity =
    ⌈tokens·k / E · factor⌉; DeepSpeed-MoE's ``capacity_factor``), so a rank receives at most that factor × the
    mean: min(``load``, factor). Padded to capacity (``--moe-pad-expert-input-to-capacity``) every expert's input is
    exactly the capacity: the factor itself, above or below the statistical ``load`` (factor 1.25 → 1.25; 0.8 →
    0.8, a fifth of the routed tokens dropped). ``capacity_factor`` 0 (or None on a plan): dropless, ``load``."""
    dropping = capacity_factor > 0
    return xp.where(dropping, xp.where(pad, capacity_factor, xp.minimum(load, capacity_factor)), load)
