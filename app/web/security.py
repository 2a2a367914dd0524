"""CSRF protection for the HTML forms and an optional login for shared deployments.

CSRF: a double-submit token. Every page sets the ``capplan_csrf`` cookie (random, SameSite=Strict) when the
browser has none, and every POST form carries the same value in a hidden ``csrf_token`` field (or the
``X-CSRF-Token`` header); :func:`verify_csrf` refuses a POST whose two values differ (403). A cross-site page
can make the browser send the cookie but cannot read it to fill in the field.

Login: when ``CAPPLAN_UI_PASSWORD`` is set, every HTML page (not the JSON API, which has its bearer token, nor
/healthz, /metrics, /static) needs the ``capplan_session`` cookie that ``POST /login`` sets: an HMAC of its
expiry time keyed by ``CAPPLAN_SECRET_KEY``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from fastapi import HTTPException, Request

CSRF_COOKIE = "capplan_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SESSION_COOKIE = "capplan_session"
SESSION_SECONDS = 12 * 3600
OPEN_PATHS = ("/login", "/static", "/healthz", "/metrics", "/api/", "/favicon.ico")


def csrf_token(request: Request) -> str:
    """The browser's token, or a new one (remembered on the request so the response can set the cookie)."""
    token = request.cookies.get(CSRF_COOKIE) or getattr(request.state, "new_csrf_token", None)
    if not token:
        token = secrets.token_urlsafe(32)
        request.state.new_csrf_token = token
    return token


def set_csrf_cookie(request: Request, response) -> None:
    token = getattr(request.state, "new_csrf_token", None)
    if token:
        response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")


async def verify_csrf(request: Request) -> None:
    """Dependency for every HTML POST: the form's (or header's) token must equal the cookie's."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = request.headers.get(CSRF_HEADER, "")
    if not sent:
        form = await request.form()
        value = form.get(CSRF_FIELD, "")
        sent = value if isinstance(value, str) else ""
    if not cookie or not sent or not hmac.compare_digest(cookie, sent):
        raise HTTPException(
            403, "the form's security token is missing or stale: reload the page and submit again"
        )


def _signature(secret: str, expires: int) -> str:
    return hmac.new(secret.encode(), f"capplan-session:{expires}".encode(), hashlib.sha256).hexdigest()


def session_cookie(secret: str, now: float | None = None) -> str:
    expires = int((now or time.time()) + SESSION_SECONDS)
    return f"{expires}.{_signature(secret, expires)}"


def valid_session(secret: str, value: str | None, now: float | None = None) -> bool:
    if not value or "." not in value:
        return False
    expires_text, signature = value.split(".", 1)
    if not expires_text.isdigit() or int(expires_text) < (now or time.time()):
        return False
    return hmac.compare_digest(signature, _signature(secret, int(expires_text)))


def needs_login(path: str) -> bool:
    return not path.startswith(OPEN_PATHS)
