"""Per-plan figure overrides: the value is used, marked as an override, validated like the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.overrides import OverrideError, apply_overrides
from app.domain.estimator.plan import Plan

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")
ARCH = CATALOG.architecture("llama3.1-8b")
PLAN = Plan(dp=64, micro_batch=1, global_batch=128, seq_len=8192)


def cluster():
    return build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=64)


def test_override_changes_the_estimate_and_is_marked() -> None:
    base = estimate(ARCH, cluster(), PLAN)
    faster = apply_overrides(
        cluster(), {"efficiency.gemm_efficiency": 0.70, "node.scale_out_gbit_per_s_per_nic": 800}
    )
    est = estimate(ARCH, faster, PLAN)
    assert est.tokens_per_s > base.tokens_per_s
    gemm = next(a for a in est.assumptions if a.name == "GEMM efficiency (large GEMMs)")
    assert (
        gemm.value == 0.70
        and gemm.source == "override"
        and f"catalog {cluster().efficiency.gemm_efficiency:g}" in gemm.note
    )
    nic = next(a for a in est.assumptions if a.name == "node.scale_out_gbit_per_s_per_nic")
    assert nic.value == 800 and nic.source == "override"


def test_usable_memory_override_decides_the_fit() -> None:
    tight = apply_overrides(cluster(), {"accelerator.memory_usable_bytes": 20 * 2**30})
    assert estimate(ARCH, cluster(), PLAN).fits
    assert not estimate(ARCH, tight, PLAN).fits


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"accelerator.price": 1.0}, "accelerator.price"),
        ({"efficiency.gemm_efficiency": 1.5}, "efficiency.gemm_efficiency"),
        ({"accelerator.memory_usable_bytes": 10**15}, "accelerator"),
    ],
)
def test_bad_overrides_name_the_key(overrides, key) -> None:
    with pytest.raises(OverrideError) as info:
        apply_overrides(cluster(), overrides)
    assert info.value.key.startswith(key)
