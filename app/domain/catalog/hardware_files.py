"""Loading data/accelerators.toml, nodes.toml and fabrics.toml into a :class:`HardwareCatalog`,
cross-checked (switch fabrics, node accelerators and fabrics).
"""

from __future__ import annotations

from pathlib import Path

from app.domain.catalog.toml_io import CatalogError, check_sources, parse_entries, read_toml
from app.domain.estimator.hardware import (
    Accelerator,
    Fabric,
    HardwareCatalog,
    Node,
    Switch,
    Topology,
    node_problem,
)
from app.domain.provenance import Source

ACCELERATORS_FILE = "accelerators.toml"
NODES_FILE = "nodes.toml"
FABRICS_FILE = "fabrics.toml"
FILE_TABLES = {
    ACCELERATORS_FILE: ("accelerators",),
    NODES_FILE: ("nodes",),
    FABRICS_FILE: ("fabrics", "switches", "topologies"),
}


def load_hardware(data_dir: Path, sources: dict[str, Source]) -> HardwareCatalog:
    """Load and cross-check the hardware files of ``data_dir``; CatalogError names file, key, reason."""
    data_dir = Path(data_dir)
    for name, tables in FILE_TABLES.items():
        _check_tables(data_dir / name, tables)
    acc_path, node_path, fab_path = (data_dir / n for n in (ACCELERATORS_FILE, NODES_FILE, FABRICS_FILE))
    accelerators = _entries(acc_path, "accelerators", Accelerator, sources)
    fabrics = _entries(fab_path, "fabrics", Fabric, sources)
    switches = _entries(fab_path, "switches", Switch, sources)
    topologies = _entries(fab_path, "topologies", Topology, sources)
    nodes = _entries(node_path, "nodes", Node, sources)
    _check_switches(fab_path, switches, fabrics)
    _check_nodes(node_path, nodes, accelerators, fabrics)
    return HardwareCatalog(accelerators, nodes, fabrics, switches, topologies)


def _check_tables(path: Path, tables: tuple[str, ...]) -> None:
    for key in read_toml(path):
        if key not in tables:
            raise CatalogError(path, key, f"unexpected table; this file holds {', '.join(tables)}")


def _entries(path: Path, table: str, model: type, sources: dict[str, Source]) -> tuple:
    entries = parse_entries(path, table, model)
    check_sources(path, table, entries, sources)
    return entries


def _check_switches(path: Path, switches: tuple[Switch, ...], fabrics: tuple[Fabric, ...]) -> None:
    by_slug = {f.slug: f for f in fabrics}
    for sw in switches:
        fabric = by_slug.get(sw.fabric)
        if fabric is None:
            raise CatalogError(path, f"switches ({sw.slug!r}).fabric", _unknown("fabric", sw.fabric, by_slug))
        if fabric.is_scale_up:
            raise CatalogError(
                path, f"switches ({sw.slug!r}).fabric", f"{sw.fabric!r} is not a network fabric"
            )


def _check_nodes(
    path: Path, nodes: tuple[Node, ...], accelerators: tuple[Accelerator, ...], fabrics: tuple[Fabric, ...]
) -> None:
    accs = {a.slug: a for a in accelerators}
    fabs = {f.slug: f for f in fabrics}
    for node in nodes:
        label = f"nodes ({node.slug!r})"
        acc = accs.get(node.accelerator)
        if acc is None:
            raise CatalogError(path, f"{label}.accelerator", _unknown("accelerator", node.accelerator, accs))
        for field in ("intra_node_fabric", "scale_out_fabric"):
            if getattr(node, field) not in fabs:
                raise CatalogError(path, f"{label}.{field}", _unknown("fabric", getattr(node, field), fabs))
        problem = node_problem(node, acc, fabs[node.intra_node_fabric], fabs[node.scale_out_fabric])
        if problem:
            raise CatalogError(path, f"{label}.{problem[0]}", problem[1])


def _unknown(kind: str, slug: str, known: dict) -> str:
    return f"unknown {kind} {slug!r}; known: {', '.join(sorted(known))}"
