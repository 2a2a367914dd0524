"""Export a plan as runnable configuration: one pure function, one plan document, ten formats.

:func:`export_plan` turns a :class:`PlanDocument` into an :class:`ExportedFile` (filename, media type,
text). It reads nothing but the document, so the CLI, the API and the pages produce byte-identical files
for the same plan. Build the document from an estimate with :func:`build_plan_document`; read one back with
:func:`parse_plan_document`.

Formats: ``json`` (the plan document itself), ``torchtitan`` (a torchtitan 0.3 config module),
``torchrun`` (launch command), ``megatron`` (Megatron-LM arguments), ``deepspeed`` (DeepSpeed config JSON),
``slurm`` (batch script), ``k8s`` (Kubeflow Trainer v2 TrainJob with a checkpoint claim), ``k8s-v1`` (the older
PyTorchJob), ``prometheus`` (alert rules for the training job, thresholds from the estimate) and ``grafana`` (a dashboard for the job with the predictions as reference lines). A format whose
framework cannot run the plan (``app.domain.estimator.capabilities``) raises :class:`FrameworkRefusal` naming the limit
and the nearest runnable plan; where a framework cannot express a detail of the plan the file says so in a
comment and :attr:`ExportedFile.notes` lists it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from app.domain.estimator.capabilities import capability_violations
from app.domain.estimator.plan import Fp8Recipe, Framework, Precision
from app.domain.export.deepspeed import deepspeed_json
from app.domain.export.document import (
    PLAN_SCHEMA,
    EstimateSummary,
    HardwareSection,
    ModelSection,
    PlanDocument,
    PlanDocumentError,
    build_plan_document,
    parse_plan_document,
    plan_document_json,
    plan_document_problems,
    request_fields,
    validate_plan_document,
)
from app.domain.export.kubernetes import pytorchjob_yaml, trainjob_yaml
from app.domain.export.launch import layout, torchrun_args
from app.domain.export.megatron import megatron_args, megatron_script
from app.domain.export.monitoring import grafana_dashboard, prometheus_rules
from app.domain.export.scripts import slurm_script, torchrun_script
from app.domain.export.torchtitan import TORCHTITAN_MODELS, TORCHTITAN_VERSION, torchtitan_config_module
from app.domain.provenance import Frozen


class ExportFormat(StrEnum):
    json = "json"
    torchtitan = "torchtitan"
    torchrun = "torchrun"
    megatron = "megatron"
    deepspeed = "deepspeed"
    slurm = "slurm"
    k8s = "k8s"
    k8s_v1 = "k8s-v1"
    prometheus = "prometheus"
    grafana = "grafana"


class ExportedFile(Frozen):
    filename: str
    media_type: str
    content: str
    notes: tuple[str, ...] = ()


def _json(doc: PlanDocument) -> tuple[str, list[str]]:
    return plan_document_json(doc), []


_WRITERS: dict[ExportFormat, tuple[str, str, Callable[[PlanDocument], tuple[str, list[str]]]]] = {
    ExportFormat.json: ("plan.json", "application/json", _json),
    ExportFormat.torchtitan: ("torchtitan_config.py", "text/x-python", torchtitan_config_module),
    ExportFormat.torchrun: ("launch.sh", "text/x-shellscript", torchrun_script),
    ExportFormat.megatron: ("megatron_args.sh", "text/x-shellscript", megatron_script),
    ExportFormat.deepspeed: ("ds_config.json", "application/json", deepspeed_json),
    ExportFormat.slurm: ("train.sbatch", "text/x-shellscript", slurm_script),
    ExportFormat.k8s: ("trainjob.yaml", "application/yaml", trainjob_yaml),
    ExportFormat.k8s_v1: ("pytorchjob.yaml", "application/yaml", pytorchjob_yaml),
    ExportFormat.prometheus: ("training-alerts.rules.yml", "application/yaml", prometheus_rules),
    ExportFormat.grafana: ("training-dashboard.json", "application/json", grafana_dashboard),
}

EXPORT_FORMATS: tuple[str, ...] = tuple(f.value for f in ExportFormat)

FORMAT_FRAMEWORK: dict[ExportFormat, Framework] = {
    ExportFormat.torchtitan: Framework.fsdp2,
    ExportFormat.megatron: Framework.megatron,
    ExportFormat.deepspeed: Framework.deepspeed,
}
"""Formats that configure one framework; the launchers (torchrun, slurm, k8s) run the plan's own."""

# Launchers: they start the plan's own framework on what its format writes
LAUNCH_FORMATS = frozenset({ExportFormat.torchrun, ExportFormat.slurm, ExportFormat.k8s, ExportFormat.k8s_v1})
# Formats whose command line is Megatron-LM's pretrain_gpt.py arguments for a Megatron plan
MEGATRON_LM_FORMATS = LAUNCH_FORMATS | {ExportFormat.megatron}
MEGATRON_LM_NO_FP8_ATTENTION = (
    "Megatron-LM core_v0.16.1's pretrain_gpt.py has no command-line flag for FP8 attention: megatron-core's "
    "TransformerConfig.fp8_dot_product_attention is set by NeMo / Megatron-Bridge recipes (as NVIDIA's MLPerf "
    "configurations do), not by Megatron-LM's arguments (fix: export the plan with fp8_attention off, or set "
    "fp8_dot_product_attention in a Megatron-Bridge recipe)"
)

# Formats that run a FSDP2 plan through the exported torchtitan config (the launchers start torchtitan.train on it)
TORCHTITAN_FORMATS = LAUNCH_FORMATS | {ExportFormat.torchtitan}
TORCHTITAN_NO_TENSORWISE = (
    f"torchtitan {TORCHTITAN_VERSION}'s Float8LinearConverter offers the rowwise and rowwise_with_gw_hp recipes "
    "only: torchao's tensorwise scaling is not reachable from its config (fix: export the plan with fp8_recipe "
    "rowwise, torchtitan's default, and read its estimate)"
)


class FrameworkRefusal(PlanDocumentError):
    """The format's framework cannot run the plan (``app.domain.estimator.capabilities``)."""


class CommandLineRefusal(FrameworkRefusal):
    """The framework runs the plan, but the format's command line cannot ask for it (:func:`command_line_problems`)."""


def command_line_problems(doc: PlanDocument, key: ExportFormat) -> list[tuple[str, str]]:
    """What the format's command line cannot express of a plan its framework runs: (dotted field, message)."""
    fw = FORMAT_FRAMEWORK.get(key, doc.plan.framework)
    if fw is Framework.megatron and key in MEGATRON_LM_FORMATS and doc.plan.fp8_attention:
        return [("plan.fp8_attention", MEGATRON_LM_NO_FP8_ATTENTION)]
    if (
        fw is Framework.fsdp2 and key in TORCHTITAN_FORMATS and doc.plan.precision is Precision.fp8
        and doc.plan.fp8_recipe_on(fw) is Fp8Recipe.tensorwise
    ):  # fmt: skip
        return [("plan.fp8_recipe", TORCHTITAN_NO_TENSORWISE)]
    return []


def framework_problems(doc: PlanDocument, key: ExportFormat) -> list[tuple[str, str]]:
    """What the format's framework refuses in this plan: (dotted field, message with the nearest plan); then what
    its command line cannot express (:func:`command_line_problems`)."""
    return _capability_problems(doc, key) + command_line_problems(doc, key)


def _capability_problems(doc: PlanDocument, key: ExportFormat) -> list[tuple[str, str]]:
    fw = FORMAT_FRAMEWORK.get(key, doc.plan.framework)
    if key is ExportFormat.torchtitan and doc.arch.slug not in TORCHTITAN_MODELS:
        return [
            (
                "model",
                f"torchtitan {TORCHTITAN_VERSION} ships no model for {doc.arch.slug} (it ships "
                f"{', '.join(TORCHTITAN_MODELS)}): register the model in torchtitan, or export megatron",
            )
        ]
    return [
        (f"plan.{v.field}", f"{v.message} (fix: {v.fix})")
        for v in capability_violations(doc.plan, fw, tied_embeddings=doc.arch.tied_embeddings)
    ]


def export_plan(doc: PlanDocument, fmt: ExportFormat | str) -> ExportedFile:
    """The file for ``fmt``. Raises :class:`PlanDocumentError` for an inconsistent document and
    ``ValueError`` for an unknown format (the message lists the known ones)."""
    try:
        key = ExportFormat(fmt)
    except ValueError:
        raise ValueError(
            f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}"
        ) from None
    problems = plan_document_problems(doc)
    if problems:
        raise PlanDocumentError(*problems[0])
    for refused, error in (
        (_capability_problems(doc, key), FrameworkRefusal),
        (command_line_problems(doc, key), CommandLineRefusal),
    ):
        if refused:
            raise error(*refused[0])
    filename, media_type, write = _WRITERS[key]
    content, notes = write(doc)
    return ExportedFile(filename=filename, media_type=media_type, content=content, notes=tuple(notes))


__all__ = [
    "EXPORT_FORMATS",
    "PLAN_SCHEMA",
    "EstimateSummary",
    "ExportFormat",
    "ExportedFile",
    "FORMAT_FRAMEWORK",
    "CommandLineRefusal",
    "FrameworkRefusal",
    "HardwareSection",
    "ModelSection",
    "PlanDocument",
    "PlanDocumentError",
    "build_plan_document",
    "export_plan",
    "command_line_problems",
    "framework_problems",
    "layout",
    "megatron_args",
    "parse_plan_document",
    "plan_document_json",
    "plan_document_problems",
    "request_fields",
    "torchrun_args",
    "validate_plan_document",
]
