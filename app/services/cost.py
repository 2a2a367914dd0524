"""Days and dollars: the training cost of a plan for every pricing option, and the monthly bill of a cluster."""

from __future__ import annotations

from app.domain.catalog import Catalog
from app.domain.cost.cloud import instance_for_accelerator
from app.domain.cost.inputs import CostInputError
from app.domain.cost.monthly import MonthlyCost, monthly_cost
from app.domain.cost.training import TrainingCost
from app.schemas import CostRequest, MonthlyCostRequest
from app.services.errors import InputError, field_error
from app.services.scenario import known_node, run_scenario


def run_cost(catalog: Catalog, request: CostRequest) -> TrainingCost:
    """Days and dollars of "train request.tokens tokens with this plan" for every pricing option, with failures,
    checkpoints and goodput: the pipeline's cost (:func:`app.services.scenario.run_scenario`). The plan is
    estimated on the AWS instance and on the self-build server, so each option uses the throughput of the
    hardware it pays for; a priced node that cannot run the plan is an InputError."""
    scenario = run_scenario(catalog, request, document=False)
    cost = scenario.raise_cost_errors()
    # the throughput behind every option: say what calibrated it (the API's and the CLI's answer)
    return cost.model_copy(update={"assumptions": (scenario.calibration.assumption, *cost.assumptions)})


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
            known_node(catalog, slug, field)
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
        raise InputError([field_error(field, str(exc), "value_error.cost")]) from None
