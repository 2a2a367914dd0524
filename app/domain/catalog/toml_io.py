"""Loading catalog TOML files into validated, frozen entries; errors name the file, key and reason."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from app.domain.provenance import CatalogEntry, Source

T = TypeVar("T", bound=BaseModel)


class CatalogError(ValueError):
    """A malformed or inconsistent catalog file. ``str()`` names the file, the key and the reason."""

    def __init__(self, path: Path | str, key: str, reason: str) -> None:
        self.path = str(path)
        self.key = key
        self.reason = reason
        super().__init__(f"{self.path}: {key}: {reason}")


def read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise CatalogError(path, "-", "file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(path, "-", f"not valid TOML: {exc}") from None


def _describe(errors: list) -> tuple[str, str]:
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"])
    return loc, first["msg"]


def parse_entries(path: Path, table: str, model: type[T], *, required: bool = True) -> tuple[T, ...]:
    """Parse the array of tables ``[[table]]`` of ``path`` into ``model`` instances.

    Slugs (when the model has them) must be unique within the table.
    """
    doc = read_toml(path)
    rows = doc.get(table)
    if rows is None:
        if required:
            raise CatalogError(path, table, f"missing array of tables [[{table}]]")
        return ()
    if not isinstance(rows, list):
        raise CatalogError(path, table, f"expected an array of tables [[{table}]]")
    out: list[T] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        label = f"{table}[{i}]" + (
            f" ({row.get('slug')!r})" if isinstance(row, dict) and "slug" in row else ""
        )
        try:
            entry = model.model_validate(row)
        except ValidationError as exc:
            loc, msg = _describe(exc.errors())
            raise CatalogError(path, f"{label}.{loc}" if loc else label, msg) from None
        slug = getattr(entry, "slug", None)
        if slug is not None:
            if slug in seen:
                raise CatalogError(path, label, f"duplicate slug {slug!r}")
            seen.add(slug)
        out.append(entry)
    return tuple(out)


def parse_table(path: Path, table: str, model: type[T]) -> T:
    """Parse the single table ``[table]`` of ``path`` into ``model``."""
    doc = read_toml(path)
    if table not in doc:
        raise CatalogError(path, table, f"missing table [{table}]")
    try:
        return model.model_validate(doc[table])
    except ValidationError as exc:
        loc, msg = _describe(exc.errors())
        raise CatalogError(path, f"{table}.{loc}" if loc else table, msg) from None


def load_sources(data_dir: Path) -> dict[str, Source]:
    """All ``data/sources*.toml`` files: ``[KEY] title=… url=… date=…``."""
    sources: dict[str, Source] = {}
    for path in sorted(data_dir.glob("sources*.toml")):
        for key, body in read_toml(path).items():
            if key in sources:
                raise CatalogError(path, key, "source key defined twice")
            if not isinstance(body, dict):
                raise CatalogError(path, key, "a source is a table with title, url, date")
            try:
                sources[key] = Source.model_validate({"key": key, **body})
            except ValidationError as exc:
                loc, msg = _describe(exc.errors())
                raise CatalogError(path, f"{key}.{loc}", msg) from None
    return sources


def check_sources(
    path: Path, table: str, entries: tuple[CatalogEntry, ...], sources: dict[str, Source]
) -> None:
    """Every source an entry cites must exist in data/sources*.toml."""
    for entry in entries:
        for key in sorted(entry.source_keys()):
            if key not in sources:
                raise CatalogError(path, f"{table} ({entry.slug!r}).source", f"unknown source key {key!r}")
