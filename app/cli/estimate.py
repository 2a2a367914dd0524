"""`capplan estimate`: memory per pipeline stage, step time and its breakdown, tokens/s and MFU for one plan."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.common import (
    JsonOpt,
    UsageError,
    fail_validation,
    figure_overrides,
    given_on_command_line,
    load_catalog,
    load_plan_file,
    model_argument,
    plan_file_to_request,
)
from app.cli.options import (
    NOT_OPTIONS,
    PLAN_FLAGS,
    CalibrationDbOpt,
    CalibrationOpt,
    CalibrationRunOpt,
    Flag,
    request_options,
    request_values,
    with_options,
)
from app.schemas import EstimateRequest

estimate_app = typer.Typer(add_completion=False)

ESTIMATE_FIELDS = tuple(name for name in EstimateRequest.model_fields if name not in NOT_OPTIONS)
"""The request fields `estimate`, `export` and `cost` take as options (model, hardware, plan, tokens)."""
REQUIRED = ("model", "gpu", "gpus", "global_batch", "seq_len")
"""Required by the request, optional on the command line: ``--plan FILE`` gives them instead."""
ESTIMATE_FLAGS = {**PLAN_FLAGS, **{name: Flag(optional=True) for name in REQUIRED}}


@estimate_app.command()
@with_options(request_options(EstimateRequest, ESTIMATE_FIELDS, ESTIMATE_FLAGS))
def estimate(
    ctx: typer.Context,
    plan_file: Annotated[
        Path | None, typer.Option("--plan", help="a capplan plan.json (from `capplan export --format json`)")
    ] = None,
    figure: Annotated[
        list[str] | None,
        typer.Option(
            "--figure", help="override a catalog figure, KEY=VALUE (e.g. efficiency.gemm_efficiency=0.6)"
        ),
    ] = None,
    calibration: CalibrationOpt = True,
    calibration_run: CalibrationRunOpt = None,
    calibration_db: CalibrationDbOpt = False,
    as_json: JsonOpt = False,
    **fields: Any,
) -> None:
    """Memory per pipeline stage, step time and breakdown, tokens/s and MFU for one plan (or --plan FILE)."""
    from pydantic import ValidationError

    from app.services.estimate import run_estimate

    if plan_file is not None:
        given = given_on_command_line(ctx, ESTIMATE_FIELDS)
        if given:
            raise UsageError(
                f"--plan replaces the estimate options; drop {', '.join('--' + g.replace('_', '-') for g in given)}"
            )
        request = plan_file_to_request(plan_file)  # calibrated as the plan was, unless told otherwise here
        if given_on_command_line(ctx, ("calibration",)):
            request = request.model_copy(update={"calibrated": calibration})
        result = run_estimate(load_catalog(request.calibrated, calibration_run, calibration_db), request)
        was = load_plan_file(plan_file).estimate.calibration
        now = next((str(a.value) for a in result.assumptions if a.name == "calibration"), None)
        if was is not None and now != was:
            typer.echo(f"note: the plan file's estimate was {was!r}, this one is {now!r}: "
                       "the figures differ by that calibration", err=True)  # fmt: skip
        typer.echo(result.model_dump_json(indent=2)) if as_json else print_estimate(result)
        return
    missing = [f"--{n.replace('_', '-')}" for n in REQUIRED if fields[n] is None]
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (or give --plan plan.json)")
    names = tuple(n for n in ESTIMATE_FIELDS if n != "model")
    values = request_values(EstimateRequest, names, ESTIMATE_FLAGS, fields)  # comma-separated lists parsed
    values.update(
        figure_overrides=figure_overrides(figure or []),
        calibrated=calibration,
        **model_argument(fields["model"]),
    )
    try:
        request = EstimateRequest(**values)
    except ValidationError as exc:
        fail_validation(exc)
    result = run_estimate(load_catalog(calibration, calibration_run, calibration_db), request)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_estimate(result)


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f}"


def print_estimate(est) -> None:
    p = est.plan
    echo = typer.echo
    echo(f"{est.model} on {est.gpus} × {est.accelerator} ({est.nodes} × {est.node}, {est.scale_out_fabric})")
    echo(
        f"plan: tp={p.tp} pp={p.pp} vpp={p.vpp} dp={p.dp} cp={p.cp} ep={p.ep}"
        + (f" expert-tp={p.expert_tp}" if p.expert_tp is not None and p.expert_tp != p.tp else "")
        + (f" mtp-layers={p.mtp_layers}" if p.mtp_layers else "")
        + (f" pipeline-layout={p.pipeline_layout}" if p.pipeline_layout else "")
        + f" {p.sharding.value} "
        f"micro-batch={p.micro_batch} global-batch={p.global_batch} seq={p.seq_len} recompute={p.recompute.value}"
        + (f" ({p.recompute_layers} layers per chunk)" if p.recompute_layers is not None else "")
        + (f" ({', '.join(m.value for m in p.recompute_modules)})" if p.recompute_modules is not None else "")
        + f" {p.precision.value} {p.framework.value}"
        + (" grad-reduce=bf16" if p.grad_reduce_bf16 else "")
        + (" grad-accum=fp32" if p.grad_accum_fp32 else "")
        + (" fused-loss" if p.fused_loss else " eager-loss" if p.fused_loss is False else "")
        + (" fused-swiglu" if p.fused_swiglu else "")
        + (" z-loss" if p.z_loss else "")
        + (" fp8-attention" if p.fp8_attention else "")
        + (f" fp8-recipe={p.fp8_recipe_used.value}" if p.precision.value == "fp8" else "")
        + (" no-nvfp4-rht" if p.precision.value == "nvfp4" and not p.nvfp4_rht else "")
        + (" fsdp1-flat-params" if p.fsdp_flat_params and p.framework.value == "fsdp2" else "")
        + (" fused-cross-entropy" if p.fused_cross_entropy else "")
        + (" no-zero-init" if not p.zero_init and p.framework.value == "deepspeed" else "")
        + (f" moe-capacity={p.moe_capacity_factor:g}" if p.moe_capacity_factor else "")
        + (" padded" if p.moe_capacity_factor and p.moe_pad_to_capacity else "")
    )
    echo(f"parameters: {est.parameters_total:,} total, {est.parameters_active:,} active per token")
    verdict = "FITS" if est.fits else "DOES NOT FIT"
    echo(
        f"\nmemory per GPU: {verdict}  peak {_gib(est.peak_memory_bytes)} GiB of {_gib(est.usable_memory_bytes)} GiB usable"
        f" (margin {_gib(est.margin_bytes)} GiB; largest term: {est.dominant_term}, stage {est.peak_stage})"
    )
    cols = (
        "stage",
        "layers",
        "params",
        "grads",
        "optim",
        "activ",
        "logits",
        "gathered",
        "buffers",
        "runtime",
        "total",
        "margin",
    )
    echo("  " + "".join(c.rjust(9) for c in cols) + "   (GiB)")
    seen = set()
    for st in est.memory_by_stage:
        key = (st.layers, st.first, st.last, st.total_bytes)
        if key in seen:
            continue
        seen.add(key)
        label = f"{st.rank}" + ("F" if st.first else "") + ("L" if st.last else "")
        vals = (
            st.params_bytes,
            st.grads_bytes,
            st.optimizer_bytes,
            st.activations_bytes,
            st.logits_bytes,
            st.gathered_params_bytes,
            st.buffers_bytes + st.workspace_bytes + st.fragmentation_bytes,
            st.runtime_bytes,
            st.total_bytes,
            st.margin_bytes,
        )
        echo("  " + label.rjust(9) + str(st.layers).rjust(9) + "".join(_gib(v).rjust(9) for v in vals))
    startup = max(est.memory_by_stage, key=lambda st: st.startup_bytes)
    if startup.startup_bytes > startup.allocated_peak_bytes + startup.fragmentation_bytes:
        echo(
            f"  start-up: {_gib(startup.startup_bytes)} GiB before training — deepspeed.initialize moves the whole "
            "model to each GPU before ZeRO-3 partitions it (zero_init off); that, not training, sets the total"
        )
    step_copy = max(st.optimizer_step_bytes for st in est.memory_by_stage)
    if step_copy:
        echo(
            f"  optimizer step: +{_gib(step_copy)} GiB of new allocator segments for DeepSpeed's fp32 gradient "
            "partition — max_memory_reserved and nvidia-smi read it above the training peak, max_memory_allocated does not"
        )
    t = est.step
    echo(
        f"\nstep time: {est.step_time_s:.3f} s  ({t.micro_batches} micro-batches × {t.micro_batch_s * 1e3:.1f} ms)"
    )
    parts = [
        ("compute", t.compute_s),
        ("recompute", t.recompute_s),
        ("TP exposed", t.tp_exposed_s),
        ("CP exposed", t.cp_exposed_s),
        ("EP exposed", t.ep_exposed_s),
        ("FSDP exposed", t.fsdp_exposed_s),
        ("PP p2p", t.pp_p2p_s),
        ("bubble", t.bubble_s),
        ("DP exposed", t.dp_exposed_s),
        ("optimizer", t.optimizer_s),
    ]
    for name, v in parts:
        if v > 0:
            echo(f"  {name:14s}{v:10.3f} s  {v / est.step_time_s:6.1%}")
    echo(
        f"\nthroughput: {est.tokens_per_s:,.0f} tokens/s ({est.tokens_per_s_per_gpu:,.0f} per GPU); "
        f"MFU {est.mfu:.1%}, HFU {est.hfu:.1%}; {est.achieved_tflops_per_gpu:.0f} TFLOP/s per GPU"
    )
    echo(f"model FLOPs per token: {est.model_flops_per_token:.4g} ({est.flops_formula})")
    if est.track_record is not None:
        echo(f"track record: {est.track_record.summary}")
    if est.time_to_train_days is not None:
        echo(
            f"time to train {est.tokens_to_train:.3g} tokens: {est.time_to_train_days:,.1f} days (before failures)"
        )
    for a in est.assumptions:
        if a.name == "calibration":
            echo(f"calibration: {a.value}" + (f" ({a.note})" if a.source.startswith("calibrated") else ""))
    low = [a for a in est.assumptions if a.confidence == "low"]
    if low:
        echo("low-confidence figures used: " + ", ".join(a.name for a in low))
