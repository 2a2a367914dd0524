"""The estimate's track record: capplan's out-of-sample error on the published runs comparable to a plan
(app/domain/estimator/track_record.py), from the cross-validated errors data/fitted.toml records."""

from __future__ import annotations

import statistics

import pytest

from app.domain.catalog import Catalog
from app.domain.estimator.track_record import (
    FEW_TOKENS_PER_GPU,
    LONG_SEQUENCE_TOKENS,
    MIN_RUNS,
    run_tokens_per_gpu_step,
    track_record,
)


def _runs(catalog: Catalog, keep) -> list:  # noqa: ANN001
    return [r for r in catalog.published_runs if keep(r)]


def test_hand_worked_medians_bias_and_worst(catalog: Catalog) -> None:
    """Three Megatron H100 runs scored +0.10, −0.20, +0.05 (and no other run scored): median |error|
    median(0.10, 0.20, 0.05) = 0.10, median signed error median(+0.10, −0.20, +0.05) = +0.05 (capplan faster),
    worst 0.20; the stack and GPU groups both hold exactly these three runs, so the typical error is 0.10."""
    three = _runs(catalog, lambda r: r.stack == "megatron" and r.accelerator == "h100-sxm" and (r.cp or 1) == 1
                  and r.seq_len < LONG_SEQUENCE_TOKENS and r.n_experts == 0)[:3]  # fmt: skip
    errors = dict(zip((r.slug for r in three), (0.10, -0.20, 0.05), strict=True))
    rec = track_record("megatron", "h100-sxm", 1, 8192, False, catalog.published_runs, errors, "2026-12-07")
    assert [g.aspect for g in rec.groups] == ["stack", "gpu"]  # dense, cp 1, 8K tokens: no regime group
    for g in rec.groups:
        assert g.runs == 3
        assert g.median_abs_error == pytest.approx(0.10)
        assert g.median_error == pytest.approx(0.05)
        assert g.worst_abs_error == pytest.approx(0.20)
    assert rec.typical_abs_error == pytest.approx(0.10) and not rec.thin
    assert "typical error ±10%" in rec.summary and "capplan faster by a median 5.0%" in rec.summary


def test_the_regime_group_is_the_runs_on_the_plans_side_of_cp_and_sequence_length(catalog: Catalog) -> None:
    """CP at 128K is compared with CP runs at 32K tokens or more, CP at 8K with CP runs under 32K, and a long
    sequence without CP with long runs without CP; a MoE plan adds the MoE runs."""
    cv = catalog.fit.cv_errors
    cases = {
        (4, 131072): lambda r: (r.cp or 1) > 1 and r.seq_len >= LONG_SEQUENCE_TOKENS,
        (2, 8192): lambda r: (r.cp or 1) > 1 and r.seq_len < LONG_SEQUENCE_TOKENS,
        (1, 65536): lambda r: (r.cp or 1) == 1 and r.seq_len >= LONG_SEQUENCE_TOKENS,
    }
    for (cp, seq), keep in cases.items():
        rec = track_record("fsdp2", "h100-sxm", cp, seq, True, catalog.published_runs, cv)
        regime, moe = rec.groups[2], rec.groups[3]
        expected = [cv[r.slug] for r in _runs(catalog, keep) if r.slug in cv]
        assert regime.runs == len(expected) >= MIN_RUNS
        assert regime.median_abs_error == pytest.approx(statistics.median(abs(e) for e in expected))
        assert moe.runs == sum(1 for r in catalog.published_runs if r.n_experts > 0 and r.slug in cv)
        assert rec.typical_abs_error == max(g.median_abs_error for g in rec.groups)


def test_long_context_parallel_plans_say_how_far_off_capplan_has_been(catalog: Catalog) -> None:
    """The published CP runs at 32K+ tokens are where capplan is furthest off (README: the long-sequence block):
    a CP plan at 128K tokens must carry that group's larger error, not the stack's or the GPU's smaller one."""
    cv = catalog.fit.cv_errors
    rec = track_record("megatron", "h100-sxm", 8, 131072, False, catalog.published_runs, cv)
    stack, gpu, regime = rec.groups
    assert regime.median_abs_error > max(stack.median_abs_error, gpu.median_abs_error)
    assert rec.typical_abs_error == regime.median_abs_error


def test_a_gpu_with_no_published_run_is_said_to_be_assumed(catalog: Catalog) -> None:
    rec = track_record("megatron", "l40s", 1, 4096, False, catalog.published_runs, catalog.fit.cv_errors)
    gpu = rec.groups[1]
    assert gpu.runs == 0 and gpu.median_abs_error is None and gpu.thin and rec.thin
    assert "no published run on l40s: its efficiencies are assumed, not fitted" in rec.summary
    assert rec.typical_abs_error == rec.groups[0].median_abs_error  # the stack's, the only group with runs


def test_no_fit_no_record(catalog: Catalog) -> None:
    rec = track_record("megatron", "h100-sxm", 1, 4096, False, catalog.published_runs, {})
    assert rec.typical_abs_error is None and "no out-of-sample record" in rec.summary


def test_wide_is_a_typical_error_above_fifteen_percent_or_none(catalog: Catalog) -> None:
    cv = catalog.fit.cv_errors
    long_cp = track_record("megatron", "h100-sxm", 8, 131072, False, catalog.published_runs, cv)
    assert long_cp.wide == (long_cp.typical_abs_error > 0.15)  # 14.2 % in the fit of the twenty-ninth session
    # with every out-of-sample error doubled the long-CP regime is past 15 % and the record says it is wide
    doubled = {run: 2 * error for run, error in cv.items()}
    long_cp = track_record("megatron", "h100-sxm", 8, 131072, False, catalog.published_runs, doubled)
    assert long_cp.typical_abs_error > 0.15 and long_cp.wide
    short = track_record("megatron", "h100-sxm", 1, 4096, False, catalog.published_runs, cv)
    assert short.typical_abs_error <= 0.15 and not short.wide
    assert track_record("megatron", "h100-sxm", 1, 4096, False, catalog.published_runs, {}).wide


def test_todays_software_is_the_stacks_runs_of_the_last_twelve_months(catalog: Catalog) -> None:
    """The fit of 2026-12-07 counts runs published since 2025-12 as today's software (a year-only date counts from
    January: "2026" is recent, "2025" is not). Megatron has at least three such runs, so a Megatron plan gets the
    group — exactly those runs' errors — and its median enters the typical error; FSDP has none, so an FSDP plan
    gets no group and a sentence saying the stack's newer releases are not measured."""
    from app.domain.estimator.track_record import recent_cutoff

    assert recent_cutoff("2026-12-07") == "2025-12"
    assert recent_cutoff("2026-01-15") == "2025-01"
    assert recent_cutoff("2026-03-01", months=3) == "2025-12"
    assert "2026" >= recent_cutoff("2026-12-07") > "2025"
    cv = catalog.fit.cv_errors
    rec = track_record("megatron", "h100-sxm", 1, 8192, False, catalog.published_runs, cv, "2026-12-07")
    software = next(g for g in rec.groups if g.aspect == "software")
    expected = [cv[r.slug] for r in _runs(catalog, lambda r: r.stack == "megatron" and r.as_of >= "2025-12")
                if r.slug in cv]  # fmt: skip
    assert software.runs == len(expected) >= MIN_RUNS
    assert software.median_error == pytest.approx(statistics.median(expected))
    assert "since 2025-12 (today's software)" in software.label
    assert rec.typical_abs_error == max(g.median_abs_error for g in rec.groups)
    fsdp = track_record("fsdp2", "h100-sxm", 1, 8192, False, catalog.published_runs, cv, "2026-12-07")
    assert all(g.aspect != "software" for g in fsdp.groups)
    assert (
        "published since 2025-12: how the stack's newer releases move the figures is not measured"
        in fsdp.summary
    )
    undated = track_record("megatron", "h100-sxm", 1, 8192, False, catalog.published_runs, cv)  # no fit date
    assert all(g.aspect != "software" for g in undated.groups)


def test_a_low_precision_plan_is_compared_with_the_runs_of_its_precision(catalog: Catalog) -> None:
    """An NVFP4 plan adds the NVFP4 runs (NVIDIA's four Llama rows, whose GEMM ratio NVIDIA's family alone fits, so
    out of sample it is the prior), an FP8 plan the FP8 runs; a bf16 plan has no precision group."""
    cv = catalog.fit.cv_errors
    for precision, label in (("nvfp4", "NVFP4 runs"), ("fp8", "FP8 runs")):
        rec = track_record(
            "megatron", "gb300", 1, 8192, False, catalog.published_runs, cv, "2026-12-07", precision
        )
        (group,) = [g for g in rec.groups if g.aspect == "precision"]
        expected = [cv[r.slug] for r in catalog.published_runs if r.precision == precision and r.slug in cv]
        assert group.label == label and group.runs == len(expected) >= MIN_RUNS
        assert group.median_abs_error == pytest.approx(statistics.median(abs(e) for e in expected))
        assert label in rec.summary
    assert len([g for g in track_record("megatron", "gb300", 1, 8192, False, catalog.published_runs, cv).groups
                if g.aspect == "precision"]) == 0  # fmt: skip
    nvfp4 = [r for r in catalog.published_runs if r.precision == "nvfp4"]
    # NVIDIA's four table rows and MLPerf's NVFP4 runs: all on Blackwell, since no earlier GPU has FP4 tensor cores
    assert len(nvfp4) >= 8 and {r.accelerator for r in nvfp4} <= {"b200", "gb200", "b300", "gb300"}


def test_a_strong_scaling_plan_is_compared_with_the_runs_that_give_a_gpu_as_few_tokens(
    catalog: Catalog,
) -> None:
    """Under 2,048 tokens per GPU a step (global batch × sequence / GPUs) a plan adds the runs that do the same.
    Hand-worked: MLPerf's Llama 3.1 8B on 512 GB200 runs 64 sequences of 8,192 tokens a step, 64 · 8,192 / 512 =
    1,024 tokens a GPU; NVIDIA's 72-GPU run of it, 36 · 8,192 / 72 = 4,096, is not in the group. capplan has
    predicted these runs too fast (README, Accuracy), so the group's bias is positive."""
    cv = catalog.fit.cv_errors
    by_slug = {r.slug: r for r in catalog.published_runs}
    assert run_tokens_per_gpu_step(by_slug["mlperf51-llama3.1-8b-gb200-512gpu-fp8"]) == 1024
    assert run_tokens_per_gpu_step(by_slug["mlperf51-llama3.1-8b-gb200-72gpu-fp8"]) == 4096
    rec = track_record("megatron", "gb200", 4, 8192, False, catalog.published_runs, cv, None, "fp8", 1024.0)
    (group,) = [g for g in rec.groups if g.label.startswith("strong scaling")]
    expected = [cv[r.slug] for r in catalog.published_runs
                if r.slug in cv and run_tokens_per_gpu_step(r) < FEW_TOKENS_PER_GPU]  # fmt: skip
    assert "mlperf51-llama3.1-8b-gb200-512gpu-fp8" in cv and group.runs == len(expected) >= MIN_RUNS
    assert group.median_abs_error == pytest.approx(statistics.median(abs(e) for e in expected))
    assert (
        group.median_error > 0 and "strong scaling (under 2,048 tokens per GPU a step): median" in rec.summary
    )
    for tokens in (None, 2048.0, 4096.0):
        rec = track_record(
            "megatron", "gb200", 4, 8192, False, catalog.published_runs, cv, None, "fp8", tokens
        )
        assert not [g for g in rec.groups if g.label.startswith("strong scaling")]


def test_the_service_gives_the_plans_tokens_per_gpu(catalog: Catalog) -> None:
    """plan_track_record passes global batch × sequence / GPUs: 64 · 8,192 on 512 GPUs is in the group."""
    from app.domain.estimator.plan import Plan
    from app.services.estimate import plan_track_record

    plan = Plan(tp=2, cp=4, dp=64, micro_batch=1, global_batch=64, seq_len=8192)
    rec = plan_track_record(catalog, plan, "gb200", False)
    assert any(g.label.startswith("strong scaling") for g in rec.groups)
    wide = plan.model_copy(update={"global_batch": 256, "micro_batch": 4})
    assert not any(
        g.label.startswith("strong scaling") for g in plan_track_record(catalog, wide, "gb200", False).groups
    )
