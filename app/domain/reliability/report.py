"""The reliability report of one job: every figure picked (override, catalog record or default, with its
provenance), the optimal checkpoint interval, restart time and goodput, and the rule-of-thumb comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from app.domain.cost.price_records import CostCatalog
from app.domain.estimator.estimate import Assumption
from app.domain.figures import by_slug
from app.domain.provenance import CatalogEntry, Frozen
from app.domain.reliability.formulas import (
    ASYNC_STAGING_PARAMS,
    ASYNC_STAGING_RECORD,
    DEFAULT_DETECT_S,
    DEFAULT_ELASTIC_RESCHEDULE_S,
    DEFAULT_RESCHEDULE_S,
    DEFAULT_SPOT_INTERRUPTIONS_PER_INSTANCE_MONTH,
    DEFAULT_WARMUP_S,
    GBYTE,
    HOURS_PER_DAY,
    RULE_OF_THUMB_INTERVAL_S,
    RULE_OF_THUMB_SAME_S,
    SECONDS_PER_HOUR,
    SENSITIVITY_FACTORS,
    ReliabilityOverrides,
    async_overhead_s,
    checkpoint_blocking_s,
    checkpoint_bytes,
    checkpoint_write_s,
    daly_interval_s,
    first_order_waste,
    goodput,
    job_mtbf_hours,
    spot_interruptions_per_hour,
    storage_gbyte_per_s,
    young_interval_s,
)

# --------------------------------------------------------------------------------------------------
# Results


class RestartTime(Frozen):
    detect_s: float
    reschedule_s: float
    reload_s: float
    warmup_s: float
    elastic: bool

    @property
    def total_s(self) -> float:
        return self.detect_s + self.reschedule_s + self.reload_s + self.warmup_s


def restart_time(
    detect_s: float, reschedule_s: float, reload_s: float, warmup_s: float, elastic: bool
) -> RestartTime:
    return RestartTime(
        detect_s=detect_s, reschedule_s=reschedule_s, reload_s=reload_s, warmup_s=warmup_s, elastic=elastic
    )


class RuleOfThumb(Frozen):
    """The "checkpoint every 30 minutes" rule against the optimum on this cluster."""

    interval_s: float
    goodput: float
    goodput_at_optimum: float
    goodput_loss: float = Field(description="goodput at the optimum minus goodput with the rule")
    extra_wall_clock_fraction: float = Field(description="wall clock with the rule / at the optimum − 1")
    same_as_interval: bool = Field(
        default=False,
        description="the job already checkpoints every 30 min: nothing to compare, show no rule line",
    )


class IntervalPoint(Frozen):
    """Goodput at ``factor`` × the optimal checkpoint interval (how flat the optimum is)."""

    factor: float
    interval_s: float
    goodput: float
    limited_by_write: bool = Field(
        default=False,
        description="async: raised to the background write time, as the next save must wait for it",
    )


class ReliabilityReport(Frozen):
    gpus: int
    nodes: int
    failures_per_gpu_hour: float
    failure_record: str | None
    spot_interruptions_per_hour: float
    rollbacks_per_hour: float
    job_mtbf_hours: float
    checkpoint_bytes_per_param: float
    checkpoint_bytes: float
    checkpoint_mode: Literal["sync", "async"]
    storage_write_gbyte_per_s: float
    storage_read_gbyte_per_s: float
    checkpoint_write_s: float
    checkpoint_blocking_s: float = Field(
        description="GPUs stopped per save: the write (sync) or the snapshot (async)"
    )
    background_write_s: float = Field(description="async: the write to storage, while training continues")
    background_slowdown: float = Field(
        description="async: share of throughput lost during the background write"
    )
    checkpoint_overhead_s: float = Field(
        description="δ, the time lost per save: blocking + slowdown × background write (≤ the sync write)"
    )
    interval_sensitivity: tuple[IntervalPoint, ...] = Field(
        description="goodput at 0.5×, 1× and 2× the optimal interval"
    )
    young_interval_s: float
    daly_interval_s: float
    interval_formula: str
    checkpoint_interval_s: float
    async_background_limits_interval: bool = Field(
        description="async: the background write is longer than the optimum, so the interval is the write time"
    )
    rework_s: float = Field(
        description="work redone per failure beyond the lost interval (async in-flight write)"
    )
    restart: RestartTime
    restart_s: float
    goodput: float
    waste_fraction: float
    first_order_waste_fraction: float
    rule_of_thumb: RuleOfThumb
    assumptions: tuple[Assumption, ...]


# --------------------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True, slots=True)
class _Figure:
    value: float
    assumption: Assumption


def _catalog_figure(
    entry: CatalogEntry, field: str, value: float, name: str, unit: str, note: str | None = None
) -> _Figure:
    prov = entry.figure_provenance(field)
    return _Figure(
        value,
        Assumption(
            name=name, value=value, unit=unit, source=prov.source, as_of=prov.as_of,
            confidence=prov.confidence.value, note=note or prov.note,
        ),
    )  # fmt: skip


def _pick(override: float | None, default: _Figure, name: str, unit: str) -> _Figure:
    if override is None:
        return default
    return _Figure(override, Assumption(name=name, value=override, unit=unit, source="override"))


def _default(value: float, name: str, unit: str, note: str) -> _Figure:
    return _Figure(
        value, Assumption(name=name, value=value, unit=unit, source="default", confidence="low", note=note)
    )


def _failure_rate(cc: CostCatalog, o: ReliabilityOverrides) -> tuple[_Figure, str | None]:
    name, unit = "failure rate per GPU-hour", "1/GPU-h"
    if o.failures_per_gpu_hour is not None:
        return _Figure(o.failures_per_gpu_hour, Assumption(name=name, value=o.failures_per_gpu_hour, unit=unit,
                                                           source="override")), None  # fmt: skip
    record = cc.reliability.failure_record(o.failure_record)
    rate = record.failures_per_gpu_hour
    if rate is None or rate <= 0:
        raise ValueError(f"failure record {record.slug!r} has no failure rate ({record.name})")
    note = f"{record.name}: {record.rate_basis}"
    if o.failure_record is None:
        note += f"; default because: {cc.reliability.defaults.failure_rate_reason}"
    return _catalog_figure(record, "unexpected_interruptions", rate, name, unit, note), record.slug


def _bandwidths(cc: CostCatalog, o: ReliabilityOverrides, nodes: int) -> dict[str, _Figure]:
    ck = cc.checkpointing
    tier = ck.storage_tier(o.storage_tier)
    why = "" if o.storage_tier else f"; default because: {ck.defaults.storage_tier_reason}"
    figures: dict[str, _Figure] = {}
    for direction in ("write", "read"):
        per_node = getattr(tier, f"{direction}_gbyte_per_s_per_node")
        figures[f"{direction}_node"] = _pick(
            getattr(o, f"storage_{direction}_gbyte_per_s_per_node"),
            _catalog_figure(tier, f"{direction}_gbyte_per_s_per_node", per_node,
                            f"storage {direction} bandwidth per node", "GB/s",
                            f"{tier.name}: " + (tier.figure_provenance(f"{direction}_gbyte_per_s_per_node").note or "")),
            f"storage {direction} bandwidth per node", "GB/s",
        )  # fmt: skip
        field = tier.aggregate_field(direction)  # type: ignore[arg-type]
        aggregate = tier.aggregate_gbyte_per_s(direction, nodes)  # type: ignore[arg-type]
        scaled = field.endswith("_per_node")
        note = (f"{tier.name}: {getattr(tier, field):g} GB/s per compute node × {nodes} nodes{why}" if scaled
                else f"{tier.name}: fixed whatever the cluster size{why}")  # fmt: skip
        figures[f"{direction}_aggregate"] = _pick(
            getattr(o, f"storage_{direction}_gbyte_per_s_aggregate"),
            _catalog_figure(
                tier, field, aggregate, f"storage {direction} bandwidth, aggregate", "GB/s", note
            ),
            f"storage {direction} bandwidth, aggregate",
            "GB/s",
        )
    return figures


def _checkpoint_size(cc: CostCatalog, o: ReliabilityOverrides, plan_bytes_per_param: float | None) -> _Figure:
    name, unit = "checkpoint bytes per parameter", "B/param"
    if o.checkpoint_bytes_per_param is not None:
        return _Figure(o.checkpoint_bytes_per_param, Assumption(name=name, value=o.checkpoint_bytes_per_param,
                                                                unit=unit, source="override"))  # fmt: skip
    if plan_bytes_per_param is not None:
        return _Figure(plan_bytes_per_param, Assumption(
            name=name, value=plan_bytes_per_param, unit=unit, source="formula",
            note="the plan's framework profile: weights + fp32 master + optimizer state (no gradients)"))  # fmt: skip
    size = cc.checkpointing.size()
    return _catalog_figure(size, "bytes_per_param", size.bytes_per_param.mid, name, unit,
                           f"{size.layout}; {cc.checkpointing.defaults.checkpoint_size_reason}")  # fmt: skip


def _async_staging(cc: CostCatalog, size_bytes_per_param: float, o: ReliabilityOverrides) -> _Figure:
    name, unit = "async checkpoint staging rate per GPU", "GB/s"
    if o.async_staging_gbyte_per_s_per_gpu is not None:
        return _pick(o.async_staging_gbyte_per_s_per_gpu, _default(0, name, unit, ""), name, unit)
    record = next(a for a in cc.checkpointing.async_saves if a.slug == ASYNC_STAGING_RECORD)
    blocked = record.async_blocking_s.mid if record.async_blocking_s else 1.0
    per_gpu = ASYNC_STAGING_PARAMS * size_bytes_per_param / (record.gpus or 1)
    rate = per_gpu / blocked / GBYTE
    note = (
        f"derived: {record.name}, {blocked:g} s blocked for ~{per_gpu / GBYTE:.2f} GB per GPU "
        f"({ASYNC_STAGING_PARAMS / 1e9:g}B params × {size_bytes_per_param:g} B/param / {record.gpus} GPUs)"
    )
    return _catalog_figure(record, "async_blocking_s", rate, name, unit, note)


def _async_background(cc: CostCatalog, o: ReliabilityOverrides) -> _Figure:
    name, unit = "async background-write slowdown", "fraction of throughput"
    record = by_slug(
        cc.checkpointing.async_saves, cc.checkpointing.defaults.async_background, "async checkpoint"
    )
    slowdown = record.background_slowdown or 0.0
    note = (f"derived: {record.name}, {record.tokens_per_s_normal:g} → {record.tokens_per_s_during_background:g} "
            f"tokens/s while the save wrote in the background (before the fix that cut that phase from "
            f"{record.background_before_s:g} s to {record.background_after_s:g} s: a conservative figure)")  # fmt: skip
    return _pick(o.async_background_slowdown,
                 _catalog_figure(record, "tokens_per_s_during_background", slowdown, name, unit, note), name, unit)  # fmt: skip


def _restart_figures(cc: CostCatalog, o: ReliabilityOverrides) -> dict[str, _Figure]:
    base = cc.reliability.restart_time()
    why = (f"unsourced split of the {base.restart_s:g} s restart assumed by {base.name} ({base.source}): "
           "detect 60 + reschedule 180 + warm-up 60; reload is computed from the checkpoint size")  # fmt: skip
    figures = {
        "detect": _pick(o.detect_s, _default(DEFAULT_DETECT_S, "failure detection", "s", why), "failure detection", "s"),
        "warmup": _pick(o.warmup_s, _default(DEFAULT_WARMUP_S, "warm-up after restart", "s", why), "warm-up after restart", "s"),
    }  # fmt: skip
    if o.elastic:
        dflt = _default(DEFAULT_ELASTIC_RESCHEDULE_S, "elastic re-rendezvous", "s",
                        "TorchElastic with hot spare nodes: re-rendezvous instead of requeueing the job (unsourced)")  # fmt: skip
        figures["reschedule"] = _pick(o.elastic_reschedule_s, dflt, "elastic re-rendezvous", "s")
    else:
        dflt = _default(DEFAULT_RESCHEDULE_S, "reschedule (requeue, replace node)", "s", why)
        figures["reschedule"] = _pick(o.reschedule_s, dflt, "reschedule (requeue, replace node)", "s")
    return figures


def reliability_report(
    cost_catalog: CostCatalog,
    *,
    gpus: int,
    nodes: int,
    parameters: int,
    plan_bytes_per_param: float | None = None,
    overrides: ReliabilityOverrides | None = None,
    spot_instances: int = 0,
) -> ReliabilityReport:
    """MTBF, checkpoint cost, optimal interval, restart time and goodput of a job on ``gpus`` GPUs.

    ``plan_bytes_per_param``: the plan's checkpoint bytes per parameter
    (:func:`plan_checkpoint_bytes_per_param`); None uses the catalog's default checkpoint size.
    ``spot_instances``: instances bought on spot, whose interruptions add to the failure rate.
    Raises ValueError on impossible inputs (unknown failure record, no rate).
    """
    o = overrides or ReliabilityOverrides()
    if gpus < 1 or nodes < 1 or parameters < 1:
        raise ValueError("gpus, nodes and parameters must be >= 1")
    rate, record_slug = _failure_rate(cost_catalog, o)
    assumptions = [rate.assumption]
    spot_per_hour = 0.0
    if spot_instances:
        spot_fig = _pick(o.spot_interruptions_per_instance_month,
                         _default(DEFAULT_SPOT_INTERRUPTIONS_PER_INSTANCE_MONTH, "spot interruptions per instance-month",
                                  "1/month", "no sourced GPU spot interruption rate (AWS-SPOT buckets <5 % … >20 %/month)"),
                         "spot interruptions per instance-month", "1/month")  # fmt: skip
        spot_per_hour = spot_interruptions_per_hour(spot_fig.value, spot_instances)
        assumptions.append(spot_fig.assumption)
    rollbacks_per_hour = o.rollbacks_per_day / HOURS_PER_DAY
    if o.rollbacks_per_day:
        assumptions.append(Assumption(name="NaN/loss-spike rollbacks per day", value=o.rollbacks_per_day, unit="1/day",
                                      source="override"))  # fmt: skip
    mtbf_h = job_mtbf_hours(rate.value, gpus, spot_per_hour + rollbacks_per_hour)
    mtbf_s = mtbf_h * SECONDS_PER_HOUR

    size_per_param = _checkpoint_size(cost_catalog, o, plan_bytes_per_param)
    size = checkpoint_bytes(parameters, size_per_param.value)
    bw = _bandwidths(cost_catalog, o, nodes)
    write_bw = storage_gbyte_per_s(nodes, bw["write_node"].value, bw["write_aggregate"].value)
    read_bw = storage_gbyte_per_s(nodes, bw["read_node"].value, bw["read_aggregate"].value)
    write_s = checkpoint_write_s(size, write_bw)
    staging = _async_staging(cost_catalog, size_per_param.value, o)
    assumptions += [size_per_param.assumption, *(f.assumption for f in bw.values())]
    slowdown = 0.0
    if o.checkpoint_mode == "sync":
        blocking_s = overhead_s = write_s
    else:
        if o.async_blocking_s is not None:
            blocking_s = o.async_blocking_s
            assumptions.append(
                Assumption(name="async blocking time", value=blocking_s, unit="s", source="override")
            )
        else:  # the snapshot into host memory; never longer than writing synchronously would block
            blocking_s = min(checkpoint_blocking_s(write_s, "async", size / gpus, staging.value), write_s)
            assumptions.append(staging.assumption)
        background = _async_background(cost_catalog, o)
        slowdown = background.value
        assumptions.append(background.assumption)
        overhead_s = async_overhead_s(blocking_s, write_s, slowdown, capped=o.async_blocking_s is None)

    young = young_interval_s(overhead_s, mtbf_s) if overhead_s > 0 else 0.0
    daly = daly_interval_s(overhead_s, mtbf_s) if overhead_s > 0 else 0.0
    optimum = daly if o.interval_formula == "daly" else young
    floor = write_s if o.checkpoint_mode == "async" else 0.0
    limited = o.checkpoint_interval_s is None and optimum < floor
    interval = o.checkpoint_interval_s if o.checkpoint_interval_s is not None else max(optimum, floor)
    interval = max(interval, 1e-3)
    rework = write_s if o.checkpoint_mode == "async" else 0.0

    rs = _restart_figures(cost_catalog, o)
    reload_s = checkpoint_write_s(size, read_bw)
    restart = restart_time(
        rs["detect"].value, rs["reschedule"].value, reload_s, rs["warmup"].value, o.elastic
    )
    assumptions += [f.assumption for f in rs.values()]
    lost_s = restart.total_s + rework

    gp = goodput(interval, overhead_s, lost_s, mtbf_s)
    optimal_interval = max(optimum, floor, 1e-3)
    best = goodput(optimal_interval, overhead_s, lost_s, mtbf_s)
    rule_interval = max(RULE_OF_THUMB_INTERVAL_S, floor)
    rule_gp = goodput(rule_interval, overhead_s, lost_s, mtbf_s)
    sensitivity = tuple(
        IntervalPoint(factor=f, interval_s=max(f * optimal_interval, floor, 1e-3),
                      limited_by_write=f * optimal_interval < floor,
                      goodput=goodput(max(f * optimal_interval, floor, 1e-3), overhead_s, lost_s, mtbf_s))
        for f in SENSITIVITY_FACTORS
    )  # fmt: skip
    assumptions += [
        Assumption(name="checkpoint interval formula", value=o.interval_formula, source="formula",
                   note="Young: √(2δM); Daly: √(2δM)·[1 + ⅓√(δ/2M) + (δ/2M)/9] − δ" + (
                       "" if o.checkpoint_interval_s is None else f"; fixed interval {o.checkpoint_interval_s:g} s (override)")),
        Assumption(name="goodput", value="τ / (M·e^{R/M}·(e^{(τ+δ)/M} − 1))", source="formula",
                   note="Daly 2006 expected wall time with exponential failures"),
    ]  # fmt: skip
    return ReliabilityReport(
        gpus=gpus,
        nodes=nodes,
        failures_per_gpu_hour=rate.value,
        failure_record=record_slug,
        spot_interruptions_per_hour=spot_per_hour,
        rollbacks_per_hour=rollbacks_per_hour,
        job_mtbf_hours=mtbf_h,
        checkpoint_bytes_per_param=size_per_param.value,
        checkpoint_bytes=size,
        checkpoint_mode=o.checkpoint_mode,
        storage_write_gbyte_per_s=write_bw,
        storage_read_gbyte_per_s=read_bw,
        checkpoint_write_s=write_s,
        checkpoint_blocking_s=blocking_s,
        background_write_s=write_s if o.checkpoint_mode == "async" else 0.0,
        background_slowdown=slowdown,
        checkpoint_overhead_s=overhead_s,
        interval_sensitivity=sensitivity,
        young_interval_s=young,
        daly_interval_s=daly,
        interval_formula=o.interval_formula if o.checkpoint_interval_s is None else "fixed",
        checkpoint_interval_s=interval,
        async_background_limits_interval=limited,
        rework_s=rework,
        restart=restart,
        restart_s=restart.total_s,
        goodput=gp,
        waste_fraction=1.0 - gp,
        first_order_waste_fraction=first_order_waste(interval, overhead_s, lost_s, mtbf_s),
        rule_of_thumb=RuleOfThumb(
            interval_s=rule_interval,
            goodput=rule_gp,
            goodput_at_optimum=best,
            goodput_loss=best - rule_gp,
            extra_wall_clock_fraction=best / rule_gp - 1.0,
            same_as_interval=abs(interval - rule_interval) < RULE_OF_THUMB_SAME_S,
        ),
        assumptions=tuple(assumptions),
    )
