"""The `capplan` command line: serve, db, catalog (estimate, plan, cost, export, bench come later)."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated

import typer

from app.domain.catalog import (
    CATALOG_KINDS,
    Catalog,
    CatalogError,
    UnknownSlugError,
    entry_record,
    load_catalog,
)
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


def main() -> None:
    """Console entry point: known errors print one line and exit 2, never a traceback."""
    try:
        app(standalone_mode=True)
    except (CatalogError, UnknownSlugError, UsageError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
