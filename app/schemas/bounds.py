"""What every request model shares: free-form JSON bounded before it is stored or read (a config.json, a benchmark
run's config), and numbers that are numbers (:class:`StrictNumbers`). Only pydantic and the config.json bounds."""

from __future__ import annotations

import json
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator

from app.domain.model.hf_config import ArchitectureImportError, check_hf_config_bounds

# -- free-form JSON (a config.json, a benchmark run's config): bounded before it is stored or read ----------

JSON_MAX_DEPTH = 20


def load_json_text(text: str | bytes, what: str = "input") -> Any:
    """``json.loads`` that answers every malformed or oversized document with a ValueError naming the problem
    (the standard parser raises RecursionError past ~1,000 levels and a bare ValueError past 4,300 digits)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"{what} is nested deeper than {JSON_MAX_DEPTH} levels (limit)") from None
    except ValueError as exc:  # int digits over sys.get_int_max_str_digits()
        raise ValueError(f"{what} holds an integer over 18 digits (limit): {str(exc)[:80]}") from None


def _bounded_hf_config(value: dict[str, Any]) -> dict[str, Any]:
    try:
        check_hf_config_bounds(value)
    except ArchitectureImportError as exc:
        raise ValueError(str(exc).split(" (supported model_type")[0]) from None
    return value


def _bounded_json(value: dict[str, Any]) -> dict[str, Any]:
    """Any stored JSON object: nesting, digits, size and NUL characters bounded like a config.json (what the
    API accepts must be what a backup can restore, on SQLite and PostgreSQL alike)."""
    try:
        check_hf_config_bounds(value)
    except ArchitectureImportError as exc:
        if "over the limit of" in exc.reason:  # model-size limits are for config.json only
            return value
        raise ValueError(str(exc).split(" (supported model_type")[0]) from None
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("NUL characters are not allowed")
    return value


HfConfig = Annotated[dict[str, Any], AfterValidator(_bounded_hf_config)]
BoundedJson = Annotated[dict[str, Any], AfterValidator(_bounded_json)]
NoNul = Annotated[str, AfterValidator(_no_nul)]


# -- numbers are numbers: JSON true/false is refused where a number is expected (pydantic's lax mode would take
# false as 0), in the request models and every override model nested in them.


def _bool_paths(annotation: Any, value: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _bool_paths(args[0], value, path)
    if origin in (Union, UnionType):
        if isinstance(value, bool) and bool in args:
            return []
        found = [_bool_paths(a, value, path) for a in args if a is not type(None)]
        return min(found, key=len) if found else []
    if isinstance(value, bool):
        return [path] if annotation in (int, float) else []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(value, dict):
        out: list[tuple[str, ...]] = []
        for name, field in annotation.model_fields.items():
            key = field.alias or name
            if key in value:
                out += _bool_paths(field.annotation, value[key], (*path, key))
        return out
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return [p for k, v in value.items() for p in _bool_paths(args[1], v, (*path, str(k)))]
    if origin is list and isinstance(value, list) and args:
        return [p for i, v in enumerate(value) for p in _bool_paths(args[0], v, (*path, str(i)))]
    return []


class StrictNumbers(BaseModel):
    """Base of request models: a boolean where a number is expected is an error naming the field, and so is a
    number that is not finite (NaN, ±inf, or a literal such as 1e400 that overflows to inf): "must be finite",
    never the bound it happens to fail ("must be ≤ 1e16")."""

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        paths = _bool_paths(cls, data, ())
        if paths:
            raise ValueError(
                "expected a number, got true/false: " + ", ".join(".".join(p) for p in paths[:5])
            )
        return data
