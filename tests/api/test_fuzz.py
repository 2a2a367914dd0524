"""Property-based fuzzing of the JSON API from its own OpenAPI schema (schemathesis): no 5xx, and every response
matches its documented schema. CI runs a bounded number of examples per operation (CAPPLAN_FUZZ_EXAMPLES,
default 8); `make fuzz` runs many more.

schemathesis' pytest plugin does not work with pytest 9.2 (it touches ``Item._nodeid``), so the operations are
driven through hypothesis directly with each operation's strategy.
"""

from __future__ import annotations

import os
import tempfile
from functools import cache
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from app.db.migrate import upgrade
from app.main import create_app
from app.settings import Settings

EXAMPLES = int(os.environ.get("CAPPLAN_FUZZ_EXAMPLES", "8"))


@cache
def fuzz_schema():
    db = Path(tempfile.mkdtemp(prefix="capplan-fuzz-")) / "fuzz.db"
    app_settings = Settings(
        database_url=f"sqlite:///{db}", api_token="fuzz-token", log_level="WARNING", search_max_plans=20_000
    )
    upgrade(app_settings.database_url)
    return schemathesis.openapi.from_asgi("/api/v1/openapi.json", create_app(app_settings))


def operations() -> dict[str, object]:
    ops = {}
    for result in fuzz_schema().get_all_operations():
        op = result.ok()
        ops[f"{op.method.upper()} {op.path}"] = op
    return ops


@pytest.mark.parametrize("label", sorted(operations()))
def test_api_never_fails_and_matches_its_schema(label: str) -> None:
    operation = operations()[label]

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    def run(case) -> None:
        response = case.call()
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    run()
