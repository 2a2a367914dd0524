"""`capplan bench …`: the GPU benchmark runner — real FSDP2 steps under torchrun, reported to capplan (presets,
run, submit, show, ship, launch-cmd). torch is imported by the runner process, never here."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import UsageError, settings
from app.domain.estimator.plan import Recompute

bench_app = typer.Typer(
    help="Benchmark runner: real FSDP2 steps under torchrun, reported to capplan.",
    no_args_is_help=True,
    add_completion=False,
)


def _bench_preset(name: str, **overrides):
    from app.bench.presets import UnknownPreset, get_preset

    try:
        return get_preset(name, **overrides)
    except UnknownPreset as exc:
        raise UsageError(f"--preset: {exc}") from None


def _written_since(path: Path, started: float) -> bool:
    """Whether ``path`` holds a file written at or after ``started`` (seconds since the epoch): the runner's result,
    not one left by an earlier run."""
    try:
        return path.is_file() and path.stat().st_mtime >= started - 1.0
    except OSError:
        return False


def _load_result(path: Path):
    from pydantic import ValidationError

    from app.schemas import BenchmarkResultIn

    if not path.is_file():
        raise UsageError(f"no such file {path}")
    try:
        return BenchmarkResultIn.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"{path}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def post_result(result, url: str, token: str | None, timeout_s: float = 60.0) -> dict:
    """POST the result to ``url`` (a capplan base URL or the full /api/v1/benchmarks URL) with the token."""
    import urllib.error
    import urllib.request

    target = url.rstrip("/")
    if not target.endswith("/api/v1/benchmarks"):
        target += "/api/v1/benchmarks"
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = result.model_dump_json(by_alias=True).encode()
    req = urllib.request.Request(target, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (the user's own URL)
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")[:500]
        raise UsageError(f"--report-to {target}: HTTP {exc.code}: {body}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise UsageError(f"--report-to {target}: {exc}") from None


def _report(result, *, as_json: bool, report_to: str | None, token: str | None) -> None:
    from app.bench.report import result_table

    if as_json:
        typer.echo(result.model_dump_json(indent=2, by_alias=True))
    else:
        typer.echo(result_table(result, all_ranks=result.world_size <= 2))
    if report_to:
        answer = post_result(result, report_to, token)
        typer.echo(f"reported: {answer.get('url', '')} (run {answer.get('id')})", err=as_json)


@bench_app.command("presets")
def bench_presets(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the presets (model_parallelism_hardware)."""
    from app.bench.presets import PRESETS

    presets = [f() for f in PRESETS.values()]
    if as_json:
        typer.echo(json.dumps([p.as_config() for p in presets], indent=2))
        return
    for p in presets:
        typer.echo(f"{p.name:34s} {p.device:4s} nproc {p.nproc:<3d} {p.description}")


@bench_app.command("run")
def bench_run(
    preset: Annotated[str, typer.Option(help="preset name (capplan bench presets)")],
    nproc: Annotated[
        int | None, typer.Option(min=1, max=1024, help="processes on this node (default: the preset's)")
    ] = None,
    output: Annotated[Path | None, typer.Option(help="write the result JSON here")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the result JSON instead of the table")
    ] = False,
    report_to: Annotated[
        str | None, typer.Option("--report-to", help="capplan URL to POST the result to")
    ] = None,
    token: Annotated[
        str | None, typer.Option(help="API token for --report-to (CAPPLAN_API_TOKEN of the server)")
    ] = None,
    accelerator: Annotated[str | None, typer.Option(help="catalog accelerator to predict for")] = None,
    layers: Annotated[int | None, typer.Option(min=1, help="scale the model to this many layers")] = None,
    micro_batch: Annotated[int | None, typer.Option(min=1)] = None,
    seq_len: Annotated[int | None, typer.Option(min=2)] = None,
    recompute: Annotated[Recompute | None, typer.Option()] = None,
    steps: Annotated[int | None, typer.Option(min=0)] = None,
    timeout_s: Annotated[float, typer.Option(help="give up after this many seconds")] = 3600.0,
) -> None:
    """Run PRESET under torchrun on this node and print predicted vs measured (or post it with --report-to)."""
    import importlib.util
    import subprocess
    import tempfile

    from app.bench.report import local_command

    chosen = _bench_preset(preset)
    if importlib.util.find_spec("torch") is None:
        raise UsageError("the runner needs torch: pip install 'capplan[bench]'")
    overrides = dict(accelerator=accelerator, layers=layers, micro_batch=micro_batch, seq_len=seq_len,
                     recompute=recompute.value if recompute else None, steps=steps)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        out = output or Path(tmp) / "result.json"
        cmd = local_command(chosen.name, nproc or chosen.nproc, str(out), overrides)
        typer.echo("$ " + " ".join(cmd), err=True)
        try:  # the runner's own output (progress bar, warnings) goes to stderr; stdout stays the result
            sys.stderr.fileno()
            sink = sys.stderr
        except (AttributeError, OSError, ValueError):  # not a real file (e.g. captured in tests)
            sink = subprocess.PIPE
        started = time.time()
        try:
            proc = subprocess.run(cmd, timeout=timeout_s, check=False, stdout=sink, stderr=sink,
                                  text=True)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise UsageError(f"the runner did not finish within {timeout_s:g} s") from None
        if sink is subprocess.PIPE and proc.returncode != 0:
            typer.echo(((proc.stdout or "") + (proc.stderr or ""))[-4000:], err=True)
        if proc.returncode != 0:
            if not _written_since(out, started):
                typer.echo(
                    f"error: the runner failed (exit code {proc.returncode}); see the output above", err=True
                )
                raise typer.Exit(code=1)
            # rank 0 writes the result after every rank's figures are gathered and all passed the last barrier:
            # a non-zero exit after that is a rank aborting in the process group's teardown (seen with gloo)
            typer.echo(
                f"warning: the runner exited with code {proc.returncode} after writing its complete result "
                "(a rank aborted while tearing the process group down); the result stands",
                err=True,
            )
        result = _load_result(out)
    _report(result, as_json=as_json, report_to=report_to, token=token)


@bench_app.command("submit")
def bench_submit(
    file: Annotated[Path, typer.Argument(help="a result JSON written by capplan bench run --output")],
    report_to: Annotated[str, typer.Option("--report-to", help="capplan URL")],
    token: Annotated[str | None, typer.Option(help="API token")] = None,
) -> None:
    """Post a result file (from an offline cluster) to capplan."""
    result = _load_result(file)
    answer = post_result(result, report_to, token)
    typer.echo(f"reported: {answer.get('url', '')} (run {answer.get('id')})")


@bench_app.command("show")
def bench_show(
    files: Annotated[list[Path], typer.Argument(help="result JSON files (capplan bench run --output)")],
    markdown: Annotated[
        bool, typer.Option("--markdown", help="one Markdown table (the README's form)")
    ] = False,
    all_ranks: Annotated[bool, typer.Option("--all-ranks", help="every rank, not rank 0 only")] = False,
) -> None:
    """Print predicted vs measured for result files, as text tables or one Markdown table."""
    from app.bench.report import markdown_table, result_table

    results = [_load_result(f) for f in files]
    if markdown:
        typer.echo(markdown_table(results))
        return
    for r in results:
        typer.echo(f"== {r.preset} on {r.device_name} ({r.world_size} rank(s), {r.measured_at:%Y-%m-%d}) ==")
        typer.echo(result_table(r, all_ranks=all_ranks) + "\n")


SHIP_FOLDER_PATTERN = r"[a-z0-9][a-z0-9._-]{0,62}"
SHIP_FILE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}\.json"  # the run's key in URLs: no quoting needed


@bench_app.command("ship")
def bench_ship(
    files: Annotated[list[Path], typer.Argument(help="GPU result JSON files (scripts/gpu_calibration.sh)")],
    folder: Annotated[str, typer.Option(help="folder under data/calibration, e.g. 2026-12-h200")],
    force: Annotated[bool, typer.Option("--force", help="replace files already shipped there")] = False,
) -> None:
    """Copy GPU results under data/calibration/FOLDER, where they calibrate every estimate (API, pages, CLI)
    from then on; print what they change and the README's predicted-vs-measured table. Only runs on a catalog
    accelerator that record their torch, CUDA and driver versions are shipped."""
    import re
    import shutil

    from app.bench.report import markdown_table
    from app.calibration_store import SHIPPED_DIR, fit_all, load_shipped_runs
    from app.domain.catalog import load_catalog

    if not re.fullmatch(SHIP_FOLDER_PATTERN, folder):
        raise UsageError(
            f"--folder {folder!r}: lowercase letters, digits, '.', '_' and '-' (e.g. 2026-12-h200)"
        )
    config = settings()
    catalog = load_catalog(config.data_dir)
    known = {a.slug for a in catalog.hardware.accelerators}
    results = []
    for f in files:
        if not re.fullmatch(SHIP_FILE_PATTERN, f.name):
            raise UsageError(
                f"{f}: name the file with letters, digits, '.', '_' and '-' and .json (its URL key)"
            )
        r = _load_result(f)
        missing = sorted({"torch", "cuda", "driver"} - {k for k, v in r.software.items() if v})
        if r.accelerator is None or r.accelerator not in known:
            raise UsageError(
                f"{f}: not a run on a catalog accelerator ({r.accelerator or r.device_name}); not shipped"
            )
        if missing:
            raise UsageError(f"{f}: the result does not record {', '.join(missing)}; not shipped")
        results.append((f, r))
    target = config.data_dir / SHIPPED_DIR / folder
    clashes = [target / f.name for f, _ in results if (target / f.name).exists()]
    if clashes and not force:
        raise UsageError(f"{clashes[0]} exists; --force replaces it")
    target.mkdir(parents=True, exist_ok=True)
    for f, _ in results:
        shutil.copyfile(f, target / f.name)
        typer.echo(f"shipped {target / f.name}", err=True)
    fitted = fit_all(load_shipped_runs(config.data_dir, accelerators=known))
    for slug in sorted({r.accelerator for _, r in results if r.accelerator}):
        from app.services.benchmarks import active_calibration

        for c in active_calibration(catalog, fitted, slug):
            typer.echo(f"{slug}: {c.field} {c.default:g} → {c.value:g}  ({c.run}; {c.method})", err=True)
    typer.echo(markdown_table([r for _, r in results]))


@bench_app.command("launch-cmd")
def bench_launch_cmd(
    preset: Annotated[str, typer.Option(help="preset name")],
    nodes: Annotated[int, typer.Option(min=1, max=65536, help="nodes")] = 1,
    nproc_per_node: Annotated[int | None, typer.Option(min=1, max=1024, help="default: the preset's")] = None,
    rdzv_endpoint: Annotated[
        str, typer.Option(help="HOST:PORT of the rendezvous (the first node)")
    ] = "NODE0_HOST:29500",
    output: Annotated[str, typer.Option(help="result file written by rank 0")] = "bench-result.json",
    slurm: Annotated[bool, typer.Option("--slurm", help="print a Slurm batch script instead")] = False,
) -> None:
    """Print the multi-node torchrun (or Slurm) command that runs PRESET on NODES nodes."""
    from app.bench.report import multinode_command

    chosen = _bench_preset(preset)
    host, _, port = rdzv_endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--rdzv-endpoint: expected HOST:PORT, got {rdzv_endpoint!r}")
    typer.echo(
        multinode_command(
            chosen.name,
            nodes=nodes,
            nproc=nproc_per_node or chosen.nproc,
            rdzv_host=host,
            rdzv_port=int(port),
            output=output,
            slurm=slurm,
        )
    )
    typer.echo(f"# then: capplan bench submit {output} --report-to URL --token T", err=True)
