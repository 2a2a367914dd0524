"""The estimator's FSDP2 model-state bytes equal what FSDP2 allocates on CPU (gloo) at 1 and 2 ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from app.bench.measure import fsdp2_state_bytes  # noqa: E402
from app.domain.catalog import load_catalog  # noqa: E402
from app.domain.estimator.assemble import memory_by_stage  # noqa: E402
from app.domain.estimator.estimate import build_cluster  # noqa: E402
from app.domain.estimator.plan import Framework, Plan, Sharding  # noqa: E402

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")
TINY = CATALOG.architecture("llama3.1-8b").model_copy(
    update=dict(slug="tiny-llama", n_layers=2, hidden_size=96, n_heads=4, n_kv_heads=2, head_dim=24,
                ffn_hidden_size=200, vocab_size=131, max_context=64)
)  # fmt: skip


@pytest.mark.parametrize("world_size", [1, 2])
def test_params_grads_optimizer_bytes_equal_torch(world_size: int) -> None:
    measured = fsdp2_state_bytes(TINY.model_dump_json(), world_size, micro_batch=1, seq_len=16)
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=world_size)
    plan = Plan(dp=world_size, global_batch=world_size, seq_len=16, framework=Framework.fsdp2,
                sharding=Sharding.fsdp_full)  # fmt: skip
    stage = memory_by_stage(TINY, cluster, plan)[0]
    rank0 = measured[0].state
    assert stage.params_bytes == rank0.param_storage_bytes
    assert stage.grads_bytes == rank0.grad_storage_bytes
    assert stage.optimizer_bytes == rank0.optimizer_bytes
    for rank in measured[1:]:  # later ranks hold at most rank 0's shard
        assert rank.state.param_bytes <= rank0.param_bytes
