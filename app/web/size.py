""" "Size a cluster": the newcomer's entry point — a model and a token count, optionally a deadline and a
budget; every accelerator, cluster size, plan and way to pay is searched (:func:`app.services.size.run_size`).

``GET /size`` shows the form; with ``model`` and ``tokens`` in the query it runs the search and renders the
ranked table, the Pareto chart of days against dollars, the losses by reason and the winner's plan document
(``{% block size_results %}`` for htmx). Nothing is computed here.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from app.deps import get_catalog
from app.domain.catalog import Catalog
from app.domain.cost.inputs import CostOption
from app.services.errors import InputError
from app.services.search import SearchBusy
from app.services.size import DEFAULT_GPUS_RANGE, DEFAULT_OPTIONS, SizeRequest, SizeResult, run_size
from app.web.htmx import render

router = APIRouter(include_in_schema=False)
CatalogDep = Annotated[Catalog, Depends(get_catalog)]

FIELDS = {
    "model": "llama3.1-70b",
    "tokens": "15e12",
    "deadline_days": "",
    "budget_usd": "",
    "accelerators": "",
    "options": ",".join(o.value for o in DEFAULT_OPTIONS),
    "gpus_range": DEFAULT_GPUS_RANGE,
}


def _list(text: str) -> list[str] | None:
    items = [t.strip() for t in text.split(",") if t.strip()]
    return items or None


def size_request(values: dict[str, str]) -> tuple[SizeRequest | None, dict[str, str]]:
    """The request the form describes, or the errors by field (the form keeps what the user typed)."""
    body: dict[str, Any] = {"model": values["model"].strip(), "gpus_range": values["gpus_range"].strip()}
    errors: dict[str, str] = {}
    for key in ("tokens", "deadline_days", "budget_usd"):
        text = values[key].strip().replace(",", "").replace("_", "")
        if not text:
            continue
        try:
            body[key] = float(text)
        except ValueError:
            errors[key] = "a number, e.g. 15e12"
    body["accelerators"] = _list(values["accelerators"])
    body["options"] = _list(values["options"])
    if errors:
        return None, errors
    try:
        return SizeRequest.model_validate(body), {}
    except ValidationError as exc:
        return None, {str(e["loc"][0]) if e["loc"] else "model": e["msg"] for e in exc.errors()}


def pareto_chart(result: SizeResult) -> dict[str, Any]:
    """ECharts option: every ranked point and the whole catalog's Pareto front, days against amortised $."""

    def point(r: Any) -> dict[str, Any]:
        return {
            "value": [round(r.days, 2), round(r.usd_amortised / 1e6, 3)],
            "name": f"{r.gpus} × {r.accelerator} ({r.offer}, {r.option})",
        }

    return {
        "title": {"text": "Days against $ (amortised), whole catalog", "left": "center",
                  "textStyle": {"fontSize": 14}},
        "animation": False,
        "tooltip": {"trigger": "item", "formatter": "{b}: {c}"},
        "legend": {"top": 28},
        "grid": {"left": 70, "right": 30, "top": 70, "bottom": 50},
        "xAxis": {"type": "log", "name": "days after failures", "nameLocation": "middle", "nameGap": 28},
        "yAxis": {"type": "log", "name": "$ M (amortised)"},
        "series": [
            {"name": "ranked", "type": "scatter", "symbolSize": 9, "itemStyle": {"color": "#4e79a7"},
             "data": [point(r) for r in result.ranked]},
            {"name": "Pareto front", "type": "line", "step": "end", "symbolSize": 11,
             "itemStyle": {"color": "#e15759"}, "data": [point(r) for r in result.pareto]},
        ],
    }  # fmt: skip


@router.get("/size", response_class=HTMLResponse)
def size_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    params = dict(request.query_params)
    asked = "model" in params or "tokens" in params
    values = {k: params.get(k, v) for k, v in FIELDS.items()}
    errors: dict[str, str] = {}
    result = None
    if asked:
        req, errors = size_request(values)
        if req is not None:
            try:
                state = request.app.state
                result = run_size(
                    catalog, req, max_plans=state.settings.search_max_plans, budget=state.search_budget
                )
            except InputError as exc:
                for e in exc.errors:
                    loc = [str(p) for p in e.get("loc", []) if p != "body"]
                    errors[loc[0] if loc else "model"] = str(e.get("msg", ""))
            except SearchBusy as exc:
                errors["search"] = str(exc)
    ctx = {
        "values": values, "errors": errors, "result": result,
        "chart_option": pareto_chart(result) if result is not None and result.pareto else None,
        "plan_json": json.dumps(result.plan_document, indent=2) if result and result.plan_document else None,
        "models": sorted(a.slug for a in catalog.architectures),
        "accelerators": sorted({n.accelerator for n in catalog.hardware.nodes}),
        "all_options": [o.value for o in CostOption],
    }  # fmt: skip
    return render(request, "pages/size.html", ctx, block="size_results", status_code=422 if errors else 200)
