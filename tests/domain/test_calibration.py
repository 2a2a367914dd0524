"""Calibration fits (pure): GEMM time vs size, collective busbw vs message size, memory outside tensors, the
step-time ratio; applying them to a cluster with provenance 'calibrated (run N, date)'."""

from __future__ import annotations

import pytest

from app.domain.catalog import load_catalog
from app.domain.estimator.calibration import (
    CalibrationRun,
    Sample,
    apply_calibration,
    bus_factor,
    busbw_metric,
    calibration_assumption,
    fit_calibrations,
    fit_gemm,
    gemm_metric,
    linear_fit,
)
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.plan import Plan
from app.settings import REPO_ROOT

CATALOG = load_catalog(REPO_ROOT / "data")
# The catalog's H100 figures (fitted on published runs by capplan calibrate-published; they change on a refit)
GEMM0 = CATALOG.efficiency.for_accelerator("h100-sxm").gemm_efficiency
ATTN0 = CATALOG.efficiency.for_accelerator("h100-sxm").attention_efficiency


def cluster(gpus: int = 8):
    return build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=gpus)


def gemm_samples(eff: float, overhead_us: float, peak: float) -> list[Sample]:
    out = []
    for s in (512, 1024, 2048, 4096, 8192):
        f = 2.0 * s**3
        t = f / (peak * eff) + overhead_us * 1e-6
        out.append(Sample(gemm_metric("bf16", s, s, s), "TFLOP/s", 0, f / t / 1e12, None))
    return out


def busbw_samples(op: str, ranks: int, busbw_gbps: float, hop_us: float) -> list[Sample]:
    out = []
    steps = 2 * (ranks - 1)
    for e in range(16, 32, 2):
        size = 2**e
        t = bus_factor(op, ranks) * size / (busbw_gbps * 1e9) + steps * hop_us * 1e-6
        out.append(
            Sample(busbw_metric(op, ranks, 1, size), "GB/s", 0, bus_factor(op, ranks) * size / t / 1e9, None)
        )
    return out


def run(run_id: int, samples, date: str = "2026-12-01", **kw) -> CalibrationRun:
    return CalibrationRun(
        run_id=run_id, measured_at=date, accelerator="h100-sxm", samples=tuple(samples), **kw
    )


def test_linear_fit_and_metric_names():
    assert linear_fit([1, 2, 3], [3, 5, 7]) == pytest.approx((2.0, 1.0))
    assert gemm_metric("bf16", 8, 16, 32) == "gemm:bf16:8x16x32"
    assert busbw_metric("all_reduce", 8, 1, 1024) == "busbw:all_reduce:8r1n:1024"


def test_gemm_fit_recovers_efficiency_and_overhead():
    peak = cluster().peak_flops_for("bf16")
    fit = fit_gemm(gemm_samples(0.72, 11.0, peak))
    assert fit is not None and fit.points == 5
    assert 1 / (fit.seconds_per_flop * peak) == pytest.approx(0.72, rel=1e-6)
    assert fit.overhead_s == pytest.approx(11e-6, rel=1e-6)


def test_apply_gemm_and_collective_fit_with_provenance():
    c = cluster()
    peak = c.peak_flops_for("bf16")
    samples = gemm_samples(0.72, 11.0, peak) + busbw_samples("all_reduce", 8, 330.0, 4.0)
    cals = fit_calibrations([run(7, samples)])
    new, changes = apply_calibration(c, cals)
    by_field = {ch.field: ch for ch in changes}
    assert new.efficiency.gemm_efficiency == pytest.approx(0.72, rel=1e-6)  # no step run: the sweep's e
    assert new.efficiency.gemm_overhead_us == pytest.approx(11.0, rel=1e-3)
    assert new.efficiency.scale_up_efficiency == pytest.approx(330.0 / c.scale_up_gb_per_s, rel=1e-3)
    assert new.scale_up_network.hop_latency_us == pytest.approx(4.0, rel=1e-3)
    prov = new.efficiency.figure_provenance("gemm_efficiency")
    assert prov.source == "calibrated (run 7, 2026-12-01)" and prov.as_of == "2026-12-01"
    assert by_field["gemm_efficiency"].default == c.efficiency.gemm_efficiency
    assert c.efficiency.gemm_efficiency == GEMM0  # the input cluster is untouched


def test_step_ratio_scales_gemm_and_attention_and_newest_wins():
    c = cluster(1)
    old = run(1, [Sample("step_time_s", "s", 0, 2.0, 1.0)], date="2026-11-01")  # measured twice as slow
    new = run(2, [Sample("step_time_s", "s", 0, 1.0, 1.1)], date="2026-12-01")  # 10 % faster than predicted
    cal, changes = apply_calibration(c, fit_calibrations([new, old]))
    assert cal.efficiency.gemm_efficiency == pytest.approx(GEMM0 * 1.1)
    assert cal.efficiency.attention_efficiency == pytest.approx(ATTN0 * 1.1)
    assert {ch.run_id for ch in changes} == {2}
    note = calibration_assumption("h100-sxm", changes)
    assert note.value == "calibrated by run 2" and note.source == "calibrated (run 2, 2026-12-01)"


def test_memory_outside_tensors():
    samples = [
        Sample("peak_allocated_bytes", "B", 0, 40e9, None), Sample("peak_reserved_bytes", "B", 0, 44e9, None),
        Sample("cuda_context_bytes", "B", 0, 0.6e9, None), Sample("outside_tensors_bytes", "B", 0, 1.6e9, None),
    ]  # fmt: skip
    cal, _ = apply_calibration(cluster(), fit_calibrations([run(3, samples, communicators=2)]))
    assert cal.runtime.fragmentation_fraction == pytest.approx(0.1)
    assert cal.runtime.cuda_context_bytes == 600_000_000
    assert cal.runtime.nccl_bytes_per_communicator == 500_000_000


def test_calibrated_cluster_changes_the_estimate_and_other_accelerators_do_not():
    arch = CATALOG.architecture("llama3.1-8b")
    plan = Plan(dp=8, global_batch=16, micro_batch=2, seq_len=8192)
    cals = fit_calibrations([run(4, [Sample("step_time_s", "s", 0, 2.0, 1.6)])])
    before = estimate(arch, cluster(), plan)
    after = estimate(arch, apply_calibration(cluster(), cals)[0], plan)
    assert after.step_time_s > before.step_time_s
    assert any(a.source == "calibrated (run 4, 2026-12-01)" for a in after.assumptions)
    a100 = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="a100-80gb", gpus=8)
    assert apply_calibration(a100, cals) == (a100, [])
    assert calibration_assumption("a100-80gb", []).value.startswith("not calibrated")
    assert calibration_assumption("h100-sxm", [], enabled=False).value.startswith("off")


def test_step_ratio_calibrates_relative_to_the_figures_the_run_was_predicted_with():
    """A run predicted with GEMM efficiency 0.60 (an older efficiency.toml) whose steps took 1.25 × the
    prediction calibrates to 0.60 × 0.8 = 0.48, not to today's default (GEMM0) × 0.8: retuning the catalog
    must not shift an old run's calibration. Without a recorded basis, today's default is the basis."""
    c = cluster(1)
    step = [Sample("step_time_s", "s", 0, 1.25, 1.0)]
    recorded = run(3, step, basis={"gemm_efficiency": 0.60, "attention_efficiency": 0.30})
    cal, changes = apply_calibration(c, fit_calibrations([recorded]))
    assert cal.efficiency.gemm_efficiency == pytest.approx(0.48)
    assert cal.efficiency.attention_efficiency == pytest.approx(0.24)
    gemm = next(ch for ch in changes if ch.field == "gemm_efficiency")
    assert gemm.default == GEMM0 and gemm.method.startswith(
        "0.6 (the figure the run was predicted with) × 0.800"
    )
    cal, _ = apply_calibration(c, fit_calibrations([run(4, step)]))
    assert cal.efficiency.gemm_efficiency == pytest.approx(GEMM0 * 0.8)


def test_runner_results_record_their_prediction_basis():
    from bench_fixtures import synthetic_h100_result

    from app.calibration_store import calibration_run_from

    r = synthetic_h100_result()
    assert r.config["prediction_basis"] == {"gemm_efficiency": GEMM0, "attention_efficiency": ATTN0}
    cal = calibration_run_from(run_id=1, measured_at=r.measured_at, accelerator=r.accelerator,
                               world_size=r.world_size, config=r.config, samples=r.metrics)  # fmt: skip
    assert cal is not None and cal.basis == {"gemm_efficiency": GEMM0, "attention_efficiency": ATTN0}
