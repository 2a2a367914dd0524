"""The hardware catalog: accelerators, nodes (servers and cloud instances) and fabrics.

Fabrics cover links (NVLink, PCIe, InfiniBand, EFA, RoCE), switches and topologies (fat tree,
dragonfly+). Figures come from ``data/accelerators.toml``, ``data/nodes.toml`` and ``data/fabrics.toml``,
each with its source, date and confidence (see :mod:`app.domain.provenance`).

Units live in the names. ``_gb`` is decimal (10^9 bytes) as marketed, ``_gib`` binary, ``_bytes`` exact.
``_gbit_per_s`` is 10^9 bit/s in one direction and ``_gb_per_s`` is 10^9 byte/s.

Modelling choices:

- A node is whatever you buy or rent as one unit. ``gb200-nvl72`` is a rack: ``accelerators_per_node=72``.
  Every node also carries ``nvlink_domain_size``, the number of GPUs that reach each other over
  NVLink/NVSwitch at full bandwidth: 8 on HGX/DGX boards, 72 on NVL72, 1 on PCIe-only instances. The
  network model reads the domain size, not the node size, to decide where NVLink ends.
- ``memory_usable_bytes`` is what software sees (``torch.cuda.get_device_properties().total_memory``,
  the same figure as nvidia-smi's ``memory.total`` on most cards). Memory-fit maths must use it, never
  ``memory_marketed_gb``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, model_validator

from app.domain.provenance import CatalogEntry, Frozen

__all__ = [
    "GIB",
    "DTYPES",
    "PRECISION_DTYPE",
    "precision_problem",
    "fp8_recipe_problem",
    "Accelerator",
    "Node",
    "Fabric",
    "Switch",
    "Topology",
    "FatTreeSize",
    "HardwareCatalog",
    "UnknownHardwareError",
    "fat_tree_max_endpoints",
    "leaf_port_split",
    "fat_tree_switch_counts",
    "dragonfly_plus_max_endpoints",
]

GIB = 2**30
DTYPES = ("bf16", "fp16", "fp8", "fp4", "tf32")
# the tensor-core dtype a plan precision's GEMMs run in (fp32 training runs its GEMMs in TF32)
PRECISION_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "nvfp4": "fp4", "fp32": "tf32"}
_DTYPE_LABEL = {"fp8": "FP8", "fp4": "FP4 (NVFP4)"}

PositiveFloat = Annotated[float, Field(strict=True, gt=0)]
PositiveInt = Annotated[int, Field(strict=True, gt=0)]
Slug = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$", max_length=64)]

SCALE_UP_KINDS = ("nvlink", "pcie")
SCALE_OUT_KINDS = ("infiniband", "efa", "roce")


# --------------------------------------------------------------------------------------------------
# Accelerators


class Accelerator(CatalogEntry):
    """One GPU. TFLOP/s are dense (no 2:4 sparsity) tensor-core peaks per GPU.

    ``nvlink_bandwidth_gb_per_s`` is the bidirectional total per GPU, the figure NVIDIA quotes
    (900 GB/s on H100 SXM is 450 GB/s each way). On PCIe cards with an NVLink bridge (H100 PCIe/NVL,
    H200 NVL) it is the bridge bandwidth to the bridged partner(s) only. ``None`` with
    ``nvlink_generation=None`` means no NVLink at all.
    ``pcie_generation`` is the host link; ``None`` where the GPU has none (GB200 reaches Grace over
    NVLink-C2C).
    """

    arch: str = Field(min_length=1)
    form_factor: str = Field(min_length=1)
    bf16_dense_tflops: PositiveFloat
    fp16_dense_tflops: PositiveFloat
    fp8_dense_tflops: PositiveFloat | None = None
    fp4_dense_tflops: PositiveFloat | None = Field(
        default=None,
        description="dense FP4 (NVFP4, block-scaled E2M1) tensor-core peak; None without FP4 tensor cores",
    )
    tf32_dense_tflops: PositiveFloat
    memory_marketed_gb: PositiveFloat
    memory_usable_bytes: PositiveInt
    memory_bandwidth_gb_per_s: PositiveFloat
    nvlink_generation: PositiveInt | None = None
    nvlink_bandwidth_gb_per_s: PositiveFloat | None = None
    pcie_generation: PositiveInt | None = None
    tdp_w: PositiveFloat
    sm_count: PositiveInt | None = Field(
        default=None, description="streaming multiprocessors: a GEMM's tiles run in waves of this many"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Accelerator:
        problem = accelerator_problem(self)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def usable_gib(self) -> float:
        """Memory software can allocate, in GiB (e.g. 79.65 on H100 SXM 80 GB)."""
        return self.memory_usable_bytes / GIB

    @property
    def has_nvlink(self) -> bool:
        return self.nvlink_generation is not None

    def peak_tflops(self, dtype: str) -> float:
        """Dense peak TFLOP/s for ``dtype`` (bf16, fp16, fp8, fp4, tf32); ValueError when unsupported."""
        key = dtype.strip().lower()
        if key not in DTYPES:
            raise ValueError(
                f"unknown dtype {dtype!r} for accelerator {self.slug!r}; expected one of {', '.join(DTYPES)}"
            )
        value = getattr(self, f"{key}_dense_tflops")
        if value is None:
            raise ValueError(
                f"accelerator {self.slug!r} ({self.name}) has no dense {key} peak: not supported"
            )
        return value


def precision_problem(acc: Accelerator, precision: str) -> str | None:
    """Why ``acc`` cannot run a plan's ``precision`` (its GEMMs need tensor cores of that dtype the catalog gives
    no peak for: FP8 before Hopper and Ada, FP4 before Blackwell), or None."""
    dtype = PRECISION_DTYPE[precision]
    if getattr(acc, f"{dtype}_dense_tflops") is not None:
        return None
    return f"the {acc.name} has no {_DTYPE_LABEL.get(dtype, dtype)} tensor cores (no dense {dtype} peak in the catalog)"


# The FP8 recipes that need more than FP8 tensor cores, and the GPU generations that run them (source
# TE-FP8-RECIPES: block scaling on Hopper and Blackwell, MXFP8 on data-centre Blackwell only)
FP8_RECIPE_ARCHS = {
    "mxfp8": ("Blackwell",),
    "blockwise": ("Hopper", "Blackwell"),
}


def fp8_recipe_problem(acc: Accelerator, precision: str, recipe: str) -> str | None:
    """Why ``acc`` cannot run an FP8 plan's ``recipe`` (MXFP8 needs Blackwell's block-scaled tensor cores,
    Transformer Engine's 1x128 / 128x128 block scaling Hopper or later), or None. Per-tensor recipes (delayed,
    tensorwise, rowwise) run wherever FP8 does (:func:`precision_problem`)."""
    archs = FP8_RECIPE_ARCHS.get(recipe)
    if precision != "fp8" or archs is None or acc.arch.startswith(archs):
        return None
    return (
        f"the {acc.name} ({acc.arch}) cannot run the {recipe} FP8 recipe: it needs a {' or '.join(archs)} GPU"
    )


def accelerator_problem(acc: Accelerator) -> str | None:
    """The first internal inconsistency of an accelerator's figures, or None."""
    if acc.fp8_dense_tflops is not None and acc.fp8_dense_tflops < acc.bf16_dense_tflops:
        return (
            f"fp8_dense_tflops ({acc.fp8_dense_tflops}) is below bf16_dense_tflops ({acc.bf16_dense_tflops}); "
            "fp8 is never slower than bf16 - is one of them a sparse figure?"
        )
    if acc.fp4_dense_tflops is not None and (
        acc.fp8_dense_tflops is None or acc.fp4_dense_tflops < acc.fp8_dense_tflops
    ):
        return (
            f"fp4_dense_tflops ({acc.fp4_dense_tflops}) without an fp8 peak at or below it ({acc.fp8_dense_tflops}); "
            "is one of them a sparse figure?"
        )
    if acc.tf32_dense_tflops > acc.bf16_dense_tflops:
        return (
            f"tf32_dense_tflops ({acc.tf32_dense_tflops}) exceeds bf16_dense_tflops ({acc.bf16_dense_tflops})"
        )
    # HBM capacities are binary, so the most generous reading of a marketed "GB" is GiB.
    if acc.memory_usable_bytes > acc.memory_marketed_gb * GIB:
        return (
            f"memory_usable_bytes ({acc.memory_usable_bytes}) exceeds memory_marketed_gb "
            f"({acc.memory_marketed_gb}) even read as GiB"
        )
    if (acc.nvlink_generation is None) != (acc.nvlink_bandwidth_gb_per_s is None):
        return "nvlink_generation and nvlink_bandwidth_gb_per_s must both be set or both be absent"
    return None


# --------------------------------------------------------------------------------------------------
# Fabrics: links, switches, topologies


class Fabric(CatalogEntry):
    """A link technology.

    ``gbit_per_s_per_port`` is one direction of one port or link: an InfiniBand/Ethernet port, one EFA
    NIC, one NVLink link, or one PCIe x16 slot. ``links_per_gpu`` (NVLink links, or 1 x16 slot for PCIe)
    turns it into a per-GPU figure for scale-up fabrics; scale-out fabrics leave it ``None`` because the
    NIC count is a property of the node.
    """

    kind: Literal["nvlink", "pcie", "infiniband", "efa", "roce"]
    generation: PositiveInt | None = None
    gbit_per_s_per_port: PositiveFloat
    links_per_gpu: PositiveInt | None = None
    latency_us: PositiveFloat | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Fabric:
        if self.is_scale_up and self.generation is None:
            raise ValueError(f"a {self.kind} fabric needs its generation")
        if self.is_scale_up and self.links_per_gpu is None:
            raise ValueError(f"a {self.kind} fabric needs links_per_gpu")
        if not self.is_scale_up and self.links_per_gpu is not None:
            raise ValueError(
                f"a {self.kind} fabric is scale-out: links_per_gpu belongs to the node (scale_out_nics)"
            )
        return self

    @property
    def is_scale_up(self) -> bool:
        return self.kind in SCALE_UP_KINDS

    @property
    def gbit_per_s_per_gpu(self) -> float | None:
        """One direction, per GPU, for scale-up fabrics (NVLink4: 18 × 200 = 3,600 Gbit/s)."""
        if self.links_per_gpu is None:
            return None
        return self.gbit_per_s_per_port * self.links_per_gpu

    @property
    def gb_per_s_per_gpu_bidirectional(self) -> float | None:
        """Both directions, per GPU, in GB/s: the way NVIDIA quotes NVLink (NVLink4: 900)."""
        per_gpu = self.gbit_per_s_per_gpu
        return None if per_gpu is None else per_gpu * 2 / 8


class Switch(CatalogEntry):
    """A switch: ``radix`` ports at ``port_gbit_per_s`` on the link fabric ``fabric``."""

    fabric: Slug
    model: str = Field(min_length=1)
    radix: PositiveInt
    port_gbit_per_s: PositiveFloat
    switching_tbit_per_s: PositiveFloat | None = None

    def max_endpoints(self, tiers: int, oversubscription: float = 1.0) -> int:
        return fat_tree_max_endpoints(self.radix, tiers, oversubscription)


class Topology(CatalogEntry):
    """A network topology family and its default parameters.

    ``tiers`` lists the switch tiers it supports (fat tree: 1-3; dragonfly+: the 2-level leaf/spine
    inside each group). ``default_oversubscription`` is leaf down-ports : up-ports (1.0 = non-blocking).
    """

    kind: Literal["fat-tree", "dragonfly-plus"]
    tiers: tuple[PositiveInt, ...] = Field(min_length=1)
    default_oversubscription: float = Field(default=1.0, strict=True, ge=1.0)
    rail_optimized: bool = False
    scalable_unit_nodes: PositiveInt | None = None

    def max_endpoints(
        self, radix: int, tiers: int | None = None, oversubscription: float | None = None
    ) -> int:
        """Largest endpoint count this topology reaches with switches of ``radix`` ports."""
        if self.kind == "dragonfly-plus":
            return dragonfly_plus_max_endpoints(radix)
        tiers = max(self.tiers) if tiers is None else tiers
        if tiers not in self.tiers:
            raise ValueError(f"topology {self.slug!r} supports tiers {self.tiers}, not {tiers}")
        ratio = self.default_oversubscription if oversubscription is None else oversubscription
        return fat_tree_max_endpoints(radix, tiers, ratio)


# --------------------------------------------------------------------------------------------------
# Fat-tree sizing (pure functions)


class FatTreeSize(Frozen):
    """Switches, cables and transceivers of a rail-optimised fat tree (reference ``fat_tree_model``).

    Cables are counted per tier boundary. Every leaf is cabled with all its up-ports, even a partly
    filled one, as NVIDIA's SuperPOD H100 reference architecture does (252 endpoints -> 256 leaf-spine
    cables). Transceivers are a rough count: twin-port modules on the switch side (two switch ports
    each, as on Quantum-2 NDR), one module per endpoint port on the node side; in-rack copper links
    need none and DGX twin-port cages halve the node side.
    """

    endpoints: int
    radix: int
    oversubscription: float
    tiers: int
    leaf_down_ports: int
    leaf_up_ports: int
    leaf_switches: int
    spine_switches: int
    core_switches: int
    cables_endpoint_leaf: int
    cables_leaf_spine: int
    cables_spine_core: int
    switch_ports_used: int
    transceivers_switch_side: int
    transceivers_endpoint_side: int

    @property
    def switches(self) -> int:
        return self.leaf_switches + self.spine_switches + self.core_switches

    @property
    def cables(self) -> int:
        return self.cables_endpoint_leaf + self.cables_leaf_spine + self.cables_spine_core

    @property
    def transceivers(self) -> int:
        return self.transceivers_switch_side + self.transceivers_endpoint_side

    @property
    def realised_oversubscription(self) -> float:
        """Leaf down : up ports actually used (integer port split; never worse than requested)."""
        return self.leaf_down_ports / self.leaf_up_ports if self.leaf_up_ports else 1.0


def _check_radix(radix: int, oversubscription: float) -> None:
    if radix < 2 or radix % 2:
        raise ValueError(f"switch radix must be an even number >= 2, got {radix}")
    if not oversubscription >= 1.0:
        raise ValueError(f"oversubscription must be >= 1.0 (down:up ports), got {oversubscription}")


def leaf_port_split(radix: int, oversubscription: float = 1.0) -> tuple[int, int]:
    """(down, up) ports of a leaf for a down:up ratio; rounds so the real ratio never exceeds it."""
    _check_radix(radix, oversubscription)
    down = math.floor(radix * oversubscription / (1.0 + oversubscription) + 1e-9)
    down = min(down, radix - 1)
    return down, radix - down


def fat_tree_max_endpoints(radix: int, tiers: int, oversubscription: float = 1.0) -> int:
    """Endpoints a fat tree of ``tiers`` tiers reaches: k, k·k/2, k³/4 when non-blocking.

    Oversubscription applies at the leaf; tiers above it are non-blocking. Two tiers: at most ``radix``
    leaves (each spine port meets a different leaf). Three tiers: leaf up-links at most k³/4.
    """
    down, up = leaf_port_split(radix, oversubscription)
    if tiers == 1:
        return radix
    if tiers == 2:
        return radix * down
    if tiers == 3:
        return (radix**3 // 4 // up) * down
    raise ValueError(f"tiers must be 1, 2 or 3, got {tiers}")


def fat_tree_switch_counts(endpoints: int, radix: int, oversubscription: float = 1.0) -> FatTreeSize:
    """Size the smallest fat tree (1-3 tiers) for ``endpoints`` NIC ports on switches of ``radix`` ports.

    Non-blocking (1.0) reproduces the DGX SuperPOD counts: 1,024 endpoints at radix 64 give 32 leaves
    and 16 spines; 4,096 give 128 leaves, 128 spines and 64 cores.
    """
    if endpoints < 1:
        raise ValueError(f"endpoints must be >= 1, got {endpoints}")
    down, up = leaf_port_split(radix, oversubscription)
    tiers = _tiers_needed(endpoints, radix, oversubscription)
    if tiers == 1:
        return _size(endpoints, radix, oversubscription, tiers, (radix, 0), (1, 0, 0), (endpoints, 0, 0))
    leaves = math.ceil(endpoints / down)
    uplinks = leaves * up
    if tiers == 2:
        switches = (leaves, math.ceil(uplinks / radix), 0)
        return _size(endpoints, radix, oversubscription, tiers, (down, up), switches, (endpoints, uplinks, 0))
    half = radix // 2
    spines = math.ceil(uplinks / half)
    cores = math.ceil(uplinks / radix)
    cabling = (endpoints, uplinks, spines * half)
    return _size(endpoints, radix, oversubscription, tiers, (down, up), (leaves, spines, cores), cabling)


def _tiers_needed(endpoints: int, radix: int, oversubscription: float) -> int:
    for tiers in (1, 2, 3):
        if endpoints <= fat_tree_max_endpoints(radix, tiers, oversubscription):
            return tiers
    limit = fat_tree_max_endpoints(radix, 3, oversubscription)
    raise ValueError(f"{endpoints} endpoints need more than 3 tiers at radix {radix} (3-tier limit {limit})")


def _size(
    endpoints: int,
    radix: int,
    oversubscription: float,
    tiers: int,
    ports: tuple[int, int],
    switches: tuple[int, int, int],
    cabling: tuple[int, int, int],
) -> FatTreeSize:
    ports_used = cabling[0] + 2 * cabling[1] + 2 * cabling[2]
    return FatTreeSize(
        endpoints=endpoints,
        radix=radix,
        oversubscription=oversubscription,
        tiers=tiers,
        leaf_down_ports=ports[0],
        leaf_up_ports=ports[1],
        leaf_switches=switches[0],
        spine_switches=switches[1],
        core_switches=switches[2],
        cables_endpoint_leaf=cabling[0],
        cables_leaf_spine=cabling[1],
        cables_spine_core=cabling[2],
        switch_ports_used=ports_used,
        transceivers_switch_side=math.ceil(ports_used / 2),
        transceivers_endpoint_side=endpoints,
    )


def dragonfly_plus_max_endpoints(radix: int) -> int:
    """Dragonfly+ endpoints with groups of (k/2 leaves × k/2 spines): (k/2)² × ((k/2)² + 1).

    Each group hosts (k/2)² endpoints and has (k/2)² global links, one to every other group.
    k = 64 gives 1,049,600 (NVIDIA: "over 1M nodes at 400G within 3 hops").
    """
    _check_radix(radix, 1.0)
    per_group = (radix // 2) ** 2
    return per_group * (per_group + 1)


# --------------------------------------------------------------------------------------------------
# Nodes


class Node(CatalogEntry):
    """A server or cloud instance: the unit bought or rented.

    ``vcpus`` counts hardware threads on servers. ``host_memory_gib`` is host RAM (for offload
    planning), ``local_nvme_tb`` decimal TB of local NVMe, ``max_power_kw`` the rated maximum draw
    (``None`` for cloud instances). ``scale_out_*`` describe the compute-fabric NICs only (storage and
    management NICs excluded).
    """

    kind: Literal["server", "cloud-instance"]
    provider: Literal["aws"] | None = None
    accelerator: Slug
    accelerators_per_node: PositiveInt
    nvlink_domain_size: PositiveInt
    intra_node_fabric: Slug
    scale_out_fabric: Slug
    scale_out_nics: PositiveInt
    scale_out_gbit_per_s_per_nic: PositiveFloat
    vcpus: PositiveInt | None = None
    host_memory_gib: PositiveFloat | None = None
    local_nvme_tb: PositiveFloat | None = None
    max_power_kw: PositiveFloat | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Node:
        if (self.kind == "cloud-instance") != (self.provider is not None):
            raise ValueError("a cloud-instance names its provider; a server has none")
        if self.accelerators_per_node % self.nvlink_domain_size:
            raise ValueError(
                f"nvlink_domain_size ({self.nvlink_domain_size}) must divide "
                f"accelerators_per_node ({self.accelerators_per_node})"
            )
        return self

    @property
    def scale_out_gbit_per_s(self) -> float:
        """Total scale-out bandwidth of the node, one direction (p5.48xlarge: 32 × 100 = 3,200)."""
        return self.scale_out_nics * self.scale_out_gbit_per_s_per_nic

    @property
    def scale_out_gbit_per_s_per_accelerator(self) -> float:
        return self.scale_out_gbit_per_s / self.accelerators_per_node

    @property
    def nvlink_domains(self) -> int:
        return self.accelerators_per_node // self.nvlink_domain_size


# --------------------------------------------------------------------------------------------------
# The catalog


class UnknownHardwareError(KeyError):
    """A slug that is not in the hardware catalog; the message lists the known ones."""

    def __init__(self, kind: str, slug: str, known: list[str]) -> None:
        self.kind, self.slug, self.known = kind, slug, known
        super().__init__(f"unknown {kind} {slug!r}; known: {', '.join(known)}")

    def __str__(self) -> str:
        return self.args[0]


def _find(kind: str, entries: tuple[CatalogEntry, ...], slug: str):
    for entry in entries:
        if entry.slug == slug:
            return entry
    raise UnknownHardwareError(kind, slug, [e.slug for e in entries])


@dataclass(frozen=True)
class HardwareCatalog:
    accelerators: tuple[Accelerator, ...]
    nodes: tuple[Node, ...]
    fabrics: tuple[Fabric, ...]
    switches: tuple[Switch, ...]
    topologies: tuple[Topology, ...]

    def accelerator(self, slug: str) -> Accelerator:
        return _find("accelerator", self.accelerators, slug)

    def node(self, slug: str) -> Node:
        return _find("node", self.nodes, slug)

    def fabric(self, slug: str) -> Fabric:
        return _find("fabric", self.fabrics, slug)

    def switch(self, slug: str) -> Switch:
        return _find("switch", self.switches, slug)

    def topology(self, slug: str) -> Topology:
        return _find("topology", self.topologies, slug)

    def node_accelerator(self, node: Node | str) -> Accelerator:
        node = self.node(node) if isinstance(node, str) else node
        return self.accelerator(node.accelerator)


def node_problem(node: Node, acc: Accelerator, intra: Fabric, out: Fabric) -> tuple[str, str] | None:
    """(field, reason) of the first inconsistency between a node, its accelerator and fabrics, or None."""
    if not intra.is_scale_up:
        return "intra_node_fabric", f"{intra.slug!r} is a {intra.kind} network, not a scale-up fabric"
    if out.is_scale_up:
        return "scale_out_fabric", f"{out.slug!r} is a {out.kind} scale-up fabric, not a network"
    if intra.kind == "nvlink" and intra.generation != acc.nvlink_generation:
        return "intra_node_fabric", (
            f"{intra.slug!r} is NVLink {intra.generation} but {acc.slug!r} has NVLink {acc.nvlink_generation}"
        )
    if intra.kind == "nvlink" and not math.isclose(
        intra.gb_per_s_per_gpu_bidirectional or 0.0, acc.nvlink_bandwidth_gb_per_s or 0.0, rel_tol=0.01
    ):
        return "intra_node_fabric", (
            f"{intra.slug!r} gives {intra.gb_per_s_per_gpu_bidirectional} GB/s per GPU but "
            f"{acc.slug!r} lists {acc.nvlink_bandwidth_gb_per_s}"
        )
    if intra.kind == "pcie" and (acc.pcie_generation is None or intra.generation > acc.pcie_generation):
        return (
            "intra_node_fabric",
            f"{intra.slug!r} is faster than {acc.slug!r}'s PCIe gen {acc.pcie_generation}",
        )
    if not acc.has_nvlink and node.nvlink_domain_size != 1:
        return "nvlink_domain_size", f"{acc.slug!r} has no NVLink, so the NVLink domain is 1 GPU"
    if node.scale_out_gbit_per_s_per_nic > out.gbit_per_s_per_port:
        return "scale_out_gbit_per_s_per_nic", (
            f"{node.scale_out_gbit_per_s_per_nic} exceeds {out.slug!r} port speed {out.gbit_per_s_per_port}"
        )
    return None
