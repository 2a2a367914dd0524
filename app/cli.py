"""The `capplan` command line: serve, db, catalog, estimate, validate."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from app.domain.catalog import (
    CATALOG_KINDS,
    Catalog,
    CatalogError,
    UnknownSlugError,
    entry_record,
    load_catalog,
)
from app.domain.plan import Framework, Offload, Optimizer, Precision, Recompute, Sharding
from app.services import InputError
from app.settings import Settings

app = typer.Typer(help="capplan: capacity and cost planning for LLM training clusters.", no_args_is_help=True)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)
catalog_app = typer.Typer(help="Browse the hardware, price and model catalog.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(catalog_app, name="catalog")

CatalogKind = StrEnum("CatalogKind", {k: k for k in CATALOG_KINDS})


class UsageError(Exception):
    """Bad input on the command line: printed without a traceback, exit code 2."""


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def _catalog() -> Catalog:
    return load_catalog(Settings().data_dir)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64)] = 1,
    upgrade_db: Annotated[
        bool, typer.Option("--upgrade-db/--no-upgrade-db", help="Run migrations first")
    ] = True,
) -> None:
    """Run the web app (uvicorn)."""
    import uvicorn

    settings = Settings()
    load_catalog(settings.data_dir)  # fail before binding the port
    if upgrade_db:
        from app.db.migrate import upgrade

        upgrade(settings.database_url)
    typer.echo(f"capplan serving on http://{host}:{port}  (database: {settings.database_url.split('@')[-1]})")
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level.lower(),
    )


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision")] = "head") -> None:
    """Apply migrations up to REVISION (default head)."""
    from app.db.migrate import upgrade

    settings = Settings()
    upgrade(settings.database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("downgrade")
def db_downgrade(revision: Annotated[str, typer.Argument(help="Target revision, e.g. base or -1")]) -> None:
    """Revert migrations down to REVISION."""
    from app.db.migrate import downgrade

    downgrade(Settings().database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("check")
def db_check() -> None:
    """Fail if the ORM tables and the migrations disagree."""
    from app.db.migrate import check

    check(Settings().database_url)
    typer.echo("models match migrations")


@catalog_app.command("list")
def catalog_list(
    kind: Annotated[CatalogKind, typer.Argument(help="What to list")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object with every figure's provenance")
    ] = False,
    q: Annotated[str | None, typer.Option(help="Substring of slug or name")] = None,
) -> None:
    """List catalog entries of one KIND."""
    catalog = _catalog()
    entries = catalog.entries(kind.value)
    if q:
        entries = tuple(e for e in entries if q.lower() in e.slug.lower() or q.lower() in e.name.lower())
    records = [entry_record(e, catalog.sources) for e in entries]
    if as_json:
        typer.echo(json.dumps({"kind": kind.value, "count": len(records), "entries": records}, indent=2))
        return
    rows = [(r["slug"], r["name"], r["as_of"], r["source"]) for r in records]
    widths = [
        max([len(h)] + [len(str(row[i])) for row in rows])
        for i, h in enumerate(("slug", "name", "as of", "source"))
    ]
    typer.echo(
        "  ".join(h.ljust(w) for h, w in zip(("slug", "name", "as of", "source"), widths, strict=True))
    )
    for row in rows:
        typer.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))


@catalog_app.command("show")
def catalog_show(
    kind: Annotated[CatalogKind, typer.Argument(help="Kind of entry")],
    slug: Annotated[str, typer.Argument(help="The entry's slug")],
) -> None:
    """Print one entry with every figure's source, date and confidence (JSON)."""
    catalog = _catalog()
    typer.echo(json.dumps(entry_record(catalog.entry(kind.value, slug), catalog.sources), indent=2))


MAX_CONFIG_BYTES = 1_000_000


def _model_argument(model: str) -> dict:
    """A preset slug, or the path of a Hugging Face config.json (read as data, never executed)."""
    if model.endswith(".json") or "/" in model:
        path = Path(model)
        if not path.is_file():
            raise UsageError(f"--model: no such file {model}")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise UsageError(f"--model: {model} is larger than {MAX_CONFIG_BYTES} bytes; not a config.json")
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"--model: {model} is not valid JSON: {exc}") from None
        if not isinstance(config, dict):
            raise UsageError(f"--model: {model} must hold a JSON object")
        return {"hf_config": config}
    return {"model": model}


def _fail_validation(exc: ValidationError) -> None:
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "input"
        typer.echo(f"error: --{field.replace('_', '-')}: {err['msg']}", err=True)
    raise typer.Exit(code=2)


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f}"


def print_estimate(est) -> None:
    p = est.plan
    echo = typer.echo
    echo(f"{est.model} on {est.gpus} × {est.accelerator} ({est.nodes} × {est.node}, {est.scale_out_fabric})")
    echo(
        f"plan: tp={p.tp} pp={p.pp} vpp={p.vpp} dp={p.dp} cp={p.cp} ep={p.ep} {p.sharding.value} "
        f"micro-batch={p.micro_batch} global-batch={p.global_batch} seq={p.seq_len} recompute={p.recompute.value} "
        f"{p.precision.value} {p.framework.value}"
    )
    echo(f"parameters: {est.parameters_total:,} total, {est.parameters_active:,} active per token")
    verdict = "FITS" if est.fits else "DOES NOT FIT"
    echo(
        f"\nmemory per GPU: {verdict}  peak {_gib(est.peak_memory_bytes)} GiB of {_gib(est.usable_memory_bytes)} GiB usable"
        f" (margin {_gib(est.margin_bytes)} GiB; largest term: {est.dominant_term}, stage {est.peak_stage})"
    )
    cols = (
        "stage",
        "layers",
        "params",
        "grads",
        "optim",
        "activ",
        "logits",
        "gathered",
        "buffers",
        "runtime",
        "total",
        "margin",
    )
    echo("  " + "".join(c.rjust(9) for c in cols) + "   (GiB)")
    seen = set()
    for st in est.memory_by_stage:
        key = (st.layers, st.first, st.last, st.total_bytes)
        if key in seen:
            continue
        seen.add(key)
        label = f"{st.rank}" + ("F" if st.first else "") + ("L" if st.last else "")
        vals = (
            st.params_bytes,
            st.grads_bytes,
            st.optimizer_bytes,
            st.activations_bytes,
            st.logits_bytes,
            st.gathered_params_bytes,
            st.buffers_bytes + st.workspace_bytes + st.fragmentation_bytes,
            st.runtime_bytes,
            st.total_bytes,
            st.margin_bytes,
        )
        echo("  " + label.rjust(9) + str(st.layers).rjust(9) + "".join(_gib(v).rjust(9) for v in vals))
    t = est.step
    echo(
        f"\nstep time: {est.step_time_s:.3f} s  ({t.micro_batches} micro-batches × {t.micro_batch_s * 1e3:.1f} ms)"
    )
    parts = [
        ("compute", t.compute_s),
        ("recompute", t.recompute_s),
        ("TP exposed", t.tp_exposed_s),
        ("CP exposed", t.cp_exposed_s),
        ("EP exposed", t.ep_exposed_s),
        ("FSDP exposed", t.fsdp_exposed_s),
        ("PP p2p", t.pp_p2p_s),
        ("bubble", t.bubble_s),
        ("DP exposed", t.dp_exposed_s),
        ("optimizer", t.optimizer_s),
    ]
    for name, v in parts:
        if v > 0:
            echo(f"  {name:14s}{v:10.3f} s  {v / est.step_time_s:6.1%}")
    echo(
        f"\nthroughput: {est.tokens_per_s:,.0f} tokens/s ({est.tokens_per_s_per_gpu:,.0f} per GPU); "
        f"MFU {est.mfu:.1%}, HFU {est.hfu:.1%}; {est.achieved_tflops_per_gpu:.0f} TFLOP/s per GPU"
    )
    echo(f"model FLOPs per token: {est.model_flops_per_token:.4g} ({est.flops_formula})")
    if est.time_to_train_days is not None:
        echo(
            f"time to train {est.tokens_to_train:.3g} tokens: {est.time_to_train_days:,.1f} days (before failures)"
        )
    low = [a for a in est.assumptions if a.confidence == "low"]
    if low:
        echo("low-confidence figures used: " + ", ".join(a.name for a in low))


@app.command()
def estimate(
    model: Annotated[
        str, typer.Option(help="preset slug (capplan catalog list architectures) or path to a config.json")
    ],
    gpu: Annotated[str, typer.Option(help="accelerator slug, e.g. h100-sxm")],
    gpus: Annotated[int, typer.Option(help="number of GPUs")],
    global_batch: Annotated[int, typer.Option(help="sequences per optimizer step")],
    seq_len: Annotated[int, typer.Option(help="tokens per sequence")],
    node: Annotated[
        str | None, typer.Option(help="node or instance slug (default: reference server)")
    ] = None,
    fabric: Annotated[str | None, typer.Option(help="scale-out fabric slug (default: the node's)")] = None,
    tp: Annotated[int, typer.Option(help="tensor parallel")] = 1,
    pp: Annotated[int, typer.Option(help="pipeline parallel")] = 1,
    vpp: Annotated[int, typer.Option(help="virtual pipeline chunks per rank")] = 1,
    cp: Annotated[int, typer.Option(help="context parallel")] = 1,
    ep: Annotated[int, typer.Option(help="expert parallel")] = 1,
    dp: Annotated[int | None, typer.Option(help="data parallel (default: gpus / (tp·pp·cp))")] = None,
    sharding: Annotated[Sharding, typer.Option(help="data-parallel sharding")] = Sharding.fsdp_full,
    shard_group_size: Annotated[int | None, typer.Option(help="HSDP shard group size")] = None,
    offload: Annotated[Offload, typer.Option()] = Offload.none,
    micro_batch: Annotated[int, typer.Option(help="sequences per micro-batch")] = 1,
    recompute: Annotated[Recompute, typer.Option()] = Recompute.none,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel")] = False,
    flash_attention: Annotated[bool, typer.Option("--flash-attention/--no-flash-attention")] = True,
    fused_kernels: Annotated[
        bool | None, typer.Option("--fused-kernels/--eager", help="default: by framework")
    ] = None,
    precision: Annotated[Precision, typer.Option()] = Precision.bf16,
    optimizer: Annotated[Optimizer, typer.Option()] = Optimizer.adamw,
    framework: Annotated[Framework, typer.Option()] = Framework.fsdp2,
    tokens: Annotated[float | None, typer.Option(help="tokens to train, for time to train")] = None,
    oversubscription: Annotated[float, typer.Option(help="fat-tree oversubscription")] = 1.0,
    power_limit_w: Annotated[float | None, typer.Option(help="GPU power cap in W")] = None,
    allow_tp_across_nodes: Annotated[bool, typer.Option("--allow-tp-across-nodes")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Memory per pipeline stage, step time and breakdown, tokens/s and MFU for one plan."""
    from app.schemas import EstimateRequest
    from app.services import run_estimate

    values = dict(
        gpu=gpu,
        node=node,
        fabric=fabric,
        gpus=gpus,
        tp=tp,
        pp=pp,
        vpp=vpp,
        dp=dp,
        cp=cp,
        ep=ep,
        sharding=sharding,
        shard_group_size=shard_group_size,
        offload=offload,
        micro_batch=micro_batch,
        global_batch=global_batch,
        seq_len=seq_len,
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        flash_attention=flash_attention,
        fused_kernels=fused_kernels,
        precision=precision,
        optimizer=optimizer,
        framework=framework,
        tokens=tokens,
        oversubscription=oversubscription,
        power_limit_w=power_limit_w,
        allow_tp_across_nodes=allow_tp_across_nodes,
        **_model_argument(model),
    )
    try:
        request = EstimateRequest(**values)
    except ValidationError as exc:
        _fail_validation(exc)
    result = run_estimate(_catalog(), request)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_estimate(result)


@app.command()
def validate(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Predicted vs published throughput for every run in data/published_runs.toml."""
    from app.domain.validation import validate as run_validation

    report = run_validation(_catalog())
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    typer.echo(f"{'run':44s} {'GPUs':>5s} {'metric':28s} {'published':>10s} {'predicted':>10s} {'error':>8s}")
    for row in report.rows:
        if row.error is None:
            typer.echo(f"{row.run:44s} {row.gpus:5d} skipped: {row.skipped}")
            continue
        typer.echo(
            f"{row.run:44s} {row.gpus:5d} {row.metric:28s} {row.published:10.4g} {row.predicted:10.4g} {row.error:+8.1%}"
        )
    if report.compared:
        typer.echo(
            f"\n{report.compared} runs compared: median |error| {report.median_abs_error:.1%}, "
            f"max |error| {report.max_abs_error:.1%} ({report.worst_run})"
        )


def main() -> None:
    """Console entry point: known errors print one line and exit 2, never a traceback."""
    try:
        app(standalone_mode=True)
    except (CatalogError, UnknownSlugError, UsageError, InputError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
