"""The one error type of the use-cases: bad input as ``{loc, msg, type}`` items, one per field.

The API turns an :class:`InputError` into a 422, the pages into inline messages and the CLI into one line and
exit code 2.
"""

from __future__ import annotations

from typing import Any


class InputError(ValueError):
    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in errors))


def field_error(field: str, msg: str, kind: str) -> dict[str, Any]:
    return {"loc": ["body", *field.split(".")], "msg": msg, "type": kind}
