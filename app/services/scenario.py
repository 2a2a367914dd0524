"""THE pipeline: one scenario (model, hardware, plan, tokens, pricing options, overrides, calibration) in, one
:class:`ScenarioResult` out.

The estimate runs once per node it is needed on (the user's node; the cloud instance and the self-build server
that are priced, when they differ), then reliability (goodput, checkpoint interval), the cost of every option and
the plan document are computed from those estimates, once. The API, the planner, the scenario page, the
comparison, the cost table and the search's re-estimate of its winner render this result; nothing recomputes it.

Days are stated with what they include: ``days_before_failures`` (tokens ÷ tokens/s) and, per option, days after
failures (goodput). Cost per token is in $ per million tokens everywhere.

The cost model, the reliability report and the export package are imported by the steps that use them: the search's
re-estimate of its winner without tokens (`capplan plan` as usually run) loads none of the three.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.domain.catalog import Catalog
from app.domain.catalog.clock import today
from app.domain.cost.cloud import instance_for_accelerator
from app.domain.cost.inputs import CostInputError, CostOption, CostOverrides
from app.domain.estimator.estimate import Estimate
from app.domain.reliability.formulas import plan_checkpoint_bytes_per_param
from app.domain.search.run_pricing import RunFigures
from app.schemas import CostRequest, EstimateRequest
from app.services.errors import InputError, field_error
from app.services.estimate import (
    Calibration,
    calibrated_estimate,
    model_source,
    resolve_architecture,
    with_calibration,
)

if TYPE_CHECKING:
    from app.domain.cost.summary import CostSummary
    from app.domain.cost.training import OptionCost, TrainingCost
    from app.domain.export import PlanDocument
    from app.domain.reliability.report import ReliabilityReport

MILLION = 1e6


def usd_per_million_tokens(usd: float | None, tokens: float) -> float | None:
    """The one unit of cost per token: $ per million tokens."""
    return None if usd is None else usd / (tokens / MILLION)


@dataclass(frozen=True)
class ScenarioResult:
    """Everything one scenario yields. ``estimate`` is on the request's node; ``cloud_estimate`` and
    ``self_build_estimate`` on the nodes that are priced (the same object when the node is the same)."""

    request: EstimateRequest
    estimate: Estimate
    calibration: Calibration
    overrides: CostOverrides
    cloud_estimate: Estimate | None = None
    self_build_estimate: Estimate | None = None
    cost: TrainingCost | None = None
    cost_errors: tuple[dict, ...] = ()
    reliability: ReliabilityReport | None = None
    document: PlanDocument | None = None
    estimates_run: int = 1
    notes: tuple[str, ...] = field(default=())

    @property
    def days_before_failures(self) -> float | None:
        """Tokens ÷ tokens/s on the request's node: compute only, no failures or checkpoints."""
        return self.estimate.time_to_train_days

    @property
    def checkpoint_interval_s(self) -> float | None:
        return self.reliability.checkpoint_interval_s if self.reliability else None

    @property
    def estimate_with_calibration(self) -> Estimate:
        """The estimate with its calibration as the last assumption (the API's and the CLI's shape)."""
        return with_calibration(self.estimate, self.calibration)

    def modelled_estimate(self, option: CostOption | str) -> Estimate:
        """The estimate an option's days rest on (the node it pays for), with its calibration."""
        est = self.self_build_estimate if CostOption(option) is CostOption.self_build else self.cloud_estimate
        return with_calibration(est or self.estimate, self.calibration)

    def option(self, option: CostOption | str) -> OptionCost | None:
        if self.cost is None:
            return None
        wanted = CostOption(option)
        return next((o for o in self.cost.options if o.option is wanted), None)

    def figures(self, option: CostOption | str) -> RunFigures | None:
        """Days (before and after failures) and dollars of one option, as the search states them."""
        row = self.option(option)
        if row is None or self.cost is None or row.tokens_per_s is None:
            return None
        return RunFigures(
            days_before_failures=self.cost.tokens / row.tokens_per_s / 86_400, days=row.days,
            goodput=row.goodput or 1.0, usd=row.total_usd,
            usd_per_million_tokens=usd_per_million_tokens(row.total_usd, self.cost.tokens),
        )  # fmt: skip

    @property
    def cost_summary(self) -> CostSummary | None:
        """The cost per option as a buyer reads it (cash and amortised, $/M tokens, days, ties), prices dated."""
        if self.cost is None:
            return None
        if self.document is not None and self.document.cost is not None:
            return self.document.cost
        return buyer_cost(self.cost)

    def raise_cost_errors(self) -> TrainingCost:
        if self.cost is None:
            raise InputError(
                list(self.cost_errors) or [field_error("tokens", "no cost without tokens", "value_error")]
            )
        return self.cost


def buyer_cost(cost: TrainingCost) -> CostSummary:
    """:func:`cost_summary` of ``cost``: prices dated by the day asked for (``prices_as_of``), else today."""
    from app.domain.cost.summary import cost_summary

    return cost_summary(cost, prices_as_of=today())


def priced_instance(catalog: Catalog, accelerator: str, node: str, overrides: CostOverrides) -> str:
    """The AWS instance the cloud options price: the override, else the request's node when it is an AWS
    instance, else the accelerator's instance. Raises CostInputError."""
    if overrides.instance is not None:
        return overrides.instance
    own = catalog.hardware.node(node)
    if own.kind == "cloud-instance" and own.provider == "aws" and own.accelerator == accelerator:
        try:
            catalog.cost.instance_price(own.slug)
            return own.slug
        except KeyError:
            pass
    return instance_for_accelerator(catalog.cost, catalog.hardware, accelerator)


def self_build_server(catalog: Catalog, accelerator: str) -> str | None:
    from app.domain.cost.selfbuild import self_build_node_for

    return self_build_node_for(catalog.hardware, catalog.cost, accelerator)


def known_node(catalog: Catalog, slug: str, field_name: str) -> None:
    try:
        catalog.hardware.node(slug)
    except KeyError as exc:
        raise InputError([field_error(field_name, str(exc), "value_error.unknown_slug")]) from None


def estimate_on_priced_node(
    catalog: Catalog, request: EstimateRequest, base: Estimate, node: str, *, what: str, field_name: str
) -> Estimate:
    """The same plan on ``node`` (its own fabric): ``base`` when it is already there. A plan the priced node
    cannot run is an InputError naming the node and the reason, never a silent fallback. The track record is
    ``base``'s: it depends on the plan and the GPU, not on the node."""
    if node == base.node:
        return base
    try:
        on_node = calibrated_estimate(catalog, request, node=node, track=False)[0]
        return on_node.model_copy(update={"track_record": base.track_record})
    except InputError as exc:
        reasons = "; ".join(e["msg"] for e in exc.errors)
        raise InputError(
            [
                field_error(
                    field_name, f"the plan cannot run on {node}, {what}: {reasons}", "value_error.priced_node"
                )
            ]
        ) from None


def run_scenario(
    catalog: Catalog,
    request: EstimateRequest,
    *,
    overrides: CostOverrides | None = None,
    options: Sequence[CostOption] | None = None,
    cost: bool = True,
    document: bool = True,
) -> ScenarioResult:
    """Run the pipeline once. The estimate's errors raise InputError; the cost's are kept in ``cost_errors``
    (the planner still shows the estimate), and ``raise_cost_errors`` turns them into the InputError. With neither
    ``cost`` nor ``document`` (the search's re-estimate of its winner) it is the estimate alone: no reliability."""
    if isinstance(request, CostRequest):
        overrides = overrides if overrides is not None else request.overrides
        options = options if options is not None else request.options
    o = overrides or CostOverrides()
    est, calibration = calibrated_estimate(catalog, request, track=cost or document)
    runs = 1
    cloud = own = None
    training: TrainingCost | None = None
    errors: tuple[dict, ...] = ()
    if cost and request.tokens:
        try:
            cloud, own, training, runs = _cost(catalog, request, est, o, options)
        except InputError as exc:
            errors = tuple(exc.errors)
    if training is not None:
        rel = training.reliability
    else:  # the plan's own reliability (goodput, checkpoint interval), for the cost table and the document only
        rel = _reliability(catalog, est, o) if cost or document else None
    doc = _document(catalog, request, est, calibration, rel, training) if document else None
    return ScenarioResult(
        request=request, estimate=est, calibration=calibration, overrides=o, cloud_estimate=cloud,
        self_build_estimate=own, cost=training, cost_errors=errors, reliability=rel, document=doc,
        estimates_run=runs,
    )  # fmt: skip


def _cost(
    catalog: Catalog,
    request: EstimateRequest,
    est: Estimate,
    o: CostOverrides,
    options: Sequence[CostOption] | None,
) -> tuple[Estimate, Estimate | None, TrainingCost, int]:
    from app.domain.cost.training import TrainingJob, training_cost

    if o.instance is not None:
        known_node(catalog, o.instance, "overrides.instance")
    wanted = tuple(options) if options else tuple(CostOption)
    runs = 1
    try:
        instance = priced_instance(catalog, est.accelerator, est.node, o)
        server = self_build_server(catalog, est.accelerator) if CostOption.self_build in wanted else None
    except CostInputError as exc:
        raise InputError([field_error(exc.field, str(exc), "value_error.cost")]) from None
    o = o if o.instance == instance else o.model_copy(update={"instance": instance})
    field_name = "overrides.instance" if o.instance else "node"
    cloud = estimate_on_priced_node(
        catalog,
        request,
        est,
        instance,
        what="the AWS instance priced for the cloud options",
        field_name=field_name,
    )
    runs += cloud is not est
    own = None
    if server is not None:
        own = estimate_on_priced_node(
            catalog, request, est, server, what="the server priced for self-build", field_name="node"
        )
        runs += own is not est and own is not cloud
    job = TrainingJob(
        model=est.model, accelerator=est.accelerator, gpus=est.gpus, parameters=est.parameters_total,
        tokens=request.tokens, cloud_tokens_per_s=cloud.tokens_per_s,
        self_build_tokens_per_s=own.tokens_per_s if own else None,
        plan_checkpoint_bytes_per_param=plan_checkpoint_bytes_per_param(est.plan), fits=cloud.fits,
        seq_len=est.plan.seq_len, cloud_estimate_node=cloud.node, self_build_estimate_node=own.node if own else None,
    )  # fmt: skip
    try:
        result = training_cost(
            catalog.cost, catalog.hardware, job, options=options, overrides=o,
            arch=resolve_architecture(catalog, request),
        )  # fmt: skip
    except CostInputError as exc:
        raise InputError([field_error(exc.field, str(exc), "value_error.cost")]) from None
    return cloud, own, result, runs


def _reliability(catalog: Catalog, est: Estimate, o: CostOverrides) -> ReliabilityReport | None:
    from app.domain.reliability.report import reliability_report

    node = catalog.hardware.node(est.node)
    try:
        return reliability_report(
            catalog.cost, gpus=est.gpus, nodes=math.ceil(est.gpus / node.accelerators_per_node),
            parameters=est.parameters_total, plan_bytes_per_param=plan_checkpoint_bytes_per_param(est.plan),
            overrides=o.reliability,
        )  # fmt: skip
    except (KeyError, ValueError):
        return None


def _document(
    catalog: Catalog,
    request: EstimateRequest,
    est: Estimate,
    calibration: Calibration,
    rel: ReliabilityReport | None,
    training: TrainingCost | None,
) -> PlanDocument:
    """The plan document (capplan.plan/v1): plan, hardware and estimate, with the reliability model's checkpoint
    interval, which every export turns into its checkpoint cadence in steps, and the run's cost per pricing option
    when it was priced. The export package is imported here, by the scenarios that ask for a document (the search's
    winner and `capplan plan` do not)."""
    from app.domain.export import build_plan_document

    preset, hf_config = model_source(request)
    return build_plan_document(
        arch=resolve_architecture(catalog, request),
        node=catalog.hardware.node(est.node),
        fabric=catalog.hardware.fabric(est.scale_out_fabric),
        estimate=est,
        preset=preset,
        hf_config=hf_config,
        oversubscription=request.oversubscription,
        power_limit_w=request.power_limit_w,
        tokens=request.tokens,
        allow_tp_across_nodes=request.allow_tp_across_nodes,
        figure_overrides=request.figure_overrides,
        calibrated=request.calibrated,
        checkpoint_interval_s=rel.checkpoint_interval_s if rel else None,
        calibration=calibration.label,
        cost=buyer_cost(training) if training is not None else None,
    )
