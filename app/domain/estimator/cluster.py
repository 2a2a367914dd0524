"""The hardware a plan runs on, resolved from the catalog: accelerator, node, fabrics, efficiencies.

Bandwidths are per GPU and one direction, in GB/s (decimal), as NCCL's bus bandwidth counts them.
"""

from __future__ import annotations

import math

from pydantic import Field

from app.domain.estimator.efficiency import (
    AcceleratorEfficiency,
    NetworkEfficiency,
    RuntimeMemory,
    ScaleTerms,
    StackProfile,
)
from app.domain.estimator.hardware import PRECISION_DTYPE, Accelerator, Fabric, Node
from app.domain.provenance import Frozen


class Cluster(Frozen):
    accelerator: Accelerator
    node: Node
    intra_fabric: Fabric
    scale_out_fabric: Fabric
    gpus: int = Field(ge=1)
    efficiency: AcceleratorEfficiency
    scale_up_network: NetworkEfficiency
    scale_out_network: NetworkEfficiency
    runtime: RuntimeMemory
    stacks: tuple[StackProfile, ...]
    scale: ScaleTerms
    oversubscription: float = Field(
        default=1.0, ge=1.0, le=64.0, description="fat-tree oversubscription ratio"
    )
    power_limit_w: float | None = Field(default=None, gt=0, description="GPU power cap below TDP, if any")

    @property
    def clock_scale(self) -> float:
        """Sustained tensor throughput under a power cap: f ∝ (P/TDP)^γ (γ = 1/3 if dynamic power ∝ f·V² ∝ f³
        with V ∝ f; ``scale.power_exponent`` holds the value fitted on the published power-capped runs)."""
        if self.power_limit_w is None or self.power_limit_w >= self.accelerator.tdp_w:
            return 1.0
        return (self.power_limit_w / self.accelerator.tdp_w) ** self.scale.power_exponent

    def stack(self, framework: str) -> StackProfile:
        """The software-stack profile of ``framework`` (megatron, fsdp2, deepspeed)."""
        for profile in self.stacks:
            if profile.slug == framework:
                return profile
        raise KeyError(f"no stack profile for framework {framework!r}")

    @property
    def gpus_per_node(self) -> int:
        return self.node.accelerators_per_node

    @property
    def nvlink_domain(self) -> int:
        """GPUs reachable over the scale-up fabric (8 on HGX, 72 on GB200 NVL72, 1 on PCIe cards)."""
        return self.node.nvlink_domain_size

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)

    @property
    def scale_up_gb_per_s(self) -> float:
        """Peak one-direction scale-up bandwidth per GPU (NVLink: half the bidirectional figure)."""
        if self.accelerator.nvlink_bandwidth_gb_per_s and self.nvlink_domain > 1:
            return self.accelerator.nvlink_bandwidth_gb_per_s / 2
        return self.intra_fabric.gbit_per_s_per_port / 8

    @property
    def scale_out_gb_per_s(self) -> float:
        """Peak one-direction scale-out bandwidth per GPU: the node's NIC bandwidth shared by its GPUs."""
        return self.node.scale_out_gbit_per_s / 8 / self.gpus_per_node

    @property
    def peak_flops(self) -> float:
        """Catalog dense BF16 peak: the MFU denominator (never derated)."""
        return self.accelerator.bf16_dense_tflops * 1e12

    def peak_flops_for(self, precision: str) -> float:
        """Peak the kernels of ``precision`` run against, derated by a power cap."""
        dtype = PRECISION_DTYPE[precision]
        return self.accelerator.peak_tflops(dtype) * 1e12 * self.clock_scale

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.accelerator.memory_bandwidth_gb_per_s * 1e9
