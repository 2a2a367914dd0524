"""Figure types the catalog records share: ranges from the sources (:class:`Span`), fractions, figures
in force over a date window (:class:`EffectiveDated`, :func:`in_force`) and lookup by slug (:func:`by_slug`).

Effective dates are half-open: ``effective_from`` inclusive, ``effective_to`` exclusive; ``None`` is
unbounded. ``on=None`` in the lookups means "current": the open-ended (``effective_to is None``) record.
Ranges (``[low, high]``) are :class:`Span` values; ``Span.mid`` is the figure used by default. A plain number
in TOML is a span of width zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date
from typing import Annotated, TypeVar

from pydantic import Field, model_validator

from app.domain.provenance import CatalogEntry, FigureProvenance, Frozen


class Span(Frozen):
    """A figure the sources give as a number or a ``[low, high]`` range (both non-negative)."""

    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_number_or_pair(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"low": value, "high": value}
        if isinstance(value, list | tuple):
            if len(value) != 2:
                raise ValueError("a range is [low, high]")
            return {"low": value[0], "high": value[1]}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.low > self.high:
            raise ValueError(f"range low {self.low} is above high {self.high}")
        return self

    @property
    def mid(self) -> float:
        """The value used by default: the midpoint of the range (the number itself when not a range)."""
        return (self.low + self.high) / 2

    @property
    def is_range(self) -> bool:
        return self.low != self.high


class EffectiveDated(FigureProvenance):
    """A figure with its own provenance, in force on ``[effective_from, effective_to)``."""

    effective_from: date | None = None
    effective_to: date | None = None

    @model_validator(mode="after")
    def _dates_ordered(self) -> EffectiveDated:
        if self.effective_from and self.effective_to and self.effective_from >= self.effective_to:
            raise ValueError(
                f"effective_from {self.effective_from} is not before effective_to {self.effective_to}"
            )
        return self

    def in_force(self, on: date) -> bool:
        starts_ok = self.effective_from is None or self.effective_from <= on
        ends_ok = self.effective_to is None or on < self.effective_to
        return starts_ok and ends_ok

    def overlaps(self, other: EffectiveDated) -> bool:
        self_before_other = (
            self.effective_to is not None
            and other.effective_from is not None
            and (self.effective_to <= other.effective_from)
        )
        other_before_self = (
            other.effective_to is not None
            and self.effective_from is not None
            and (other.effective_to <= self.effective_from)
        )
        return not (self_before_other or other_before_self)

    def window(self) -> str:
        return f"[{self.effective_from or '-inf'}, {self.effective_to or '+inf'})"


D = TypeVar("D", bound=EffectiveDated)
E = TypeVar("E", bound=CatalogEntry)


def _start(item: EffectiveDated) -> date:
    return item.effective_from or date.min


def in_force(items: Iterable[D], on: date | None) -> D | None:
    """The item in force on ``on``; with ``on=None`` the current (open-ended) one. None when there is none."""
    if on is None:
        candidates = [i for i in items if i.effective_to is None]
    else:
        candidates = [i for i in items if i.in_force(on)]
    return max(candidates, key=_start, default=None)


def first_overlap(items: Sequence[D]) -> tuple[D, D] | None:
    """The first pair of items whose effective windows overlap, if any."""
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            if a.overlaps(b):
                return a, b
    return None


def _check_no_overlap(what: str, items: Sequence[EffectiveDated]) -> None:
    pair = first_overlap(items)
    if pair is not None:
        raise ValueError(f"{what}: effective dates overlap: {pair[0].window()} and {pair[1].window()}")


def by_slug(items: Sequence[E], slug: str, kind: str) -> E:
    """The entry with ``slug``; KeyError listing the known slugs otherwise."""
    for item in items:
        if item.slug == slug:
            return item
    raise KeyError(f"unknown {kind} {slug!r}; known: {', '.join(i.slug for i in items)}")


def _nested_sources(*groups: Iterable[FigureProvenance | None]) -> set[str]:
    return {p.source for group in groups for p in group if p is not None}


Fraction = Annotated[float, Field(ge=0, le=1)]
