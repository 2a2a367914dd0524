"""The fastest plan that fits on one cluster size, found by branch and bound: the plan the exhaustive search
(:func:`app.domain.search.engine.search`) ranks first there, without evaluating every plan.

The sizing search needs, for each (node, cluster size), only the plan the exhaustive search would rank first by
tokens/s. Most plans cannot be it, and proving that is cheaper than evaluating them:

1. *Validity on the axes.* The plan rules and the capability table (:func:`app.domain.search.space._reject_masks`)
   run on the grid's axes broadcast against each other (tp·cp·pp triples × vpp × ep × sharding × offload ×
   micro-batch × recompute), never on one row per plan: the same masks, a fraction of the work.
2. *A time bound per shape.* A plan's step is (m + (pp − 1)/vpp)·t_mb + p2p + exposed DP + optimizer, stretched
   by 1 + cv·√(2 ln N) (:func:`app.domain.estimator.evaluate.combine_step`), and t_mb, its slowest rank's
   micro-batch, is at least that rank's compute + recompute + exposed TP, CP and EP time — the terms of
   :func:`app.domain.estimator.evaluate.rank_time` that depend only on the plan's *key* (tp, cp, recompute,
   micro-batch, ep) and the rank's layers, linearly: per dense layer, per MoE layer and for the output head. Those
   three coefficients are computed once per key by ``rank_time`` itself (the estimator's own per-rank terms,
   cached across cluster sizes), so a shape (tp, cp, pp, vpp, ep, micro-batch, recompute) — every sharding and
   offload of it shares the bound — gets a lower bound of its step time from a table lookup.
3. *Branch and bound.* Shapes are taken fastest bound first, in growing chunks; each chunk's plans are evaluated
   exactly (:func:`app.domain.search.engine._evaluate`: memory, then time where they fit); the search stops when
   no shape left can beat the fastest plan found. The winner is then ranked among every evaluated plan that fits
   by the exhaustive search's own ordering (:func:`engine._rank`: tokens/s, headroom, simplicity, then grid
   order), so ties resolve as they would there.

Every evaluated plan is checked against its bound; if one beats it (the estimator changed under the bound), the
whole space is evaluated instead and ``bound_broken`` says so.

Limits. ``spec.max_plans`` (CAPPLAN_SEARCH_MAX_PLANS, the planner's "about 10 s" of evaluation) bounds the plans
this search *evaluates* on one size — the chunks it takes, or every valid plan when a bound failed — not the grid
it lays out: a size whose grid is many times the limit is searched when its bounds leave few plans to evaluate
(GB200 NVL72 above 72 GPUs for DeepSeek-V3: 2.4–15 M grid points, about a thousand evaluated). The layout itself
(boolean masks, one byte a point, and a floor per sharding and offload) is held under :data:`MAX_LAYOUT` points, a
memory guard the catalog's models stay well below. Either limit raises :class:`SearchTooLarge` (the caller lists
the size as not searched).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.domain.estimator.assemble import consts, model_q
from app.domain.estimator.cluster import Cluster
from app.domain.estimator.evaluate import KeyQ, RankQ, plan_comm, rank_time, straggler_factor
from app.domain.estimator.memory import host_capacity_bytes
from app.domain.estimator.plan import Offload, Recompute, Sharding
from app.domain.estimator.rank_memory import rank_memory
from app.domain.estimator.xp import VECTOR
from app.domain.model.architecture import Architecture
from app.domain.model.counts import parameter_counts
from app.domain.search.engine import (
    _candidate,
    _evaluate,
    _key_arrays,
    _plan_arrays,
    _rank,
    _rank_reps,
    _scalar_plan,
    _Scored,
    _unique_rows,
)
from app.domain.search.space import _axes, _reject_masks
from app.domain.search.spec import (
    OFFLOADS,
    RECOMPUTES,
    SHARDINGS,
    Candidate,
    Objective,
    SearchCancelled,
    SearchSpec,
    SearchTooLarge,
)

REST = ("vpp", "ep", "sh", "off", "mb", "rc")  # the grid's axes after the (tp, cp, pp) triple, in its order
FIRST_CHUNK = 256  # shapes in the first chunk; each next one is twice as large
SLACK = 1e-9  # relative margin for rounding: a bound is trusted to this precision, no more
# The most grid points one size may lay out (masks of one byte a point: about 64 MiB each). DeepSeek-V3 on GB200
# NVL72, the largest space of the catalog, lays out at most 12.7 M up to 1,048,576 GPUs (tested).
MAX_LAYOUT = 1 << 26


@dataclass(frozen=True, slots=True)
class FastestPlan:
    """The plan ``search`` ranks first on one cluster size (None: nothing fits), and what it took: the grid points
    and valid plans of the space, the plans evaluated exactly (memory; time where they fit) and whether a plan
    beat its bound (then every valid plan was evaluated)."""

    candidate: Candidate | None
    grid_points: int
    valid_plans: int
    evaluated_plans: int
    bound_broken: bool = False


@dataclass
class _Grid:
    """One cluster size's grid: its axes, the (tp, cp, pp) triples dividing the GPUs, the shape of the grid over
    (triple, vpp, ep, sharding, offload, micro-batch, recompute), its valid plans, and (once bounded) its shapes."""

    axes: dict
    triples: np.ndarray
    values: dict
    shape: tuple
    grid_points: int
    valid: np.ndarray
    n_valid: int
    space: _Space | None = None


class FastestPlanFinder:
    """Finds :class:`FastestPlan` for one model and search settings over many clusters and sizes. The per-key
    bound coefficients are kept between calls, keyed on everything of the cluster but its size."""

    def __init__(self, arch: Architecture, spec: SearchSpec, flops_per_token: float) -> None:
        if spec.objective not in (Objective.max_tokens_per_s, Objective.min_time):
            raise ValueError("the fastest-plan search ranks by tokens/s")
        if spec.deadline_days or spec.budget_usd:
            raise ValueError("the fastest-plan search takes no deadline or budget")
        self.arch, self.spec, self.flops = arch, spec, flops_per_token
        self.mq = model_q(arch, parameter_counts(arch))
        self.c0 = _scalar_plan(spec, tp=1, pp=1, vpp=1, dp=1, cp=1, ep=1, sharding=Sharding.ddp,
                               offload=Offload.none, micro_batch=1, batch=1, recompute=Recompute.none)  # fmt: skip
        self._coefficients: dict[str, dict[tuple[int, ...], tuple[float, float, float]]] = {}
        self._ranks: dict[tuple[int, int], list[tuple[int, int, bool]]] = {}
        self._last: tuple[tuple, _Grid] | None = None

    # -- the bound -----------------------------------------------------------------------------------------

    def _key_coefficients(self, cluster: Cluster, keys: list[tuple[int, ...]]) -> np.ndarray:
        """(per dense layer, per MoE layer, head) seconds of compute + recompute + exposed TP, CP and EP of one
        micro-batch, for each key (tp, cp, rc, mb, ep): ``rank_time`` on three unit ranks."""
        table = self._coefficients.setdefault(cluster.model_copy(update={"gpus": 1}).model_dump_json(), {})
        missing = [k for k in keys if k not in table]
        if missing:
            cols = np.array(missing, dtype=np.int64)
            n = len(missing)
            g = {
                "tp": cols[:, 0], "cp": cols[:, 1], "rc": cols[:, 2], "mb": cols[:, 3], "ep": cols[:, 4],
                "pp": np.ones(n, dtype=np.int64), "vpp": np.ones(n, dtype=np.int64),
                "sh": np.full(n, SHARDINGS.index(Sharding.ddp)), "off": np.full(n, OFFLOADS.index(Offload.none)),
            }  # fmt: skip
            gpus = int(np.max(cols[:, 0] * cols[:, 1]))
            pq = _plan_arrays(self.arch, self.spec, cluster, gpus, 1, g)
            kq = _key_arrays(self.arch, self.spec, cluster, g)
            c = consts(cluster, self.c0)
            unit = RankQ(rank=np.zeros((1, 3)), n_dense=np.array([[1.0, 0.0, 0.0]]),
                         n_moe=np.array([[0.0, 1.0, 0.0]]), first=np.zeros((1, 3), dtype=bool),
                         last=np.array([[False, False, True]]))  # fmt: skip
            t = rank_time(VECTOR, self.mq, pq, unit, kq, c, plan_comm(VECTOR, self.mq, pq, c))
            part = np.broadcast_to(t["compute"] + t["recompute"] + t["tp"] + t["cp"] + t["ep"], (n, 3))
            for key, row in zip(missing, part.tolist(), strict=True):
                table[key] = tuple(row)
        return np.array([table[k] for k in keys], dtype=float).reshape(len(keys), 3)

    def key_work(self, cluster: Cluster, keys: list[tuple[int, int, int, int]]) -> np.ndarray:
        """W of each (tp, cp, micro-batch, ep) without recompute: the per-rank terms (compute and exposed TP, CP
        and EP time) of one micro-batch through every layer and the head — a lower bound of pp × the slowest
        rank's terms of any plan with that key (recompute only adds time). For the sizing's speed bound."""
        none = RECOMPUTES.index(Recompute.none)
        coef = self._key_coefficients(cluster, [(tp, cp, none, mb, ep) for tp, cp, mb, ep in keys])
        return coef @ np.array([self.arch.n_dense_layers, self.arch.n_moe_layers, 1.0])

    def _rank_signatures(self, pp: int, vpp: int) -> list[tuple[int, int, bool]]:
        """The distinct (dense layers, MoE layers, last) of the pipeline ranks: what a rank's time reads."""
        if (pp, vpp) not in self._ranks:
            self._ranks[(pp, vpp)] = sorted(
                {(d, m, last) for _, d, m, _, last in _rank_reps(self.arch, pp, vpp, self.spec.mtp_layers)}
            )
        return self._ranks[(pp, vpp)]

    def _first_rank_memory(self, cluster: Cluster, gpus: int, batch: int, g: dict, kq: KeyQ) -> tuple:
        """(peak bytes, fits in host RAM and NVMe) of each plan's first pipeline rank: ``rank_memory`` on that rank
        alone. A plan's peak is the maximum over its ranks, the first among them (:func:`engine._evaluate`), and
        its host check the worst rank's, so a plan refused here is refused there."""
        pq = _plan_arrays(self.arch, self.spec, cluster, gpus, batch, g)
        unique, inverse = _unique_rows([g["pp"], g["vpp"]])
        firsts = [
            _rank_reps(self.arch, pp, vpp, self.spec.mtp_layers)[0] for pp, vpp in unique.tolist()
        ]  # rank 0
        rows = np.array(firsts, dtype=float)[inverse][:, None, :]
        rq = RankQ(rank=rows[..., 0], n_dense=rows[..., 1], n_moe=rows[..., 2], first=rows[..., 3].astype(bool),
                   last=rows[..., 4].astype(bool))  # fmt: skip
        mem = rank_memory(VECTOR, self.mq, pq, rq, kq, consts(cluster, self.c0))
        n = len(g["tp"])
        per_node = min(cluster.gpus_per_node, gpus)
        host_cap, nvme_cap = host_capacity_bytes(cluster.node.host_memory_gib, cluster.node.local_nvme_tb)
        flat = lambda a: np.broadcast_to(a, (n, 1)).ravel()  # noqa: E731
        host_ok = (flat(mem["host"]) * per_node <= host_cap) & (flat(mem["nvme"]) * per_node <= nvme_cap)
        return flat(mem["total"]), host_ok

    def _first_stage_fits(self, cluster: Cluster, gpus: int, batch: int, g: dict, limit: float) -> np.ndarray:
        """Whether each plan's first pipeline rank fits in ``limit`` bytes and its node's host RAM and NVMe."""
        kq = _key_arrays(self.arch, self.spec, cluster, g)
        total, host_ok = self._first_rank_memory(cluster, gpus, batch, g, kq)
        return (total <= limit) & host_ok

    # -- the search ----------------------------------------------------------------------------------------

    def find(
        self,
        cluster: Cluster,
        gpus: int,
        batch: int,
        *,
        exhaustive: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> FastestPlan:
        """The plan ``search`` ranks first on ``gpus`` GPUs of ``cluster`` at a global batch of ``batch``
        sequences. ``exhaustive`` evaluates every valid plan (no bound): the reference the tests compare with."""
        g = self._grid(cluster, gpus, batch)
        if not g.n_valid:
            return FastestPlan(None, g.grid_points, 0, 0)
        found = _Found(self, cluster, gpus, batch, g.triples, g.values, g.shape)
        if not exhaustive:
            if self._branch_and_bound(found, self._space(g, cluster, gpus, batch), should_stop):
                return FastestPlan(found.best(), g.grid_points, g.n_valid, found.evaluated)
            found = _Found(self, cluster, gpus, batch, g.triples, g.values, g.shape)  # a bound failed: all
        if g.n_valid > self.spec.max_plans:
            raise SearchTooLarge(
                f"{g.n_valid:,} valid plans to evaluate on {gpus:,} GPUs"
                + ("" if exhaustive else " (a plan beat its bound)")
                + f", over the limit of {self.spec.max_plans:,} (CAPPLAN_SEARCH_MAX_PLANS)"
            )
        found.evaluate(np.flatnonzero(g.valid.ravel()), None)
        return FastestPlan(
            found.best(), g.grid_points, g.n_valid, found.evaluated, bound_broken=not exhaustive
        )

    def upper_tokens_per_s(self, cluster: Cluster, gpus: int, batch: int) -> float:
        """An upper bound of the tokens/s of every plan that can fit on ``gpus`` GPUs of ``cluster`` (0: none can):
        the coarse step bound over the shapes whose memory floor fits. Costs part of what :meth:`find` costs, and
        that part is kept for the :meth:`find` of the same size that may follow."""
        g = self._grid(cluster, gpus, batch)
        if not g.n_valid:
            return 0.0
        coarse = self._space(g, cluster, gpus, batch).coarse
        fastest = float(coarse.min()) if coarse.size else np.inf
        return batch * self.spec.seq_len / fastest if np.isfinite(fastest) and fastest > 0 else 0.0

    def _grid(self, cluster: Cluster, gpus: int, batch: int) -> _Grid:
        """The grid of one cluster size and its valid plans (the last one asked is kept)."""
        key = (cluster.model_dump_json(), gpus, batch)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        axes = _axes(self.arch, cluster, self.spec, gpus)
        triples = np.array(
            [(t, c, p) for t in axes["tp"] for c in axes["cp"] for p in axes["pp"] if gpus % (t * c * p) == 0],
            dtype=np.int64,
        ).reshape(-1, 3)  # fmt: skip
        values = {k: np.asarray(axes[k], dtype=np.int64) for k in REST}
        shape = (len(triples), *(len(values[k]) for k in REST))
        if math.prod(shape) > MAX_LAYOUT:
            raise SearchTooLarge(
                f"the grid of {gpus:,} GPUs has {math.prod(shape):,} points to lay out (limit {MAX_LAYOUT:,})"
            )
        valid = (
            self._valid(cluster, gpus, batch, triples, values, shape) if all(shape) else np.zeros(shape, bool)
        )
        g = _Grid(
            axes, triples, values, shape, math.prod(len(v) for v in axes.values()), valid, int(valid.sum())
        )
        self._last = (key, g)
        return g

    def _space(self, g: _Grid, cluster: Cluster, gpus: int, batch: int) -> _Space:
        if g.space is None:
            floor = self._state_floor(cluster, gpus, batch, g.triples, g.values, g.valid)
            usable = cluster.accelerator.memory_usable_bytes
            limit = usable - max(self.spec.headroom_bytes, self.spec.headroom_fraction * usable)
            g.space = _Space(
                self, cluster, gpus, batch, g.axes, g.triples, g.values, g.valid & (floor <= limit)
            )
            g.space.floor = floor
        return g.space

    def _valid(self, cluster, gpus, batch, triples, values, shape) -> np.ndarray:
        """The valid plans of the grid as a boolean array over its axes: the search's own masks, broadcast."""
        ndim = len(shape)

        def along(axis: int, a: np.ndarray) -> np.ndarray:
            return a.reshape([-1 if i == axis else 1 for i in range(ndim)])

        g = {"tp": along(0, triples[:, 0]), "cp": along(0, triples[:, 1]), "pp": along(0, triples[:, 2])}
        g.update({k: along(i + 1, values[k]) for i, k in enumerate(REST)})
        invalid = np.zeros(shape, dtype=bool)
        for _, failing in _reject_masks(self.arch, cluster, self.spec, gpus, batch, g):
            if np.any(failing):
                invalid |= failing
        return ~invalid

    def _state_floor(self, cluster, gpus, batch, triples, values, valid) -> np.ndarray:
        """A lower bound of each plan's peak GPU memory from what does not depend on its micro-batch or recompute:
        its first pipeline rank's memory with no activations (they only add bytes), broadcast over those two axes;
        +inf where that rank's offloaded state exceeds its node's host RAM or NVMe (the host terms read no
        activation; a later stage with more expert layers can still fail where the first fits, which evaluating
        the plan finds). A plan whose floor exceeds the usable memory cannot fit, and needs no per-rank terms."""
        sub = valid.any(axis=(5, 6))  # (t, v, e, sh, off) with some valid plan
        t, v, e, sh, off = np.nonzero(sub)
        out = np.full(sub.shape, np.inf)
        if t.size:
            n = t.size
            g = {"tp": triples[t, 0], "cp": triples[t, 1], "pp": triples[t, 2], "vpp": values["vpp"][v],
                 "ep": values["ep"][e], "sh": values["sh"][sh], "off": values["off"][off],
                 "mb": np.full(n, values["mb"][0]), "rc": np.full(n, values["rc"][0])}  # fmt: skip
            none = KeyQ(**dict.fromkeys(KeyQ.__dataclass_fields__, 0.0))
            total, host_ok = self._first_rank_memory(cluster, gpus, batch, g, none)
            out[t, v, e, sh, off] = np.where(host_ok, total, np.inf)
        return out[..., None, None]

    def _branch_and_bound(self, found: _Found, space: _Space, should_stop) -> bool:
        """Evaluate shapes by their coarse bound, fastest first, until none left can beat the best plan found;
        within each chunk only the shapes whose exact bound still can. False when an evaluated plan beat a bound
        (the caller then evaluates everything)."""
        coarse = space.coarse.ravel()
        order = np.argsort(coarse, kind="stable")
        order = order[np.isfinite(coarse[order])]
        ascending = coarse[order]
        pos, chunk = 0, FIRST_CHUNK
        tokens = found.batch * self.spec.seq_len

        def reachable() -> float:  # the largest step a shape may have and still beat the best plan found
            return tokens / (found.best_tps * (1 - SLACK)) if found.best_tps > 0 else np.inf

        while pos < len(order):
            if should_stop is not None and should_stop():
                raise SearchCancelled("the search was stopped before it finished")
            limit = np.searchsorted(ascending, reachable(), side="right")
            take = order[pos : min(pos + chunk, limit)]
            if not take.size:
                break
            pos += take.size
            chunk *= 2
            t, v, e, m, r = np.unravel_index(take, space.shape_valid.shape)
            exact = space.exact_lower_bound(t, v, e, m, r)
            keep = exact <= reachable()
            lower = np.maximum(exact, coarse[take])[
                keep
            ]  # both are bounds: an evaluated plan must respect each
            t, v, e, m, r = t[keep], v[keep], e[keep], m[keep], r[keep]
            shape = found.shape
            sub = space.valid[t[:, None, None], v[:, None, None], e[:, None, None],
                              np.arange(shape[3])[None, :, None], np.arange(shape[4])[None, None, :],
                              m[:, None, None], r[:, None, None]]  # fmt: skip
            b, s, o = np.nonzero(sub)
            if found.evaluated + b.size > self.spec.max_plans:
                raise SearchTooLarge(
                    f"the fastest-plan search on {found.gpus:,} GPUs would evaluate more than "
                    f"{self.spec.max_plans:,} plans (CAPPLAN_SEARCH_MAX_PLANS) before proving its winner "
                    f"({found.evaluated:,} evaluated, {b.size:,} more in the next chunk)"
                )
            plans = np.ravel_multi_index((t[b], v[b], e[b], s, o, m[b], r[b]), shape)
            if not found.evaluate(plans, lower[b], space.floor[t[b], v[b], e[b], s, o, 0, 0]):
                return False
        return True


class _Space:
    """One cluster size's grid seen by shape (triple, vpp, ep, micro-batch, recompute): which shapes hold a valid
    plan, their pipeline ranks, and the bounds of their step time."""

    def __init__(self, finder: FastestPlanFinder, cluster, gpus, batch, axes, triples, values, valid) -> None:
        self.finder, self.cluster, self.axes, self.values, self.valid = finder, cluster, axes, values, valid
        self.shape_valid = valid.any(axis=(3, 4))  # over sharding and offload: they do not enter the bound
        self.tp_i = np.searchsorted(axes["tp"], triples[:, 0])
        self.cp_i = np.searchsorted(axes["cp"], triples[:, 1])
        nt, nv, _, _, _ = self.shape_valid.shape
        # the pipeline ranks of each (pp, vpp) some valid shape uses, padded with a repeat of the first
        live = self.shape_valid.any(axis=(2, 3, 4))
        sigs = [[finder._rank_signatures(int(triples[t, 2]), int(values["vpp"][v])) if live[t, v] else [(0, 0, False)]
                 for v in range(nv)] for t in range(nt)]  # fmt: skip
        width = max(len(s) for row in sigs for s in row)
        self.ranks = np.array([[s + [s[0]] * (width - len(s)) for s in row] for row in sigs], dtype=float)
        # step ≥ (micro-batches + (pp − 1)/vpp) · slowest rank's terms · straggler stretch: the factor per (t, v, mb)
        tp, cp, pp = (triples[:, i][:, None, None] for i in range(3))
        dp = gpus // (tp * cp * pp)
        micro_batches = np.maximum(1, batch // (values["mb"][None, None, :] * dp))
        stretch = 1 + straggler_factor(VECTOR, gpus, cluster.scale.straggler_cv)
        self.factor = (micro_batches + (pp - 1) / values["vpp"][None, :, None]) * stretch  # (nt, nv, nm)
        self.floor: np.ndarray | None = None
        self.coarse = self.coarse_lower_bound()

    def _coefficients(self, tp_i, cp_i, r, m, e) -> np.ndarray:
        """(per dense layer, per MoE layer, head) coefficients of each key given by axis indices."""
        axes, values = self.axes, self.values
        code = np.ravel_multi_index((tp_i, cp_i, r, m, e), (len(axes["tp"]), len(axes["cp"]), len(values["rc"]),
                                                            len(values["mb"]), len(values["ep"])))  # fmt: skip
        unique, inverse = np.unique(code, return_inverse=True)
        a, b, rr, mm, ee = np.unravel_index(unique, (len(axes["tp"]), len(axes["cp"]), len(values["rc"]),
                                                     len(values["mb"]), len(values["ep"])))  # fmt: skip
        keys = [(axes["tp"][i], axes["cp"][j], int(values["rc"][k]), int(values["mb"][x]), int(values["ep"][y]))
                for i, j, k, x, y in zip(a.tolist(), b.tolist(), rr.tolist(), mm.tolist(), ee.tolist(), strict=True)]  # fmt: skip
        return self.finder._key_coefficients(self.cluster, keys)[inverse.ravel()]

    def coarse_lower_bound(self) -> np.ndarray:
        """A lower bound of every shape's step (+inf where no plan of the shape is valid) from the keys without
        recompute: recompute only adds time (its own term, and two more TP and EP collectives per layer under full
        recompute), so a shape's step is at least its no-recompute key's. One key in four is computed here."""
        sv = self.shape_valid
        rcs = self.values["rc"].tolist()
        none = RECOMPUTES.index(Recompute.none)
        if none not in rcs:  # no recompute-free key to bound with: the exact bound everywhere
            idx = np.nonzero(sv)
            out = np.full(sv.shape, np.inf)
            out[idx] = self.exact_lower_bound(*idx)
            return out
        nt, nv, ne, nm, nr = sv.shape
        used = sv.any(axis=(1, 4))  # (nt, ne, nm)
        t, e, m = np.nonzero(used)
        coef = np.zeros((nt, ne, nm, 3))
        coef[t, e, m] = self._coefficients(self.tp_i[t], self.cp_i[t], np.full(t.size, rcs.index(none)), m, e)
        nd, nmoe, last = (self.ranks[..., i][:, :, None, None, :] for i in range(3))  # (nt, nv, 1, 1, W)
        c = coef[:, None, :, :, None, :]  # (nt, 1, ne, nm, 1, 3)
        slowest = np.max(nd * c[..., 0] + nmoe * c[..., 1] + last * c[..., 2], axis=-1)  # (nt, nv, ne, nm)
        lower = self.factor[:, :, None, :] * slowest
        return np.where(sv, lower[..., None], np.inf)

    def exact_lower_bound(self, t, v, e, m, r) -> np.ndarray:
        """A lower bound of the step of the shapes (t, v, e, m, r) from their own keys."""
        coef = self._coefficients(self.tp_i[t], self.cp_i[t], r, m, e)  # (n, 3)
        slowest = np.max(np.einsum("nwk,nk->nw", self.ranks[t, v], coef), axis=1)
        return self.factor[t, v, m] * slowest


class _Found:
    """The plans evaluated so far on one cluster size that fit (memory, host RAM and headroom), and the best
    tokens/s among them."""

    def __init__(self, finder: FastestPlanFinder, cluster, gpus, batch, triples, values, shape) -> None:
        self.finder, self.cluster, self.gpus, self.batch = finder, cluster, gpus, batch
        self.triples, self.values, self.shape = triples, values, shape
        self.parts: list[tuple[np.ndarray, dict, np.ndarray, np.ndarray, float]] = []
        spec, usable = finder.spec, cluster.accelerator.memory_usable_bytes
        self.limit = usable - max(
            spec.headroom_bytes, spec.headroom_fraction * usable
        )  # as the search's headroom
        self.best_tps = 0.0
        self.evaluated = 0

    def evaluate(
        self, plans: np.ndarray, lower: np.ndarray | None = None, floor: np.ndarray | None = None
    ) -> bool:
        """Evaluate the grid points ``plans`` (flat indices, any order). With bounds — ``lower`` of each plan's step,
        ``floor`` of its peak memory — the first pipeline stage is checked first, and False is returned when an
        evaluated plan beats a bound."""
        if not plans.size:
            return True
        finder, spec, limit = self.finder, self.finder.spec, self.limit
        t, *rest = np.unravel_index(plans, self.shape)
        g = {"tp": self.triples[t, 0], "cp": self.triples[t, 1], "pp": self.triples[t, 2]}
        g.update({k: self.values[k][i] for k, i in zip(REST, rest, strict=True)})
        self.evaluated += plans.size
        if lower is not None and floor is not None:
            # the first pipeline stage alone rules most plans out, at a fraction of the cost
            keep = np.flatnonzero(finder._first_stage_fits(self.cluster, self.gpus, self.batch, g, limit))
            if not keep.size:
                return True
            plans, lower, floor = plans[keep], lower[keep], floor[keep]
            g = {k: v[keep] for k, v in g.items()}
        s = _evaluate(finder.arch, self.cluster, spec, self.gpus, self.batch, g, time_only_fitting=True)
        timed = np.isfinite(s.step_s)
        if lower is not None and np.any(s.step_s[timed] < lower[timed] * (1 - SLACK)):
            return False
        if floor is not None and np.any((s.peak < floor * (1 - SLACK)) & s.host_ok):
            return False
        ok = np.flatnonzero((s.peak <= limit) & s.host_ok)
        if ok.size:
            tps = self.batch * spec.seq_len / s.step_s[ok]
            self.best_tps = max(self.best_tps, float(tps.max()))
            self.parts.append(
                (plans[ok], {k: v[ok] for k, v in g.items()}, s.step_s[ok], s.peak[ok], s.usable)
            )
        return True

    def best(self) -> Candidate | None:
        """The first of the fitting plans by the exhaustive search's ranking, ties in grid order."""
        if not self.parts:
            return None
        flat = np.concatenate([p[0] for p in self.parts])
        order = np.argsort(flat, kind="stable")
        g = {k: np.concatenate([p[1][k] for p in self.parts])[order] for k in self.parts[0][1]}
        step = np.concatenate([p[2] for p in self.parts])[order]
        peak = np.concatenate([p[3] for p in self.parts])[order]
        usable = self.parts[0][4]
        scored = _Scored(g=g, gpus=self.gpus, batch=self.batch, step_s=step, peak=peak, usable=usable,
                         host_ok=np.ones(len(step), dtype=bool))  # fmt: skip
        tps = self.batch * self.finder.spec.seq_len / step
        idx = np.arange(len(step))
        first = int(idx[_rank(tps, usable - peak, g, idx)][0])
        return _candidate(self.finder.arch, self.cluster, self.finder.spec, scored, first, self.finder.flops)
