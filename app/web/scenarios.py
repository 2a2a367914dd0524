"""Saved scenarios in the browser: list, save, open (the planner with its inputs), rename, duplicate, delete
(with a confirmation page), compare 2–4 side by side. Plain forms and links: all of it works without JS."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import Field
from sqlalchemy.orm import Session

from app.db.tables import Scenario
from app.deps import MAX_ROW_ID, RowId, get_catalog, get_session
from app.domain.catalog import Catalog
from app.schemas import MonthlyCostRequest
from app.services.cost import run_monthly_cost
from app.services.errors import InputError
from app.services.saved_scenarios import (
    ScenarioConflict,
    ScenarioNotFound,
    check_scenario_inputs,
    count_scenarios,
    create_scenario,
    delete_scenario,
    duplicate_scenario,
    get_scenario,
    list_scenarios,
    update_scenario,
)
from app.services.scenario import run_scenario
from app.web import charts
from app.web.cost_view import CompareRow, aws_and_self_build, compare_cost_rows, compare_row
from app.web.forms import CONFIG_REF, FORM_FIELDS, OVERRIDES, parse_planner, to_query, values_from_inputs
from app.web.htmx import render
from app.web.planner import planner_context
from app.web.security import require_ui_writer
from app.web.share import link_config, planner_form
from app.web.templating import fmt_gib, fmt_number, fmt_usd, plan_degrees

router = APIRouter(include_in_schema=False)
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
SessionDep = Annotated[Session, Depends(get_session)]
GIB = 1024**3


def _scenario(session: Session, scenario_id: int) -> Scenario:
    try:
        return get_scenario(session, scenario_id)
    except ScenarioNotFound as exc:
        raise HTTPException(404, str(exc)) from None


def scenario_values(s: Scenario) -> dict[str, str]:
    return values_from_inputs(s.inputs, s.overrides)


def scenario_query(s: Scenario) -> str:
    return to_query(scenario_values(s))


def overridden_figures(s: Scenario) -> list[tuple[str, str]]:
    """(label, value) of each catalog figure the scenario overrides."""
    values = scenario_values(s)
    return [
        (OVERRIDES.get(k, (k[2:], ""))[0], v) for k, v in values.items() if k.startswith("o.") and v.strip()
    ]


def _summary(s: Scenario) -> str:
    i = s.inputs
    model = i.get("model") or "config.json"
    degrees = " · ".join(f"{k} {i[k]}" for k in ("tp", "pp", "vpp", "cp", "ep", "dp") if k in i)
    return f"{model} · {i.get('gpus')} × {i.get('gpu')}" + (f" · {degrees}" if degrees else "")


PAGE_SIZE = 25


def _rows(session: Session, page: int = 1) -> list[dict[str, Any]]:
    return [
        {"s": s, "summary": _summary(s), "overrides": overridden_figures(s)}
        for s in list_scenarios(session, PAGE_SIZE, (page - 1) * PAGE_SIZE)
    ]


@router.get("/scenarios", response_class=HTMLResponse)
def scenarios_page(
    request: Request, session: SessionDep, page: Annotated[int, Query(ge=1, le=100_000)] = 1
) -> HTMLResponse:
    """One page of 25 saved scenarios (the planner link goes through /scenarios/{id}: a config.json scenario's
    query can be megabytes)."""
    total = count_scenarios(session)
    pages = max(1, -(-total // PAGE_SIZE))
    ctx = {"rows": _rows(session, page), "message": request.query_params.get("msg", ""), "page": page,
           "pages": pages, "total": total}  # fmt: skip
    return render(request, "pages/scenarios.html", ctx)


@router.post("/scenarios", dependencies=[Depends(require_ui_writer)])
def save_scenario(
    request: Request,
    catalog: CatalogDep,
    session: SessionDep,
    name: Annotated[str, Form(max_length=200)] = "",
    query: Annotated[str, Form(max_length=200_000)] = "",
) -> Response:
    """Save the planner inputs in ``query`` under ``name`` and open the saved scenario (303)."""
    form = planner_form(session, dict(parse_qsl(query, keep_blank_values=True)))
    save_error = "" if name.strip() else "give the scenario a name"
    if save_error and not form.ok:
        form.errors.setdefault("name", save_error)  # no results, so no save form: say it in "What to fix"
    if save_error or not form.ok or form.request is None:
        ctx = planner_context(request, catalog, form)
        ctx["save_error"] = save_error  # shown at the name field of the save form, beside the results
        return render(request, "pages/planner.html", ctx, status_code=422)
    req = form.request.model_copy(update={"tokens": form.tokens})
    check_scenario_inputs(catalog, req)
    scenario = create_scenario(session, name, req, form.overrides)
    return RedirectResponse(f"/scenarios/{scenario.id}", status_code=303)


def _compare_column(catalog: Catalog, s: Scenario) -> dict[str, Any]:
    """One scenario through the pipeline: its estimate, its cost (the buyer's summary) and its monthly bill."""
    form = parse_planner(scenario_values(s))
    col: dict[str, Any] = {"s": s, "query": scenario_query(s), "overrides": overridden_figures(s), "est": None,
                           "error": None, "monthly": None, "summary": None}  # fmt: skip
    if not form.ok or form.request is None:
        col["error"] = "; ".join(f"{k}: {m}" for k, m in form.errors.items())
        return col
    try:
        scenario = run_scenario(
            catalog,
            form.request.model_copy(update={"tokens": form.tokens}),
            overrides=form.overrides,
            document=False,
        )
        est = col["est"] = scenario.estimate
        col["summary"] = scenario.cost_summary
        if scenario.cost_errors:
            col["error"] = "cost: " + "; ".join(e["msg"] for e in scenario.cost_errors)
        node = catalog.hardware.node(est.node)
        col["monthly"] = run_monthly_cost(catalog, MonthlyCostRequest(
            node=est.node, nodes=max(1, -(-est.gpus // node.accelerators_per_node)),
            overrides=form.overrides, months=36))  # fmt: skip
    except InputError as exc:
        col["error"] = str(exc)
    return col


def _general_rows(cols: list[dict[str, Any]]) -> list[CompareRow]:
    """What each scenario is (model, hardware, plan) and what its estimate says, one row per figure."""

    def each(fn: Any) -> list[Any]:
        return [fn(c["est"]) if c["est"] is not None else None for c in cols]

    def row(label: str, texts: list[Any], values: list[Any] | None = None, better: Any = None) -> CompareRow:
        return compare_row(label, [t if t is not None else "—" for t in texts], values, better=better)

    days = each(lambda e: e.time_to_train_days)
    monthly = [c["monthly"].on_demand_usd_per_month if c["monthly"] else None for c in cols]
    return [
        row("model", [c["est"].model if c["est"] else (c["s"].inputs.get("model") or "config.json") for c in cols]),
        row("hardware", each(lambda e: f"{e.gpus} × {e.accelerator} ({e.nodes} × {e.node})")),
        row("plan", each(lambda e: f"{plan_degrees(e.plan)} · {e.plan.sharding.value} · mb {e.plan.micro_batch} · "
                                   f"{e.plan.recompute.value}")),  # fmt: skip
        row("fits", each(lambda e: f"{'yes' if e.fits else 'no'}, margin {fmt_gib(e.margin_bytes)}")),
        row("peak memory", each(lambda e: fmt_gib(e.peak_memory_bytes))),
        row("step time", each(lambda e: f"{e.step_time_s:.3g} s"), each(lambda e: e.step_time_s), "lower"),
        row("tokens/s", each(lambda e: fmt_number(e.tokens_per_s)), each(lambda e: e.tokens_per_s), "higher"),
        row("MFU", each(lambda e: f"{e.mfu * 100:.1f} %"), each(lambda e: e.mfu), "higher"),
        row("time to train, before failures", [f"{d:.1f} days" if d else None for d in days], days, "lower"),
        row("on-demand $/month (the whole cluster)", [fmt_usd(m) if m is not None else None for m in monthly],
            monthly, "lower"),
        row("overrides", [", ".join(f"{k} = {v}" for k, v in c["overrides"]) or "—" for c in cols]),
    ]  # fmt: skip


@router.get("/scenarios/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    catalog: CatalogDep,
    session: SessionDep,
    ids: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ROW_ID)]], Query(max_length=4)] = [],  # noqa: B006
) -> HTMLResponse:
    """2–4 scenarios side by side: what each is and its estimate, then per pricing option (AWS and self-build)
    days after failures, cash and amortised $ and $ per million tokens, the cheapest on each basis and the fastest
    (ties as ties); rows that differ are marked, the best figure is bold, changes are against the first scenario."""
    chosen = [_scenario(session, i) for i in dict.fromkeys(ids)]
    if not 2 <= len(chosen) <= 4:
        return render(
            request, "pages/scenarios.html",
            {"rows": _rows(session), "message": "Choose 2 to 4 scenarios to compare.", "page": 1,
             "pages": max(1, -(-count_scenarios(session) // PAGE_SIZE))},
            status_code=422,
        )  # fmt: skip
    cols = [_compare_column(catalog, s) for s in chosen]
    ok = [c for c in cols if c["est"] is not None]
    chart_options = {}
    if ok:
        chart_options["step"] = charts.compare_option(
            [c["s"].name for c in ok],
            [c["est"].step for c in ok],
            [c["est"].peak_memory_bytes / GIB for c in ok],
        )
        priced = [c for c in ok if c["summary"] is not None]
        if priced:
            chart_options["options"] = charts.compare_options_option(
                [c["s"].name for c in priced], [aws_and_self_build(c["summary"]) for c in priced]
            )
        with_monthly = [c for c in ok if c["monthly"] is not None]
        if with_monthly:
            months = with_monthly[0]["monthly"].cumulative.months
            chart_options["cost"] = charts.compare_cost_option(
                [c["s"].name for c in with_monthly], months,
                [c["monthly"].cumulative.usd.get("on-demand") for c in with_monthly],
            )  # fmt: skip
    ctx = {"cols": cols, "charts": chart_options, "general": _general_rows(cols),
           "cost_rows": compare_cost_rows([c["summary"] for c in cols])}  # fmt: skip
    return render(request, "pages/scenario_compare.html", ctx)


@router.get("/scenarios/{scenario_id}", response_class=HTMLResponse)
def scenario_page(
    request: Request, scenario_id: RowId, catalog: CatalogDep, session: SessionDep
) -> HTMLResponse:
    """The planner showing the scenario's inputs, under a header with its actions and overridden figures.
    With planner fields in the query (the user edited the form here) it shows those, unsaved, with a "save
    changes" action."""
    s = _scenario(session, scenario_id)
    edited = {
        k: v
        for k, v in request.query_params.items()
        if k in FORM_FIELDS or k == CONFIG_REF or k.startswith("o.")
    }
    form = planner_form(session, edited) if edited else parse_planner(scenario_values(s))
    link_config(session, form)  # the share link names a config.json by id
    ctx = planner_context(request, catalog, form)
    ctx.update({"scenario": s, "scenario_overrides": overridden_figures(s), "edited": bool(edited),
                "form_action": f"/scenarios/{s.id}", "message": request.query_params.get("msg", "")})  # fmt: skip
    return render(request, "pages/scenario.html", ctx, block="results", status_code=200 if form.ok else 422)


@router.post("/scenarios/{scenario_id}/update", dependencies=[Depends(require_ui_writer)])
def update_scenario_inputs(
    request: Request,
    scenario_id: RowId,
    catalog: CatalogDep,
    session: SessionDep,
    version: Annotated[int, Form(ge=1)],
    query: Annotated[str, Form(max_length=200_000)] = "",
) -> Response:
    """Save the edited planner inputs into the scenario (optimistic: a stale version is a 409)."""
    s = _scenario(session, scenario_id)
    form = planner_form(session, dict(parse_qsl(query, keep_blank_values=True)))
    if not form.ok or form.request is None:
        ctx = planner_context(request, catalog, form)
        ctx.update({"scenario": s, "scenario_overrides": overridden_figures(s), "edited": True,
                    "form_action": f"/scenarios/{s.id}", "message": ""})  # fmt: skip
        return render(request, "pages/scenario.html", ctx, status_code=422)
    req = form.request.model_copy(update={"tokens": form.tokens})
    check_scenario_inputs(catalog, req)
    try:
        update_scenario(session, scenario_id, version=version, inputs=req, overrides=form.overrides)
    except ScenarioConflict as exc:
        raise HTTPException(
            409, f"{exc}: someone changed it since you opened it; reload and try again"
        ) from None
    return RedirectResponse(f"/scenarios/{scenario_id}?msg=saved", status_code=303)


@router.post("/scenarios/{scenario_id}/rename", dependencies=[Depends(require_ui_writer)])
def rename_scenario(
    request: Request,
    scenario_id: RowId,
    session: SessionDep,
    name: Annotated[str, Form(min_length=1, max_length=200)],
    version: Annotated[int, Form(ge=1)],
) -> Response:
    try:
        update_scenario(session, scenario_id, version=version, name=name)
    except ScenarioNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except ScenarioConflict as exc:
        raise HTTPException(409, f"{exc}: someone changed it since you opened it") from None
    return RedirectResponse(f"/scenarios/{scenario_id}?msg=renamed", status_code=303)


@router.post("/scenarios/{scenario_id}/duplicate", dependencies=[Depends(require_ui_writer)])
def duplicate(scenario_id: RowId, session: SessionDep) -> Response:
    try:
        copy = duplicate_scenario(session, scenario_id)
    except ScenarioNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    return RedirectResponse(f"/scenarios/{copy.id}?msg=duplicated", status_code=303)


@router.get("/scenarios/{scenario_id}/delete", response_class=HTMLResponse)
def confirm_delete(request: Request, scenario_id: RowId, session: SessionDep) -> HTMLResponse:
    return render(request, "pages/scenario_delete.html", {"s": _scenario(session, scenario_id)})


@router.post("/scenarios/{scenario_id}/delete", dependencies=[Depends(require_ui_writer)])
def delete(scenario_id: RowId, session: SessionDep) -> Response:
    try:
        delete_scenario(session, scenario_id)
    except ScenarioNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    return RedirectResponse("/scenarios?msg=deleted", status_code=303)
