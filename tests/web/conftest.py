"""Web tests post forms the way a browser does: with the CSRF cookie a page set and the same token in the form."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.web.security import CSRF_COOKIE, CSRF_FIELD


class BrowserLikeClient(TestClient):
    """A TestClient whose form posts carry the CSRF token (fetching a page first to get the cookie). It connects
    from 127.0.0.1, the single-user case in which the UI may write without a UI password."""

    def __init__(self, app, *args, **kwargs) -> None:
        kwargs.setdefault("client", ("127.0.0.1", 50000))
        super().__init__(app, *args, **kwargs)

    def post(self, url, *args, **kwargs):  # type: ignore[override]
        if not str(url).startswith("/api/") and "raw_csrf" not in kwargs:
            if CSRF_COOKIE not in self.cookies:
                self.get("/catalog")
            token = self.cookies[CSRF_COOKIE]
            if kwargs.get("files") is not None or kwargs.get("data") is not None:
                kwargs["data"] = {**(kwargs.get("data") or {}), CSRF_FIELD: token}
            else:
                kwargs["headers"] = {**(kwargs.get("headers") or {}), "X-CSRF-Token": token}
        kwargs.pop("raw_csrf", None)
        return super().post(url, *args, **kwargs)


@pytest.fixture
def client(settings) -> Iterator[TestClient]:
    from app.db.migrate import upgrade
    from app.main import create_app

    upgrade(settings.database_url)
    with BrowserLikeClient(create_app(settings)) as test_client:
        yield test_client
