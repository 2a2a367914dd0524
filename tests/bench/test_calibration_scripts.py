"""The GPU calibration path, proved on CPU: scripts/gpu_calibration.sh runs its whole flow (preflight, torchrun,
result files, predicted-vs-measured tables) in DEVICE=cpu mode and stops early when the preflight fails;
`capplan bench show` prints the README table; `capplan bench ship` puts GPU results under data/calibration,
where the next estimate uses them, and refuses results that cannot calibrate anything."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench_fixtures import synthetic_h100_result
from typer.testing import CliRunner

from app.cli import UsageError
from app.cli import app as cli_app
from app.schemas import BenchmarkResultIn
from app.settings import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu_calibration.sh"


def _synthetic(**software: str) -> BenchmarkResultIn:
    r = synthetic_h100_result(1.25)
    return r.model_copy(
        update={"measured_at": datetime(2026, 11, 30, tzinfo=UTC), "software": {**r.software, **software}}
    )


@pytest.mark.torch
def test_gpu_calibration_script_dry_run_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "cal"
    env = {**os.environ, "DEVICE": "cpu", "PY": str(REPO_ROOT / ".venv" / "bin" / "python")}
    if not Path(env["PY"]).exists():
        env["PY"] = shutil.which("python3") or "python3"
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "preflight ok" in (out / "versions.txt").read_text()
    result = BenchmarkResultIn.model_validate_json((out / "tiny_fsdp2_cpu.json").read_bytes())
    assert result.world_size == 2 and result.preset == "tiny_fsdp2_cpu"
    tables = (out / "tables.txt").read_text()
    assert "== tiny_fsdp2_cpu on CPU" in tables and "median |error| 0.00% over" in tables
    assert "0 preset(s) failed" in (out / "log.txt").read_text()


def test_gpu_calibration_script_stops_when_the_preflight_fails(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named pydantic' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "cal"
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=REPO_ROOT, env={**os.environ, "PY": str(fake)},
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert "preflight FAILED" in (out / "log.txt").read_text()
    assert "No module named pydantic" in (out / "versions.txt").read_text()
    assert not list(out.glob("*.json"))


def test_gpu_calibration_script_refuses_a_folder_with_results(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text("{}")
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and "already holds results" in proc.stderr


def test_bench_show_markdown(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(_synthetic().model_dump_json(by_alias=True))
    res = CliRunner().invoke(cli_app, ["bench", "show", str(path), "--markdown"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "| run | figure | measured | predicted | error |"
    step = next(x for x in lines if "| step time |" in x)
    assert step.startswith("| `llama3_8b_fsdp8_h100` (8 × NVIDIA H100 80GB HBM3, 2026-11-30) | step time |")
    assert step.endswith("| +25.0% |")
    assert any("| parameter bytes |" in x and x.endswith("| +0.0% |") for x in lines)
    assert any(x.startswith("|  | GEMM bf16 8192³ | ") for x in lines)
    text = CliRunner().invoke(cli_app, ["bench", "show", str(path)])
    assert text.exit_code == 0 and "median |error|" in text.stdout


def refused(res) -> str:
    """The UsageError a command raised (`capplan` prints it as one line and exits 2)."""
    assert isinstance(res.exception, UsageError), res.output
    return str(res.exception)


def test_bench_ship_puts_gpu_results_under_data_calibration(tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "data"
    shutil.copytree(REPO_ROOT / "data", data, ignore=shutil.ignore_patterns("calibration"))
    monkeypatch.setenv("CAPPLAN_DATA_DIR", str(data))
    good = tmp_path / "llama3_8b_fsdp8_h100.json"
    good.write_text(_synthetic(driver="580.159.04").model_dump_json(by_alias=True))
    runner = CliRunner()

    res = runner.invoke(cli_app, ["bench", "ship", str(good), "--folder", "2026-11-h100"])
    assert res.exit_code == 0, res.output
    shipped = data / "calibration" / "2026-11-h100" / "llama3_8b_fsdp8_h100.json"
    assert shipped.read_bytes() == good.read_bytes()
    before, after = (
        float(x) for x in re.search(r"h100-sxm: gemm_efficiency ([\d.]+) → ([\d.]+)", res.stderr).groups()
    )
    assert after == pytest.approx(0.8 * before, rel=1e-3)
    assert "| step time |" in res.stdout

    est = runner.invoke(cli_app, ["estimate", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8",
                                  "--global-batch", "8", "--seq-len", "8192", "--json"])  # fmt: skip
    note = next(a for a in json.loads(est.stdout)["assumptions"] if a["name"] == "calibration")
    assert note["value"] == "calibrated by shipped 2026-11-h100/llama3_8b_fsdp8_h100"

    again = runner.invoke(cli_app, ["bench", "ship", str(good), "--folder", "2026-11-h100"])
    assert "exists; --force replaces it" in refused(again)
    assert (
        runner.invoke(cli_app, ["bench", "ship", str(good), "--folder", "2026-11-h100", "--force"]).exit_code
        == 0
    )

    no_driver = tmp_path / "no-driver.json"
    no_driver.write_text(_synthetic().model_dump_json(by_alias=True))
    res = runner.invoke(cli_app, ["bench", "ship", str(no_driver), "--folder", "x"])
    assert "does not record driver" in refused(res)
    cpu = tmp_path / "cpu.json"
    cpu.write_text(
        _synthetic(driver="1").model_copy(update={"accelerator": None}).model_dump_json(by_alias=True)
    )
    res = runner.invoke(cli_app, ["bench", "ship", str(cpu), "--folder", "x"])
    assert "not a run on a catalog accelerator" in refused(res)
    res = runner.invoke(cli_app, ["bench", "ship", str(good), "--folder", "2026-12-h200\n"])
    assert "--folder" in refused(res)
    odd = tmp_path / "run #1.json"
    odd.write_bytes(good.read_bytes())
    assert "name the file with letters" in refused(
        runner.invoke(cli_app, ["bench", "ship", str(odd), "--folder", "x"])
    )
    res = runner.invoke(cli_app, ["bench", "ship", str(good), "--folder", "../evil"])
    assert "--folder '../evil'" in refused(res)
    assert not (tmp_path / "evil").exists()
