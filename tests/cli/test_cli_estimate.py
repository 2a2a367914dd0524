"""`capplan estimate` and `capplan validate`: readable tables, one JSON object, exit code 2 on bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_cli_catalog import run_cli

from app.settings import REPO_ROOT

ARGS = ["estimate", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--gpus", "768", "--tp", "8", "--pp", "8",
        "--dp", "12", "--sharding", "ddp", "--framework", "megatron", "--micro-batch", "1",
        "--global-batch", "1536", "--seq-len", "2048", "--recompute", "full", "--no-flash-attention"]  # fmt: skip


def test_estimate_table(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--tokens", "3e11")
    assert code == 0, err
    assert "FITS" in out and "step time" in out and "MFU" in out and "days" in out
    assert "optimizer" in out


def test_estimate_names_the_stack_options_it_was_given(monkeypatch, capsys) -> None:
    """--grad-reduce-bf16 (Megatron) reaches the plan and the plan line says so; without it the line is silent."""
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--grad-reduce-bf16")
    assert code == 0, err
    assert "megatron grad-reduce=bf16" in out
    code, out, _ = run_cli(monkeypatch, capsys, *ARGS)
    assert code == 0 and "grad-reduce" not in out


def test_estimate_names_the_loss_and_fsdp_options_and_they_change_the_step(monkeypatch, capsys) -> None:
    """--z-loss on an eager FSDP2 plan adds the z-loss's passes over the fp32 logits; --fsdp-flat-params drops FSDP2's
    copy-out of gathered parameters: both reach the plan line and move the step time the way they should."""
    args = ["estimate", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "64",
            "--seq-len", "4096", "--micro-batch", "1", "--eager", "--json"]  # fmt: skip

    def step_s(*extra: str) -> float:
        code, out, err = run_cli(monkeypatch, capsys, *args, *extra)
        assert code == 0, err
        return json.loads(out)["step_time_s"]

    plain = step_s()
    assert step_s("--z-loss") > plain > step_s("--fsdp-flat-params")
    code, out, err = run_cli(monkeypatch, capsys, *args[:-1], "--z-loss", "--fsdp-flat-params")
    assert code == 0, err
    assert "fsdp2 z-loss fsdp1-flat-params" in out


def test_estimate_says_when_deepspeeds_start_up_copy_sets_the_peak(monkeypatch, capsys) -> None:
    """--no-zero-init (DeepSpeed ZeRO-3 on a model built whole): the plan line names it, and where the start-up
    copy (14.96 GiB for Llama 3.1 8B on every GPU) outgrows training, a line under the memory table says so."""
    args = ["estimate", "--model", "llama3.1-8b", "--gpu", "h200-sxm", "--gpus", "8", "--framework", "deepspeed",
            "--sharding", "zero3", "--offload", "optimizer-cpu", "--micro-batch", "1", "--global-batch", "8",
            "--seq-len", "8192", "--recompute", "full", "--fused-cross-entropy"]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, *args, "--no-zero-init")
    assert code == 0, err
    assert "deepspeed fused-cross-entropy no-zero-init" in out
    assert "start-up: 15.0 GiB before training" in out and "largest term: start-up copy" in out
    code, out, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "zero-init" not in out and "start-up" not in out


def test_estimate_json(monkeypatch, capsys) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, *ARGS, "--json")
    assert code == 0
    body = json.loads(out)
    assert body["fits"] is True
    assert body["memory_by_stage"][0]["params_bytes"] == 2_821_025_280 * 2
    assert {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "model_flops_per_token",
            "assumptions", "peak_memory_bytes"} <= set(body)  # fmt: skip


def test_estimate_from_config_json(monkeypatch, capsys, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "tie_word_embeddings": True,
    }))  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", str(config), "--gpu", "a10g", "--gpus", "1",
                             "--global-batch", "8", "--micro-batch", "2", "--seq-len", "2048", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["parameters_total"] == 494_032_768


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tp", "3"], "tp"),
        (["--gpus", "0"], "--gpus"),
        (["--model", "gpt9"], "gpt3-175b"),
        (["--gpu", "h900"], "h100-sxm"),
    ],
)
def test_bad_input_exits_2(monkeypatch, capsys, args, needle) -> None:
    argv = list(ARGS)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        argv[argv.index(flag) + 1] = value
    code, _, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 2
    assert needle in err and "Traceback" not in err


def test_malformed_config_json_exits_2(monkeypatch, capsys, tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run_cli(monkeypatch, capsys, "estimate", "--model", str(bad), "--gpu", "h100-sxm", "--gpus", "8",
                           "--global-batch", "8", "--seq-len", "128")  # fmt: skip
    assert code == 2 and "not valid JSON" in err


def test_validate_prints_fit_error_and_the_recorded_accuracy(monkeypatch, capsys) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "validate")
    assert code == 0
    assert "narayanan2021-t1-1008b" in out
    assert "FIT error (in sample, not accuracy)" in out
    assert "accuracy (leave-one-source-family-out" in out


def test_validate_json(monkeypatch, capsys) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "validate", "--json")
    body = json.loads(out)
    assert body["compared"] >= 60 and body["median_abs_error"] < 0.5


@pytest.fixture
def small_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of data/ with only the 29 runs of data/published_runs.toml (5 source families): a quick CV."""
    data = tmp_path / "data"
    shutil.copytree(REPO_ROOT / "data", data)
    shutil.rmtree(data / "published_runs")
    (data / "fitted.toml").unlink()
    monkeypatch.setenv("CAPPLAN_DATA_DIR", str(data))
    return data


def test_validate_cv_json_gives_per_run_cv_and_fit_errors(monkeypatch, capsys, small_data_dir) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "validate", "--cv", "--json")
    assert code == 0, err
    body = json.loads(out)
    assert body["families"] == 5 and len(body["rows"]) == 28
    row = body["rows"][0]
    for key in (
        "run",
        "family",
        "stack",
        "accelerator",
        "gpus",
        "published",
        "predicted_cv",
        "cv_error",
        "fit_error",
    ):
        assert key in row
    assert row["cv_error"] == pytest.approx(row["predicted_cv"] / row["published"] - 1)
    assert body["cv_median_abs_error"] >= body["fit_median_abs_error"] - 0.02  # out of sample is not better


def test_calibrate_published_writes_a_fit_the_catalog_then_uses(monkeypatch, capsys, small_data_dir) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "calibrate-published", "--dry-run")
    assert code == 0 and "ACCURACY (out of sample" in out and not (small_data_dir / "fitted.toml").exists()
    code, out, _ = run_cli(monkeypatch, capsys, "calibrate-published")
    assert code == 0 and (small_data_dir / "fitted.toml").is_file()
    from app.domain.catalog import load_catalog

    catalog = load_catalog(small_data_dir)
    assert catalog.fit is not None and len(catalog.fit.runs) == 28
    h100 = catalog.efficiency.for_accelerator("h100-sxm")
    assert h100.gemm_efficiency == pytest.approx(catalog.fit.values["gemm.hopper"])
    assert h100.figure_provenance("gemm_efficiency").source == "CAPPLAN-FIT"
    assert (
        catalog.efficiency.for_accelerator("b200").figure_provenance("gemm_efficiency").source
        == "CAPPLAN-PRIOR"
    )


def test_plan_search_table_and_json(monkeypatch, capsys) -> None:
    args = ["plan", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--gpus", "768", "--global-batch", "1536",
            "--seq-len", "2048", "--framework", "megatron", "--top", "3"]  # fmt: skip
    code, out, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "best: vs the runner-up" in out and "rejected:" in out
    code, out, _ = run_cli(monkeypatch, capsys, *args, "--json")
    body = json.loads(out)
    assert {"plans", "pareto", "rejected", "evaluated_plans"} <= set(body) and len(body["plans"]) == 3


def test_plan_search_bad_list_exits_2(monkeypatch, capsys) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "plan", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--gpus", "8",
                           "--global-batch", "8", "--seq-len", "2048", "--micro-batches", "one,two")  # fmt: skip
    assert code == 2 and "--micro-batches" in err


def test_estimate_from_plan_file_reproduces_the_estimate(monkeypatch, capsys, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    code, _, err = run_cli(monkeypatch, capsys, "export", *ARGS[1:], "--format", "json", "-o", str(plan))
    assert code == 0, err
    code, direct, _ = run_cli(monkeypatch, capsys, *ARGS, "--json")
    code, from_file, _ = run_cli(monkeypatch, capsys, "estimate", "--plan", str(plan), "--json")
    assert code == 0 and json.loads(from_file) == json.loads(direct)
    code, _, err = run_cli(monkeypatch, capsys, "estimate", "--plan", str(plan), "--tp", "4")
    assert code == 2 and "--tp" in err


def test_figure_overrides_on_the_command_line(monkeypatch, capsys) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, *ARGS, "--figure", "efficiency.gemm_efficiency=0.8", "--json")
    assert code == 0
    overridden = [a for a in json.loads(out)["assumptions"] if a["source"] == "override"]
    assert [a["value"] for a in overridden] == [0.8]
    code, _, err = run_cli(monkeypatch, capsys, *ARGS, "--figure", "efficiency.gemm_efficiency")
    assert code == 2 and "KEY=NUMBER" in err


def test_plan_output_writes_the_winner_as_a_plan_file_export_reads(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """`capplan plan … --output plan.json && capplan export --plan plan.json --format torchrun` (issue 13): the
    document's estimate is the search winner's (same tokens/s), and --pick N writes the N-th listed plan."""
    args = ["plan", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "64", "--global-batch", "128",
            "--seq-len", "8192", "--top", "3", "--json"]  # fmt: skip
    out_file = tmp_path / "plan.json"
    code, out, err = run_cli(monkeypatch, capsys, *args, "--output", str(out_file))
    assert code == 0, err
    search = json.loads(out)
    doc = json.loads(out_file.read_text())
    assert doc["schema"] == "capplan.plan/v1"
    assert doc["estimate"]["tokens_per_s"] == pytest.approx(search["plans"][0]["tokens_per_s"], rel=1e-9)
    code, out, err = run_cli(monkeypatch, capsys, "export", "--plan", str(out_file), "--format", "torchrun")
    assert code == 0 and "torchrun" in out, err
    second = tmp_path / "second.json"
    code, _, _ = run_cli(monkeypatch, capsys, *args, "--output", str(second), "--pick", "2")
    assert json.loads(second.read_text())["estimate"]["tokens_per_s"] == pytest.approx(
        search["plans"][1]["tokens_per_s"], rel=1e-9
    )
    code, _, err = run_cli(monkeypatch, capsys, *args, "--output", str(second), "--pick", "9")
    assert code == 2 and "no plan #9" in err


def test_recompute_modules_are_comma_separated_and_checked(monkeypatch, capsys) -> None:
    """Megatron's --recompute-modules as a comma-separated list (the order does not matter: the plan keeps
    Megatron's); an unknown module is named with the choices, exit code 2."""
    from test_cli_catalog import run_cli

    args = ["estimate", "--model", "deepseek-v3", "--gpu", "b200", "--gpus", "256", "--pp", "8", "--vpp", "2",
            "--ep", "32", "--framework", "megatron", "--sharding", "megatron-distopt", "--recompute", "selective",
            "--precision", "fp8", "--global-batch", "4096", "--seq-len", "4096"]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, *args, "--recompute-modules", "mlp,mla_up_proj")
    assert code == 0 and "recompute=selective (mla_up_proj, mlp)" in out
    code, out, err = run_cli(monkeypatch, capsys, *args, "--recompute-modules", "mla_up_proj,bogus")
    assert code == 2 and "error: --recompute-modules: choose from core_attn" in err and "Traceback" not in err


def test_estimate_prints_its_track_record(monkeypatch, capsys) -> None:
    """The table ends with capplan's out-of-sample record on comparable published runs (stack, GPU)."""
    code, out, err = run_cli(monkeypatch, capsys, *ARGS)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("track record: typical error ±"))
    assert "Megatron-Core / NeMo: median" in line and "on a100-80gb: median" in line


def test_estimate_names_the_fp8_recipe_and_refuses_one_the_gpu_lacks(monkeypatch, capsys) -> None:
    """--fp8-recipe reaches the plan line (the framework's default when not given) and moves the step: current
    scaling reads each cast tensor once more than delayed scaling; MXFP8 on an H100 exits 2 naming the field."""
    args = ["estimate", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "8",
            "--seq-len", "8192", "--precision", "fp8", "--framework", "megatron", "--sharding", "megatron-distopt",
            "--recompute", "none"]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "fp8 megatron fp8-recipe=delayed" in out

    def step_s(*extra: str) -> float:
        code, out, err = run_cli(monkeypatch, capsys, *args, *extra, "--json")
        assert code == 0, err
        return json.loads(out)["step_time_s"]

    assert step_s("--fp8-recipe", "tensorwise") > step_s("--fp8-recipe", "delayed") == step_s()
    code, out, err = run_cli(monkeypatch, capsys, *args, "--fp8-recipe", "mxfp8")
    assert code == 2 and "fp8_recipe" in err and "needs a Blackwell GPU" in err
