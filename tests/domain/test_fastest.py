"""The fastest-plan search (branch and bound) returns exactly the plan the exhaustive search ranks first, on every
kind of model, framework and node; its bounds hold for every plan of a space; a broken bound is caught."""

from __future__ import annotations

import numpy as np
import pytest

from app.domain.estimator.calibration import apply_calibration
from app.domain.estimator.compute import model_flops_per_token
from app.domain.estimator.estimate import build_cluster
from app.domain.estimator.plan import Framework
from app.domain.model.counts import parameter_counts
from app.domain.search import fastest
from app.domain.search.engine import _evaluate, search
from app.domain.search.fastest import FastestPlanFinder, _Space
from app.domain.search.space import _axes
from app.domain.search.spec import SearchSpec, SearchTooLarge

# (model, node, framework, GPU counts): dense and MoE, MLA, the three stacks, 8-GPU and 72-GPU NVLink domains,
# sizes where memory is tight, where nothing fits and where communication dominates
CASES = [
    ("deepseek-v3", "p5.48xlarge", Framework.fsdp2, (32, 64, 256)),
    ("mixtral-8x7b", "dgx-b200", Framework.megatron, (8, 64, 512)),
    ("gpt3-175b", "p4de.24xlarge", Framework.deepspeed, (64, 512)),
    ("llama3.1-70b", "gb200-nvl72", Framework.fsdp2, (72, 144)),
    ("llama3.1-8b", "p5.48xlarge", Framework.megatron, (8, 4096)),
]


def _setup(catalog, model: str, node: str, framework: Framework, **spec_fields):
    arch = catalog.architecture(model)
    n = catalog.hardware.node(node)
    base = build_cluster(catalog.hardware, catalog.efficiency, accelerator=n.accelerator,
                         gpus=n.accelerators_per_node, node=node)  # fmt: skip
    base = apply_calibration(base, catalog.calibrations)[0]
    spec = SearchSpec(gpus=(1,), global_batches=(2048,), seq_len=8192, framework=framework, top_k=1,
                      max_plans=10**9, **spec_fields)  # fmt: skip
    flops = model_flops_per_token(arch, 8192, parameter_counts(arch).matmul_weights_active).total
    return arch, base, spec, flops


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return (a.plan, a.gpus, a.tokens_per_s, a.step_time_s, a.peak_memory_bytes, a.margin_bytes, a.mfu) == (
        b.plan, b.gpus, b.tokens_per_s, b.step_time_s, b.peak_memory_bytes, b.margin_bytes, b.mfu
    )  # fmt: skip


@pytest.mark.parametrize(("model", "node", "framework", "sizes"), CASES, ids=[c[0] for c in CASES])
def test_the_fastest_plan_is_the_exhaustive_searchs_first(catalog, model, node, framework, sizes) -> None:
    arch, base, spec, flops = _setup(catalog, model, node, framework)
    finder = FastestPlanFinder(arch, spec, flops)
    for gpus in sizes:
        cluster = base.model_copy(update={"gpus": gpus})
        full = search(arch, {gpus: cluster}, spec.model_copy(update={"gpus": (gpus,)}), flops)
        expected = full.best_by_gpus[0] if full.best_by_gpus else None
        found = finder.find(cluster, gpus, 2048)
        assert _same(found.candidate, expected), (model, gpus)
        assert not found.bound_broken
        assert found.valid_plans == full.evaluated_plans and found.grid_points == full.considered_plans
        if found.valid_plans > 20_000:  # the bounds did their work (a small space is one or two chunks)
            assert found.evaluated_plans < found.valid_plans / 4
        reference = finder.find(cluster, gpus, 2048, exhaustive=True)
        assert _same(reference.candidate, expected) and reference.evaluated_plans == full.evaluated_plans


def test_headroom_is_the_searchs(catalog) -> None:
    arch, base, spec, flops = _setup(catalog, "llama3.1-70b", "p5.48xlarge", Framework.fsdp2,
                                     headroom_bytes=20 * 2**30)  # fmt: skip
    cluster = base.model_copy(update={"gpus": 64})
    full = search(arch, {64: cluster}, spec.model_copy(update={"gpus": (64,)}), flops)
    found = FastestPlanFinder(arch, spec, flops).find(cluster, 64, 2048)
    assert _same(found.candidate, full.best_by_gpus[0])
    assert found.candidate.margin_bytes >= 20 * 2**30


@pytest.mark.parametrize(("model", "node", "framework", "gpus"), [
    ("deepseek-v3", "p5.48xlarge", Framework.fsdp2, 128),
    ("mixtral-8x7b", "gb200-nvl72", Framework.megatron, 144),
    ("gpt3-175b", "dgx-a100-80gb", Framework.deepspeed, 256),
])  # fmt: skip
def test_every_plan_respects_its_bounds(catalog, model, node, framework, gpus) -> None:
    """The step-time bounds (coarse: keys without recompute; exact: the plan's own key) and the memory floor hold
    for every valid plan of the space, each evaluated exhaustively."""
    arch, base, spec, flops = _setup(catalog, model, node, framework)
    finder = FastestPlanFinder(arch, spec, flops)
    cluster = base.model_copy(update={"gpus": gpus})
    axes = _axes(arch, cluster, spec, gpus)
    triples = np.array([(t, c, p) for t in axes["tp"] for c in axes["cp"] for p in axes["pp"]
                        if gpus % (t * c * p) == 0])  # fmt: skip
    values = {k: np.asarray(axes[k]) for k in fastest.REST}
    shape = (len(triples), *(len(values[k]) for k in fastest.REST))
    valid = finder._valid(cluster, gpus, 2048, triples, values, shape)
    floor = finder._state_floor(cluster, gpus, 2048, triples, values, valid)
    space = _Space(finder, cluster, gpus, 2048, axes, triples, values, valid)
    coarse = space.coarse_lower_bound()
    t, v, e, s, o, m, r = np.nonzero(valid)
    exact = space.exact_lower_bound(t, v, e, m, r)
    g = {"tp": triples[t, 0], "cp": triples[t, 1], "pp": triples[t, 2]}
    g.update({k: values[k][i] for k, i in zip(fastest.REST, (v, e, s, o, m, r), strict=True)})
    scored = _evaluate(arch, cluster, spec, gpus, 2048, g)  # every plan timed, fitting or not
    slack = 1 - 1e-12
    assert np.all(scored.step_s >= exact * slack)
    assert np.all(scored.step_s >= coarse[t, v, e, m, r] * slack)
    assert np.all(exact >= coarse[t, v, e, m, r] * slack)  # recompute only adds time
    on_host = scored.host_ok
    assert np.all(scored.peak[on_host] >= floor[t, v, e, s, o, 0, 0][on_host] * slack)
    # +inf only where the plan's offloaded state cannot fit its host (the first rank's: a later stage holding more
    # experts may fail where the first fits, which the evaluation then finds)
    assert not np.any(np.isinf(floor[t, v, e, s, o, 0, 0][on_host]))
    tight = scored.step_s <= exact * 1.05  # the bound is tight for the plans communication does not slow
    assert tight.mean() > 0.05


def test_a_bound_a_plan_beats_is_caught_and_everything_is_evaluated(catalog, monkeypatch) -> None:
    arch, base, spec, flops = _setup(catalog, "mixtral-8x7b", "dgx-b200", Framework.megatron)
    cluster = base.model_copy(update={"gpus": 64})
    full = search(arch, {64: cluster}, spec.model_copy(update={"gpus": (64,)}), flops)
    real = _Space.exact_lower_bound
    monkeypatch.setattr(_Space, "exact_lower_bound", lambda self, *a: 3.0 * real(self, *a))
    found = FastestPlanFinder(arch, spec, flops).find(cluster, 64, 2048)
    assert found.bound_broken and found.evaluated_plans == found.valid_plans
    assert _same(found.candidate, full.best_by_gpus[0])


def test_the_plan_limit_counts_plans_evaluated_not_the_grid(catalog, monkeypatch) -> None:
    """spec.max_plans bounds the plans evaluated: a limit far below the grid but above what the bounds leave finds
    the same plan; one below that raises SearchTooLarge; so does a broken bound whose fallback (every valid plan)
    would pass the limit."""
    arch, base, spec, flops = _setup(catalog, "mixtral-8x7b", "dgx-b200", Framework.megatron)
    cluster = base.model_copy(update={"gpus": 64})
    free = FastestPlanFinder(arch, spec, flops).find(cluster, 64, 2048)
    assert free.evaluated_plans < free.valid_plans < free.grid_points
    capped = spec.model_copy(update={"max_plans": free.evaluated_plans})
    assert _same(FastestPlanFinder(arch, capped, flops).find(cluster, 64, 2048).candidate, free.candidate)
    tight = spec.model_copy(update={"max_plans": free.evaluated_plans - 1})
    with pytest.raises(SearchTooLarge, match="CAPPLAN_SEARCH_MAX_PLANS"):
        FastestPlanFinder(arch, tight, flops).find(cluster, 64, 2048)
    real = _Space.exact_lower_bound
    monkeypatch.setattr(_Space, "exact_lower_bound", lambda self, *a: 3.0 * real(self, *a))
    below_valid = spec.model_copy(update={"max_plans": free.valid_plans - 1})
    with pytest.raises(SearchTooLarge, match="beat its bound"):
        FastestPlanFinder(arch, below_valid, flops).find(cluster, 64, 2048)
