"""Pydantic I/O models shared by the API, the web layer, the CLI and the benchmark runner."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorOut(BaseModel):
    """Error body of every 4xx answer the API gives."""

    detail: str
    known: list[str] | None = None
