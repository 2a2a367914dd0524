"""FSDP2 model-state bytes per rank: real ``fully_shard`` on CPU (gloo, spawned ranks) vs the pure formula.

``app.domain.sharding`` predicts each rank's fp32 parameter shard, fp32 gradient shard and AdamW state
(``exp_avg`` + ``exp_avg_sq`` fp32, plus one 0-d fp32 ``step`` per parameter tensor) from the parameter
shapes alone; here the numbers must be equal, not close, on every rank at world size 1 and 2. The first
tests are pure (no torch): ``torch.chunk`` semantics by hand.
"""

from __future__ import annotations

import pytest

from app.domain.estimator.sharding import (
    fsdp_padded_shard_numel,
    fsdp_shard_numel,
    fsdp_shard_rows,
    sharded_state_bytes,
)
from app.domain.model.architecture import Architecture
from app.domain.model.torch_shapes import parameter_shapes

# -- pure ---------------------------------------------------------------------------------------------------


def test_shard_rows_follow_torch_chunk():
    """chunk = ceil(dim0/ws); later ranks get fewer rows or none: 5 rows on 4 ranks → 2, 2, 1, 0."""
    assert [fsdp_shard_rows(5, 4, r) for r in range(4)] == [2, 2, 1, 0]
    assert [fsdp_shard_rows(101, 2, r) for r in range(2)] == [51, 50]
    assert [fsdp_shard_rows(1, 2, r) for r in range(2)] == [1, 0]
    assert [fsdp_shard_rows(8, 8, r) for r in range(8)] == [1] * 8
    for dim0 in range(0, 40):
        for ws in range(1, 10):
            rows = [fsdp_shard_rows(dim0, ws, r) for r in range(ws)]
            assert sum(rows) == dim0 and rows == sorted(rows, reverse=True)
    assert fsdp_shard_numel((101, 64), 2, 1) == 50 * 64
    assert fsdp_padded_shard_numel((101, 64), 2) == 51 * 64
    with pytest.raises(ValueError):
        fsdp_shard_rows(4, 2, 2)


def test_sharded_state_bytes_by_hand():
    """Two tensors (101, 64) and (64,) on 2 ranks: rank 1 holds 50·64 + 32 = 3232 elements → 12,928 B
    params, 12,928 B grads, 8·3232 + 2·4 = 25,864 B AdamW; padded allocation 51·64 + 32 = 3296 elements."""
    out = sharded_state_bytes([(101, 64), (64,)], 2, 1)
    assert out == {
        "param_numel": 3232,
        "param_bytes": 12_928,
        "param_padded_bytes": 13_184,
        "grad_padded_bytes": 13_184,
        "grad_bytes": 12_928,
        "optimizer_bytes": 25_864,
        "optimizer_step_bytes": 8,
        "total": 51_720,
    }


# -- real FSDP2 on CPU --------------------------------------------------------------------------------------


def tiny(**overrides) -> Architecture:
    fields = dict(
        slug="tiny-fsdp",
        name="tiny fsdp",
        source="test",
        as_of="2025",
        n_layers=2,
        hidden_size=64,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        ffn_hidden_size=172,
        activation="swiglu",
        vocab_size=101,  # odd: the embedding and output head shard unevenly
        tied_embeddings=False,
        position="rotary",
        max_context=64,
        norm="rmsnorm",
    )
    fields.update(overrides)
    return Architecture(**fields)


DENSE = tiny()
# shared_expert_gate is (1, h): rank 1 of 2 holds zero rows of it
MOE = tiny(
    slug="tiny-fsdp-moe",
    n_experts=4,
    experts_top_k=2,
    expert_ffn_hidden_size=32,
    n_shared_experts=1,
    shared_expert_ffn_hidden_size=48,
    shared_expert_gate=True,
    router_bias=True,
)

FIELDS = ("param_numel", "param_bytes", "grad_bytes", "optimizer_bytes", "optimizer_step_bytes")


@pytest.mark.torch
@pytest.mark.parametrize(
    "arch, world_size", [(DENSE, 1), (DENSE, 2), (MOE, 2)], ids=["dense-ws1", "dense-ws2", "moe-ws2"]
)
def test_fsdp2_per_rank_state_bytes_equal_the_formula(arch, world_size):
    pytest.importorskip("torch")
    from app.bench.measure import fsdp2_state_bytes

    results = fsdp2_state_bytes(arch.model_dump_json(), world_size, micro_batch=2, seq_len=16)
    assert [r.rank for r in results] == list(range(world_size))
    shapes = [p.shape for p in parameter_shapes(arch)]
    for r in results:
        assert list(r.param_shapes.items()) == [(p.name, p.shape) for p in parameter_shapes(arch)]
        want = sharded_state_bytes(shapes, world_size, r.rank)
        got = r.state.as_dict()
        table = "\n".join(f"  {k:22} measured {got[k]:>10,} formula {want[k]:>10,}" for k in FIELDS)
        msg = f"{arch.slug} ws={world_size} rank {r.rank}:\n{table}"
        assert {k: got[k] for k in FIELDS} == {k: want[k] for k in FIELDS}, msg
        # FSDP2 allocates every shard (and its gradient) padded to ceil(dim0/ws) rows
        assert got["param_storage_bytes"] == want["param_padded_bytes"], msg
        assert got["grad_storage_bytes"] == want["grad_padded_bytes"], msg
        assert r.state.optimizer_step_bytes == 4 * len(shapes)  # one fp32 0-d step per parameter tensor
    assert sum(r.state.param_numel for r in results) == sum(
        fsdp_shard_numel(s, 1, 0) for s in shapes
    )  # the shards cover the model exactly once
    if arch is MOE:
        assert any(
            0 in shape
            for name, shape in results[1].local_param_shapes.items()
            if "shared_expert_gate" in name
        )
    losses = {round(r.loss, 5) for r in results}
    assert len(losses) == 1, losses  # every rank saw the same batch and the same model


@pytest.mark.parametrize("gathered", [2, 1])
def test_a_teardown_abort_after_the_gather_keeps_the_measurement_and_an_earlier_one_fails(
    monkeypatch, gathered
):
    """A rank aborting in gloo's teardown after every rank's figures reached rank 0 (2 of 2) leaves a complete
    measurement, which is returned; one aborting before (1 of 2 stored) is the failure it is. The spawn is stubbed:
    it stores ``gathered`` results, then raises what torch raises for a rank killed by SIGABRT."""
    pytest.importorskip("torch")
    import torch.multiprocessing as mp

    from app.bench import measure

    def fake_start(fn, args, nprocs, join, start_method):  # noqa: ARG001 - torch's signature
        out = args[-1]
        for rank in range(gathered):
            out[rank] = f"rank {rank}"
        raise mp.ProcessExitedException("process 1 terminated with signal SIGABRT", error_index=1,
                                        error_pid=0, exit_code=-6, signal_name="SIGABRT")  # fmt: skip

    monkeypatch.setattr(measure.mp, "start_processes", fake_start)
    if gathered == 2:
        assert measure.fsdp2_state_bytes("{}", 2) == ["rank 0", "rank 1"]
    else:
        with pytest.raises(mp.ProcessExitedException):
            measure.fsdp2_state_bytes("{}", 2)
