"""The house rules of issue 13 that the code's shape must keep: no module in ``app/`` over 600 lines (split by
reason to change, as ``services/size*.py`` and ``estimator/activation*.py`` are), and every package's
``__init__`` says in its docstring what lives there."""

from __future__ import annotations

import ast
from pathlib import Path

from app.settings import REPO_ROOT

APP = REPO_ROOT / "app"
MAX_LINES = 600


def _modules() -> list[Path]:
    return sorted(p for p in APP.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_in_app_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(REPO_ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by reason to change (issue 13): {long}"


def test_every_package_says_what_lives_there() -> None:
    silent = [
        str(init.relative_to(REPO_ROOT))
        for init in sorted(APP.rglob("__init__.py"))
        if "__pycache__" not in init.parts and not ast.get_docstring(ast.parse(init.read_text()))
    ]
    assert not silent, f"packages without a docstring: {silent}"


def test_the_checks_see_the_tree() -> None:
    """Guards the two checks above against a wrong root: they must find the app's modules and packages."""
    assert len(_modules()) > 100
    assert (APP / "services" / "size.py") in _modules()
