"""The planner (home page): one GET form whose query string is the whole scenario; results update in place.

``GET /`` renders the page, or only ``{% block results %}`` for htmx partial requests (with out-of-band field
messages). Invalid input answers 422 with the user's values and a message per field. Config upload and
exports are plain form posts / links, so everything works without JavaScript.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.deps import get_catalog, get_session
from app.domain.catalog import Catalog
from app.domain.cost.monthly import MonthlyCost
from app.domain.cost.training import TrainingCost
from app.domain.estimator.estimate import Assumption, Estimate
from app.domain.estimator.plan import (
    CPCommType,
    Fp8Recipe,
    Framework,
    MoeDispatcher,
    Offload,
    Optimizer,
    Precision,
    Recompute,
    RecomputeModule,
    Sharding,
)
from app.domain.estimator.schedule import Schedule, ScheduleError, stage_times_from_rank
from app.domain.estimator.schedule_sample import ScheduleFigures, sampled_schedule
from app.domain.export import EXPORT_FORMATS, CommandLineRefusal, ExportFormat, PlanDocumentError, export_plan
from app.domain.model.counts import parameter_counts
from app.domain.model.hf_import import IMPORT_AS_KEY, LLAMA_STYLE_ASSUMPTIONS
from app.schemas import MonthlyCostRequest, load_json_text
from app.services.cost import run_monthly_cost
from app.services.documents import export_document, plan_document_from_request
from app.services.errors import InputError
from app.services.estimate import resolve_architecture
from app.services.scenario import ScenarioResult, run_scenario
from app.web import charts
from app.web.cost_view import aws_and_self_build, ranking_lines
from app.web.forms import (
    CONFIG_REF,
    DEFAULTS,
    FORM_FIELDS,
    HF,
    HUB,
    LAYOUT_FIELDS,
    MAX_HF_CONFIG_CHARS,
    OVERRIDES,
    PlannerInput,
    add_service_errors,
    to_query,
)
from app.web.htmx import is_partial, render
from app.web.plan_start import PLAN_FOR, Opening, form_event, opening_layout
from app.web.security import verify_csrf
from app.web.share import canonical_url, expand_config, link_config, planner_form, shorter_url

if TYPE_CHECKING:
    from app.domain.reliability.report import ReliabilityReport

router = APIRouter(include_in_schema=False)
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
SessionDep = Annotated[Session, Depends(get_session)]
GIB = 1024**3

STEP_FORMULA = (
    "step = m·t_mb + (pp − 1)/vpp·t_mb (bubble) + PP send/recv + exposed DP reduction (once per step) + optimizer; "
    "t_mb = the slowest stage's forward + backward + recompute + exposed TP/CP/EP/FSDP communication"
)


@dataclass(frozen=True)
class Note:
    """A shown number with what explains it: the formula, its inputs, and where the figures come from."""

    label: str
    value: str
    formula: str
    provenance: str = "computed by capplan from the figures below"


def provenance(a: Assumption, catalog: Catalog) -> str:
    if a.source == "override":
        return "your override"
    src = catalog.sources.get(a.source)
    if src is None:
        return {"formula": "formula", "default": "capplan default"}.get(a.source, a.source)
    parts = [f"{src.title} [{src.key}]"]
    if a.as_of or src.date:
        parts.append(f"as of {a.as_of or src.date}")
    if a.confidence:
        parts.append(f"confidence {a.confidence}")
    return " · ".join(parts)


def assumption_rows(assumptions: tuple[Assumption, ...], catalog: Catalog) -> list[dict[str, Any]]:
    rows = []
    for a in assumptions:
        value = a.value
        if a.unit == "bytes" and isinstance(value, int | float):
            value, unit = f"{value / GIB:,.2f}", "GiB"
        else:
            unit = a.unit
        src = catalog.sources.get(a.source)
        rows.append({
            "name": a.name, "value": value, "unit": unit, "source": a.source, "override": a.source == "override",
            "provenance": provenance(a, catalog), "url": src.url if src else None, "note": a.note or "",
            "low": a.confidence == "low",
        })  # fmt: skip
    return rows


def choices(catalog: Catalog) -> dict[str, Any]:
    hw = catalog.hardware
    return {
        "presets": [(a.slug, a.name) for a in catalog.architectures],
        "accelerators": [(a.slug, a.name) for a in hw.accelerators],
        "nodes": [(n.slug, n.name, n.accelerator, n.kind) for n in hw.nodes],
        "fabrics": [(f.slug, f.name) for f in hw.fabrics if not f.is_scale_up],
        "instances": [n.slug for n in hw.nodes if n.kind == "cloud-instance"],
        "precisions": [p.value for p in Precision],
        "optimizers": [o.value for o in Optimizer],
        "frameworks": [f.value for f in Framework],
        "shardings": [s.value for s in Sharding],
        "offloads": [o.value for o in Offload],
        "recomputes": [r.value for r in Recompute],
        "moe_dispatchers": [d.value for d in MoeDispatcher],
        "cp_comm_types": [t.value for t in CPCommType],
        "fp8_recipes": [r.value for r in Fp8Recipe],
        "recompute_modules": [m.value for m in RecomputeModule],
    }


def schedule_for(est: Estimate) -> tuple[Schedule, ScheduleFigures] | None:
    """The pipeline schedule drawn on a sample of the step's micro-batches, with the figures of all of them."""
    plan = est.plan
    ranks = est.step.ranks
    if not ranks:
        return None
    times = [stage_times_from_rank(r.micro_batch_s, r.compute_s, r.recompute_s) for r in ranks]
    if len(times) not in (1, plan.pp):
        times = times[:1]
    try:
        return sampled_schedule(plan.pp, plan.vpp, est.step.micro_batches, times)
    except ScheduleError:
        return None


def model_summary(catalog: Catalog, form: PlannerInput) -> dict[str, Any] | None:
    """The architecture the form names (preset or config.json), with total and active parameters."""
    if form.request is None:
        return None
    try:
        arch = resolve_architecture(catalog, form.request)
    except InputError:
        return None
    counts = parameter_counts(arch)
    return {
        "name": arch.name, "slug": arch.slug, "total": counts.total, "active": counts.active,
        "fields": [
            ("layers", arch.n_layers), ("hidden", arch.hidden_size), ("heads", arch.n_heads),
            ("KV heads", arch.n_kv_heads), ("head dim", arch.head_dim), ("FFN", arch.ffn_hidden_size),
            ("activation", arch.activation), ("vocab", arch.vocab_size), ("tied embeddings", arch.tied_embeddings),
            ("experts", f"{arch.n_experts} (top-{arch.experts_top_k})" if arch.n_experts else "dense"),
            ("max context", arch.max_context),
        ],
    }  # fmt: skip


def _gib(b: float) -> str:
    return f"{b / GIB:,.1f} GiB"


def _low_precision_peak(precision: Precision) -> str:
    """The MFU note's reminder that an FP8 / NVFP4 plan's GEMMs run against a higher peak than the BF16 one MFU
    divides by (NVIDIA's convention), so its MFU can exceed 100 %."""
    if not precision.quantized_gemms:
        return ""
    return (
        f"; the peak is the dense BF16 one (the convention NVIDIA's tables use): this plan's linears run in "
        f"{precision.value.upper()} against {'2×' if precision is Precision.fp8 else '4–6×'} that, so its MFU can "
        "exceed 100 %"
    )


def _track_note(est: Estimate) -> Note:
    """How far off capplan has been, out of sample, on published runs like this plan (track_record.py)."""
    rec = est.track_record
    value = (
        f"±{rec.typical_abs_error:.0%} typical" if rec and rec.typical_abs_error is not None else "unknown"
    )
    return Note("Track record", value, rec.summary if rec else "no out-of-sample record",
                f"cross-validated errors of the last fit ({rec.fit_date if rec else '—'}, data/fitted.toml): each "
                "run's throughput predicted with its source family left out; see /accuracy")  # fmt: skip


def _notes(
    est: Estimate, catalog: Catalog, cost: TrainingCost | None, rel: ReliabilityReport | None
) -> dict[str, Note]:
    """The results panel's figures with their formulas. ``rel`` is the scenario's reliability report: the run
    cost's when it was priced, else the plan's own (failures and checkpoints need no price, so a GPU no offer
    carries, e.g. GB200 or GB300, still gets them)."""
    by_name = {a.name: a for a in est.assumptions}
    peak_prov = provenance(by_name["peak dense BF16"], catalog) if "peak dense BF16" in by_name else ""
    mem_prov = (
        provenance(by_name["usable memory per GPU"], catalog) if "usable memory per GPU" in by_name else ""
    )
    p = est.plan
    peak_stage = (
        est.memory_by_stage[[s.rank for s in est.memory_by_stage].index(est.peak_stage)]
        if est.memory_by_stage
        else None
    )
    notes = {
        "fit": Note(
            "Fit", ("fits" if est.fits else "does not fit") + f", margin {_gib(est.margin_bytes)}",
            f"peak {_gib(est.peak_memory_bytes)} on stage {est.peak_stage} (dominant: {est.dominant_term}) vs "
            f"usable {_gib(est.usable_memory_bytes)}; " + est.memory_formulas.get("fit", ""),
            "usable memory: " + mem_prov,
        ),
        "step": Note("Step time", f"{est.step_time_s:.3g} s", STEP_FORMULA + f"; m = {est.step.micro_batches} "
                     f"micro-batches of {p.micro_batch} × {p.seq_len} tokens, t_mb = {est.step.micro_batch_s:.3g} s"),
        "tokens": Note("Tokens/s", f"{est.tokens_per_s:,.0f}",
                       f"global batch × seq len / step = {p.global_batch} × {p.seq_len} / {est.step_time_s:.3g} s; "
                       f"{est.tokens_per_s_per_gpu:,.0f} per GPU"),
        "mfu": Note("MFU", f"{est.mfu:.1%}",
                    f"model FLOPs/token × tokens/s ÷ (GPUs × peak) = {est.model_flops_per_token:.3g} × "
                    f"{est.tokens_per_s:,.0f} ÷ ({est.gpus} × peak); FLOPs/token: {est.flops_formula}; "
                    f"HFU (with recompute) {est.hfu:.1%}; {est.achieved_tflops_per_gpu:.0f} TFLOP/s per GPU"
                    + _low_precision_peak(p.precision), "peak: " + peak_prov),
        "track": _track_note(est),
        "params": Note("Parameters", f"{est.parameters_total / 1e9:,.1f} B ({est.parameters_active / 1e9:,.1f} B active)",
                       "counted layer by layer from the architecture (embedding, attention, MLP/experts, norms, "
                       "output head unless tied); active = per token (top-k routed + shared experts)"),
    }  # fmt: skip
    if est.time_to_train_days is not None:
        after = (
            next((o for o in cost.options if o.option.value == "on-demand" and o.days), None)
            if cost
            else None
        )
        notes["ttt"] = Note("Time to train", f"{est.time_to_train_days:,.1f} days before failures",
                            f"tokens ÷ tokens/s = {est.tokens_to_train:.3g} ÷ {est.tokens_per_s:,.0f} on {est.node}, "
                            "compute only" + (f"; after failures (goodput {after.goodput:.1%}) {after.days:,.1f} days "
                            f"on-demand on {after.instance} (the cost table)" if after and after.goodput else
                            "; the cost table's days include failures (goodput)"))  # fmt: skip
    if peak_stage is not None:
        notes["peak"] = Note(
            "Peak memory", _gib(peak_stage.total_bytes), est.memory_formulas.get("model states", "")
        )
    if rel is not None:
        rel_prov = {a.name: provenance(a, catalog) for a in rel.assumptions}
        notes["mtbf"] = Note("Job MTBF", f"{rel.job_mtbf_hours:,.1f} h",
                             f"1 / (failures per GPU-hour × GPUs + spot interruptions/h + rollbacks/h) = 1 / "
                             f"({rel.failures_per_gpu_hour:.3g} × {rel.gpus} + {rel.spot_interruptions_per_hour:.3g}"
                             f" + {rel.rollbacks_per_hour:.3g})",
                             "failure rate: " + (f"published run {rel.failure_record}" if rel.failure_record else
                                                 next(iter(rel_prov.values()), "")))  # fmt: skip
        notes["interval"] = Note("Checkpoint interval", f"{rel.checkpoint_interval_s / 60:,.1f} min",
                                 f"{rel.interval_formula}; checkpoint {rel.checkpoint_bytes / 1e12:,.2f} TB, write "
                                 f"{rel.checkpoint_write_s:,.0f} s ({rel.checkpoint_mode}), blocking {rel.checkpoint_blocking_s:,.1f} s"
                                 + (f" (snapshot to host memory) + {rel.background_slowdown:.0%} slower training for the "
                                    f"{rel.background_write_s:,.0f} s background write = {rel.checkpoint_overhead_s:,.1f} s "
                                    "lost per save" if rel.checkpoint_mode == "async" else ""))  # fmt: skip
        notes["goodput"] = Note("Goodput", f"{rel.goodput:.1%}",
                                f"Daly: τ / (M·e^(R/M)·(e^((τ+δ)/M) − 1)) with τ = {rel.checkpoint_interval_s:,.0f} s, "
                                f"M = {rel.job_mtbf_hours * 3600:,.0f} s, R (restart) = {rel.restart_s:,.0f} s, "
                                f"δ = {rel.checkpoint_blocking_s:,.1f} s"
                                + (f"; expected failures over the run {cost.expected_failures:,.1f}" if cost else ""))  # fmt: skip
        if (
            cost is not None and (not rel.rule_of_thumb.same_as_interval)
        ):  # no "every 30 minutes instead" when it is every 30 minutes (its extra days and $ need the run's cost)
            notes["rule"] = Note("Every-30-min rule", f"+{cost.rule_of_thumb_extra_days:,.2f} days",
                                 f"goodput {rel.rule_of_thumb.goodput:.2%} at τ = 30 min vs {rel.goodput:.2%} at the "
                                 "interval used" + (f"; +{cost.rule_of_thumb_extra_usd:,.0f} $ on demand"
                                                    if cost.rule_of_thumb_extra_usd else ""))  # fmt: skip
        points = {p.factor: p for p in rel.interval_sensitivity}
        if points:
            notes["sensitivity"] = Note(
                "Interval ½× / 2×",
                " / ".join(f"{points[f].goodput:.1%}" for f in (0.5, 2.0) if f in points),
                "goodput if the checkpoint interval were: " + "; ".join(
                    f"{p.factor:g}× = {p.interval_s / 60:,.1f} min"
                    + (" (the write time: no shorter)" if p.limited_by_write else "") + f" → {p.goodput:.2%}"
                    for p in rel.interval_sensitivity
                ),
                "the Daly goodput model with the same MTBF, restart and checkpoint cost",
            )  # fmt: skip
    return notes


def _stage_rows(est: Estimate) -> list[dict[str, Any]]:
    rows = []
    for s in est.memory_by_stage:
        rows.append({
            "rank": s.rank, "layers": s.layers, "first": s.first, "last": s.last,
            "terms": [(label, getattr(s, attr) + (s.workspace_bytes if attr == "buffers_bytes" else 0))
                      for attr, label, _ in charts.MEMORY_TERMS],
            "total": s.total_bytes, "margin": s.margin_bytes, "fits": s.fits, "dominant": s.dominant_term,
        })  # fmt: skip
    return rows


def _step_rows(est: Estimate) -> list[tuple[str, float, float]]:
    step = est.step
    return [
        (label, getattr(step, attr), getattr(step, attr) / step.step_s if step.step_s else 0.0)
        for attr, label, _ in charts.STEP_TERMS
    ]


def planner_scenario(catalog: Catalog, form: PlannerInput) -> ScenarioResult | None:
    """The form's scenario through the pipeline (once), or None (and messages on ``form``) for invalid input.
    The estimate and the cost use the catalog's calibration unless the input turns calibration off."""
    if not form.ok or form.request is None:
        return None
    try:
        return run_scenario(
            catalog, form.request.model_copy(update={"tokens": form.tokens}), overrides=form.overrides
        )
    except InputError as exc:
        add_service_errors(form, exc.errors)
        return None


def _messages(errors: tuple[dict[str, Any], ...]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in errors)


def compute_results(
    catalog: Catalog, form: PlannerInput, scenario: ScenarioResult | None = None
) -> dict[str, Any] | None:
    """Everything the results panel shows, rendered from one :class:`ScenarioResult`."""
    scenario = scenario or planner_scenario(catalog, form)
    if scenario is None:
        return None
    est, cost = scenario.estimate, scenario.cost
    monthly: MonthlyCost | None = None
    monthly_error = None
    node = catalog.hardware.node(est.node)
    monthly_node = cost.self_build_node if cost and cost.self_build_node else est.node
    per_node = catalog.hardware.node(monthly_node).accelerators_per_node
    try:
        monthly = run_monthly_cost(catalog, MonthlyCostRequest(
            node=monthly_node, nodes=max(1, -(-est.gpus // per_node)), overrides=form.overrides, months=36))  # fmt: skip
    except InputError as exc:
        monthly_error = str(exc)
    sampled = schedule_for(est)
    schedule, schedule_figures = sampled if sampled is not None else (None, None)
    chart_options: dict[str, Any] = {
        "memory": charts.memory_bars_option(est.memory_by_stage, est.usable_memory_bytes),
        "step": charts.step_breakdown_option(est.step),
    }
    if schedule is not None:
        chart_options["gantt"] = charts.gantt_option(schedule, schedule_figures)
    summary = scenario.cost_summary
    if summary is not None:
        chart_options["cost"] = charts.cost_options_option(aws_and_self_build(summary))
    if monthly is not None:
        chart_options["cumulative"] = charts.cumulative_cost_option(
            monthly.cumulative.months, monthly.cumulative.usd,
            {r.option.value: r.break_even_month for r in monthly.rows if r.option.value != "self-build"},
        )  # fmt: skip
    assumptions = assumption_rows((*est.assumptions, scenario.calibration.assumption), catalog)
    if cost is not None:
        seen = {a["name"] for a in assumptions}
        assumptions += [a for a in assumption_rows(cost.assumptions, catalog) if a["name"] not in seen]
    return {
        "est": est, "scenario": scenario, "calibration": scenario.calibration, "node": node, "cost": cost,
        "cost_summary": summary, "rankings": ranking_lines(summary) if summary else [],
        "cost_error": _messages(scenario.cost_errors) or None, "monthly": monthly,
        "monthly_error": monthly_error, "schedule": schedule, "schedule_figures": schedule_figures,
        "charts": chart_options,
        "notes": _notes(est, catalog, cost, scenario.reliability), "stages": _stage_rows(est), "step_rows": _step_rows(est),
        "assumptions": assumptions, "memory_formulas": est.memory_formulas,
        "formats": list(EXPORT_FORMATS),
    }  # fmt: skip


def exports_for(scenario: ScenarioResult | None) -> list[dict[str, str]]:
    """Every launch file of the scenario's plan document (a format whose framework refuses the plan says why)."""
    if scenario is None or scenario.document is None:
        return []
    out = []
    for fmt in EXPORT_FORMATS:
        try:
            f = export_plan(scenario.document, fmt)
        # the framework cannot run this plan, or its command line cannot say it
        except PlanDocumentError as exc:
            why = (
                "Megatron-LM's command line has no flag for this plan"
                if isinstance(exc, CommandLineRefusal)
                else "the framework cannot run this plan"
            )
            out.append(
                {"format": str(fmt), "filename": "", "content": f"# not exported: {exc}\n", "why": why}
            )
            continue
        out.append({"format": str(fmt), "filename": f.filename, "content": f.content})
    return out


def llama_style_url(form: PlannerInput) -> str | None:
    """For a config.json refused as an unknown but llama-shaped model_type: the planner URL importing it as
    llama-style (the config with ``capplan_import_as: llama`` added), else None."""
    if form.values.get("model") != HF or "llama-shaped" not in form.errors.get("hf_config", ""):
        return None
    try:
        cfg = json.loads(form.values.get("hf_config", ""))
    except ValueError:
        return None
    if not isinstance(cfg, dict):
        return None
    text = json.dumps({**cfg, IMPORT_AS_KEY: "llama"}, separators=(",", ":"), sort_keys=True)
    return planner_url(form.values, hf_config=text)


def planner_context(
    request: Request, catalog: Catalog, form: PlannerInput, opening: Opening | None = None
) -> dict[str, Any]:
    model = model_summary(
        catalog, form
    )  # before the estimate: a refused layout still shows the model's counts
    scenario = planner_scenario(catalog, form)
    results = compute_results(catalog, form, scenario) if scenario is not None else None
    return {
        "llama_style_url": llama_style_url(form), "llama_style_assumptions": LLAMA_STYLE_ASSUMPTIONS,
        "search_offer": bool(form.errors) and set(form.errors) <= set(LAYOUT_FIELDS),
        "form": form, "v": form.values, "errors": form.errors, "query": form.query(), "results": results,
        "exports": exports_for(scenario), "model": model,
        "choices": choices(catalog), "overrides": OVERRIDES, "form_fields": FORM_FIELDS, "HF": HF, "HUB": HUB,
        "partial": is_partial(request), "defaults": DEFAULTS, "upload_error": None,
        "upload_max_bytes": MAX_HF_UPLOAD_BYTES,
        "plan_for": (opening.pending if opening else None) or form.values["model"],
        "layout_note": opening.note if opening else None,
    }  # fmt: skip


MAX_HF_UPLOAD_BYTES = MAX_HF_CONFIG_CHARS * 4
"""The largest config.json file read (real ones are 1–10 KB); its compact JSON must also fit MAX_HF_CONFIG_CHARS."""


def _size_words(n_bytes: int) -> str:
    if n_bytes >= 1_000_000:
        return f"{n_bytes / 1_000_000:.1f} MB ({n_bytes:,} bytes)"
    return f"{n_bytes / 1000:.0f} KB ({n_bytes:,} bytes)"


def upload_too_large_message(n_bytes: int | None) -> str:
    size = f": {_size_words(n_bytes)}" if n_bytes else ""
    return (
        f"That file is too large{size}. A config.json upload is limited to {_size_words(MAX_HF_UPLOAD_BYTES)}. "
        "Real config.json files are a few KB; remove any large fields (e.g. id2label) and upload again."
    )


@router.get("/", response_class=HTMLResponse)
def planner_page(request: Request, catalog: CatalogDep, session: SessionDep) -> Response:
    """The planner. Its URL is kept short: htmx updates replace the address with the inputs that differ from the
    defaults (HX-Replace-Url), and a form sent without JavaScript (every field, blanks too) is redirected there.
    A model just picked (or a link naming a model without a layout) opens with the search's layout for it
    (app/web/plan_start.py): a link or a form sent without JavaScript is redirected to it, an htmx request gets
    it in an HX-Trigger event that sets the fields in place."""
    params = dict(request.query_params)
    # the body-size guard (app.main.BodyLimit) sends an over-limit upload back here with upload_too_large=<bytes>
    too_large = params.pop("upload_too_large", None)
    if too_large is not None:
        form = planner_form(session, params)
        link_config(session, form)
        ctx = planner_context(request, catalog, form)
        ctx["upload_error"] = upload_too_large_message(int(too_large) if too_large.isdigit() else None)
        return render(request, "pages/planner.html", ctx, status_code=413)
    # the search reads the config a config=<id> link names; the form keeps naming it by id
    opening = opening_layout(request, catalog, expand_config(session, params)[0])
    if opening.changed:
        params = {k: v for k, v in {**params, **opening.layout}.items() if k != PLAN_FOR}
    form = planner_form(session, params)
    link_config(session, form)
    url = canonical_url("/", form.query())
    # a model picked while the form is invalid: the address keeps whose layout it is
    if opening.pending is not None:
        url = f"{url}{'&' if '?' in url else '?'}{urlencode({PLAN_FOR: opening.pending})}"
    if not is_partial(request):
        if opening.changed:
            return RedirectResponse(url, status_code=303)
        if target := shorter_url(request, url):
            return RedirectResponse(target, status_code=303)
    ctx = planner_context(request, catalog, form, opening)
    status = 422 if form.errors else 200
    response = render(request, "pages/planner.html", ctx, block="results", status_code=status)
    if is_partial(request):
        response.headers["HX-Replace-Url"] = url
        if (event := form_event(opening, form.values["model"])) is not None:
            response.headers["HX-Trigger"] = event
    return response


@router.post("/planner/hf-config", dependencies=[Depends(verify_csrf)])
async def upload_hf_config(
    request: Request,
    catalog: CatalogDep,
    session: SessionDep,
    file: Annotated[UploadFile | None, File(description="a Hugging Face config.json")] = None,
    current: Annotated[str, Form(max_length=200_000)] = "",
) -> Response:
    """Read an uploaded config.json into the form (model = config.json) and show the planner for it, with the
    search's layout for it (app/web/plan_start.py). A readable config is stored and redirects (303) to the planner
    URL naming it (``config=<id>``; the whole file when the database cannot store it); an unreadable or too large
    one re-renders the planner with the user's inputs unchanged and a message at the upload (422, or 413 for
    size)."""
    params = dict(parse_qsl(current, keep_blank_values=True))
    raw = b"" if file is None else await file.read(MAX_HF_UPLOAD_BYTES + 1)

    def keep_inputs(message: str, status: int) -> HTMLResponse:
        form = planner_form(session, params)
        ctx = planner_context(request, catalog, form)
        ctx["upload_error"] = message
        return render(request, "pages/planner.html", ctx, status_code=status)

    if len(raw) > MAX_HF_UPLOAD_BYTES:
        return keep_inputs(upload_too_large_message(file.size if file is not None else None), 413)
    if not raw:
        return keep_inputs("Choose a config.json file first, then press Load config.", 422)
    try:
        cfg = load_json_text(raw.decode("utf-8"), "the file")
        if not isinstance(cfg, dict):
            raise ValueError("a config.json is a JSON object")
        text = json.dumps(cfg, separators=(",", ":"), sort_keys=True)
    except UnicodeDecodeError:
        return keep_inputs("Not a readable config.json: the file is not UTF-8 text.", 422)
    except ValueError as exc:
        return keep_inputs(f"Not a readable config.json: {exc}", 422)
    if len(text) > MAX_HF_CONFIG_CHARS:
        return keep_inputs(
            f"That config.json is too large: {len(text):,} characters without whitespace; "
            f"the limit is {MAX_HF_CONFIG_CHARS:,}. Remove any large fields (e.g. id2label) and upload again.",
            413,
        )
    params.update({"model": HF, "hf_config": text})
    params.pop(CONFIG_REF, None)
    form = planner_form(session, params)
    link_config(session, form)
    url = canonical_url("/", form.query())
    # a new model: the planner gives it the search's layout (plan_for blank: the layout belongs to no model yet)
    return RedirectResponse(f"{url}{'&' if '?' in url else '?'}{PLAN_FOR}=", status_code=303)


@router.get("/planner/export")
def planner_export(
    request: Request,
    catalog: CatalogDep,
    session: SessionDep,
    fmt: Annotated[ExportFormat, Query(alias="format")] = ExportFormat.json,
) -> Response:
    """The plan of the planner URL's inputs as a launch file (the same bytes as POST /api/v1/plans/export); the plan
    document (format json) carries the run's cost per option, priced with the URL's overrides."""
    params = {k: v for k, v in request.query_params.items() if k != "format"}
    form = planner_form(session, params)
    if not form.ok or form.request is None:
        raise InputError(
            [{"loc": ["query", k], "msg": m, "type": "value_error"} for k, m in form.errors.items()]
        )
    exported = export_document(plan_document_from_request(catalog, form.request, form.overrides), fmt)
    return Response(
        content=exported.content.encode("utf-8"),
        media_type=exported.media_type,
        headers={"Content-Disposition": f'attachment; filename="{exported.filename}"'},
    )


def planner_url(values: dict[str, str], **changes: Any) -> str:
    merged = {**values, **{k: str(v) for k, v in changes.items()}}
    return "/?" + to_query(merged)


def query_with(query: str, **changes: Any) -> str:
    params = dict(parse_qsl(query, keep_blank_values=True))
    params.update({k: str(v) for k, v in changes.items()})
    return urlencode(params)
