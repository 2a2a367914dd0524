"""`capplan catalog list|show`: the hardware, price and model catalog with every figure's provenance."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from app.cli.common import load_catalog
from app.domain.catalog import CATALOG_KINDS, entry_record

catalog_app = typer.Typer(
    help="Browse the hardware, price and model catalog.", no_args_is_help=True, add_completion=False
)

CatalogKind = StrEnum("CatalogKind", {k: k for k in CATALOG_KINDS})


@catalog_app.command("list")
def catalog_list(
    kind: Annotated[CatalogKind, typer.Argument(help="What to list")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object with every figure's provenance")
    ] = False,
    q: Annotated[str | None, typer.Option(help="Substring of slug or name")] = None,
) -> None:
    """List catalog entries of one KIND."""
    catalog = load_catalog()
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
    catalog = load_catalog()
    typer.echo(json.dumps(entry_record(catalog.entry(kind.value, slug), catalog.sources), indent=2))
