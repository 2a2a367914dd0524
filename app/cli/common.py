"""What every command shares: the one-line error, the catalog (calibrated as asked), argument parsers, plan files.

Only the standard library and typer at import time; each helper imports the domain, the schemas or the database
code it needs when it runs, so a command pays only for what it uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from pydantic import ValidationError

    from app.domain.catalog import Catalog
    from app.domain.export import PlanDocument
    from app.schemas import EstimateRequest


class UsageError(Exception):
    """Bad input on the command line: printed without a traceback, exit code 2."""


JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]

MAX_CONFIG_BYTES = 1_000_000
MAX_PLAN_FILE_BYTES = 2_000_000


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def fail_validation(exc: ValidationError) -> None:
    """Every field the request model refused, as ``error: --field: reason`` lines; exit code 2."""
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "input"
        message = str(err["msg"]).removeprefix("Value error, ")
        typer.echo(f"error: --{field.replace('_', '-')}: {message}", err=True)
    raise typer.Exit(code=2)


def first_error(exc: ValidationError) -> tuple[str, str]:
    """(dotted location, message) of the first error pydantic reports."""
    first = exc.errors()[0]
    return ".".join(str(p) for p in first["loc"]), str(first["msg"])


def safe_url(url: str) -> str:
    """The database URL without its credentials, for messages."""
    return url.split("@")[-1]


def settings():  # noqa: ANN201 - app.settings.Settings, imported when a command needs it
    from app.settings import Settings

    return Settings()


def load_catalog(calibration: bool = False, runs: list[Path] | None = None, from_db: bool = False) -> Catalog:
    """The catalog; with ``calibration``, fitted from the shipped runs, the ``runs`` files and (``from_db``) the
    runs stored in the configured database: the same calibration the server uses, from the command line. The
    catalog as shipped, calibrated or not, comes from the cache while its files are unchanged (catalog_cache.py)."""
    from app.cli.catalog_cache import cached

    def load(data_dir: Path) -> Catalog:  # the loaders (TOML, every record type) only when the cache misses
        from app.domain.catalog import load_catalog

        return load_catalog(data_dir)

    config = settings()
    if not calibration:
        if runs or from_db:
            raise UsageError(
                "--calibration-run/--calibration-db need calibration on (--no-calibration or the plan file "
                "turned it off; give --calibration)"
            )
        return cached(config.data_dir, False, lambda: load(config.data_dir))
    if not runs and not from_db:
        return cached(config.data_dir, True, lambda: _calibrated(load(config.data_dir), [], False))
    return _calibrated(cached(config.data_dir, False, lambda: load(config.data_dir)), runs or [], from_db)


def _calibrated(catalog: Catalog, runs: list[Path], from_db: bool) -> Catalog:
    from app.calibration_store import CalibrationFileError, fit_all, load_shipped_runs, result_file_runs

    config = settings()
    try:
        known = [a.slug for a in catalog.hardware.accelerators]
        shipped = load_shipped_runs(config.data_dir, accelerators=known)
        extra = result_file_runs(runs, accelerators=known)
    except CalibrationFileError as exc:
        fail(str(exc))
    if from_db:
        from app.calibration_store import stored_calibration_runs_or_none
        from app.db.engine import build_engine, session_factory

        engine = build_engine(config.database_url)
        try:
            with session_factory(engine)() as session:
                stored = stored_calibration_runs_or_none(session)
        finally:
            engine.dispose()
        if stored is None:
            fail(f"--calibration-db: cannot read the benchmark runs in {safe_url(config.database_url)}")
        extra += stored or []
    return catalog.with_calibrations(fit_all(shipped, extra))


def writable_output(output: Path) -> None:
    if output.is_dir():
        raise UsageError(f"-o {output}: is a directory; give a file name")
    if not output.parent.is_dir():
        raise UsageError(f"-o {output}: the directory {output.parent} does not exist")
    if output.exists() and not output.is_file():  # a FIFO would block until someone reads it: a hang
        raise UsageError(
            f"-o {output}: not a regular file (a device, socket or named pipe); give a file name"
        )


def given_on_command_line(ctx: typer.Context, names: Iterable[str]) -> list[str]:
    """Options typed on the command line (not defaults); typer vendors click, so compare the source by name."""
    sources = {n: ctx.get_parameter_source(n) for n in names}
    return [n for n, src in sources.items() if src is not None and src.name == "COMMANDLINE"]


def model_argument(model: str) -> dict[str, Any]:
    """A preset slug, the path of a Hugging Face config.json (read as data, never executed), or a Hugging Face id
    (``org/name``) whose config.json is in the local Hugging Face cache (app/services/hub_cache.py; no network)."""
    if model.endswith(".json") or "/" in model:
        from app.schemas import load_json_text

        path = Path(model)
        if not path.is_file():
            return _hub_model(model)
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


def _hub_model(model: str) -> dict[str, Any]:
    """``--model org/name`` that is not a file: the config.json in the Hugging Face cache, or one line naming the
    paths looked at (and, for what looks like a path, that there is no such file)."""
    from app.services.hub_cache import HUB_ID_PATTERN, HubConfigError, read_hub_config

    if not HUB_ID_PATTERN.fullmatch(model):
        raise UsageError(f"--model: no such file {model}")
    try:
        return {"hf_config": read_hub_config(model)}
    except HubConfigError as exc:
        raise UsageError(f"--model: {exc} (and there is no file {model})") from None


def figure_overrides(assignments: list[str]) -> dict[str, float]:
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


def int_list(text: str | None, flag: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag}: a comma-separated list of integers, e.g. 1,2,4") from None


def enum_list(text: str | None, enum: Any, flag: str) -> list | None:
    if not text:
        return None
    try:
        return [enum(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag}: choose from {', '.join(e.value for e in enum)}") from None


def load_plan_file(path: Path) -> PlanDocument:
    """The plan document in ``path`` (capplan.plan/v1); UsageError naming the file and field otherwise."""
    from app.domain.export import PlanDocumentError, parse_plan_document

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
    from pydantic import ValidationError

    from app.domain.export import request_fields
    from app.schemas import EstimateRequest

    try:
        return EstimateRequest(**request_fields(load_plan_file(path)))
    except ValidationError as exc:
        where, msg = first_error(exc)
        raise UsageError(f"--plan {path}: {where}: {msg}") from None
