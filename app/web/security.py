"""CSRF protection for the HTML forms and an optional login for shared deployments.

CSRF: a double-submit token. Every page sets the ``capplan_csrf`` cookie (random, SameSite=Strict) when the
browser has none, and every POST form carries the same value in a hidden ``csrf_token`` field (or the
``X-CSRF-Token`` header); :func:`verify_csrf` refuses a POST whose two values differ (403). A cross-site page
can make the browser send the cookie but cannot read it to fill in the field.

Who may write through the UI (save, change, rename, duplicate, delete scenarios): with ``CAPPLAN_UI_PASSWORD``
set, whoever logged in (every page is behind the login); without it, only a client on the loopback interface
(127.0.0.0/8 or ::1, with no Forwarded/X-Forwarded-For header) -- the single-user laptop case. Anyone else gets
403 and the reason: a server reachable from other hosts needs the UI password for writes through the browser
(the JSON API keeps its bearer token). :func:`require_ui_writer` enforces it.

Login attempts are rate-limited per client address (:class:`LoginLimiter`: 5 failures a minute, then 429 with
Retry-After) and in total (60 failures a minute); ``POST /logout`` clears the session cookie.

Login: when ``CAPPLAN_UI_PASSWORD`` is set, every HTML page (not the JSON API, which has its bearer token, nor
/healthz, /metrics, /static) needs the ``capplan_session`` cookie that ``POST /login`` sets: an HMAC of its
expiry time keyed by ``CAPPLAN_SECRET_KEY``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import deque

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


def is_loopback_client(request: Request) -> bool:
    """The request comes from this host, directly: a loopback address and no proxy header (a reverse proxy on
    the same host would make every client look local)."""
    if request.headers.get("forwarded") or request.headers.get("x-forwarded-for"):
        return False
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def require_ui_writer(request: Request) -> None:
    """Dependency for every HTML form that writes: the CSRF token, then the UI password's session (checked by
    the login middleware when a password is set) or a loopback client."""
    await verify_csrf(request)
    if request.app.state.settings.ui_password is not None:
        return  # LoginRequired already refused requests without a valid session
    if not is_loopback_client(request):
        raise HTTPException(
            403,
            "saving through the browser is open to this machine only: set CAPPLAN_UI_PASSWORD on a server "
            "others can reach (or use the JSON API with its bearer token)",
        )


class LoginLimiter:
    """Failed logins per client address in a sliding window, and in total (a distributed guesser)."""

    def __init__(self, per_client: int = 5, total: int = 60, window_s: float = 60.0) -> None:
        self.per_client, self.total, self.window_s = per_client, total, window_s
        self._failures: dict[str, deque[float]] = {}
        self._all: deque[float] = deque()
        self._lock = threading.Lock()

    def _trim(self, q: deque[float], now: float) -> None:
        while q and q[0] <= now - self.window_s:
            q.popleft()

    def retry_after(self, client: str, now: float | None = None) -> int:
        """Seconds until ``client`` may try again (0: now)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._trim(self._all, now)
            q = self._failures.get(client, deque())
            self._trim(q, now)
            waits = []
            if len(q) >= self.per_client:
                waits.append(q[0] + self.window_s - now)
            if len(self._all) >= self.total:
                waits.append(self._all[0] + self.window_s - now)
            return max(1, int(max(waits)) + 1) if waits else 0

    def failed(self, client: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            if len(self._failures) > 10_000:  # bounded memory: forget clients with no recent failure
                for key in [k for k, q in self._failures.items() if not q or q[-1] <= now - self.window_s]:
                    del self._failures[key]
            self._failures.setdefault(client, deque()).append(now)
            self._all.append(now)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)
