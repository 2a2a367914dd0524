"""Fit the estimator's shared constants on published runs, and measure its accuracy out of sample.

**Fit** (:func:`fit`): the constants of :data:`app.domain.fitted.PARAMETERS` are chosen to minimise

    Σ_runs w_run · ρ(log(predicted / published) / 0.10)  +  Σ_params ((x − x_prior) / σ_prior)²

where x is each constant in an unbounded (logit) coordinate between its bounds, the prior is the value in
``data/efficiency.toml``, ρ is a soft-L1 loss on log-error / 0.10 (quadratic below 10 % error, linear above, so one mistranscribed
run cannot drag a constant), and w_run = 1/√(runs in the run's source family), so a long benchmark table weighs
no more than a few papers. Minimised by Levenberg–Marquardt with forward-difference derivatives; deterministic.
A constant that no training run depends on keeps its prior (reported as "assumed").

**Cross-validation** (:func:`cross_validate`): for each source family, refit every constant without that family's
runs and score the family with that fit. The median |error| over all runs is the accuracy capplan states; the
in-sample error of the full fit is the "fit error" and is never called accuracy.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from app.domain.catalog.store import Catalog
from app.domain.estimator.assemble import model_q, plan_q, step_seconds
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.efficiency import EfficiencyCatalog
from app.domain.estimator.evaluate import ModelQ, PlanQ
from app.domain.estimator.fitted import PARAMETERS, FitRecord, Parameter, apply_values
from app.domain.estimator.pipeline import RankLayers, rank_layers
from app.domain.estimator.plan import Plan
from app.domain.estimator.published import PublishedRun, architecture_for_run
from app.domain.estimator.validation import published_iteration_s, run_cluster, run_plan, validate_run
from app.domain.model.architecture import Architecture
from app.domain.model.counts import parameter_counts
from app.domain.provenance import Frozen

NOISE = 0.10  # run-to-run scatter of published throughput the model cannot explain (log units); loss scale
MAX_ITERATIONS = 30


@dataclass(frozen=True, slots=True)
class FitResult:
    values: dict[str, float]
    runs: tuple[str, ...]
    families: tuple[str, ...]
    runs_per_parameter: dict[str, int]
    iterations: int
    objective: float


def scorable_runs(catalog: Catalog) -> tuple[PublishedRun, ...]:
    """Runs the estimator can score: included in validation, on a catalogued GPU, with a comparable figure."""
    runs = []
    for run in catalog.published_runs:
        if not run.included_in_validation or run.accelerator is None:
            continue
        if validate_run(run, catalog).error is not None:
            runs.append(run)
    return tuple(runs)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What scoring one run needs that no fitted constant changes: its model, plan, ranks and cluster, and the
    iteration time its published figure implies (``validate_run`` rebuilds all of it on every call)."""

    run: PublishedRun
    arch: Architecture
    plan: Plan
    mq: ModelQ
    pq: PlanQ
    ranks: tuple[RankLayers, ...]
    cluster: Cluster
    metric: str
    published: float
    published_step_s: float


def configuration_key(arch: Architecture, cluster: Cluster, plan: Plan) -> str:
    """What makes two published runs the same measurement: the model, the cluster as validation builds it (GPU,
    node, count, power cap, fabric) and the whole plan. Runs that share it — MLPerf submitters on one reference
    system, a benchmark table republished by a later one — are one configuration measured more than once. A short
    digest, stable across runs of the code."""
    text = "\n".join(x.model_dump_json() for x in (arch, cluster, plan))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def distinct_median_abs(errors: list[float], keys: list[str]) -> tuple[int, float]:
    """(configurations, median |error| over them): the errors of runs that share a configuration key count once,
    at their median, so a configuration measured seven times weighs as much as one measured once. Example: errors
    +0.01, +0.03, −0.02 under keys a, a, b → configurations a (median +0.02) and b (−0.02): (2, 0.02)."""
    by_key: dict[str, list[float]] = defaultdict(list)
    for error, key in zip(errors, keys, strict=True):
        by_key[key].append(error)
    return len(by_key), statistics.median(abs(statistics.median(v)) for v in by_key.values())


def _prepare(catalog: Catalog, runs: tuple[PublishedRun, ...]) -> tuple[_Prepared, ...]:
    out = []
    for run in runs:
        arch = architecture_for_run(run, catalog.architectures)
        plan, _ = run_plan(run)
        cluster = run_cluster(run, catalog)
        metric, published, t_pub = published_iteration_s(run, cluster.accelerator.bf16_dense_tflops)
        ranks = tuple(rank_layers(arch, plan.pp, plan.vpp, plan.mtp_layers, plan.chunk_counts))
        mq, pq = model_q(arch, parameter_counts(arch)), plan_q(arch, plan)
        out.append(_Prepared(run, arch, plan, mq, pq, ranks, cluster, metric, published, t_pub))
    return tuple(out)


def _step_s(p: _Prepared, efficiency: EfficiencyCatalog) -> float:
    cluster = p.cluster.model_copy(
        update={
            "efficiency": efficiency.for_accelerator(p.cluster.accelerator.slug),
            "stacks": efficiency.stacks,
            "scale": efficiency.scale,
            "runtime": efficiency.runtime,
        }
    )
    return step_seconds(p.arch, cluster, p.plan, p.mq, p.pq, p.ranks)


def _log_errors(prepared: tuple[_Prepared, ...], efficiency: EfficiencyCatalog) -> np.ndarray:
    """log(predicted / published) per run = log(published step time / predicted step time)."""
    return np.array([math.log(p.published_step_s / _step_s(p, efficiency)) for p in prepared])


def _priors(catalog: Catalog):
    return catalog.efficiency_priors or catalog.efficiency


def fit(
    catalog: Catalog,
    runs: tuple[PublishedRun, ...],
    parameters: tuple[Parameter, ...] = PARAMETERS,
    start: dict[str, float] | None = None,
) -> FitResult:
    """Fit ``parameters`` on ``runs`` (see the module docstring); the priors come from ``catalog``. ``start``:
    where the search begins (e.g. the full fit, for the cross-validation folds); the priors stay the priors."""
    priors = _priors(catalog)
    x0 = np.array([p.to_free(p.prior(priors)) for p in parameters])
    sigma = np.array([p.prior_sigma for p in parameters])
    family_sizes = Counter(r.family for r in runs)
    weights = np.array([1 / math.sqrt(family_sizes[r.family]) for r in runs])

    def values_of(x: np.ndarray) -> dict[str, float]:
        return {p.name: p.from_free(float(v)) for p, v in zip(parameters, x, strict=True)}

    prepared = _prepare(catalog, runs)

    def errors(x: np.ndarray, subset: np.ndarray | None = None) -> np.ndarray:
        efficiency = apply_values(priors, values_of(x))
        if subset is None:
            return _log_errors(prepared, efficiency)
        out = np.zeros(len(runs))
        out[subset] = _log_errors(tuple(prepared[i] for i in np.flatnonzero(subset)), efficiency)
        return out

    def residuals(e: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(stacked residual vector, IRLS weights) for the soft-L1 data term and the Gaussian prior term."""
        z = np.nan_to_num(e, nan=1.0) / NOISE
        robust = 1 / np.sqrt(np.sqrt(1 + z**2))
        return np.concatenate([np.sqrt(weights) * robust * z, (x - x0) / sigma]), robust

    def objective(e: np.ndarray, x: np.ndarray) -> float:
        z = np.nan_to_num(e, nan=1.0) / NOISE
        data = 2 * (np.sqrt(1 + z**2) - 1)
        return float(np.sum(weights * data) + np.sum(((x - x0) / sigma) ** 2))

    x = (
        x0.copy()
        if start is None
        else np.array([p.to_free(start.get(p.name, p.prior(priors))) for p in parameters])
    )
    e = errors(x)
    f = objective(e, x)
    step = 1e-3
    depends: list[np.ndarray | None] = [None] * len(parameters)
    lam = 1e-2
    iterations = 0
    f_prev = f
    while iterations < MAX_ITERATIONS:
        iterations += 1
        r, robust = residuals(e, x)
        jac = np.zeros((len(r), len(parameters)))
        for j in range(len(parameters)):
            xj = x.copy()
            xj[j] += step
            ej = errors(xj, depends[j])
            if depends[j] is None:  # the first pass learns which runs the constant moves
                depends[j] = np.abs(ej - e) > 1e-12
            ej = np.where(depends[j], ej, e)
            diff = np.nan_to_num(ej, nan=1.0) - np.nan_to_num(e, nan=1.0)
            jac[: len(runs), j] = np.sqrt(weights) * robust * diff / NOISE / step
            jac[len(runs) + j, j] = 1 / sigma[j]
        g = jac.T @ r
        h = jac.T @ jac
        improved = False
        for _ in range(8):
            delta = np.linalg.solve(h + lam * (np.diag(np.diag(h)) + np.eye(len(parameters))), -g)
            x_new = x + delta
            e_new = errors(x_new)
            f_new = objective(e_new, x_new)
            if f_new < f:
                f_prev = f
                x, e, f = x_new, e_new, f_new
                lam = max(lam / 3, 1e-6)
                improved = True
                break
            lam *= 4
        if not improved or (f_prev - f) < 1e-7 * max(1.0, f):
            break
    runs_per = {
        p.name: int(np.sum(depends[j])) if depends[j] is not None else 0 for j, p in enumerate(parameters)
    }
    return FitResult(
        values=values_of(x), runs=tuple(r.slug for r in runs), families=tuple(sorted(family_sizes)),
        runs_per_parameter=runs_per, iterations=iterations, objective=f,
    )  # fmt: skip


class CVRow(Frozen):
    """One run scored in and out of sample. Errors are predicted/published − 1 of the run's own metric."""

    run: str
    family: str
    stack: str
    framework: str
    accelerator: str
    gpus: int
    moe: bool
    precision: str  # the run's GEMM precision: bf16, fp16, fp8 or nvfp4
    metric: str
    published: float
    predicted_fit: float
    predicted_cv: float
    fit_error: float
    cv_error: float
    configuration: str = Field(
        default="", description="runs with the same key are one configuration measured more than once"
    )


class GroupError(Frozen):
    group: str
    runs: int
    cv_median_abs_error: float
    fit_median_abs_error: float


class CVReport(Frozen):
    rows: tuple[CVRow, ...]
    families: int
    cv_median_abs_error: float
    cv_max_abs_error: float
    cv_worst_run: str
    fit_median_abs_error: float
    fit_max_abs_error: float
    by_stack: tuple[GroupError, ...]
    by_accelerator: tuple[GroupError, ...]
    by_family: tuple[GroupError, ...]
    values: dict[str, float]
    by_precision: tuple[GroupError, ...] = ()
    configurations: int = 0
    cv_median_abs_error_distinct: float | None = Field(
        default=None,
        description="the out-of-sample median over distinct configurations (distinct_median_abs)",
    )


def _groups(rows: list[CVRow], key) -> tuple[GroupError, ...]:
    buckets: dict[str, list[CVRow]] = defaultdict(list)
    for row in rows:
        buckets[key(row)].append(row)
    return tuple(
        GroupError(
            group=name,
            runs=len(rs),
            cv_median_abs_error=statistics.median(abs(r.cv_error) for r in rs),
            fit_median_abs_error=statistics.median(abs(r.fit_error) for r in rs),
        )  # fmt: skip
        for name, rs in sorted(buckets.items())
    )


def cross_validate(catalog: Catalog, full: FitResult | None = None) -> CVReport:
    """Leave-one-source-family-out: refit without each family, score that family; and the full fit in sample."""
    runs = scorable_runs(catalog)
    priors = _priors(catalog)
    prepared = {p.run.slug: p for p in _prepare(catalog, runs)}
    full = full or fit(catalog, runs)
    full_eff = apply_values(priors, full.values)
    in_sample = {r.slug: _step_s(prepared[r.slug], full_eff) for r in runs}
    out_sample = {}
    for family in sorted({r.family for r in runs}):
        train = tuple(r for r in runs if r.family != family)
        eff = apply_values(priors, fit(catalog, train, start=full.values).values)
        for r in runs:
            if r.family == family:
                out_sample[r.slug] = _step_s(prepared[r.slug], eff)
    rows = []
    for r in runs:
        p = prepared[r.slug]
        fit_pred = p.published * p.published_step_s / in_sample[r.slug]
        cv_pred = p.published * p.published_step_s / out_sample[r.slug]
        rows.append(
            CVRow(
                run=r.slug,
                family=r.family,
                stack=r.stack,
                framework=str(r.framework),
                accelerator=r.accelerator or "",
                gpus=r.n_gpus,
                moe=r.n_experts > 0,
                precision=str(r.precision),
                metric=p.metric,
                published=p.published,
                predicted_fit=fit_pred,
                predicted_cv=cv_pred,
                fit_error=fit_pred / p.published - 1,
                cv_error=cv_pred / p.published - 1,
                configuration=configuration_key(p.arch, p.cluster, p.plan),
            )  # fmt: skip
        )
    worst = max(rows, key=lambda row: abs(row.cv_error))
    configurations, distinct = distinct_median_abs(
        [r.cv_error for r in rows], [r.configuration for r in rows]
    )
    return CVReport(
        rows=tuple(rows), families=len({r.family for r in rows}),
        cv_median_abs_error=statistics.median(abs(r.cv_error) for r in rows),
        cv_max_abs_error=abs(worst.cv_error), cv_worst_run=worst.run,
        fit_median_abs_error=statistics.median(abs(r.fit_error) for r in rows),
        fit_max_abs_error=max(abs(r.fit_error) for r in rows),
        by_stack=_groups(rows, lambda r: r.stack), by_accelerator=_groups(rows, lambda r: r.accelerator),
        by_family=_groups(rows, lambda r: r.family), values=full.values,
        by_precision=_groups(rows, lambda r: r.precision), configurations=configurations,
        cv_median_abs_error_distinct=distinct,
    )  # fmt: skip


def fit_record(result: FitResult, report: CVReport | None, date: str) -> FitRecord:
    """What ``capplan calibrate-published`` writes to data/fitted.toml."""
    return FitRecord(
        date=date, runs=result.runs, families=result.families,
        values={k: round(v, 4) for k, v in result.values.items()}, runs_per_parameter=result.runs_per_parameter,
        fit_median_abs_error=report.fit_median_abs_error if report else None,
        cv_median_abs_error=report.cv_median_abs_error if report else None,
        cv_max_abs_error=report.cv_max_abs_error if report else None,
        configurations=report.configurations if report else None,
        cv_distinct_median_abs_error=report.cv_median_abs_error_distinct if report else None,
        cv_errors={row.run: round(row.cv_error, 4) for row in report.rows} if report else {},
    )  # fmt: skip
