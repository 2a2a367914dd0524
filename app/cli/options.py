"""Command-line options generated from the request models (torchtitan's config → CLI approach).

The model, hardware and plan options of `capplan estimate`, `export`, `cost` and `plan` are not declared in the
commands: :func:`request_options` reads them from the pydantic request model (``EstimateRequest``,
``PlanSearchRequest``) — name, type, default, choices and help (the field's description unless the command
line words it its own way, :data:`PLAN_HELP`) — and :func:`with_options` adds them to a command's signature,
where typer finds them. A field added to the request
model becomes an option of every command that takes the model, unless :data:`NOT_OPTIONS` says why not; a
:class:`Flag` only adjusts what the default rule does not fit (a negative flag's name, a field the model
requires but a ``--plan`` file can give, a list typed as comma-separated text, help where the model has none).

Importing this module costs typer and the standard library; the request model is passed in by the command
module, which is imported only when its command runs.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.common import enum_list, int_list


@dataclass(frozen=True)
class Flag:
    """How one request field appears on the command line where the default rule does not fit."""

    decls: tuple[str, ...] = ()
    """option names, e.g. ``("--fused-kernels/--eager",)``; default ``--field-name`` (``--x/--no-x`` for a bool)"""
    help: str | None = None
    """help text where the model has no description or the command words it its own way"""
    param: str | None = None
    """the command's parameter name when it differs from the field's (``top_k`` → ``top``)"""
    optional: bool = False
    """required by the model, optional here: the command checks it (``--plan FILE`` can give it instead)"""
    text: bool = False
    """a string the command parses (a comma-separated list) or hands to the model to validate"""
    required: bool = False
    """optional in the model, required here (``--model`` of `capplan plan`: a preset or a config.json path)"""


NOT_OPTIONS = {
    "hf_config": "--model takes a preset slug or the path of a config.json",
    "calibrated": "--calibration/--no-calibration (CalibrationOpt), with --calibration-run and --calibration-db",
    "figure_overrides": "--figure KEY=VALUE, repeatable (estimate)",
    "overrides": "price and reliability overrides: the API and the planner (capplan cost takes its own options)",
}
"""Request fields that are not options of their own, and why."""

# The command line's help for the plan fields: what the option takes where the model's description does not say
# it (``--model`` also takes a config.json path) or where the model has none. A Flag's help comes first, the
# field's description last.
PLAN_HELP = {
    "model": "preset slug (capplan catalog list architectures) or path to a config.json",
    "gpus": "number of GPUs",
    "seq_len": "tokens per sequence",
    "tp": "tensor parallel",
    "pp": "pipeline parallel",
    "vpp": "virtual pipeline chunks per rank",
    "cp": "context parallel",
    "ep": "expert parallel",
    "dp": "data parallel (default: gpus / (tp·pp·cp))",
    "sharding": "data-parallel sharding",
    "shard_group_size": "HSDP shard group size",
    "micro_batch": "sequences per micro-batch",
    "fused_kernels": "default: by framework",
    "fused_loss": "default: as --fused-kernels/--eager",
    "tp_comm_overlap": "default: on for megatron, off otherwise",
    "repeat_kv": "K/V repeated to all query heads (torchtitan < 2026-01)",
    "fsdp_flat_params": "FSDP1 / FairScale / Composer flat parameters (off: FSDP2's copy-out)",
    "zero_init": "DeepSpeed ZeRO-3: model built under zero.Init (off: whole model on each GPU at start-up)",
    "oversubscription": "fat-tree oversubscription",
    "power_limit_w": "GPU power cap in W",
}

PLAN_FLAGS = {
    "fused_kernels": Flag(decls=("--fused-kernels/--eager",)),
    "fused_loss": Flag(decls=("--fused-loss/--eager-loss",)),
    "tp_comm_overlap": Flag(decls=("--tp-comm-overlap/--no-tp-comm-overlap",)),
    "allow_tp_across_nodes": Flag(decls=("--allow-tp-across-nodes",)),
}
"""The plan fields' flags, shared by every command that takes them."""


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without ``None`` and ``Annotated`` metadata, whether ``None`` was allowed)."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner, _ = _unwrap(args[0] if len(args) == 1 else typing.Union[tuple(args)])  # noqa: UP007
        return inner, len(args) < len(typing.get_args(annotation))
    return annotation, False


def list_item(annotation: Any) -> Any | None:
    """The item type of a ``list[...]`` field (``None`` for any other field)."""
    inner, _ = _unwrap(annotation)
    if typing.get_origin(inner) is list:
        return _unwrap(typing.get_args(inner)[0])[0]
    return None


def request_options(
    model: Any, names: Iterable[str], flags: dict[str, Flag] | None = None
) -> list[inspect.Parameter]:
    """Keyword parameters, one per field of the pydantic ``model`` in ``names``, typed and described for typer."""
    flags = flags or {}
    out = []
    for name in names:
        if name in NOT_OPTIONS:
            raise ValueError(f"{name} is not a command-line option: {NOT_OPTIONS[name]}")
        field = model.model_fields[name]
        flag = flags.get(name, Flag())
        inner, nullable = _unwrap(field.annotation)
        required = (field.is_required() and not flag.optional) or flag.required
        default = inspect.Parameter.empty if required else (None if field.is_required() else field.default)
        item = list_item(field.annotation)
        if flag.text or item is not None:  # text the command parses or the model checks
            if item is not None:
                choices = _choices(item)
                extra = f"comma-separated{': ' + choices if choices else ''}"
            else:
                choices = _choices(inner)
                extra = f"one of {choices}" if choices else ""
            described = flag.help or PLAN_HELP.get(name) or field.description
            help_text = "; ".join(t for t in (described, extra) if t)
            inner = str
            default = getattr(default, "value", default)
        else:
            help_text = flag.help or PLAN_HELP.get(name) or field.description
        if (nullable and not flag.required) or (field.is_required() and flag.optional):
            inner = inner | None
        option = typer.Option(*flag.decls, help=help_text)
        out.append(
            inspect.Parameter(
                flag.param or name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=Annotated[inner, option],
            )
        )
    return out


def _choices(kind: Any) -> str:
    return ", ".join(str(e.value) for e in kind) if isinstance(kind, type) and issubclass(kind, Enum) else ""


def request_values(
    model: Any, names: Iterable[str], flags: dict[str, Flag] | None, given: dict[str, Any]
) -> dict[str, Any]:
    """The generated options' values (``given``, by parameter name) as request fields: named as the model names
    them, comma-separated lists parsed (a UsageError names the option)."""
    flags = flags or {}
    out = {}
    for name in names:
        param = (flags.get(name) or Flag()).param or name
        value = given[param]
        item = list_item(model.model_fields[name].annotation)
        if item is not None:
            option = "--" + param.replace("_", "-")
            value = enum_list(value, item, option) if _choices(item) else int_list(value, option)
        out[name] = value
    return out


def with_options(options: list[inspect.Parameter]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add ``options`` to a command whose signature ends in ``**fields``: typer reads the signature, the command
    receives the generated options' values in ``fields``."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        taken = {p.name for p in own}
        clash = [p.name for p in options if p.name in taken]
        if clash:
            raise ValueError(f"{command.__name__}: {clash} declared twice")
        ordered = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + options
        command.__signature__ = signature.replace(parameters=ordered)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in ordered}
        return command

    return add


# -- calibration: the same three options on every command that estimates ------------------------------------

CalibrationOpt = Annotated[
    bool,
    typer.Option(
        "--calibration/--no-calibration",
        help="use the calibration fitted from benchmark runs (those shipped under data/calibration, "
        "--calibration-run files, and with --calibration-db the database's); --no-calibration: catalog defaults",
    ),
]
CalibrationRunOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--calibration-run",
        help="a runner result JSON (capplan bench run --output) to calibrate with; repeat",
    ),
]
CalibrationDbOpt = Annotated[
    bool,
    typer.Option("--calibration-db", help="also calibrate with the runs posted to CAPPLAN_DATABASE_URL"),
]
