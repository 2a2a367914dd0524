"""`capplan plan`: search every parallelism plan for a model on a cluster (or a range of sizes), best first;
``--output`` writes the winner (or ``--pick N``) as a capplan.plan/v1 document for `capplan export --plan`.

This is the command whose start-up is measured (`make bench`): it imports the search request, the search
service and the domain it runs, nothing of the database or the web app.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli.common import JsonOpt, UsageError, fail_validation, load_catalog, model_argument
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
from app.schemas import PlanSearchRequest

if TYPE_CHECKING:
    from app.domain.catalog import Catalog

plan_app = typer.Typer(add_completion=False)

NOT_SEARCH_OPTIONS = ("flash_attention", "fused_kernels", "fused_loss", "offloads", "max_tp")
"""Search fields the command line leaves at their defaults (the API and the planner set them)."""
SEARCH_FIELDS = tuple(
    name
    for name in PlanSearchRequest.model_fields
    if name not in NOT_OPTIONS and name not in NOT_SEARCH_OPTIONS
)
SEARCH_FLAGS = {
    **PLAN_FLAGS,
    "model": Flag(required=True, help="preset slug or path to a config.json"),
    "gpus": Flag(help="a fixed GPU count"),
    "gpu": Flag(help="accelerator slug, e.g. h100-sxm"),
    "node": Flag(help="node or instance slug"),
    "fabric": Flag(help="scale-out fabric slug"),
    "gpus_range": Flag(help="'A:B' GPUs: every whole-node size in between"),
    "objective": Flag(text=True),
    "top_k": Flag(param="top", help="how many plans to list"),
    "headroom_gib": Flag(help="memory to keep free per GPU, GiB"),
    "headroom_percent": Flag(help="memory to keep free per GPU, %"),
    "micro_batches": Flag(help="micro-batch sizes, e.g. 1,2,4,8"),
    "recomputes": Flag(help="recompute modes to search"),
    "shardings": Flag(help="sharding strategies to search"),
    "vpps": Flag(help="virtual pipeline chunks, e.g. 1,2,4"),
    "cps": Flag(help="context-parallel degrees, e.g. 1,2"),
    "max_pp": Flag(help="largest pipeline-parallel degree"),
    "deadline_days": Flag(help="train the tokens within this many days"),
    "budget_usd": Flag(help="spend at most this much"),
    "price_option": Flag(text=True),
}


@plan_app.command("plan")
@with_options(request_options(PlanSearchRequest, SEARCH_FIELDS, SEARCH_FLAGS))
def plan_command(
    calibration: CalibrationOpt = True,
    calibration_run: CalibrationRunOpt = None,
    calibration_db: CalibrationDbOpt = False,
    as_json: JsonOpt = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="write the winner (or --pick N) as a capplan.plan/v1 document"),
    ] = None,
    pick: Annotated[int, typer.Option(help="with --output: which listed plan to write (1 = the best)")] = 1,
    **fields: Any,
) -> None:
    """Search every parallelism plan for a model on a cluster (or a range of cluster sizes); best first."""
    from pydantic import ValidationError

    from app.services.search import run_search

    values = request_values(PlanSearchRequest, SEARCH_FIELDS, SEARCH_FLAGS, fields)
    values.update(calibrated=calibration, **model_argument(values.pop("model")))
    try:
        request = PlanSearchRequest(**values)
    except ValidationError as exc:
        fail_validation(exc)
    catalog = load_catalog(calibration, calibration_run, calibration_db)
    result = run_search(catalog, request)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_search(result)
    if output is not None:
        write_pick(catalog, request, result, pick, output, quiet=as_json)


def print_search(result) -> None:
    from app.domain.estimator.plan import folded_text

    echo = typer.echo
    echo(
        f"evaluated {result.evaluated_plans:,} valid plans ({result.considered_plans:,} grid points) "
        f"in {result.elapsed_s:.2f} s; {result.feasible_plans:,} meet the constraints"
    )
    for note in result.notes:
        echo(f"note: {note}")
    if not result.plans:
        echo(result.message or "no plan found")
    else:
        cols = (
            "#",
            "GPUs",
            "tp",
            "pp",
            "vpp",
            "dp",
            "cp",
            "ep",
            "sharding",
            "offload",
            "mb",
            "gb",
            "recompute",
            "tokens/s",
            "MFU",
            "headroom",
            "$/M tok",
            "days",
        )
        echo("  ".join(cols))
        for i, c in enumerate(result.plans, 1):
            p = c.plan
            echo("  ".join(str(v) for v in (
                i, c.gpus, p.tp, p.pp, p.vpp, p.dp, p.cp, f"{p.ep}{folded_text(p.tp, p.expert_tp)}", p.sharding.value, p.offload.value, p.micro_batch,
                p.global_batch, p.recompute.value, f"{c.tokens_per_s:,.0f}", f"{c.mfu:.1%}",
                f"{c.margin_bytes / 2**30:.1f} GiB",
                f"{c.usd_per_million_tokens:.2f}" if c.usd_per_million_tokens else "—",
                f"{c.time_to_train_days:.1f}" if c.time_to_train_days else "—",
            )))  # fmt: skip
        echo(f"\nbest: {result.explanation}")
        if result.pareto:
            echo(f"Pareto front (time vs cost vs headroom): {len(result.pareto)} plans")
    if result.rejected:
        echo("rejected: " + "; ".join(f"{reason}: {n:,}" for reason, n in list(result.rejected.items())[:8]))


def write_pick(catalog: Catalog, request, result, pick: int, output: Path, *, quiet: bool) -> None:  # noqa: ANN001
    """Write the search's ``pick``-th plan as a plan document (`capplan export --plan` reads it)."""
    from app.domain.export import plan_document_json
    from app.services.documents import plan_document_from_request
    from app.services.errors import InputError
    from app.services.search import search_pick_request

    try:
        doc = plan_document_from_request(catalog, search_pick_request(request, result, pick))
    except InputError as exc:
        first = exc.errors[0]
        raise UsageError(f"--pick: {first['msg']}") from None
    if output.is_dir() or not output.parent.is_dir():
        raise UsageError(f"--output: {output} is a directory or its folder does not exist")
    output.write_text(plan_document_json(doc), encoding="utf-8")
    typer.echo(f"wrote plan #{pick} to {output}", err=quiet)
