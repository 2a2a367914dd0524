"""Use-cases shared by the API, the pages and the CLI: resolve inputs against the catalog, run the domain.

Bad input becomes an :class:`InputError` carrying one ``{loc, msg, type}`` item per field, which the API turns
into a 422, the pages into inline messages and the CLI into one line and exit code 2.
"""

from __future__ import annotations

import time
from typing import Any

from app.domain.architecture import Architecture, ArchitectureImportError, architecture_from_hf_config
from app.domain.catalog import Catalog, UnknownSlugError
from app.domain.estimate import Estimate, HardwareError, InvalidPlan, build_cluster, estimate
from app.domain.plan import Plan
from app.schemas import EstimateRequest

PLAN_FIELDS = tuple(f for f in Plan.model_fields if f != "dp")


class InputError(ValueError):
    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in errors))


def _error(field: str, msg: str, kind: str) -> dict[str, Any]:
    return {"loc": ["body", *field.split(".")], "msg": msg, "type": kind}


def resolve_architecture(catalog: Catalog, request: EstimateRequest) -> Architecture:
    if request.hf_config is not None:
        try:
            return architecture_from_hf_config(request.hf_config)
        except ArchitectureImportError as exc:
            field = f"hf_config.{exc.field}" if exc.field else "hf_config"
            raise InputError([_error(field, str(exc), "value_error.hf_config")]) from None
        except (ValueError, TypeError) as exc:
            raise InputError(
                [_error("hf_config", f"not a usable config.json: {exc}", "value_error.hf_config")]
            ) from None
    try:
        return catalog.architecture(request.model or "")
    except UnknownSlugError as exc:
        raise InputError([_error("model", str(exc), "value_error.unknown_slug")]) from None


def plan_from_request(request: EstimateRequest) -> Plan:
    model_parallel = request.tp * request.pp * request.cp
    dp = request.dp if request.dp is not None else max(1, request.gpus // model_parallel)
    return Plan(dp=dp, **{f: getattr(request, f) for f in PLAN_FIELDS})


def run_estimate(catalog: Catalog, request: EstimateRequest) -> Estimate:
    arch = resolve_architecture(catalog, request)
    try:
        cluster = build_cluster(
            catalog.hardware, catalog.efficiency, accelerator=request.gpu, gpus=request.gpus, node=request.node,
            fabric=request.fabric, oversubscription=request.oversubscription, power_limit_w=request.power_limit_w,
        )  # fmt: skip
    except HardwareError as exc:
        raise InputError([_error(exc.field, str(exc), "value_error.hardware")]) from None
    plan = plan_from_request(request)
    try:
        return estimate(
            arch,
            cluster,
            plan,
            tokens_to_train=request.tokens,
            allow_tp_across_nodes=request.allow_tp_across_nodes,
        )
    except InvalidPlan as exc:
        raise InputError(
            [_error(v.field, f"{v.message}; fix: {v.fix}", f"plan.{v.code}") for v in exc.violations]
        ) from None


def timed_estimate(catalog: Catalog, request: EstimateRequest, metrics: Any, surface: str) -> Estimate:
    start = time.perf_counter()
    result = run_estimate(catalog, request)
    if metrics is not None:
        metrics.estimates_total.labels(surface=surface).inc()
        metrics.estimate_duration_seconds.observe(time.perf_counter() - start)
    return result
