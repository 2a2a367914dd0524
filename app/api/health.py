"""Liveness and database health."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

router = APIRouter()


@router.get("/healthz", tags=["ops"], summary="Health: the app and its database")
def healthz(request: Request) -> JSONResponse:
    catalog = request.app.state.catalog
    body: dict = {"status": "ok", "catalog": catalog.counts()}
    try:
        with request.app.state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        body["database"] = "ok"
        return JSONResponse(body)
    except SQLAlchemyError as exc:
        body.update(status="degraded", database="unavailable", error=type(exc).__name__)
        return JSONResponse(body, status_code=503)
