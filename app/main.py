"""create_app(settings) → FastAPI. Nothing is built at import time; `capplan serve` uses the factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html import escape
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_fastapi_instrumentator import Instrumentator
from sqlalchemy.exc import DataError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api import benchmarks as api_benchmarks
from app.api import catalog as api_catalog
from app.api import cost as api_cost
from app.api import estimate as api_estimate
from app.api import health
from app.api import plans as api_plans
from app.api import scenarios as api_scenarios
from app.api import search as api_search
from app.api import size as api_size
from app.calibration_store import CalibrationCache, load_shipped_runs
from app.db.engine import build_engine, session_factory
from app.domain.catalog import UnknownSlugError, load_catalog
from app.metrics import build_metrics
from app.schemas import JSON_MAX_DEPTH, ErrorOut
from app.services.errors import InputError
from app.services.search import SearchBudget, SearchBusy
from app.services.size_jobs import SizingJobs
from app.settings import REPO_ROOT, Settings
from app.web import benchmarks as web_benchmarks
from app.web import cost_view as web_cost_view
from app.web import planner as web_planner
from app.web import routes as web_routes
from app.web import scenarios as web_scenarios
from app.web import search as web_search
from app.web import size as web_size
from app.web.htmx import render
from app.web.security import SESSION_COOKIE, LoginLimiter, needs_login, valid_session
from app.web.templating import build_templates

API_PREFIX = "/api/v1"
log = logging.getLogger("capplan")

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


class SecurityHeaders:
    """Pure ASGI middleware adding SECURITY_HEADERS to every HTTP response that lacks them (cheaper than
    Starlette's BaseHTTPMiddleware, which runs each request through an extra task and stream)."""

    def __init__(self, app) -> None:
        self.app = app
        self._headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in self._headers if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


MAX_BODY_BYTES = 2_000_000  # the largest legitimate body: a config.json upload or a backup-free API call


class BodyLimit:
    """Refuse request bodies over ``MAX_BODY_BYTES`` with 413, whether announced (Content-Length) or streamed."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def counting_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, counting_receive, send)
        except _BodyTooLarge:
            await self._too_large(scope, receive, send)

    async def _too_large(self, scope, receive, send) -> None:
        if scope.get("path") == HF_UPLOAD_PATH and scope.get("method") == "POST":
            # the planner's config.json upload is a plain form post: send the user back to the planner with the
            # inputs the page's URL held (its Referer) and a message saying the file is too large, not raw JSON
            response = RedirectResponse(_upload_too_large_target(scope), status_code=303)
            await response(scope, receive, send)
            return
        response = JSONResponse(
            {
                "detail": [
                    {
                        "loc": ["body"],
                        "msg": f"request body over {self.max_bytes:,} bytes",
                        "type": "too_large",
                    }
                ]
            },
            status_code=413,
        )
        await response(scope, receive, send)


HF_UPLOAD_PATH = "/planner/hf-config"


def _upload_too_large_target(scope) -> str:
    headers = dict(scope.get("headers") or [])
    declared = headers.get(b"content-length", b"").decode("latin-1")
    query = urlsplit(headers.get(b"referer", b"").decode("latin-1")).query
    params = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "upload_too_large"]
    params.append(("upload_too_large", declared if declared.isdigit() else ""))
    return "/?" + urlencode(params)


class _BodyTooLarge(Exception):
    pass


class LoginRequired:
    """With CAPPLAN_UI_PASSWORD set, HTML pages need the signed session cookie; others go to /login."""

    def __init__(self, app, secret: str) -> None:
        self.app = app
        self.secret = secret

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and needs_login(scope["path"]):
            request = Request(scope)
            if not valid_session(self.secret, request.cookies.get(SESSION_COOKIE)):
                target = scope["path"] + (
                    f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
                )
                response = RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith(API_PREFIX) or request.url.path in ("/healthz",)


DB_RETRY_AFTER_S = 10
API_COMMON_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {
        "model": ErrorOut,
        "description": "the database is unavailable, or the search budget is spent (Retry-After)",
    }
}


def _error_page(
    request: Request, status_code: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    """The site's error page; a plain HTML page with the same headers if even the template cannot render."""
    try:
        response = render(
            request,
            "pages/error.html",
            {"status_code": status_code, "message": message, "known": None},
            block="content",
            status_code=status_code,
        )
    except Exception:  # noqa: BLE001 - the last resort must answer
        log.exception("error page failed to render")
        response = HTMLResponse(
            f"<!doctype html><title>Error {status_code}</title><h1>{status_code} — {escape(message)}</h1>",
            status_code=status_code,
        )
    response.headers.update(headers or {})
    return response


def _error(
    request: Request, status_code: int, detail: Any, headers: dict[str, str] | None = None
) -> Response:
    if _wants_json(request):
        return JSONResponse({"detail": detail}, status_code=status_code, headers=headers)
    message = detail if isinstance(detail, str) else "; ".join(str(d.get("msg", d)) for d in detail)
    return _error_page(request, status_code, message, headers)


def _body_parse_error(exc: StarletteHTTPException) -> str | None:
    """FastAPI answers a JSON body its parser cannot read (nesting past the recursion limit, an integer past
    4,300 digits) with a bare 400; say what is wrong instead, as a 422 like every other bad input."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, RecursionError):
        return f"the JSON body is nested too deeply to read (a config.json may nest at most {JSON_MAX_DEPTH} levels)"
    if isinstance(cause, ValueError):
        return f"the JSON body cannot be read: {str(cause)[:120]}"
    return None


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def database_unavailable(request: Request, exc: Exception) -> Response:
        log.warning("database unavailable: %s", str(exc).splitlines()[0][:200])
        return _error(
            request,
            503,
            "the database is unavailable; try again shortly (GET /healthz shows its state)",
            {"Retry-After": str(DB_RETRY_AFTER_S)},
        )

    @app.exception_handler(DataError)
    async def unstorable_value(request: Request, exc: DataError) -> Response:
        # the last line of defence (inputs are validated first): PostgreSQL refuses e.g. a NUL character in text
        reason = (
            str(exc.orig).splitlines()[0] if exc.orig is not None else "a value the database cannot store"
        )
        return _error(request, 422, [{"loc": ["query"], "msg": reason, "type": "value_error.database"}])

    @app.exception_handler(SearchBusy)
    async def search_busy(request: Request, exc: SearchBusy) -> Response:
        return _error(request, exc.status_code, str(exc), {"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        # runs in Starlette's outermost middleware, outside SecurityHeaders: the headers are added here
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        response = _error(request, 500, "internal error; the server log has the details")
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.exception_handler(UnknownSlugError)
    async def unknown_slug(request: Request, exc: UnknownSlugError) -> Response:
        if _wants_json(request):
            return JSONResponse({"detail": str(exc), "known": exc.known}, status_code=404)
        return render(
            request,
            "pages/error.html",
            {"status_code": 404, "message": str(exc).split(";")[0], "known": exc.known},
            block="content",
            status_code=404,
        )

    @app.exception_handler(InputError)
    async def input_error(request: Request, exc: InputError) -> Response:
        if _wants_json(request):
            return JSONResponse({"detail": exc.errors}, status_code=422)
        return render(
            request,
            "pages/error.html",
            {"status_code": 422, "message": str(exc), "known": None},
            block="content",
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        parse_error = _body_parse_error(exc)
        if parse_error is not None:
            return _error(request, 422, [{"loc": ["body"], "msg": parse_error, "type": "json_invalid"}])
        if _wants_json(request):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        return render(
            request,
            "pages/error.html",
            {"status_code": exc.status_code, "message": str(exc.detail), "known": None},
            block="content",
            status_code=exc.status_code,
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        if _wants_json(request):
            return JSONResponse({"detail": errors}, status_code=422)
        message = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'input'}: {e['msg']}" for e in errors
        )
        return render(
            request,
            "pages/error.html",
            {"status_code": 422, "message": message, "known": None},
            block="content",
            status_code=422,
        )


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    app.state.engine.dispose()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    logging.basicConfig(level=settings.log_level)
    catalog = load_catalog(settings.data_dir)  # fails fast: file, key, reason
    shipped = load_shipped_runs(
        settings.data_dir, accelerators=[a.slug for a in catalog.hardware.accelerators]
    )
    engine = build_engine(settings.database_url)
    metrics = build_metrics()
    for kind, n in catalog.counts().items():
        metrics.catalog_entries.labels(kind=kind).set(n)

    app = FastAPI(
        title="capplan",
        version="0.1.0",
        summary="Capacity and cost planning for LLM training clusters",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # Swagger UI loads from a CDN; capplan is offline by design (see /api page)
        redoc_url=None,
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.catalog = catalog
    app.state.engine = engine
    app.state.session_factory = session_factory(engine)
    app.state.calibrations = CalibrationCache(app.state.session_factory, shipped)
    app.state.metrics = metrics
    app.state.login_limiter = LoginLimiter()
    app.state.search_budget = SearchBudget(settings.search_concurrency, settings.search_timeout_s)
    app.state.sizing_jobs = SizingJobs()  # the size page's background runs (app/services/size_jobs.py)
    app.state.templates = build_templates()

    app.add_middleware(GZipMiddleware, minimum_size=1024)
    if settings.ui_password is not None:
        secret = settings.secret_key or settings.ui_password
        app.add_middleware(LoginRequired, secret=secret.get_secret_value())
    app.add_middleware(BodyLimit)
    app.add_middleware(SecurityHeaders)
    _install_error_handlers(app)
    app.include_router(health.router)
    api = {"prefix": API_PREFIX, "responses": API_COMMON_RESPONSES}
    app.include_router(api_catalog.router, **api)
    app.include_router(api_estimate.router, **api)
    app.include_router(api_search.router, **api)
    app.include_router(api_size.router, **api)
    app.include_router(api_cost.router, **api)
    app.include_router(api_plans.router, **api)
    app.include_router(api_scenarios.router, **api)
    app.include_router(web_planner.router)
    app.include_router(web_cost_view.router)
    app.include_router(web_scenarios.router)
    app.include_router(web_search.router)
    app.include_router(web_size.router)
    app.include_router(api_benchmarks.router, **api)
    app.include_router(web_routes.router)
    app.include_router(web_benchmarks.router)
    app.mount("/static", StaticFiles(directory=str(REPO_ROOT / "static")), name="static")

    Instrumentator(
        registry=metrics.registry,
        should_ignore_untemplated=True,
        excluded_handlers=["/metrics", "/static.*"],
    ).instrument(app, latency_lowr_buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)).expose(
        app, include_in_schema=False
    )

    return app
