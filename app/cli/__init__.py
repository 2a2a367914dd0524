"""The `capplan` command line (Typer), one module per command group.

- ``serve_db.py``  — ``capplan serve`` and ``capplan db upgrade|downgrade|check|export|import``
- ``catalog.py``   — ``capplan catalog list|show``
- ``estimate.py``  — ``capplan estimate`` (one plan: memory per stage, step time, tokens/s, MFU)
- ``export.py``    — ``capplan export`` (a plan as plan JSON, torchtitan, torchrun, Megatron, DeepSpeed, Slurm, k8s)
- ``cost.py``      — ``capplan cost`` (days and dollars per pricing option, or ``--monthly`` bills)
- ``plan.py``      — ``capplan plan`` (the plan search; ``--output`` writes the winner as a plan file)
- ``size.py``      — ``capplan size`` (which GPU, how many, which plan, which way to pay)
- ``validate.py``  — ``capplan validate`` and ``capplan calibrate-published`` (accuracy against published runs)
- ``bench.py``     — ``capplan bench presets|run|submit|show|ship|launch-cmd`` (the GPU benchmark runner)
- ``options.py``   — the model, hardware and plan options, generated from the request models in app/schemas/requests.py
- ``common.py``    — the one-line error (:class:`UsageError`), the catalog, argument parsers, plan files
- ``catalog_cache.py`` — the parsed catalog kept between runs while its files are unchanged (~/.cache/capplan)

A command's module is imported only when that command runs (:class:`LazyGroup`), and each module imports the
services, domain, database or web code it needs inside the command: `capplan plan` does not load SQLAlchemy's
tables, the web app or the database migrations. `capplan --help` imports every module to list them.
Entry point: ``capplan = "app.cli:main"`` (pyproject); ``python -m app.cli`` runs the same.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

import typer
from typer.core import TyperGroup

from app.cli.common import UsageError, load_plan_file, plan_file_to_request

__all__ = ["COMMANDS", "UsageError", "app", "load_plan_file", "main", "plan_file_to_request"]

COMMANDS = {
    "serve": ("app.cli.serve_db", "serve_app"),
    "db": ("app.cli.serve_db", "db_app"),
    "catalog": ("app.cli.catalog", "catalog_app"),
    "estimate": ("app.cli.estimate", "estimate_app"),
    "validate": ("app.cli.validate", "validate_app"),
    "calibrate-published": ("app.cli.validate", "calibrate_app"),
    "export": ("app.cli.export", "export_app"),
    "cost": ("app.cli.cost", "cost_app"),
    "plan": ("app.cli.plan", "plan_app"),
    "size": ("app.cli.size", "size_app"),
    "bench": ("app.cli.bench", "bench_app"),
}
"""Every top-level command: the module that defines it and the Typer there that holds it."""

_START_UP = {"gc_paused": False}
"""True while :func:`main` holds the cyclic garbage collector off until the command's module has loaded."""


def _resume_gc_after_start_up() -> None:
    """Called once the command's module is imported: move what the imports created out of the collector's reach
    (``gc.freeze``) and turn it back on. Imports create thousands of long-lived objects (classes, schemas,
    functions) and no garbage cycles; collecting every 700 allocations while they load, and traversing them in
    every later full collection, only walks what must stay (~25 ms of `capplan plan`'s start-up)."""
    if _START_UP["gc_paused"]:
        _START_UP["gc_paused"] = False
        gc.freeze()
        gc.enable()


class LazyGroup(TyperGroup):
    """The root group: lists :data:`COMMANDS` and builds a command from its module only when it is asked for."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str):  # noqa: ANN201 - a click command or None
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attribute = COMMANDS[cmd_name]
            command = typer.main.get_command(getattr(importlib.import_module(module), attribute))
            _resume_gc_after_start_up()
            command.name = cmd_name
            self.commands[cmd_name] = command
        return self.commands.get(cmd_name)


app = typer.Typer(
    cls=LazyGroup,
    help="capplan: capacity and cost planning for LLM training clusters.",
    no_args_is_help=True,
)


@app.callback()
def _root() -> None:
    """The commands live in COMMANDS' modules (a callback makes the root a group with none registered)."""


_KNOWN_ERRORS = (
    ("app.domain.catalog", "CatalogError"),
    ("app.domain.catalog", "UnknownSlugError"),
    ("app.services.errors", "InputError"),
    ("alembic.util", "CommandError"),
)
"""Errors printed as one line (exit code 2), by the module that exports them: a module nobody imported cannot
have raised its error, so only the loaded ones are checked (nothing is imported to print an error)."""


def _known_error(exc: BaseException) -> bool:
    if isinstance(exc, UsageError):
        return True
    for module, name in _KNOWN_ERRORS:
        loaded = sys.modules.get(module)
        kind = getattr(loaded, name, None) if loaded is not None else None
        if kind is not None and isinstance(exc, kind):
            return True
    return False


def _settings_error(exc: BaseException) -> str | None:
    """``CAPPLAN_X: reason (got …)`` for a Settings field the environment set wrongly; None for anything else."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(exc, pydantic.ValidationError) or exc.title != "Settings":
        return None
    first = exc.errors()[0]
    name = "CAPPLAN_" + "_".join(str(p) for p in first["loc"]).upper()
    msg = str(first["msg"]).removeprefix("Value error, ")
    return f"{name}: {msg} (got {first.get('input')!r})"


def main() -> None:
    """Console entry point: known errors print one line and exit 2, never a traceback.

    The cyclic garbage collector is off until the command's module has loaded (:func:`_resume_gc_after_start_up`)
    and, once the command is done, what is still alive is moved out of its reach: the interpreter's exit would
    otherwise traverse every module, class and schema once more before freeing them (~40 ms of `capplan plan`).
    Exit handlers and stream flushing run as usual. Only this entry point does it; ``app`` run in-process (tests,
    CliRunner) leaves the collector alone. capplan uses no pydantic plugins, so pydantic is told not to look for
    any (``PYDANTIC_DISABLE_PLUGINS``, unless the environment sets it): the search reads the entry points of every
    installed package (~8 ms)."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if gc.isenabled():
        gc.disable()
        _START_UP["gc_paused"] = True
    try:
        app(standalone_mode=True)
    except Exception as exc:
        message = str(exc) if _known_error(exc) else _settings_error(exc)
        if message is None:
            raise
        typer.echo(f"error: {message}", err=True)
        sys.exit(2)
    finally:
        _resume_gc_after_start_up()
        gc.freeze()
