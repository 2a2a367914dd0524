"""`make bench`: capplan's own speed — estimates/s, the plan search, the sizing runs and the start-up of
`capplan plan` — printed (behaviour is tested elsewhere; speed is measured here). Not to be confused with
app/bench, the GPU benchmark runner."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from app.domain.catalog import load_catalog
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.plan import Framework, Plan, Recompute, Sharding
from app.settings import REPO_ROOT, Settings

REFERENCE_SEARCH = (
    "plan", "--model", "llama3.1-405b", "--gpu", "h100-sxm", "--gpus", "16384", "--global-batch", "2048",
    "--seq-len", "8192", "--framework", "megatron",
)  # fmt: skip
"""The reference search of the README's "Performance": llama3.1-405b on 16,384 H100, seq 8192, batch 2,048."""
CLI_TARGET_S = 0.3
SIZING_TARGET_S = 5.0  # issue 16: each catalog-wide sizing run
CLI_FLOOR = "import numpy, pydantic, typer, app.settings"
"""What `capplan plan` cannot start without: the interpreter, numpy (the search's arrays), pydantic (the request and
the catalog's records), typer (the options) and the Settings (read by hand), before any of capplan's code."""


def _rate(fn, seconds: float = 2.0) -> tuple[float, float]:
    """(calls per second, median µs per call) over about ``seconds``."""
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return len(samples) / sum(samples), statistics.median(samples) * 1e6


def main() -> None:
    catalog = load_catalog(Settings().data_dir)
    cases = {
        "llama3.1-8b, 8×H100, FSDP2": ("llama3.1-8b", "h100-sxm", 8, Plan(dp=8, micro_batch=2, global_batch=16, seq_len=8192)),
        "gpt3-175b, 768×A100, TP8 PP8 DP12": (
            "gpt3-175b", "a100-80gb", 768,
            Plan(tp=8, pp=8, dp=12, global_batch=1536, seq_len=2048, recompute=Recompute.full,
                 framework=Framework.megatron, sharding=Sharding.ddp),
        ),
        "llama3.1-405b, 16384×H100, TP8 PP16 DP128": (
            "llama3.1-405b", "h100-sxm", 16384,
            Plan(tp=8, pp=16, dp=128, global_batch=2048, seq_len=8192, recompute=Recompute.full,
                 framework=Framework.megatron, sharding=Sharding.megatron_distopt, sequence_parallel=True),
        ),
        "deepseek-v3, 2048×H800-class, EP64": (
            "deepseek-v3", "h100-sxm", 2048,
            Plan(tp=1, pp=16, dp=128, ep=64, global_batch=4096, seq_len=4096, recompute=Recompute.full,
                 framework=Framework.megatron, sharding=Sharding.megatron_distopt),
        ),
    }  # fmt: skip
    print(f"capplan performance ({time.strftime('%Y-%m-%d')})")
    print(f"{'case':46s} {'estimates/s':>12s} {'median µs':>10s}")
    for name, (model, gpu, gpus, plan) in cases.items():
        arch = catalog.architecture(model)
        cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=gpu, gpus=gpus)
        rate, median_us = _rate(
            lambda a=arch, c=cluster, p=plan: estimate(a, c, p, allow_tp_across_nodes=True)
        )
        print(f"{name:46s} {rate:12,.0f} {median_us:10.0f}")
    planner_bench()
    search_bench(catalog)
    cli_bench()
    sizing_bench(catalog)


def planner_bench(requests: int = 30) -> None:
    """The planner's htmx partial for its default form (what the page fetches on every change): the app on a
    temporary SQLite file, in process (no network), after one warm-up request."""
    import tempfile
    from pathlib import Path

    from fastapi.testclient import TestClient

    from app.db.migrate import upgrade
    from app.main import create_app

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{Path(tmp) / 'bench.db'}", log_level="WARNING")
        upgrade(settings.database_url)
        headers = {"HX-Request": "true", "HX-Request-Type": "partial"}
        with TestClient(create_app(settings)) as client:
            client.get("/", headers=headers)
            samples = []
            for _ in range(requests):
                t0 = time.perf_counter()
                client.get("/", headers=headers)
                samples.append(time.perf_counter() - t0)
    samples.sort()
    p95 = samples[max(0, int(0.95 * len(samples)) - 1)]
    print(
        f"\nplanner partial (default form, in process)       median {statistics.median(samples) * 1e3:.0f} ms, "
        f"p95 {p95 * 1e3:.0f} ms over {requests} requests"
    )


def sizing_bench(catalog) -> None:
    """Issue 16's sizing runs: the whole catalog × every whole-node size 8…65,536 × the full plan space × every
    pricing option. Each run starts cold (the shared per-rank terms are
    cleared), so the figure is what a first request costs; CPU seconds beside the wall time say how much of it
    was this process (the rest is the machine's other load). "pairs" is (node, size) pairs searched of all (the
    others were dropped by the memory, speed and dominance bounds); "valid plans" those pairs hold (what an
    exhaustive search evaluates), "evaluated" those whose memory or step time was computed (the fastest-plan
    search bounded the rest); plans/s is valid plans covered per wall second."""
    from app.domain.search import engine as search_module
    from app.services.size import SizeRequest, run_size

    cases = {
        "llama3.1-70b, 15T tokens, 120 days": SizeRequest(
            model="llama3.1-70b", tokens=15e12, deadline_days=120
        ),
        "deepseek-v3, 14.8T tokens": SizeRequest(model="deepseek-v3", tokens=14.8e12),
    }
    max_plans = Settings().search_max_plans
    print(
        f"\n{'sizing (whole catalog, 8…65,536 GPUs)':40s} {'pairs':>7s} {'valid plans':>12s} {'evaluated':>10s} "
        f"{'wall s':>7s} {'CPU s':>6s} {'plans/s':>10s}  winner (target < {SIZING_TARGET_S:g} s)"
    )
    for name, request in cases.items():
        search_module._KEY_Q_CACHE.clear()
        search_module._RANK_REPS.clear()
        start, cpu = time.perf_counter(), time.process_time()
        result = run_size(catalog, request, max_plans=max_plans)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        s = result.searched
        w = result.ranked[0] if result.ranked else None
        winner = (
            f"{w.gpus:,} × {w.accelerator} ({w.offer} {w.option}), {w.days:.1f} days, ${w.usd_amortised / 1e6:.2f} M"
            if w else (result.message or "none")
        )  # fmt: skip
        pairs = f"{s['sizes_searched']}/{s['sizes']}"
        print(
            f"{name:40s} {pairs:>7s} {s['valid_plans']:12,d} {s['evaluated_plans']:10,d} {wall:7.2f} {cpu:6.2f} "
            f"{s['valid_plans'] / wall:10,.0f}  {winner}"
        )


def search_bench(catalog) -> None:
    """The issue's reference search: llama3.1-405b on 16,384 H100, seq 8192, global batch 2,048 sequences."""
    from app.domain.estimator.compute import model_flops_per_token
    from app.domain.model.counts import parameter_counts
    from app.domain.search.engine import search
    from app.domain.search.spec import SearchSpec

    arch = catalog.architecture("llama3.1-405b")
    cases = {
        "llama3.1-405b, 16384×H100, Megatron": ("h100-sxm", 16384, Framework.megatron),
        "llama3.1-405b, 16384×H100, FSDP2": ("h100-sxm", 16384, Framework.fsdp2),
        "gpt3-175b, 768×A100, Megatron": ("a100-80gb", 768, Framework.megatron),
    }
    print(
        f"\n{'search (first run, then best of 5 warm)':46s} {'grid':>9s} {'valid plans':>12s} {'wall s':>8s} "
        f"{'grid/s':>10s} {'plans/s':>10s} {'warm s':>8s} {'warm plans/s':>13s} {'best tokens/s':>14s}"
    )
    for name, (gpu, gpus, framework) in cases.items():
        model = "gpt3-175b" if "gpt3" in name else "llama3.1-405b"
        arch = catalog.architecture(model)
        seq, batch = (2048, 1536) if "gpt3" in name else (8192, 2048)
        spec = SearchSpec(gpus=(gpus,), global_batches=(batch,), seq_len=seq, framework=framework)
        cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=gpu, gpus=gpus)
        flops = model_flops_per_token(arch, seq, parameter_counts(arch).matmul_weights_active).total
        start = time.perf_counter()
        result = search(arch, {gpus: cluster}, spec, flops)
        wall = time.perf_counter() - start
        # the first run builds the per-rank terms of each (tp, cp, recompute, micro-batch, ep) key (what a new
        # `capplan plan` process pays); later searches of the same model and GPU reuse them (the web app, sizing)
        warm = []
        for _ in range(5):
            start = time.perf_counter()
            search(arch, {gpus: cluster}, spec, flops)
            warm.append(time.perf_counter() - start)
        best = f"{result.plans[0].tokens_per_s:,.0f}" if result.plans else "none fits"
        print(
            f"{name:46s} {result.considered_plans:9,d} {result.evaluated_plans:12,d} {wall:8.3f} "
            f"{result.considered_plans / wall:10,.0f} {result.evaluated_plans / wall:10,.0f} {min(warm):8.3f} "
            f"{result.evaluated_plans / min(warm):13,.0f} {best:>14s}"
        )


def cli_bench(runs: int = 5) -> None:
    """`capplan plan` for the reference search, each run a new process (interpreter, imports, catalog, search,
    output), wall time as the user sees it; caches warm as in everyday use (bytecode, the CLI's catalog cache)."""
    command = [sys.executable, "-m", "app.cli", *REFERENCE_SEARCH]
    # bytecode as an installed package has it: one discarded run writes it, the measured runs read it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {
        "PYTHONPATH": str(REPO_ROOT)
    }
    walls = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - start)
        if proc.returncode != 0:
            print(f"\ncapplan plan failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
            return
    walls = walls[1:]
    imports = _import_seconds("import app.cli.plan", runs, env)
    floor = _import_seconds(CLI_FLOOR, runs, env)
    print(
        f"\n{'capplan plan, reference 405B search, new process':46s} median {statistics.median(walls):.3f} s, "
        f"best {min(walls):.3f} s wall over {runs} processes (target < {CLI_TARGET_S} s); "
        f"`import app.cli.plan` alone {imports:.3f} s; the floor (`{CLI_FLOOR}`) {floor:.3f} s"
    )


def _import_seconds(code: str, runs: int, env: dict[str, str]) -> float:
    """Median wall time of a new interpreter that runs ``code`` (imports) and exits (interpreter start-up
    included)."""
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, check=True)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


if __name__ == "__main__":
    main()
