"""The `capplan` command line: serve, db, catalog, estimate, validate."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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
from app.domain.export import (
    ExportFormat,
    PlanDocument,
    PlanDocumentError,
    export_plan,
    parse_plan_document,
    request_fields,
)
from app.domain.plan import Framework, Offload, Optimizer, Precision, Recompute, Sharding
from app.schemas import EstimateRequest, load_json_text
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


# Options shared by `estimate`, `export` and `cost` (one definition each; the commands list them by name).
FabricOpt = Annotated[str | None, typer.Option(help="scale-out fabric slug (default: the node's)")]
TpOpt = Annotated[int, typer.Option(help="tensor parallel")]
PpOpt = Annotated[int, typer.Option(help="pipeline parallel")]
VppOpt = Annotated[int, typer.Option(help="virtual pipeline chunks per rank")]
CpOpt = Annotated[int, typer.Option(help="context parallel")]
EpOpt = Annotated[int, typer.Option(help="expert parallel")]
DpOpt = Annotated[int | None, typer.Option(help="data parallel (default: gpus / (tp·pp·cp))")]
ShardingOpt = Annotated[Sharding, typer.Option(help="data-parallel sharding")]
ShardGroupOpt = Annotated[int | None, typer.Option(help="HSDP shard group size")]
OffloadOpt = Annotated[Offload, typer.Option()]
MicroBatchOpt = Annotated[int, typer.Option(help="sequences per micro-batch")]
RecomputeOpt = Annotated[Recompute, typer.Option()]
SequenceParallelOpt = Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel")]
FlashAttentionOpt = Annotated[bool, typer.Option("--flash-attention/--no-flash-attention")]
FusedKernelsOpt = Annotated[
    bool | None, typer.Option("--fused-kernels/--eager", help="default: by framework")
]
PrecisionOpt = Annotated[Precision, typer.Option()]
OptimizerOpt = Annotated[Optimizer, typer.Option()]
FrameworkOpt = Annotated[Framework, typer.Option()]
OversubscriptionOpt = Annotated[float, typer.Option(help="fat-tree oversubscription")]
PowerLimitOpt = Annotated[float | None, typer.Option(help="GPU power cap in W")]
TpAcrossNodesOpt = Annotated[bool, typer.Option("--allow-tp-across-nodes")]
CalibrationOpt = Annotated[
    bool,
    typer.Option(
        "--calibration/--no-calibration",
        help="use the calibration fitted from benchmark runs (those shipped under data/calibration, "
        "--calibration-run files, and with --calibration-db the database's); --no-calibration: catalog defaults",
    ),
]
CalibrationRunOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--calibration-run",
        help="a runner result JSON (capplan bench run --output) to calibrate with; repeat",
    ),
]
CalibrationDbOpt = Annotated[
    bool,
    typer.Option("--calibration-db", help="also calibrate with the runs posted to CAPPLAN_DATABASE_URL"),
]


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def _catalog(calibration: bool = False, runs: list[Path] | None = None, from_db: bool = False) -> Catalog:
    """The catalog; with ``calibration``, fitted from the shipped runs, the ``runs`` files and (``from_db``) the
    runs stored in the configured database: the same calibration the server uses, from the command line."""
    settings = Settings()
    catalog = load_catalog(settings.data_dir)
    if not calibration:
        if runs or from_db:
            raise UsageError(
                "--calibration-run/--calibration-db need calibration on (--no-calibration or the plan file "
                "turned it off; give --calibration)"
            )
        return catalog
    from app.calibration_store import CalibrationFileError, fit_all, load_shipped_runs, result_file_runs

    try:
        known = [a.slug for a in catalog.hardware.accelerators]
        shipped = load_shipped_runs(settings.data_dir, accelerators=known)
        extra = result_file_runs(runs or [], accelerators=known)
    except CalibrationFileError as exc:
        fail(str(exc))
    if from_db:
        from app.calibration_store import stored_calibration_runs_or_none
        from app.db.engine import build_engine, session_factory

        engine = build_engine(settings.database_url)
        try:
            with session_factory(engine)() as session:
                stored = stored_calibration_runs_or_none(session)
        finally:
            engine.dispose()
        if stored is None:
            fail(
                f"--calibration-db: cannot read the benchmark runs in {settings.database_url.split('@')[-1]}"
            )
        extra += stored or []
    return catalog.with_calibrations(fit_all(shipped, extra))


def _safe_url(url: str) -> str:
    """The database URL without its credentials, for messages."""
    return url.split("@")[-1]


@contextmanager
def database_errors(url: str) -> Iterator[None]:
    """Database failures as one line (exit 2): unreachable server, bad URL, unmigrated tables."""
    from sqlalchemy.exc import (
        ArgumentError,
        NoSuchModuleError,
        OperationalError,
        ProgrammingError,
        SQLAlchemyError,
    )

    try:
        yield
    except (ArgumentError, NoSuchModuleError) as exc:
        raise UsageError(
            f"CAPPLAN_DATABASE_URL is not a usable database URL: {str(exc).splitlines()[0]}"
        ) from None
    except (OperationalError, ProgrammingError) as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc).splitlines()[0]
        if "no such table" in reason or "does not exist" in reason and "relation" in reason:
            raise UsageError(
                f"the database {_safe_url(url)} is not migrated: run `capplan db upgrade` first ({reason})"
            ) from None
        raise UsageError(f"cannot use the database {_safe_url(url)}: {reason}") from None
    except SQLAlchemyError as exc:
        raise UsageError(f"database {_safe_url(url)}: {str(exc).splitlines()[0]}") from None


def _require_migrated(url: str) -> None:
    from app.db.migrate import current_revision, head_revision

    current = current_revision(url)
    if current is None:
        raise UsageError(
            f"the database {_safe_url(url)} is empty (never migrated): run `capplan db upgrade` first"
        )
    if current != head_revision():
        raise UsageError(
            f"the database {_safe_url(url)} is at revision {current}, not {head_revision()}: run `capplan db upgrade`"
        )


def _writable_output(output: Path) -> None:
    if output.is_dir():
        raise UsageError(f"-o {output}: is a directory; give a file name")
    if not output.parent.is_dir():
        raise UsageError(f"-o {output}: the directory {output.parent} does not exist")
    if output.exists() and not output.is_file():  # a FIFO would block until someone reads it: a hang
        raise UsageError(
            f"-o {output}: not a regular file (a device, socket or named pipe); give a file name"
        )


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
    catalog = load_catalog(settings.data_dir)  # fail before binding the port: the catalog, the shipped runs
    from app.calibration_store import CalibrationFileError, load_shipped_runs

    try:
        load_shipped_runs(settings.data_dir, accelerators=[a.slug for a in catalog.hardware.accelerators])
    except CalibrationFileError as exc:
        fail(str(exc))
    if upgrade_db:
        from app.db.migrate import upgrade

        with database_errors(settings.database_url):
            upgrade(settings.database_url)
    typer.echo(f"capplan serving on http://{host}:{port}  (database: {_safe_url(settings.database_url)})")
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
    with database_errors(settings.database_url):
        upgrade(settings.database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision, e.g. base, 0001 or (after --) -1")],
    yes: Annotated[
        bool, typer.Option("--yes", help="drop the tables and their rows named in the warning")
    ] = False,
    backup: Annotated[
        Path | None,
        typer.Option("--backup", help="write `capplan db export` to this file before downgrading"),
    ] = None,
) -> None:
    """Revert migrations down to REVISION. A downgrade that drops tables holding rows is refused without --yes;
    the message lists them, and --backup FILE writes a backup first."""
    from app.db.migrate import downgrade, downgrade_drops

    url = Settings().database_url
    with database_errors(url):
        drops = downgrade_drops(url, revision)
        rows = sum(drops.values())
        if rows and not yes:
            listed = ", ".join(f"{t} ({n} rows)" for t, n in drops.items() if n)
            raise UsageError(
                f"downgrading to {revision} drops {listed}: nothing was changed. Back them up "
                f"(`capplan db export -o backup.json`, or add --backup FILE) and repeat with --yes"
            )
        if backup is not None:
            _write_backup(url, backup)
        downgrade(url, revision)
    dropped = f"; dropped {rows} rows in {', '.join(drops)}" if rows else ""
    typer.echo(f"database at {revision}{dropped}")


@db_app.command("check")
def db_check() -> None:
    """Fail if the ORM tables and the migrations disagree."""
    from alembic.util import AutogenerateDiffsDetected

    from app.db.migrate import check

    url = Settings().database_url
    with database_errors(url):
        _require_migrated(url)
        try:
            check(url)
        except AutogenerateDiffsDetected as exc:
            raise UsageError(f"models and migrations differ: {str(exc).splitlines()[0][:300]}") from None
    typer.echo("models match migrations")


def _write_backup(url: str, output: Path | None) -> None:
    from app.db.backup import export_backup
    from app.db.engine import build_engine, session_factory

    if output is not None:
        _writable_output(output)
    with database_errors(url):
        _require_migrated(url)
        engine = build_engine(url)
        try:
            with session_factory(engine)() as session:
                backup = export_backup(session)
        finally:
            engine.dispose()
    text = backup.model_dump_json(by_alias=True, indent=2)
    if output is None:
        typer.echo(text)
        return
    try:
        output.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"-o {output}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {output}: {len(backup.scenarios)} scenarios, {len(backup.custom_catalog_entries)} custom "
               f"catalog entries, {len(backup.benchmark_runs)} benchmark runs", err=True)  # fmt: skip


@db_app.command("export")
def db_export(
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="file to write (default: stdout)")
    ] = None,
) -> None:
    """Every scenario, custom catalog entry and benchmark run as one JSON document (capplan.backup/v1)."""
    _write_backup(Settings().database_url, output)


MAX_BACKUP_BYTES = 2_000_000_000


@db_app.command("import")
def db_import(
    path: Annotated[Path, typer.Argument(help="a file written by `capplan db export`")],
    replace: Annotated[bool, typer.Option("--replace", help="empty the tables first")] = False,
) -> None:
    """Restore a backup in one transaction (ids and versions kept). Without --replace an existing id aborts the
    import. NUL characters (which PostgreSQL cannot store) are replaced by U+FFFD and counted."""
    from sqlalchemy.exc import IntegrityError

    from app.db.backup import Backup, import_backup
    from app.db.engine import build_engine, session_factory

    if not path.is_file():
        raise UsageError(f"no such file {path}")
    if path.stat().st_size > MAX_BACKUP_BYTES:
        raise UsageError(f"{path}: larger than {MAX_BACKUP_BYTES:,} bytes; not a capplan backup")
    try:
        backup = Backup.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: {where + ': ' if where else ''}{first['msg']}") from None
    url = Settings().database_url
    with database_errors(url):
        _require_migrated(url)
        engine = build_engine(url)
        try:
            with session_factory(engine)() as session:
                counts = import_backup(session, backup, replace=replace)
        except IntegrityError:
            raise UsageError(
                f"{path}: rows with these ids already exist; nothing was imported (use --replace)"
            ) from None
        finally:
            engine.dispose()
    nul = counts.pop("nul_characters_replaced", 0)
    typer.echo("imported " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items()))
    if nul:
        typer.echo(f"note: {nul} NUL characters replaced by U+FFFD (PostgreSQL cannot store them)", err=True)


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
            config = load_json_text(path.read_text(encoding="utf-8"), model)
        except (UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"--model: {exc}") from None
        if not isinstance(config, dict):
            raise UsageError(f"--model: {model} must hold a JSON object")
        return {"hf_config": config}
    return {"model": model}


def _figure_overrides(assignments: list[str]) -> dict[str, float]:
    """``--figure KEY=VALUE`` options as a dict (the keys are checked by the estimate)."""
    out: dict[str, float] = {}
    for text in assignments:
        key, sep, value = text.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise UsageError(f"--figure {text!r}: expected KEY=NUMBER, e.g. efficiency.gemm_efficiency=0.6")
    return out


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
    for a in est.assumptions:
        if a.name == "calibration":
            echo(f"calibration: {a.value}" + (f" ({a.note})" if a.source.startswith("calibrated") else ""))
    low = [a for a in est.assumptions if a.confidence == "low"]
    if low:
        echo("low-confidence figures used: " + ", ".join(a.name for a in low))


@app.command()
def estimate(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option(help="preset slug (capplan catalog list architectures) or path to a config.json"),
    ] = None,
    gpu: Annotated[str | None, typer.Option(help="accelerator slug, e.g. h100-sxm")] = None,
    gpus: Annotated[int | None, typer.Option(help="number of GPUs")] = None,
    global_batch: Annotated[int | None, typer.Option(help="sequences per optimizer step")] = None,
    seq_len: Annotated[int | None, typer.Option(help="tokens per sequence")] = None,
    plan_file: Annotated[
        Path | None, typer.Option("--plan", help="a capplan plan.json (from `capplan export --format json`)")
    ] = None,
    node: Annotated[
        str | None, typer.Option(help="node or instance slug (default: reference server)")
    ] = None,
    fabric: FabricOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    vpp: VppOpt = 1,
    cp: CpOpt = 1,
    ep: EpOpt = 1,
    dp: DpOpt = None,
    sharding: ShardingOpt = Sharding.fsdp_full,
    shard_group_size: ShardGroupOpt = None,
    offload: OffloadOpt = Offload.none,
    micro_batch: MicroBatchOpt = 1,
    recompute: RecomputeOpt = Recompute.none,
    sequence_parallel: SequenceParallelOpt = False,
    flash_attention: FlashAttentionOpt = True,
    fused_kernels: FusedKernelsOpt = None,
    precision: PrecisionOpt = Precision.bf16,
    optimizer: OptimizerOpt = Optimizer.adamw,
    framework: FrameworkOpt = Framework.fsdp2,
    tokens: Annotated[float | None, typer.Option(help="tokens to train, for time to train")] = None,
    oversubscription: OversubscriptionOpt = 1.0,
    power_limit_w: PowerLimitOpt = None,
    allow_tp_across_nodes: TpAcrossNodesOpt = False,
    figure: Annotated[
        list[str] | None,
        typer.Option(
            "--figure", help="override a catalog figure, KEY=VALUE (e.g. efficiency.gemm_efficiency=0.6)"
        ),
    ] = None,
    calibration: CalibrationOpt = True,
    calibration_run: CalibrationRunOpt = None,
    calibration_db: CalibrationDbOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Memory per pipeline stage, step time and breakdown, tokens/s and MFU for one plan (or --plan FILE)."""
    from app.schemas import EstimateRequest
    from app.services import run_estimate

    if plan_file is not None:
        given = _given_on_command_line(ctx, ESTIMATE_OPTIONS)
        if given:
            raise UsageError(
                f"--plan replaces the estimate options; drop {', '.join('--' + g.replace('_', '-') for g in given)}"
            )
        request = plan_file_to_request(plan_file)  # calibrated as the plan was, unless told otherwise here
        if _given_on_command_line(ctx, ("calibration",)):
            request = request.model_copy(update={"calibrated": calibration})
        result = run_estimate(_catalog(request.calibrated, calibration_run, calibration_db), request)
        was = load_plan_file(plan_file).estimate.calibration
        now = next((str(a.value) for a in result.assumptions if a.name == "calibration"), None)
        if was is not None and now != was:
            typer.echo(f"note: the plan file's estimate was {was!r}, this one is {now!r}: "
                       "the figures differ by that calibration", err=True)  # fmt: skip
        typer.echo(result.model_dump_json(indent=2)) if as_json else print_estimate(result)
        return
    missing = [n for n, v in (("model", model), ("gpu", gpu), ("gpus", gpus), ("global-batch", global_batch),
                              ("seq-len", seq_len)) if v is None]  # fmt: skip
    if missing:
        raise UsageError(f"missing {', '.join('--' + m for m in missing)} (or give --plan plan.json)")
    values = {name: ctx.params[name] for name in ESTIMATE_OPTIONS if name != "model"}
    values.update(
        figure_overrides=_figure_overrides(figure or []), calibrated=calibration, **_model_argument(model)
    )
    try:
        request = EstimateRequest(**values)
    except ValidationError as exc:
        _fail_validation(exc)
    result = run_estimate(_catalog(calibration, calibration_run, calibration_db), request)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_estimate(result)


@app.command()
def validate(
    cv: Annotated[
        bool,
        typer.Option(
            "--cv", help="cross-validate: refit without each source family and score it (the accuracy figure)"
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Predicted vs published throughput for every published run: out of sample with --cv, else the fit error."""
    catalog = _catalog()
    if cv:
        from app.domain.fitting import cross_validate

        report = cross_validate(catalog)
        if as_json:
            typer.echo(report.model_dump_json(indent=2))
            return
        _print_cv(report)
        return
    from app.domain.validation import validate as run_validation

    report = run_validation(catalog)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    typer.echo(
        f"{'run':44s} {'GPUs':>5s} {'metric':28s} {'published':>10s} {'predicted':>10s} {'fit err':>8s}"
    )
    for row in report.rows:
        if row.error is None:
            typer.echo(f"{row.run:44s} {row.gpus:5d} skipped: {row.skipped}")
            continue
        typer.echo(
            f"{row.run:44s} {row.gpus:5d} {row.metric:28s} {row.published:10.4g} {row.predicted:10.4g} {row.error:+8.1%}"
        )
    if report.compared:
        typer.echo(
            f"\n{report.compared} runs, FIT error (in sample, not accuracy): median |error| "
            f"{report.median_abs_error:.1%}, max {report.max_abs_error:.1%} ({report.worst_run})"
        )
    if report.memory_compared:
        typer.echo(
            f"memory: {report.memory_compared} runs publish a peak per GPU; median |error| "
            f"{report.memory_median_abs_error:.1%}, max {report.memory_max_abs_error:.1%} (not fitted: out of sample)"
        )
    fit = catalog.fit
    if fit is not None and fit.cv_median_abs_error is not None:
        typer.echo(
            f"accuracy (leave-one-source-family-out, fit of {fit.date}): median |error| "
            f"{fit.cv_median_abs_error:.1%}, max {fit.cv_max_abs_error:.1%} — `capplan validate --cv` recomputes it"
        )


def _print_cv(report) -> None:  # noqa: ANN001 - app.domain.fitting.CVReport, imported lazily
    typer.echo(
        f"{'run':44s} {'family':22s} {'stack':9s} {'gpu':10s} {'GPUs':>5s} {'published':>10s} "
        f"{'predicted':>10s} {'CV err':>7s} {'fit err':>7s}"
    )
    for r in report.rows:
        typer.echo(
            f"{r.run:44s} {r.family:22s} {r.stack:9s} {r.accelerator:10s} {r.gpus:5d} {r.published:10.4g} "
            f"{r.predicted_cv:10.4g} {r.cv_error:+7.1%} {r.fit_error:+7.1%}"
        )
    typer.echo("")
    for title, groups in (("stack", report.by_stack), ("accelerator", report.by_accelerator),
                          ("source family", report.by_family)):  # fmt: skip
        typer.echo(f"by {title}: " + "; ".join(
            f"{g.group} {g.cv_median_abs_error:.1%} ({g.runs})" for g in groups))  # fmt: skip
    typer.echo(
        f"\n{len(report.rows)} runs, {report.families} source families. ACCURACY (out of sample, each family "
        f"left out of the fit): median |error| {report.cv_median_abs_error:.1%}, max {report.cv_max_abs_error:.1%} "
        f"({report.cv_worst_run}). Fit error (in sample): median {report.fit_median_abs_error:.1%}, "
        f"max {report.fit_max_abs_error:.1%}."
    )


@app.command("calibrate-published")
def calibrate_published(
    write: Annotated[
        bool, typer.Option("--write/--dry-run", help="write data/fitted.toml (default) or only print the fit")
    ] = True,
) -> None:
    """Fit the estimator's shared constants on the published runs, cross-validate, write data/fitted.toml."""
    import datetime

    from app.domain.fitted import FITTED_FILE, PARAMETERS, fit_record_toml
    from app.domain.fitting import cross_validate, fit, fit_record, scorable_runs

    catalog = _catalog()
    runs = scorable_runs(catalog)
    if not runs:
        fail("no published run can be scored; nothing to fit")
    result = fit(catalog, runs)
    report = cross_validate(catalog, result)
    record = fit_record(result, report, datetime.date.today().isoformat())
    priors = catalog.efficiency_priors or catalog.efficiency
    typer.echo(f"{'constant':24s} {'prior':>7s} {'fitted':>7s} {'runs':>5s}")
    for p in PARAMETERS:
        informed = record.runs_per_parameter.get(p.name, 0)
        label = f"{record.values[p.name]:7.3f}" if informed else "assumed"
        typer.echo(f"{p.name:24s} {p.prior(priors):7.3f} {label:>7s} {informed:5d}")
    _print_cv(report)
    if write:
        path = Settings().data_dir / FITTED_FILE
        path.write_text(fit_record_toml(record), encoding="utf-8")
        typer.echo(f"wrote {path}")


# -- capplan export: a plan as runnable configuration (issue 4) -------------------------------------------

MAX_PLAN_FILE_BYTES = 2_000_000
ESTIMATE_OPTIONS = (
    "model", "gpu", "gpus", "global_batch", "seq_len", "node", "fabric", "tp", "pp", "vpp", "cp", "ep", "dp",
    "sharding", "shard_group_size", "offload", "micro_batch", "recompute", "sequence_parallel", "flash_attention",
    "fused_kernels", "precision", "optimizer", "framework", "tokens", "oversubscription", "power_limit_w",
    "allow_tp_across_nodes",
)  # fmt: skip


def load_plan_file(path: Path) -> PlanDocument:
    """The plan document in ``path`` (capplan.plan/v1); UsageError naming the file and field otherwise."""
    if not path.is_file():
        raise UsageError(f"--plan: no such file {path}")
    if path.stat().st_size > MAX_PLAN_FILE_BYTES:
        raise UsageError(
            f"--plan: {path} is larger than {MAX_PLAN_FILE_BYTES} bytes; not a capplan plan file"
        )
    try:
        return parse_plan_document(path.read_bytes())
    except PlanDocumentError as exc:
        raise UsageError(f"--plan {path}: {exc}") from None


def plan_file_to_request(path: Path) -> EstimateRequest:
    """The EstimateRequest that reproduces the plan in ``path``: what `capplan estimate --plan` runs."""
    try:
        return EstimateRequest(**request_fields(load_plan_file(path)))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"--plan {path}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def _given_on_command_line(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """Options typed on the command line (not defaults); typer vendors click, so compare the source by name."""
    sources = {n: ctx.get_parameter_source(n) for n in names}
    return [n for n, src in sources.items() if src is not None and src.name == "COMMANDLINE"]


@app.command("export")
def export_command(
    ctx: typer.Context,
    plan_file: Annotated[
        Path | None, typer.Option("--plan", help="a capplan plan file (capplan.plan/v1 JSON)")
    ] = None,
    fmt: Annotated[
        ExportFormat, typer.Option("--format", help="what to write", case_sensitive=False)
    ] = ExportFormat.json,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write to this file, not stdout")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="without --plan: preset slug or path to a config.json")
    ] = None,
    gpu: Annotated[str | None, typer.Option(help="without --plan: accelerator slug")] = None,
    gpus: Annotated[int | None, typer.Option(help="without --plan: number of GPUs")] = None,
    global_batch: Annotated[int | None, typer.Option(help="without --plan: sequences per step")] = None,
    seq_len: Annotated[int | None, typer.Option(help="without --plan: tokens per sequence")] = None,
    node: Annotated[str | None, typer.Option()] = None,
    fabric: FabricOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    vpp: VppOpt = 1,
    cp: CpOpt = 1,
    ep: EpOpt = 1,
    dp: DpOpt = None,
    sharding: ShardingOpt = Sharding.fsdp_full,
    shard_group_size: ShardGroupOpt = None,
    offload: OffloadOpt = Offload.none,
    micro_batch: MicroBatchOpt = 1,
    recompute: RecomputeOpt = Recompute.none,
    sequence_parallel: SequenceParallelOpt = False,
    flash_attention: FlashAttentionOpt = True,
    fused_kernels: FusedKernelsOpt = None,
    precision: PrecisionOpt = Precision.bf16,
    optimizer: OptimizerOpt = Optimizer.adamw,
    framework: FrameworkOpt = Framework.fsdp2,
    tokens: Annotated[float | None, typer.Option(help="tokens to train (sets the training steps)")] = None,
    oversubscription: OversubscriptionOpt = 1.0,
    power_limit_w: PowerLimitOpt = None,
    allow_tp_across_nodes: TpAcrossNodesOpt = False,
    calibration: CalibrationOpt = True,
    calibration_run: CalibrationRunOpt = None,
    calibration_db: CalibrationDbOpt = False,
) -> None:
    """Write a plan as plan JSON, torchtitan TOML, a torchrun command, Megatron-LM arguments, DeepSpeed JSON,
    a Slurm script or a Kubernetes PyTorchJob — from --plan plan.json, or from the estimate options."""
    given = _given_on_command_line(ctx, ESTIMATE_OPTIONS)
    if plan_file is not None:
        given += _given_on_command_line(ctx, ("calibration", "calibration_run", "calibration_db"))
        if given:
            raise UsageError(
                f"--plan already holds the model, hardware and plan (exported as estimated); "
                f"drop --{given[0].replace('_', '-')}"
            )
        doc = load_plan_file(plan_file)
    else:
        from app.services import plan_document_from_request

        required = {
            "model": model,
            "gpu": gpu,
            "gpus": gpus,
            "global_batch": global_batch,
            "seq_len": seq_len,
        }
        missing = [f"--{k.replace('_', '-')}" for k, v in required.items() if v is None]
        if missing:
            raise UsageError(f"give --plan plan.json, or the estimate options (missing {', '.join(missing)})")
        values = {name: ctx.params[name] for name in ESTIMATE_OPTIONS if name != "model"}
        try:
            request = EstimateRequest(**values, calibrated=calibration, **_model_argument(model))  # type: ignore[arg-type]
        except ValidationError as exc:
            _fail_validation(exc)
        doc = plan_document_from_request(_catalog(calibration, calibration_run, calibration_db), request)
    try:
        exported = export_plan(doc, fmt)
    except PlanDocumentError as exc:
        raise UsageError(f"cannot export this plan as {fmt.value}: {exc}") from None
    if output is None:
        typer.echo(exported.content, nl=False)
    else:
        output.write_bytes(exported.content.encode("utf-8"))
        typer.echo(f"wrote {output} ({fmt.value}, {exported.media_type})", err=True)
    for note in exported.notes:
        typer.echo(f"note: {note}", err=True)


# -- capplan cost: days and dollars to train N tokens, or the monthly bill of a cluster (issue 5) ----------

from app.domain.cost import CostOption, CostOverrides  # noqa: E402

COST_ESTIMATE_OPTIONS = tuple(n for n in ESTIMATE_OPTIONS if n not in ("node", "tokens"))
"""`capplan cost` takes the estimate options but its own --tokens and a --node that also serves --monthly."""
MAX_OVERRIDES_FILE_BYTES = 1_000_000


def _override_value(text: str) -> object:
    """A --set value: JSON when it parses (numbers, true/false, null, lists), else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cost_overrides(assignments: list[str], overrides_file: Path | None) -> CostOverrides:
    """Overrides from a JSON file, then ``KEY=VALUE`` assignments (dotted keys reach nested groups:
    ``self_build.pue=1.2``, ``reliability.checkpoint_mode=sync``); UsageError naming the key otherwise."""
    data: dict = {}
    if overrides_file is not None:
        if not overrides_file.is_file():
            raise UsageError(f"--overrides: no such file {overrides_file}")
        if overrides_file.stat().st_size > MAX_OVERRIDES_FILE_BYTES:
            raise UsageError(f"--overrides: {overrides_file} is larger than {MAX_OVERRIDES_FILE_BYTES} bytes")
        try:
            data = json.loads(overrides_file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"--overrides: {overrides_file} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise UsageError(f"--overrides: {overrides_file} must hold a JSON object")
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {assignment!r}: expected KEY=VALUE, e.g. --set self_build.pue=1.2")
        target = data
        *groups, leaf = key.strip().split(".")
        for group in groups:
            target = target.setdefault(group, {})
            if not isinstance(target, dict):
                raise UsageError(f"--set {key}: {group} is not a group of overrides")
        target[leaf] = _override_value(value.strip())
    try:
        return CostOverrides.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"--set {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def _cost_validation_error(exc: ValidationError) -> UsageError:
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    where = (
        f"--set {'.'.join(loc[1:])}"
        if loc and loc[0] == "overrides"
        else f"--{'-'.join(loc).replace('_', '-')}"
    )
    return UsageError(f"{where or 'input'}: {first['msg']}")


def _usd(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def print_training_cost(result) -> None:
    echo = typer.echo
    rel = result.reliability
    echo(
        f"{result.model} on {result.gpus} × {result.accelerator}: {result.tokens:.3g} tokens at "
        f"{result.tokens_per_s:,.0f} tokens/s on {result.instances} × {result.instance}"
        + ("" if result.fits else "  (the plan does NOT fit in memory)")
    )
    echo(
        f"reliability: job MTBF {result.job_mtbf_hours:.2f} h ({rel.failure_record or 'override'}); checkpoint "
        f"{rel.checkpoint_bytes / 1e12:.2f} TB, {rel.checkpoint_mode}, blocks {rel.checkpoint_blocking_s:.2f} s, "
        f"writes in {rel.checkpoint_write_s:.1f} s; every {result.checkpoint_interval_s:,.0f} s ({rel.interval_formula}); "
        f"restart {rel.restart_s:,.0f} s; goodput {result.goodput:.1%}; ~{result.expected_failures:,.0f} failures expected"
    )
    if rel.checkpoint_mode == "async":
        echo(
            f"  async save: {rel.checkpoint_blocking_s:.2f} s snapshot to host memory + {rel.background_slowdown:.0%} "
            f"slower for the {rel.background_write_s:.1f} s background write = {rel.checkpoint_overhead_s:.2f} s lost per save"
        )
    echo(
        "  interval sensitivity: "
        + ", ".join(
            f"{p.factor:g}× ({p.interval_s:,.0f} s{', the write time' if p.limited_by_write else ''}) goodput {p.goodput:.2%}"
            for p in rel.interval_sensitivity
        )
    )
    rule = rel.rule_of_thumb
    extra = (
        ""
        if result.rule_of_thumb_extra_usd is None
        else f", +${result.rule_of_thumb_extra_usd:,.0f} on-demand"
    )
    if not rule.same_as_interval:
        echo(
            f"  checkpointing every {rule.interval_s / 60:g} min instead: goodput {rule.goodput:.1%}, "
            f"+{result.rule_of_thumb_extra_days:.1f} days{extra}"
        )
    echo("")
    echo(
        f"{'option':18s} {'$/GPU-h':>8s} {'days':>8s} {'goodput':>8s} {'total $':>16s} {'cash $':>16s} "
        f"{'amortised $':>16s} {'$/1B tokens':>12s}"
    )
    for row in result.options:
        if not row.available:
            echo(f"{row.option.value:18s} n/a: {row.reason}")
            continue
        echo(
            f"{row.option.value:18s} {row.usd_per_gpu_hour:8.2f} {row.days:8.1f} {row.goodput:8.1%} "
            f"{_usd(row.total_usd):>16s} {_usd(row.cash_usd):>16s} {_usd(row.amortised_usd):>16s} "
            f"{_usd(row.usd_per_1b_tokens):>12s}"
        )
        for note in row.notes:
            echo(f"{'':18s}   {note}")
    if result.other_clouds:
        echo("\nother clouds (dated prices with their sources; low-confidence ones are estimates):")
        for row in result.other_clouds:
            name = f"{row.provider} {row.instance} {row.option.value}"
            if not row.available:
                echo(f"  {name}: n/a: {row.reason}")
                continue
            echo(
                f"  {name}: ${row.usd_per_gpu_hour:.2f}/GPU-h, {row.days:.1f} days, total ${_usd(row.total_usd)}, "
                f"cash ${_usd(row.cash_usd)}, amortised ${_usd(row.amortised_usd)}"
            )
            echo(f"      {row.notes[0]}")
    echo("")
    for ranking in result.rankings:
        best = ranking.winner or ("tie: " + " = ".join(ranking.tied) if ranking.tied else "—")
        echo(f"cheapest, {ranking.basis} basis: {best} ({ranking.description})")
    echo(f"cheapest: {result.cheapest or '—'} ({result.cheapest_basis}); fastest: {result.fastest}")
    for note in result.notes:
        echo(f"note: {note}")
    serving = result.serving
    if serving is not None:
        fit = next((f for f in serving.instances if f.instance == serving.cheapest_fitting), None)
        needed = serving.needed_bytes / 2**30
        where = (
            "no catalog instance holds it"
            if fit is None
            else f"{fit.instance} ({fit.gpus_needed} of {fit.gpus_per_instance} GPUs), ${fit.usd_per_hour:,.2f}/h"
        )
        echo(
            f"serving ({serving.context_tokens} tokens × {serving.batch}): {needed:,.0f} GiB weights + KV cache; "
            f"cheapest that holds it: {where}"
        )
    low = [a for a in result.assumptions if a.confidence == "low"]
    if low:
        echo("low-confidence figures used: " + ", ".join(a.name for a in low))


def print_monthly_cost(result) -> None:
    echo = typer.echo
    sb = result.self_build
    own = f" vs {sb.nodes} × {sb.node} (self-build)" if sb else ""
    echo(f"{result.gpus} GPUs: {result.nodes} × {result.instance}{own}, {result.hours_per_month:g} h a month")
    echo(
        f"{'option':18s} {'$/month':>12s} {'upfront $':>12s} {'break-even':>11s} {'self-build wins above':>22s}"
    )
    for row in result.rows:
        if not row.available:
            echo(f"{row.option.value:18s} n/a" + (f": {row.notes[0]}" if row.notes else ""))
            continue
        even = "—" if row.break_even_month is None else f"month {row.break_even_month:.1f}"
        wins = (
            "—"
            if row.self_build_wins_at_utilisation is None
            else f"{row.self_build_wins_at_utilisation:.0%} use"
        )
        echo(
            f"{row.option.value:18s} {_usd(row.usd_per_month):>12s} {_usd(row.upfront_usd or None):>12s} "
            f"{even:>11s} {wins:>22s}"
        )
        for note in row.notes:
            echo(f"{'':18s}   {note}")
    if sb is not None:
        echo(
            f"self-build capex ${sb.capex_usd:,.0f} (servers ${sb.servers_usd:,.0f}, fabric ${sb.fabric_usd:,.0f}: "
            f"{sb.fabric.switches} switches, {sb.fabric.cables} cables, {sb.fabric.transceivers} transceivers; "
            f"storage ${sb.storage_usd:,.0f}, installation ${sb.installation_usd:,.0f}); opex ${sb.opex_usd_per_month:,.0f}"
            f"/month (power ${sb.power_usd_per_month:,.0f}, colocation ${sb.colocation_usd_per_month:,.0f}, staff "
            f"${sb.staff_usd_per_month:,.0f}, maintenance ${sb.maintenance_usd_per_month:,.0f})"
        )
    low = [a for a in result.assumptions if a.confidence == "low"]
    if low:
        echo("low-confidence figures used: " + ", ".join(a.name for a in low))


@app.command("cost")
def cost_command(
    ctx: typer.Context,
    tokens: Annotated[
        float | None, typer.Option(help="tokens to train (with the estimate options or --plan)")
    ] = None,
    monthly: Annotated[
        bool, typer.Option("--monthly", help="the monthly bill of --nodes × --instance/--node")
    ] = False,
    instance: Annotated[
        str | None, typer.Option(help="--monthly: AWS instance slug, e.g. p5.48xlarge")
    ] = None,
    nodes: Annotated[int | None, typer.Option(help="--monthly: how many of the instance or node")] = None,
    months: Annotated[int, typer.Option(help="--monthly: length of the cumulative-cost series")] = 36,
    region: Annotated[
        str | None, typer.Option(help="region whose prices to use, e.g. us-west-2 (default: the instance's)")
    ] = None,
    option: Annotated[
        list[CostOption] | None,
        typer.Option("--option", help="pricing option to show (repeat; default: all)"),
    ] = None,
    assignments: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a figure: KEY=VALUE, e.g. self_build.pue=1.2 (repeat)"),
    ] = None,
    overrides_file: Annotated[Path | None, typer.Option("--overrides", help="JSON file of overrides")] = None,
    plan_file: Annotated[
        Path | None, typer.Option("--plan", help="a capplan plan file instead of the options")
    ] = None,
    model: Annotated[str | None, typer.Option(help="preset slug or path to a config.json")] = None,
    gpu: Annotated[str | None, typer.Option(help="accelerator slug, e.g. h100-sxm")] = None,
    gpus: Annotated[int | None, typer.Option(help="number of GPUs")] = None,
    global_batch: Annotated[int | None, typer.Option(help="sequences per optimizer step")] = None,
    seq_len: Annotated[int | None, typer.Option(help="tokens per sequence")] = None,
    node: Annotated[str | None, typer.Option(help="node or instance slug (--monthly: what to price)")] = None,
    fabric: FabricOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    vpp: VppOpt = 1,
    cp: CpOpt = 1,
    ep: EpOpt = 1,
    dp: DpOpt = None,
    sharding: ShardingOpt = Sharding.fsdp_full,
    shard_group_size: ShardGroupOpt = None,
    offload: OffloadOpt = Offload.none,
    micro_batch: MicroBatchOpt = 1,
    recompute: RecomputeOpt = Recompute.none,
    sequence_parallel: SequenceParallelOpt = False,
    flash_attention: FlashAttentionOpt = True,
    fused_kernels: FusedKernelsOpt = None,
    precision: PrecisionOpt = Precision.bf16,
    optimizer: OptimizerOpt = Optimizer.adamw,
    framework: FrameworkOpt = Framework.fsdp2,
    oversubscription: OversubscriptionOpt = 1.0,
    power_limit_w: PowerLimitOpt = None,
    allow_tp_across_nodes: TpAcrossNodesOpt = False,
    calibration: CalibrationOpt = True,
    calibration_run: CalibrationRunOpt = None,
    calibration_db: CalibrationDbOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Days and dollars to train --tokens with a plan for every AWS option and self-build, after failures and
    checkpoints; or, with --monthly, the monthly bill of a cluster (on-demand, commitments, spot, self-build)."""
    from app.schemas import CostRequest, MonthlyCostRequest
    from app.services import run_cost, run_monthly_cost

    overrides = cost_overrides(assignments or [], overrides_file)
    if region is not None:
        overrides = overrides.model_copy(update={"region": region.strip()})
    options = list(option) if option else None
    if monthly:
        if tokens is not None or plan_file is not None:
            raise UsageError("--monthly prices a cluster by the month: drop --tokens/--plan")
        if nodes is None or (instance is None and node is None):
            raise UsageError("--monthly needs --nodes and --instance <slug> or --node <slug>")
        try:
            monthly_request = MonthlyCostRequest(
                instance=instance, node=node, nodes=nodes, months=months, options=options, overrides=overrides
            )
        except ValidationError as exc:
            raise _cost_validation_error(exc) from None
        monthly_result = run_monthly_cost(_catalog(), monthly_request)
        if as_json:
            typer.echo(monthly_result.model_dump_json(indent=2))
        else:
            print_monthly_cost(monthly_result)
        return
    if tokens is None:
        raise UsageError("give --tokens N (with the estimate options or --plan), or --monthly")
    if plan_file is not None:
        given = [
            n for n in (*COST_ESTIMATE_OPTIONS, "node")
            if (src := ctx.get_parameter_source(n)) is not None and src.name == "COMMANDLINE"
        ]  # fmt: skip
        if given:
            raise UsageError(
                f"--plan already holds the model, hardware and plan; drop --{given[0].replace('_', '-')}"
            )
        values = plan_file_to_request(plan_file).model_dump(exclude={"tokens"})
        if _given_on_command_line(ctx, ("calibration",)):
            values["calibrated"] = calibration
    else:
        required = {
            "model": model,
            "gpu": gpu,
            "gpus": gpus,
            "global_batch": global_batch,
            "seq_len": seq_len,
        }
        missing = [f"--{k.replace('_', '-')}" for k, v in required.items() if v is None]
        if missing:
            raise UsageError(f"give --plan plan.json, or the estimate options (missing {', '.join(missing)})")
        values = {name: ctx.params[name] for name in COST_ESTIMATE_OPTIONS if name != "model"}
        values.update(node=node, calibrated=calibration, **_model_argument(model or ""))
    try:
        request = CostRequest(**values, tokens=tokens, options=options, overrides=overrides)
    except ValidationError as exc:
        raise _cost_validation_error(exc) from None
    result = run_cost(_catalog(request.calibrated, calibration_run, calibration_db), request)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_training_cost(result)


# --------------------------------------------------------------------------------------------------
# Plan search (issue 4): `capplan plan`.


def _int_list(text: str | None, flag: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag}: a comma-separated list of integers, e.g. 1,2,4") from None


def _enum_list(text: str | None, enum, flag: str) -> list | None:
    if not text:
        return None
    try:
        return [enum(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag}: choose from {', '.join(e.value for e in enum)}") from None


def print_search(result) -> None:
    echo = typer.echo
    echo(
        f"evaluated {result.evaluated_plans:,} valid plans ({result.considered_plans:,} grid points) "
        f"in {result.elapsed_s:.2f} s; {result.feasible_plans:,} meet the constraints"
    )
    for note in result.notes:
        echo(f"note: {note}")
    if not result.plans:
        echo(result.message or "no plan found")
    else:
        cols = (
            "#",
            "GPUs",
            "tp",
            "pp",
            "vpp",
            "dp",
            "cp",
            "ep",
            "sharding",
            "offload",
            "mb",
            "gb",
            "recompute",
            "tokens/s",
            "MFU",
            "headroom",
            "$/M tok",
            "days",
        )
        echo("  ".join(cols))
        for i, c in enumerate(result.plans, 1):
            p = c.plan
            echo("  ".join(str(v) for v in (
                i, c.gpus, p.tp, p.pp, p.vpp, p.dp, p.cp, p.ep, p.sharding.value, p.offload.value, p.micro_batch,
                p.global_batch, p.recompute.value, f"{c.tokens_per_s:,.0f}", f"{c.mfu:.1%}",
                f"{c.margin_bytes / 2**30:.1f} GiB",
                f"{c.usd_per_million_tokens:.2f}" if c.usd_per_million_tokens else "—",
                f"{c.time_to_train_days:.1f}" if c.time_to_train_days else "—",
            )))  # fmt: skip
        echo(f"\nbest: {result.explanation}")
        if result.pareto:
            echo(f"Pareto front (time vs cost vs headroom): {len(result.pareto)} plans")
    if result.rejected:
        echo("rejected: " + "; ".join(f"{reason}: {n:,}" for reason, n in list(result.rejected.items())[:8]))


@app.command("plan")
def plan_command(
    model: Annotated[str, typer.Option(help="preset slug or path to a config.json")],
    gpu: Annotated[str, typer.Option(help="accelerator slug, e.g. h100-sxm")],
    seq_len: Annotated[int, typer.Option(help="tokens per sequence")],
    gpus: Annotated[int | None, typer.Option(help="a fixed GPU count")] = None,
    gpus_range: Annotated[
        str | None, typer.Option(help="'A:B' GPUs: every whole-node size in between")
    ] = None,
    global_batch: Annotated[int | None, typer.Option(help="sequences per step")] = None,
    global_batch_tokens: Annotated[str | None, typer.Option(help="'A:B' tokens per step")] = None,
    node: Annotated[str | None, typer.Option(help="node or instance slug")] = None,
    fabric: Annotated[str | None, typer.Option(help="scale-out fabric slug")] = None,
    objective: Annotated[
        str, typer.Option(help="max-tokens-per-s, min-time, min-cost or max-headroom")
    ] = "max-tokens-per-s",
    top: Annotated[int, typer.Option(help="how many plans to list")] = 10,
    headroom_gib: Annotated[float, typer.Option(help="memory to keep free per GPU, GiB")] = 0.0,
    headroom_percent: Annotated[float, typer.Option(help="memory to keep free per GPU, %")] = 0.0,
    framework: Annotated[Framework, typer.Option()] = Framework.fsdp2,
    precision: Annotated[Precision, typer.Option()] = Precision.bf16,
    optimizer: Annotated[Optimizer, typer.Option()] = Optimizer.adamw,
    micro_batches: Annotated[str | None, typer.Option(help="e.g. 1,2,4,8")] = None,
    recomputes: Annotated[str | None, typer.Option(help="e.g. none,selective,full")] = None,
    shardings: Annotated[str | None, typer.Option(help="e.g. fsdp-full,fsdp-hybrid")] = None,
    vpps: Annotated[str | None, typer.Option(help="e.g. 1,2,4")] = None,
    cps: Annotated[str | None, typer.Option(help="e.g. 1,2")] = None,
    max_pp: Annotated[int, typer.Option()] = 64,
    allow_tp_across_nodes: Annotated[bool, typer.Option("--allow-tp-across-nodes")] = False,
    tokens: Annotated[float | None, typer.Option(help="tokens to train")] = None,
    deadline_days: Annotated[
        float | None, typer.Option(help="train the tokens within this many days")
    ] = None,
    budget_usd: Annotated[float | None, typer.Option(help="spend at most this much")] = None,
    price_option: Annotated[
        str, typer.Option(help="pricing for cost figures, e.g. on-demand, spot")
    ] = "on-demand",
    calibration: CalibrationOpt = True,
    calibration_run: CalibrationRunOpt = None,
    calibration_db: CalibrationDbOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="write the winner (or --pick N) as a capplan.plan/v1 document"),
    ] = None,
    pick: Annotated[int, typer.Option(help="with --output: which listed plan to write (1 = the best)")] = 1,
) -> None:
    """Search every parallelism plan for a model on a cluster (or a range of cluster sizes); best first."""
    from app.schemas import PlanSearchRequest
    from app.services import run_search

    try:
        request = PlanSearchRequest(
            gpu=gpu, node=node, fabric=fabric, gpus=gpus, gpus_range=gpus_range, global_batch=global_batch,
            global_batch_tokens=global_batch_tokens, seq_len=seq_len, objective=objective, top_k=top,
            headroom_gib=headroom_gib, headroom_percent=headroom_percent, framework=framework, precision=precision,
            optimizer=optimizer, micro_batches=_int_list(micro_batches, "--micro-batches"),
            recomputes=_enum_list(recomputes, Recompute, "--recomputes"),
            shardings=_enum_list(shardings, Sharding, "--shardings"), vpps=_int_list(vpps, "--vpps"),
            cps=_int_list(cps, "--cps"), max_pp=max_pp, allow_tp_across_nodes=allow_tp_across_nodes, tokens=tokens,
            deadline_days=deadline_days, budget_usd=budget_usd, price_option=price_option, calibrated=calibration,
            **_model_argument(model),
        )  # fmt: skip
    except ValidationError as exc:
        _fail_validation(exc)
    catalog = _catalog(calibration, calibration_run, calibration_db)
    result = run_search(catalog, request)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_search(result)
    if output is not None:
        _write_pick(catalog, request, result, pick, output, quiet=as_json)


def _write_pick(catalog: Catalog, request, result, pick: int, output: Path, *, quiet: bool) -> None:  # noqa: ANN001
    """Write the search's ``pick``-th plan as a plan document (`capplan export --plan` reads it)."""
    from app.domain.export import plan_document_json
    from app.services import InputError, plan_document_from_request, search_pick_request

    try:
        doc = plan_document_from_request(catalog, search_pick_request(request, result, pick))
    except InputError as exc:
        first = exc.errors[0]
        raise UsageError(f"--pick: {first['msg']}") from None
    if output.is_dir() or not output.parent.is_dir():
        raise UsageError(f"--output: {output} is a directory or its folder does not exist")
    output.write_text(plan_document_json(doc), encoding="utf-8")
    typer.echo(f"wrote plan #{pick} to {output}", err=quiet)


# -- capplan size: the sizing search (issue 16) -------------------------------------------------------------


def print_size(result) -> None:
    echo = typer.echo
    s = result.searched
    echo(
        f"searched {len(s['accelerators'])} accelerators on {s['nodes']} nodes, {s['offers']} offers: "
        f"{s['evaluated_plans']:,} valid plans ({s['grid_points']:,} grid points) in {s['elapsed_s']:.1f} s "
        f"({s['plans_per_s']:,.0f} plans/s); {s['feasible_points']:,} of {s['priced_points']:,} priced "
        "(accelerator, size, option) points meet the constraints"
    )
    for note in result.notes:
        echo(f"note: {note}")
    if result.message:
        echo(result.message)
    if result.ranked:
        echo(f"ranked by {result.basis}; days count failures and checkpoints (goodput)")
        echo("  ".join(("#", "accelerator", "node/instance", "option", "GPUs", "tp", "pp", "vpp", "dp", "cp", "ep",
                        "sharding", "offload", "mb", "gb", "recompute", "days", "$ amortised", "$ cash", "$/M tok",
                        "MFU", "headroom")))  # fmt: skip
        for r in result.ranked:
            p = r.plan
            echo("  ".join(str(v) for v in (
                r.rank, r.accelerator, r.offer, r.option, r.gpus, p["tp"], p["pp"], p["vpp"], p["dp"], p["cp"],
                p["ep"], p["sharding"], p["offload"], p["micro_batch"], p["global_batch"], p["recompute"],
                f"{r.days:,.1f}", f"{r.usd_amortised:,.0f}", f"{r.usd_cash:,.0f}", f"{r.usd_per_million_tokens:.2f}",
                f"{r.mfu:.1%}", f"{r.headroom_gib:.1f} GiB",
            )))  # fmt: skip
    if result.pareto:
        echo(f"\nPareto front, days vs amortised $ ({len(result.pareto)} points, whole catalog):")
        for r in result.pareto:
            echo(f"  {r.days:8,.1f} days  ${r.usd_amortised:>16,.0f}  {r.gpus:>6,} × {r.accelerator} "
                 f"({r.offer}, {r.option})")  # fmt: skip
    if result.lost:
        echo("lost: " + "; ".join(f"{reason}: {n:,}" for reason, n in result.lost.items()))


@app.command("size")
def size_command(
    model: Annotated[str, typer.Option(help="model preset slug, e.g. llama3.1-70b")],
    tokens: Annotated[float, typer.Option(help="tokens to train, e.g. 15e12")],
    deadline_days: Annotated[
        float | None, typer.Option(help="train the tokens within this many days")
    ] = None,
    budget_usd: Annotated[float | None, typer.Option(help="spend at most this much (amortised $)")] = None,
    accelerators: Annotated[
        str | None, typer.Option(help="e.g. h100-sxm,b200 (default: whole catalog)")
    ] = None,
    options: Annotated[
        str | None,
        typer.Option(help="e.g. on-demand,commit-1yr,spot,self-build (default: all but off-peak/mix)"),
    ] = None,
    gpus_range: Annotated[
        str, typer.Option(help="'A:B' GPUs: powers of two of nodes and the ends")
    ] = "8:65536",
    seq_len: Annotated[int, typer.Option(help="tokens per sequence")] = 8192,
    global_batch_tokens: Annotated[int, typer.Option(help="tokens per step")] = 16_777_216,
    top: Annotated[int, typer.Option(help="how many ranked rows")] = 20,
    calibration: Annotated[bool, typer.Option("--calibration/--no-calibration")] = True,
    output: Annotated[
        Path | None, typer.Option(help="write the winner's plan document (capplan.plan/v1) here")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Size a cluster: every accelerator × whole-node cluster size × plan × pricing option, with failures
    and checkpoints counted; the cheapest that meets the deadline and budget first, and the Pareto front."""
    from app.domain.cost import CostOption
    from app.services_size import SizeRequest, run_size

    try:
        request = SizeRequest(
            model=model, tokens=tokens, deadline_days=deadline_days, budget_usd=budget_usd,
            accelerators=[a.strip() for a in accelerators.split(",") if a.strip()] if accelerators else None,
            options=_enum_list(options, CostOption, "--options"), gpus_range=gpus_range, seq_len=seq_len,
            global_batch_tokens=global_batch_tokens, top_k=top, calibrated=calibration,
        )  # fmt: skip
    except ValidationError as exc:
        _fail_validation(exc)
    if output is not None:
        _writable_output(output)

    def progress(node: str, done: int, total: int) -> None:
        typer.echo(f"\rsizing: {done}/{total} cluster sizes searched" + (f", now {node}" if done < total else "") + " " * 20,
                   err=True, nl=done >= total)  # fmt: skip

    result = run_size(_catalog(calibration), request, progress=progress,
                      max_plans=Settings().search_max_plans)  # fmt: skip
    if output is not None and result.plan_document is not None:
        output.write_text(json.dumps(result.plan_document, indent=2, ensure_ascii=False) + "\n")
        typer.echo(f"wrote the winner's plan document to {output}", err=True)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_size(result)
    if not result.ranked:
        raise typer.Exit(code=1)


# -- capplan bench: the microbenchmark runner (issue 7) -----------------------------------------------------

bench_app = typer.Typer(
    help="Benchmark runner: real FSDP2 steps under torchrun, reported to capplan.", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")


def _bench_preset(name: str, **overrides):
    from app.bench.presets import UnknownPreset, get_preset

    try:
        return get_preset(name, **overrides)
    except UnknownPreset as exc:
        raise UsageError(f"--preset: {exc}") from None


def _load_result(path: Path):
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
        try:
            proc = subprocess.run(cmd, timeout=timeout_s, check=False, stdout=sink, stderr=sink,
                                  text=True)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise UsageError(f"the runner did not finish within {timeout_s:g} s") from None
        if sink is subprocess.PIPE and proc.returncode != 0:
            typer.echo((proc.stdout or "")[-4000:], err=True)
        if proc.returncode != 0:
            typer.echo(
                f"error: the runner failed (exit code {proc.returncode}); see the output above", err=True
            )
            raise typer.Exit(code=1)
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

    if not re.fullmatch(SHIP_FOLDER_PATTERN, folder):
        raise UsageError(
            f"--folder {folder!r}: lowercase letters, digits, '.', '_' and '-' (e.g. 2026-12-h200)"
        )
    settings = Settings()
    catalog = load_catalog(settings.data_dir)
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
    target = settings.data_dir / SHIPPED_DIR / folder
    clashes = [target / f.name for f, _ in results if (target / f.name).exists()]
    if clashes and not force:
        raise UsageError(f"{clashes[0]} exists; --force replaces it")
    target.mkdir(parents=True, exist_ok=True)
    for f, _ in results:
        shutil.copyfile(f, target / f.name)
        typer.echo(f"shipped {target / f.name}", err=True)
    fitted = fit_all(load_shipped_runs(settings.data_dir, accelerators=known))
    for slug in sorted({r.accelerator for _, r in results if r.accelerator}):
        from app.services import active_calibration

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


def main() -> None:
    """Console entry point: known errors print one line and exit 2, never a traceback."""
    from alembic.util import CommandError

    try:
        app(standalone_mode=True)
    except (CatalogError, UnknownSlugError, UsageError, InputError, CommandError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except ValidationError as exc:  # Settings from the environment: CAPPLAN_LOG_LEVEL=bogus, …
        if exc.title != "Settings":
            raise
        first = exc.errors()[0]
        name = "CAPPLAN_" + "_".join(str(p) for p in first["loc"]).upper()
        msg = str(first["msg"]).removeprefix("Value error, ")
        typer.echo(f"error: {name}: {msg} (got {first.get('input')!r})", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
