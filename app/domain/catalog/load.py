"""Loading the whole catalog: every data/*.toml file read, validated and cross-checked into one
:class:`~app.domain.catalog.store.Catalog`; the small per-file loaders (architectures, efficiency, fit record).

Loading fails fast with a :class:`CatalogError` naming the file, the key and the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.domain.catalog.cost_files import load_cost_catalog
from app.domain.catalog.hardware_files import load_hardware
from app.domain.catalog.published_files import check_run_architectures, check_run_nodes, load_published_runs
from app.domain.catalog.toml_io import CatalogError, load_sources
from app.domain.estimator.efficiency import EfficiencyCatalog
from app.domain.estimator.fitted import FitRecord, apply_values
from app.domain.model.architecture import Architecture
from app.domain.provenance import Source

if TYPE_CHECKING:
    pass
from app.domain.catalog.store import Catalog
from app.domain.catalog.toml_io import check_sources, parse_entries, parse_table, read_toml
from app.domain.estimator.efficiency import (
    EFFICIENCY_FILE,
    AcceleratorEfficiency,
    NetworkEfficiency,
    RuntimeMemory,
    ScaleTerms,
    StackProfile,
)
from app.domain.estimator.fitted import FITTED_FILE, PARAMETERS
from app.domain.model.architecture import ARCHITECTURES_FILE, ARCHITECTURES_TABLE


def load_catalog(data_dir: Path) -> Catalog:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise CatalogError(data_dir, "-", "catalog directory not found")
    sources = load_sources(data_dir)
    hardware = load_hardware(data_dir, sources)
    cost = load_cost_catalog(data_dir, sources, {n.slug for n in hardware.nodes})
    architectures = load_architectures(data_dir, sources)
    published = load_published_runs(data_dir, sources)
    check_run_architectures(published, architectures)
    check_run_nodes(published, hardware)
    priors = load_efficiency(data_dir, sources, {a.slug for a in hardware.accelerators})
    fit = load_fit_record(data_dir)
    efficiency = apply_values(priors, fit.values, fit) if fit else priors
    return Catalog(
        sources=sources,
        hardware=hardware,
        cost=cost,
        architectures=architectures,
        published_runs=published,
        efficiency=efficiency,
        data_dir=data_dir,
        efficiency_priors=priors,
        fit=fit,
    )


def load_architectures(data_dir: Path, sources: dict[str, Source]) -> tuple[Architecture, ...]:
    """``data/architectures.toml`` → validated presets; :class:`CatalogError` on a bad entry or source."""
    path = data_dir / ARCHITECTURES_FILE
    entries = parse_entries(path, ARCHITECTURES_TABLE, Architecture)
    check_sources(path, ARCHITECTURES_TABLE, entries, sources)
    return entries


def load_efficiency(
    data_dir: Path, sources: dict[str, Source], accelerator_slugs: set[str]
) -> EfficiencyCatalog:
    path = Path(data_dir) / EFFICIENCY_FILE
    read_toml(path)
    accelerators = parse_entries(path, "efficiency", AcceleratorEfficiency)
    networks = parse_entries(path, "network_efficiency", NetworkEfficiency)
    runtime = parse_table(path, "runtime", RuntimeMemory)
    stacks = parse_entries(path, "stack_profile", StackProfile)
    scale = parse_table(path, "scale_terms", ScaleTerms)
    check_sources(path, "stack_profile", stacks, sources)
    check_sources(path, "scale_terms", (scale,), sources)
    check_sources(path, "efficiency", accelerators, sources)
    check_sources(path, "network_efficiency", networks, sources)
    check_sources(path, "runtime", (runtime,), sources)
    missing = sorted(accelerator_slugs - {e.slug for e in accelerators})
    if missing:
        raise CatalogError(path, "efficiency", f"no defaults for accelerators {', '.join(missing)}")
    unknown = sorted({e.slug for e in accelerators} - accelerator_slugs)
    if unknown:
        raise CatalogError(path, "efficiency", f"unknown accelerators {', '.join(unknown)}")
    missing_stacks = sorted({"megatron", "fsdp2", "deepspeed"} - {p.slug for p in stacks})
    if missing_stacks:
        raise CatalogError(path, "stack_profile", f"no profile for frameworks {', '.join(missing_stacks)}")
    return EfficiencyCatalog(
        accelerators=accelerators, networks=networks, runtime=runtime, stacks=stacks, scale=scale
    )


def load_fit_record(data_dir: Path) -> FitRecord | None:
    """``data/fitted.toml`` → :class:`FitRecord`, or None when no fit has been written."""
    path = Path(data_dir) / FITTED_FILE
    if not path.is_file():
        return None
    doc = read_toml(path)
    try:
        record = FitRecord.model_validate(doc.get("fit", {}))
    except ValueError as exc:
        raise CatalogError(path, "fit", str(exc).splitlines()[0]) from None
    known = {p.name for p in PARAMETERS}
    unknown = sorted(set(record.values) - known)
    if unknown:
        raise CatalogError(
            path, "fit.values", f"unknown parameters {unknown}; rerun capplan calibrate-published"
        )
    for p in PARAMETERS:
        v = record.values.get(p.name)
        if v is not None and not (p.lower <= v <= p.upper):
            raise CatalogError(path, f"fit.values.{p.name}", f"{v} outside [{p.lower}, {p.upper}]")
    return record
