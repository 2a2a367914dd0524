"""The command line imports only what a command uses: the package itself nothing heavy, `capplan plan` nothing of
the web app or the database migrations. Each check runs in a new interpreter (a test process has everything
loaded already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from app.settings import REPO_ROOT

WEB_AND_MIGRATIONS = (
    "fastapi",
    "starlette",
    "jinja2",
    "alembic",
    "uvicorn",
    "app.main",
    "app.web",
    "app.api",
)
PLAN = ["plan", "--model", "llama3.1-405b", "--gpu", "h100-sxm", "--gpus", "1024", "--global-batch", "512",
        "--seq-len", "8192", "--framework", "megatron", "--top", "1"]  # fmt: skip
RUN_PLAN = f"""
from app.cli import main
sys.argv = ["capplan", *{PLAN!r}]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
"""


def loaded_after(code: str, tmp_path) -> set[str]:  # noqa: ANN001
    """The top-level names of the modules loaded once ``code`` ran (packages and their submodules)."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))\n"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CAPPLAN_CATALOG_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = json.loads(proc.stdout.strip().splitlines()[-1])
    return {m for m in modules for prefix in _prefixes(m)} | set(modules)


def _prefixes(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def test_the_package_imports_no_command(tmp_path) -> None:  # noqa: ANN001
    loaded = loaded_after("import app.cli", tmp_path)
    heavy = {
        "sqlalchemy",
        "numpy",
        "pydantic",
        "app.schemas",
        "app.services",
        "app.domain",
        *WEB_AND_MIGRATIONS,
    }
    assert not heavy & loaded, sorted(heavy & loaded)


def test_plan_loads_no_web_app_and_no_migrations(tmp_path) -> None:  # noqa: ANN001
    loaded = loaded_after(RUN_PLAN, tmp_path)
    assert "app.domain.search" in loaded  # the search ran
    assert not set(WEB_AND_MIGRATIONS) & loaded, sorted(set(WEB_AND_MIGRATIONS) & loaded)


def test_plan_loads_no_database_code(tmp_path) -> None:  # noqa: ANN001
    # The first run fills the catalog cache (calibrating imports app.calibration_store, which imports SQLAlchemy
    # too); the everyday run, checked here, reads the cache.
    loaded_after(RUN_PLAN, tmp_path)
    loaded = loaded_after(RUN_PLAN, tmp_path)
    assert not {"sqlalchemy", "app.db"} & loaded, sorted({"sqlalchemy", "app.db"} & loaded)


NOT_FOR_PLAN = (
    "app.domain.export",  # plan documents: only with --output
    "app.schemas.plan_export",
    "app.schemas.benchmarks",
    "app.schemas.scenarios",
    "app.domain.cost.training",  # the cost model: only with --tokens
    "app.domain.reliability.report",
    "app.domain.estimator.fitted",  # the fit record and the published runs: validate and calibrate-published
    "app.domain.estimator.published",
    "app.domain.catalog.load",  # the TOML loaders: only when the cache misses
)


def test_plan_loads_only_what_the_search_uses(tmp_path) -> None:  # noqa: ANN001
    """`capplan plan` without tokens or --output (the reference search of `make bench`) builds the search request,
    runs the search and re-estimates its winner: it loads neither the export package, the other request and
    response models, the cost model, the fit record and published runs nor the catalog's TOML loaders."""
    loaded_after(RUN_PLAN, tmp_path)  # fills the catalog cache
    loaded = loaded_after(RUN_PLAN, tmp_path)
    assert "app.schemas.requests" in loaded and "app.domain.search.engine" in loaded
    assert not set(NOT_FOR_PLAN) & loaded, sorted(set(NOT_FOR_PLAN) & loaded)


def test_the_entry_point_pauses_the_collector_only_while_the_command_loads(tmp_path) -> None:  # noqa: ANN001
    """`capplan` (``main``) turns the cyclic collector off until the command's module is imported, then freezes
    what the imports made and turns it back on; after the command, what is alive is frozen too (the exit skips a
    full traversal). Checked from inside the command and after it: a collector left off would let a long
    command (sizing, serve) grow garbage cycles without bound."""
    code = f"""
import gc
import app.services.search as search
seen = {{}}
original = search.run_search
def spy(*args, **kwargs):
    seen["enabled_during_run"] = gc.isenabled()
    seen["frozen_during_run"] = gc.get_freeze_count()
    return original(*args, **kwargs)
search.run_search = spy
{RUN_PLAN}
print(json.dumps({{**seen, "enabled_after": gc.isenabled(), "frozen_after": gc.get_freeze_count()}}))
"""
    script = f"import json, sys\n{code}"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CAPPLAN_CATALOG_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    assert state["enabled_during_run"] is True  # back on before the search runs
    assert state["frozen_during_run"] > 1000  # the imports' objects were frozen
    assert state["enabled_after"] is True
    assert state["frozen_after"] >= state["frozen_during_run"]
