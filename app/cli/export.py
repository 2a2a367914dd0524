"""`capplan export`: a plan as plan JSON, torchtitan TOML, a torchrun command, Megatron-LM arguments, DeepSpeed
JSON, a Slurm script or a Kubernetes PyTorchJob — from a plan file or from the estimate options."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.common import (
    UsageError,
    fail_validation,
    given_on_command_line,
    load_catalog,
    load_plan_file,
    model_argument,
)
from app.cli.estimate import ESTIMATE_FIELDS, ESTIMATE_FLAGS, REQUIRED
from app.cli.options import (
    CalibrationDbOpt,
    CalibrationOpt,
    CalibrationRunOpt,
    Flag,
    request_options,
    request_values,
    with_options,
)
from app.domain.export import ExportFormat
from app.schemas import EstimateRequest

export_app = typer.Typer(add_completion=False)

EXPORT_FLAGS = {
    **ESTIMATE_FLAGS,
    "model": Flag(optional=True, help="without --plan: preset slug or path to a config.json"),
    "gpu": Flag(optional=True, help="without --plan: accelerator slug"),
    "gpus": Flag(optional=True, help="without --plan: number of GPUs"),
    "global_batch": Flag(optional=True, help="without --plan: sequences per step"),
    "seq_len": Flag(optional=True, help="without --plan: tokens per sequence"),
    "tokens": Flag(help="tokens to train (sets the training steps)"),
}


@export_app.command("export")
@with_options(request_options(EstimateRequest, ESTIMATE_FIELDS, EXPORT_FLAGS))
def export_command(
    ctx: typer.Context,
    plan_file: Annotated[
        Path | None, typer.Option("--plan", help="a capplan plan file (capplan.plan/v1 JSON)")
    ] = None,
    fmt: Annotated[
        ExportFormat, typer.Option("--format", help="what to write", case_sensitive=False)
    ] = ExportFormat.json,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write to this file, not stdout")
    ] = None,
    calibration: CalibrationOpt = True,
    calibration_run: CalibrationRunOpt = None,
    calibration_db: CalibrationDbOpt = False,
    **fields: Any,
) -> None:
    """Write a plan as plan JSON, torchtitan TOML, a torchrun command, Megatron-LM arguments, DeepSpeed JSON,
    a Slurm script or a Kubernetes PyTorchJob — from --plan plan.json, or from the estimate options."""
    from pydantic import ValidationError

    from app.domain.export import PlanDocumentError, export_plan

    given = given_on_command_line(ctx, ESTIMATE_FIELDS)
    if plan_file is not None:
        given += given_on_command_line(ctx, ("calibration", "calibration_run", "calibration_db"))
        if given:
            raise UsageError(
                f"--plan already holds the model, hardware and plan (exported as estimated); "
                f"drop --{given[0].replace('_', '-')}"
            )
        doc = load_plan_file(plan_file)
    else:
        from app.services.documents import plan_document_from_request

        missing = [f"--{n.replace('_', '-')}" for n in REQUIRED if fields[n] is None]
        if missing:
            raise UsageError(f"give --plan plan.json, or the estimate options (missing {', '.join(missing)})")
        names = tuple(n for n in ESTIMATE_FIELDS if n != "model")
        values = request_values(EstimateRequest, names, EXPORT_FLAGS, fields)  # comma-separated lists parsed
        try:
            request = EstimateRequest(**values, calibrated=calibration, **model_argument(fields["model"]))
        except ValidationError as exc:
            fail_validation(exc)
        doc = plan_document_from_request(load_catalog(calibration, calibration_run, calibration_db), request)
    try:
        exported = export_plan(doc, fmt)
    except PlanDocumentError as exc:
        raise UsageError(f"cannot export this plan as {fmt.value}: {exc}") from None
    if output is None:
        typer.echo(exported.content, nl=False)
    else:
        output.write_bytes(exported.content.encode("utf-8"))
        typer.echo(f"wrote {output} ({fmt.value}, {exported.media_type})", err=True)
    for note in exported.notes:
        typer.echo(f"note: {note}", err=True)
