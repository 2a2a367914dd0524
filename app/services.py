"""Use-cases shared by the API, the pages and the CLI: resolve inputs against the catalog, run the domain.

Bad input becomes an :class:`InputError` carrying one ``{loc, msg, type}`` item per field, which the API turns
into a 422, the pages into inline messages and the CLI into one line and exit code 2.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from app.domain.catalog import Catalog, UnknownSlugError
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.estimate import Estimate, HardwareError, InvalidPlan, build_cluster, estimate
from app.domain.estimator.overrides import OverrideError, apply_overrides
from app.domain.estimator.plan import Plan
from app.domain.model.architecture import Architecture
from app.domain.model.hf_config import ArchitectureImportError
from app.domain.model.hf_import import architecture_from_hf_config
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
    """Estimate ``request``. With ``request.calibrated`` and ``catalog.calibrations`` (fitted from shipped and
    stored benchmark runs), the accelerator's calibrated figures replace the catalog defaults; the estimate's
    ``calibration`` assumption says whether it is calibrated and by which run(s)."""
    arch = resolve_architecture(catalog, request)
    try:
        cluster = build_cluster(
            catalog.hardware, catalog.efficiency, accelerator=request.gpu, gpus=request.gpus, node=request.node,
            fabric=request.fabric, oversubscription=request.oversubscription, power_limit_w=request.power_limit_w,
        )  # fmt: skip
    except HardwareError as exc:
        raise InputError([_error(exc.field, str(exc), "value_error.hardware")]) from None
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
                [_error(f"figure_overrides.{exc.key}", str(exc), "value_error.override")]
            ) from None
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
        note = calibration_assumption(cluster.accelerator.slug, changes, enabled=request.calibrated)
        return result.model_copy(update={"assumptions": (*result.assumptions, note)})
    except InvalidPlan as exc:
        raise InputError(
            [_error(v.field, f"{v.message}; fix: {v.fix}", f"plan.{v.code}") for v in exc.violations]
        ) from None
    except ArithmeticError:  # a figure so small or large that a division fails (0, overflow)
        raise _non_finite(request, "a division by zero or an overflow") from None


FINITE_FIELDS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "peak_memory_bytes")


def _non_finite(request: EstimateRequest, what: str) -> InputError:
    keys = sorted(request.figure_overrides)
    if keys:
        given = ", ".join(f"{k}={request.figure_overrides[k]:g}" for k in keys)
        msg = f"the estimate is not a finite number ({what}) with these overrides ({given}); use realistic values"
        return InputError([_error(f"figure_overrides.{k}", msg, "value_error.non_finite") for k in keys])
    return InputError(
        [_error("body", f"the estimate is not a finite number ({what})", "value_error.non_finite")]
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


# --------------------------------------------------------------------------------------------------
# Cost and reliability (issue 5)

from app.domain.cost.cloud import instance_for_accelerator  # noqa: E402
from app.domain.cost.inputs import CostInputError  # noqa: E402
from app.domain.cost.monthly import MonthlyCost, monthly_cost  # noqa: E402
from app.domain.cost.selfbuild import self_build_node_for  # noqa: E402
from app.domain.cost.training import TrainingCost, TrainingJob, training_cost  # noqa: E402
from app.domain.reliability.formulas import plan_checkpoint_bytes_per_param  # noqa: E402
from app.domain.reliability.report import reliability_report  # noqa: E402
from app.schemas import CostRequest, MonthlyCostRequest  # noqa: E402


def _cost_error(exc: CostInputError) -> InputError:
    return InputError([_error(exc.field, str(exc), "value_error.cost")])


def _estimate_on_node(
    catalog: Catalog, request: EstimateRequest, base: Estimate, node: str | None
) -> Estimate:
    """The same plan estimated on ``node`` (the cloud instance or the self-build server); ``base`` when it is
    already there or when the plan does not run on that node."""
    if node is None or node == base.node:
        return base
    try:
        return run_estimate(catalog, request.model_copy(update={"node": node, "fabric": None}))
    except InputError:
        return base


def _known_node(catalog: Catalog, slug: str, field: str) -> None:
    try:
        catalog.hardware.node(slug)
    except KeyError as exc:
        raise InputError([_error(field, str(exc), "value_error.unknown_slug")]) from None


def run_cost(catalog: Catalog, request: CostRequest) -> TrainingCost:
    """Days and dollars of "train request.tokens tokens with this plan" for every pricing option, with
    failures, checkpoints and goodput. The plan is estimated on the AWS instance and on the self-build
    server, so each option uses the throughput of the hardware it pays for."""
    est = run_estimate(catalog, request)
    arch = resolve_architecture(catalog, request)
    o = request.overrides
    if o.instance is not None:
        _known_node(catalog, o.instance, "overrides.instance")
    try:
        instance = o.instance or instance_for_accelerator(catalog.cost, catalog.hardware, est.accelerator)
        server = self_build_node_for(catalog.hardware, catalog.cost, est.accelerator)
        cloud = _estimate_on_node(catalog, request, est, instance)
        own = _estimate_on_node(catalog, request, est, server)
        job = TrainingJob(
            model=est.model, accelerator=est.accelerator, gpus=est.gpus, parameters=est.parameters_total,
            tokens=request.tokens, cloud_tokens_per_s=cloud.tokens_per_s, self_build_tokens_per_s=own.tokens_per_s,
            plan_checkpoint_bytes_per_param=plan_checkpoint_bytes_per_param(est.plan), fits=cloud.fits,
            seq_len=est.plan.seq_len, cloud_estimate_node=cloud.node, self_build_estimate_node=own.node,
        )  # fmt: skip
        result = training_cost(
            catalog.cost, catalog.hardware, job, options=request.options, overrides=o, arch=arch
        )
    except CostInputError as exc:
        raise _cost_error(exc) from None
    # the throughput behind every option: say what calibrated it
    calibration = [a for a in cloud.assumptions if a.name == "calibration"]
    return result.model_copy(update={"assumptions": (*calibration, *result.assumptions)})


def run_monthly_cost(catalog: Catalog, request: MonthlyCostRequest) -> MonthlyCost:
    """The monthly bill of a cluster for every option: ``request.nodes`` × the instance, or × the node
    (a server is priced for self-build against the AWS instance with the same accelerator)."""
    o = request.overrides
    for slug, field in (
        (request.instance, "instance"),
        (request.node, "node"),
        (o.instance, "overrides.instance"),
    ):
        if slug is not None:
            _known_node(catalog, slug, field)
    instance = request.instance or o.instance
    server: str | None = None
    units = request.nodes
    if request.node is not None:
        node = catalog.hardware.node(request.node)
        if node.kind == "cloud-instance" and instance is None:
            instance = node.slug
        elif node.kind == "server":
            server = node.slug
    unit = catalog.hardware.node(request.instance or request.node or "")
    gpus = units * unit.accelerators_per_node
    try:
        if instance is None:
            instance = instance_for_accelerator(catalog.cost, catalog.hardware, unit.accelerator)
        inst = catalog.hardware.node(instance)
        if inst.accelerator != unit.accelerator:
            raise CostInputError("instance", f"{instance} carries {inst.accelerator}, not {unit.accelerator}")
        instances = -(-gpus // inst.accelerators_per_node)
        return monthly_cost(
            catalog.cost, catalog.hardware, instance=instance, nodes=instances, self_build_node=server,
            overrides=o, options=request.options, months=request.months,
        )  # fmt: skip
    except CostInputError as exc:
        field = "node" if exc.field == "gpu" else exc.field
        raise InputError([_error(field, str(exc), "value_error.cost")]) from None


# --------------------------------------------------------------------------------------------------
# Plan documents (capplan.plan/v1) for export: shared by the API, the pages and the CLI.

from app.domain.export import (  # noqa: E402
    ExportedFile,
    ExportFormat,
    PlanDocument,
    PlanDocumentError,
    build_plan_document,
    export_plan,
    plan_document_problems,
)


def plan_document_from_request(catalog: Catalog, request: EstimateRequest) -> PlanDocument:
    """Estimate ``request`` and wrap plan, hardware and estimate in a plan document (raises InputError).

    The document carries the reliability model's checkpoint interval for the job (catalog defaults), which
    every export turns into its checkpoint cadence in steps."""
    result = run_estimate(catalog, request)
    node = catalog.hardware.node(result.node)
    try:
        interval_s: float | None = reliability_report(
            catalog.cost, gpus=result.gpus, nodes=math.ceil(result.gpus / node.accelerators_per_node),
            parameters=result.parameters_total, plan_bytes_per_param=plan_checkpoint_bytes_per_param(result.plan),
        ).checkpoint_interval_s  # fmt: skip
    except (KeyError, ValueError):
        interval_s = None
    return build_plan_document(
        arch=resolve_architecture(catalog, request),
        node=node,
        fabric=catalog.hardware.fabric(result.scale_out_fabric),
        estimate=result,
        preset=request.model,
        hf_config=request.hf_config,
        oversubscription=request.oversubscription,
        power_limit_w=request.power_limit_w,
        tokens=request.tokens,
        allow_tp_across_nodes=request.allow_tp_across_nodes,
        figure_overrides=request.figure_overrides,
        calibrated=request.calibrated,
        checkpoint_interval_s=interval_s,
    )


def export_document(doc: PlanDocument, fmt: ExportFormat | str) -> ExportedFile:
    """``export_plan``, with a plan the format's framework refuses (or an inconsistent document) as an
    InputError naming the field, the framework's limit and the nearest plan it runs."""
    try:
        return export_plan(doc, fmt)
    except PlanDocumentError as exc:
        loc = ["body", *exc.field.split(".")] if exc.field else ["body"]
        raise InputError([{"loc": loc, "msg": exc.message, "type": "plan.framework-refusal"}]) from None


def checked_plan_document(doc: PlanDocument) -> PlanDocument:
    """``doc`` if it is consistent, else an InputError naming each offending field."""
    problems = plan_document_problems(doc)
    if problems:
        raise InputError(
            [{"loc": ["body", *field.split(".")], "msg": msg, "type": "value_error.plan_document"}
             for field, msg in problems]
        )  # fmt: skip
    return doc


# --------------------------------------------------------------------------------------------------
# Plan search (issue 4).

from app.domain.cost.gpu_hour import usd_per_gpu_hour  # noqa: E402
from app.domain.estimator.compute import model_flops_per_token  # noqa: E402
from app.domain.model.counts import parameter_counts  # noqa: E402
from app.domain.search.engine import SearchCancelled, SearchResult, SearchSpec, SearchTooLarge, search  # noqa: E402
from app.schemas import PlanSearchRequest  # noqa: E402

MAX_CLUSTER_SIZES = 12
MAX_BATCH_SIZES = 8


def _range(text: str) -> tuple[float, float]:
    low, high = (float(part) for part in text.split(":"))
    return (low, high) if low <= high else (high, low)


def cluster_sizes(request: PlanSearchRequest, gpus_per_node: int) -> tuple[list[int], list[str]]:
    """GPU counts to search: the fixed one, or whole-node sizes in the range (thinned geometrically)."""
    if request.gpus is not None:
        return [request.gpus], []
    low, high = _range(request.gpus_range or "")
    nodes = list(range(max(1, math.ceil(low / gpus_per_node)), int(high // gpus_per_node) + 1))
    if not nodes:
        raise InputError([_error("gpus_range", f"no whole number of {gpus_per_node}-GPU nodes between "
                                 f"{low:g} and {high:g} GPUs", "value_error.range")])  # fmt: skip
    notes = []
    if len(nodes) > MAX_CLUSTER_SIZES:
        picks = sorted({nodes[0], nodes[-1], *(n for n in nodes if n & (n - 1) == 0)})
        if len(picks) > MAX_CLUSTER_SIZES:
            step = len(picks) / MAX_CLUSTER_SIZES
            picks = sorted({picks[int(i * step)] for i in range(MAX_CLUSTER_SIZES)} | {nodes[-1]})
        notes.append(
            f"{len(nodes)} cluster sizes in the range: searched {len(picks)} (powers of two of nodes and the ends)"
        )
        nodes = picks
    return [n * gpus_per_node for n in nodes], notes


def batch_sizes(request: PlanSearchRequest) -> list[int]:
    if request.global_batch is not None:
        return [request.global_batch]
    low, high = _range(request.global_batch_tokens or "")
    lo_seq, hi_seq = max(1, math.ceil(low / request.seq_len)), int(high // request.seq_len)
    sizes = [2**k for k in range(0, 25) if lo_seq <= 2**k <= hi_seq]
    if not sizes:
        raise InputError([_error("global_batch_tokens", f"no global batch of {request.seq_len}-token sequences "
                                 f"lies between {low:g} and {high:g} tokens", "value_error.range")])  # fmt: skip
    return sizes[-MAX_BATCH_SIZES:]


class SearchBusy(RuntimeError):
    """The server's search budget is spent: all slots busy, or the search ran past its deadline (503)."""

    status_code = 503

    def __init__(self, message: str, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class SearchBudget:
    """At most ``concurrency`` searches at once (a caller waits up to ``queue_s`` for a slot, then gets
    :class:`SearchBusy`), each stopped after ``timeout_s`` of work."""

    def __init__(self, concurrency: int, timeout_s: float, queue_s: float = 2.0) -> None:
        self.concurrency, self.timeout_s, self.queue_s = concurrency, timeout_s, queue_s
        self._slots = threading.BoundedSemaphore(concurrency)

    @contextmanager
    def slot(self) -> Iterator[Callable[[], bool]]:
        """Hold a slot for one search; yields its ``should_stop`` deadline check."""
        if not self._slots.acquire(timeout=self.queue_s):
            raise SearchBusy(
                f"all {self.concurrency} plan-search slots are busy (CAPPLAN_SEARCH_CONCURRENCY); retry shortly",
                retry_after_s=max(1, math.ceil(self.timeout_s / 2)),
            )
        deadline = time.monotonic() + self.timeout_s
        try:
            yield lambda: time.monotonic() > deadline
        finally:
            self._slots.release()


def run_search(
    catalog: Catalog,
    request: PlanSearchRequest,
    max_plans: int | None = None,
    budget: SearchBudget | None = None,
) -> SearchResult:
    if budget is None:
        return _run_search(catalog, request, max_plans, None)
    with budget.slot() as should_stop:
        try:
            return _run_search(catalog, request, max_plans, should_stop)
        except SearchCancelled:
            raise SearchBusy(
                f"the search ran past its {budget.timeout_s:g} s budget (CAPPLAN_SEARCH_TIMEOUT_S) and was "
                "stopped; narrow the space (fewer cluster or batch sizes, a fixed sharding or recompute, a "
                "lower max pp) or retry when the server is less busy",
                retry_after_s=max(1, math.ceil(budget.timeout_s)),
            ) from None


def search_pick_request(request: PlanSearchRequest, result: SearchResult, pick: int = 1) -> EstimateRequest:
    """The estimate request that reproduces the search's ``pick``-th plan (1 = the winner) on its cluster: what
    ``capplan plan --output`` turns into a plan document. InputError when there is no such plan."""
    if not 1 <= pick <= len(result.plans):
        found = f"it found {len(result.plans)}" if result.plans else "it found none that fits"
        raise InputError([_error("pick", f"no plan #{pick}: {found}", "value_error")])
    cand = result.plans[pick - 1]
    fields = {f: getattr(cand.plan, f) for f in (*PLAN_FIELDS, "dp")}
    return EstimateRequest(
        model=request.model, hf_config=request.hf_config, gpu=request.gpu, node=request.node,
        fabric=request.fabric, gpus=cand.gpus, tokens=request.tokens, calibrated=request.calibrated,
        allow_tp_across_nodes=request.allow_tp_across_nodes, figure_overrides=request.figure_overrides, **fields,
    )  # fmt: skip


def _run_search(
    catalog: Catalog,
    request: PlanSearchRequest,
    max_plans: int | None,
    should_stop: Callable[[], bool] | None,
) -> SearchResult:
    arch = resolve_architecture(catalog, request)  # type: ignore[arg-type]
    calibrations = catalog.calibrations if request.calibrated else None

    overrides = request.figure_overrides

    def cluster(gpus: int) -> tuple[Cluster, list[Change]]:
        """The cluster every plan of this size is estimated on: calibrated, then the request's overrides laid
        over it — exactly as run_estimate builds it, so a plan scores the same in the search and the estimate."""
        built = build_cluster(catalog.hardware, catalog.efficiency, accelerator=request.gpu, gpus=gpus,
                              node=request.node, fabric=request.fabric)  # fmt: skip
        built, changes = apply_calibration(built, calibrations)
        changes = [c for c in changes if f"{c.part}.{c.field}" not in overrides]
        if overrides:
            try:
                built = apply_overrides(built, overrides)
            except OverrideError as exc:
                raise InputError(
                    [_error(f"figure_overrides.{exc.key}", str(exc), "value_error.override")]
                ) from None
        return built, changes

    try:
        probe, changes = cluster(1)
    except HardwareError as exc:
        raise InputError([_error(exc.field, str(exc), "value_error.hardware")]) from None
    sizes, notes = cluster_sizes(request, probe.gpus_per_node)
    clusters = {g: cluster(g)[0] for g in sizes}
    cal = calibration_assumption(request.gpu, changes, enabled=request.calibrated)
    notes.append(f"calibration: {cal.value}" + (f" ({cal.note})" if changes else ""))
    price = None
    try:
        instance = (
            probe.node.slug
            if probe.node.provider == "aws"
            else instance_for_accelerator(catalog.cost, catalog.hardware, request.gpu)
        )
        node_for_price = probe.node.slug if request.price_option.value == "self-build" else instance
        price = usd_per_gpu_hour(catalog.cost, node_for_price, request.price_option,
                                 gpus_per_node=probe.gpus_per_node)  # fmt: skip
    except CostInputError as exc:
        notes.append(f"no price: {exc}")
    if price is None:
        if request.budget_usd or request.objective.value == "min-cost":
            raise InputError([_error("price_option", f"no {request.price_option.value} price in the catalog for "
                                     f"{request.gpu}; choose another price option", "value_error.price")])  # fmt: skip
    else:
        notes.append(f"cost figures at {request.price_option.value} ${price:.2f} per GPU-hour")
    defaults = SearchSpec.model_fields
    spec = SearchSpec(
        gpus=tuple(sizes), global_batches=tuple(batch_sizes(request)), seq_len=request.seq_len,
        framework=request.framework, precision=request.precision, optimizer=request.optimizer,
        flash_attention=request.flash_attention, fused_kernels=request.fused_kernels,
        shardings=tuple(request.shardings) if request.shardings else None,
        offloads=tuple(request.offloads) if request.offloads else None,
        micro_batches=tuple(request.micro_batches or defaults["micro_batches"].default),
        recomputes=tuple(request.recomputes or defaults["recomputes"].default),
        vpps=tuple(request.vpps or defaults["vpps"].default), cps=tuple(request.cps or defaults["cps"].default),
        max_pp=request.max_pp, max_tp=request.max_tp, allow_tp_across_nodes=request.allow_tp_across_nodes,
        headroom_bytes=request.headroom_gib * 2**30, headroom_fraction=request.headroom_percent / 100,
        tokens_to_train=request.tokens, deadline_days=request.deadline_days, budget_usd=request.budget_usd,
        usd_per_gpu_hour=price, objective=request.objective, top_k=request.top_k,
        **({"max_plans": max_plans} if max_plans else {}),
    )  # fmt: skip
    flops = model_flops_per_token(arch, request.seq_len, parameter_counts(arch).matmul_weights_active).total
    try:
        result = search(arch, clusters, spec, flops, should_stop)
    except SearchTooLarge as exc:
        raise InputError([_error("gpus", str(exc), "value_error.search_too_large")]) from None
    best = result.best
    if best is not None:  # the winner's estimate states its calibration, as a single estimate does
        best = best.model_copy(update={"assumptions": (*best.assumptions, cal)})
    return result.model_copy(update={"notes": tuple(notes), "best": best})


def timed_search(
    catalog: Catalog,
    request: PlanSearchRequest,
    metrics: Any,
    surface: str,
    max_plans: int | None = None,
    budget: SearchBudget | None = None,
) -> SearchResult:
    result = run_search(catalog, request, max_plans, budget)
    if metrics is not None:
        metrics.searches_total.labels(surface=surface).inc()
    return result


# --------------------------------------------------------------------------------------------------
# Saved scenarios (issue 6): one transaction per use-case. Inputs are stored as the EstimateRequest's JSON
# (None fields left out), overrides as the CostOverrides' non-default fields.

from sqlalchemy import select  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402
from sqlalchemy.orm.exc import StaleDataError  # noqa: E402

from app.db.tables import Scenario  # noqa: E402
from app.domain.cost.inputs import CostOverrides  # noqa: E402


class ScenarioNotFound(LookupError):
    def __init__(self, scenario_id: int) -> None:
        self.scenario_id = scenario_id
        super().__init__(f"no scenario {scenario_id}")


class ScenarioConflict(RuntimeError):
    """The scenario changed since the caller read it; ``version`` is the current one."""

    def __init__(self, scenario_id: int, version: int) -> None:
        self.scenario_id, self.version = scenario_id, version
        super().__init__(
            f"scenario {scenario_id} is at version {version}; reload it and apply your change again"
        )


def scenario_inputs(inputs: EstimateRequest) -> dict[str, Any]:
    return inputs.model_dump(mode="json", exclude_none=True)


def scenario_overrides(overrides: CostOverrides) -> dict[str, Any]:
    return overrides.model_dump(mode="json", exclude_defaults=True)


def create_scenario(
    session: Session, name: str, inputs: EstimateRequest, overrides: CostOverrides | None = None
) -> Scenario:
    scenario = Scenario(
        name=_scenario_name(name),
        inputs=scenario_inputs(inputs),
        overrides=scenario_overrides(overrides or CostOverrides()),
    )
    session.add(scenario)
    session.commit()
    return scenario


def list_scenarios(session: Session, limit: int | None = None, offset: int = 0) -> list[Scenario]:
    """Most recently changed first; one page of ``limit`` rows from ``offset`` (all without a limit)."""
    query = select(Scenario).order_by(Scenario.updated_at.desc(), Scenario.id.desc()).offset(offset)
    return list(session.scalars(query.limit(limit) if limit is not None else query))


def count_scenarios(session: Session) -> int:
    from sqlalchemy import func

    return int(session.scalar(select(func.count()).select_from(Scenario)) or 0)


def check_scenario_inputs(catalog: Catalog, inputs: EstimateRequest) -> None:
    """What is saved must open later: the model (preset or config.json), accelerator, node and fabric must exist
    in the catalog now (an InputError naming the field, under ``inputs``, otherwise)."""
    try:
        resolve_architecture(catalog, inputs)
        try:
            build_cluster(
                catalog.hardware, catalog.efficiency, accelerator=inputs.gpu, gpus=inputs.gpus, node=inputs.node,
                fabric=inputs.fabric, oversubscription=inputs.oversubscription, power_limit_w=inputs.power_limit_w,
            )  # fmt: skip
        except HardwareError as exc:
            raise InputError([_error(exc.field, str(exc), "value_error.hardware")]) from None
        except UnknownSlugError as exc:
            raise InputError([_error("gpu", str(exc), "value_error.unknown_slug")]) from None
    except InputError as exc:
        raise InputError([{**e, "loc": ["body", "inputs", *e["loc"][1:]]} for e in exc.errors]) from None


def _scenario_name(name: str) -> str:
    name = name.strip()
    if "\x00" in name:
        raise InputError([_error("name", "NUL characters are not allowed", "value_error.nul")])
    return name


def get_scenario(session: Session, scenario_id: int) -> Scenario:
    scenario = session.get(Scenario, scenario_id)
    if scenario is None:
        raise ScenarioNotFound(scenario_id)
    return scenario


SQLITE_BUSY_RETRIES = 20


def update_scenario(
    session: Session,
    scenario_id: int,
    *,
    version: int,
    name: str | None = None,
    inputs: EstimateRequest | None = None,
    overrides: CostOverrides | None = None,
) -> Scenario:
    """Apply the change if ``version`` is still current (else :class:`ScenarioConflict`); the version goes up.

    On SQLite two concurrent read-then-write transactions cannot both upgrade to a write lock: the one that
    loses gets "database is locked" at once (the busy timeout does not apply). It is rolled back and retried,
    and then sees the winner's version and answers a conflict like PostgreSQL does."""
    from sqlalchemy.exc import OperationalError

    for attempt in range(SQLITE_BUSY_RETRIES + 1):
        scenario = get_scenario(session, scenario_id)
        if scenario.version != version:
            raise ScenarioConflict(scenario_id, scenario.version)
        if name is not None:
            scenario.name = _scenario_name(name)
        if inputs is not None:
            scenario.inputs = scenario_inputs(inputs)
        if overrides is not None:
            scenario.overrides = scenario_overrides(overrides)
        try:
            session.commit()
            return scenario
        except StaleDataError:
            session.rollback()
            raise ScenarioConflict(scenario_id, get_scenario(session, scenario_id).version) from None
        except OperationalError as exc:
            session.rollback()
            if "locked" not in str(exc.orig) or attempt == SQLITE_BUSY_RETRIES:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def duplicate_scenario(session: Session, scenario_id: int, name: str | None = None) -> Scenario:
    source = get_scenario(session, scenario_id)
    copy = Scenario(
        name=(name or f"{source.name} (copy)")[:200],
        inputs=dict(source.inputs),
        overrides=dict(source.overrides),
    )
    session.add(copy)
    session.commit()
    return copy


def delete_scenario(session: Session, scenario_id: int) -> None:
    session.delete(get_scenario(session, scenario_id))
    session.commit()


# --------------------------------------------------------------------------------------------------
# Benchmark runs and calibration (issue 7)

import statistics  # noqa: E402

from sqlalchemy.orm import selectinload  # noqa: E402

from app.calibration_store import (  # noqa: E402
    ShippedRun,
    calibration_run_from,
    shipped_calibration_run,
    stored_calibration_run,
)
from app.db.tables import BenchmarkRun, BenchmarkSample  # noqa: E402
from app.domain.estimator.calibration import (  # noqa: E402
    Calibrations,
    Change,
    apply_calibration,
    calibration_assumption,
    calibration_changes,
    fit_run,
)
from app.schemas import (  # noqa: E402
    BenchmarkMetricOut,
    BenchmarkResultIn,
    BenchmarkRunOut,
    BenchmarkRunSummary,
    CalibrationFigureOut,
    ShippedRunSummary,
    relative_error,
)


def ingest_benchmark(session: Session, catalog: Catalog, result: BenchmarkResultIn) -> BenchmarkRun:
    """Store one runner result (run + every sample) in one transaction; unknown catalog slugs are a 422."""
    errors = []
    if result.accelerator is not None:
        try:
            catalog.hardware.accelerator(result.accelerator)
        except KeyError as exc:
            errors.append(
                _error("accelerator", str(exc.args[0] if exc.args else exc), "value_error.unknown_slug")
            )
    if result.node is not None:
        try:
            catalog.hardware.node(result.node)
        except KeyError as exc:
            errors.append(_error("node", str(exc.args[0] if exc.args else exc), "value_error.unknown_slug"))
    if errors:
        raise InputError(errors)
    run = BenchmarkRun(
        preset=result.preset, accelerator_slug=result.accelerator, node_slug=result.node,
        world_size=result.world_size, config={**result.config, "nodes": result.nodes},
        hardware={**result.hardware, "device_name": result.device_name}, software=result.software,
        notes=result.notes, measured_at=result.measured_at,
        samples=[BenchmarkSample(rank=m.rank, metric=m.metric, unit=m.unit, measured=m.measured,
                                 predicted=m.predicted) for m in result.metrics],
    )  # fmt: skip
    with session.begin():
        session.add(run)
    return run


def _median_abs_error(samples: Sequence[Any]) -> float | None:
    """Median |measured/predicted − 1| over the samples (stored rows or result metrics) that have a prediction."""
    errs = [abs(e) for s in samples if (e := relative_error(s.measured, s.predicted)) is not None]
    return statistics.median(errs) if errs else None


def _summary(run: BenchmarkRun) -> dict[str, Any]:
    return dict(
        id=run.id, preset=run.preset, accelerator=run.accelerator_slug, node=run.node_slug,
        world_size=run.world_size, device_name=str(run.hardware.get("device_name", "")),
        measured_at=run.measured_at, created_at=run.created_at, metrics=len(run.samples),
        median_abs_error=_median_abs_error(run.samples),
    )  # fmt: skip


def list_benchmark_runs(
    session: Session, *, accelerator: str | None = None, limit: int = 200
) -> list[BenchmarkRunSummary]:
    query = select(BenchmarkRun).options(selectinload(BenchmarkRun.samples))
    if accelerator:
        query = query.where(BenchmarkRun.accelerator_slug == accelerator)
    query = query.order_by(BenchmarkRun.id.desc()).limit(limit)
    return [BenchmarkRunSummary(**_summary(r)) for r in session.scalars(query)]


def get_benchmark_run(session: Session, run_id: int) -> BenchmarkRunOut | None:
    run = session.get(BenchmarkRun, run_id, options=[selectinload(BenchmarkRun.samples)])
    if run is None:
        return None
    samples = [
        BenchmarkMetricOut(metric=s.metric, unit=s.unit, rank=s.rank, measured=s.measured, predicted=s.predicted,
                           relative_error=relative_error(s.measured, s.predicted))
        for s in run.samples
    ]  # fmt: skip
    return BenchmarkRunOut(
        **_summary(run), config=run.config, hardware=run.hardware, software=run.software, notes=run.notes,
        samples=samples,
    )  # fmt: skip


def run_calibration_changes(
    catalog: Catalog, run: BenchmarkRunOut | BenchmarkRun | ShippedRun
) -> list[Change]:
    """What this one run (stored or shipped) would change on its accelerator's reference cluster (its page)."""
    if isinstance(run, ShippedRun):
        cal = shipped_calibration_run(run)
        world_size, node = run.result.world_size, run.result.node
    elif isinstance(run, BenchmarkRun):
        cal, world_size, node = stored_calibration_run(run), run.world_size, run.node_slug
    else:
        cal = calibration_run_from(
            run_id=run.id, measured_at=run.measured_at, accelerator=run.accelerator, world_size=run.world_size,
            config=run.config, samples=run.samples, href=f"/benchmarks/{run.id}",
        )  # fmt: skip
        world_size, node = run.world_size, run.node
    if cal is None:
        return []
    cluster = reference_cluster(catalog, cal.accelerator, gpus=max(1, world_size), node=node)
    return calibration_changes(cluster, fit_run(cal)) if cluster is not None else []


def reference_cluster(
    catalog: Catalog, accelerator: str, gpus: int = 1, node: str | None = None
) -> Cluster | None:
    """The cluster a calibration is shown on: ``node`` (the run's) or the accelerator's reference node; None
    when the catalog has no node for the accelerator (its runs are stored, but nothing can be estimated on it)."""
    for candidate in (node, None) if node else (None,):
        try:
            return build_cluster(
                catalog.hardware, catalog.efficiency, accelerator=accelerator, gpus=gpus, node=candidate
            )
        except (HardwareError, KeyError):
            continue
    return None


def shipped_run_summary(run: ShippedRun) -> ShippedRunSummary:
    r = run.result
    return ShippedRunSummary(
        key=run.key, url=run.href, api_url=f"/api/v1/benchmarks/shipped/{run.key}", preset=r.preset,
        accelerator=r.accelerator, node=r.node, world_size=r.world_size, device_name=r.device_name,
        measured_at=r.measured_at, metrics=len(r.metrics), software=r.software,
        median_abs_error=_median_abs_error(r.metrics),
    )  # fmt: skip


def shipped_run_out(run: ShippedRun) -> BenchmarkRunOut:
    """A shipped file in the shape of a stored run (id 0), for the run page."""
    r = run.result
    samples = [
        BenchmarkMetricOut(metric=m.metric, unit=m.unit, rank=m.rank, measured=m.measured, predicted=m.predicted,
                           relative_error=relative_error(m.measured, m.predicted))
        for m in r.metrics
    ]  # fmt: skip
    summary = shipped_run_summary(run)
    return BenchmarkRunOut(
        id=0, preset=r.preset, accelerator=r.accelerator, node=r.node, world_size=r.world_size,
        device_name=r.device_name, measured_at=r.measured_at, created_at=r.measured_at, metrics=len(r.metrics),
        median_abs_error=summary.median_abs_error, config={**r.config, "nodes": r.nodes}, hardware=r.hardware,
        software=r.software, notes=r.notes, samples=samples,
    )  # fmt: skip


def calibration_in_use(catalog: Catalog) -> list[CalibrationFigureOut]:
    """Every figure the catalog's calibration replaces, per accelerator (reference node, one GPU)."""
    cal = catalog.calibrations
    if cal is None:
        return []
    return [
        CalibrationFigureOut(
            accelerator=slug,
            part=c.part,
            field=c.field,
            default=c.default,
            value=c.value,
            run=c.run,
            run_url=c.run_href,
            measured_at=c.measured_at,
            method=c.method,
        )  # fmt: skip
        for slug in sorted(cal.fits)
        for c in active_calibration(catalog, cal, slug)
    ]


def active_calibration(catalog: Catalog, calibrations: Calibrations, accelerator: str) -> list[Change]:
    """The figures the estimator currently replaces on ``accelerator`` (reference node, one GPU)."""
    cluster = reference_cluster(catalog, accelerator)
    return apply_calibration(cluster, calibrations)[1] if cluster is not None else []
