"""The CLI's estimate, cost, plan search and export use the same calibration as the server: the runs shipped
under data/calibration, runner result files (--calibration-run) and, with --calibration-db, the runs posted to
the configured database; --no-calibration turns it off."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench_fixtures import synthetic_h100_result
from test_cli_catalog import run_cli

ESTIMATE = ["--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "8",
            "--seq-len", "8192"]  # fmt: skip


def _synthetic(slowdown: float):
    return synthetic_h100_result(slowdown).model_copy(
        update={"measured_at": datetime(2026, 11, 30, tzinfo=UTC)}
    )


@pytest.fixture
def slow_run(tmp_path: Path) -> Path:
    """A runner result whose steps took 1.25 × the prediction (GEMM and attention efficiency × 0.8)."""
    path = tmp_path / "h100-run.json"
    path.write_text(_synthetic(1.25).model_dump_json(by_alias=True))
    return path


def tokens_per_s(monkeypatch, capsys, *args: str) -> tuple[float, dict]:
    code, out, err = run_cli(monkeypatch, capsys, "estimate", *ESTIMATE, *args, "--json")
    assert code == 0, err
    body = json.loads(out)
    return body["tokens_per_s"], next(a for a in body["assumptions"] if a["name"] == "calibration")


def test_estimate_with_a_result_file_is_calibrated_and_says_by_what(
    monkeypatch, capsys, slow_run: Path
) -> None:
    base, note = tokens_per_s(monkeypatch, capsys)
    assert note["value"].startswith("not calibrated")  # the repository ships no GPU run yet
    calibrated, note = tokens_per_s(monkeypatch, capsys, "--calibration-run", str(slow_run))
    assert note["value"] == "calibrated by file h100-run.json"
    assert note["source"] == "calibrated (file h100-run.json, 2026-11-30)"
    assert calibrated < 0.9 * base

    code, out, _ = run_cli(monkeypatch, capsys, "estimate", *ESTIMATE, "--calibration-run", str(slow_run))
    line = next(x for x in out.splitlines() if x.startswith("calibration: "))
    assert line.startswith("calibration: calibrated by file h100-run.json (")
    # the run measured 1.25 × the predicted step: GEMM efficiency falls to 0.8 × the catalog's
    before, after = (float(x) for x in re.search(r"gemm_efficiency ([\d.]+)→([\d.]+)", line).groups())
    assert after == pytest.approx(0.8 * before, rel=1e-3)
    assert "cuda_context_bytes 0.75 GiB→0.55 GiB" in line


def test_calibration_options_are_checked(monkeypatch, capsys, slow_run: Path, tmp_path: Path) -> None:
    code, _, err = run_cli(
        monkeypatch, capsys, "estimate", *ESTIMATE, "--no-calibration", "--calibration-run", str(slow_run)
    )
    assert code == 2 and "--calibration-run/--calibration-db need calibration on" in err
    cpu = tmp_path / "cpu.json"
    cpu.write_text(_synthetic(1.0).model_copy(update={"accelerator": None}).model_dump_json(by_alias=True))
    code, _, err = run_cli(monkeypatch, capsys, "estimate", *ESTIMATE, "--calibration-run", str(cpu))
    assert code == 2 and "cpu.json: not run on a catalog accelerator" in err and "calibrates nothing" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code, _, err = run_cli(monkeypatch, capsys, "estimate", *ESTIMATE, "--calibration-run", str(bad))
    assert code == 2 and "bad.json: not a capplan.bench/v1 result" in err
    code, _, err = run_cli(
        monkeypatch, capsys, "estimate", *ESTIMATE, "--calibration-run", str(tmp_path / "no")
    )
    assert code == 2 and "No such file" in err


def test_cost_plan_and_export_take_the_calibration(
    monkeypatch, capsys, slow_run: Path, tmp_path: Path
) -> None:
    cal = ["--calibration-run", str(slow_run)]
    runs = {}
    for flag in ([], cal):
        code, out, err = run_cli(monkeypatch, capsys, "cost", *ESTIMATE, "--tokens", "1e10", *flag, "--json")
        assert code == 0, err
        runs[bool(flag)] = json.loads(out)["tokens_per_s"]
    assert runs[True] < 0.9 * runs[False]

    search = ["plan", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "64",
              "--seq-len", "8192", "--micro-batches", "1,2", "--recomputes", "none,full", "--json"]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, *search, *cal)
    assert code == 0, err
    found = json.loads(out)
    assert any(n.startswith("calibration: calibrated by file h100-run.json") for n in found["notes"])
    code, out, _ = run_cli(monkeypatch, capsys, *search, "--no-calibration")
    assert json.loads(out)["plans"][0]["tokens_per_s"] > found["plans"][0]["tokens_per_s"] / 0.9

    code, out, err = run_cli(monkeypatch, capsys, "export", *ESTIMATE, "--format", "json", *cal)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["estimate"]["calibration"].startswith("calibrated by file h100-run.json")


def test_calibration_db_reads_the_posted_runs(monkeypatch, capsys, tmp_path: Path) -> None:
    from sqlalchemy.orm import Session

    from app.db.engine import build_engine
    from app.db.migrate import upgrade
    from app.domain.catalog import load_catalog
    from app.services.benchmarks import ingest_benchmark
    from app.settings import REPO_ROOT

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade(url)
    engine = build_engine(url)
    with Session(engine) as session:
        run = ingest_benchmark(session, load_catalog(REPO_ROOT / "data"), _synthetic(1.25))
        run_id = run.id
    engine.dispose()
    monkeypatch.setenv("CAPPLAN_DATABASE_URL", url)
    _, note = tokens_per_s(monkeypatch, capsys)
    assert note["value"].startswith("not calibrated")  # the database is read only when asked
    _, note = tokens_per_s(monkeypatch, capsys, "--calibration-db")
    assert note["value"] == f"calibrated by run {run_id}"
    monkeypatch.setenv("CAPPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    code, _, err = run_cli(monkeypatch, capsys, "estimate", *ESTIMATE, "--calibration-db")
    assert code == 2 and "--calibration-db: cannot read the benchmark runs" in err


def test_serve_refuses_an_invalid_shipped_file_before_binding(monkeypatch, capsys, tmp_path: Path) -> None:
    import shutil

    from app.settings import REPO_ROOT

    data = tmp_path / "data"
    shutil.copytree(REPO_ROOT / "data", data)
    (data / "calibration" / "broken.json").write_text("{}")
    monkeypatch.setenv("CAPPLAN_DATA_DIR", str(data))
    code, _, err = run_cli(monkeypatch, capsys, "serve", "--port", "1", "--no-upgrade-db")
    assert code == 2 and "broken.json: not a capplan.bench/v1 result" in err


def test_plan_files_and_calibration(monkeypatch, capsys, slow_run: Path, tmp_path: Path) -> None:
    """estimate --plan keeps the plan's calibration setting and says when its calibration differs from the one
    the plan was exported with; export --plan writes the plan as estimated, so calibration options are refused."""
    plan = tmp_path / "plan.json"
    code, _, err = run_cli(monkeypatch, capsys, "export", *ESTIMATE, "--format", "json", "-o", str(plan))
    assert code == 0, err
    assert json.loads(plan.read_text())["estimate"]["calibration"] == "not calibrated (catalog defaults)"
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--plan", str(plan), "--json")
    assert code == 0 and "note:" not in err
    code, out, err = run_cli(
        monkeypatch, capsys, "estimate", "--plan", str(plan), "--calibration-run", str(slow_run), "--json"
    )
    assert code == 0, err
    assert "note: the plan file's estimate was 'not calibrated (catalog defaults)', this one is " in err
    assert "'calibrated by file h100-run.json'" in err
    code, _, err = run_cli(
        monkeypatch, capsys, "export", "--plan", str(plan), "--calibration-run", str(slow_run)
    )
    assert code == 2 and "drop --calibration-run" in err
