"""Error bodies of the JSON API: every 4xx answer, and the 422 that lists each offending field."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorOut(BaseModel):
    """Error body of every 4xx answer the API gives."""

    detail: str
    known: list[str] | None = None


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    """422 body: one item per offending field, with the reason (and the fix for plan violations)."""

    detail: list[ErrorItem]
