""" "Find the best plan": the planner's model, hardware and batch, searched over every parallel layout.

``GET /search?<planner query>&objective=…`` renders the page (or ``{% block search_results %}`` for htmx):
a ranked table whose rows load into the planner, a Pareto scatter (time against cost), and rejected counts
by reason. It calls :func:`app.services.search.run_search`; nothing is computed here.
"""

from __future__ import annotations

import math
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.deps import get_catalog, get_session
from app.domain.catalog import Catalog
from app.domain.cost.inputs import CostOption
from app.domain.search.spec import Objective
from app.schemas import PlanSearchRequest
from app.services.errors import InputError
from app.services.search import run_search
from app.web import charts
from app.web.forms import (
    DEFAULTS,
    LAYOUT_FIELDS,
    PlannerInput,
    form_values,
    read_number,
    to_query,
)
from app.web.htmx import is_partial, render
from app.web.share import canonical_url, expand_config, link_config, planner_form, shorter_url

router = APIRouter(include_in_schema=False)
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
SessionDep = Annotated[Session, Depends(get_session)]

SEARCH_DEFAULTS = {
    "objective": Objective.max_tokens_per_s.value,
    "gpus_range": "",
    "headroom_gib": "0",
    "deadline_days": "",
    "budget_usd": "",
    "price_option": CostOption.on_demand.value,
    "top_k": "10",
}
SHARED = ("model", "hf_config", "hf_id", "gpu", "node", "fabric", "seq_len", "global_batch", "tokens", "precision",
          "optimizer", "framework", "flash_attention", "cp_comm_type", "moe_dispatcher", "moe_a2a_overlap", "expert_tp", "mtp_layers", "moe_capacity_factor",
          "moe_pad_to_capacity", "grad_reduce_bf16", "fused_swiglu", "z_loss", "fp8_attention", "fp8_recipe", "nvfp4_rht", "zero_init", "calibrated")  # fmt: skip
"""Planner inputs the search keeps fixed; the parallel layout (tp, pp, dp, …) is what it searches."""


def search_request(
    form: PlannerInput, opts: dict[str, str]
) -> tuple[PlanSearchRequest | None, dict[str, str]]:
    errors: dict[str, str] = {}
    if not form.ok or form.request is None:
        return None, dict(form.errors)
    r = form.request
    body: dict[str, Any] = {
        "model": r.model, "hf_config": r.hf_config, "gpu": r.gpu, "node": r.node, "fabric": r.fabric,
        "seq_len": r.seq_len, "global_batch": r.global_batch, "tokens": form.tokens, "precision": r.precision,
        "optimizer": r.optimizer, "framework": r.framework, "flash_attention": r.flash_attention,
        "moe_dispatcher": r.moe_dispatcher, "moe_a2a_overlap": r.moe_a2a_overlap, "expert_tp": r.expert_tp,
        "cp_comm_type": r.cp_comm_type, "mtp_layers": r.mtp_layers, "moe_capacity_factor": r.moe_capacity_factor, "moe_pad_to_capacity": r.moe_pad_to_capacity,
        "grad_reduce_bf16": r.grad_reduce_bf16, "fused_swiglu": r.fused_swiglu, "z_loss": r.z_loss,
        "fp8_attention": r.fp8_attention, "fp8_recipe": r.fp8_recipe, "nvfp4_rht": r.nvfp4_rht,
        "zero_init": r.zero_init,
        "calibrated": r.calibrated, "objective": opts["objective"], "price_option": opts["price_option"],
        "figure_overrides": r.figure_overrides, "overrides": form.overrides,
    }  # fmt: skip
    if opts["gpus_range"].strip():
        body["gpus_range"] = _range_digits(opts["gpus_range"])
    else:
        body["gpus"] = r.gpus
    for key, kind in (
        ("headroom_gib", float),
        ("deadline_days", float),
        ("budget_usd", float),
        ("top_k", int),
    ):
        text = opts[key].strip()
        if text:
            try:
                number = float(text)
                if not math.isfinite(number):
                    raise ValueError(text)
                body[key] = int(number) if kind is int else number
            except (ValueError, OverflowError):
                errors[key] = "a finite number"
    try:  # every field's message at once: the numbers refused above are left out of the body
        request = PlanSearchRequest.model_validate(body)
    except ValidationError as exc:
        for e in exc.errors():
            errors.setdefault(str(e["loc"][0]) if e["loc"] else "objective", _plain(e))
        return None, errors
    return (None, errors) if errors else (request, {})


PLAIN_WORDS = {
    "gpus_range": "a range of GPU counts, from:to, e.g. 512:4096 (whole nodes in between are tried)",
}


def _plain(error: dict[str, Any]) -> str:
    """A validation message in words: never a raw regular expression."""
    field = str(error["loc"][0]) if error.get("loc") else ""
    if error.get("type") == "string_pattern_mismatch":
        return PLAIN_WORDS.get(field, "not in the expected form")
    return str(error.get("msg", "")).removeprefix("Value error, ")


def _range_digits(text: str) -> str:
    """``1k:4k`` → ``1000:4000`` (the form's number syntax on both ends); anything else unchanged for the check."""
    parts = text.strip().split(":")
    if len(parts) != 2:
        return text.strip()
    try:
        ends = [read_number(p, float) for p in parts]
    except ValueError:
        return text.strip()
    if not all(math.isfinite(x) for x in ends):  # 1e400: the check names what was typed, not 'inf'
        return text.strip()
    return ":".join(f"{x:g}" for x in ends)


def load_url(values: dict[str, str], c: Any, config_id: str | None = None) -> str:
    """The planner URL of one candidate: the search's fixed inputs plus the candidate's layout."""
    return "/?" + _row_query(values, c, config_id)


def export_url(values: dict[str, str], c: Any, config_id: str | None = None) -> str:
    """The candidate as a plan document (capplan.plan/v1), the file ``capplan plan --output --pick N`` writes."""
    return "/planner/export?" + _row_query(values, c, config_id) + "&format=json"


def _row_query(values: dict[str, str], c: Any, config_id: str | None = None) -> str:
    return to_query({**values, **layout_values(c)}, config_id)


def layout_values(c: Any) -> dict[str, str]:
    """A candidate's cluster size, batch and parallel layout as planner form values."""
    p = c.plan
    layout = {
        "gpus": c.gpus, "tp": p.tp, "pp": p.pp, "vpp": p.vpp, "dp": p.dp, "cp": p.cp, "ep": p.ep,
        "expert_tp": "" if p.expert_tp is None else p.expert_tp,
        "pipeline_layout": p.pipeline_layout or "",
        "sharding": p.sharding.value, "shard_group_size": p.shard_group_size or "", "offload": p.offload.value,
        "micro_batch": p.micro_batch, "global_batch": p.global_batch, "recompute": p.recompute.value,
        "sequence_parallel": "on" if p.sequence_parallel else "off",
        "recompute_layers": "" if p.recompute_layers is None else p.recompute_layers,
        "recompute_modules": "" if p.recompute_modules is None else ",".join(m.value for m in p.recompute_modules),
    }  # fmt: skip
    return {k: str(v) for k, v in layout.items()}


@router.get("/search", response_class=HTMLResponse)
def search_page(request: Request, catalog: CatalogDep, session: SessionDep) -> Response:
    params = dict(request.query_params)
    # the planner's inputs as given (a config=<id> read), for the way back
    hand_set = form_values(expand_config(session, params)[0])
    # the search chooses the layout: a hand-set layout that is invalid must not block it
    form = planner_form(session, {**params, **{k: DEFAULTS[k] for k in LAYOUT_FIELDS}})
    link_config(session, form)
    opts = {k: params.get(k, v) for k, v in SEARCH_DEFAULTS.items()}
    planner_query = to_query(hand_set, form.config_id)
    url = canonical_url("/search", urlencode_join(planner_query, opts))
    if not is_partial(request) and (target := shorter_url(request, url)):
        return RedirectResponse(target, status_code=303)
    req, errors = search_request(form, opts)
    result = None
    if req is not None:
        try:
            settings = request.app.state.settings
            result = run_search(catalog, req, settings.search_max_plans, request.app.state.search_budget)
        except InputError as exc:
            for e in exc.errors:
                loc = [str(p) for p in e.get("loc", []) if p != "body"]
                errors[loc[0] if loc else "objective"] = str(e.get("msg", ""))
    rows = []
    option = None
    if result is not None:
        rows = [
            {"c": c, "url": load_url(form.values, c, form.config_id),
             "export": export_url(form.values, c, form.config_id)}
            for c in result.plans
        ]  # fmt: skip
        if result.plans:
            option = charts.pareto_option(result.plans, result.pareto)
    ctx = {
        "v": form.values, "opts": opts, "errors": errors, "result": result, "rows": rows, "pareto": option,
        "shared": SHARED, "objectives": [o.value for o in Objective], "price_options": [o.value for o in CostOption],
        "planner_query": planner_query, "defaults": DEFAULTS, "search_defaults": SEARCH_DEFAULTS,
        "config_id": form.config_id, "search_url": url, "search_fields": SEARCH_FIELDS, "partial": is_partial(request),
    }  # fmt: skip
    response = render(
        request, "pages/search.html", ctx, block="search_results", status_code=422 if errors else 200
    )
    if is_partial(request):
        response.headers["HX-Replace-Url"] = url
    return response


SEARCH_FIELDS = ("gpus", *SEARCH_DEFAULTS)
"""The search form's own fields (each with its message in the page)."""


def urlencode_join(planner_query: str, opts: dict[str, str]) -> str:
    """The planner's query plus the search options that differ from their defaults."""
    extra = urlencode([(k, v) for k, v in opts.items() if v != SEARCH_DEFAULTS[k]])
    return "&".join(q for q in (planner_query, extra) if q)
