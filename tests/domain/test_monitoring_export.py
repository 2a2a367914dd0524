"""Monitoring exports derived from the plan: alert rules promtool accepts, thresholds from the estimate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_export import DOCS

from app.domain.export import export_plan
from app.domain.export.monitoring import (
    MEMORY_MARGIN,
    THROUGHPUT_FRACTION,
    expected_scale_out_bytes_per_s_per_node,
)


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but promtool is missing (.ci/run installs Debian's prometheus)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return path


@pytest.mark.parametrize("name", sorted(DOCS))
def test_rules_pass_promtool(name: str, tmp_path: Path) -> None:
    rules = export_plan(DOCS[name], "prometheus")
    path = tmp_path / rules.filename
    path.write_text(rules.content)
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_thresholds_come_from_the_estimate() -> None:
    doc = DOCS["llama70b-fsdp-tp8"]
    rules = yaml.safe_load(export_plan(doc, "prometheus").content)["groups"][0]["rules"]
    by_name = {r["alert"]: r for r in rules}
    assert by_name["TrainingThroughputLow"]["expr"] == (
        f"sum(train_tokens_per_second) < {doc.estimate.tokens_per_s * THROUGHPUT_FRACTION:.0f}"
    )
    peak_mib = doc.estimate.peak_memory_bytes / 2**20
    assert by_name["GPUMemoryAboveEstimate"]["expr"].endswith(f"> {peak_mib * (1 + MEMORY_MARGIN):.0f}")
    assert {"GPUUtilizationLow", "TrainingLossSpike", "TrainingLossNaN", "GPUMemoryNearCapacity"} <= set(
        by_name
    )
    if doc.hardware.gpus > doc.hardware.gpus_per_node:
        assert "ScaleOutBandwidthLow" in by_name
        assert expected_scale_out_bytes_per_s_per_node(doc) > 0


def test_grafana_dashboard_draws_the_predictions() -> None:
    doc = DOCS["llama70b-fsdp-tp8"]
    board = json.loads(export_plan(doc, "grafana").content)
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert f"vector({doc.estimate.tokens_per_s:.0f})" in exprs
    assert any("DCGM_FI_DEV_FB_USED" in e for e in exprs) and any("train_loss" in e for e in exprs)
    assert board["uid"].startswith("capplan-") and len(board["uid"]) <= 40
