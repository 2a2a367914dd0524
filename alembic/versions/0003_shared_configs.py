"""shared config.json files: planner links name an uploaded config by id instead of carrying it

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# what downgrading past this revision deletes (`capplan db downgrade` asks first): links with config=<id> stop
# opening their config.json
DROPS_TABLES = ("shared_configs",)


def upgrade() -> None:
    op.create_table(
        "shared_configs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shared_configs")),
    )


def downgrade() -> None:
    op.drop_table("shared_configs")
