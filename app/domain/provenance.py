"""Where a catalog figure comes from: source key, date, confidence.

Every catalog entry names a default source (a key into ``data/sources.toml``), the date the figure was
true (``as_of``) and a confidence. Figures whose provenance differs from their entry's default carry a
per-field override in ``provenance``. :meth:`CatalogEntry.figure_provenance` resolves either.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

AS_OF_PATTERN = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
SLUG_PATTERN = r"^[a-z0-9][a-z0-9.\-]*$"


class Confidence(StrEnum):
    """high = vendor/primary or corroborated; medium = one good secondary; low = weak, verify."""

    high = "high"
    medium = "medium"
    low = "low"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Source(Frozen):
    key: str
    title: str
    url: str | None = None
    date: str | None = None


def _check_as_of(value: str) -> str:
    if not AS_OF_PATTERN.match(value):
        raise ValueError(f"as_of must be YYYY, YYYY-MM or YYYY-MM-DD, got {value!r}")
    return value


class FigureProvenance(Frozen):
    """Provenance of one figure."""

    source: str
    as_of: str
    confidence: Confidence = Confidence.high
    note: str | None = None

    _as_of = field_validator("as_of")(classmethod(lambda cls, v: _check_as_of(v)))


class CatalogEntry(Frozen):
    """Base of every catalog record: a slug, a name and the default provenance of its figures."""

    slug: str = Field(pattern=SLUG_PATTERN, max_length=64)
    name: str = Field(min_length=1, max_length=200)
    source: str
    as_of: str
    confidence: Confidence = Confidence.high
    notes: str = ""
    provenance: dict[str, FigureProvenance] = Field(default_factory=dict)

    _as_of = field_validator("as_of")(classmethod(lambda cls, v: _check_as_of(v)))

    def figure_provenance(self, field: str) -> FigureProvenance:
        """The provenance of ``field``: its own override, else the entry's default."""
        if field in self.provenance:
            return self.provenance[field]
        return FigureProvenance(source=self.source, as_of=self.as_of, confidence=self.confidence)

    def source_keys(self) -> set[str]:
        return {self.source, *(p.source for p in self.provenance.values())}

    def figure_names(self) -> list[str]:
        """Fields that are figures (not identity or provenance bookkeeping)."""
        skip = {"slug", "name", "source", "as_of", "confidence", "notes", "provenance"}
        return [f for f in type(self).model_fields if f not in skip]
