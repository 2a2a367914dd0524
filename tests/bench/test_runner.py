"""The benchmark runner on CPU (gloo): `capplan bench run --preset tiny_fsdp2_cpu --nproc 2` under torchrun, and
single-process runs at other (micro-batch, sequence, recompute) points. Ground truth against the estimator:

* parameter, gradient and optimizer-state bytes equal the estimator's FSDP2 figures exactly, at 1 and 2 ranks
  (rank 0 is the estimator's stage figure; every rank its exact shard);
* saved-activation bytes per micro-batch within 5 % of the estimator's activation term (they are equal);
* FLOPs of forward + backward within 2 % of FlopCounterMode (convention: SDPA counted non-causally, its
  backward re-computing QKᵀ — see app/bench/report.py).

Plus the pure parts: presets, predictions and launch commands.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.bench.presets import PRESETS, get_preset
from app.bench.report import (
    cluster_for,
    local_command,
    multinode_command,
    plan_for,
    predictions,
    resolve_architecture,
    result_table,
)
from app.cli import app as cli_app
from app.domain.catalog import load_catalog
from app.domain.estimator.assemble import memory_by_stage
from app.schemas import BenchmarkResultIn
from app.settings import REPO_ROOT

CATALOG = load_catalog(REPO_ROOT / "data")
EXACT = ("param_bytes", "grad_bytes", "optimizer_bytes")


# -- pure ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_resolves_and_predicts(name: str) -> None:
    preset = get_preset(name)
    world = preset.nproc * preset.nodes
    resolved = resolve_architecture(preset, CATALOG)
    per_rank, info = predictions(preset, resolved, CATALOG, world)
    assert len(per_rank) == world
    if resolved.arch is None:
        return
    assert set(EXACT) <= set(per_rank[0]) and per_rank[0]["flops_per_step"] > 0
    if preset.layers:
        assert resolved.layer_scale > 1 and "Scaled from" in resolved.arch.notes
    if preset.device == "cuda":
        assert per_rank[0]["step_time_s"] > 0 and 0 < per_rank[0]["mfu"] < 1
        est_stage = memory_by_stage(resolved.arch, cluster_for(CATALOG, preset.accelerator, world),
                                    plan_for(preset, world))[0]  # fmt: skip
        assert est_stage.fits, f"{name} does not fit its accelerator"


def test_unknown_preset_and_launch_commands() -> None:
    result = CliRunner().invoke(cli_app, ["bench", "run", "--preset", "nope"])
    assert result.exit_code != 0
    cmd = local_command("tiny_fsdp2_cpu", 2, "/tmp/x.json")
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert cmd[-6:] == ["-m", "app.bench", "--preset", "tiny_fsdp2_cpu", "--output", "/tmp/x.json"]
    multi = multinode_command("llama3_70b_fsdp64_h100", nodes=8, nproc=8, rdzv_host="n0", rdzv_port=29500,
                              output="r.json")  # fmt: skip
    assert "--nnodes=8 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=n0:29500" in multi
    slurm = multinode_command("llama3_70b_fsdp64_h100", nodes=8, nproc=8, rdzv_host="n0", rdzv_port=29500,
                              output="r.json", slurm=True)  # fmt: skip
    assert "#SBATCH --nodes=8" in slurm and "srun" in slurm
    out = CliRunner().invoke(cli_app, ["bench", "launch-cmd", "--preset", "llama3_70b_fsdp64_h100", "--nodes", "8",
                                       "--rdzv-endpoint", "n0:29500"])  # fmt: skip
    assert out.exit_code == 0 and "torchrun --nnodes=8" in out.stdout
    listing = CliRunner().invoke(cli_app, ["bench", "presets"])
    assert "tiny_fsdp2_cpu" in listing.stdout and "llama3_8b_fsdp8_h100" in listing.stdout


# -- real runs on CPU ---------------------------------------------------------------------------------------

torch_needed = pytest.mark.torch


def _check_ground_truth(result: BenchmarkResultIn) -> None:
    preset = get_preset(result.preset, **{k: v for k, v in result.config["preset"].items()
                                          if k in ("micro_batch", "seq_len", "recompute")})  # fmt: skip
    resolved = resolve_architecture(preset, CATALOG)
    stage = memory_by_stage(resolved.arch, cluster_for(CATALOG, None, result.world_size),
                            plan_for(preset, result.world_size))[0]  # fmt: skip
    by = {(m.metric, m.rank): m for m in result.metrics}
    table = result_table(result, all_ranks=True)
    for rank in range(result.world_size):
        for name in EXACT:
            m = by[(name, rank)]
            assert m.measured == m.predicted, f"{name} rank {rank}\n{table}"
        act = by[("saved_activation_bytes", rank)]
        assert abs(act.measured / act.predicted - 1) <= 0.05, table
        flops = by[("flops_per_step", rank)]
        assert abs(flops.measured / flops.predicted - 1) <= 0.02, table
        assert by[("step_time_s", rank)].measured > 0 and by[("tokens_per_s", rank)].measured > 0
    assert by[("param_bytes", 0)].measured == stage.params_bytes
    assert by[("grad_bytes", 0)].measured == stage.grads_bytes
    assert by[("optimizer_bytes", 0)].measured == stage.optimizer_bytes


@torch_needed
def test_capplan_bench_run_tiny_fsdp2_cpu_two_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "result.json"
    result = CliRunner().invoke(
        cli_app,
        ["bench", "run", "--preset", "tiny_fsdp2_cpu", "--nproc", "2", "--output", str(out), "--json"],
    )
    assert result.exit_code == 0, result.output
    printed = BenchmarkResultIn.model_validate_json(result.stdout)
    stored = BenchmarkResultIn.model_validate_json(out.read_bytes())
    assert printed == stored and stored.world_size == 2 and stored.accelerator is None
    assert stored.software["torch"].startswith("2.") and stored.config["architecture"] == "tiny-llama"
    assert stored.software["sdpa_kernels"] == [
        "aten._scaled_dot_product_flash_attention_for_cpu",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward",
    ]  # the fused kernel ran (a math-kernel fallback would change FLOPs and memory) and is recorded
    _check_ground_truth(stored)
    metrics = {m.metric for m in stored.metrics}
    assert any(m.startswith("gemm:bf16:") for m in metrics)
    assert any(m.startswith("busbw:all_reduce:2r1n:") for m in metrics)


@torch_needed
@pytest.mark.parametrize(
    "micro_batch, seq_len, recompute",
    [(1, 256, "full"), (4, 64, "selective")],
    ids=["b1-s256-full", "b4-s64-sel"],
)
def test_single_rank_runs_at_other_points(
    tmp_path: Path, micro_batch: int, seq_len: int, recompute: str
) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "app.bench", "--preset", "tiny_fsdp2_cpu", "--output", str(out),
           "--micro-batch", str(micro_batch), "--seq-len", str(seq_len), "--recompute", recompute,
           "--steps", "1", "--warmup-steps", "0"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = BenchmarkResultIn.model_validate_json(out.read_bytes())
    assert result.world_size == 1 and result.config["plan"]["recompute"] == recompute
    _check_ground_truth(result)


def test_result_json_is_the_api_schema() -> None:
    """The runner's file is what the API takes: alias 'schema', no extra fields."""
    sample = {"schema": "capplan.bench/v1", "preset": "tiny_fsdp2_cpu", "device_name": "CPU", "world_size": 1,
              "measured_at": "2026-12-01T00:00:00Z", "metrics": [{"metric": "step_time_s", "unit": "s", "measured": 1.0}]}  # fmt: skip
    parsed = BenchmarkResultIn.model_validate(sample)
    assert json.loads(parsed.model_dump_json(by_alias=True))["schema"] == "capplan.bench/v1"
    with pytest.raises(ValueError):
        BenchmarkResultIn.model_validate({**sample, "schema": "other/v9"})


@torch_needed
def test_sdpa_flop_formula_counts_gqa_per_query_head() -> None:
    """Llama 3 8B attention, 32 query heads on 8 K/V heads, b=2, s=4096, d=128: the work is that of 32 heads
    (the kernels broadcast K/V), forward 2 GEMMs = 4·b·h·s²·d = 5.5e11 FLOPs, backward 5 GEMMs. torch < 2.13's own
    formulas assert equal head counts; ours broadcasts first, so the one GPU run cannot crash in the FLOP count.
    Every fused SDPA kernel (CPU flash, CUDA flash / efficient / cuDNN) uses it."""
    pytest.importorskip("torch")
    import torch

    from app.bench.runner import SDPA_FLOPS, _sdpa_backward_flop, _sdpa_flop

    b, h, kv, s, d = 2, 32, 8, 4096, 128
    q, k = (b, h, s, d), (b, kv, s, d)
    assert _sdpa_flop(q, k, k) == 4 * b * h * s * s * d == 549_755_813_888
    assert _sdpa_backward_flop(q, q, k, k) == 10 * b * h * s * s * d
    aten = torch.ops.aten
    for op in (aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_efficient_attention,
               aten._scaled_dot_product_flash_attention_for_cpu):  # fmt: skip
        assert SDPA_FLOPS[op] is _sdpa_flop
    assert SDPA_FLOPS[aten._scaled_dot_product_flash_attention_backward] is _sdpa_backward_flop


@torch_needed
def test_flop_counter_with_our_sdpa_formula_counts_a_gqa_call() -> None:
    """The mapping as the runner uses it: FlopCounterMode over a real GQA SDPA call (8 query heads on 2 K/V heads,
    b=1, s=64, d=16) counts 4·b·h·s²·d forward and 10·b·h·s²·d backward (non-causal, per query head)."""
    pytest.importorskip("torch")
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from app.bench.runner import SDPA_FLOPS

    b, h, g, s, d = 1, 8, 2, 64, 16
    q = torch.randn(b, h, s, d, requires_grad=True)
    k = torch.randn(b, g, s, d, requires_grad=True)
    v = torch.randn(b, g, s, d, requires_grad=True)
    with FlopCounterMode(display=False, custom_mapping=SDPA_FLOPS) as counter:
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
    assert counter.get_total_flops() == 14 * b * h * s * s * d


def _fake_runner(monkeypatch, *, code: int, write: bool, stderr: str = "") -> None:
    """``capplan bench run`` with torchrun stubbed: the child (optionally) writes a complete result to --output and
    exits with ``code``."""
    import importlib.util

    from bench_fixtures import synthetic_h100_result

    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "torch" else real_find(name, *a)
    )

    def run(cmd, **kwargs):  # noqa: ANN001, ANN202 - subprocess.run's shape
        out = Path(cmd[cmd.index("--output") + 1])
        if write:
            out.write_text(synthetic_h100_result().model_dump_json(by_alias=True), encoding="utf-8")
        return subprocess.CompletedProcess(cmd, code, stdout="", stderr=stderr)

    monkeypatch.setattr(subprocess, "run", run)


def test_a_rank_aborting_in_teardown_after_the_result_is_written_keeps_the_result(
    monkeypatch, tmp_path: Path
) -> None:
    """Rank 0 writes the result only after every rank's figures are gathered and all passed the last barrier; a
    non-zero exit after that (gloo's teardown SIGABRT, seen under load) keeps the complete result with a warning."""
    _fake_runner(monkeypatch, code=1, write=True, stderr="terminate called without an active exception")
    out = tmp_path / "result.json"
    result = CliRunner().invoke(
        cli_app, ["bench", "run", "--preset", "tiny_fsdp2_cpu", "--output", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "after writing its complete result" in result.output
    assert json.loads(result.stdout)["preset"] == json.loads(out.read_text())["preset"]


def test_a_runner_that_fails_before_writing_fails_and_shows_the_childs_errors(
    monkeypatch, tmp_path: Path
) -> None:
    """No result written this run — none at all, or only an earlier run's file — is a failure, with the child's
    stderr shown."""
    _fake_runner(monkeypatch, code=1, write=False, stderr="RuntimeError: gloo connect timed out")
    out = tmp_path / "result.json"
    none = CliRunner().invoke(cli_app, ["bench", "run", "--preset", "tiny_fsdp2_cpu", "--output", str(out)])
    assert none.exit_code == 1 and "gloo connect timed out" in none.output and "runner failed" in none.output
    import os

    from bench_fixtures import synthetic_h100_result

    out.write_text(synthetic_h100_result().model_dump_json(by_alias=True), encoding="utf-8")
    os.utime(out, (1_000_000_000, 1_000_000_000))  # an earlier run's file
    stale = CliRunner().invoke(cli_app, ["bench", "run", "--preset", "tiny_fsdp2_cpu", "--output", str(out)])
    assert stale.exit_code == 1 and "runner failed" in stale.output
