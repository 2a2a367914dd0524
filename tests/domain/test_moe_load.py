"""The busiest expert-parallel rank's load under random top-k routing (app/domain/estimator/moe_load.py), checked
against a simulation of the routing itself and against hand-worked figures; and that the estimate uses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.moe_load import expected_max_standard_normal, expert_load_factor
from app.domain.estimator.plan import Framework, Plan, Sharding
from app.domain.estimator.xp import SCALAR

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")


def _simulated_factor(tokens: int, k: int, experts: int, ep: int, trials: int, seed: int = 0) -> float:
    """E[busiest rank's slots] / mean: every token of the EP group picks k distinct experts uniformly at random;
    rank r holds experts r·E/ep … (r+1)·E/ep − 1."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        choice = rng.random((tokens * ep, experts)).argsort(axis=1)[:, :k]
        per_rank = np.bincount(choice.ravel(), minlength=experts).reshape(ep, experts // ep).sum(axis=1)
        out.append(per_rank.max() / (tokens * k))
    return float(np.mean(out))


@pytest.mark.parametrize(
    ("tokens", "k", "experts", "ep"),
    [(4096, 2, 8, 8), (1024, 2, 8, 4), (512, 8, 64, 16), (256, 8, 256, 64)],
)
def test_load_factor_matches_a_simulation_of_the_routing(tokens: int, k: int, experts: int, ep: int) -> None:
    """The excess over the mean (1–5 %) within 15 % of what 150 simulated routings give."""
    simulated = _simulated_factor(tokens, k, experts, ep, trials=150)
    model = expert_load_factor(SCALAR, tokens * k, ep, experts, k)
    assert model - 1 == pytest.approx(simulated - 1, rel=0.15)


def test_load_factor_hand_worked_and_limits() -> None:
    """Mixtral 8×7B, 4,096 tokens a rank, EP 8: S = 8,192, spread (1 − 1/8)·(8 − 2)/(8 − 1) = 0.75, z(8) = 1.435
    (E[max of 8 standard normals] is 1.4236) → 1 + 1.435·√(0.75/8192) = 1.0137. One rank holding every expert,
    or every expert chosen (k = E), has no imbalance; numpy arrays give the scalar figures."""
    assert expected_max_standard_normal(SCALAR, 8) == pytest.approx(1.4236, abs=0.015)
    assert expected_max_standard_normal(SCALAR, 1) == pytest.approx(0.0, abs=1e-3)
    assert expert_load_factor(SCALAR, 8192, 8, 8, 2) == pytest.approx(1.0137, abs=2e-4)
    assert expert_load_factor(SCALAR, 8192, 1, 8, 2) == 1.0
    assert expert_load_factor(SCALAR, 8192, 8, 8, 8) == 1.0
    vec = expert_load_factor(np, np.array([8192.0, 8192.0]), np.array([1, 8]), 8, 2)
    assert vec.tolist() == pytest.approx([1.0, expert_load_factor(SCALAR, 8192, 8, 8, 2)])


def test_expert_parallel_plans_run_at_the_busiest_ranks_load() -> None:
    """Mixtral 8×7B on 64 H100 with EP 8: the step's all-to-all and expert compute grow by the load factor, so the
    step is slower than with every rank at the mean; without EP nothing changes."""
    arch = CATALOG.architecture("mixtral-8x7b")
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=64)
    plan = Plan(tp=1, pp=1, dp=64, ep=8, micro_batch=1, global_batch=64, seq_len=4096,
                framework=Framework.megatron, sharding=Sharding.megatron_distopt)  # fmt: skip
    est = estimate(arch, cluster, plan)
    assert est.step.ep_exposed_s > 0
    factor = expert_load_factor(SCALAR, 4096 * 2, 8, 8, 2)
    assert 1.005 < factor < 1.03
    from app.domain.estimator import moe_load

    original = moe_load.expert_load_factor
    try:  # the same plan with every rank at the mean load
        import app.domain.estimator.compute as compute
        import app.domain.estimator.evaluate as evaluate

        compute.expert_load_factor = evaluate.expert_load_factor = lambda xp, *a: 1.0  # type: ignore[assignment]
        balanced = estimate(arch, cluster, plan)
    finally:
        compute.expert_load_factor = evaluate.expert_load_factor = original  # type: ignore[assignment]
    # the all-to-all's bytes grow by the factor (its per-step latency does not)
    assert balanced.step.ep_exposed_s < est.step.ep_exposed_s <= balanced.step.ep_exposed_s * factor
    assert est.step.compute_s > balanced.step.compute_s
