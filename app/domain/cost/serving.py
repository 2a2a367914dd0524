"""Serving check: whether the trained model's weights and KV cache fit the priced node for inference."""

from __future__ import annotations

from datetime import date

from pydantic import Field

from app.domain.cost.price_records import CostCatalog
from app.domain.estimator.hardware import HardwareCatalog
from app.domain.model.architecture import Architecture
from app.domain.model.counts import kv_cache_width
from app.domain.provenance import Frozen


class ServingFit(Frozen):
    instance: str
    accelerator: str
    gpus_per_instance: int
    usable_gib_per_gpu: float
    gpus_needed: int | None = Field(
        description="smallest tensor-parallel degree that holds it; None: none does"
    )
    fits: bool
    usd_per_hour: float | None = Field(description="on-demand, whole instance")
    usd_per_gpu_hour: float | None


class ServingCheck(Frozen):
    model: str
    parameters: int
    context_tokens: int
    batch: int
    weight_bytes_per_param: float
    kv_cache_bytes_per_token: float
    weights_bytes: float
    kv_cache_bytes: float
    needed_bytes: float
    reserve_fraction: float
    instances: tuple[ServingFit, ...]
    cheapest_fitting: str | None


def serving_check(
    arch: Architecture, parameters: int, hardware: HardwareCatalog, cost_catalog: CostCatalog, *,
    context_tokens: int, batch: int = 1, weight_bytes_per_param: float = 2.0, kv_bytes_per_value: float = 2.0,
    reserve_fraction: float = 0.1, on: date | None = None,
) -> ServingCheck:  # fmt: skip
    """Which AWS instances hold the trained model's weights plus the KV cache for ``batch`` sequences of
    ``context_tokens`` (tensor parallel over the instance's GPUs, ``reserve_fraction`` of memory kept for
    activations and the runtime), and their on-demand $/hour. KV cache per token = layers × K/V width ×
    bytes (the MLA latent for DeepSeek-style attention)."""
    kv_per_token = arch.n_layers * kv_cache_width(arch) * kv_bytes_per_value
    weights = parameters * weight_bytes_per_param
    kv = kv_per_token * context_tokens * batch
    needed = weights + kv
    fits: list[ServingFit] = []
    for price in cost_catalog.instance_prices:
        node = hardware.node(price.slug)
        acc = hardware.accelerator(node.accelerator)
        per_gpu = acc.memory_usable_bytes * (1.0 - reserve_fraction)
        degrees = [d for d in (1, 2, 4, 8, 16, 32, 64, 72) if d <= node.accelerators_per_node
                   and node.accelerators_per_node % d == 0]  # fmt: skip
        need = next((d for d in degrees if d * per_gpu >= needed), None)
        od = price.on_demand_usd_per_hour(on)
        fits.append(ServingFit(
            instance=price.slug, accelerator=acc.slug, gpus_per_instance=node.accelerators_per_node,
            usable_gib_per_gpu=acc.memory_usable_bytes / 2**30, gpus_needed=need, fits=need is not None,
            usd_per_hour=od, usd_per_gpu_hour=price.per_gpu(od),
        ))  # fmt: skip
    fits.sort(key=lambda f: (not f.fits, f.usd_per_hour is None, f.usd_per_hour or 0.0, f.instance))
    cheapest = next((f.instance for f in fits if f.fits and f.usd_per_hour is not None), None)
    return ServingCheck(
        model=arch.slug, parameters=parameters, context_tokens=context_tokens, batch=batch,
        weight_bytes_per_param=weight_bytes_per_param, kv_cache_bytes_per_token=kv_per_token, weights_bytes=weights,
        kv_cache_bytes=kv, needed_bytes=needed, reserve_fraction=reserve_fraction, instances=tuple(fits),
        cheapest_fitting=cheapest,
    )  # fmt: skip
