"""Context parallelism (ring attention): what the K/V ring costs beyond the attention it splits.

Context parallelism (CP) splits every sequence over ``cp`` ranks. Causal load balancing (Megatron-Core's
``get_batch_on_this_cp_rank``, PyTorch's round-robin load balancer) cuts the sequence into 2·cp chunks and gives
rank r chunks r and 2·cp−1−r, so every rank does 1/cp of the causal attention *and every ring step the same
work*: step 0 attends the rank's own two chunks (causal), every later step either all its queries to the first
chunk of the received K/V or its second query chunk to all of it — 2·(s/2cp)² query-key pairs each time. That
is why the estimator's attention time per rank is the whole causal attention ÷ cp
(:func:`app.domain.estimator.compute.layer_times`), at the kernel rate of a block of s/cp tokens
(:func:`~app.domain.estimator.compute.attention_efficiency`: a causal block of L tokens loops over L/2 keys per
query tile on average, as the non-causal s/cp × s/2cp steps do). What this module adds, per layer and
micro-batch on the slowest CP rank, is what the ring costs on top — each a small pure function on Python numbers
and numpy arrays alike:

* **the exchange that does not hide** (:func:`te_ring_exposed_s`, :func:`torch_ring_exposed_s`): a ring step
  overlaps its transfer with one step's attention, 1/cp of the layer's; the part of a transfer longer than that
  step is on the critical path. Short blocks (short sequences, large cp) and transfers across nodes
  (tp·cp beyond the NVLink domain) expose it;
* **merging the partial results** (:func:`ring_merge_bytes`): every step produces a partial output and
  log-sum-exp that is merged into the running output (forward), and partial dQ, dK, dV that are accumulated
  (backward) — memory-bound element-wise kernels the single-kernel attention does not run, growing with cp;
* **one more attention kernel per step and pass** (:func:`ring_fixed_seconds`): cp kernels instead of one,
  each with its launch, tail and the stream-ordered wait for its K/V (``gemm_overhead_us``);
* the attention kernel inside a ring step runs at ``scale.ring_attention_ratio`` × its rate outside a ring
  (:func:`app.domain.estimator.compute.attention_efficiency`; a fitted term, prior 1);
* the ring runs again for every recomputed attention forward (full recompute; selective recompute of the
  attention core).

The data-parallel gradient reduction already runs over dp·cp ranks (:func:`app.domain.estimator.evaluate.plan_comm`)
and FSDP/ZeRO shard over dp·cp; CP's groups are placed tp-cp-dp-pp, so a CP group with tp·cp beyond the NVLink
domain sends across nodes at one NIC share per GPU (:func:`app.domain.estimator.network.group_link`).

Two implementations, read from their source:

* **Transformer Engine** ``AttnFuncWithCPAndKVP2P`` (``cp_comm_type = "p2p"``, Megatron-Core's default; TE
  ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``, read at commit d0067d0,
  2026-08): forward, cp steps on two alternating CUDA streams; step i first waits (stream-ordered, no host sync)
  for the K/V received during step i−1, posts the send/receive of the next K/V (``batch_isend_irecv``) and runs
  its attention — cp−1 sends of the rank's K/V, each behind one step. The out/log-sum-exp corrections are
  jit-fused element-wise kernels on 16-bit outputs. Backward, one stream: step 0 sends K/V, steps 1…cp−2 send
  K/V and the running dK/dV together (``p2p_comm_buffers`` of shape (2, *kv.shape), in K/V's dtype), the last
  step sends dK/dV only; each step waits for its transfer after its attention backward, then adds its dK/dV to
  the received ones and its dQ to the rank's.
* **PyTorch** ``torch.distributed.tensor.experimental._attention`` (torchtitan's ``context_parallel``, rotate
  method ``allgather`` by default): the forward all-gathers every rank's K/V at step 0 (one collective, waited
  at step 1) and merges each step's output in fp32 with eager ops (``_SDPAMerger``: cast, subtract, sigmoid,
  multiply, subtract; ``torch.cat`` for the partial updates); the backward all-gathers K/V again, accumulates
  dQ/dK/dV in fp32 and passes the fp32 dK/dV around the ring with a permute at the end of every step — the last
  one waited after the loop, with nothing left to hide behind.

Hand-worked example (checked in ``tests/domain/test_context_parallel.py``): Llama 3.1 70B (8 KV heads of 128, so
K and V are 1,024 wide each), 8,192-token sequences, tp 1, cp 4, micro-batch 1, bf16. Each rank holds
2,048 tokens; one K/V block is 2 · 2,048 · 1,024 · 2 B = 8,388,608 B. Say the layer's causal attention forward
takes 574 µs on the rank: 143.5 µs per ring step, 287 µs per backward step.

* TE over NVLink (B200: 720 GB/s bus bandwidth, 3 µs a hop): a K/V send takes 8,388,608 / 720e9 + 3e-6 =
  14.65 µs, K/V with dK/dV 26.30 µs. Forward 3 · max(0, 14.65 − 143.5) = 0; backward (K/V, K/V+dK/dV twice,
  dK/dV) 0: all 125.9 µs of transfers hide, and only κ · 125.9 µs of slowdown remains.
* TE across nodes (one 50 GB/s NIC share, 8 µs a hop): a send takes 175.77 µs, with dK/dV 343.54 µs. Forward
  3 · (175.77 − 143.5) = 96.8 µs exposed; backward max(0, 175.77 − 287) + 2 · (343.54 − 287) +
  max(0, 175.77 − 287) = 113.1 µs.
* PyTorch over NVLink: the all-gather of 4 blocks takes 3/4 · 4 · 8,388,608 / 720e9 + 3 · 3 µs = 43.95 µs,
  hidden behind step 0; the fp32 dK/dV permute (16,777,216 B) 26.30 µs, the last one exposed: 26.30 µs.
* Merges (bytes ÷ HBM rate): queries and outputs 2,048 · 64 · 128 = 16,777,216 elements, K and V
  2,048 · 8 · 256 = 4,194,304. TE forward 16,777,216 · (4 + 3 · 6) + 4,194,304 · 4 = 385,875,968 B, backward
  16,777,216 · (4 + 3 · 6) + 4,194,304 · (8 + 3 · 6) = 478,150,656 B; PyTorch forward 16,777,216 · (12 + 3 · 38) +
  4,194,304 · 4 = 2,130,706,432 B, backward 16,777,216 · (20 + 3 · 10) + 4,194,304 · (32 + 3 · 21) = 1,237,319,680 B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Num = Any  # a Python number or a numpy array

# Backward attention time over forward for fused (flash) attention: FlashAttention-3 on H100 (BF16, causal, head
# dim 128, 16K tokens; source FA3) runs its forward at 616 TFLOP/s and its backward, which does 2.5× the forward's
# FLOPs (it recomputes the scores), at 561 TFLOP/s: backward time = 2.5 · 616 / 561 = 2.75 × the forward's. The
# FA2-class and cuDNN kernels are taken alike (the same paper's FlashAttention-2, 335 / 322, and cuDNN, 539 / 516, give
# 2.60 and 2.61). :func:`app.domain.estimator.compute.layer_work` splits a fused
# attention's forward + backward time by it (the forward is 1/(1 + ratio) = 27 % of it, not a third).
ATTENTION_BACKWARD_RATIO = 2.5 * 616 / 561


@dataclass(frozen=True, slots=True)
class RingAttention:
    """How one software stack runs causal ring attention: its K/V exchange and the HBM bytes of its merges.

    Byte counts are per element of one rank's block (b·s/cp tokens × the width on the rank) for 16-bit
    activations, read from the implementation's source: ``*_fixed_*`` once per layer and pass, ``*_step_*`` for
    each of the cp − 1 further ring steps, on the slowest rank (the last CP rank merges whole blocks every step;
    the others merge half of them on the steps where only their second chunk attends)."""

    name: str
    kv_all_gather: bool  # K/V all-gathered once per pass (waited at step 1) instead of cp − 1 ring sends
    dkv_wire_ratio: float  # bytes of dK/dV on the wire per K/V byte (1: 16-bit like K/V; 2: fp32)
    fwd_fixed_out_b: float
    fwd_step_out_b: float
    fwd_fixed_kv_b: float
    bwd_fixed_q_b: float
    bwd_step_q_b: float
    bwd_fixed_kv_b: float
    bwd_step_kv_b: float
    source: str
    fwd_step_kv_b: float = 0.0
    # no ring: each of the rank's two query chunks attends its whole causal prefix in one kernel (two kernels a
    # pass, not cp), K/V gathered in the open and dK/dV reduce-scattered after the backward
    whole_prefix: bool = False

    def extra_kernels(self, cp: Num) -> Num:
        """Attention kernels a pass runs beyond the single kernel without CP: one per further ring step (cp − 1),
        or one more for the second query chunk when each chunk attends its whole prefix."""
        return 1 if self.whole_prefix else cp - 1


# Transformer Engine (non-FP8): forward — K and V packed into one send buffer (read 2 + write 2 B per K/V element);
# out = out₀·e^(lse₀−lse) (read 2, write 2 B), then per step out += outᵢ·e^(lseᵢ−lse), one fused kernel (read outᵢ
# 2, read and write out 4 B); the lse corrections are per row, ÷ head dim, neglected. Backward — K/V copied into
# the send buffer (4 B), dQ of step 0 copied (4 B) and added at every later step (read 2 + 2, write 2 B), dK/dV of
# step 0 copied into the ring buffer (4 B) and added to the received ones at every later step (6 B).
TE_P2P = RingAttention(
    name="Transformer Engine AttnFuncWithCPAndKVP2P (p2p ring)",
    kv_all_gather=False, dkv_wire_ratio=1.0,
    fwd_fixed_out_b=4.0, fwd_step_out_b=6.0, fwd_fixed_kv_b=4.0,
    bwd_fixed_q_b=4.0, bwd_step_q_b=6.0, bwd_fixed_kv_b=8.0, bwd_step_kv_b=6.0,
    source="TE transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py (d0067d0, 2026-08)",
)  # fmt: skip

# PyTorch ring attention (convert_to_f32): forward — K/V concatenated for the all-gather (4 B); step 0's output cast
# to fp32 (read 2, write 4 B) and the result cast back (read 4, write 2 B); each later step, eager: block cast to fp32
# (6 B), out − block (read 4 + 4, write 4), σ(·)·(…) (read 4, write 4), out − … (read 4 + 4, write 4): 38 B.
# Backward — fp32 dQ/dK/dV allocated (zeros, 4 B) and cast back at the end (6 B); dQ += step's dQ (read 4 + 2,
# write 4) every step; step 0 adds dK/dV (10 B) and concatenates them into the send buffer (read 4, write 4); each
# later step on the last rank adds its half-block dK/dV into half of the received ones (5 B per element), rebuilds
# them with torch.cat (read 4, write 4) and concatenates them into the send buffer (8 B): 21 B; K/V concatenated
# for the all-gather (4 B).
TORCH_RING = RingAttention(
    name="PyTorch context_parallel ring attention (all-gather rotation, fp32 merges)",
    kv_all_gather=True, dkv_wire_ratio=2.0,
    fwd_fixed_out_b=12.0, fwd_step_out_b=38.0, fwd_fixed_kv_b=4.0,
    bwd_fixed_q_b=20.0, bwd_step_q_b=10.0, bwd_fixed_kv_b=32.0, bwd_step_kv_b=21.0,
    source="PyTorch torch/distributed/tensor/experimental/_attention.py (_templated_ring_attention, "
    "_SDPAMerger, _AllGatherRotater; 2025); torchtitan context_parallel_rotate_method default 'allgather'",
)  # fmt: skip

# Transformer Engine's all-gather CP (``AttnFuncWithCPAndKVAllGather``, cp_comm_type "all_gather", after the
# Llama 3 paper's §3.3.2; same source): forward — K and V all-gathered (the docstring: "KV all-gather between CP
# ranks is exposed"), put into sequence order (index_select: read 2 + write 2 B per gathered element, i.e. 4·cp B per
# element of the rank's own block), each of the rank's two query chunks attends its whole causal prefix in one kernel
# (two kernels, on two streams) and its output is copied into place (read 2 + write 2 B). Backward — K/V gathered and
# reordered again (4 B per gathered element), dK/dV allocated at full length (zeros, 2 B), each chunk's dK/dV added
# over its prefix (read 2 + 2, write 2 B; the two prefixes cover (2cp+1)/2cp of the sequence, taken as once),
# reordered back (4 B) and reduce-scattered in 16 bits (exposed); dQ copied into place (4 B). No merges.
TE_ALL_GATHER = RingAttention(
    name="Transformer Engine AttnFuncWithCPAndKVAllGather (K/V all-gather, no ring)",
    kv_all_gather=True, dkv_wire_ratio=1.0,
    fwd_fixed_out_b=4.0, fwd_step_out_b=0.0, fwd_fixed_kv_b=4.0, fwd_step_kv_b=4.0,
    bwd_fixed_q_b=4.0, bwd_step_q_b=0.0, bwd_fixed_kv_b=16.0, bwd_step_kv_b=16.0, whole_prefix=True,
    source="TE transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py (d0067d0, 2026-08); "
    "The Llama 3 Herd of Models, §3.3.2",
)  # fmt: skip

# Which ring a framework's plans run: Megatron-Core uses Transformer Engine's; torchtitan (fsdp2) uses PyTorch's.
# DeepSpeed runs no ring attention (the capability table folds cp into dp); TE's stands in.
RING_BY_FRAMEWORK = {"megatron": TE_P2P, "fsdp2": TORCH_RING, "deepspeed": TE_P2P}


def ring_for(framework: str, cp_comm_type: str = "p2p") -> RingAttention:
    """The K/V exchange a plan's context parallelism runs: the all-gather when the plan asks for it (Transformer
    Engine's, the algorithm Meta's Llama 3 stack ran; the capability table lets only Megatron plans ask), else
    the framework's ring."""
    if cp_comm_type == "all_gather":
        return TE_ALL_GATHER
    return RING_BY_FRAMEWORK.get(framework, TE_P2P)


def ring_merge_bytes(
    cp: Num, q_elems: Num, out_elems: Num, kv_elems: Num, ring: RingAttention
) -> tuple[Num, Num]:
    """(forward, backward) HBM bytes one rank's merges move per layer and micro-batch; 0 for cp = 1.

    ``q_elems``, ``out_elems``, ``kv_elems``: elements of the rank's queries, attention output and keys + values
    (b · s/cp · width / tp). forward = out·(fixed + (cp−1)·step) + kv·(fixed + (cp−1)·step);
    backward = q·(fixed + (cp−1)·step) + kv·(fixed + (cp−1)·step), with the byte counts of ``ring``."""
    steps = cp - 1
    fwd = out_elems * (ring.fwd_fixed_out_b + steps * ring.fwd_step_out_b) + kv_elems * (
        ring.fwd_fixed_kv_b + steps * ring.fwd_step_kv_b
    )
    bwd = q_elems * (ring.bwd_fixed_q_b + steps * ring.bwd_step_q_b) + kv_elems * (
        ring.bwd_fixed_kv_b + steps * ring.bwd_step_kv_b
    )
    on = cp > 1
    return fwd * on, bwd * on


def ring_fixed_seconds(
    cp: Num, merge_bytes: Num, hbm_bytes_per_s: float, kernel_overhead_s: float, ring: RingAttention = TE_P2P
) -> Num:
    """Seconds of one pass's ring work that no transfer hides: its merges, memory-bound at the HBM rate, plus
    the attention kernels beyond the single-kernel attention (``ring.extra_kernels``: cp − 1 for a ring, 1 for the
    all-gather), ``kernel_overhead_s`` each (launch, tail and the wait for the step's K/V)."""
    return merge_bytes / hbm_bytes_per_s + ring.extra_kernels(cp) * kernel_overhead_s


def te_ring_exposed_s(
    xp, cp: Num, kv_s: Num, kv_dkv_s: Num, dkv_s: Num, fwd_step_s: Num, bwd_step_s: Num, forwards: Num
) -> tuple[Num, Num]:
    """(exposed, hidden) transfer seconds of Transformer Engine's p2p ring, one layer and micro-batch.

    ``kv_s``, ``kv_dkv_s``, ``dkv_s``: one send of the rank's K/V, of K/V with dK/dV, of dK/dV alone;
    ``fwd_step_s``/``bwd_step_s``: one ring step's attention (the layer's ÷ cp); ``forwards``: forward passes of
    the ring (1 + the recomputed share). Forward: cp − 1 sends, each behind one step:
    (cp−1)·max(0, kv − f). Backward: K/V, then cp − 2 sends of K/V and dK/dV, then dK/dV, each behind one step:
    max(0, kv − b) + (cp−2)·max(0, kv+dkv − b) + max(0, dkv − b). Step 0 computes on the rank's own K/V, so the
    ring's start costs nothing unless a send outlasts a step."""
    fwd = (cp - 1) * xp.maximum(0.0, kv_s - fwd_step_s)
    bwd = (
        xp.maximum(0.0, kv_s - bwd_step_s)
        + xp.maximum(0, cp - 2) * xp.maximum(0.0, kv_dkv_s - bwd_step_s)
        + xp.maximum(0.0, dkv_s - bwd_step_s)
    )
    total = forwards * (cp - 1) * kv_s + kv_s + xp.maximum(0, cp - 2) * kv_dkv_s + dkv_s
    on = cp > 1
    exposed = forwards * fwd + bwd
    return xp.where(on, exposed, 0.0), xp.where(on, total - exposed, 0.0)


def torch_ring_exposed_s(
    xp, cp: Num, gather_s: Num, dkv_s: Num, fwd_step_s: Num, bwd_step_s: Num, forwards: Num
) -> tuple[Num, Num]:
    """(exposed, hidden) transfer seconds of PyTorch's ring attention with the all-gather rotation, one layer and
    micro-batch. ``gather_s``: the all-gather of every rank's K/V; ``dkv_s``: one permute of the fp32 dK/dV.

    Forward: the all-gather runs behind step 0: max(0, gather − f). Backward: the all-gather again behind step 0,
    and cp dK/dV permutes, each issued at the end of a step — the first cp − 1 behind the next step, the last one
    waited after the loop: max(0, gather − b) + (cp−1)·max(0, dkv − b) + dkv."""
    fwd = xp.maximum(0.0, gather_s - fwd_step_s)
    bwd = xp.maximum(0.0, gather_s - bwd_step_s) + (cp - 1) * xp.maximum(0.0, dkv_s - bwd_step_s) + dkv_s
    total = (forwards + 1) * gather_s + cp * dkv_s
    on = cp > 1
    exposed = forwards * fwd + bwd
    return xp.where(on, exposed, 0.0), xp.where(on, total - exposed, 0.0)


def te_gather_exposed_s(xp, cp: Num, gather_s: Num, forwards: Num) -> tuple[Num, Num]:
    """(exposed, hidden) transfer seconds of Transformer Engine's all-gather CP, one layer and micro-batch:
    ``gather_s`` = the all-gather of every rank's K/V (the reduce-scatter of the 16-bit dK/dV moves the same
    bytes). Nothing hides — TE runs the gather before the attention that needs it and the reduce-scatter after the
    backward that makes it: forwards·gather (each forward pass, recomputed ones included) + gather (the backward
    gathers again) + the reduce-scatter. Example: a 14.65 µs gather at 1 forward: 3 · 14.65 = 43.95 µs."""
    exposed = xp.where(cp > 1, (forwards + 2) * gather_s, 0.0)
    return exposed, 0.0 * exposed


def ring_exposed_s(
    xp, ring: RingAttention, cp: Num, comm: dict, fwd_step_s: Num, bwd_step_s: Num, forwards: Num
) -> tuple[Num, Num]:
    """(exposed, hidden) transfer seconds of ``ring``'s K/V exchange, one layer and micro-batch, from the plan's
    CP transfers in ``comm`` (``cp_kv``, ``cp_kv_dkv``, ``cp_dkv``: one send; ``cp_gather``: the all-gather)."""
    if ring.whole_prefix:
        return te_gather_exposed_s(xp, cp, comm["cp_gather"], forwards)
    if ring.kv_all_gather:
        return torch_ring_exposed_s(
            xp, cp, comm["cp_gather"], comm["cp_dkv"], fwd_step_s, bwd_step_s, forwards
        )
    sends = (comm["cp_kv"], comm["cp_kv_dkv"], comm["cp_dkv"])
    return te_ring_exposed_s(xp, cp, *sends, fwd_step_s, bwd_step_s, forwards)


def te_gather_backward_bytes(cp: Num, q_elems: Num, kv_elems: Num, act_b: float) -> Num:
    """Bytes Transformer Engine's all-gather CP backward holds beyond the single attention kernel's gradients, per
    layer and micro-batch on one rank; 0 for cp = 1. Read from ``AttnFuncWithCPAndKVAllGather.backward``: the
    gathered K/V (cp · kv), dK/dV at full length (cp · kv), the two query chunks' dK/dV over their prefixes
    ((2cp+1)/2cp of the full length: (cp + ½) · kv) and their dQ halves (q), minus the single kernel's dK/dV (kv),
    all in the activation dtype: ((3cp − ½) · kv + q) · B. Hand-worked: cp 4, q = 131,072, kv = 65,536, B = 2:
    (11.5 · 65,536 + 131,072) · 2 = 1,769,472 B."""
    return ((3 * cp - 0.5) * kv_elems + q_elems) * act_b * (cp > 1)


def torch_ring_backward_bytes(cp: Num, q_elems: Num, kv_elems: Num, heads_rows: Num, act_b: float) -> Num:
    """Bytes PyTorch's ring-attention backward holds at its peak beyond what the single attention kernel's backward
    holds (its dQ, dK, dV in the activation dtype), on the busiest CP rank, per layer and micro-batch; 0 for cp = 1.

    Read from ``_templated_ring_attention_backward`` (torch 2.13, ``torch/distributed/tensor/experimental/
    _context_parallel/_attention.py``; default options: all-gather rotation of K/V, fp32 accumulation,
    round-robin load balancing) with ``q_elems`` = the rank's query elements, ``kv_elems`` = its key + value
    elements (b · s/cp · width / tp; K/V repeated to every query head where the model repeats them) and
    ``heads_rows`` = b · s/cp · heads / tp (the log-sum-exp's fp32 rows). The all-gathered K/V of every rank stay
    for the whole loop: cp · kv · B. On top, the larger of two moments:

    * a step that updates half of dQ (``_partial_update``): the fp32 dQ and its concatenated copy (8 · q), the step's
      dQ for half the queries (q · B/2), the received fp32 dK/dV, their concatenation and the permute's output
      (12 · kv), the step's dK/dV and the K/V concatenation in the activation dtype (2 · kv · B), half the fp32
      log-sum-exp made contiguous (2 · rows);
    * the fp32 dQ (4 · q) beside four fp32 dK/dV buffers (16 · kv) and two activation-dtype ones (2 · kv · B).

    Measured on CPU through torch's own function with a fake process group (every rank of cp 2, 4, 8; tests/bench/
    test_activation_ground_truth.py): exact. Minus the single kernel's (q + kv) · B. Hand-worked (B = 2): q = 131,072,
    kv = 65,536, 2,048 rows, cp 4 — gathered 524,288 B; moments 9 · 131,072 + 16 · 65,536 + 4,096 = 2,232,320 B and
    4 · 131,072 + 20 · 65,536 = 1,835,008 B; 2,756,608 B at the peak, 2,363,392 B beyond the single kernel."""
    gathered = cp * kv_elems * act_b
    partial_update = 8 * q_elems + q_elems * act_b / 2 + 12 * kv_elems + 2 * kv_elems * act_b + 2 * heads_rows
    step = 4 * q_elems + 16 * kv_elems + 2 * kv_elems * act_b
    peak = gathered + partial_update + (step - partial_update) * (step > partial_update)
    return (peak - (q_elems + kv_elems) * act_b) * (cp > 1)
