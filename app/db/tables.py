"""ORM tables: saved scenarios, shared config.json files, user catalog additions, benchmark runs and their samples."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Enum, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db.base import Base


def utcnow() -> datetime:
    return datetime.now(UTC)


class CustomKind(enum.StrEnum):
    accelerator = "accelerator"
    node = "node"
    price = "price"


class Scenario(Base):
    """A saved planning scenario: its inputs and the catalog figures the user overrode."""

    __tablename__ = "scenarios"
    __table_args__ = {"sqlite_autoincrement": True}  # ids are never reused (migration 0002)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    inputs: Mapped[dict[str, Any]] = mapped_column(default=dict)
    overrides: Mapped[dict[str, Any]] = mapped_column(default=dict)
    version: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    __mapper_args__ = {"version_id_col": version}


class SharedConfig(Base):
    """A config.json a planner link names by ``config=<id>`` instead of carrying it (an upload made URLs 100 KB).
    The id is the start of the SHA-256 of the compact JSON text, so the same config always gets the same id and
    a row is never changed; ``body`` is that text."""

    __tablename__ = "shared_configs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CustomCatalogEntry(Base):
    """An accelerator, node or price a user added; validated by the same domain model as data/."""

    __tablename__ = "custom_catalog_entries"
    __table_args__ = (UniqueConstraint("kind", "slug", name="kind_slug"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[CustomKind] = mapped_column(
        Enum(CustomKind, native_enum=False, length=32, name="custom_kind")
    )
    slug: Mapped[str] = mapped_column(String(64))
    body: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class BenchmarkRun(Base):
    """One execution of the microbenchmark runner, with the hardware and software it ran on."""

    __tablename__ = "benchmark_runs"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(primary_key=True)
    preset: Mapped[str] = mapped_column(String(120))
    accelerator_slug: Mapped[str | None] = mapped_column(String(64), index=True)
    node_slug: Mapped[str | None] = mapped_column(String(64))
    world_size: Mapped[int] = mapped_column(default=1)
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    hardware: Mapped[dict[str, Any]] = mapped_column(default=dict)
    software: Mapped[dict[str, Any]] = mapped_column(default=dict)
    notes: Mapped[str] = mapped_column(Text, default="")
    measured_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    samples: Mapped[list[BenchmarkSample]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="BenchmarkSample.id"
    )


class BenchmarkSample(Base):
    """One measured figure of a run (per rank), next to the estimator's prediction for it."""

    __tablename__ = "benchmark_samples"
    __table_args__ = (
        Index("ix_benchmark_samples_run_metric", "run_id", "metric"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("benchmark_runs.id", ondelete="CASCADE"))
    rank: Mapped[int] = mapped_column(default=0)
    metric: Mapped[str] = mapped_column(String(80))
    unit: Mapped[str] = mapped_column(String(32))
    measured: Mapped[float]
    predicted: Mapped[float | None]

    run: Mapped[BenchmarkRun] = relationship(back_populates="samples")
