"""`capplan size`: which GPU, how many, which plan and which way to pay — every accelerator × whole-node size ×
plan × pricing option, with failures and checkpoints counted."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from app.cli.common import JsonOpt, enum_list, fail_validation, load_catalog, settings, writable_output
from app.domain.estimator.plan import folded_text

size_app = typer.Typer(add_completion=False)


class ProgressLine:
    """Where the sizing stands, on one line of stderr rewritten in place (at most ten times a second, and at each
    new phase), ended with a summary line. Only stderr: stdout keeps the table or the --json object alone."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s, self.last, self.width, self.phase = interval_s, 0.0, 0, ""

    def __call__(self, p) -> None:  # noqa: ANN001 - app.services.size.SizingProgress
        now = time.monotonic()
        if p.phase == self.phase and now - self.last < self.interval_s:  # each phase's first report is shown
            return
        self.last, self.phase = now, p.phase
        plans = f"{_count(p.valid_plans)} valid plans, {p.evaluated_plans:,} evaluated"
        if p.phase == "bounds":
            line = f"sizing: bounding node {p.done + 1}/{p.total} ({p.label})"
        elif p.phase == "search":
            line = (
                f"sizing: (node, size) pair {p.done + 1}/{p.total}, {p.label} · {plans} · {p.elapsed_s:.1f} s"
            )
        else:
            line = f"sizing: {p.total} (node, size) pairs settled · {plans} · {p.elapsed_s:.1f} s"
        typer.echo("\r" + line.ljust(self.width), err=True, nl=p.phase == "done")
        self.width = len(line)


def _count(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n:,}"


def print_size(result) -> None:
    echo = typer.echo
    s = result.searched
    echo(
        f"searched {len(s['accelerators'])} accelerators on {s['nodes']} nodes, {s['offers']} offers: "
        f"{s['valid_plans']:,} valid plans ({s['grid_points']:,} grid points) in {s['elapsed_s']:.1f} s "
        f"({s['plans_per_s']:,.0f} plans/s; {s['evaluated_plans']:,} evaluated, the rest bounded); "
        f"{s['feasible_points']:,} of {s['priced_points']:,} priced (accelerator, size, option) points meet the "
        "constraints"
    )
    for note in result.notes:
        echo(f"note: {note}")
    if result.message:
        echo(result.message)
    if result.ranked:
        echo(f"ranked by {result.basis}; days count failures and checkpoints (goodput)")
        echo("  ".join(("#", "accelerator", "node/instance", "option", "GPUs", "tp", "pp", "vpp", "dp", "cp", "ep",
                        "sharding", "offload", "mb", "gb", "recompute", "days", "$ amortised", "$ cash", "$/M tok",
                        "MFU", "headroom")))  # fmt: skip
        for r in result.ranked:
            p = r.plan
            echo("  ".join(str(v) for v in (
                r.rank, r.accelerator, r.offer, r.option, r.gpus, p["tp"], p["pp"], p["vpp"], p["dp"], p["cp"],
                f"{p['ep']}{folded_text(p['tp'], p.get('expert_tp'))}", p["sharding"], p["offload"], p["micro_batch"], p["global_batch"], p["recompute"],
                f"{r.days:,.1f}", f"{r.usd_amortised:,.0f}", f"{r.usd_cash:,.0f}", f"{r.usd_per_million_tokens:.2f}",
                f"{r.mfu:.1%}", f"{r.headroom_gib:.1f} GiB",
            )))  # fmt: skip
    if result.pareto:
        echo(f"\nPareto front, days vs {result.ranked_on} $ ({len(result.pareto)} points, whole catalog):")
        for r in result.pareto:
            usd = r.usd_cash if result.ranked_on == "cash" else r.usd_amortised
            echo(f"  {r.days:9,.2f} days  ${usd:>16,.0f}  {r.gpus:>6,} × {r.accelerator} "
                 f"({r.offer}, {r.option})")  # fmt: skip
    if result.lost:
        echo("lost: " + "; ".join(f"{reason}: {n:,}" for reason, n in result.lost.items()))


@size_app.command("size")
def size_command(
    model: Annotated[str, typer.Option(help="model preset slug, e.g. llama3.1-70b")],
    tokens: Annotated[float, typer.Option(help="tokens to train, e.g. 15e12")],
    deadline_days: Annotated[
        float | None, typer.Option(help="train the tokens within this many days")
    ] = None,
    budget_usd: Annotated[float | None, typer.Option(help="spend at most this much ($ on --basis)")] = None,
    accelerators: Annotated[
        str | None, typer.Option(help="e.g. h100-sxm,b200 (default: whole catalog)")
    ] = None,
    options: Annotated[
        str | None,
        typer.Option(help="e.g. on-demand,commit-1yr,spot,self-build (default: all but off-peak/mix)"),
    ] = None,
    gpus_range: Annotated[str, typer.Option(help="'A:B' GPUs: every whole-node size in it")] = "8:65536",
    seq_len: Annotated[int, typer.Option(help="tokens per sequence")] = 8192,
    global_batch_tokens: Annotated[int, typer.Option(help="tokens per step")] = 16_777_216,
    top: Annotated[int, typer.Option(help="how many ranked rows")] = 20,
    front_tolerance_pct: Annotated[
        float, typer.Option(help="the Pareto front is exact to this many % of days and $ (0: exact)")
    ] = 1.0,
    basis: Annotated[
        str, typer.Option(help="rank, budget and front on amortised $ (the run's share) or cash $ (paid out)")
    ] = "amortised",
    region: Annotated[str | None, typer.Option(help="AWS region whose prices to use, e.g. us-west-2")] = None,
    prices_as_of: Annotated[
        str | None, typer.Option(help="prices in force that day, YYYY-MM-DD (default: current)")
    ] = None,
    use_after_run_years: Annotated[
        float | None, typer.Option(help="self-build: years the cluster keeps working after this run")
    ] = None,
    runs: Annotated[
        int | None,
        typer.Option(help="self-build: runs of this length it serves in all (or --use-after-run-years)"),
    ] = None,
    calibration: Annotated[bool, typer.Option("--calibration/--no-calibration")] = True,
    output: Annotated[
        Path | None, typer.Option(help="write the winner's plan document (capplan.plan/v1) here")
    ] = None,
    as_json: JsonOpt = False,
    show_progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress", help="progress on stderr (default: when stderr is a terminal)"
        ),
    ] = None,
) -> None:
    """Size a cluster: every accelerator × whole-node cluster size × plan × pricing option, with failures
    and checkpoints counted; the cheapest that meets the deadline and budget first, and the Pareto front."""
    from pydantic import ValidationError

    from app.domain.cost.inputs import CostOption
    from app.services.size import SizeRequest, run_size

    try:
        request = SizeRequest(
            model=model, tokens=tokens, deadline_days=deadline_days, budget_usd=budget_usd,
            accelerators=[a.strip() for a in accelerators.split(",") if a.strip()] if accelerators else None,
            options=enum_list(options, CostOption, "--options"), gpus_range=gpus_range, seq_len=seq_len,
            global_batch_tokens=global_batch_tokens, top_k=top, front_tolerance_pct=front_tolerance_pct,
            calibrated=calibration, basis=basis,
            region=region, prices_as_of=prices_as_of, use_after_run_years=use_after_run_years, runs=runs,
        )  # fmt: skip
    except ValidationError as exc:
        fail_validation(exc)
    if output is not None:
        writable_output(output)

    show = sys.stderr.isatty() if show_progress is None else show_progress
    result = run_size(load_catalog(calibration), request, progress=ProgressLine() if show else None,
                      max_plans=settings().search_max_plans)  # fmt: skip
    if output is not None and result.plan_document is not None:
        output.write_text(json.dumps(result.plan_document, indent=2, ensure_ascii=False) + "\n")
        typer.echo(f"wrote the winner's plan document to {output}", err=True)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        print_size(result)
    if not result.ranked:
        raise typer.Exit(code=1)
