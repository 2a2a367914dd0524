"""config.json files shared by id: a planner link says ``config=<id>`` instead of carrying the whole file.

The id is the first 20 hex digits of the SHA-256 of the config's compact JSON (sorted keys), so storing is
idempotent (the same config always gets the same id, a row never changes) and a link cannot be guessed from
another. Rows are never deleted by the app; ``capplan db export`` keeps them.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.tables import SharedConfig

CONFIG_ID_PATTERN = re.compile(r"[0-9a-f]{20}")
MAX_SHARED_CONFIG_CHARS = 64_000
"""The largest compact config.json stored (the planner's own limit for a config.json)."""


def compact_config(config: dict[str, Any]) -> str:
    return json.dumps(config, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def config_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def store_config(session: Session, config: dict[str, Any]) -> str | None:
    """The id of ``config`` (stored now unless it already is); None when it is over the size limit or, in the
    astronomically unlikely case, its id already names another config."""
    text = compact_config(config)
    if len(text) > MAX_SHARED_CONFIG_CHARS:
        return None
    key = config_id(text)
    row = session.get(SharedConfig, key)
    if row is None:
        session.add(SharedConfig(id=key, body=text))
        try:
            session.commit()
        except IntegrityError:  # stored by a concurrent request in the meantime
            session.rollback()
            row = session.get(SharedConfig, key)
        else:
            return key
    return key if row is not None and row.body == text else None


def load_config(session: Session, key: str) -> str | None:
    """The stored config.json text of ``key``, or None when no config has that id."""
    if not CONFIG_ID_PATTERN.fullmatch(key):
        return None
    row = session.get(SharedConfig, key)
    return row.body if row is not None else None
