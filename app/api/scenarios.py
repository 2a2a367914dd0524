"""Saved scenarios over JSON: list, create, read, update (optimistic locking on ``version``), delete.

Writes need ``Authorization: Bearer <CAPPLAN_API_TOKEN>``: 401 without a bearer token, 403 with a wrong one
(and every write is refused while no token is configured). A PUT carrying a stale ``version`` is a 409 whose
body gives the current version.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from app.db.tables import Scenario
from app.deps import MAX_ROW_ID, RowId, get_catalog, get_session
from app.domain.catalog import Catalog
from app.schemas import (
    ErrorOut,
    ScenarioConflictOut,
    ScenarioCreate,
    ScenarioOut,
    ScenarioUpdate,
    ValidationErrorOut,
)
from app.services.saved_scenarios import (
    ScenarioConflict,
    ScenarioNotFound,
    check_scenario_inputs,
    count_scenarios,
    create_scenario,
    delete_scenario,
    get_scenario,
    list_scenarios,
    update_scenario,
)

router = APIRouter(tags=["scenarios"])
SessionDep = Annotated[Session, Depends(get_session)]
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
DEFAULT_PAGE, MAX_PAGE = 50, 200

AUTH_RESPONSES = {
    401: {"model": ErrorOut, "description": "no bearer token"},
    403: {"model": ErrorOut, "description": "wrong token, or writes disabled (no token configured)"},
    422: {"model": ValidationErrorOut, "description": "invalid input: field and reason"},
}
NOT_FOUND = {404: {"model": ErrorOut, "description": "no such scenario"}}


def require_token(
    request: Request, authorization: Annotated[str | None, Header(description="Bearer <token>")] = None
) -> None:
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise HTTPException(
            401, "a bearer token is required for writes", headers={"WWW-Authenticate": "Bearer"}
        )
    token = request.app.state.settings.api_token
    if token is None:
        raise HTTPException(403, "writes are disabled: the server has no CAPPLAN_API_TOKEN")
    if not secrets.compare_digest(given.strip().encode(), token.get_secret_value().encode()):
        raise HTTPException(403, "wrong token")


WriteAuth = Annotated[None, Depends(require_token)]


def scenario_out(scenario: Scenario) -> ScenarioOut:
    return ScenarioOut(
        id=scenario.id, name=scenario.name, inputs=scenario.inputs, overrides=scenario.overrides,
        version=scenario.version, created_at=scenario.created_at, updated_at=scenario.updated_at,
        planner_url=f"/scenarios/{scenario.id}",
    )  # fmt: skip


def _found(session: Session, scenario_id: int) -> Scenario:
    try:
        return get_scenario(session, scenario_id)
    except ScenarioNotFound as exc:
        raise HTTPException(404, str(exc)) from None


@router.get(
    "/scenarios", response_model=list[ScenarioOut], summary="Saved scenarios, most recently changed first"
)
def get_scenarios(
    request: Request,
    session: SessionDep,
    response: Response,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="scenarios per page")] = DEFAULT_PAGE,
    offset: Annotated[int, Query(ge=0, le=MAX_ROW_ID, description="scenarios to skip")] = 0,
) -> list[ScenarioOut]:
    """One page, most recently changed first; ``X-Total-Count`` gives the total and ``Link`` the next page."""
    total = count_scenarios(session)
    response.headers["X-Total-Count"] = str(total)
    if offset + limit < total:
        response.headers["Link"] = f'<{request.url.path}?limit={limit}&offset={offset + limit}>; rel="next"'
    return [scenario_out(s) for s in list_scenarios(session, limit, offset)]


@router.post(
    "/scenarios", status_code=201, response_model=ScenarioOut, responses=AUTH_RESPONSES,
    summary="Save a scenario: name, estimate inputs and overridden catalog figures",
)  # fmt: skip
def post_scenario(
    body: ScenarioCreate, session: SessionDep, _: WriteAuth, response: Response, catalog: CatalogDep
) -> ScenarioOut:
    check_scenario_inputs(catalog, body.inputs)
    scenario = create_scenario(session, body.name, body.inputs, body.overrides)
    response.headers["Location"] = f"/api/v1/scenarios/{scenario.id}"
    return scenario_out(scenario)


@router.get(
    "/scenarios/{scenario_id}", response_model=ScenarioOut, responses=NOT_FOUND, summary="One scenario"
)
def get_one_scenario(scenario_id: RowId, session: SessionDep) -> ScenarioOut:
    return scenario_out(_found(session, scenario_id))


@router.put(
    "/scenarios/{scenario_id}", response_model=ScenarioOut,
    responses={**AUTH_RESPONSES, **NOT_FOUND, 409: {"model": ScenarioConflictOut, "description": "stale version"}},
    summary="Change a scenario's name, inputs or overrides (send the version you read)",
)  # fmt: skip
def put_scenario(
    scenario_id: RowId, body: ScenarioUpdate, session: SessionDep, _: WriteAuth, catalog: CatalogDep
) -> Response:
    _found(session, scenario_id)
    if body.inputs is not None:
        check_scenario_inputs(catalog, body.inputs)
    try:
        scenario = update_scenario(
            session, scenario_id, version=body.version, name=body.name, inputs=body.inputs, overrides=body.overrides
        )  # fmt: skip
    except ScenarioConflict as exc:
        return JSONResponse({"detail": str(exc), "version": exc.version}, status_code=409)
    return JSONResponse(scenario_out(scenario).model_dump(mode="json"))


@router.delete(
    "/scenarios/{scenario_id}", status_code=204, responses={**AUTH_RESPONSES, **NOT_FOUND},
    summary="Delete a scenario",
)  # fmt: skip
def delete_one_scenario(scenario_id: RowId, session: SessionDep, _: WriteAuth) -> Response:
    _found(session, scenario_id)
    delete_scenario(session, scenario_id)
    return Response(status_code=204)
