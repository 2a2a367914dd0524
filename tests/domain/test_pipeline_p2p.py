"""Pipeline send/receive on the critical path, per software stack (evaluate.exposed_pp_p2p): Megatron-Core's
interleaved schedule overlaps its transfers (overlap_p2p_comm, on exactly when vpp > 1), Megatron's 1F1B and
PyTorch's pipelining pair each send with a receive, DeepSpeed's pipeline engine sends and receives one after
another. Hand-worked figures in each docstring."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from app.domain.catalog import Catalog
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.evaluate import exposed_pp_p2p, prefetch_share
from app.domain.estimator.plan import Framework, Plan, Sharding
from app.domain.estimator.xp import SCALAR, VECTOR
from app.domain.model.architecture import architecture_by_slug


def _c(overlap: bool = False, serial: bool = False, slowdown: float = 0.1) -> SimpleNamespace:
    return SimpleNamespace(pp_overlap_interleaved=overlap, pp_serial_p2p=serial, comm_slowdown=slowdown)


def _pq(pp, vpp, m) -> SimpleNamespace:
    return SimpleNamespace(pp=pp, vpp=vpp, micro_batches=m)


def test_blocking_paired_transfers() -> None:
    """pp 4, vpp 2, m 8, hop 1 ms: 2·(8·2 + 3) = 38 hops = 38 ms, whatever the micro-batch time."""
    assert exposed_pp_p2p(SCALAR, _pq(4, 2, 8), _c(), 1e-3, 30e-3) == pytest.approx(38e-3)


def test_overlapped_interleaved_schedule_hides_the_steady_state() -> None:
    """Overlap on, vpp 2, t_mb 30 ms: the window is 30/(3·2) = 5 ms > the 1 ms hop, so each of the 2·8·2 = 32
    steady-state hops costs only κ·1 ms = 0.1 ms; the 2·3 = 6 fill/drain hops are whole: 6 + 3.2 = 9.2 ms."""
    assert exposed_pp_p2p(SCALAR, _pq(4, 2, 8), _c(overlap=True), 1e-3, 30e-3) == pytest.approx(9.2e-3)


def test_a_hop_longer_than_the_window_shows_its_excess() -> None:
    """Hop 10 ms, window 5 ms: each steady hop costs (10 − 5) + 0.1·5 = 5.5 ms; 6·10 + 32·5.5 = 236 ms."""
    assert exposed_pp_p2p(SCALAR, _pq(4, 2, 8), _c(overlap=True), 10e-3, 30e-3) == pytest.approx(236e-3)


def test_overlap_needs_an_interleaved_schedule() -> None:
    """vpp 1 (Megatron-Bridge batches blocking send/receive pairs): 2·(8 + 3) = 22 ms for a 1 ms hop."""
    assert exposed_pp_p2p(SCALAR, _pq(4, 1, 8), _c(overlap=True), 1e-3, 30e-3) == pytest.approx(22e-3)


def test_serial_sends_and_receives_double_the_steady_state() -> None:
    """DeepSpeed's engine: 4 transfers per micro-batch on an inner stage: 4·8 + 2·3 = 38 ms (vpp 1)."""
    assert exposed_pp_p2p(SCALAR, _pq(4, 1, 8), _c(serial=True), 1e-3, 30e-3) == pytest.approx(38e-3)


def test_arrays_match_scalars() -> None:
    """The search's arrays give the scalar figure of every plan, stack flags mixed with the schedules."""
    pp, vpp, m = np.array([4, 4, 8, 2]), np.array([2, 1, 4, 1]), np.array([8, 8, 32, 4])
    hop, t_mb = np.array([1e-3, 1e-3, 20e-3, 5e-4]), np.array([30e-3, 30e-3, 12e-3, 9e-3])
    for flags in ({}, {"overlap": True}, {"serial": True}):
        got = exposed_pp_p2p(VECTOR, _pq(pp, vpp, m), _c(**flags), hop, t_mb)
        want = [
            exposed_pp_p2p(SCALAR, _pq(*row[:3]), _c(**flags), *row[3:])
            for row in zip(pp, vpp, m, hop, t_mb, strict=True)
        ]
        np.testing.assert_allclose(got, want)


def test_the_catalog_profiles_and_the_estimate(catalog: Catalog) -> None:
    """Megatron overlaps its interleaved transfers, DeepSpeed serialises its pipeline's, PyTorch pairs them. An
    interleaved Megatron plan (70B, tp 4 · pp 4 · vpp 5, 32 micro-batches) exposes less than half of the
    2·(32·5 + 3) hops its blocking schedule would (the hop time read off the same plan at vpp 1)."""
    stacks = {s.slug: s for s in catalog.efficiency.stacks}
    assert stacks["megatron"].pp_overlap_interleaved and not stacks["megatron"].pp_serial_p2p
    assert stacks["deepspeed"].pp_serial_p2p and not stacks["deepspeed"].pp_overlap_interleaved
    assert not stacks["fsdp2"].pp_overlap_interleaved and not stacks["fsdp2"].pp_serial_p2p
    arch = architecture_by_slug(catalog.architectures, "llama3.1-70b")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="h100-sxm", gpus=64)
    plan = Plan(
        tp=4,
        pp=4,
        vpp=5,
        dp=4,
        micro_batch=1,
        global_batch=128,
        seq_len=8192,
        framework=Framework.megatron,
        sharding=Sharding.megatron_distopt,
    )
    interleaved = estimate(arch, cluster, plan).step
    plain = estimate(arch, cluster, plan.model_copy(update={"vpp": 1})).step
    hop_s = plain.pp_p2p_s / (2 * (plain.micro_batches + plan.pp - 1))
    blocking_s = 2 * (interleaved.micro_batches * plan.vpp + plan.pp - 1) * hop_s
    assert 2 * (plan.pp - 1) * hop_s < interleaved.pp_p2p_s < 0.5 * blocking_s


def test_zero3_prefetch_bucket_limits_the_hidden_gathers(catalog: Catalog) -> None:
    """DeepSpeed ZeRO-3 fetches at most stage3_prefetch_bucket_size = 5·10⁷ parameter elements ahead of use: of
    a 530B layer's 5·10⁹ parameters 1 % can be in flight behind the previous module's compute, of a Llama 3.1 8B
    layer's 2.18·10⁸ about 23 %; FSDP prefetches the whole next unit (share 1)."""
    assert prefetch_share(SCALAR, 5e9, 5e7) == pytest.approx(0.01)
    assert prefetch_share(SCALAR, 2.18e8, 5e7) == pytest.approx(0.2294, abs=1e-4)
    assert prefetch_share(SCALAR, 1e6, 5e7) == 1.0 and prefetch_share(SCALAR, 5e9, 0.0) == 1.0
    np.testing.assert_allclose(prefetch_share(VECTOR, np.array([5e9, 1e6]), 5e7), [0.01, 1.0])
    stacks = {s.slug: s for s in catalog.efficiency.stacks}
    assert (
        stacks["deepspeed"].prefetch_bucket_params == 5e7 and stacks["fsdp2"].prefetch_bucket_params is None
    )
    arch = architecture_by_slug(catalog.architectures, "llama3.1-70b")
    cluster = build_cluster(catalog.hardware, catalog.efficiency, accelerator="h100-sxm", gpus=64)
    plan = Plan(dp=64, micro_batch=1, global_batch=64, seq_len=4096, framework=Framework.deepspeed,
                sharding=Sharding.zero3, recompute="full")  # fmt: skip
    bounded = estimate(arch, cluster, plan).step.fsdp_exposed_s
    whole = cluster.model_copy(
        update={
            "stacks": tuple(s.model_copy(update={"prefetch_bucket_params": None}) for s in cluster.stacks)
        }
    )
    assert bounded > estimate(arch, whole, plan).step.fsdp_exposed_s
