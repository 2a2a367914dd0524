"""Loading data/prices.toml, data/selfbuild.toml and data/reliability.toml into a
:class:`CostCatalog`, cross-checked against the hardware nodes; CatalogError names file, key and reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.domain.catalog.toml_io import CatalogError, check_sources, parse_entries, parse_table
from app.domain.cost.price_records import (
    PRICING_TABLES,
    CostCatalog,
    InstancePrice,
    PricingTerms,
    ProviderPrice,
)
from app.domain.cost.selfbuild_records import (
    ColocationPrice,
    ComponentPrice,
    DepreciationOption,
    ElectricityPrice,
    PueOption,
    SelfBuild,
    SelfBuildDefaults,
    SelfBuildFactors,
    ServerPrice,
    StaffAssumptions,
    SystemPower,
)
from app.domain.figures import E, by_slug
from app.domain.provenance import CatalogEntry, Source
from app.domain.reliability.records import (
    AsyncCheckpoint,
    CheckpointDefaults,
    CheckpointFormula,
    Checkpointing,
    CheckpointNotes,
    CheckpointSize,
    FailureRecord,
    MeasuredCheckpoint,
    Reliability,
    ReliabilityDefaults,
    RestartTime,
    StorageBandwidth,
    StorageTier,
    TypicalMfu,
)

PRICES_FILE = "prices.toml"
SELFBUILD_FILE = "selfbuild.toml"
RELIABILITY_FILE = "reliability.toml"


def _parse_pricing_terms(path: Path, sources: dict[str, Source]) -> PricingTerms:
    parsed = {table: parse_table(path, table, model) for table, model in PRICING_TABLES.items()}
    for table, entry in parsed.items():
        check_sources(path, table, (entry,), sources)
    return PricingTerms(
        price_cut_2025=parsed["price_cut_2025"],
        savings_plans=parsed["savings_plans"],
        spot=parsed["spot_terms"],
        capacity_blocks=parsed["capacity_block_terms"],
        off_peak=parsed["off_peak"],
        storage=parsed["storage_prices"],
        data_transfer=parsed["data_transfer"],
    )


def _entries(path: Path, table: str, model: type[E], sources: dict[str, Source]) -> tuple[E, ...]:
    entries = parse_entries(path, table, model)
    check_sources(path, table, entries, sources)
    return entries


def _single(path: Path, table: str, model: type[E], sources: dict[str, Source]) -> E:
    entry = parse_table(path, table, model)
    check_sources(path, table, (entry,), sources)
    return entry


def _check_instances(path: Path, prices: tuple[InstancePrice, ...], node_slugs: set[str]) -> None:
    for i, price in enumerate(prices):
        if price.slug not in node_slugs:
            raise CatalogError(
                path,
                f"instance_prices[{i}] ({price.slug!r}).slug",
                f"unknown instance {price.slug!r}: not a node slug; known nodes: {', '.join(sorted(node_slugs))}",
            )


def _check_nodes(
    path: Path, table: str, entries: Sequence[ServerPrice | SystemPower], node_slugs: set[str]
) -> None:
    for entry in entries:
        for node in entry.nodes:
            if node not in node_slugs:
                raise CatalogError(path, f"{table} ({entry.slug!r}).nodes", f"unknown node {node!r}")


def _check_default(path: Path, key: str, slug: str, entries: Sequence[CatalogEntry]) -> None:
    known = [e.slug for e in entries]
    if slug not in known:
        raise CatalogError(path, key, f"unknown slug {slug!r}; known: {', '.join(known)}")


def _check_self_build(path: Path, sb: SelfBuild, node_slugs: set[str]) -> None:
    _check_nodes(path, "server_prices", sb.server_prices, node_slugs)
    _check_nodes(path, "system_power", sb.system_power, node_slugs)
    for node in {n for p in sb.system_power for n in p.nodes}:
        if sum(node in p.nodes for p in sb.system_power) > 1:
            raise CatalogError(path, "system_power", f"node {node!r} has more than one system power entry")
    d = sb.defaults
    for node, slug in d.server_price.items():
        key = f"self_build_defaults.server_price.{node}"
        if node not in node_slugs:
            raise CatalogError(path, key, f"unknown node {node!r}")
        _check_default(path, key, slug, sb.server_prices)
        if node not in by_slug(sb.server_prices, slug, "server price").nodes:
            raise CatalogError(path, key, f"server price {slug!r} does not list node {node!r}")
    _check_default(path, "self_build_defaults.switch_price", d.switch_price, sb.component_prices)
    _check_default(path, "self_build_defaults.pue", d.pue, sb.pue_options)
    _check_default(path, "self_build_defaults.electricity", d.electricity, sb.electricity_prices)
    _check_default(path, "self_build_defaults.colocation", d.colocation, sb.colocation_prices)
    _check_default(path, "self_build_defaults.depreciation", d.depreciation, sb.depreciation_options)


def load_self_build(path: Path, sources: dict[str, Source], node_slugs: set[str]) -> SelfBuild:
    sb = SelfBuild(
        server_prices=_entries(path, "server_prices", ServerPrice, sources),
        component_prices=_entries(path, "component_prices", ComponentPrice, sources),
        system_power=_entries(path, "system_power", SystemPower, sources),
        pue_options=_entries(path, "pue", PueOption, sources),
        electricity_prices=_entries(path, "electricity", ElectricityPrice, sources),
        colocation_prices=_entries(path, "colocation", ColocationPrice, sources),
        depreciation_options=_entries(path, "depreciation", DepreciationOption, sources),
        staff=_single(path, "staff", StaffAssumptions, sources),
        factors=_single(path, "factors", SelfBuildFactors, sources),
        defaults=parse_table(path, "self_build_defaults", SelfBuildDefaults),
    )
    _check_self_build(path, sb, node_slugs)
    return sb


def load_reliability(path: Path, sources: dict[str, Source]) -> Reliability:
    rel = Reliability(
        failure_records=_entries(path, "failure_records", FailureRecord, sources),
        restart_times=_entries(path, "restart_times", RestartTime, sources),
        typical_mfu=_entries(path, "typical_mfu", TypicalMfu, sources),
        defaults=parse_table(path, "reliability_defaults", ReliabilityDefaults),
    )
    _check_default(path, "reliability_defaults.failure_rate", rel.defaults.failure_rate, rel.failure_records)
    _check_default(path, "reliability_defaults.restart_time", rel.defaults.restart_time, rel.restart_times)
    if rel.default_failure_record.failures_per_gpu_hour is None:
        raise CatalogError(
            path, "reliability_defaults.failure_rate", "the default record has no failure rate"
        )
    return rel


def load_checkpointing(path: Path, sources: dict[str, Source]) -> Checkpointing:
    ck = Checkpointing(
        formulas=_entries(path, "checkpoint_formulas", CheckpointFormula, sources),
        sizes=_entries(path, "checkpoint_sizes", CheckpointSize, sources),
        measured=_entries(path, "measured_checkpoints", MeasuredCheckpoint, sources),
        async_saves=_entries(path, "async_checkpoints", AsyncCheckpoint, sources),
        storage_bandwidths=_entries(path, "storage_bandwidth", StorageBandwidth, sources),
        storage_tiers=_entries(path, "storage_tiers", StorageTier, sources),
        cpu_memory_overhead=parse_table(path, "checkpoint_notes", CheckpointNotes).cpu_memory_overhead,
        defaults=parse_table(path, "checkpoint_defaults", CheckpointDefaults),
    )
    _check_default(path, "checkpoint_defaults.checkpoint_size", ck.defaults.checkpoint_size, ck.sizes)
    _check_default(path, "checkpoint_defaults.storage_tier", ck.defaults.storage_tier, ck.storage_tiers)
    _check_default(path, "checkpoint_defaults.async_background", ck.defaults.async_background, ck.async_saves)
    background = by_slug(ck.async_saves, ck.defaults.async_background, "async checkpoint")
    if background.background_slowdown is None:
        raise CatalogError(path, "checkpoint_defaults.async_background",
                           f"{background.slug!r} has no tokens/s during its background write")  # fmt: skip
    return ck


def load_cost_catalog(data_dir: Path, sources: dict[str, Source], node_slugs: set[str]) -> CostCatalog:
    """Load and cross-check prices.toml, selfbuild.toml and reliability.toml; CatalogError on any problem."""
    prices_path = Path(data_dir) / PRICES_FILE
    instance_prices = _entries(prices_path, "instance_prices", InstancePrice, sources)
    _check_instances(prices_path, instance_prices, node_slugs)
    provider_prices = _entries(prices_path, "provider_prices", ProviderPrice, sources)
    for i, price in enumerate(provider_prices):
        if price.like_node not in node_slugs:
            raise CatalogError(prices_path, f"provider_prices[{i}] ({price.slug!r}).like_node",
                               f"unknown node {price.like_node!r}")  # fmt: skip
    reliability_path = Path(data_dir) / RELIABILITY_FILE
    return CostCatalog(
        instance_prices=instance_prices,
        provider_prices=provider_prices,
        pricing_terms=_parse_pricing_terms(prices_path, sources),
        self_build=load_self_build(Path(data_dir) / SELFBUILD_FILE, sources, node_slugs),
        reliability=load_reliability(reliability_path, sources),
        checkpointing=load_checkpointing(reliability_path, sources),
    )
