"""Train N tokens: the cost of one job under every pricing option (cloud and self-build), each with its
days, dollars and assumptions, ranked on a chosen basis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from app.domain.cost.cloud import CloudPrices, cloud_prices, commitment_usd, instance_for_accelerator
from app.domain.cost.inputs import (
    OTHER_CLOUD_OPTIONS,
    SECONDS_PER_HOUR,
    SPOT_CAPACITY_RISK,
    TERM_YEARS,
    CostInputError,
    CostOption,
    CostOverrides,
)
from app.domain.cost.price_records import CostCatalog
from app.domain.cost.selfbuild import SelfBuildTco, self_build_inputs, self_build_node_for, self_build_tco
from app.domain.cost.serving import ServingCheck, serving_check
from app.domain.cost.storage import StorageCost, _storage
from app.domain.estimator.estimate import Assumption
from app.domain.estimator.evaluate import Num
from app.domain.estimator.hardware import HardwareCatalog
from app.domain.model.architecture import Architecture
from app.domain.provenance import Frozen
from app.domain.reliability.formulas import HOURS_PER_MONTH, expected_failures, wall_clock_hours
from app.domain.reliability.report import ReliabilityReport, reliability_report


class TrainingJob(Frozen):
    """What the estimate says about the run: size, throughput on the cloud instance and on the server."""

    model: str
    accelerator: str
    gpus: int = Field(ge=1)
    parameters: int = Field(ge=1)
    tokens: float = Field(gt=0)
    cloud_tokens_per_s: float = Field(gt=0)
    self_build_tokens_per_s: float | None = Field(default=None, gt=0)
    plan_checkpoint_bytes_per_param: float | None = Field(default=None, gt=0)
    fits: bool = True
    seq_len: int = Field(default=4096, ge=1)
    cloud_estimate_node: str | None = Field(
        default=None, description="node the cloud throughput was estimated on"
    )
    self_build_estimate_node: str | None = Field(
        default=None, description="node the self-build throughput was estimated on"
    )


class OptionCost(Frozen):
    option: CostOption
    available: bool
    provider: str = Field(default="aws", description="aws (and self-build), gcp, azure, or a GPU cloud")
    price_confidence: str | None = Field(
        default=None, description="other clouds: the confidence of the price used"
    )
    reason: str | None = None
    instance: str | None = None
    instances: int = 0
    usd_per_instance_hour: float | None = None
    usd_per_gpu_hour: float | None = None
    tokens_per_s: float | None = None
    goodput: float | None = None
    job_mtbf_hours: float | None = None
    expected_failures: float | None = None
    compute_hours: float | None = None
    wall_clock_hours: float | None = None
    days: float | None = Field(default=None, description="calendar days (wall clock, after goodput)")
    lead_time_days: float = Field(default=0.0, description="self-build: days before training can start")
    run_usd: float | None = Field(default=None, description="compute actually used")
    committed_usd: float | None = Field(
        default=None, description="compute owed: the whole term for commitments, cash outlay for self-build"
    )
    storage_usd: float = 0.0
    data_transfer_usd: float = 0.0
    total_usd: float | None = None
    usd_per_1b_tokens: float | None = None
    cash_usd: float | None = Field(
        default=None,
        description="cash basis: what is paid out for this run (whole commitment terms, all capex)",
    )
    amortised_usd: float | None = Field(
        default=None,
        description="amortised basis: this run's share when the capacity keeps working after it (commitment usage "
        "only; self-build capital × run / useful life + opex)",
    )
    notes: tuple[str, ...] = ()


class Ranking(Frozen):
    """Options from cheapest to dearest on one basis; ``winner`` is None when the cheapest ones tie."""

    basis: str = Field(description="cash or amortised")
    description: str
    order: tuple[str, ...]
    winner: str | None
    tied: tuple[str, ...] = Field(default=(), description="options tied for cheapest (within $1 or 0.01 %)")


class TrainingCost(Frozen):
    model: str
    accelerator: str
    gpus: int
    tokens: float
    fits: bool
    instance: str
    instances: int
    self_build_node: str | None
    self_build_nodes: int | None
    tokens_per_s: float
    compute_hours: float
    job_mtbf_hours: float
    checkpoint_interval_s: float
    goodput: float
    expected_failures: float
    reliability: ReliabilityReport
    options: tuple[OptionCost, ...]
    cheapest: str | None = Field(description="the amortised ranking's winner (None on a tie); see rankings")
    cheapest_basis: str = "amortised"
    rankings: tuple[Ranking, ...] = ()
    fastest: str | None = Field(description="the option with the fewest days to results (None on a tie)")
    fastest_tied: tuple[str, ...] = Field(
        default=(), description="options tied for the fewest days (within 0.01 day or 0.01 %)"
    )
    other_clouds: tuple[OptionCost, ...] = Field(
        default=(),
        description="on-demand and commitments on Google Cloud, Azure and GPU clouds with this GPU",
    )
    rule_of_thumb_extra_days: float
    rule_of_thumb_extra_usd: float | None = Field(description="on-demand cost of checkpointing every 30 min")
    prices: CloudPrices
    self_build: SelfBuildTco | None
    storage: StorageCost
    serving: ServingCheck | None
    assumptions: tuple[Assumption, ...]
    notes: tuple[str, ...] = Field(
        default=(), description="warnings: partial instances, price dates and inversions"
    )


def _unavailable(option: CostOption, reason: str, instance: str | None = None) -> OptionCost:
    return OptionCost(option=option, available=False, reason=reason, instance=instance)


def _cloud_option(
    option: CostOption, prices: CloudPrices, job: TrainingJob, instances: int, base: ReliabilityReport,
    spot_rel: dict[int, ReliabilityReport], storage: StorageCost, o: CostOverrides, cc: CostCatalog,
) -> OptionCost:  # fmt: skip
    rate = prices.usd_per_hour(option)
    if rate is None:
        return _unavailable(option, prices.missing_reason(option), prices.instance)
    notes: list[str] = []
    rel = base
    spot_instances = 0
    if option is CostOption.spot:
        spot_instances = instances
        notes.append(SPOT_CAPACITY_RISK)
        if prices.on_demand is not None and rate > prices.on_demand:
            notes.append(f"spot ${rate:,.2f}/h is above on-demand ${prices.on_demand:,.2f}/h")
    elif option is CostOption.reserved_spot_mix:
        spot_instances = instances - round(prices.reserved_fraction * instances)
        notes.append(f"{instances - spot_instances} instances on a 1-yr commitment, {spot_instances} on spot")
        if spot_instances:
            notes.append(SPOT_CAPACITY_RISK)
    if spot_instances:
        rel = spot_rel[spot_instances]
    compute_h = job.tokens / job.cloud_tokens_per_s / SECONDS_PER_HOUR
    wall_h = wall_clock_hours(compute_h, rel.goodput)
    days = wall_h / 24.0
    run = rate * instances * wall_h
    committed = run
    if option in TERM_YEARS:
        run, committed = commitment_usd(rate, instances, wall_h, TERM_YEARS[option])
        if committed > run:
            notes.append(f"the run uses {wall_h / HOURS_PER_MONTH:.1f} months of a {TERM_YEARS[option] * 12}-month term: "
                         f"${committed - run:,.0f} committed but unused")  # fmt: skip
    elif option is CostOption.reserved_spot_mix:
        reserved = instances - spot_instances
        assert prices.commit_1yr is not None and prices.spot is not None
        r_run, r_committed = commitment_usd(prices.commit_1yr, reserved, wall_h, 1)
        run = r_run + prices.spot * spot_instances * wall_h
        committed = r_committed + prices.spot * spot_instances * wall_h
    elif option is CostOption.capacity_block:
        terms = cc.pricing_terms.capacity_blocks
        if instances > terms.max_instances:
            notes.append(
                f"{instances} instances exceed one block's {terms.max_instances} (catalog terms; verify)"
            )
        if days > terms.max_duration_days:
            notes.append(f"{days:.0f} days need {math.ceil(days / terms.max_duration_days)} consecutive blocks "
                         f"of at most {terms.max_duration_days:g} days (availability not guaranteed)")  # fmt: skip
        notes.append("block rates float with demand: the catalog rate is dated " + (
            cc.instance_price(prices.instance).capacity_block.as_of  # type: ignore[union-attr]
            if o.capacity_block_usd_per_hour is None else "(override)"))  # fmt: skip
    elif option is CostOption.off_peak:
        days = wall_h / o.off_peak_hours_per_day
        notes.append("AWS publishes no off-peak rate: the discount is the article's assumption")
        if o.off_peak_hours_per_day < 24:
            notes.append(f"runs {o.off_peak_hours_per_day:g} h a day, so the calendar stretches")
    storage_usd = storage.usd_per_month * wall_h / HOURS_PER_MONTH
    transfer = storage.egress_usd + storage.inter_region_usd
    total = committed + storage_usd + transfer
    return OptionCost(
        option=option, available=True, instance=prices.instance, instances=instances, usd_per_instance_hour=rate,
        usd_per_gpu_hour=rate / prices.gpus_per_instance, tokens_per_s=job.cloud_tokens_per_s, goodput=rel.goodput,
        job_mtbf_hours=rel.job_mtbf_hours, expected_failures=expected_failures(wall_h, rel.job_mtbf_hours),
        compute_hours=compute_h, wall_clock_hours=wall_h, days=days, run_usd=run, committed_usd=committed,
        storage_usd=storage_usd, data_transfer_usd=transfer, total_usd=total,
        usd_per_1b_tokens=total / (job.tokens / 1e9), cash_usd=total, amortised_usd=run + storage_usd + transfer,
        notes=tuple(notes),
    )  # fmt: skip


def self_build_useful_months(
    run_months: float,
    depreciation_years: float,
    use_after_run_years: float | None = None,
    runs: int | None = None,
) -> tuple[float, str]:
    """Months the cluster works in all, over which its capital is shared, and how that was decided: ``runs`` runs
    of this length, else the run plus ``use_after_run_years``, else the depreciation life.

    >>> self_build_useful_months(6, 5)[0], self_build_useful_months(6, 5, use_after_run_years=0.5)[0]
    (60.0, 12.0)
    >>> self_build_useful_months(6, 5, runs=3)[0]
    18
    """
    useful = useful_months(run_months, depreciation_years, use_after_run_years, runs)
    if runs is not None:
        return useful, f"{runs} runs of {run_months:.1f} months (stated)"
    if use_after_run_years is not None:
        return useful, f"the run + {use_after_run_years:g} years of further use (stated)"
    return useful, f"the {depreciation_years:g}-year depreciation life (default: fully used after the run)"


def useful_months(
    run_months: Num,
    depreciation_years: float,
    use_after_run_years: float | None = None,
    runs: int | None = None,
) -> Num:
    """The months of :func:`self_build_useful_months` alone, for a run length or an array of them (the sizing
    search bounds many cluster sizes at once)."""
    if runs is not None:
        return run_months * runs
    if use_after_run_years is not None:
        return run_months + use_after_run_years * 12.0
    return run_months * 0 + depreciation_years * 12.0


def _self_build_option(
    job: TrainingJob, tco: SelfBuildTco, rel: ReliabilityReport, o: CostOverrides
) -> OptionCost:
    tps = job.self_build_tokens_per_s or job.cloud_tokens_per_s
    compute_h = job.tokens / tps / SECONDS_PER_HOUR
    wall_h = wall_clock_hours(compute_h, rel.goodput)
    months = wall_h / HOURS_PER_MONTH
    useful, why = self_build_useful_months(months, tco.depreciation_years, o.use_after_run_years, o.runs)
    share = min(1.0, months / useful) if useful > 0 else 1.0
    capital_total = tco.capital_usd_per_month * tco.depreciation_years * 12.0
    run = capital_total * share + tco.opex_usd_per_month * months
    cash = tco.capex_usd + tco.opex_usd_per_month * months
    notes = (
        f"amortised: {share:.1%} of the capital (${capital_total:,.0f} over {tco.depreciation_years:g} years with "
        f"financing) + opex for {months:.1f} months; useful life {useful:.1f} months = {why}",
        f"cash outlay ${cash:,.0f}: capex ${tco.capex_usd:,.0f} up front + opex for the run",
        "storage for the dataset and checkpoints is in the capex",
        *((f"the cluster arrives after {tco.lead_time_months:g} months: results after "
           f"{tco.lead_time_months * HOURS_PER_MONTH / 24 + wall_h / 24:,.0f} days",) if tco.lead_time_months else ()),
    )  # fmt: skip
    return OptionCost(
        option=CostOption.self_build, available=True, instance=tco.node, instances=tco.nodes,
        usd_per_instance_hour=tco.monthly_equivalent_usd / tco.nodes / HOURS_PER_MONTH,
        usd_per_gpu_hour=tco.usd_per_gpu_hour, tokens_per_s=tps, goodput=rel.goodput,
        job_mtbf_hours=rel.job_mtbf_hours, expected_failures=expected_failures(wall_h, rel.job_mtbf_hours),
        compute_hours=compute_h, wall_clock_hours=wall_h, days=wall_h / 24.0, run_usd=run, committed_usd=cash,
        total_usd=run, usd_per_1b_tokens=run / (job.tokens / 1e9), cash_usd=cash, amortised_usd=run, notes=notes,
        lead_time_days=tco.lead_time_months * HOURS_PER_MONTH / 24.0,
    )  # fmt: skip


def option_label(row: OptionCost) -> str:
    """How rankings name an option: ``on-demand`` (AWS), ``self-build``, ``gcp a3-highgpu-8g on-demand``."""
    if row.provider == "aws":
        return row.option.value
    return f"{row.provider} {row.instance} {row.option.value}"


def other_cloud_options(
    cc: CostCatalog, hardware: HardwareCatalog, job: TrainingJob, *, wanted: Sequence[CostOption],
    o: CostOverrides, storage: StorageCost, reliability: dict[int, ReliabilityReport],
) -> tuple[OptionCost, ...]:  # fmt: skip
    """On-demand and 1-/3-year commitments on every non-AWS instance carrying the job's GPU. ``reliability``
    maps an instance count to its report (filled in by the caller). Throughput: the estimate on the node that
    stands for the instance (``like_node``) when it is one of the two estimated, else the AWS instance's."""
    rows: list[OptionCost] = []
    for p in cc.provider_prices:
        node = hardware.node(p.like_node)
        if node.accelerator != job.accelerator:
            continue
        instances = math.ceil(job.gpus / p.gpus_per_instance)
        rel = reliability[instances]
        if p.like_node == job.self_build_estimate_node and job.self_build_tokens_per_s:
            tps, basis = job.self_build_tokens_per_s, f"throughput as estimated on {p.like_node}"
        else:
            tps = job.cloud_tokens_per_s
            basis = f"throughput as estimated on {job.cloud_estimate_node or 'the AWS instance'}" + (
                "" if p.like_node == job.cloud_estimate_node else f" (stands in for {p.like_node})")  # fmt: skip
        od = p.on_demand_price(o.prices_as_of)
        for option in OTHER_CLOUD_OPTIONS:
            if option not in wanted:
                continue
            if od is None:
                rows.append(OptionCost(option=option, available=False, provider=p.provider, instance=p.instance_type,
                                       reason=f"no {p.provider} {p.instance_type} price in force"
                                       + (f" on {o.prices_as_of}" if o.prices_as_of else "")))  # fmt: skip
                continue
            notes = [f"{p.name}: on-demand ${od.usd_per_hour:,.2f}/h ({od.source}, {od.as_of}, {od.confidence.value} "
                     f"confidence){'; ' + od.note if od.note else ''}", basis,
                     "storage and transfer priced at the AWS S3 rates (a proxy)"]  # fmt: skip
            rate = od.usd_per_hour
            if option in TERM_YEARS:
                years = TERM_YEARS[option]
                discount = p.commit_discount(years)
                if discount is None:
                    rows.append(OptionCost(option=option, available=False, provider=p.provider,
                                           instance=p.instance_type,
                                           reason=f"{p.provider} publishes no {years}-year commitment rate for "
                                           f"{p.instance_type} in the catalog"))  # fmt: skip
                    continue
                prov = p.figure_provenance(f"commit_{years}yr_discount")
                rate = od.usd_per_hour * (1.0 - discount)
                notes.append(f"{years}-yr commitment: on-demand less the average {p.provider} discount "
                             f"{discount:.0%} ({prov.source}, {prov.as_of})")  # fmt: skip
            compute_h = job.tokens / tps / SECONDS_PER_HOUR
            wall_h = wall_clock_hours(compute_h, rel.goodput)
            run = committed = rate * instances * wall_h
            if option in TERM_YEARS:
                run, committed = commitment_usd(rate, instances, wall_h, TERM_YEARS[option])
            notes += _whole_units_notes(job.gpus, instances, p.gpus_per_instance, p.instance_type)
            storage_usd = storage.usd_per_month * wall_h / HOURS_PER_MONTH
            transfer = storage.egress_usd + storage.inter_region_usd
            total = committed + storage_usd + transfer
            rows.append(OptionCost(
                option=option, available=True, provider=p.provider, instance=p.instance_type, instances=instances,
                usd_per_instance_hour=rate, usd_per_gpu_hour=rate / p.gpus_per_instance, tokens_per_s=tps,
                goodput=rel.goodput, job_mtbf_hours=rel.job_mtbf_hours,
                expected_failures=expected_failures(wall_h, rel.job_mtbf_hours), compute_hours=compute_h,
                wall_clock_hours=wall_h, days=wall_h / 24.0, run_usd=run, committed_usd=committed,
                storage_usd=storage_usd, data_transfer_usd=transfer, total_usd=total,
                usd_per_1b_tokens=total / (job.tokens / 1e9), cash_usd=total,
                amortised_usd=run + storage_usd + transfer, price_confidence=od.confidence.value, notes=tuple(notes),
            ))  # fmt: skip
    return tuple(rows)


TIE_USD = 1.0
TIE_FRACTION = 1e-4
RANKING_BASES = {
    "cash": "what is paid out for this run: commitments' whole terms, self-build's capex + opex (nothing is "
            "assumed about use after the run)",
    "amortised": "this run's share: commitments' usage only (the rest of the term used by other work), "
                 "self-build's capital × run / useful life + opex (useful life: use_after_run_years or runs, "
                 "default the depreciation life)",
}  # fmt: skip


def rank_options(options: Sequence[OptionCost], basis: str) -> Ranking:
    """Available options ordered by ``cash_usd`` or ``amortised_usd``; no single winner when the cheapest tie
    (within $1 or 0.01 %)."""
    priced = [(getattr(r, f"{basis}_usd"), option_label(r)) for r in options if r.available]
    priced = sorted((v, name) for v, name in priced if v is not None)
    if not priced:
        return Ranking(basis=basis, description=RANKING_BASES[basis], order=(), winner=None)
    best = priced[0][0]
    tied = tuple(name for v, name in priced if v - best <= max(TIE_USD, TIE_FRACTION * abs(best)))
    return Ranking(basis=basis, description=RANKING_BASES[basis], order=tuple(n for _, n in priced),
                   winner=tied[0] if len(tied) == 1 else None, tied=tied if len(tied) > 1 else ())  # fmt: skip


TIE_DAYS = 0.01


def fastest_options(options: Sequence[OptionCost]) -> tuple[str | None, tuple[str, ...]]:
    """(winner, tied): the available option with the fewest days to results (the run after failures plus a
    self-build's lead time); on a tie (within 0.01 day or 0.01 %) no winner and every tied option."""
    timed = sorted((r.days + r.lead_time_days, option_label(r)) for r in options if r.available and r.days)
    if not timed:
        return None, ()
    best = timed[0][0]
    tied = tuple(name for d, name in timed if d - best <= max(TIE_DAYS, TIE_FRACTION * best))
    return (tied[0], ()) if len(tied) == 1 else (None, tied)


def training_cost(
    cost_catalog: CostCatalog,
    hardware: HardwareCatalog,
    job: TrainingJob,
    *,
    options: Sequence[CostOption] | None = None,
    overrides: CostOverrides | None = None,
    arch: Architecture | None = None,
) -> TrainingCost:
    """Wall-clock days and total $ of "train ``job.tokens`` tokens with this plan" for every option.

    Raises :class:`CostInputError` naming the offending input."""
    o = overrides or CostOverrides()
    wanted = tuple(options) if options else tuple(CostOption)
    instance = o.instance or instance_for_accelerator(cost_catalog, hardware, job.accelerator)
    inst_node = hardware.node(instance)
    if inst_node.accelerator != job.accelerator:
        raise CostInputError(
            "overrides.instance", f"{instance} carries {inst_node.accelerator}, not {job.accelerator}"
        )
    prices = cloud_prices(cost_catalog, instance, o)
    instances = math.ceil(job.gpus / prices.gpus_per_instance)

    def rel(spot_instances: int = 0) -> ReliabilityReport:
        try:
            return reliability_report(
                cost_catalog, gpus=job.gpus, nodes=instances, parameters=job.parameters,
                plan_bytes_per_param=job.plan_checkpoint_bytes_per_param, overrides=o.reliability,
                spot_instances=spot_instances,
            )  # fmt: skip
        except KeyError as exc:
            what = "storage_tier" if "storage tier" in str(exc.args[0]) else "failure_record"
            raise CostInputError(f"overrides.reliability.{what}", str(exc.args[0])) from None
        except ValueError as exc:
            raise CostInputError("overrides.reliability", str(exc)) from None

    base = rel()

    def rel_on(nodes: int) -> ReliabilityReport:
        return reliability_report(
            cost_catalog, gpus=job.gpus, nodes=nodes, parameters=job.parameters,
            plan_bytes_per_param=job.plan_checkpoint_bytes_per_param, overrides=o.reliability,
        )  # fmt: skip

    spot_rel: dict[int, ReliabilityReport] = {}
    if CostOption.spot in wanted:
        spot_rel[instances] = rel(instances)
    if CostOption.reserved_spot_mix in wanted:
        n_spot = instances - round(prices.reserved_fraction * instances)
        if n_spot and n_spot not in spot_rel:
            spot_rel[n_spot] = rel(n_spot)
    storage = _storage(cost_catalog, o, job.tokens, job.parameters, base.checkpoint_bytes)

    results: list[OptionCost] = []
    for option in wanted:
        if option is not CostOption.self_build:
            results.append(
                _cloud_option(option, prices, job, instances, base, spot_rel, storage, o, cost_catalog)
            )
    tco: SelfBuildTco | None = None
    sb_node_slug = self_build_node_for(hardware, cost_catalog, job.accelerator)
    sb_nodes: int | None = None
    if CostOption.self_build in wanted:
        if sb_node_slug is None and o.self_build.server_usd is None:
            results.append(_unavailable(CostOption.self_build, f"no server price for a {job.accelerator} server; "
                                        "give overrides.self_build.server_usd"))  # fmt: skip
        else:
            sb_node = hardware.node(sb_node_slug) if sb_node_slug else inst_node
            sb_nodes = math.ceil(job.gpus / sb_node.accelerators_per_node)
            inputs, sb_assumptions = self_build_inputs(cost_catalog, hardware, sb_node, o.self_build,
                                                       storage_tb=storage.stored_tb)  # fmt: skip
            tco = self_build_tco(inputs, node=sb_node.slug, nodes=sb_nodes, gpus_per_node=sb_node.accelerators_per_node,
                                 nics_per_node=sb_node.scale_out_nics, assumptions=sb_assumptions)  # fmt: skip
            results.append(_self_build_option(job, tco, base, o))

    others: tuple[OptionCost, ...] = ()
    if o.other_clouds:
        counts = {math.ceil(job.gpus / p.gpus_per_instance) for p in cost_catalog.provider_prices}
        reports = {n: base if n == instances else rel_on(n) for n in counts}
        others = other_cloud_options(cost_catalog, hardware, job, wanted=wanted, o=o, storage=storage,
                                     reliability=reports)  # fmt: skip
    rankings = (rank_options((*results, *others), "cash"), rank_options((*results, *others), "amortised"))
    cheapest = rankings[1].winner
    fastest, fastest_tied = fastest_options((*results, *others))
    compute_h = job.tokens / job.cloud_tokens_per_s / SECONDS_PER_HOUR
    wall_h = compute_h / base.goodput
    extra_h = wall_h * base.rule_of_thumb.extra_wall_clock_fraction
    extra_usd = None if prices.on_demand is None else extra_h * prices.on_demand * instances

    serving = None
    if arch is not None:
        serving = serving_check(
            arch, job.parameters, hardware, cost_catalog, context_tokens=o.serving_context_tokens or job.seq_len,
            batch=o.serving_batch, weight_bytes_per_param=o.serving_weight_bytes_per_param, on=o.prices_as_of,
        )  # fmt: skip
    assumptions = [
        *prices.assumptions,
        *base.assumptions,
        *storage.assumptions,
        *(tco.assumptions if tco else ()),
        Assumption(name="hours per month", value=HOURS_PER_MONTH, unit="h", source="formula", note="8,760 h / 12"),
        Assumption(name="throughput on the cloud instance", value=job.cloud_tokens_per_s, unit="tokens/s",
                   source="formula", note=f"the estimate on {job.cloud_estimate_node or instance}"),
    ]  # fmt: skip
    if tco is not None and job.self_build_tokens_per_s:
        assumptions.append(Assumption(name="throughput on the self-built cluster", value=job.self_build_tokens_per_s,
                                      unit="tokens/s", source="formula",
                                      note=f"the estimate on {job.self_build_estimate_node or tco.node}"))  # fmt: skip
    notes = list(prices.notes)
    by_label = {option_label(r): r for r in (*results, *others)}
    for ranking in rankings:
        won = by_label.get(ranking.winner or "")
        if won is not None and won.price_confidence == "low":
            notes.append(f"the cheapest on the {ranking.basis} basis, {ranking.winner}, rests on a low-confidence "
                         "price (an aggregator figure or an estimate): get a quote before deciding")  # fmt: skip
    notes += _whole_units_notes(job.gpus, instances, prices.gpus_per_instance, instance)
    if tco is not None:
        notes += _whole_units_notes(job.gpus, tco.nodes, tco.gpus // tco.nodes, tco.node)
    return TrainingCost(
        model=job.model, accelerator=job.accelerator, gpus=job.gpus, tokens=job.tokens, fits=job.fits,
        instance=instance, instances=instances, self_build_node=tco.node if tco else sb_node_slug,
        self_build_nodes=sb_nodes, tokens_per_s=job.cloud_tokens_per_s, compute_hours=compute_h,
        job_mtbf_hours=base.job_mtbf_hours, checkpoint_interval_s=base.checkpoint_interval_s, goodput=base.goodput,
        expected_failures=expected_failures(wall_h, base.job_mtbf_hours), reliability=base, options=tuple(results),
        cheapest=cheapest, rankings=rankings, fastest=fastest, fastest_tied=fastest_tied, other_clouds=others, rule_of_thumb_extra_days=extra_h / 24.0, rule_of_thumb_extra_usd=extra_usd,
        prices=prices, self_build=tco, storage=storage, serving=serving, assumptions=tuple(assumptions),
        notes=tuple(notes),
    )  # fmt: skip


def _whole_units_notes(gpus: int, units: int, gpus_per_unit: int, unit: str) -> list[str]:
    """A note when ``gpus`` is not a whole number of instances or servers: the rest are paid for but idle.

    >>> _whole_units_notes(12, 2, 8, "p5.48xlarge")
    ['12 GPUs are not a whole number of p5.48xlarge (8 GPUs each): 2 are billed (16 GPUs), 4 GPUs paid for but idle']
    """
    paid = units * gpus_per_unit
    if paid == gpus:
        return []
    return [f"{gpus} GPUs are not a whole number of {unit} ({gpus_per_unit} GPUs each): {units} are billed "
            f"({paid} GPUs), {paid - gpus} GPUs paid for but idle"]  # fmt: skip
