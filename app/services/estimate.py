"""Estimate one request: resolve the model and the cluster (calibration, then the user's overrides), run the
domain estimator, and refuse non-finite answers."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from app.domain.catalog import Catalog, UnknownSlugError
from app.domain.estimator.calibration import Change, apply_calibration, calibration_assumption
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.estimate import (
    Assumption,
    Estimate,
    HardwareError,
    InvalidPlan,
    build_cluster,
    estimate,
)
from app.domain.estimator.hardware import fp8_recipe_problem, precision_problem
from app.domain.estimator.overrides import OverrideError, apply_overrides
from app.domain.estimator.plan import Plan
from app.domain.estimator.track_record import TrackRecord, track_record
from app.domain.model.architecture import Architecture
from app.domain.model.hf_config import ArchitectureImportError
from app.domain.model.hf_import import architecture_from_hf_config
from app.schemas import EstimateRequest, PlanSearchRequest
from app.services.errors import InputError, field_error
from app.services.hub_cache import hub_config_for

PLAN_FIELDS = tuple(f for f in Plan.model_fields if f != "dp")


def model_source(request: EstimateRequest | PlanSearchRequest) -> tuple[str | None, dict[str, Any] | None]:
    """(preset slug, config.json) of the request: a Hugging Face id in ``model`` (``org/name``) is read from the
    local hub cache and becomes the config (app/services/hub_cache.py), so plan documents carry the config."""
    if request.hf_config is not None:
        return None, request.hf_config
    config = hub_config_for(request.model)
    return (None, config) if config is not None else (request.model, None)


def resolve_architecture(catalog: Catalog, request: EstimateRequest) -> Architecture:
    preset, config = model_source(request)
    if config is not None:
        where = "hf_config" if request.hf_config is not None else "model"
        try:
            return architecture_from_hf_config(config)
        except ArchitectureImportError as exc:
            field = f"{where}.{exc.field}" if exc.field and where == "hf_config" else where
            raise InputError([field_error(field, str(exc), "value_error.hf_config")]) from None
        except (ValueError, TypeError) as exc:
            raise InputError(
                [field_error(where, f"not a usable config.json: {exc}", "value_error.hf_config")]
            ) from None
    try:
        return catalog.architecture(preset or "")
    except UnknownSlugError as exc:
        raise InputError([field_error("model", str(exc), "value_error.unknown_slug")]) from None


def plan_from_request(request: EstimateRequest) -> Plan:
    model_parallel = request.tp * request.pp * request.cp
    dp = request.dp if request.dp is not None else max(1, request.gpus // model_parallel)
    return Plan(dp=dp, **{f: getattr(request, f) for f in PLAN_FIELDS})


def scenario_cluster(
    catalog: Catalog, request: EstimateRequest | PlanSearchRequest, *, gpus: int | None = None, node: str | None = None,
    fabric: str | None = None,
) -> tuple[Cluster, tuple[Change, ...]]:  # fmt: skip
    """The cluster a plan of ``request`` runs on — ``gpus`` GPUs on ``node`` over ``fabric`` (the request's by
    default) — calibrated, then the request's figure overrides laid over it; with the calibration's changes
    (less the figures the user overrode). Every estimate and every search cluster is built here."""
    try:
        cluster = build_cluster(
            catalog.hardware, catalog.efficiency, accelerator=request.gpu, gpus=gpus or request.gpus,
            node=node or request.node, fabric=fabric if node else (fabric or request.fabric),
            oversubscription=getattr(request, "oversubscription", 1.0),
            power_limit_w=getattr(request, "power_limit_w", None),
        )  # fmt: skip
    except HardwareError as exc:
        raise InputError([field_error(exc.field, str(exc), "value_error.hardware")]) from None
    changes: list[Change] = []
    if request.calibrated:
        cluster, changes = apply_calibration(cluster, catalog.calibrations)
    if request.figure_overrides:
        # an overridden figure is the user's, not the calibration's: the calibration note leaves it out
        changes = [c for c in changes if f"{c.part}.{c.field}" not in request.figure_overrides]
        try:
            cluster = apply_overrides(cluster, request.figure_overrides)
        except OverrideError as exc:
            raise InputError(
                [field_error(f"figure_overrides.{exc.key}", str(exc), "value_error.override")]
            ) from None
    unsupported = precision_problem(cluster.accelerator, request.precision.value)
    if unsupported:
        raise InputError([field_error("precision", f"{unsupported}; use bf16, or another GPU",
                                      "value_error.precision")])  # fmt: skip
    unrunnable = fp8_recipe_problem(cluster.accelerator, request.precision.value, request.fp8_recipe.value)
    if unrunnable:
        raise InputError([field_error("fp8_recipe", f"{unrunnable}; use tensorwise or delayed, or another GPU",
                                      "value_error.fp8_recipe")])  # fmt: skip
    return cluster, tuple(changes)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Which calibration the estimate's figures carry: the assumption row (value, provenance, note) and the
    figures it replaced."""

    assumption: Assumption
    changes: tuple[Change, ...]

    @property
    def label(self) -> str:
        return str(self.assumption.value)


def calibrated_estimate(
    catalog: Catalog, request: EstimateRequest, *, node: str | None = None, track: bool = True
) -> tuple[Estimate, Calibration]:
    """Estimate ``request`` (on ``node`` with that node's own fabric, when given) and say how it is calibrated.
    With ``request.calibrated`` and ``catalog.calibrations`` (fitted from shipped and stored benchmark runs),
    the accelerator's calibrated figures replace the catalog defaults. With ``track`` the estimate carries its
    track record (the published runs and the fit record are read for it; the plan search's re-estimate of its
    winner skips it)."""
    arch = resolve_architecture(catalog, request)
    cluster, changes = scenario_cluster(catalog, request, node=node)
    plan = plan_from_request(request)
    try:
        result = estimate(
            arch,
            cluster,
            plan,
            tokens_to_train=request.tokens,
            allow_tp_across_nodes=request.allow_tp_across_nodes,
        )
        _check_finite(result, request)
    except InvalidPlan as exc:
        raise InputError(
            [field_error(v.field, f"{v.message}; fix: {v.fix}", f"plan.{v.code}") for v in exc.violations]
        ) from None
    except ArithmeticError:  # a figure so small or large that a division fails (0, overflow)
        raise _non_finite(request, "a division by zero or an overflow") from None
    note = calibration_assumption(cluster.accelerator.slug, list(changes), enabled=request.calibrated)
    if track:
        result = result.model_copy(
            update={
                "track_record": plan_track_record(catalog, plan, cluster.accelerator.slug, arch.n_experts > 0)
            }
        )
    return result, Calibration(assumption=note, changes=changes)


def plan_track_record(catalog: Catalog, plan: Plan, accelerator: str, moe: bool) -> TrackRecord:
    """capplan's out-of-sample record on the published runs comparable to ``plan`` (data/fitted.toml)."""
    fit = catalog.fit
    return track_record(
        plan.framework.value, accelerator, plan.cp, plan.seq_len, moe, catalog.published_runs,
        fit.cv_errors if fit else {}, fit.date if fit else None, plan.precision.value,
        plan.tokens_per_step / plan.gpus,
    )  # fmt: skip


def run_estimate(catalog: Catalog, request: EstimateRequest) -> Estimate:
    """The estimate with its calibration as the last assumption (the API's and the CLI's answer)."""
    result, calibration = calibrated_estimate(catalog, request)
    return with_calibration(result, calibration)


def with_calibration(result: Estimate, calibration: Calibration) -> Estimate:
    return result.model_copy(update={"assumptions": (*result.assumptions, calibration.assumption)})


FINITE_FIELDS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "peak_memory_bytes")


def _non_finite(request: EstimateRequest, what: str) -> InputError:
    keys = sorted(request.figure_overrides)
    if keys:
        given = ", ".join(f"{k}={request.figure_overrides[k]:g}" for k in keys)
        msg = f"the estimate is not a finite number ({what}) with these overrides ({given}); use realistic values"
        return InputError([field_error(f"figure_overrides.{k}", msg, "value_error.non_finite") for k in keys])
    return InputError(
        [field_error("body", f"the estimate is not a finite number ({what})", "value_error.non_finite")]
    )


def _check_finite(result: Estimate, request: EstimateRequest) -> None:
    """Never answer NaN or infinity where the schema promises a number: name the override that caused it."""
    bad = [f for f in FINITE_FIELDS if not math.isfinite(float(getattr(result, f, 0.0) or 0.0))]
    if bad:
        raise _non_finite(request, ", ".join(bad))


def timed_estimate(catalog: Catalog, request: EstimateRequest, metrics: Any, surface: str) -> Estimate:
    start = time.perf_counter()
    result = run_estimate(catalog, request)
    if metrics is not None:
        metrics.estimates_total.labels(surface=surface).inc()
        metrics.estimate_duration_seconds.observe(time.perf_counter() - start)
    return result
