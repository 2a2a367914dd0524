"""Collectives on the topology: where each parallel group's ranks sit and how long its collectives take.

Rank order (Megatron's default ``tp-cp-ep-dp-pp``): tensor parallel innermost (NVLink), then context, data,
and pipeline parallel outermost. A group whose ranks all sit in one NVLink domain runs at the scale-up
bandwidth; one that spans nodes is limited by each GPU's share of the node's NICs (rail-optimised, one NIC
per GPU), divided by the fat-tree oversubscription.

Times follow the nccl-tests definitions, for a buffer of S bytes over n ranks at bus bandwidth B:
all-reduce 2(n−1)/n·S/B, reduce-scatter and all-gather (n−1)/n·S/B (S = the full, unsharded buffer),
all-to-all (n−1)/n·S/B (S = what one rank sends), point-to-point S/B; plus a latency term per ring step
inside the node and per tree level across nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from app.domain.cluster import Cluster


class Collective(StrEnum):
    all_reduce = "all-reduce"
    reduce_scatter = "reduce-scatter"
    all_gather = "all-gather"
    all_to_all = "all-to-all"
    p2p = "p2p"


@dataclass(frozen=True, slots=True)
class Group:
    """A communicator: its size, how many of its ranks share one NVLink domain, and its bus bandwidth."""

    name: str
    size: int
    ranks_per_domain: int
    nodes: int
    bus_gb_per_s: float
    hop_latency_s: float
    scale_out: bool


def place_group(name: str, size: int, stride: int, cluster: Cluster) -> Group:
    """Group of ``size`` ranks spaced ``stride`` apart in the global rank order."""
    domain = cluster.nvlink_domain
    per_domain = max(1, min(size, domain // stride)) if stride <= domain else 1
    nodes = math.ceil(size / per_domain)
    scale_up = cluster.scale_up_gb_per_s * cluster.efficiency.scale_up_efficiency
    if nodes == 1:
        return Group(
            name=name, size=size, ranks_per_domain=per_domain, nodes=1, bus_gb_per_s=scale_up,
            hop_latency_s=cluster.scale_up_network.hop_latency_us * 1e-6, scale_out=False,
        )  # fmt: skip
    scale_out = cluster.scale_out_gb_per_s * cluster.scale_out_network.efficiency / cluster.oversubscription
    return Group(
        name=name, size=size, ranks_per_domain=per_domain, nodes=nodes, bus_gb_per_s=min(scale_up, scale_out),
        hop_latency_s=cluster.scale_out_network.hop_latency_us * 1e-6, scale_out=True,
    )  # fmt: skip


def collective_time(kind: Collective, size_bytes: float, group: Group) -> float:
    """Seconds for one collective of ``size_bytes`` on ``group`` (0 for a group of one)."""
    n = group.size
    if n <= 1 or size_bytes <= 0:
        return 0.0
    bw = group.bus_gb_per_s * 1e9
    steps_in = max(0, group.ranks_per_domain - 1)
    levels = math.ceil(math.log2(group.nodes)) if group.nodes > 1 else 0
    if kind is Collective.all_reduce:
        return 2 * (n - 1) / n * size_bytes / bw + 2 * (steps_in + levels) * group.hop_latency_s
    if kind in (Collective.reduce_scatter, Collective.all_gather, Collective.all_to_all):
        return (n - 1) / n * size_bytes / bw + (steps_in + levels) * group.hop_latency_s
    return size_bytes / bw + group.hop_latency_s


@dataclass(frozen=True, slots=True)
class Groups:
    tp: Group
    cp: Group
    dp: Group
    dp_shard: Group
    dp_replicate: Group
    ep: Group
    pp: Group


def plan_groups(tp: int, cp: int, dp: int, pp: int, ep: int, shard_group: int, cluster: Cluster) -> Groups:
    """Communicators of a plan laid out in tp-cp-(ep)-dp-pp order. FSDP/ZeRO shard over dp·cp."""
    replicas = max(1, dp // shard_group)
    return Groups(
        tp=place_group("tp", tp, 1, cluster),
        cp=place_group("cp", cp, tp, cluster),
        dp=place_group("dp", dp * cp, tp, cluster),
        dp_shard=place_group("dp-shard", shard_group * cp, tp, cluster),
        dp_replicate=place_group("dp-replicate", replicas, tp * cp * shard_group, cluster),
        ep=place_group("ep", ep, tp, cluster),
        pp=place_group("pp", 2, tp * cp * dp, cluster),
    )
