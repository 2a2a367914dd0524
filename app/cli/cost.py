"""`capplan cost`: days and dollars to train N tokens with a plan for every pricing option, after failures and
checkpoints; or, with --monthly, the monthly bill of a cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from app.cli.common import (
    JsonOpt,
    UsageError,
    first_error,
    given_on_command_line,
    load_catalog,
    model_argument,
    plan_file_to_request,
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
from app.domain.cost.inputs import CostOption, CostOverrides
from app.schemas import CostRequest

cost_app = typer.Typer(add_completion=False)

MAX_OVERRIDES_FILE_BYTES = 1_000_000
COST_FLAGS = {
    **ESTIMATE_FLAGS,
    "tokens": Flag(optional=True, help="tokens to train (with the estimate options or --plan)"),
    "node": Flag(help="node or instance slug (--monthly: what to price)"),
}
PLAN_FIELDS = tuple(name for name in ESTIMATE_FIELDS if name != "tokens")
"""What a plan file holds (the model, hardware and plan); --tokens comes with it."""


def _override_value(text: str) -> object:
    """A --set value: JSON when it parses (numbers, true/false, null, lists), else the plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cost_overrides(assignments: list[str], overrides_file: Path | None) -> CostOverrides:
    """Overrides from a JSON file, then ``KEY=VALUE`` assignments (dotted keys reach nested groups:
    ``self_build.pue=1.2``, ``reliability.checkpoint_mode=sync``); UsageError naming the key otherwise."""
    data: dict = {}
    if overrides_file is not None:
        if not overrides_file.is_file():
            raise UsageError(f"--overrides: no such file {overrides_file}")
        if overrides_file.stat().st_size > MAX_OVERRIDES_FILE_BYTES:
            raise UsageError(f"--overrides: {overrides_file} is larger than {MAX_OVERRIDES_FILE_BYTES} bytes")
        try:
            data = json.loads(overrides_file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"--overrides: {overrides_file} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise UsageError(f"--overrides: {overrides_file} must hold a JSON object")
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {assignment!r}: expected KEY=VALUE, e.g. --set self_build.pue=1.2")
        target = data
        *groups, leaf = key.strip().split(".")
        for group in groups:
            target = target.setdefault(group, {})
            if not isinstance(target, dict):
                raise UsageError(f"--set {key}: {group} is not a group of overrides")
        target[leaf] = _override_value(value.strip())
    try:
        return CostOverrides.model_validate(data)
    except ValidationError as exc:
        where, msg = first_error(exc)
        raise UsageError(f"--set {where}: {msg}") from None


def _cost_validation_error(exc: ValidationError) -> UsageError:
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    where = (
        f"--set {'.'.join(loc[1:])}"
        if loc and loc[0] == "overrides"
        else f"--{'-'.join(loc).replace('_', '-')}"
    )
    return UsageError(f"{where or 'input'}: {first['msg']}")


def _usd(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def print_training_cost(result) -> None:
    echo = typer.echo
    rel = result.reliability
    echo(
        f"{result.model} on {result.gpus} × {result.accelerator}: {result.tokens:.3g} tokens at "
        f"{result.tokens_per_s:,.0f} tokens/s on {result.instances} × {result.instance}"
        + ("" if result.fits else "  (the plan does NOT fit in memory)")
    )
    echo(
        f"reliability: job MTBF {result.job_mtbf_hours:.2f} h ({rel.failure_record or 'override'}); checkpoint "
        f"{rel.checkpoint_bytes / 1e12:.2f} TB, {rel.checkpoint_mode}, blocks {rel.checkpoint_blocking_s:.2f} s, "
        f"writes in {rel.checkpoint_write_s:.1f} s; every {result.checkpoint_interval_s:,.0f} s ({rel.interval_formula}); "
        f"restart {rel.restart_s:,.0f} s; goodput {result.goodput:.1%}; ~{result.expected_failures:,.0f} failures expected"
    )
    if rel.checkpoint_mode == "async":
        echo(
            f"  async save: {rel.checkpoint_blocking_s:.2f} s snapshot to host memory + {rel.background_slowdown:.0%} "
            f"slower for the {rel.background_write_s:.1f} s background write = {rel.checkpoint_overhead_s:.2f} s lost per save"
        )
    echo(
        "  interval sensitivity: "
        + ", ".join(
            f"{p.factor:g}× ({p.interval_s:,.0f} s{', the write time' if p.limited_by_write else ''}) goodput {p.goodput:.2%}"
            for p in rel.interval_sensitivity
        )
    )
    rule = rel.rule_of_thumb
    extra = (
        ""
        if result.rule_of_thumb_extra_usd is None
        else f", +${result.rule_of_thumb_extra_usd:,.0f} on-demand"
    )
    if not rule.same_as_interval:
        echo(
            f"  checkpointing every {rule.interval_s / 60:g} min instead: goodput {rule.goodput:.1%}, "
            f"+{result.rule_of_thumb_extra_days:.1f} days{extra}"
        )
    echo("")
    echo(
        f"{'option':18s} {'$/GPU-h':>8s} {'days':>8s} {'goodput':>8s} {'total $':>16s} {'cash $':>16s} "
        f"{'amortised $':>16s} {'$/1B tokens':>12s}"
    )
    for row in result.options:
        if not row.available:
            echo(f"{row.option.value:18s} n/a: {row.reason}")
            continue
        echo(
            f"{row.option.value:18s} {row.usd_per_gpu_hour:8.2f} {row.days:8.1f} {row.goodput:8.1%} "
            f"{_usd(row.total_usd):>16s} {_usd(row.cash_usd):>16s} {_usd(row.amortised_usd):>16s} "
            f"{_usd(row.usd_per_1b_tokens):>12s}"
        )
        for note in row.notes:
            echo(f"{'':18s}   {note}")
    if result.other_clouds:
        echo("\nother clouds (dated prices with their sources; low-confidence ones are estimates):")
        for row in result.other_clouds:
            name = f"{row.provider} {row.instance} {row.option.value}"
            if not row.available:
                echo(f"  {name}: n/a: {row.reason}")
                continue
            echo(
                f"  {name}: ${row.usd_per_gpu_hour:.2f}/GPU-h, {row.days:.1f} days, total ${_usd(row.total_usd)}, "
                f"cash ${_usd(row.cash_usd)}, amortised ${_usd(row.amortised_usd)}"
            )
            echo(f"      {row.notes[0]}")
    echo("")
    for ranking in result.rankings:
        best = ranking.winner or ("tie: " + " = ".join(ranking.tied) if ranking.tied else "—")
        echo(f"cheapest, {ranking.basis} basis: {best} ({ranking.description})")
    fastest = result.fastest or ("tie: " + " = ".join(result.fastest_tied) if result.fastest_tied else "—")
    echo(f"cheapest: {result.cheapest or '—'} ({result.cheapest_basis}); fastest: {fastest}")
    for note in result.notes:
        echo(f"note: {note}")
    serving = result.serving
    if serving is not None:
        fit = next((f for f in serving.instances if f.instance == serving.cheapest_fitting), None)
        needed = serving.needed_bytes / 2**30
        where = (
            "no catalog instance holds it"
            if fit is None
            else f"{fit.instance} ({fit.gpus_needed} of {fit.gpus_per_instance} GPUs), ${fit.usd_per_hour:,.2f}/h"
        )
        echo(
            f"serving ({serving.context_tokens} tokens × {serving.batch}): {needed:,.0f} GiB weights + KV cache; "
            f"cheapest that holds it: {where}"
        )
    low = [a for a in result.assumptions if a.confidence == "low"]
    if low:
        echo("low-confidence figures used: " + ", ".join(a.name for a in low))


def print_monthly_cost(result) -> None:
    echo = typer.echo
    sb = result.self_build
    own = f" vs {sb.nodes} × {sb.node} (self-build)" if sb else ""
    echo(f"{result.gpus} GPUs: {result.nodes} × {result.instance}{own}, {result.hours_per_month:g} h a month")
    echo(
        f"{'option':18s} {'$/month':>12s} {'upfront $':>12s} {'break-even':>11s} {'self-build wins above':>22s}"
    )
    for row in result.rows:
        if not row.available:
            echo(f"{row.option.value:18s} n/a" + (f": {row.notes[0]}" if row.notes else ""))
            continue
        even = "—" if row.break_even_month is None else f"month {row.break_even_month:.1f}"
        wins = (
            "—"
            if row.self_build_wins_at_utilisation is None
            else f"{row.self_build_wins_at_utilisation:.0%} use"
        )
        echo(
            f"{row.option.value:18s} {_usd(row.usd_per_month):>12s} {_usd(row.upfront_usd or None):>12s} "
            f"{even:>11s} {wins:>22s}"
        )
        for note in row.notes:
            echo(f"{'':18s}   {note}")
    if sb is not None:
        echo(
            f"self-build capex ${sb.capex_usd:,.0f} (servers ${sb.servers_usd:,.0f}, fabric ${sb.fabric_usd:,.0f}: "
            f"{sb.fabric.switches} switches, {sb.fabric.cables} cables, {sb.fabric.transceivers} transceivers; "
            f"storage ${sb.storage_usd:,.0f}, installation ${sb.installation_usd:,.0f}); opex ${sb.opex_usd_per_month:,.0f}"
            f"/month (power ${sb.power_usd_per_month:,.0f}, colocation ${sb.colocation_usd_per_month:,.0f}, staff "
            f"${sb.staff_usd_per_month:,.0f}, maintenance ${sb.maintenance_usd_per_month:,.0f})"
        )
    low = [a for a in result.assumptions if a.confidence == "low"]
    if low:
        echo("low-confidence figures used: " + ", ".join(a.name for a in low))


@cost_app.command("cost")
@with_options(request_options(CostRequest, ESTIMATE_FIELDS, COST_FLAGS))
def cost_command(
    ctx: typer.Context,
    monthly: Annotated[
        bool, typer.Option("--monthly", help="the monthly bill of --nodes × --instance/--node")
    ] = False,
    instance: Annotated[
        str | None, typer.Option(help="--monthly: AWS instance slug, e.g. p5.48xlarge")
    ] = None,
    nodes: Annotated[int | None, typer.Option(help="--monthly: how many of the instance or node")] = None,
    months: Annotated[int, typer.Option(help="--monthly: length of the cumulative-cost series")] = 36,
    region: Annotated[
        str | None, typer.Option(help="region whose prices to use, e.g. us-west-2 (default: the instance's)")
    ] = None,
    option: Annotated[
        list[CostOption] | None,
        typer.Option("--option", help="pricing option to show (repeat; default: all)"),
    ] = None,
    assignments: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a figure: KEY=VALUE, e.g. self_build.pue=1.2 (repeat)"),
    ] = None,
    overrides_file: Annotated[Path | None, typer.Option("--overrides", help="JSON file of overrides")] = None,
    plan_file: Annotated[
        Path | None, typer.Option("--plan", help="a capplan plan file instead of the options")
    ] = None,
    calibration: CalibrationOpt = True,
    calibration_run: CalibrationRunOpt = None,
    calibration_db: CalibrationDbOpt = False,
    as_json: JsonOpt = False,
    **fields: Any,
) -> None:
    """Days and dollars to train --tokens with a plan for every AWS option and self-build, after failures and
    checkpoints; or, with --monthly, the monthly bill of a cluster (on-demand, commitments, spot, self-build)."""
    from app.schemas import MonthlyCostRequest
    from app.services.cost import run_cost, run_monthly_cost

    tokens, node = fields["tokens"], fields["node"]
    overrides = cost_overrides(assignments or [], overrides_file)
    if region is not None:
        overrides = overrides.model_copy(update={"region": region.strip()})
    options = list(option) if option else None
    if monthly:
        if tokens is not None or plan_file is not None:
            raise UsageError("--monthly prices a cluster by the month: drop --tokens/--plan")
        if nodes is None or (instance is None and node is None):
            raise UsageError("--monthly needs --nodes and --instance <slug> or --node <slug>")
        try:
            monthly_request = MonthlyCostRequest(
                instance=instance, node=node, nodes=nodes, months=months, options=options, overrides=overrides
            )
        except ValidationError as exc:
            raise _cost_validation_error(exc) from None
        monthly_result = run_monthly_cost(load_catalog(), monthly_request)
        if as_json:
            typer.echo(monthly_result.model_dump_json(indent=2))
        else:
            print_monthly_cost(monthly_result)
        return
    if tokens is None:
        raise UsageError("give --tokens N (with the estimate options or --plan), or --monthly")
    if plan_file is not None:
        given = given_on_command_line(ctx, PLAN_FIELDS)
        if given:
            raise UsageError(
                f"--plan already holds the model, hardware and plan; drop --{given[0].replace('_', '-')}"
            )
        values = plan_file_to_request(plan_file).model_dump(exclude={"tokens"})
        if given_on_command_line(ctx, ("calibration",)):
            values["calibrated"] = calibration
    else:
        missing = [f"--{n.replace('_', '-')}" for n in REQUIRED if fields[n] is None]
        if missing:
            raise UsageError(f"give --plan plan.json, or the estimate options (missing {', '.join(missing)})")
        names = tuple(n for n in PLAN_FIELDS if n != "model")
        values = request_values(CostRequest, names, COST_FLAGS, fields)  # comma-separated lists parsed
        values.update(calibrated=calibration, **model_argument(fields["model"] or ""))
    try:
        request = CostRequest(**values, tokens=tokens, options=options, overrides=overrides)
    except ValidationError as exc:
        raise _cost_validation_error(exc) from None
    result = run_cost(load_catalog(request.calibrated, calibration_run, calibration_db), request)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_training_cost(result)
