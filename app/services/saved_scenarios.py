"""Saved scenarios: one transaction per use-case. Inputs are stored as the EstimateRequest's JSON (None fields
left out), overrides as the CostOverrides' non-default fields."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from app.db.tables import Scenario
from app.domain.catalog import Catalog, UnknownSlugError
from app.domain.cost.inputs import CostOverrides
from app.domain.estimator.estimate import HardwareError, build_cluster
from app.schemas import EstimateRequest
from app.services.errors import InputError, field_error
from app.services.estimate import resolve_architecture


class ScenarioNotFound(LookupError):
    def __init__(self, scenario_id: int) -> None:
        self.scenario_id = scenario_id
        super().__init__(f"no scenario {scenario_id}")


class ScenarioConflict(RuntimeError):
    """The scenario changed since the caller read it; ``version`` is the current one."""

    def __init__(self, scenario_id: int, version: int) -> None:
        self.scenario_id, self.version = scenario_id, version
        super().__init__(
            f"scenario {scenario_id} is at version {version}; reload it and apply your change again"
        )


def scenario_inputs(inputs: EstimateRequest) -> dict[str, Any]:
    return inputs.model_dump(mode="json", exclude_none=True)


def scenario_overrides(overrides: CostOverrides) -> dict[str, Any]:
    return overrides.model_dump(mode="json", exclude_defaults=True)


def create_scenario(
    session: Session, name: str, inputs: EstimateRequest, overrides: CostOverrides | None = None
) -> Scenario:
    scenario = Scenario(
        name=_scenario_name(name),
        inputs=scenario_inputs(inputs),
        overrides=scenario_overrides(overrides or CostOverrides()),
    )
    session.add(scenario)
    session.commit()
    return scenario


def list_scenarios(session: Session, limit: int | None = None, offset: int = 0) -> list[Scenario]:
    """Most recently changed first; one page of ``limit`` rows from ``offset`` (all without a limit)."""
    query = select(Scenario).order_by(Scenario.updated_at.desc(), Scenario.id.desc()).offset(offset)
    return list(session.scalars(query.limit(limit) if limit is not None else query))


def count_scenarios(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(Scenario)) or 0)


def check_scenario_inputs(catalog: Catalog, inputs: EstimateRequest) -> None:
    """What is saved must open later: the model (preset or config.json), accelerator, node and fabric must exist
    in the catalog now (an InputError naming the field, under ``inputs``, otherwise)."""
    try:
        resolve_architecture(catalog, inputs)
        try:
            build_cluster(
                catalog.hardware, catalog.efficiency, accelerator=inputs.gpu, gpus=inputs.gpus, node=inputs.node,
                fabric=inputs.fabric, oversubscription=inputs.oversubscription, power_limit_w=inputs.power_limit_w,
            )  # fmt: skip
        except HardwareError as exc:
            raise InputError([field_error(exc.field, str(exc), "value_error.hardware")]) from None
        except UnknownSlugError as exc:
            raise InputError([field_error("gpu", str(exc), "value_error.unknown_slug")]) from None
    except InputError as exc:
        raise InputError([{**e, "loc": ["body", "inputs", *e["loc"][1:]]} for e in exc.errors]) from None


def _scenario_name(name: str) -> str:
    name = name.strip()
    if "\x00" in name:
        raise InputError([field_error("name", "NUL characters are not allowed", "value_error.nul")])
    return name


def get_scenario(session: Session, scenario_id: int) -> Scenario:
    scenario = session.get(Scenario, scenario_id)
    if scenario is None:
        raise ScenarioNotFound(scenario_id)
    return scenario


SQLITE_BUSY_RETRIES = 20


def update_scenario(
    session: Session,
    scenario_id: int,
    *,
    version: int,
    name: str | None = None,
    inputs: EstimateRequest | None = None,
    overrides: CostOverrides | None = None,
) -> Scenario:
    """Apply the change if ``version`` is still current (else :class:`ScenarioConflict`); the version goes up.

    On SQLite two concurrent read-then-write transactions cannot both upgrade to a write lock: the one that
    loses gets "database is locked" at once (the busy timeout does not apply). It is rolled back and retried,
    and then sees the winner's version and answers a conflict like PostgreSQL does."""
    for attempt in range(SQLITE_BUSY_RETRIES + 1):
        scenario = get_scenario(session, scenario_id)
        if scenario.version != version:
            raise ScenarioConflict(scenario_id, scenario.version)
        if name is not None:
            scenario.name = _scenario_name(name)
        if inputs is not None:
            scenario.inputs = scenario_inputs(inputs)
        if overrides is not None:
            scenario.overrides = scenario_overrides(overrides)
        try:
            session.commit()
            return scenario
        except StaleDataError:
            session.rollback()
            raise ScenarioConflict(scenario_id, get_scenario(session, scenario_id).version) from None
        except OperationalError as exc:
            session.rollback()
            if "locked" not in str(exc.orig) or attempt == SQLITE_BUSY_RETRIES:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def duplicate_scenario(session: Session, scenario_id: int, name: str | None = None) -> Scenario:
    source = get_scenario(session, scenario_id)
    copy = Scenario(
        name=(name or f"{source.name} (copy)")[:200],
        inputs=dict(source.inputs),
        overrides=dict(source.overrides),
    )
    session.add(copy)
    session.commit()
    return copy


def delete_scenario(session: Session, scenario_id: int) -> None:
    session.delete(get_scenario(session, scenario_id))
    session.commit()
