"""`capplan serve` (the web app under uvicorn) and `capplan db …` (migrations, backups)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import UsageError, fail, safe_url, settings, writable_output

serve_app = typer.Typer(add_completion=False)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True, add_completion=False)


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
                f"the database {safe_url(url)} is not migrated: run `capplan db upgrade` first ({reason})"
            ) from None
        raise UsageError(f"cannot use the database {safe_url(url)}: {reason}") from None
    except SQLAlchemyError as exc:
        raise UsageError(f"database {safe_url(url)}: {str(exc).splitlines()[0]}") from None


def require_migrated(url: str) -> None:
    from app.db.migrate import current_revision, head_revision

    current = current_revision(url)
    if current is None:
        raise UsageError(
            f"the database {safe_url(url)} is empty (never migrated): run `capplan db upgrade` first"
        )
    if current != head_revision():
        raise UsageError(
            f"the database {safe_url(url)} is at revision {current}, not {head_revision()}: run `capplan db upgrade`"
        )


@serve_app.command()
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

    from app.calibration_store import CalibrationFileError, load_shipped_runs
    from app.domain.catalog import load_catalog

    config = settings()
    catalog = load_catalog(config.data_dir)  # fail before binding the port: the catalog, the shipped runs
    try:
        load_shipped_runs(config.data_dir, accelerators=[a.slug for a in catalog.hardware.accelerators])
    except CalibrationFileError as exc:
        fail(str(exc))
    if upgrade_db:
        from app.db.migrate import upgrade

        with database_errors(config.database_url):
            upgrade(config.database_url)
    typer.echo(f"capplan serving on http://{host}:{port}  (database: {safe_url(config.database_url)})")
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=config.log_level.lower(),
    )


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision")] = "head") -> None:
    """Apply migrations up to REVISION (default head)."""
    from app.db.migrate import upgrade

    config = settings()
    with database_errors(config.database_url):
        upgrade(config.database_url, revision)
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

    url = settings().database_url
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

    url = settings().database_url
    with database_errors(url):
        require_migrated(url)
        try:
            check(url)
        except AutogenerateDiffsDetected as exc:
            raise UsageError(f"models and migrations differ: {str(exc).splitlines()[0][:300]}") from None
    typer.echo("models match migrations")


def _write_backup(url: str, output: Path | None) -> None:
    from app.db.backup import export_backup
    from app.db.engine import build_engine, session_factory

    if output is not None:
        writable_output(output)
    with database_errors(url):
        require_migrated(url)
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
    _write_backup(settings().database_url, output)


MAX_BACKUP_BYTES = 2_000_000_000


@db_app.command("import")
def db_import(
    path: Annotated[Path, typer.Argument(help="a file written by `capplan db export`")],
    replace: Annotated[bool, typer.Option("--replace", help="empty the tables first")] = False,
) -> None:
    """Restore a backup in one transaction (ids and versions kept). Without --replace an existing id aborts the
    import. NUL characters (which PostgreSQL cannot store) are replaced by U+FFFD and counted."""
    from pydantic import ValidationError
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
    url = settings().database_url
    with database_errors(url):
        require_migrated(url)
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
