"""Published training runs: faithful transcription of shared/reference/published_runs.json, and consistency."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from app.domain.catalog.load import load_architectures
from app.domain.catalog.published_files import (
    check_run_architectures,
    load_published_reliability,
    load_published_runs,
)
from app.domain.catalog.toml_io import CatalogError, load_sources, parse_entries
from app.domain.estimator.published import (
    FlopsAccounting,
    PublishedRun,
    Sharding,
    accounting_flops_per_iteration,
    architecture_for_run,
)
from app.domain.model.counts import parameter_counts
from app.domain.provenance import Confidence

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
# A copy of the researched reference (shared/reference/published_runs.json, 2026-12) kept with the tests, so the
# transcription check runs on any clone and never reads outside the repository.
REFERENCE = Path(__file__).resolve().parent / "fixtures" / "published_runs_reference.json"

# JSON key → PublishedRun field (keys absent here are not figures, or are mapped by hand below).
FIELD = {
    "n_layers": "n_layers",
    "hidden": "hidden_size",
    "n_heads": "n_heads",
    "n_kv_heads": "n_kv_heads",
    "ffn_hidden": "ffn_hidden_size",
    "vocab": "vocab_size",
    "seq_len": "seq_len",
    "total_params_B": "total_params_b_reported",
    "gpu": "gpu_name",
    "gpu_peak_tflops_16bit": "gpu_peak_tflops_16bit",
    "n_gpus": "n_gpus",
    "model_parallel_size": "model_parallel_size",
    "tp": "tp",
    "pp": "pp",
    "dp": "dp",
    "cp": "cp",
    "virtual_pipeline_stages": "vpp",
    "micro_batch": "micro_batch",
    "global_batch": "global_batch",
    "grad_accum": "grad_accum",
    "recompute": "recompute",
    "sequence_parallel": "sequence_parallel",
    "zero_fsdp": "sharding_text",
    "precision": "precision_text",
    "tflops_per_gpu_reported": "tflops_per_gpu_reported",
    "pct_of_peak_reported": "pct_of_peak_reported",
    "aggregate_pflops_reported": "aggregate_pflops_reported",
    "model_tflops_per_gpu": "model_tflops_per_gpu",
    "model_tflops_per_gpu_reported": "model_tflops_per_gpu",
    "mfu": "mfu",
    "hfu": "hfu",
    "tokens_per_sec_per_gpu": "tokens_per_sec_per_gpu",
    "iteration_time_s": "iteration_time_s",
    "flops_accounting": "flops_accounting_text",
    "mlp_type": "mlp_type_text",
    "model": "model",
    "priority": "priority",
    "notes": "notes",
}
# inferred JSON key → the field whose inferred flag carries it
INFERRED_FIELD = FIELD | {"precision": "precision"}

KNOWN_ACCELERATOR_SLUGS = {
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200-sxm",
    "b200",
    "gb200",
}


@pytest.fixture(scope="module")
def runs():
    """The 29 runs transcribed from shared/reference/published_runs.json (data/published_runs.toml); the runs
    added per source family under data/published_runs/ are checked by the tests at the end of this file."""
    return {r.id: r for r in parse_entries(DATA / "published_runs.toml", "published_run", PublishedRun)}


@pytest.fixture(scope="module")
def all_runs(sources):
    return {r.id: r for r in load_published_runs(DATA, sources)}


@pytest.fixture(scope="module")
def presets(sources):
    return load_architectures(DATA, sources)


@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())


def _unwrap(value):
    if isinstance(value, dict) and "inferred" in value:
        return value["value"], value["how"]
    return value, None


def test_all_29_runs_load(runs):
    assert len(runs) == 29
    assert all(isinstance(r, PublishedRun) for r in runs.values())


def test_ids_match_reference(runs, reference):
    assert list(runs) == [r["id"] for r in reference["runs"]]


def test_values_and_inferred_flags_survive(runs, reference):
    for raw in reference["runs"]:
        run = runs[raw["id"]]
        for key, field in FIELD.items():
            if key not in raw:
                continue
            value, how = _unwrap(raw[key])
            if value is None:
                assert getattr(run, field) in (None, ""), (run.id, field)
                continue
            got = getattr(run, field)
            if isinstance(value, float) or isinstance(got, float):
                assert got == pytest.approx(value), (run.id, field)
            else:
                assert got == value, (run.id, field)
            if how is not None:
                assert run.inferred.get(INFERRED_FIELD[key]) == how, (run.id, key)
        # nothing read from the source is flagged as inferred unless the reference said so or we mapped it
        json_inferred = {INFERRED_FIELD[k] for k, v in raw.items() if k in INFERRED_FIELD and _unwrap(v)[1]}
        for field, how in run.inferred.items():
            assert field in json_inferred or field == "activation" or how.startswith("capplan mapping"), (
                run.id,
                field,
            )


def test_source_details_survive(runs, reference):
    for raw in reference["runs"]:
        run = runs[raw["id"]]
        assert run.source_year == raw["source"]["year"] and run.as_of == str(raw["source"]["year"])
        assert run.source_where == raw["source"]["where"]
        assert run.source_read_via == raw["source"]["read_via"]


def test_memory_variants_and_anchors_survive(runs, reference):
    for raw in reference["runs"]:
        run = runs[raw["id"]]
        assert len(run.variants) == len(raw.get("variants") or [])
        assert len(run.anchor_predictions) == len(raw.get("anchor_predictions") or {})
        mem = raw.get("memory")
        if mem and mem.get("peak_GiB_max_over_ranks") is not None:
            assert run.memory.peak_gib_max_over_ranks == mem["peak_GiB_max_over_ranks"]
        if mem and "params_grads_optimizer_GiB" in mem:
            assert run.memory.params_grads_optimizer_gib == mem["params_grads_optimizer_GiB"]
            assert run.memory.fig7_activation_pct_of_baseline == mem["fig7_activation_pct_of_baseline"]
    cp = runs["torchtitan-cp-long-context"]
    assert [v.cp for v in cp.variants] == [1, 2, 4, 8, 1, 2, 4, 8]
    assert cp.variants[-1].tokens_per_sec_per_gpu == 16


def test_inferred_flags_drive_figure_provenance(runs):
    run = runs["narayanan2021-t1-1.7b"]
    assert run.is_inferred("mfu") and run.is_inferred("iteration_time_s")
    assert not run.is_inferred("tflops_per_gpu_reported")
    prov = run.figure_provenance("mfu")
    assert prov.confidence is Confidence.medium and prov.note.startswith("inferred: reported TFLOP/s")
    assert run.figure_provenance("tflops_per_gpu_reported").confidence is Confidence.high


def test_parallel_degrees_multiply_to_n_gpus(runs):
    unexplained = []
    for run in runs.values():
        product = run.parallel_degrees_product()
        if product is None or product == run.n_gpus:
            continue
        if not run.parallelism_note:
            unexplained.append(f"{run.id}: tp·pp·dp·cp = {product} ≠ {run.n_gpus}")
    assert not unexplained, (
        "runs whose degrees do not multiply to n_gpus need a parallelism_note: " + "; ".join(unexplained)
    )
    # every run of this set has all four degrees, and they all multiply out
    assert all(r.parallel_degrees_product() == r.n_gpus for r in runs.values())


def test_batch_shape_is_consistent_where_known(runs):
    for run in runs.values():
        if None in (run.micro_batch, run.global_batch, run.dp):
            continue
        per_rank = run.global_batch // run.dp
        assert run.global_batch % run.dp == 0, run.id
        assert per_rank % run.micro_batch == 0, run.id
        if run.grad_accum is not None:
            assert per_rank == run.micro_batch * run.grad_accum, run.id


def test_model_parallel_size_is_tp_times_pp(runs):
    for run in runs.values():
        if run.model_parallel_size is not None:
            assert run.model_parallel_size == run.tp * run.pp, run.id


def test_flops_accounting_covers_every_run(runs, reference):
    expected = {
        "narayanan2021": FlopsAccounting.megatron_96_hfu,
        "korthikanti2022": FlopsAccounting.megatron_72_mfu,
        "torchtitan": FlopsAccounting.none_reported,
        "bloom": FlopsAccounting.megatron_96_hfu,
        "mpt": FlopsAccounting.mfu_6n_plus_attention,
    }
    for run in runs.values():
        assert isinstance(run.flops_accounting, FlopsAccounting)
        assert run.flops_accounting is expected[run.id.split("-")[0]], run.id
    raw_texts = {r["id"]: r["flops_accounting"] for r in reference["runs"]}
    assert all(runs[i].flops_accounting_text == t for i, t in raw_texts.items())


def test_accounting_reproduces_the_reported_figures(runs):
    """The formulas named by flops_accounting, fed the transcribed fields, give back the printed numbers."""
    checked = 0
    for run in runs.values():
        flops = accounting_flops_per_iteration(run)
        if flops is None:
            continue
        if run.tflops_per_gpu_reported and run.iteration_time_s:  # 96-form: Narayanan, BLOOM
            assert flops / (run.tflops_per_gpu_reported * 1e12 * run.n_gpus) == pytest.approx(
                run.iteration_time_s, rel=0.01
            )
        elif run.model_tflops_per_gpu and run.iteration_time_s:  # 72-form: Korthikanti
            assert flops / run.iteration_time_s / run.n_gpus / 1e12 == pytest.approx(
                run.model_tflops_per_gpu, rel=0.01
            )
        elif run.mfu and run.tokens_per_sec_per_gpu:  # MPT
            per_token = flops / (run.global_batch * run.seq_len)
            mfu = per_token * run.tokens_per_sec_per_gpu / (run.gpu_peak_tflops_16bit * 1e12)
            assert mfu == pytest.approx(run.mfu, rel=0.005), run.id
        else:
            continue
        checked += 1
    assert checked == 22
    bloom = runs["bloom-176b-384gpu"]
    f72 = accounting_flops_per_iteration(bloom, FlopsAccounting.megatron_72_mfu)
    assert f72 / (bloom.iteration_time_s * bloom.n_gpus * 312e12) == pytest.approx(bloom.mfu, rel=0.01)
    assert accounting_flops_per_iteration(runs["torchtitan-llama3.1-8b-8gpu-fsdp"]) is None
    assert accounting_flops_per_iteration(runs["korthikanti2022-530b-2240gpu"]) is None  # no batch published


def test_hardware_mapping(runs):
    for run in runs.values():
        assert run.gpu_name
        assert run.accelerator in KNOWN_ACCELERATOR_SLUGS, run.id
        if run.gpu_name.startswith("A100"):
            assert run.accelerator == "a100-80gb"
        if "96GB" in run.gpu_name:
            assert (run.accelerator, run.gpu_memory_gb, run.gpu_power_limit_w) == ("h100-sxm", 96.0, 500)
            assert run.hardware_caveat


def test_accelerator_slugs_exist_in_hardware_catalog_when_present(runs):
    path = DATA / "accelerators.toml"
    if not path.exists():
        pytest.skip("data/accelerators.toml not written yet")
    slugs = set(re.findall(r'^slug\s*=\s*"([^"]+)"', path.read_text(), flags=re.M))
    missing = {r.accelerator for r in runs.values() if r.accelerator} - slugs
    assert not missing, (
        f"published runs use accelerator slugs not in data/accelerators.toml: {sorted(missing)}"
    )


def test_sharding_and_precision_mapping(runs):
    for run in runs.values():
        text = run.sharding_text
        if text.startswith("none"):
            assert run.sharding is Sharding.ddp
        elif "FULL_SHARD" in text:
            assert run.sharding is Sharding.fsdp_full
        else:
            assert run.sharding is Sharding.zero1 and "ZeRO-1-equivalent" in text
        if "float8" in run.precision_text:
            assert run.precision == "fp8"
        elif "bf16" in run.precision_text:
            assert run.precision == "bf16"
        else:
            assert run.precision == "fp16"
    assert {r.framework for r in runs.values()} == {
        "megatron-lm",
        "megatron-deepspeed",
        "torchtitan",
        "composer",
    }
    assert "async-tp" in runs["torchtitan-llama3.1-405b-512gpu-3d"].optimizations


def test_exclusions_carry_reasons(runs):
    excluded = {r.id: r.excluded_from_validation for r in runs.values() if not r.included_in_validation}
    assert set(excluded) == {"korthikanti2022-530b-2240gpu"}
    assert all(excluded.values())
    for run in runs.values():
        if run.accelerator is None:
            assert run.excluded_from_validation
    assert runs["korthikanti2022-530b-2240gpu"].validation_gaps() == ("micro_batch", "global_batch")


def test_uncatalogued_gpu_must_be_excluded(runs):
    fields = runs["mpt-a100-7b-8gpu"].model_dump() | {"accelerator": None, "gpu_name": "V100-SXM2-32GB"}
    with pytest.raises(ValueError, match="must give excluded_from_validation"):
        PublishedRun.model_validate(fields)
    ok = PublishedRun.model_validate(
        fields | {"excluded_from_validation": "V100 is not in the accelerator catalog"}
    )
    assert not ok.included_in_validation


def test_inferred_names_must_be_figures(runs):
    fields = runs["mpt-a100-7b-8gpu"].model_dump() | {"inferred": {"gpu_name": "guess"}}
    with pytest.raises(ValueError, match="inferred names unknown figures"):
        PublishedRun.model_validate(fields)


def test_architectures_of_runs(runs, presets):
    check_run_architectures(tuple(runs.values()), presets)
    for run in runs.values():
        arch = architecture_for_run(run, presets)
        total_b = parameter_counts(arch).total / 1e9
        assert arch.n_layers == run.n_layers and arch.hidden_size == run.hidden_size
        if run.total_params_b_reported is not None:
            # sources print 1-3 decimals; Narayanan rounds to 0.1B of a 1.7B model (1.652B exact)
            assert total_b == pytest.approx(run.total_params_b_reported, rel=0.03), run.id
    # MPT benchmark configs (learned positions, biases, tied) reproduce llm-foundry's printed counts to 3 decimals
    for rid in (
        "mpt-h100-70b-512gpu",
        "mpt-h100-13b-256gpu",
        "mpt-h100-7b-128gpu",
        "mpt-h100-7b-8gpu-seq8192",
    ):
        run = runs[rid]
        assert (
            round(parameter_counts(architecture_for_run(run, presets)).total / 1e9, 3)
            == run.total_params_b_reported
        )


def test_run_preset_mismatch_is_a_catalog_error(runs, presets):
    run = runs["torchtitan-llama3.1-8b-8gpu-fsdp"]
    wrong = PublishedRun.model_validate(run.model_dump() | {"architecture": "llama2-7b"})
    with pytest.raises(CatalogError, match="differs in"):
        check_run_architectures((wrong,), presets)
    missing = PublishedRun.model_validate(run.model_dump() | {"architecture": "llama9"})
    with pytest.raises(CatalogError, match="unknown architecture"):
        check_run_architectures((missing,), presets)


def test_reliability_stats(sources, reference):
    stats = load_published_reliability(DATA, sources)
    raw = reference["reliability_stats"]
    assert (stats.window_days, stats.n_gpus, stats.unexpected, stats.planned) == (54, 16384, 419, 47)
    assert len(stats.causes) == len(raw["table5"])
    assert sum(c.interruption_count for c in stats.causes) == stats.unexpected
    assert (
        stats.causes[0].component == "Faulty GPU" and stats.causes[0].pct_of_interruptions_as_printed == 30.1
    )
    assert stats.unexpected_interruptions_per_gpu_hour == pytest.approx(419 / (16384 * 54 * 24))
    assert stats.job_mtbf_hours == pytest.approx(54 * 24 / 419)
    assert {r.source for r in stats.other_reports} <= set(sources)


def _copy_data(tmp_path: Path, text: str) -> Path:
    for f in DATA.glob("sources*.toml"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "published_runs.toml").write_text(text)
    return tmp_path


def test_load_rejects_unknown_source_and_bad_entries(tmp_path):
    original = (DATA / "published_runs.toml").read_text()
    d = _copy_data(tmp_path, original.replace('source = "RUN-MPT-BENCH"', 'source = "NOPE"', 1))
    with pytest.raises(CatalogError, match="unknown source key 'NOPE'"):
        load_published_runs(d, load_sources(d))
    d = _copy_data(tmp_path, original.replace('sharding = "ddp"', 'sharding = "zero7"', 1))
    with pytest.raises(CatalogError, match=r"published_run\[0\] \('narayanan2021-t1-1.7b'\)\.sharding"):
        load_published_runs(d, load_sources(d))
    d = _copy_data(
        tmp_path, original.replace('flops_accounting = "megatron-96-hfu"', 'flops_accounting = "vibes"', 1)
    )
    with pytest.raises(CatalogError, match="flops_accounting"):
        load_published_runs(d, load_sources(d))
    d = _copy_data(tmp_path, original.replace('source = "RUN-LLAMA3-HERD"', 'source = "NOPE"', 1))
    with pytest.raises(CatalogError, match="reliability_stats.source"):
        load_published_reliability(d, load_sources(d))


# -- every run, the per-family files included ------------------------------------------------------------------


def test_evidence_covers_stacks_gpus_moe_scale_and_long_sequences(all_runs):
    """Issue 12's coverage: ≥ 60 runs in validation, ≥ 4 software stacks with ≥ 6 runs each, A100, Hopper and
    Blackwell, ≥ 5 MoE runs, runs at ≥ 4,096 GPUs and context-parallel long-sequence runs."""
    scored = [r for r in all_runs.values() if r.included_in_validation]
    assert len(scored) >= 60
    by_stack = {}
    for r in scored:
        by_stack[r.stack] = by_stack.get(r.stack, 0) + 1
    assert sum(1 for n in by_stack.values() if n >= 6) >= 4, by_stack
    gpus = {r.accelerator for r in scored}
    assert {"a100-80gb", "h100-sxm"} <= gpus and gpus & {"b200", "gb200"}
    assert sum(1 for r in scored if r.n_experts) >= 5
    assert sum(1 for r in scored if r.n_gpus >= 4096) >= 3
    assert sum(1 for r in scored if (r.cp or 1) > 1 and r.seq_len >= 32768) >= 5
    assert len({r.family for r in scored}) >= 10


def test_every_run_is_consistent(all_runs):
    for run in all_runs.values():
        product = run.parallel_degrees_product()
        if product is not None and product != run.n_gpus:
            assert run.parallelism_note, f"{run.id}: tp·pp·dp·cp = {product} ≠ {run.n_gpus} and no note"
        if run.accelerator is None:
            assert run.excluded_from_validation, run.id
        assert run.source_where and run.flops_accounting_text, run.id
        if run.ep:
            assert run.n_experts and run.n_experts % run.ep == 0, run.id


def test_grand_teton_h100s_run_at_their_stated_hbm_bandwidth(all_runs, sources):
    """Meta's Grand Teton H100s (torchtitan's benchmark files: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth",
    500 W) are not the catalog's 80 GB HBM3 SKU (3.35 TB/s): every such run states the bandwidth, and the cluster
    its estimate runs on has it (and the catalog SKU keeps its own). Llama 3's Grand Teton H100s are the 80 GB HBM3
    SKU at 700 W and state nothing."""
    from app.domain.catalog import load_catalog
    from app.domain.estimator.validation import run_cluster

    teton = [r for r in all_runs.values() if "96GB HBM2e" in r.gpu_name and "Grand Teton" in r.gpu_name]
    assert len(teton) >= 20
    assert {r.gpu_memory_bandwidth_gb_per_s for r in teton} == {2400.0}
    catalog = load_catalog(DATA)
    cluster = run_cluster(teton[0], catalog)
    assert cluster.accelerator.memory_bandwidth_gb_per_s == 2400.0
    assert cluster.accelerator.provenance["memory_bandwidth_gb_per_s"].source == "override"
    assert catalog.hardware.accelerator("h100-sxm").memory_bandwidth_gb_per_s == 3350.0


def test_a_duplicate_slug_across_family_files_is_a_catalog_error(tmp_path, sources):
    shutil.copytree(DATA, tmp_path / "data")
    family = tmp_path / "data" / "published_runs" / "copy.toml"
    family.write_text((DATA / "published_runs.toml").read_text())
    with pytest.raises(CatalogError, match="duplicate run slug"):
        load_published_runs(tmp_path / "data", sources)
