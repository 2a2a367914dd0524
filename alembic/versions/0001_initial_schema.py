"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-12-02 15:49:37.385665
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db.base

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# what downgrading past this revision deletes, with every row in it (`capplan db downgrade` asks first)
DROPS_TABLES = ("benchmark_samples", "benchmark_runs", "custom_catalog_entries", "scenarios")


def upgrade() -> None:
    op.create_table(
        "benchmark_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("preset", sa.String(length=120), nullable=False),
        sa.Column("accelerator_slug", sa.String(length=64), nullable=True),
        sa.Column("node_slug", sa.String(length=64), nullable=True),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "hardware",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "software",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("measured_at", app.db.base.UTCDateTime(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmark_runs")),
    )
    with op.batch_alter_table("benchmark_runs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_benchmark_runs_accelerator_slug"), ["accelerator_slug"], unique=False
        )

    op.create_table(
        "custom_catalog_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "kind",
            sa.Enum("accelerator", "node", "price", name="custom_kind", native_enum=False, length=32),
            nullable=False,
        ),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column(
            "body",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", app.db.base.UTCDateTime(), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_custom_catalog_entries")),
        sa.UniqueConstraint("kind", "slug", name="kind_slug"),
    )
    op.create_table(
        "scenarios",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "inputs",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "overrides",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", app.db.base.UTCDateTime(), nullable=False),
        sa.Column("updated_at", app.db.base.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scenarios")),
    )
    op.create_table(
        "benchmark_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=80), nullable=False),
        sa.Column("unit", sa.String(length=32), nullable=False),
        sa.Column("measured", sa.Double(), nullable=False),
        sa.Column("predicted", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["benchmark_runs.id"],
            name=op.f("fk_benchmark_samples_run_id_benchmark_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmark_samples")),
    )
    with op.batch_alter_table("benchmark_samples", schema=None) as batch_op:
        batch_op.create_index("ix_benchmark_samples_run_metric", ["run_id", "metric"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("benchmark_samples", schema=None) as batch_op:
        batch_op.drop_index("ix_benchmark_samples_run_metric")

    op.drop_table("benchmark_samples")
    op.drop_table("scenarios")
    op.drop_table("custom_catalog_entries")
    with op.batch_alter_table("benchmark_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_benchmark_runs_accelerator_slug"))

    op.drop_table("benchmark_runs")
