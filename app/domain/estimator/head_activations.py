"""Activation memory outside the transformer layers, per rank: what the embedding and the output head keep
for the backward, and the ``b·s·V`` logits (under a fused linear cross-entropy: the gradients it computes in the
forward, and one chunk of logits while it runs). The
conventions (``framework_style``, notation) are those of :mod:`app.domain.estimator.activations`."""

from __future__ import annotations

from app.domain.estimator.activation_terms import (
    FP32_BYTES,
    INDEX_BYTES,
    MASK_BYTES,
    FrameworkStyle,
    Shape,
    ceil_div,
    check_sizes,
    default_dropout,
)
from app.domain.model.architecture import Architecture


def embedding_activation_bytes(
    arch: Architecture,
    *,
    micro_batch: int,
    seq_len: int,
    tp: int = 1,
    cp: int = 1,
    sequence_parallel: bool = False,
    act_bytes: int = 2,
    framework_style: FrameworkStyle = "torch",
    dropout: bool | None = None,
) -> int:
    """Saved by the first stage before its first layer: token ids (int64, for the embedding backward),
    position ids for learned positions (torch), the embedding-norm input + stats when ``embedding_norm``,
    and Megatron's embedding dropout mask (``s·b·h`` bytes, ÷t with SP) when ``dropout``."""
    check_sizes(micro_batch, seq_len, tp, cp, act_bytes)
    style: FrameworkStyle = framework_style
    if dropout is None:
        dropout = default_dropout(arch, style)
    sh = Shape(arch, micro_batch, seq_len, tp, cp, sequence_parallel, act_bytes)
    total = sh.tokens * INDEX_BYTES
    if arch.position == "learned" and style == "torch":
        total += sh.s_local * INDEX_BYTES
    if arch.embedding_norm:
        stat = (2 * FP32_BYTES if arch.norm == "layernorm" else FP32_BYTES) if style == "torch" else 0
        total += sh.tokens_rep * (arch.hidden_size * act_bytes + stat)
    if style == "megatron" and dropout:
        total += sh.tokens_rep * arch.hidden_size * MASK_BYTES
    return total


def head_activation_bytes(
    arch: Architecture,
    *,
    micro_batch: int,
    seq_len: int,
    tp: int = 1,
    cp: int = 1,
    sequence_parallel: bool = False,
    act_bytes: int = 2,
    framework_style: FrameworkStyle = "torch",
    gathered_tp_inputs: bool = False,
) -> int:
    """Saved by the last stage after its last layer, *excluding* the ``b·s·V`` tensors (see
    :func:`logits_bytes`): the final-norm input (+ stats in torch), the output-GEMM input and the int64
    targets. The output-GEMM input is replicated over TP unless SP, and kept whole under PyTorch DTensor TP
    (``gathered_tp_inputs``: torchtitan's ColwiseParallel(input_layouts=Shard(1)) all-gathers it)."""
    check_sizes(micro_batch, seq_len, tp, cp, act_bytes)
    sh = Shape(
        arch, micro_batch, seq_len, tp, cp, sequence_parallel, act_bytes, gathered_inputs=gathered_tp_inputs
    )
    stat = (2 * FP32_BYTES if arch.norm == "layernorm" else FP32_BYTES) if framework_style == "torch" else 0
    return (
        sh.tokens_rep * (arch.hidden_size * act_bytes + stat)
        + sh.tokens_in * arch.hidden_size * act_bytes
        + sh.tokens * INDEX_BYTES
    )


def logits_bytes(
    arch: Architecture,
    *,
    micro_batch: int,
    seq_len: int,
    tp: int = 1,
    cp: int = 1,
    logits_dtype_bytes: int = 4,
    act_bytes: int = 2,
    fused_linear: bool = False,
    fused_loss: bool = False,
    z_loss: bool = False,
) -> int:
    """The ``b·s·V`` logits and the loss's copy of them on the last stage, per rank (vocab-parallel ÷t, ÷c).

    ``b·(s/c)·(V/t)·(act_bytes + logits_dtype_bytes)``: the output GEMM writes logits in the activation dtype
    (bf16, 2 B); the eager loss upcasts them to fp32 (``logits_dtype_bytes=4``, the default — every mainstream
    recipe computes cross-entropy in fp32) and autograd keeps the fp32 log-softmax output until backward. With a
    bf16 cross-entropy pass ``logits_dtype_bytes=2``. Eager PyTorch briefly holds one more fp32 copy while
    ``log_softmax`` runs or its gradient is formed (about ``b·s·V·4`` more at that instant). Example: Llama 3
    (V=128,256), b=1, s=8192, t=1 → 8192·128256·6 = 6,304,038,912 B ≈ 5.87 GiB.

    ``fused_loss`` (a compiled or fused loss): ``b·(s/c)·(V/t)·act_bytes``, the 16-bit logits alone. torch.compile's
    partitioner saves the bf16 logits and two fp32 numbers a row (the maximum and the log-sum-exp) and recomputes
    the softmax in the backward rather than keep 4 B a logit (measured with torch 2.13 on CPU:
    tests/bench/test_activation_ground_truth.py); a fused kernel (Transformer Engine's Triton cross-entropy,
    Liger's) writes the gradient into the logits in place. Llama 3, b=1, s=8192: 2,101,346,304 B ≈ 1.96 GiB.

    ``fused_linear`` (Liger-Kernel's FusedLinearCrossEntropy, ``fused_linear_cross_entropy_forward``, source
    LIGER-FLCE): the output
    GEMM and the loss run in the forward, over chunks of tokens, and compute the gradients there: what stays
    until the backward is the gradient of the GEMM's input (``grad_input``, b·s·h in the activation dtype) and of
    its weight (``grad_weight``, zeros_like(weight): (V/t)·h in the 16-bit weight dtype) — no logits. The chunk's
    logits are transient (:func:`loss_peak_bytes`). Llama 3 8B, b=1, s=262,144: 262144·4096·2 + 128256·4096·2 =
    2.15 GB + 1.05 GB.

    ``z_loss`` with an eager loss: ``logsumexp`` keeps its input, the fp32 logits, for its backward — 4 B a logit
    more (measured with torch 2.13 on CPU: 10 B a logit after the forward, against 6); a fused or compiled loss
    computes it in its own pass and keeps nothing more.
    """
    check_sizes(micro_batch, seq_len, tp, cp, act_bytes)
    if logits_dtype_bytes not in (2, 4):
        raise ValueError(f"logits_dtype_bytes must be 2 or 4, got {logits_dtype_bytes}")
    if fused_linear:
        tokens = micro_batch * ceil_div(seq_len, cp)
        return (tokens + ceil_div(arch.vocab_size, tp)) * arch.hidden_size * act_bytes
    if fused_loss:
        return logit_count(arch, micro_batch, seq_len, tp, cp) * act_bytes
    z_b = FP32_BYTES if z_loss else 0
    return logit_count(arch, micro_batch, seq_len, tp, cp) * (act_bytes + logits_dtype_bytes + z_b)


def pipeline_output_bytes(
    arch: Architecture,
    *,
    micro_batch: int,
    seq_len: int,
    tp: int = 1,
    cp: int = 1,
    act_bytes: int = 2,
    fp32: bool = True,
) -> int:
    """One micro-batch's model output as torch.distributed.pipelining keeps it on the last stage until the step ends:
    the logits, ``b·(s/c)·(V/t)``, fp32 where the model returns them upcast (``fp32``: torchtitan's
    ``self.output(h).float()`` of its 2024 models, which its eager loss reads), else in the activation dtype. The
    schedule appends every micro-batch's output to ``output_chunks`` for ``merge_output_chunks`` and only detaches
    them after their backward (pytorch PR #138504, 2024-10; issue #159251, 2025-07, asks to stop caching them), so
    the last stage holds m − 1 more of them beside the micro-batch its loss works on. Llama 3.1 405B, b = 4,
    s = 8,192, t = 8, fp32: 4·8,192·16,032·4 = 2,101,346,304 B."""
    check_sizes(micro_batch, seq_len, tp, cp, act_bytes)
    return logit_count(arch, micro_batch, seq_len, tp, cp) * (FP32_BYTES if fp32 else act_bytes)


def fused_linear_chunk_tokens(arch: Architecture, tokens: int) -> int:
    """Tokens per chunk of Liger-Kernel's FusedLinearCrossEntropy: ``next_power_of_2(ceil(b·s / ceil(V/h)))``,
    at most b·s (``fused_linear_cross_entropy_forward``: the transient logits bounded to about b·s·h elements).
    Llama 3 8B (V=128,256, h=4,096), 262,144 tokens: ceil(128256/4096) = 32, 262144/32 = 8,192."""
    inc_factor = ceil_div(arch.vocab_size, arch.hidden_size)
    return min(tokens, 1 << max(0, (ceil_div(tokens, inc_factor) - 1).bit_length()))


def logit_count(arch: Architecture, micro_batch: int, seq_len: int, tp: int = 1, cp: int = 1) -> int:
    """The ``b·(s/c)·(V/t)`` logits of one micro-batch on one rank (vocab-parallel over TP, sequence over CP)."""
    return micro_batch * ceil_div(seq_len, cp) * ceil_div(arch.vocab_size, tp)


def loss_peak_bytes(
    arch: Architecture,
    *,
    micro_batch: int,
    seq_len: int,
    tp: int = 1,
    cp: int = 1,
    act_bytes: int = 2,
    fused_linear: bool = False,
    eager: bool = False,
    loss_parallel: bool = False,
    z_loss: bool = False,
) -> int:
    """The loss's largest moment on the last stage, per rank: what the ``b·s·V`` tensors occupy at once.

    Eager PyTorch cross-entropy on upcast logits (``F.cross_entropy(logits.float(), targets)``, ``eager``) peaks
    at the start of its backward with three fp32 ``b·s·V`` tensors: the log-probabilities ``log_softmax`` saved,
    their gradient (``nll_loss`` backward writes a dense tensor) and the gradient of the upcast logits that
    ``log_softmax`` backward allocates — ``b·(s/c)·(V/t)·12`` bytes, twice :func:`logits_bytes`' saved 6 B per
    logit. The 16-bit logits themselves are gone by then when the caller frees them before the backward, as
    torchtitan's train step does (``del pred``); a caller that keeps them (Hugging Face's model output) holds
    ``act_bytes`` more per logit. Measured with torch 2.13 on CPU (tests/bench/test_activation_ground_truth.py):
    10 B per logit during the forward, 6 B saved after it, 12 B at the backward's start. Example: Llama 3
    (V=128,256), b=1, s=8192 → 8192·128256·12 = 12,608,077,824 B ≈ 11.7 GiB, 5.9 GiB above the saved logits.

    ``loss_parallel`` (torchtitan with TP > 1: the DTensor loss, ``torch.distributed.tensor.parallel.loss``, on the
    vocab-sharded logits): its backward (``_nll_loss_and_log_softmax_backward``) builds ``zeros_like(x)``, then
    ``exp(x)``, their sum and the product with the output gradient while the saved log-probabilities x live —
    16 B a logit (measured with torch 2.13 on CPU, 12 B beyond the saved 4 B); its forward peaks at 14 B (the
    16-bit logits, x, ``shifted`` and ``exp(shifted)``), below that. Llama 3.1 70B at TP 8, b=16, s=8192:
    131072·16032·16 = 33.6 GB against 25.2 GB without it.

    ``z_loss`` with an eager loss (OLMo's ``logits.logsumexp(-1)`` on the fp32 logits): the fp32 logits stay for
    logsumexp's backward and its ``(self − result).exp()`` lives beside the cross-entropy's tensors — 20 B a logit
    at the backward's peak (measured with torch 2.13 on CPU), two fp32 tensors more; counted the same under
    ``loss_parallel``, where it is not measured (torchtitan has no z-loss).

    Fused or compiled cross-entropy (Transformer Engine's Triton kernel, torch.compile) holds the 16-bit logits it
    saved (:func:`logits_bytes` with ``fused_loss``) and at most their 16-bit gradient beside them (a compiled
    backward writes it as a new tensor; an in-place kernel overwrites the logits): 2·act_bytes a logit. Fused linear cross-entropy (``fused_linear``) holds, beside
    the gradients it keeps, one chunk of logits (:func:`fused_linear_chunk_tokens` × V/t in the activation dtype;
    the loss kernel overwrites them with their gradient in place, no fp32 copy). Llama 3 8B, b=1, s=262,144:
    2.15 GB + 1.05 GB + 8192·128256·2 = 2.10 GB.
    """
    saved = logits_bytes(
        arch,
        micro_batch=micro_batch,
        seq_len=seq_len,
        tp=tp,
        cp=cp,
        act_bytes=act_bytes,
        fused_linear=fused_linear,
        fused_loss=not eager,
    )
    if fused_linear:
        chunk = fused_linear_chunk_tokens(arch, micro_batch * ceil_div(seq_len, cp))
        return saved + chunk * ceil_div(arch.vocab_size, tp) * act_bytes
    if not eager:
        return saved + logit_count(arch, micro_batch, seq_len, tp, cp) * act_bytes
    check_sizes(micro_batch, seq_len, tp, cp, act_bytes)
    # three fp32 tensors a logit at the backward's start; four under torchtitan's loss_parallel; an eager z-loss
    # keeps the fp32 logits and its backward forms exp(logits − lse) beside them: two more
    fp32_tensors = (4 if loss_parallel else 3) + (2 if z_loss else 0)
    return logit_count(arch, micro_batch, seq_len, tp, cp) * fp32_tensors * FP32_BYTES
