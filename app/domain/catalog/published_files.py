"""Loading the published reference runs (data/published_runs*.toml) and their cross-checks against
the architecture presets and the hardware nodes.
"""

from __future__ import annotations

from pathlib import Path

from app.domain.catalog.toml_io import CatalogError, check_sources, parse_entries, parse_table
from app.domain.estimator.hardware import HardwareCatalog
from app.domain.estimator.published import (
    PUBLISHED_RUNS_DIR,
    PUBLISHED_RUNS_FILE,
    PUBLISHED_RUNS_TABLE,
    RELIABILITY_TABLE,
    PublishedReliabilityStats,
    PublishedRun,
)
from app.domain.model.architecture import Architecture, architecture_by_slug
from app.domain.provenance import Source


def load_published_runs(data_dir: Path, sources: dict[str, Source]) -> tuple[PublishedRun, ...]:
    """``data/published_runs.toml`` and ``data/published_runs/*.toml`` (one file per source family) → validated
    runs, slugs unique across files; :class:`CatalogError` on a bad entry, a duplicate or an unknown source key."""
    paths = [data_dir / PUBLISHED_RUNS_FILE, *sorted((data_dir / PUBLISHED_RUNS_DIR).glob("*.toml"))]
    runs: list[PublishedRun] = []
    seen: dict[str, Path] = {}
    for path in paths:
        entries = parse_entries(path, PUBLISHED_RUNS_TABLE, PublishedRun)
        check_sources(path, PUBLISHED_RUNS_TABLE, entries, sources)
        for run in entries:
            if run.slug in seen:
                raise CatalogError(path, run.slug, f"duplicate run slug (also in {seen[run.slug].name})")
            seen[run.slug] = path
        runs.extend(entries)
    return tuple(runs)


def load_published_reliability(data_dir: Path, sources: dict[str, Source]) -> PublishedReliabilityStats:
    path = data_dir / PUBLISHED_RUNS_FILE
    stats = parse_table(path, RELIABILITY_TABLE, PublishedReliabilityStats)
    for key in sorted(stats.source_keys()):
        if key not in sources:
            raise CatalogError(path, f"{RELIABILITY_TABLE}.source", f"unknown source key {key!r}")
    return stats


def check_run_architectures(runs: tuple[PublishedRun, ...], presets: tuple[Architecture, ...]) -> None:
    """Every preset a run names exists and agrees with the run's transcribed shape; else :class:`CatalogError`."""
    path = PUBLISHED_RUNS_FILE
    for run in runs:
        if run.architecture is None:
            continue
        try:
            arch = architecture_by_slug(presets, run.architecture)
        except KeyError as exc:
            raise CatalogError(path, f"{run.slug}.architecture", str(exc)) from None
        mismatched = [
            f
            for f, expected in (
                ("n_layers", arch.n_layers),
                ("hidden_size", arch.hidden_size),
                ("n_heads", arch.n_heads),
                ("n_kv_heads", arch.n_kv_heads),
                ("ffn_hidden_size", arch.ffn_hidden_size),
                ("vocab_size", arch.vocab_size),
                ("activation", arch.activation),
            )
            if getattr(run, f) != expected
        ]
        if mismatched:
            raise CatalogError(
                path, f"{run.slug}.architecture", f"preset {arch.slug} differs in {mismatched}"
            )


def check_run_nodes(runs: tuple[PublishedRun, ...], hardware: HardwareCatalog) -> None:
    """Every node a run names exists and carries the run's accelerator; else :class:`CatalogError`."""
    nodes = {n.slug: n for n in hardware.nodes}
    for run in runs:
        if run.node is None:
            continue
        node = nodes.get(run.node)
        if node is None:
            raise CatalogError(PUBLISHED_RUNS_FILE, f"{run.slug}.node", f"unknown node {run.node!r}")
        if run.accelerator is not None and node.accelerator != run.accelerator:
            raise CatalogError(
                PUBLISHED_RUNS_FILE,
                f"{run.slug}.node",
                f"node {run.node} carries {node.accelerator}, not the run's {run.accelerator}",
            )


# -- the run's model and its FLOP accounting -------------------------------------------------------------------
