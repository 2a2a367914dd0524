"""One decision point for full page vs fragment (htmx 4: HX-Request-Type), and one render helper."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from app.web.security import csrf_token, set_csrf_cookie

VARY = "HX-Request-Type"


def is_partial(request: Request) -> bool:
    """htmx 4 sends HX-Request-Type: partial unless the target is body (boosts, history restores)."""
    return request.headers.get("hx-request-type", "").lower() == "partial"


def render(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    block: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    """The whole page normally; only ``block`` for htmx partial requests. Always varies on the header."""
    templates = request.app.state.templates
    kwargs: dict[str, Any] = {"status_code": status_code}
    if block is not None and is_partial(request):
        kwargs["block_name"] = block
    token = csrf_token(request)
    response = templates.TemplateResponse(
        request, template, {"request": request, "csrf_token": token, **context}, **kwargs
    )
    response.headers["Vary"] = VARY
    set_csrf_cookie(request, response)
    return response
