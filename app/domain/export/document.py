"""The capplan plan document (``"schema": "capplan.plan/v1"``): one self-contained JSON file per plan.

It holds what an estimate needs to be repeated — the model (a preset slug, or the Hugging Face config.json it
was imported from), the hardware, the :class:`~app.domain.plan.Plan` and the tokens to train — plus two
snapshots that make every export a pure function of the document: the resolved architecture (layer count,
widths, heads… for Megatron and torchtitan) and the node facts the launchers need (GPUs per host, fabric
kind, EFA interfaces, vCPUs). ``estimate`` is the summary at export time and ``cost`` (when tokens were given
and the plan could be priced) the run's cost per pricing option — cash and amortised $, $ per million tokens, days
after failures, the cheapest on each basis and the fastest, with the prices' day, region and every figure used;
both are informative and are not re-checked when the document is read back.

:func:`request_fields` turns a document back into the fields of an estimate request, so that estimating a
saved plan reproduces the estimate it was saved with (same catalog, same numbers).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from app.domain.cost.summary import CostSummary
from app.domain.estimator.estimate import Estimate
from app.domain.estimator.hardware import Fabric, Node
from app.domain.estimator.overrides import OVERRIDE_KEYS
from app.domain.estimator.plan import Plan, plan_violations
from app.domain.model.architecture import Architecture
from app.domain.provenance import SLUG_PATTERN, Frozen

PLAN_SCHEMA = "capplan.plan/v1"
MAX_PLAN_DOCUMENT_BYTES = 2_000_000
RACK_SCALE_TRAY_GPUS = 4
"""GPUs per host (one OS, one torchrun) on rack-scale nodes: a GB200/GB300 NVL72 compute tray holds 4 GPUs
(18 trays per 72-GPU rack, data/nodes.toml). Nodes of up to 8 GPUs are one host each."""

JOB_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-]*$"
"""Job names and slugs go into shell scripts, #SBATCH lines and YAML: letters, digits, '.', '_', '-' only."""

FabricKind = Literal["nvlink", "pcie", "infiniband", "efa", "roce"]


class PlanDocumentError(ValueError):
    """A plan document that cannot be used; ``field`` is the dotted path of the offending value."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class ModelSection(Frozen):
    """Exactly one of ``preset`` (catalog slug) or ``hf_config`` (the imported config.json), and the resolved
    architecture either way (a snapshot: the preset slug or the config stays authoritative for estimates)."""

    preset: str | None = Field(
        default=None, pattern=SLUG_PATTERN, max_length=64, description="architecture preset slug"
    )
    hf_config: dict[str, Any] | None = Field(default=None, description="the Hugging Face config.json")
    architecture: Architecture


class HardwareSection(Frozen):
    gpu: str = Field(pattern=SLUG_PATTERN, max_length=64, description="accelerator slug")
    node: str = Field(pattern=SLUG_PATTERN, max_length=64, description="node or instance slug")
    fabric: str = Field(pattern=SLUG_PATTERN, max_length=64, description="scale-out fabric slug")
    fabric_kind: FabricKind
    gpus: int = Field(ge=1, le=1_048_576)
    gpus_per_node: int = Field(ge=1, le=4096)
    gpus_per_host: int = Field(ge=1, le=64, description="GPUs under one OS (one torchrun per host)")
    nvlink_domain_size: int = Field(ge=1, le=4096)
    scale_out_nics: int = Field(ge=1, le=4096, description="compute-fabric NICs per node")
    vcpus_per_host: int | None = Field(default=None, ge=1, le=100_000)
    oversubscription: float = Field(default=1.0, ge=1.0, le=64.0)
    power_limit_w: float | None = Field(default=None, gt=0, le=5000)

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)

    @property
    def nics_per_host(self) -> int:
        return max(1, self.scale_out_nics * self.gpus_per_host // self.gpus_per_node)


class EstimateSummary(Frozen):
    """The estimate when the plan was exported."""

    fits: bool
    peak_memory_bytes: int
    usable_memory_bytes: int
    margin_bytes: int
    dominant_term: str
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    parameters_total: int
    parameters_active: int
    time_to_train_days: float | None = None
    calibration: str | None = Field(
        default=None, max_length=2000, description="what calibrated the estimate, e.g. 'calibrated by run 12'"
    )
    checkpoint_interval_s: float | None = Field(
        default=None,
        gt=0,
        le=30 * 86_400,
        description="the reliability model's checkpoint interval (Young/Daly) for this job, seconds",
    )


class PlanDocument(Frozen):
    """A capplan plan: what to train, on what, how, and what the estimate said."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_id: Literal["capplan.plan/v1"] = Field(
        alias="schema", description="document schema and version: capplan.plan/v1"
    )
    name: str = Field(pattern=JOB_NAME_PATTERN, max_length=120, description="job name")
    model: ModelSection
    hardware: HardwareSection
    plan: Plan
    tokens: float | None = Field(default=None, gt=0, le=1e16, description="tokens to train")
    allow_tp_across_nodes: bool = False
    figure_overrides: dict[Annotated[str, Field(max_length=80)], Annotated[float, Field(ge=0, le=1e15)]] = (
        Field(
            default_factory=dict,
            max_length=40,
            description="catalog figures replaced for this plan ('part.field')",
        )
    )
    calibrated: bool = Field(default=True, description="estimated with the calibration from benchmark runs")
    estimate: EstimateSummary
    cost: CostSummary | None = Field(
        default=None,
        description="the run's cost per pricing option when the plan was exported (needs tokens)",
    )

    @property
    def arch(self) -> Architecture:
        return self.model.architecture

    @property
    def steps(self) -> int | None:
        """Optimizer steps to train ``tokens`` (None when no token count was given)."""
        if self.tokens is None:
            return None
        return max(1, math.ceil(self.tokens / self.plan.tokens_per_step))


def job_name(arch_slug: str, gpus: int, gpu: str) -> str:
    return f"{arch_slug}-{gpus}x{gpu}"


def build_plan_document(
    *,
    arch: Architecture,
    node: Node,
    fabric: Fabric,
    estimate: Estimate,
    preset: str | None,
    hf_config: dict[str, Any] | None,
    oversubscription: float = 1.0,
    power_limit_w: float | None = None,
    tokens: float | None = None,
    allow_tp_across_nodes: bool = False,
    figure_overrides: dict[str, float] | None = None,
    calibrated: bool = True,
    checkpoint_interval_s: float | None = None,
    calibration: str | None = None,
    cost: CostSummary | None = None,
) -> PlanDocument:
    """The document for an estimate that was just made (``node`` and ``fabric`` as the estimate resolved them);
    ``calibration`` says which calibration its figures carry (e.g. "calibrated by run 3")."""
    per_node = node.accelerators_per_node
    per_host = per_node if per_node <= 8 else math.gcd(per_node, RACK_SCALE_TRAY_GPUS)
    vcpus = node.vcpus // (per_node // per_host) if node.vcpus else None
    return PlanDocument(
        schema_id=PLAN_SCHEMA,
        name=job_name(arch.slug, estimate.gpus, estimate.accelerator),
        model=ModelSection(
            preset=preset,
            hf_config=hf_config,
            architecture=arch.model_copy(update={"provenance": {}}),
        ),
        hardware=HardwareSection(
            gpu=estimate.accelerator,
            node=node.slug,
            fabric=fabric.slug,
            fabric_kind=fabric.kind,
            gpus=estimate.gpus,
            gpus_per_node=per_node,
            gpus_per_host=per_host,
            nvlink_domain_size=node.nvlink_domain_size,
            scale_out_nics=node.scale_out_nics,
            vcpus_per_host=vcpus or None,
            oversubscription=oversubscription,
            power_limit_w=power_limit_w,
        ),
        plan=estimate.plan,
        tokens=tokens,
        allow_tp_across_nodes=allow_tp_across_nodes,
        figure_overrides=dict(figure_overrides or {}),
        calibrated=calibrated,
        estimate=EstimateSummary(
            fits=estimate.fits,
            peak_memory_bytes=estimate.peak_memory_bytes,
            usable_memory_bytes=estimate.usable_memory_bytes,
            margin_bytes=estimate.margin_bytes,
            dominant_term=estimate.dominant_term,
            step_time_s=estimate.step_time_s,
            tokens_per_s=estimate.tokens_per_s,
            tokens_per_s_per_gpu=estimate.tokens_per_s_per_gpu,
            mfu=estimate.mfu,
            hfu=estimate.hfu,
            parameters_total=estimate.parameters_total,
            parameters_active=estimate.parameters_active,
            time_to_train_days=estimate.time_to_train_days,
            calibration=calibration,
            checkpoint_interval_s=checkpoint_interval_s,
        ),
        cost=cost,
    )


def plan_document_problems(doc: PlanDocument) -> list[tuple[str, str]]:
    """Inconsistencies pydantic cannot see: ``(dotted field, message)`` pairs; empty = usable."""
    out: list[tuple[str, str]] = []
    model, hw, arch = doc.model, doc.hardware, doc.arch
    if (model.preset is None) == (model.hf_config is None):
        out.append(("model", "give exactly one of model.preset (a preset slug) or model.hf_config"))
    elif model.preset is not None and model.preset != arch.slug:
        out.append(("model.architecture.slug", f"is {arch.slug!r} but model.preset is {model.preset!r}"))
    if hw.gpus_per_node % hw.gpus_per_host:
        out.append(
            ("hardware.gpus_per_host", f"{hw.gpus_per_host} does not divide gpus_per_node {hw.gpus_per_node}")
        )
    if hw.gpus_per_node % hw.nvlink_domain_size:
        out.append(
            (
                "hardware.nvlink_domain_size",
                f"{hw.nvlink_domain_size} does not divide gpus_per_node {hw.gpus_per_node}",
            )
        )
    violations = plan_violations(
        doc.plan, n_layers=arch.n_layers, n_heads=arch.n_heads, n_kv_heads=arch.n_kv_heads, n_experts=arch.n_experts,
        gpus=hw.gpus, gpus_per_node=hw.gpus_per_node, nvlink_domain_size=hw.nvlink_domain_size,
        allow_tp_across_nodes=doc.allow_tp_across_nodes, tied_embeddings=arch.tied_embeddings,
        mla=arch.attention == "mla",
    )  # fmt: skip
    out.extend((f"plan.{v.field}", f"{v.message} (fix: {v.fix})") for v in violations)
    out.extend(
        (f"figure_overrides.{key}", f"cannot override {key!r}; overridable: {', '.join(OVERRIDE_KEYS)}")
        for key in doc.figure_overrides
        if key not in OVERRIDE_KEYS
    )
    return out


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc)


def validate_plan_document(data: Any) -> PlanDocument:
    """A checked :class:`PlanDocument` from parsed JSON; raises :class:`PlanDocumentError` naming the field."""
    if not isinstance(data, dict):
        raise PlanDocumentError("", f"a plan document is a JSON object, got {type(data).__name__}")
    schema = data.get("schema")
    if schema != PLAN_SCHEMA:
        found = "missing" if schema is None else f"{schema!r}"
        raise PlanDocumentError("schema", f"expected {PLAN_SCHEMA!r}, found {found}; not a capplan plan file")
    try:
        doc = PlanDocument.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise PlanDocumentError(_location(first["loc"]), first["msg"]) from None
    problems = plan_document_problems(doc)
    if problems:
        raise PlanDocumentError(*problems[0])
    return doc


def parse_plan_document(text: str | bytes) -> PlanDocument:
    """Read a plan document from JSON text; raises :class:`PlanDocumentError` with the field and reason."""
    if len(text) > MAX_PLAN_DOCUMENT_BYTES:
        raise PlanDocumentError("", f"larger than {MAX_PLAN_DOCUMENT_BYTES} bytes; not a capplan plan file")
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanDocumentError("", f"not valid JSON: {exc}") from None
    return validate_plan_document(data)


def plan_document_json(doc: PlanDocument) -> str:
    """The canonical text of a document (what ``export_plan(doc, "json")`` writes)."""
    return json.dumps(doc.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False) + "\n"


def request_fields(doc: PlanDocument) -> dict[str, Any]:
    """The fields of an estimate request (``app.schemas.EstimateRequest``) that reproduce this plan."""
    hw = doc.hardware
    model: dict[str, Any] = (
        {"model": doc.model.preset} if doc.model.preset is not None else {"hf_config": doc.model.hf_config}
    )
    return {
        **model,
        "gpu": hw.gpu,
        "node": hw.node,
        "fabric": hw.fabric,
        "gpus": hw.gpus,
        **doc.plan.model_dump(),
        "tokens": doc.tokens,
        "oversubscription": hw.oversubscription,
        "power_limit_w": hw.power_limit_w,
        "allow_tp_across_nodes": doc.allow_tp_across_nodes,
        "figure_overrides": dict(doc.figure_overrides),
        "calibrated": doc.calibrated,
    }
