"""Issue 16, part 2 and 3: the cost model's audit fixes (each test fails on the code before the fix)."""

from __future__ import annotations

import pytest

from app.domain.catalog import load_catalog
from app.domain.cost import (
    CostInputError,
    CostOption,
    SelfBuildOverrides,
    TrainingJob,
    self_build_inputs,
    self_build_node_for,
    training_cost,
    usd_per_gpu_hour,
)
from app.settings import REPO_ROOT


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(REPO_ROOT / "data")


def job(**changes) -> TrainingJob:
    values = dict(model="llama3.1-70b", accelerator="h100-sxm", gpus=1024, parameters=70_000_000_000, tokens=1e12,
                  cloud_tokens_per_s=1.0e6, self_build_tokens_per_s=1.0e6, plan_checkpoint_bytes_per_param=14)  # fmt: skip
    values.update(changes)
    return TrainingJob(**values)


def option(result, name: str):
    return next(o for o in result.options if o.option.value == name)


# -- 1. A100-80GB self-build ----------------------------------------------------------------------------------


def test_a100_80gb_self_build_is_priced(catalog) -> None:
    assert self_build_node_for(catalog.hardware, catalog.cost, "a100-80gb") == "dgx-a100-80gb"
    result = training_cost(catalog.cost, catalog.hardware, job(accelerator="a100-80gb", gpus=64),
                           options=[CostOption.self_build])  # fmt: skip
    row = option(result, "self-build")
    assert row.available and row.instance == "dgx-a100-80gb"
    assert result.self_build is not None and result.self_build.servers_usd == 8 * 148_390
    server = next(a for a in result.assumptions if a.name == "dgx-a100-80gb server price")
    assert server.source == "EPOCH-HW" and server.as_of == "2023-09"
    assert usd_per_gpu_hour(catalog.cost, "dgx-a100-80gb", "self-build") is not None


def test_max_kw_per_node_override_is_read_before_raising(catalog) -> None:
    node = catalog.hardware.node("p4de.24xlarge")  # an instance: no system power figure
    with pytest.raises(CostInputError, match="max_kw_per_node") as err:
        self_build_inputs(catalog.cost, catalog.hardware, node, SelfBuildOverrides(server_usd=150_000))
    assert err.value.field == "overrides.self_build.max_kw_per_node"
    inputs, assumptions = self_build_inputs(
        catalog.cost, catalog.hardware, node, SelfBuildOverrides(server_usd=150_000, max_kw_per_node=6.5)
    )
    assert inputs.max_kw_per_node == 6.5
    assert any(a.name == "max power per node" and a.source == "override" for a in assumptions)
