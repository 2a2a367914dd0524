"""The layout a model opens with in the planner: the search's winner for the chosen cluster.

A model picked in the planner (the select changed, a config.json chosen) or named by a link without a layout
(``/?model=deepseek-v3``) does not inherit the previous model's parallel layout — a dense model's tp 8 plan runs an
MoE model at 1–3 % MFU, or not at all. Its layout is the one "Find the best plan" ranks first (the fastest plan that
fits) for the form's model, accelerator, node, GPUs, sequence length, global batch, framework, precision and
figures: the same search (:func:`app.services.search.run_search`, top 1, without pricing), under the server's search
budget. The cluster and the batch stay the user's; a change to them keeps the layout as set.

The form carries the model its layout was set for in a hidden field (:data:`PLAN_FOR`); the model changing away from
it is what asks for a new layout. When the search cannot answer (the form is invalid, nothing fits, the space is too
large, the server is busy) the layout stays as it was and the page says why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from app.domain.catalog import Catalog
from app.services.errors import InputError
from app.services.search import SearchBusy, run_search
from app.web.forms import DEFAULTS, LAYOUT_FIELDS, parse_planner
from app.web.search import SEARCH_DEFAULTS, layout_values, search_request

LAYOUT_EVENT = "capplan:layout"
"""The event (``HX-Trigger``) whose ``detail.values`` static/js/app.js writes into the planner's fields by name."""
PLAN_FOR = "plan_for"
"""The planner's hidden field: the model (preset slug, or ``hf``) the layout fields were set for; blank after a
config.json upload (the layout belongs to no model yet)."""


@dataclass(frozen=True)
class Opening:
    """What the planner renders: the query with the search's layout (or as given) and what was done, in words."""

    params: dict[str, str]
    layout: dict[str, str] = field(default_factory=dict)
    """the winner's layout fields as form values (empty: the layout is as given)"""
    note: str | None = None
    """what the search did with the layout (None: nothing was asked, or the form must be fixed first)"""
    pending: str | None = None
    """while the form is invalid: the model the layout still belongs to (the hidden field keeps it)"""

    @property
    def changed(self) -> bool:
        return bool(self.layout)


def wants_layout(params: Mapping[str, str]) -> bool:
    """A model was picked (it differs from the one the layout was set for), or a link names a model and no part
    of the layout."""
    model = params.get("model", DEFAULTS["model"]).strip()
    given = params.get(PLAN_FOR)
    if given is not None:
        return given.strip() != model
    return "model" in params and not any(k in params for k in LAYOUT_FIELDS)


def opening_layout(request: Request, catalog: Catalog, params: dict[str, str]) -> Opening:
    """``params`` with the layout of the search's winner when :func:`wants_layout`; as given otherwise."""
    if not wants_layout(params):
        return Opening(params)
    form = parse_planner({**params, **{k: DEFAULTS[k] for k in LAYOUT_FIELDS}})
    # another field is wrong: the layout is chosen once the form is valid (the hidden field keeps the old model)
    pending = Opening(params, pending=params.get(PLAN_FOR))
    if not form.ok:
        return pending
    req, _ = search_request(form, {**SEARCH_DEFAULTS, "top_k": "1"})
    if req is None:
        return pending
    req = req.model_copy(update={"tokens": None})  # the fastest plan that fits: no need to price every plan
    what = f"{form.values['model'] if form.values['model'] != 'hf' else 'this config.json'} on {req.gpus:,} × {req.gpu}"
    state = request.app.state
    try:
        result = run_search(catalog, req, state.settings.search_max_plans, state.search_budget)
    except (InputError, SearchBusy) as exc:
        reason = exc.errors[0]["msg"] if isinstance(exc, InputError) and exc.errors else str(exc)
        return Opening(
            params, note=f"The layout is unchanged: the search for {what} could not run ({reason})."
        )
    if not result.plans:
        return Opening(
            params, note=f"The layout is unchanged: no plan of the search fits {what} at this batch."
        )
    best = result.plans[0]
    layout = {k: v for k, v in layout_values(best).items() if k in LAYOUT_FIELDS}
    if best.plan.dp == best.gpus // (best.plan.tp * best.plan.pp * best.plan.cp):
        layout["dp"] = ""  # auto, as the form's default: a later change of GPUs keeps the layout valid
    values: dict[str, Any] = {**params, **layout}
    values.pop(PLAN_FOR, None)
    note = (f"Layout set by the search for {what}: the fastest plan that fits, {best.tokens_per_s:,.0f} tokens/s, "
            f"MFU {best.mfu:.1%}. Change any field to explore.")  # fmt: skip
    return Opening(values, layout=layout, note=note)


def form_event(opening: Opening, model: str) -> str | None:
    """The ``HX-Trigger`` header that brings an htmx page's form up to date after a search for a picked model
    (static/js/app.js sets the fields): the new layout, and the model it now belongs to. None when nothing was
    searched. Values are set in place rather than swapped, so the fields keep their focus and attributes."""
    if opening.note is None:
        return None
    return json.dumps({LAYOUT_EVENT: {"values": {**opening.layout, PLAN_FOR: model}}})
