"""The one Settings object. Every field can be set from the environment with the CAPPLAN_ prefix, or from a
``.env`` file in the working directory (``CAPPLAN_DATABASE_URL=…`` lines); the environment wins over the file
and keyword arguments over both.

Read by hand rather than with pydantic-settings: that package imports asyncio and ssl, about a fifth of a
second on this machine before ``capplan plan`` can start (see ``make bench``); the rules it applied here are
the few lines of :func:`environment_values`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_PREFIX = "CAPPLAN_"
ENV_FILE = ".env"


def _dotenv(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a .env file (``export`` prefixes, comments, blank lines and matching quotes
    allowed); an absent or unreadable file is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def environment_values(
    fields: set[str], environ: dict[str, str] | None = None, env_file: Path | None = None
) -> dict[str, str]:
    """The settings given outside the code: ``CAPPLAN_<FIELD>`` (any case) from ``env_file`` (default
    ``./.env``), then from ``environ`` (default ``os.environ``), which wins; names that are no field are
    ignored."""
    found: dict[str, str] = {}
    sources = (
        _dotenv(Path(ENV_FILE) if env_file is None else env_file),
        os.environ if environ is None else environ,
    )
    for source in sources:
        for key, value in source.items():
            upper = key.upper()
            if upper.startswith(ENV_PREFIX) and (name := upper[len(ENV_PREFIX) :].lower()) in fields:
                found[name] = value
    return found


class Settings(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_default=False)

    def __init__(self, **values: Any) -> None:
        super().__init__(**(environment_values(set(type(self).model_fields)) | values))

    database_url: str = Field(
        default=f"sqlite:///{REPO_ROOT / 'var' / 'capplan.db'}",
        description="SQLAlchemy URL; SQLite file by default, postgresql+psycopg://… for PostgreSQL.",
    )
    data_dir: Path = Field(
        default=REPO_ROOT / "data", description="Directory holding the catalog TOML files."
    )
    api_token: SecretStr | None = Field(
        default=None, description="Bearer token required by write endpoints; writes are refused when unset."
    )
    log_level: str = Field(default="INFO", description="Python logging level name.")
    ui_password: SecretStr | None = Field(
        default=None, description="when set, the browser UI asks for this password (shared deployments)"
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="signs the UI login cookie; set it (the same on every worker) when ui_password is set",
    )
    search_max_plans: int = Field(
        default=2_000_000, ge=1_000, description="largest plan-search space served (grid points, ~10 s)"
    )

    search_concurrency: int = Field(
        default=2, ge=1, le=64, description="plan searches run at once per worker; more wait, then get 503"
    )
    search_timeout_s: float = Field(
        default=20.0,
        gt=0,
        le=600,
        description="a plan search still running after this many seconds is stopped",
    )

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in {"CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"}:
            raise ValueError(f"unknown log level {value!r}")
        return upper
