"""Days and dollars of a training run as a function of its throughput, per cluster size.

The plan search evaluates thousands of plans on arrays and only knows each plan's tokens/s; the scenario
pipeline prices one plan for every option. Both go through a :class:`RunPricing`, so a plan's days (before and
after failures) and dollars are the same number in the search's rows and on the cost table:

- :class:`FlatRate`: a price per GPU-hour and no failures (the search's own default, for callers that give no
  pricing);
- :class:`CurvePricing`: any per-cluster-size function of tokens/s (the services build it from the cost
  model: instances, goodput, storage, commitments), with the search's deadline and budget turned into the
  smallest tokens/s that meets them, so whole arrays are filtered with one comparison.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class RunFigures:
    """One run: ``days`` is wall-clock days after failures (restarts, lost work, checkpoints: ``goodput``),
    ``days_before_failures`` the compute alone; ``usd`` the option's total; $ per million tokens."""

    days_before_failures: float | None
    days: float | None
    goodput: float
    usd: float | None
    usd_per_million_tokens: float | None


class RunPricing(Protocol):
    def figures(self, gpus: int, tokens_per_s: float) -> RunFigures: ...

    def min_tokens_per_s(self, gpus: int, *, days: float | None = None, usd: float | None = None) -> float:
        """The smallest tokens/s on ``gpus`` GPUs that finishes within ``days`` (after failures) or costs at
        most ``usd`` (0.0 when no constraint is given; ``inf`` when nothing meets it)."""
        ...


@dataclass(frozen=True, slots=True)
class FlatRate:
    """$ = GPUs × price per GPU-hour × hours, no failures (goodput 1)."""

    tokens: float | None
    usd_per_gpu_hour: float | None

    def figures(self, gpus: int, tokens_per_s: float) -> RunFigures:
        days = self.tokens / tokens_per_s / SECONDS_PER_DAY if self.tokens else None
        usd_h = self.usd_per_gpu_hour * gpus if self.usd_per_gpu_hour else None
        return RunFigures(
            days_before_failures=days, days=days, goodput=1.0,
            usd=usd_h * days * 24 if usd_h and days else None,
            usd_per_million_tokens=usd_h / (tokens_per_s * 3600) * 1e6 if usd_h else None,
        )  # fmt: skip

    def min_tokens_per_s(self, gpus: int, *, days: float | None = None, usd: float | None = None) -> float:
        if not self.tokens:
            return 0.0
        need = 0.0
        if days:
            need = max(need, self.tokens / (days * SECONDS_PER_DAY))
        if usd and self.usd_per_gpu_hour:
            need = max(need, self.tokens / 3600 * self.usd_per_gpu_hour * gpus / usd)
        return need


@dataclass
class CurvePricing:
    """Figures from ``price(gpus, tokens_per_s)``, which must give days and dollars that fall as tokens/s rises
    (true of every option: a faster run is never longer nor dearer), and days inversely proportional to tokens/s.
    Figures are cached; the budget's threshold is found by bisection on tokens/s (relative precision 1e-12)."""

    price: Callable[[int, float], RunFigures]
    _cache: dict[tuple[int, float], RunFigures] = field(default_factory=dict, repr=False)

    def figures(self, gpus: int, tokens_per_s: float) -> RunFigures:
        key = (gpus, tokens_per_s)
        if key not in self._cache:
            self._cache[key] = self.price(gpus, tokens_per_s)
        return self._cache[key]

    def min_tokens_per_s(self, gpus: int, *, days: float | None = None, usd: float | None = None) -> float:
        need = 0.0
        if days:  # days = K / tokens/s (goodput does not depend on speed): one evaluation gives K
            k = self.figures(gpus, 1.0).days
            need = max(need, k / days) if k is not None else need
        if usd:
            need = max(need, self._threshold(gpus, lambda f: f.usd, usd))
        return need

    def _threshold(self, gpus: int, value: Callable[[RunFigures], float | None], limit: float) -> float:
        def meets(tps: float) -> bool:
            v = value(self.price(gpus, tps))
            return v is not None and v <= limit

        lo, hi = 1e-6, 1e13
        if not meets(hi):
            return math.inf
        if meets(lo):
            return 0.0
        for _ in range(200):  # bisection in log space
            mid = math.sqrt(lo * hi)
            if meets(mid):
                hi = mid
            else:
                lo = mid
            if hi / lo - 1 < 1e-12:
                break
        return hi
