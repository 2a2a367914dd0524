"""Saved scenarios (issue 6): `GET/POST /api/v1/scenarios`, `GET/PUT/DELETE /api/v1/scenarios/{id}`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.domain.cost.inputs import CostOverrides
from app.schemas.bounds import NoNul, StrictNumbers
from app.schemas.requests import EstimateRequest


class ScenarioCreate(StrictNumbers):
    """A scenario to save: a name, the estimate inputs (with ``tokens``) and any overridden catalog figures."""

    model_config = ConfigDict(extra="forbid")

    name: NoNul = Field(min_length=1, max_length=200)
    inputs: EstimateRequest
    overrides: CostOverrides = Field(default_factory=CostOverrides)


class ScenarioUpdate(StrictNumbers):
    """A change to a saved scenario. ``version`` is the one you read: a stale version is a 409."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1, description="the scenario's version when you read it (optimistic locking)")
    name: NoNul | None = Field(default=None, min_length=1, max_length=200)
    inputs: EstimateRequest | None = None
    overrides: CostOverrides | None = None


class ScenarioOut(BaseModel):
    id: int
    name: str
    inputs: dict[str, Any]
    overrides: dict[str, Any] = Field(description="catalog figures the user overrode (CostOverrides)")
    version: int
    created_at: datetime
    updated_at: datetime
    planner_url: str = Field(description="the page showing the planner with these inputs")


class ScenarioConflictOut(BaseModel):
    """409 body: someone saved the scenario since you read it."""

    detail: str
    version: int
