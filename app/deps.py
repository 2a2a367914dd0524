"""FastAPI dependencies shared by the API and the web layer."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Request
from sqlalchemy.orm import Session

from app.domain.catalog import Catalog


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.session_factory() as session:
        yield session


def get_catalog(request: Request) -> Catalog:
    return request.app.state.catalog
