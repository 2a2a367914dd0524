"""`capplan validate` (predicted vs published throughput, cross-validated with --cv) and
`capplan calibrate-published` (fit the shared constants on the published runs, write data/fitted.toml)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import JsonOpt, fail, load_catalog, settings

validate_app = typer.Typer(add_completion=False)
calibrate_app = typer.Typer(add_completion=False)


@validate_app.command()
def validate(
    cv: Annotated[
        bool,
        typer.Option(
            "--cv", help="cross-validate: refit without each source family and score it (the accuracy figure)"
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Predicted vs published throughput for every published run: out of sample with --cv, else the fit error."""
    catalog = load_catalog()
    if cv:
        from app.domain.estimator.fitting import cross_validate

        report = cross_validate(catalog)
        if as_json:
            typer.echo(report.model_dump_json(indent=2))
            return
        _print_cv(report)
        return
    from app.domain.estimator.validation import validate as run_validation

    report = run_validation(catalog)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    typer.echo(
        f"{'run':44s} {'GPUs':>5s} {'metric':28s} {'published':>10s} {'predicted':>10s} {'fit err':>8s}"
    )
    for row in report.rows:
        if row.error is None:
            typer.echo(f"{row.run:44s} {row.gpus:5d} skipped: {row.skipped}")
            continue
        typer.echo(
            f"{row.run:44s} {row.gpus:5d} {row.metric:28s} {row.published:10.4g} {row.predicted:10.4g} {row.error:+8.1%}"
        )
    if report.compared:
        typer.echo(
            f"\n{report.compared} runs, FIT error (in sample, not accuracy): median |error| "
            f"{report.median_abs_error:.1%}, max {report.max_abs_error:.1%} ({report.worst_run})"
        )
    if report.memory_compared:
        typer.echo(
            f"memory: {report.memory_compared} runs publish a peak per GPU; median |error| "
            f"{report.memory_median_abs_error:.1%}, max {report.memory_max_abs_error:.1%} (not fitted: out of sample)"
        )
    fit = catalog.fit
    if fit is not None and fit.cv_median_abs_error is not None:
        typer.echo(
            f"accuracy (leave-one-source-family-out, fit of {fit.date}): median |error| "
            f"{fit.cv_median_abs_error:.1%}, max {fit.cv_max_abs_error:.1%}"
            + (
                f"; {fit.cv_distinct_median_abs_error:.1%} over its {fit.configurations} distinct configurations"
                if fit.cv_distinct_median_abs_error is not None
                else ""
            )
            + " — `capplan validate --cv` recomputes it"
        )


def _print_cv(report) -> None:  # noqa: ANN001 - app.domain.fitting.CVReport, imported lazily
    typer.echo(
        f"{'run':44s} {'family':22s} {'stack':9s} {'gpu':10s} {'GPUs':>5s} {'published':>10s} "
        f"{'predicted':>10s} {'CV err':>7s} {'fit err':>7s}"
    )
    for r in report.rows:
        typer.echo(
            f"{r.run:44s} {r.family:22s} {r.stack:9s} {r.accelerator:10s} {r.gpus:5d} {r.published:10.4g} "
            f"{r.predicted_cv:10.4g} {r.cv_error:+7.1%} {r.fit_error:+7.1%}"
        )
    typer.echo("")
    for title, groups in (("stack", report.by_stack), ("accelerator", report.by_accelerator),
                          ("precision", report.by_precision), ("source family", report.by_family)):  # fmt: skip
        typer.echo(f"by {title}: " + "; ".join(
            f"{g.group} {g.cv_median_abs_error:.1%} ({g.runs})" for g in groups))  # fmt: skip
    typer.echo(
        f"\n{len(report.rows)} runs, {report.families} source families. ACCURACY (out of sample, each family "
        f"left out of the fit): median |error| {report.cv_median_abs_error:.1%}, max {report.cv_max_abs_error:.1%} "
        f"({report.cv_worst_run}); over the {report.configurations} distinct configurations (a configuration "
        f"measured more than once counted once, at its median) {report.cv_median_abs_error_distinct:.1%}. "
        f"Fit error (in sample): median {report.fit_median_abs_error:.1%}, max {report.fit_max_abs_error:.1%}."
    )


@calibrate_app.command("calibrate-published")
def calibrate_published(
    write: Annotated[
        bool, typer.Option("--write/--dry-run", help="write data/fitted.toml (default) or only print the fit")
    ] = True,
) -> None:
    """Fit the estimator's shared constants on the published runs, cross-validate, write data/fitted.toml."""
    import datetime

    from app.domain.estimator.fitted import FITTED_FILE, PARAMETERS, fit_record_toml
    from app.domain.estimator.fitting import cross_validate, fit, fit_record, scorable_runs

    catalog = load_catalog()
    runs = scorable_runs(catalog)
    if not runs:
        fail("no published run can be scored; nothing to fit")
    result = fit(catalog, runs)
    report = cross_validate(catalog, result)
    record = fit_record(result, report, datetime.date.today().isoformat())
    priors = catalog.efficiency_priors or catalog.efficiency
    typer.echo(f"{'constant':24s} {'prior':>7s} {'fitted':>7s} {'runs':>5s}")
    for p in PARAMETERS:
        informed = record.runs_per_parameter.get(p.name, 0)
        label = f"{record.values[p.name]:7.3f}" if informed else "assumed"
        typer.echo(f"{p.name:24s} {p.prior(priors):7.3f} {label:>7s} {informed:5d}")
    _print_cv(report)
    if write:
        path = settings().data_dir / FITTED_FILE
        path.write_text(fit_record_toml(record), encoding="utf-8")
        typer.echo(f"wrote {path}")
