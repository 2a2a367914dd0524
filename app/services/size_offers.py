"""What each node's cluster sizes cost under each way of paying, for the sizing use-case (:mod:`app.services.size`):
every offer per node (AWS instances per pricing option, other clouds' instances, self-build servers) and the
self-build's total cost of ownership at a cluster size, priced as `capplan cost` prices it."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from app.domain.catalog import Catalog
from app.domain.cost.cloud import cloud_prices
from app.domain.cost.gpu_hour import usd_per_gpu_hour
from app.domain.cost.inputs import CostInputError, CostOption, CostOverrides
from app.domain.cost.selfbuild import self_build_inputs, self_build_tco
from app.domain.search.sizing import Offer, ReservedSpotMix, SelfBuildCapital
from app.schemas.size import SizeRequest


def self_build_at(
    catalog: Catalog, offer: Offer, node: Any, gpus: int, request: SizeRequest, storage_tb: float
) -> tuple[Offer, str | None]:
    """``offer`` (self-build on ``node``) for a cluster of ``gpus``: the cost model's TCO of that many servers
    (:func:`app.domain.cost.self_build_tco`, its fabric sized to the cluster, its storage system to the dataset and
    checkpoints), as ``capplan cost`` prices it — capex, capital, opex and the request's useful life. No price
    (None), and why, when the cost model cannot price that cluster."""
    nodes = -(-gpus // node.accelerators_per_node)
    try:
        inputs, _ = self_build_inputs(catalog.cost, catalog.hardware, node, storage_tb=storage_tb)
        tco = self_build_tco(inputs, node=node.slug, nodes=nodes, gpus_per_node=node.accelerators_per_node,
                             nics_per_node=node.scale_out_nics)  # fmt: skip
    except (CostInputError, KeyError, ValueError) as exc:  # e.g. a fabric larger than 3 tiers of its switch
        return replace(offer, usd_per_gpu_hour=None), str(exc)
    capital = SelfBuildCapital(
        capex_usd=tco.capex_usd, capital_total_usd=tco.capital_usd_per_month * tco.depreciation_years * 12.0,
        opex_usd_per_month=tco.opex_usd_per_month, depreciation_years=tco.depreciation_years,
        use_after_run_years=request.use_after_run_years, runs=request.runs,
    )  # fmt: skip
    return replace(offer, usd_per_gpu_hour=tco.usd_per_gpu_hour, self_build=capital), None


def offers_by_node(
    catalog: Catalog,
    accelerators: set[str],
    options: set[CostOption],
    overrides: CostOverrides | None = None,
    notes: list[str] | None = None,
) -> dict[str, list[Offer]]:
    """Every way to pay for every node carrying one of ``accelerators``, keyed by the node it runs on, at the prices
    ``overrides`` state (region, the day in force; default: us-east-1, current). An AWS instance the region has no
    price for is offered without one (``notes`` says so)."""
    hw, cc = catalog.hardware, catalog.cost
    o = overrides or CostOverrides()
    out: dict[str, list[Offer]] = {}
    aws = {p.slug for p in cc.instance_prices}
    for node in sorted(hw.nodes, key=lambda n: n.slug):
        if node.accelerator not in accelerators:
            continue
        gpn = node.accelerators_per_node
        if node.kind == "cloud-instance" and node.slug in aws:
            try:
                prices = cloud_prices(cc, node.slug, o)
                if notes is not None:
                    notes.extend(f"{node.slug}: {n}" for n in prices.notes)
            except CostInputError as exc:
                prices = None
                if notes is not None:
                    notes.append(f"{node.slug}: no price ({exc})")
            for opt in sorted(options - {CostOption.self_build}):
                rate = prices.usd_per_hour(opt) if prices is not None else None
                mix = None
                if opt is CostOption.reserved_spot_mix and rate is not None:
                    assert prices is not None and prices.commit_1yr is not None and prices.spot is not None
                    mix = ReservedSpotMix(prices.commit_1yr, prices.spot, prices.reserved_fraction,
                                          prices.gpus_per_instance)  # fmt: skip
                per_gpu = None if rate is None or prices is None else rate / prices.gpus_per_instance
                out.setdefault(node.slug, []).append(
                    Offer(node.slug, "aws", node.slug, opt.value, per_gpu, mix=mix)
                )
        if node.kind == "server" and CostOption.self_build in options:
            rate = usd_per_gpu_hour(cc, node.slug, CostOption.self_build, gpus_per_node=gpn)
            if rate is not None:  # priced per cluster size when searched (self_build_at)
                out.setdefault(node.slug, []).append(
                    Offer(node.slug, "self-build", node.slug, "self-build", rate)
                )
    for p in cc.provider_prices:
        node = hw.node(p.like_node)
        if node.accelerator not in accelerators:
            continue
        for opt in sorted(options & {CostOption.on_demand, CostOption.commit_1yr, CostOption.commit_3yr}):
            rate = usd_per_gpu_hour(cc, p.slug, opt, on=o.prices_as_of)
            out.setdefault(node.slug, []).append(Offer(node.slug, p.provider, p.slug, opt.value, rate))
    return out


def sample_nodes(nodes: np.ndarray) -> np.ndarray:
    """The node counts a self-build is priced at before the search (powers of two and the ends of ``nodes``):
    its capital and opex grow with the cluster (tested), so a size's values are at least those of the largest
    sample at or below it."""
    picks = {
        int(nodes[0]),
        int(nodes[-1]),
        *(1 << k for k in range(0, 40) if nodes[0] <= 1 << k <= nodes[-1]),
    }
    return np.array(sorted(picks), dtype=np.int64)


def self_build_floor(
    catalog: Catalog, offer: Offer, node: Any, nodes: np.ndarray, request: SizeRequest, storage_tb: float
) -> tuple[Offer | None, np.ndarray, str]:
    """``offer`` (self-build on ``node``) with its capital and opex at each count of ``nodes`` no greater than the
    cost model's own (those of the largest sample size at or below; :func:`sample_nodes`), or None when no sample
    can be priced; the counts it cannot be priced on (at or above the first sample that cannot be), and why."""
    gpn = node.accelerators_per_node
    samples = sample_nodes(nodes)
    values, reason, unpriced_from = [], "", math.inf
    for n in samples.tolist():
        priced, why = self_build_at(catalog, offer, node, n * gpn, request, storage_tb)
        if why:
            reason, unpriced_from = why, n
            break
        sb = priced.self_build
        life = sb.depreciation_years
        values.append((sb.capex_usd, sb.capital_total_usd, sb.opex_usd_per_month, priced.usd_per_gpu_hour))
    unpriced = nodes >= unpriced_from
    if not values:
        return None, unpriced, reason
    at = np.clip(np.searchsorted(samples[: len(values)], nodes, side="right") - 1, 0, None)
    columns = np.array(values)[at]
    capital = SelfBuildCapital(
        capex_usd=columns[:, 0], capital_total_usd=columns[:, 1], opex_usd_per_month=columns[:, 2],
        depreciation_years=life,
        use_after_run_years=request.use_after_run_years, runs=request.runs,
    )  # fmt: skip
    return replace(offer, usd_per_gpu_hour=float(columns[0, 3]), self_build=capital), unpriced, reason


def note_unpriced(unpriced: dict[str, list], slug: str, gpus: int, reason: str) -> None:
    """Keep, per self-build node, the smallest cluster the cost model could not price and why."""
    if gpus < unpriced.setdefault(slug, [math.inf, reason])[0]:
        unpriced[slug] = [gpus, reason]
