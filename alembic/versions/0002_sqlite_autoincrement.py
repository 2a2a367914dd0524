"""ids are never reused: SQLite tables get AUTOINCREMENT

Without AUTOINCREMENT SQLite hands out max(id) + 1, so deleting the newest scenario and saving another gave the
new one the old id (``/scenarios/36`` became a different scenario). PostgreSQL's sequences never go back, so
nothing changes there. The tables are rebuilt (batch mode) with their rows; ids and data are kept.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 08:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# parents before children, so a child's rebuilt foreign key finds its parent
TABLES = ("scenarios", "custom_catalog_entries", "benchmark_runs", "benchmark_samples")


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
