"""Fitted constants and out-of-sample accuracy: the fit recovers known constants, the shipped data/fitted.toml is
what the code produces, and the cross-validated error does not rise above what README states."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from app.domain.catalog import load_catalog
from app.domain.catalog.load import load_fit_record
from app.domain.estimator.compute import GemmRates, wave_efficiency
from app.domain.estimator.estimate import build_cluster
from app.domain.estimator.evaluate import straggler_factor
from app.domain.estimator.fitted import PARAMETERS, apply_values, fit_record_toml
from app.domain.estimator.fitting import (
    configuration_key,
    cross_validate,
    distinct_median_abs,
    fit,
    scorable_runs,
)
from app.domain.estimator.plan import Precision
from app.domain.estimator.published import architecture_for_run
from app.domain.estimator.validation import run_cluster, run_plan, validate_run
from app.domain.estimator.xp import SCALAR
from app.settings import REPO_ROOT

CATALOG = load_catalog(REPO_ROOT / "data")
METRIC_FIELD = {"tokens/s/GPU": "tokens_per_sec_per_gpu", "TFLOP/s/GPU (96-form)": "tflops_per_gpu_reported"}


def _as_if_measured(catalog, runs):
    """The runs with their published figure replaced by what ``catalog`` predicts (zero error under it)."""
    out = []
    for run in runs:
        row = validate_run(run, catalog)
        field = METRIC_FIELD.get(row.metric, "mfu")
        out.append(run.model_copy(update={field: row.predicted}))
    return tuple(out)


def test_wave_quantisation_hand_worked() -> None:
    """H100 (132 SMs). m = 8192, n = 2304: 128×128 tiles → 64 × 18 = 1,152 tiles in ⌈1152/132⌉ = 9 waves:
    1152 / (9·132) = 0.9697. m = 1024 (CP 8 at 8K tokens): 128×128 → 8 × 18 = 144 tiles in 2 waves (0.545);
    64×64 → 16 × 36 = 576 tiles in 5 waves: 0.71 × 576/660 = 0.6196, the best choice."""
    assert wave_efficiency(8192, 2304, 132) == pytest.approx(1152 / (9 * 132))
    assert wave_efficiency(1024, 2304, 132) == pytest.approx(0.71 * 576 / 660)
    assert wave_efficiency(1024, 2304, None) == 1.0
    # a grouped GEMM (8 experts of 256 tokens) fills the waves like one GEMM with 8× the tiles
    assert wave_efficiency(256, 4096, 132, groups=8) > wave_efficiency(256, 4096, 132)


def test_gemm_time_is_compute_bound_when_large_and_memory_bound_when_thin() -> None:
    c = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=8)
    eff, overhead = c.efficiency.gemm_efficiency, c.efficiency.gemm_overhead_us * 1e-6
    big = GemmRates.of(c, Precision.bf16).seconds(8192, 8192, 8192)
    # each tile's fixed cost lengthens the reduction by gemm_tile_fixed_k steps (200 on Hopper)
    flops = 2 * 8192 * 8192 * (8192 + c.efficiency.gemm_tile_fixed_k)
    assert c.efficiency.gemm_tile_fixed_k == 200
    expected = flops / (c.peak_flops_for("bf16") * eff * wave_efficiency(8192, 8192, 132)) + overhead
    assert big == pytest.approx(expected)
    # m = 1: a matrix-vector product reads the whole weight: bytes / HBM, not FLOPs / peak
    thin = GemmRates.of(c, Precision.bf16).seconds(1, 8192, 8192)
    hbm = c.hbm_bytes_per_s * c.efficiency.hbm_efficiency
    assert thin == pytest.approx(2 * (8192 + 8192 * 8192 + 8192) / hbm + overhead)
    # FP8 against twice the peak at fp8_gemm_ratio × the BF16 efficiency: faster, but less than 2×
    fp8 = GemmRates.of(c, Precision.fp8).seconds(8192, 8192, 8192)
    assert big / 2 < fp8 < big


def test_straggler_term_grows_with_the_square_root_of_log_n() -> None:
    """Expected maximum of N standard normals ≈ √(2 ln N): N = 8 → 2.04, N = 16,384 → 4.41."""
    assert straggler_factor(SCALAR, 1, 0.01) == 0.0
    assert straggler_factor(SCALAR, 8, 0.01) == pytest.approx(0.01 * math.sqrt(2 * math.log(8)))
    assert straggler_factor(SCALAR, 16384, 0.01) == pytest.approx(0.0441, abs=1e-4)


def test_fit_recovers_a_known_gemm_efficiency() -> None:
    """Runs 'measured' on a catalog whose Hopper GEMM efficiency is 0.50 (the prior says otherwise) give 0.50 back."""
    priors = CATALOG.efficiency_priors
    truth = replace(CATALOG, efficiency=apply_values(priors, {"gemm.hopper": 0.50}), fit=None)
    hopper = tuple(r for r in scorable_runs(CATALOG) if r.accelerator == "h100-sxm")
    runs = _as_if_measured(truth, hopper)
    gemm = next(p for p in PARAMETERS if p.name == "gemm.hopper")
    result = fit(replace(CATALOG, published_runs=runs), runs, parameters=(gemm,))
    assert result.values["gemm.hopper"] == pytest.approx(0.50, abs=0.01)
    assert result.runs_per_parameter["gemm.hopper"] == len(runs)


def test_a_constant_no_run_informs_stays_at_its_prior_and_is_assumed() -> None:
    record = CATALOG.fit
    assert record is not None
    unfitted = [p for p in PARAMETERS if not record.fitted(p.name)]
    for p in unfitted:
        assert record.values[p.name] == pytest.approx(p.prior(CATALOG.efficiency_priors), abs=1e-3)
        if p.part == "accelerator":
            prov = CATALOG.efficiency.for_accelerator(p.slugs[0]).figure_provenance(p.field)
            assert prov.source != "CAPPLAN-FIT", p.name
    fitted = [p for p in PARAMETERS if record.fitted(p.name) and p.part == "accelerator"]
    assert fitted, "at least one accelerator generation is fitted"
    for p in fitted:
        prov = CATALOG.efficiency.for_accelerator(p.slugs[0]).figure_provenance(p.field)
        assert prov.source == "CAPPLAN-FIT" and record.date in prov.note


def test_fitted_toml_round_trips(tmp_path) -> None:
    record = CATALOG.fit
    (tmp_path / "fitted.toml").write_text(fit_record_toml(record))
    assert load_fit_record(tmp_path) == record


def test_distinct_median_counts_a_repeated_configuration_once() -> None:
    """Hand-worked: errors +0.01, +0.03 (configuration a, measured twice) and −0.02 (b) → a at its median +0.02, b
    −0.02: 2 configurations, median |error| 0.02 (the three runs' median |error| is also 0.02). With a measured five
    times at +0.01 and once at +0.03, and b once at −0.02, the per-run median falls to 0.01 while the
    per-configuration one is the median of a's +0.01 and b's 0.02: 0.015."""
    assert distinct_median_abs([0.01, 0.03, -0.02], ["a", "a", "b"]) == (2, pytest.approx(0.02))
    n, median = distinct_median_abs([0.01] * 5 + [0.03, -0.02], ["a"] * 6 + ["b"])
    assert (n, median) == (2, pytest.approx(0.015))
    assert statistics.median(abs(e) for e in [0.01] * 5 + [0.03, -0.02]) == pytest.approx(0.01)


def _key(slug: str) -> str:
    run = next(r for r in CATALOG.published_runs if r.slug == slug)
    plan, _ = run_plan(run)
    return configuration_key(
        architecture_for_run(run, CATALOG.architectures), run_cluster(run, CATALOG), plan
    )


def test_runs_of_one_configuration_share_a_key_and_others_do_not() -> None:
    """Two MLPerf submitters' 8-GPU B200 NVFP4 runs of Llama 3.1 8B (same model, node, count and plan) are one
    configuration; the same plan on B300, or on 16 B200, is another."""
    nebius = _key("mlperf51-llama3.1-8b-b200-8gpu-nvfp4-nebius")
    assert nebius == _key("mlperf51-llama3.1-8b-b200-8gpu-nvfp4-oracle")
    assert nebius != _key("mlperf51-llama3.1-8b-b300-8gpu-nvfp4-nebius")
    assert nebius != _key("mlperf51-llama3.1-8b-b200-16gpu-nvfp4-nebius")


@pytest.fixture(scope="module")
def cv_report():
    return cross_validate(CATALOG)


def test_shipped_fit_is_reproduced_by_the_code(cv_report) -> None:
    """data/fitted.toml is what capplan calibrate-published computes from the shipped runs (not set by hand)."""
    record = CATALOG.fit
    assert set(record.runs) == {r.slug for r in scorable_runs(CATALOG)}
    for name, value in cv_report.values.items():
        assert value == pytest.approx(record.values[name], abs=2e-3), name


def test_cross_validated_accuracy_does_not_regress(cv_report) -> None:
    """The out-of-sample median |error| stays at or below the figure data/fitted.toml (and README) states."""
    record = CATALOG.fit
    assert cv_report.cv_median_abs_error <= record.cv_median_abs_error + 0.002
    assert cv_report.cv_max_abs_error <= record.cv_max_abs_error + 0.005
    assert cv_report.families == len({r.family for r in scorable_runs(CATALOG)})
    assert cv_report.configurations == record.configurations < len(cv_report.rows)
    assert cv_report.cv_median_abs_error_distinct <= record.cv_distinct_median_abs_error + 0.002


def test_readme_states_the_shipped_fit() -> None:
    """README's headline and its accuracy table carry the out-of-sample and fit figures of data/fitted.toml (to
    0.1 %), so a refit that changes them cannot ship with the old numbers in the README."""
    record = CATALOG.fit
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    cv, worst = f"{record.cv_median_abs_error:.1%}", f"{record.cv_max_abs_error:.1%}"
    fit = f"{record.fit_median_abs_error:.1%}"

    def spaced(figure: str) -> str:
        return figure.replace("%", " %")

    assert f"**{spaced(cv)} median" in readme, cv
    distinct = spaced(f"{record.cv_distinct_median_abs_error:.1%}")
    assert f"{distinct} over its {record.configurations} distinct configurations" in readme, distinct
    assert (
        f"| **all runs** | {len(record.runs)} | **{spaced(cv)}** (worst {spaced(worst)}) | {spaced(fit)}"
        in readme
    )
