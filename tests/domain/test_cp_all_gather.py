"""All-gather context parallelism (Transformer Engine's cp_comm_type "all_gather", Llama 3's CP): its mechanisms
against hand-worked figures, and what the estimator, the capability table, the search and the Megatron export make
of the plan field ``cp_comm_type``."""

from __future__ import annotations

import numpy as np
import pytest

from app.domain.catalog import Catalog
from app.domain.estimator.assemble import consts, model_q, plan_q, ring_backward_bytes, ring_layer_seconds
from app.domain.estimator.compute import attention_efficiency, model_flops_per_token
from app.domain.estimator.context_parallel import (
    TE_ALL_GATHER,
    TE_P2P,
    TORCH_RING,
    ring_fixed_seconds,
    ring_for,
    ring_merge_bytes,
    te_gather_backward_bytes,
    te_gather_exposed_s,
)
from app.domain.estimator.estimate import InvalidPlan, build_cluster, estimate
from app.domain.estimator.evaluate import plan_comm
from app.domain.estimator.plan import CPCommType, Framework, Plan, Sharding
from app.domain.estimator.xp import SCALAR, VECTOR
from app.domain.model.counts import parameter_counts
from app.domain.search.engine import search
from app.domain.search.spec import SearchSpec

US = 1e-6
GATHER = 14.65 * US  # the context_parallel docstring's B200 NVLink K/V transfer


def _cluster(catalog: Catalog, gpu: str, gpus: int):
    return build_cluster(catalog.hardware, catalog.efficiency, accelerator=gpu, gpus=gpus)


def _plan(**kw) -> Plan:
    base = dict(tp=8, cp=4, dp=2, global_batch=4, seq_len=131072, sequence_parallel=True, framework=Framework.megatron,
                sharding=Sharding.megatron_distopt, cp_comm_type=CPCommType.all_gather)  # fmt: skip
    return Plan(**(base | kw))


def test_the_all_gather_exposes_every_transfer() -> None:
    """Nothing hides: a forward gather, the backward's second gather and the dK/dV reduce-scatter (same bytes):
    3 · 14.65 = 43.95 µs; a full recompute gathers once more (58.6 µs); no CP, nothing."""
    exposed, hidden = te_gather_exposed_s(SCALAR, 4, GATHER, 1.0)
    assert exposed == pytest.approx(43.95 * US, abs=1e-12) and hidden == 0.0
    assert te_gather_exposed_s(SCALAR, 4, GATHER, 2.0)[0] == pytest.approx(58.6 * US, abs=1e-12)
    assert te_gather_exposed_s(SCALAR, 1, GATHER, 1.0) == (0.0, 0.0)
    arrays = te_gather_exposed_s(VECTOR, np.array([1, 2, 8]), np.full(3, GATHER), np.ones(3))[0]
    assert arrays.tolist() == pytest.approx([0.0, 43.95 * US, 43.95 * US], abs=1e-12)


def test_the_all_gathers_hbm_bytes_and_kernels_hand_worked() -> None:
    """cp 4, the docstring's Llama 3.1 70B block: queries and outputs 16,777,216 elements, K and V 4,194,304.
    Forward: outputs copied into place (4 B) + the gathered K/V reordered (4 B × 4 blocks) = 67,108,864 +
    67,108,864 = 134,217,728 B. Backward: dQ copied (4 B) + per gathered element 16 B (reorder 4, zeros 2, adds 6,
    reorder back 4) = 67,108,864 + 268,435,456 = 335,544,320 B. Two attention kernels a pass: one extra, not cp − 1."""
    fwd, bwd = ring_merge_bytes(4, 16_777_216, 16_777_216, 4_194_304, TE_ALL_GATHER)
    assert (fwd, bwd) == (134_217_728, 335_544_320)
    assert TE_ALL_GATHER.extra_kernels(8) == 1 and TE_P2P.extra_kernels(8) == 7
    assert ring_fixed_seconds(8, 0.0, 1e12, 5 * US, TE_ALL_GATHER) == pytest.approx(5 * US)
    assert ring_fixed_seconds(8, 0.0, 1e12, 5 * US) == pytest.approx(35 * US)  # the p2p ring: 7 more kernels


def test_the_all_gathers_backward_buffers_hand_worked() -> None:
    """(3·4 − ½) · 65,536 + 131,072 elements of 2 B = 1,769,472 B; nothing without CP."""
    assert te_gather_backward_bytes(4, 131_072, 65_536, 2) == 1_769_472
    assert te_gather_backward_bytes(1, 131_072, 65_536, 2) == 0


def test_which_exchange_a_plan_runs() -> None:
    assert ring_for("megatron") is TE_P2P and ring_for("fsdp2") is TORCH_RING
    assert ring_for("megatron", "all_gather") is TE_ALL_GATHER
    assert _plan().cp_gathers_kv and not _plan(cp=1, dp=8).cp_gathers_kv
    assert not _plan(cp_comm_type=CPCommType.p2p).cp_gathers_kv


def test_the_estimate_runs_whole_prefix_kernels_and_exposes_the_gathers(catalog: Catalog) -> None:
    """Llama 3.1 70B on 64 H100, tp 8, cp 4, 131,072 tokens. Under the all-gather the attention kernel runs at the
    rate of the whole sequence (no ring, no ring_attention_ratio) — the rate without CP; its exposed CP time is
    80 layers × (1 + 2) gathers per micro-batch, plus the reorder copies and one extra kernel per pass."""
    arch = catalog.architecture("llama3.1-70b")
    cluster = _cluster(catalog, "h100-sxm", 64)
    gathered, ring = _plan(), _plan(cp_comm_type=CPCommType.p2p)
    no_cp = _plan(cp=1, dp=8, global_batch=8)
    assert attention_efficiency(cluster, gathered) == pytest.approx(attention_efficiency(cluster, no_cp))
    assert attention_efficiency(cluster, ring) < attention_efficiency(cluster, gathered)
    est = estimate(arch, cluster, gathered)
    c = consts(cluster, gathered)
    comm = plan_comm(SCALAR, model_q(arch, parameter_counts(arch)), plan_q(arch, gathered), c)
    fwd, bwd = ring_layer_seconds(arch, gathered, cluster)
    per_layer = 3 * comm["cp_gather"] + fwd + bwd  # no hidden transfer, so no comm_slowdown term
    assert est.step.cp_exposed_s == pytest.approx(80 * per_layer * est.step.micro_batches, rel=1e-9)
    names = {a.name: a for a in est.assumptions}
    assert "all-gather" in str(names["context parallelism"].value)
    assert "ring_attention_ratio" not in {a.name.split(".")[-1] for a in est.assumptions}
    assert est.step_time_s != estimate(arch, cluster, ring).step_time_s
    # the gathered K/V and full-length dK/dV are in the backward's working set
    assert ring_backward_bytes(arch, gathered, 2) > 0 == ring_backward_bytes(arch, ring, 2)


@pytest.mark.parametrize("framework", [Framework.fsdp2, Framework.deepspeed])
def test_only_megatron_runs_the_all_gather(catalog: Catalog, framework: Framework) -> None:
    arch = catalog.architecture("llama3.1-8b")
    cluster = _cluster(catalog, "h100-sxm", 8)
    sharding = Sharding.fsdp_full if framework is Framework.fsdp2 else Sharding.zero3
    plan = Plan(cp=4, dp=2, global_batch=2, seq_len=32768, framework=framework, sharding=sharding,
                cp_comm_type=CPCommType.all_gather)  # fmt: skip
    with pytest.raises(InvalidPlan) as err:
        estimate(arch, cluster, plan)
    assert any(v.field == "cp_comm_type" and v.code.endswith("cp-all-gather") for v in err.value.violations)
    # without CP the field is moot
    estimate(arch, cluster, plan.model_copy(update=dict(cp=1, dp=8, global_batch=8)))


def test_the_search_keeps_the_exchange_and_agrees_with_the_estimate(catalog: Catalog) -> None:
    """The ring first, then the all-gather on the same model and GPU: the search's per-layer cache must tell them
    apart (it once keyed them alike and timed all-gather plans with the ring's layers)."""
    arch = catalog.architecture("llama3.1-70b")
    gpus = 64
    cluster = _cluster(catalog, "h100-sxm", gpus)
    flops = model_flops_per_token(arch, 131072, parameter_counts(arch).matmul_weights_active).total
    for kind in (CPCommType.p2p, CPCommType.all_gather):
        spec = SearchSpec(gpus=(gpus,), global_batches=(8,), seq_len=131072, framework=Framework.megatron,
                          cps=(4, 8), top_k=3, cp_comm_type=kind)  # fmt: skip
        result = search(arch, {gpus: cluster}, spec, flops)
        assert result.plans
        for row in result.plans:
            assert row.plan.cp_comm_type is kind
            assert estimate(arch, cluster, row.plan).step_time_s == pytest.approx(row.step_time_s, rel=1e-6)
    fsdp = spec.model_copy(update=dict(framework=Framework.fsdp2))
    assert not search(arch, {gpus: cluster}, fsdp, flops).plans  # torchtitan runs no all-gather CP
