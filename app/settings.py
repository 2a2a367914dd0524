"""The one Settings object. Every field can be set from the environment with the CAPPLAN_ prefix."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CAPPLAN_", env_file=".env", extra="ignore")

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
