"""Short planner links: only what differs from the defaults (app/web/forms.py ``to_query``), and a config.json
stored in the database and named ``config=<id>`` instead of carried whole (an upload made links of 100 KB).

Every page that reads planner inputs reads them through :func:`planner_form`, so a ``config=<id>`` link opens
on the planner, the search, the exports and the scenario forms alike. Storing happens where a link is made
(:func:`link_config`); a database that cannot be written leaves the config in the link, as before.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.schemas import load_json_text
from app.services.shared_configs import load_config, store_config
from app.web.forms import CONFIG_REF, HF, MAX_HF_CONFIG_CHARS, PlannerInput, parse_planner


def expand_config(session: Session, params: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    """``params`` with ``hf_config`` read from the ``config=<id>`` they name: (params, the id, a message when it
    cannot be read). A config.json typed in the form (``hf_config``) wins over the id it was loaded from."""
    ref = str(params.get(CONFIG_REF, "")).strip()
    if not ref or str(params.get("hf_config", "")).strip():
        return params, None, None
    try:
        text = load_config(session, ref)
    except SQLAlchemyError:
        session.rollback()
        return (
            params,
            ref,
            "the stored config.json could not be read (the database is unavailable); try again",
        )
    if text is None:
        return (
            params,
            ref,
            (
                f"no config.json is stored under the id {ref[:40]!r} on this server (a link from another capplan?); "
                "upload the config.json again"
            ),
        )
    return {"model": HF, **params, "hf_config": text}, ref, None


def planner_form(session: Session, params: dict[str, Any]) -> PlannerInput:
    """The planner inputs of a query (``config=<id>`` read from the database), parsed and checked."""
    params, ref, error = expand_config(session, params)
    form = parse_planner(params)
    if ref is not None and error is not None:
        form.config_id = ref  # the link keeps naming it
        if form.values.get("model") == HF:
            form.errors["hf_config"] = error
            form.request = None
    return form


def link_config(session: Session, form: PlannerInput) -> None:
    """Store the form's config.json (when it reads as a JSON object) so that links name it by id."""
    if form.config_id is not None:
        return
    text = form.values.get("hf_config", "").strip()
    if not text or len(text) > MAX_HF_CONFIG_CHARS:
        return
    config = form.request.hf_config if form.request is not None else None
    if config is None:
        try:
            config = load_json_text(text, "the config.json")
        except ValueError:
            return
    if not isinstance(config, dict):
        return
    try:
        form.config_id = store_config(session, config)
    except SQLAlchemyError:
        session.rollback()


def canonical_url(path: str, query: str) -> str:
    return f"{path}?{query}" if query else path


def shorter_url(request: Request, url: str) -> str | None:
    """``url`` when it is shorter than the request's own path and query (a form submitted without JavaScript
    carries every field, blanks included): where to redirect to. Only ever shorter, so never a loop."""
    given = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return url if len(url) < len(given) else None
