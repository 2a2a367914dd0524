"""Storage and data movement: S3 tiers for the dataset and the kept checkpoints over the run, internet
egress and inter-region transfer (the "data locality" of the cost).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.domain.cost.inputs import (
    DEFAULT_CHECKPOINTS_KEPT,
    DEFAULT_DATASET_BYTES_PER_TOKEN,
    TB,
    CostOverrides,
    _choose,
    _default,
    _entry,
    _override,
)
from app.domain.cost.price_records import CostCatalog, Tier
from app.domain.estimator.estimate import Assumption
from app.domain.provenance import Frozen


def tiered_usd(gb: float, tiers: Sequence[Tier]) -> float:
    """Price ``gb`` gigabytes through cumulative tiers (``up_to_tb`` decimal TB; last tier unbounded).

    >>> from app.domain.cost.price_records import Tier
    >>> tiered_usd(60_000, [Tier(up_to_tb=50, usd_per_gb=0.023), Tier(usd_per_gb=0.022)])
    1370.0
    """
    total, lower = 0.0, 0.0
    for tier in tiers:
        upper = math.inf if tier.up_to_tb is None else tier.up_to_tb * 1000.0
        amount = max(0.0, min(gb, upper) - lower)
        total += amount * tier.usd_per_gb
        lower = upper
        if gb <= upper:
            break
    return round(total, 9)


class StorageCost(Frozen):
    dataset_tb: float
    checkpoint_tb: float
    checkpoints_kept: int
    stored_tb: float
    usd_per_month: float
    egress_tb: float
    egress_usd: float
    inter_region_tb: float
    inter_region_usd: float
    assumptions: tuple[Assumption, ...]


def storage_cost(
    cc: CostCatalog, o: CostOverrides, tokens: float, parameters: int, checkpoint_bytes: float
) -> StorageCost:
    """The dataset (``tokens`` × bytes per token) and the kept checkpoints in object storage per month, the egress
    of the final weights and the inter-region transfer: what :func:`app.domain.cost.training_cost` adds to every
    cloud option (and sizes a self-build's storage system to)."""
    out: list[Assumption] = []
    terms = cc.pricing_terms
    per_token, a = _choose(o.dataset_bytes_per_token, "dataset bytes per token", "B",
                           (DEFAULT_DATASET_BYTES_PER_TOKEN, _default("dataset bytes per token",
                            DEFAULT_DATASET_BYTES_PER_TOKEN, "B", "tokenised, uint32 token ids")))  # fmt: skip
    if o.dataset_tb is not None:
        dataset_tb = o.dataset_tb
        out.append(_override("dataset size", dataset_tb, "TB"))
    else:
        dataset_tb = tokens * per_token / TB
        out.append(a)
    kept, a = _choose(o.checkpoints_kept, "checkpoints kept", "",
                      (DEFAULT_CHECKPOINTS_KEPT, _default("checkpoints kept", DEFAULT_CHECKPOINTS_KEPT, "",
                                                          "the latest and one before it")))  # fmt: skip
    out.append(a)
    kept = int(kept)
    checkpoint_tb = checkpoint_bytes / TB
    stored_tb = dataset_tb + kept * checkpoint_tb
    if o.storage_usd_per_gb_month is not None:
        per_month = stored_tb * 1000.0 * o.storage_usd_per_gb_month
        out.append(_override("storage price", o.storage_usd_per_gb_month, "USD/GB-month"))
    else:
        per_month = tiered_usd(stored_tb * 1000.0, terms.storage.s3_standard_tiers)
        out.append(_entry(terms.storage, "s3_standard_tiers", "S3 Standard storage", "tiered 0.023/0.022/0.021",
                          "USD/GB-month", terms.storage.notes))  # fmt: skip
    if o.egress_tb is not None:
        egress_tb = o.egress_tb
        out.append(_override("internet egress", egress_tb, "TB"))
    else:
        egress_tb = parameters * 2.0 / TB
        out.append(_default("internet egress", egress_tb, "TB", "one download of the final bf16 weights"))
    egress_usd = tiered_usd(egress_tb * 1000.0, terms.data_transfer.internet_egress_tiers)
    out.append(_entry(terms.data_transfer, "internet_egress_tiers", "internet egress price",
                      "tiered 0 (100 GB)/0.09/0.085/0.07/0.05", "USD/GB"))  # fmt: skip
    xr_price, a = _choose(o.inter_region_usd_per_gb, "inter-region transfer", "USD/GB",
                          (terms.data_transfer.inter_region_usd_per_gb,
                           _entry(terms.data_transfer, "inter_region_usd_per_gb", "inter-region transfer",
                                  terms.data_transfer.inter_region_usd_per_gb, "USD/GB",
                                  "keep data in the training region (data locality): ingress and same-region S3 are free")))  # fmt: skip
    out.append(a)
    return StorageCost(
        dataset_tb=dataset_tb, checkpoint_tb=checkpoint_tb, checkpoints_kept=kept, stored_tb=stored_tb,
        usd_per_month=per_month, egress_tb=egress_tb, egress_usd=egress_usd, inter_region_tb=o.inter_region_tb,
        inter_region_usd=o.inter_region_tb * 1000.0 * xr_price, assumptions=tuple(out),
    )  # fmt: skip


_storage = storage_cost  # the name app.domain.cost.training imports
