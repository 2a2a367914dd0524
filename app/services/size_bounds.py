"""The sizing search's bounds (:mod:`app.services.size`): the (node, size) pairs and the lower bounds of days and
dollars that let it skip pairs that cannot enter the answer, the goodput of a size computed once, and the
deadline or budget a bound already misses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.domain.catalog import Catalog
from app.domain.cost.inputs import CostOption
from app.domain.estimator.calibration import apply_calibration
from app.domain.estimator.estimate import build_cluster
from app.domain.reliability.report import reliability_report
from app.domain.search.sizing import REASON_BUDGET, REASON_DEADLINE, Frontier, Offer
from app.schemas.size import SizeRequest


class Dominated:
    """A pair the fastest-plan search's bound shows cannot enter the answer (it is not searched)."""


DOMINATED = Dominated()


@dataclass
class SizePair:
    """One (node, cluster size) and the offers still in the running, with each offer's bound: (offer, goodput,
    lowest days, lowest $ on the request's basis)."""

    order: (
        int  # place in the exhaustive order (node slug, size): ties are ranked as the exhaustive search would
    )
    node: Any
    gpus: int
    tps_bound: float
    live: list[tuple[Offer, float, float, float]]


class GoodputCache:
    """The reliability model's goodput of a size (and spot's interruptions), computed once: it depends on the plan
    only through its checkpoint bytes per parameter, which the framework, precision and optimizer fix."""

    def __init__(self, catalog: Catalog, params: int, bytes_per_param: float) -> None:
        self.catalog, self.params, self.bytes_per_param = catalog, params, bytes_per_param
        self.cache: dict[tuple[int, int, int], float] = {}

    def __call__(self, gpus: int, nodes: int, offer: Offer) -> float:
        """Goodput on ``gpus`` in ``nodes`` instances paid through ``offer``: spot's instances (all of them, or the
        mix's spot share) add their interruptions, as in the cost model."""
        spot = 0
        if offer.option == CostOption.spot.value:
            spot = nodes
        elif offer.mix is not None:
            spot = offer.mix.spot_instances(nodes)
        key = (gpus, nodes, spot)
        if key not in self.cache:
            try:
                self.cache[key] = self.report(gpus, nodes, spot).goodput
            except (KeyError, ValueError):
                self.cache[key] = 1.0
        return self.cache[key]

    def report(self, gpus: int, nodes: int, spot_instances: int = 0):  # noqa: ANN201 - ReliabilityReport
        return reliability_report(
            self.catalog.cost, gpus=gpus, nodes=nodes, parameters=self.params,
            plan_bytes_per_param=self.bytes_per_param, spot_instances=spot_instances,
        )  # fmt: skip


BOUND_REASONS = (REASON_DEADLINE, REASON_BUDGET)  # codes 1, 2 of a bound table's ``why``
DEADLINE_CODE, BUDGET_CODE = (1 + BOUND_REASONS.index(r) for r in (REASON_DEADLINE, REASON_BUDGET))
NO_PRICE_CODE = len(BOUND_REASONS) + 1


class BoundTable:
    """The (node, size) pairs the memory and layout bounds keep, as arrays: per pair its place in the exhaustive
    order, GPUs, speed bound, and per offer of its node the lower bounds of days and $ and ``why`` it is out (0:
    live, 1 deadline, 2 budget, 3 no price). Pairs are read in order of their cheapest live bound, then fastest."""

    def __init__(self) -> None:
        self._parts: list[tuple] = []

    def add(self, node: Any, offers: list[Offer], order: np.ndarray, gpus: np.ndarray, speed: np.ndarray,
            days: np.ndarray, usd: np.ndarray, why: np.ndarray) -> None:  # fmt: skip
        self._parts.append((node, offers, order, gpus, speed, days, usd, why))

    def finish(self) -> np.ndarray:
        """The rows with a live offer, most promising first (the rest are read only if the bounds break)."""
        width = max((len(part[1]) for part in self._parts), default=1)

        def padded(col: int, fill: float) -> np.ndarray:
            blocks = [np.pad(part[col], ((0, 0), (0, width - part[col].shape[1])), constant_values=fill)
                      for part in self._parts]  # fmt: skip
            return np.concatenate(blocks) if blocks else np.zeros((0, width))

        self.days, self.usd = padded(5, np.inf), padded(6, np.inf)
        self.why = padded(7, NO_PRICE_CODE).astype(np.int8)
        self.part = np.concatenate(
            [np.full(len(p[3]), i) for i, p in enumerate(self._parts)] or [np.zeros(0)]
        )
        self.local = np.concatenate([np.arange(len(p[3])) for p in self._parts] or [np.zeros(0)])
        self.part, self.local = self.part.astype(np.int64), self.local.astype(np.int64)
        live = self.why == 0
        key_usd = np.where(live, self.usd, np.inf).min(axis=1) if len(live) else np.zeros(0)
        key_days = np.where(live, self.days, np.inf).min(axis=1) if len(live) else np.zeros(0)
        rows = np.nonzero(live.any(axis=1))[0]
        return rows[np.lexsort((key_days[rows], key_usd[rows]))]

    def __len__(self) -> int:
        return len(self.part)

    def row(self, r: int) -> tuple:
        """(node, offers, order, GPUs, speed bound, the offers' ``why``) of row ``r``."""
        node, offers, order, gpus, speed, _, _, _ = self._parts[self.part[r]]
        j = self.local[r]
        return node, offers, int(order[j]), int(gpus[j]), float(speed[j]), self.why[r]

    def live_count(self, r: int) -> int:
        return int((self.why[r] == 0).sum())

    def beaten(self, rows: np.ndarray, frontier: Frontier) -> np.ndarray:
        """Rows whose every live offer the frontier beats at its bound (dead offers count as beaten)."""
        live = self.why[rows] == 0
        days = np.where(live, self.days[rows], np.inf)
        usd = np.where(live, self.usd[rows], np.inf)
        beats = frontier.beats_many(days.ravel(), usd.ravel()).reshape(days.shape)
        return (beats | ~live).all(axis=1)


def bound_miss(request: SizeRequest, days_bound: float, usd_bound: float) -> str | None:
    if request.deadline_days is not None and days_bound > request.deadline_days:
        return REASON_DEADLINE
    if request.budget_usd is not None and usd_bound > request.budget_usd:
        return REASON_BUDGET
    return None


def bound_cluster(catalog: Catalog, node: Any, calibrated: bool) -> Any:
    """The node's cluster as the plan search builds it (calibrated when asked): what the speed bound reads."""
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator=node.accelerator,
                            gpus=node.accelerators_per_node, node=node.slug)  # fmt: skip
    return apply_calibration(cluster, catalog.calibrations if calibrated else None)[0]
