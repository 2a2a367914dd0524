"""`capplan export`: plan.json from the estimate options, every format from --plan, the estimate round trip
(plan.json → the same estimate), and exit code 2 with the field named for every kind of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_catalog import run_cli

from app.cli import UsageError, plan_file_to_request
from app.domain.catalog import load_catalog
from app.domain.export import EXPORT_FORMATS, export_plan, parse_plan_document
from app.services.estimate import run_estimate
from app.settings import REPO_ROOT

ESTIMATE = ["--model", "llama3.1-70b", "--gpu", "h100-sxm", "--gpus", "64", "--tp", "8", "--sharding", "fsdp-full",
            "--global-batch", "64", "--seq-len", "8192", "--recompute", "full", "--tokens", "1.5e13"]  # fmt: skip


@pytest.fixture
def plan_file(monkeypatch, capsys, tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    code, out, err = run_cli(monkeypatch, capsys, "export", *ESTIMATE, "--format", "json", "-o", str(path))
    assert code == 0, err
    assert out == "" and f"wrote {path}" in err
    return path


def test_export_json_from_estimate_options(plan_file: Path) -> None:
    body = json.loads(plan_file.read_text())
    assert body["schema"] == "capplan.plan/v1"
    assert body["model"]["preset"] == "llama3.1-70b"
    assert body["hardware"] == body["hardware"] | {"gpu": "h100-sxm", "gpus": 64, "node": "dgx-h100"}
    assert body["plan"]["tp"] == 8 and body["plan"]["dp"] == 8 and body["tokens"] == 1.5e13
    assert body["estimate"]["fits"] is True and 0 < body["estimate"]["mfu"] < 1


def test_estimate_from_plan_file_reproduces_the_estimate(monkeypatch, capsys, plan_file: Path) -> None:
    """What `capplan estimate --plan plan.json --json` runs (plan_file_to_request) gives the same estimate."""
    code, out, err = run_cli(monkeypatch, capsys, "estimate", *ESTIMATE, "--json")
    assert code == 0, err
    request = plan_file_to_request(plan_file)
    again = run_estimate(load_catalog(REPO_ROOT / "data"), request)
    assert again.model_dump_json(indent=2) + "\n" == out
    summary = json.loads(plan_file.read_text())["estimate"]
    direct = json.loads(out)
    for key in ("fits", "peak_memory_bytes", "step_time_s", "tokens_per_s", "mfu", "time_to_train_days"):
        assert summary[key] == direct[key], key


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_every_format_from_plan_file(monkeypatch, capsys, plan_file: Path, fmt: str, tmp_path: Path) -> None:
    expected = export_plan(parse_plan_document(plan_file.read_bytes()), fmt)
    code, out, err = run_cli(monkeypatch, capsys, "export", "--plan", str(plan_file), "--format", fmt)
    assert code == 0, err
    assert out == expected.content
    assert all(f"note: {n}" in err for n in expected.notes)
    target = tmp_path / expected.filename
    code, out, _ = run_cli(
        monkeypatch, capsys, "export", "--plan", str(plan_file), "--format", fmt, "-o", str(target)
    )
    assert code == 0 and out == ""
    assert target.read_bytes() == expected.content.encode()


def test_plan_json_export_is_a_fixed_point(monkeypatch, capsys, plan_file: Path) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "export", "--plan", str(plan_file))
    assert code == 0 and out == plan_file.read_text()


def test_imported_config_round_trips(monkeypatch, capsys, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "tie_word_embeddings": True,
    }))  # fmt: skip
    flags = ["--model", str(config), "--gpu", "a10g", "--gpus", "1", "--global-batch", "8", "--micro-batch", "2",
             "--seq-len", "2048"]  # fmt: skip
    plan = tmp_path / "plan.json"
    code, _, err = run_cli(monkeypatch, capsys, "export", *flags, "-o", str(plan))
    assert code == 0, err
    body = json.loads(plan.read_text())
    assert body["model"]["preset"] is None and body["model"]["hf_config"]["model_type"] == "qwen2"
    assert body["model"]["architecture"]["hidden_size"] == 896
    code, out, _ = run_cli(monkeypatch, capsys, "estimate", *flags, "--json")
    request = plan_file_to_request(plan)
    assert request.hf_config == json.loads(config.read_text())
    assert run_estimate(load_catalog(REPO_ROOT / "data"), request).model_dump_json(indent=2) + "\n" == out


def test_unknown_format_exits_2_listing_formats(monkeypatch, capsys, plan_file: Path) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "export", "--plan", str(plan_file), "--format", "terraform")
    assert code == 2
    assert "terraform" in err and "torchtitan" in err and "k8s" in err


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda b: b["plan"].update(tp=0), "plan.tp"),
        (lambda b: b["plan"].update(tp=3), "plan.dp"),
        (lambda b: b.update(schema="other/v1"), "schema"),
        (lambda b: b["hardware"].pop("gpu"), "hardware.gpu"),
    ],
)
def test_malformed_plan_file_exits_2_naming_the_field(
    monkeypatch, capsys, plan_file: Path, edit, needle
) -> None:
    body = json.loads(plan_file.read_text())
    edit(body)
    plan_file.write_text(json.dumps(body))
    code, out, err = run_cli(monkeypatch, capsys, "export", "--plan", str(plan_file), "--format", "slurm")
    assert code == 2 and out == ""
    assert f"{plan_file}: {needle}:" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--plan", "/nonexistent/plan.json"], "no such file"),
        (["--format", "slurm"], "missing --model, --gpu, --gpus, --global-batch, --seq-len"),
        ([*ESTIMATE[:4]], "missing --gpus, --global-batch, --seq-len"),
        ([*ESTIMATE, "--tp", "3"], "tp"),
        ([*ESTIMATE[:-2], "--tokens", "-1"], "--tokens"),
    ],
)
def test_bad_input_exits_2(monkeypatch, capsys, args, needle) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "export", *args)
    assert code == 2
    assert needle in err and "Traceback" not in err


def test_plan_and_estimate_options_are_exclusive(monkeypatch, capsys, plan_file: Path) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "export", "--plan", str(plan_file), "--tp", "4")
    assert code == 2 and "drop --tp" in err


def test_invalid_json_plan_file(monkeypatch, capsys, tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    code, _, err = run_cli(monkeypatch, capsys, "export", "--plan", str(bad))
    assert code == 2 and "not valid JSON" in err
    with pytest.raises(UsageError, match="not valid JSON"):
        plan_file_to_request(bad)


def test_plan_file_keeps_figure_overrides_and_calibration(monkeypatch, capsys, tmp_path: Path) -> None:
    """A plan exported with overridden figures (here GEMM efficiency 0.40 instead of H100's 0.55) and with
    calibration off carries both, so `capplan estimate --plan` reproduces that estimate, not the default one."""
    from app.schemas import EstimateRequest
    from app.services.documents import plan_document_from_request

    catalog = load_catalog(REPO_ROOT / "data")
    base = dict(model="llama3.1-8b", gpu="h100-sxm", gpus=8, global_batch=64, seq_len=8192)
    request = EstimateRequest(**base, figure_overrides={"efficiency.gemm_efficiency": 0.40}, calibrated=False)
    doc = plan_document_from_request(catalog, request)
    assert doc.figure_overrides == {"efficiency.gemm_efficiency": 0.40} and doc.calibrated is False
    assert doc.estimate.calibration == "off (catalog defaults)"
    path = tmp_path / "plan.json"
    path.write_text(doc.model_dump_json(by_alias=True))

    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--plan", str(path), "--json")
    assert code == 0, err
    again = json.loads(out)
    assert again["tokens_per_s"] == pytest.approx(doc.estimate.tokens_per_s, rel=1e-12)
    default = run_estimate(catalog, EstimateRequest(**base))
    assert again["tokens_per_s"] < 0.9 * default.tokens_per_s
    gemm = next(a for a in again["assumptions"] if a["key"] == "efficiency.gemm_efficiency")
    assert gemm["value"] == 0.40 and gemm["source"] == "override"
    assert plan_file_to_request(path).figure_overrides == {"efficiency.gemm_efficiency": 0.40}
