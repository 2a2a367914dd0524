"""HTML pages (hidden from OpenAPI). Each pushed URL renders a full page; htmx asks for one block."""

from __future__ import annotations

import hmac
from datetime import date
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.deps import get_catalog
from app.domain.catalog import CATALOG_KINDS, Catalog, UnknownSlugError, entry_record
from app.web.htmx import render
from app.web.security import SESSION_COOKIE, SESSION_SECONDS, session_cookie, verify_csrf

router = APIRouter(include_in_schema=False)

CatalogDep = Annotated[Catalog, Depends(get_catalog)]

KIND_TITLES = {
    "accelerators": "Accelerators",
    "nodes": "Nodes and instances",
    "fabrics": "Fabrics",
    "switches": "Switches",
    "topologies": "Topologies",
    "prices": "AWS prices",
    "architectures": "Model architectures",
}
CONFIDENCES = ("any", "high", "medium", "low")


def _scalar_columns(records: list[dict]) -> list[str]:
    """Figure columns whose values are scalars in at least one entry (lists/tables go to the detail)."""
    columns: list[str] = []
    for record in records:
        for name, fig in record["figures"].items():
            if name not in columns and not isinstance(fig["value"], dict | list):
                columns.append(name)
    return columns


@router.get("/catalog", response_class=HTMLResponse)
def catalog_index(request: Request, catalog: CatalogDep) -> HTMLResponse:
    return render(request, "pages/home.html", {"counts": catalog.counts(), "titles": KIND_TITLES})


@router.get("/catalog/{kind}", response_class=HTMLResponse)
def catalog_page(
    request: Request,
    kind: str,
    catalog: CatalogDep,
    q: Annotated[str, Query(max_length=100)] = "",
    confidence: Annotated[str, Query(max_length=10)] = "any",
) -> HTMLResponse:
    if kind not in CATALOG_KINDS:
        raise UnknownSlugError("catalog kind", kind, list(CATALOG_KINDS))
    if confidence not in CONFIDENCES:
        confidence = "any"
    records = [entry_record(e, catalog.sources) for e in catalog.entries(kind)]
    needle = q.strip().lower()
    if needle:
        records = [r for r in records if needle in r["slug"].lower() or needle in r["name"].lower()]
    if confidence != "any":
        records = [r for r in records if any(f["confidence"] == confidence for f in r["figures"].values())]
    if kind == "prices":
        from app.web.prices import OPTIONS, price_rows

        context = {
            "kind": kind, "title": KIND_TITLES[kind], "q": q, "confidence": confidence,
            "confidences": CONFIDENCES, "total": len(catalog.entries(kind)), "options": OPTIONS,
            "rows": price_rows(catalog, [r["slug"] for r in records]),
        }  # fmt: skip
        return render(request, "pages/prices.html", context, block="results")
    context = {
        "kind": kind,
        "title": KIND_TITLES[kind],
        "titles": KIND_TITLES,
        "records": records,
        "columns": _scalar_columns(records),
        "q": q,
        "confidence": confidence,
        "confidences": CONFIDENCES,
        "total": len(catalog.entries(kind)),
    }
    return render(request, "pages/catalog.html", context, block="results")


@router.get("/catalog/{kind}/{slug}", response_class=HTMLResponse)
def catalog_entry_page(request: Request, kind: str, slug: str, catalog: CatalogDep) -> HTMLResponse:
    if kind not in CATALOG_KINDS:
        raise UnknownSlugError("catalog kind", kind, list(CATALOG_KINDS))
    record = entry_record(catalog.entry(kind, slug), catalog.sources)
    if kind == "prices":
        from app.web.prices import OPTIONS, price_detail

        detail = price_detail(catalog, slug, date.today())
        return render(
            request,
            "pages/price_entry.html",
            {"kind": kind, "title": KIND_TITLES[kind], "record": record, "options": OPTIONS, **detail},
        )
    return render(
        request,
        "pages/catalog_entry.html",
        {"kind": kind, "title": KIND_TITLES[kind], "titles": KIND_TITLES, "record": record},
    )


@router.get("/api", response_class=HTMLResponse)
def api_page(request: Request) -> HTMLResponse:
    """The JSON API's operations, read from the app's own OpenAPI document (no CDN-hosted Swagger UI)."""
    schema = request.app.openapi()
    operations = [
        {"method": method.upper(), "path": path, "summary": op.get("summary", ""), "tags": op.get("tags", [])}
        for path, item in schema["paths"].items()
        for method, op in item.items()
    ]
    return render(
        request, "pages/api.html", {"operations": operations, "openapi_url": request.app.openapi_url}
    )


@router.get("/glossary", response_class=HTMLResponse)
def glossary_page(request: Request) -> HTMLResponse:
    """tp, pp, vpp, cp, ep, MFU/HFU, the sharding strategies… in the planner's own words."""
    from app.web.glossary import GLOSSARY

    return render(request, "pages/glossary.html", {"glossary": GLOSSARY})


@router.get("/favicon.ico")
def favicon() -> RedirectResponse:
    return RedirectResponse("/static/favicon.svg", status_code=301)


@router.get("/accuracy", response_class=HTMLResponse)
def accuracy_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    """Accuracy against published runs: the cross-validated (out-of-sample) error recorded by the last
    `capplan calibrate-published`, and the in-sample fit error of every run, computed now."""
    from app.domain.estimator.validation import accuracy_table
    from app.web.charts import accuracy_option

    table = accuracy_table(catalog)
    return render(request, "pages/accuracy.html", {"table": table, "option": accuracy_option(table.rows)})


def _safe_next(target: str) -> str:
    """Only same-site paths: never redirect to another host after login."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: Annotated[str, Query(max_length=2000)] = "/") -> HTMLResponse:  # noqa: A002
    return render(request, "pages/login.html", {"next": _safe_next(next), "error": None})


@router.post("/login", response_class=HTMLResponse, dependencies=[Depends(verify_csrf)])
async def login(request: Request) -> Response:
    settings = request.app.state.settings
    form = await request.form()
    target = _safe_next(str(form.get("next") or "/"))
    password = str(form.get("password") or "")
    expected = settings.ui_password.get_secret_value() if settings.ui_password else None
    if expected is None:
        return RedirectResponse(target, status_code=303)
    limiter = request.app.state.login_limiter
    client = request.client.host if request.client else "unknown"
    wait = limiter.retry_after(client)
    if wait:
        response = render(
            request, "pages/login.html",
            {"next": target, "error": f"Too many failed attempts; try again in {wait} s."}, status_code=429,
        )  # fmt: skip
        response.headers["Retry-After"] = str(wait)
        return response
    if not hmac.compare_digest(password.encode(), expected.encode()):
        limiter.failed(client)
        return render(
            request, "pages/login.html", {"next": target, "error": "Wrong password."}, status_code=401
        )
    limiter.succeeded(client)
    secret = (settings.secret_key or settings.ui_password).get_secret_value()
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(SESSION_COOKIE, session_cookie(secret), httponly=True, samesite="lax",
                        max_age=SESSION_SECONDS, path="/")  # fmt: skip
    return response


@router.post("/logout", dependencies=[Depends(verify_csrf)])
def logout() -> Response:
    """Forget this browser's session (the cookie is signed, not stored: rotate CAPPLAN_SECRET_KEY to end every
    session at once)."""
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
