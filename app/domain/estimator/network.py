"""Collectives on the topology: where each parallel group's ranks sit and how long its collectives take.

Rank order (Megatron's default ``tp-cp-ep-dp-pp``): tensor parallel innermost (NVLink), then context, data,
and pipeline parallel outermost. A group whose ranks all sit in one NVLink domain runs at the scale-up
bandwidth; one that spans nodes is limited by each GPU's share of the node's NICs (rail-optimised, one NIC
per GPU), divided by the fat-tree oversubscription; a ring collective across nodes gets that share times the
group's GPUs per node (see :func:`group_link`), a point-to-point send one share.

Times follow the nccl-tests definitions, for a buffer of S bytes over n ranks at bus bandwidth B:
all-reduce 2(n−1)/n·S/B, reduce-scatter and all-gather (n−1)/n·S/B (S = the full, unsharded buffer),
all-to-all (n−1)/n·S/B (S = what one rank sends), point-to-point S/B; plus a latency term per ring step
inside the node and per tree level across nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.domain.estimator.cluster import Cluster
from app.domain.estimator.xp import SCALAR


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
    intra_hop_s: float = 0.0  # the NVLink hop's latency, for the ring steps that stay inside a domain


def group_shape(xp, size, stride, domain):
    """(ranks per NVLink domain, nodes spanned) of a group of ``size`` ranks spaced ``stride`` apart."""
    per_domain = xp.where(stride <= domain, xp.maximum(1, xp.minimum(size, domain // stride)), 1)
    return per_domain, xp.ceil(size / per_domain)


def group_link(xp, nodes, per_domain, scale_up_gb_per_s, scale_out_gb_per_s, hop_up_s, hop_out_s, ring=True):
    """(bus GB/s, hop latency s) of a group: NVLink inside one domain; across nodes, for ring collectives
    (all-reduce, reduce-scatter, all-gather) the slower of NVLink and per_domain × the per-GPU NIC share, for
    point-to-point the slower of NVLink and one GPU's NIC share.

    Why per_domain ×: NCCL runs one ring per channel and spreads the channels over the node's NICs (one rail
    per GPU). A ring that enters a node visits its per_domain GPUs over NVLink and leaves once, so each NIC
    carries 1/per_domain of the ring's traffic: bus bandwidth ≈ per_domain × NIC share (nccl-tests across DGX
    H100 nodes: ~8 × 50 GB/s, bounded by NVLink). A group with one GPU per node (stride ≥ the node) gets one
    NIC's share; a send to one peer always does.
    """
    multi = nodes > 1
    out = scale_out_gb_per_s * xp.where(ring, xp.maximum(per_domain, 1), 1)
    bw = xp.where(multi, xp.minimum(scale_up_gb_per_s, out), scale_up_gb_per_s)
    return bw, xp.where(multi, hop_out_s, hop_up_s)


def collective_latency_seconds(xp, kind: Collective, n, per_domain, nodes, hop_s, intra_hop_s=None):
    """The latency term of one collective, as NCCL's own tuning model counts it (src/graph/tuning.cc: a ring's
    steps that cross nodes pay the network's latency, the others the NVLink's); 0 for a group of one.

    Reduce-scatter and all-gather run a ring of n − 1 steps, ``nodes`` − 1 of them between nodes (``hop_s``) and
    n − ``nodes`` inside one (``intra_hop_s``; ``hop_s`` when not given) — linear in the group size: 336 ranks on
    168 nodes at 8 µs / 3 µs a hop wait 167·8 + 168·3 = 1.84 ms per collective. An all-reduce at scale runs NCCL's
    tree (two log₂-deep passes): 2·(per_domain − 1 + ⌈log₂ nodes⌉) hops; all-to-all the same depth once; a send one
    hop."""
    steps_in = xp.maximum(0, per_domain - 1)
    levels = xp.where(nodes > 1, xp.ceil(xp.log2(xp.maximum(nodes, 1))), 0)
    nn = xp.maximum(n, 1)
    intra = hop_s if intra_hop_s is None else intra_hop_s
    if kind is Collective.all_reduce:
        t = 2 * (steps_in + levels) * hop_s
    elif kind is Collective.p2p:
        t = hop_s
    elif kind is Collective.all_to_all:
        t = (steps_in + levels) * hop_s
    else:  # reduce-scatter, all-gather: a ring
        t = xp.where(nodes > 1, (nodes - 1) * hop_s + xp.maximum(0, nn - nodes) * intra, (nn - 1) * hop_s)
    return xp.where(n <= 1, 0.0, t)


# NCCL's latency model for its low-latency (LL) protocol, which it picks for messages of a few bytes (src/graph/
# tuning.cc, ring/LL): a base latency plus one NVLink or network hop per ring step, 2·(n − 1) steps for an
# all-reduce (µs).
NCCL_LL_BASE_US = 3.6
NCCL_LL_NVLINK_HOP_US = 0.47
NCCL_LL_NET_HOP_US = 2.7


def small_all_reduce_seconds(xp, n, nodes=1):
    """Seconds of an all-reduce of a few bytes (one FP32 amax) over ``n`` ranks on ``nodes`` nodes, NCCL's LL ring:
    3.6 + 2·(n − nodes)·0.47 + 2·(nodes − 1)·2.7 µs; 0 for a group of one. Example: 8 ranks of one NVLink domain
    3.6 + 14·0.47 = 10.18 µs, 2 ranks 4.54 µs (NCCL issue #1259 measures ~6 µs on 2 H100s with CUDA graphs)."""
    nodes = xp.maximum(nodes, 1)
    t = (
        NCCL_LL_BASE_US
        + 2 * xp.maximum(n - nodes, 0) * NCCL_LL_NVLINK_HOP_US
        + 2 * (nodes - 1) * NCCL_LL_NET_HOP_US
    )
    return xp.where(n <= 1, 0.0, t * 1e-6)


def collective_seconds(
    xp, kind: Collective, size_bytes, n, per_domain, nodes, bus_gb_per_s, hop_s, intra_hop_s=None
):
    """nccl-tests time of one collective; 0 for a group of one or an empty buffer: the bus bytes over
    ``bus_gb_per_s`` (an all-reduce moves 2·(n − 1)/n of the buffer, a reduce-scatter, all-gather or all-to-all
    (n − 1)/n, a send all of it) plus :func:`collective_latency_seconds`."""
    nn = xp.maximum(n, 1)
    frac = (nn - 1) / nn
    bytes_on_bus = {Collective.all_reduce: 2 * frac, Collective.p2p: 1.0}.get(kind, frac) * size_bytes
    t = bytes_on_bus / (bus_gb_per_s * 1e9) + collective_latency_seconds(
        xp, kind, n, per_domain, nodes, hop_s, intra_hop_s
    )
    return xp.where((n <= 1) | (size_bytes <= 0), 0.0, t)


def remote_node_copies(xp, top_k, nodes):
    """Expected copies of one token that cross the scale-out network when a dispatcher sends it once per
    destination node (DeepEP's and HybridEP's inter-node kernels: RDMA to one GPU of each node that holds any of
    its experts, then NVLink fan-out inside that node), with its ``top_k`` experts spread uniformly over ``nodes``
    nodes (force-balanced routing): (N−1)·(1 − (1 − 1/N)^k). A plain all-to-all sends k·(N−1)/N copies.
    Example: top-8 over 4 nodes → 3·(1 − 0.75⁸) = 2.70 copies against 6.0 (0.45×); k = 1 gives (N−1)/N either way.
    Source: DeepEP README ("normal kernels … asymmetric-domain bandwidth forwarding, NVLink to RDMA"), DeepSeek-V3
    report §3.2.2 (each token dispatched to a node once, then forwarded over NVLink)."""
    n = xp.maximum(nodes, 1)
    return (n - 1) * (1 - (1 - 1 / n) ** top_k)


HYBRIDEP_SLOW_DOMAIN = (
    8  # NVLink domains of this size or less: HybridEP's inter-node path is untuned (see below)
)


def dispatch_dedups(kind, nvlink_domain):
    """Whether a MoE dispatcher of ``kind`` (:attr:`MoeDispatcher.dedup_kind`) sends each token across the
    scale-out network once per destination node, on nodes of ``nvlink_domain`` GPUs (numbers or arrays).
    DeepEP always does (its internode kernels: 43–58 GB/s of RDMA on H800 at EP 16–64, DeepEP README). HybridEP
    does inside NVL72 domains, but not across 8-GPU nodes: NVIDIA's own performance recipes keep HybridEP at EP 8
    on NVL8 systems because "HybridEP for NVL8 with EP>8" is not performant (NVIDIA-NeMo/Megatron-Bridge issue
    #2883, 2026-03-18, open in 2026-04: "Need to tune HybridEP for NVL8 with EP>8"), and users report its
    inter-node bandwidth far below the NIC's on two 8-GPU nodes (deepseek-ai/DeepEP issue #590, 16× B300). An EP
    group that leaves an 8-GPU node under HybridEP is therefore costed as the plain all-to-all (no credit for
    deduplication) — an assumption of how much it loses, not a measurement."""
    return (kind == 1) | ((kind == 2) & (nvlink_domain > HYBRIDEP_SLOW_DOMAIN))


def all_to_all_seconds(
    xp,
    size_bytes,
    n,
    per_domain,
    nodes,
    scale_up_gb_per_s,
    scale_out_gb_per_s,
    hop_s,
    top_k=1,
    per_node_dedup=False,
):
    """All-to-all of ``size_bytes`` sent by each of ``n`` ranks, ``per_domain`` of them per NVLink domain.

    Each rank sends (n−1)/n of its buffer: (per_domain−1)/n to peers in its own domain over NVLink and
    (n−per_domain)/n to other nodes over its NIC share, both at once; the slower part sets the time (NCCL's
    all-to-all is point-to-point sends on every link concurrently). One domain: (n−1)/n·S / scale-up bandwidth.

    ``per_node_dedup`` (DeepEP / HybridEP dispatch and combine of tokens with ``top_k`` copies in the buffer):
    each token crosses the scale-out network once per destination node (:func:`remote_node_copies` of the k copies
    per token), and the remote copies reach their GPUs over NVLink inside the destination node, which adds them to
    the NVLink share. Example (EP 32 over 4 DGX nodes, top-8): remote bytes 2.70/8 = 0.34·S instead of 0.75·S.
    """
    nn = xp.maximum(n, 1)
    domain = xp.maximum(per_domain, 1)
    naive_remote = (nn - domain) / nn
    group_nodes = xp.maximum(1, nn / domain)
    dedup_remote = remote_node_copies(xp, top_k, group_nodes) / xp.maximum(top_k, 1)
    remote_share = xp.where(per_node_dedup, dedup_remote, naive_remote)
    local_share = (domain - 1) / nn + xp.where(per_node_dedup, naive_remote, 0.0)
    local = local_share * size_bytes / (scale_up_gb_per_s * 1e9)
    remote = remote_share * size_bytes / (scale_out_gb_per_s * 1e9)
    t = xp.maximum(local, xp.where(nodes > 1, remote, 0.0)) + hop_s
    return xp.where((n <= 1) | (size_bytes <= 0), 0.0, t)


def link_speeds(cluster: Cluster) -> tuple[float, float, float, float]:
    """(scale-up bus GB/s, scale-out bus GB/s per GPU, scale-up hop s, scale-out hop s) of a cluster."""
    return (
        cluster.scale_up_gb_per_s * cluster.efficiency.scale_up_efficiency,
        cluster.scale_out_gb_per_s * cluster.scale_out_network.efficiency / cluster.oversubscription,
        cluster.scale_up_network.hop_latency_us * 1e-6,
        cluster.scale_out_network.hop_latency_us * 1e-6,
    )


def place_group(name: str, size: int, stride: int, cluster: Cluster) -> Group:
    """Group of ``size`` ranks spaced ``stride`` apart in the global rank order."""
    up, out, hop_up, hop_out = link_speeds(cluster)
    per_domain, nodes = group_shape(SCALAR, size, stride, cluster.nvlink_domain)
    bw, hop = group_link(SCALAR, nodes, per_domain, up, out, hop_up, hop_out, ring=name != "pp")
    return Group(
        name=name, size=size, ranks_per_domain=per_domain, nodes=nodes, bus_gb_per_s=bw, hop_latency_s=hop,
        scale_out=nodes > 1, intra_hop_s=hop_up,
    )  # fmt: skip


def collective_time(kind: Collective, size_bytes: float, group: Group) -> float:
    """Seconds for one collective of ``size_bytes`` on ``group`` (0 for a group of one)."""
    return collective_seconds(
        SCALAR, kind, size_bytes, group.size, group.ranks_per_domain, group.nodes, group.bus_gb_per_s,
        group.hop_latency_s, group.intra_hop_s,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Groups:
    tp: Group
    cp: Group
    dp: Group
    dp_shard: Group
    dp_replicate: Group
    ep: Group
    pp: Group


def plan_groups(
    tp: int, cp: int, dp: int, pp: int, ep: int, shard_group: int, cluster: Cluster, etp: int
) -> Groups:
    """Communicators of a plan laid out in tp-cp-(ep)-dp-pp order. FSDP/ZeRO shard over dp·cp. The expert-parallel
    group's ranks are ``etp`` apart (the experts' own tensor-parallel degree; tp unless MoE parallel folding)."""
    replicas = max(1, dp // shard_group)
    return Groups(
        tp=place_group("tp", tp, 1, cluster),
        cp=place_group("cp", cp, tp, cluster),
        dp=place_group("dp", dp * cp, tp, cluster),
        dp_shard=place_group("dp-shard", shard_group * cp, tp, cluster),
        dp_replicate=place_group("dp-replicate", replicas, tp * cp * shard_group, cluster),
        ep=place_group("ep", ep, etp, cluster),
        pp=place_group("pp", 2, tp * cp * dp, cluster),
    )
