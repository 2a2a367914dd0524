"""FastAPI dependencies shared by the API and the web layer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Path, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from app.domain.catalog import Catalog


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.session_factory() as session:
        yield session


async def get_catalog(request: Request) -> Catalog:
    """The catalog with the current calibration (shipped runs + stored runs). Async: while the fitted
    calibration is fresh there is no I/O and no threadpool hop; a refit (every few seconds at most) reads the
    database in the threadpool."""
    state = request.app.state
    cache = state.calibrations
    calibrations = cache.peek()
    if calibrations is None:
        calibrations = await run_in_threadpool(cache.get)
    return state.catalog.with_calibrations(calibrations)


MAX_ROW_ID = 2_147_483_647
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="row id (32-bit, as the database stores it)")]
"""A database id in a URL path: out-of-range values are a 422, never an overflow in the database driver."""
