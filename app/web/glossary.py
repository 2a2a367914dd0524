"""The words the planner uses (tp, pp, MFU, fsdp-full, …), in the pages' own terms: one table that renders the
/glossary page and the hover titles on the planner's labels, so the two never disagree."""

from __future__ import annotations

GLOSSARY: tuple[tuple[str, str, str], ...] = (
    # (term, anchor, explanation)
    ("tp", "tp", "Tensor parallel degree: each layer's matrices are split over this many GPUs, which exchange "
     "activations every layer (all-reduce or reduce-scatter + all-gather). Keep it inside one node's NVLink; "
     "it must divide the attention heads."),
    ("pp", "pp", "Pipeline parallel degree: the layers are cut into this many stages on different GPUs; micro-batches "
     "flow through them. It costs a pipeline bubble of (pp − 1) / (vpp · micro-batches) of the step."),
    ("vpp", "vpp", "Virtual pipeline stages per GPU (interleaved 1F1B): each GPU holds vpp smaller chunks of layers, "
     "which shrinks the bubble by vpp at the price of more point-to-point messages."),
    ("dp", "dp", "Data parallel degree: copies of the model (or its shards) that each process different sequences; "
     "blank = GPUs ÷ (tp · pp · cp). Gradients are reduced across them once per step."),
    ("cp", "cp", "Context parallel degree: each sequence is split into this many chunks on different GPUs (ring "
     "attention exchanges keys and values); for long sequences whose activations do not fit."),
    ("ep", "ep", "Expert parallel degree (MoE models): the routed experts are spread over this many GPUs; tokens travel "
     "to their experts and back by all-to-all."),
    ("expert tp", "expert-tp", "The routed experts' own tensor-parallel degree (Megatron's "
     "--expert-tensor-parallel-size). Empty = the framework's: tp for Megatron (every expert's FFN split like the "
     "dense layers, ep dividing dp·cp) and DeepSpeed, 1 for FSDP2 (torchtitan 0.3.0 has no expert TP). 1 = MoE "
     "parallel folding, as NVIDIA's performance recipes run MoE models: each expert whole on one GPU, the "
     "expert-parallel group free to span the tensor-parallel ranks (ep·expert_tp must divide tp·dp·cp), so an EP "
     "group fills a node sooner. Empty, a Megatron plan search tries both."),
    ("MTP layers", "mtp-layers", "Multi-token prediction modules trained (Megatron's --mtp-num-layers; DeepSeek-V3 "
     "trains 1): each is one more transformer layer, a projection and one more pass of the shared output head and "
     "loss, all on the last pipeline stage — which is why NVIDIA's layouts give that stage fewer layers."),
    ("pipeline layout", "pipeline-layout", "Megatron's --pipeline-model-parallel-layout: the layers of each virtual "
     "pipeline stage in order, E the embedding, t a transformer layer, m an MTP layer, L the loss, | between stages, "
     "(…)*n repeats — e.g. Et|(tt|)*30mL, NVIDIA's DeepSeek-V3 on 1,024 H100. Empty = capplan's even split."),
    ("micro-batch", "micro-batch", "Sequences one GPU processes in one forward/backward pass; the global batch is "
     "micro-batch × dp × gradient-accumulation steps."),
    ("global batch", "global-batch", "Sequences (or tokens) per optimizer step over the whole cluster. 16M tokens, "
     "1e12 and 15T are all accepted where a number is asked for."),
    ("ddp", "ddp", "Plain data parallel: every GPU keeps the whole model, gradients and optimizer state."),
    ("zero1 / zero2 / zero3", "zero", "DeepSpeed ZeRO stages: shard the optimizer state (1), plus gradients (2), plus "
     "parameters (3) over the data-parallel GPUs."),
    ("fsdp-full", "fsdp-full", "PyTorch FSDP FULL_SHARD (FSDP2 fully_shard): parameters, gradients and optimizer "
     "state sharded over the data-parallel GPUs; each layer's parameters are gathered just before use."),
    ("fsdp-grad-op", "fsdp-grad-op", "FSDP SHARD_GRAD_OP: gradients and optimizer state sharded, parameters kept whole "
     "between forward and backward (ZeRO-2-like)."),
    ("fsdp-hybrid", "fsdp-hybrid", "HSDP: fully sharded inside a group of GPUs (the HSDP group, e.g. one node), "
     "replicated across groups, so the gathers stay on the fast links."),
    ("megatron-distopt", "megatron-distopt", "Megatron-LM's distributed optimizer: optimizer state (and fp32 master "
     "weights) sharded over data-parallel GPUs, parameters replicated."),
    ("recompute", "recompute", "Activation checkpointing: selective recomputes the attention internals, full "
     "recomputes each layer's forward in backward: less memory, more FLOPs (HFU rises, MFU does not)."),
    ("recompute layers", "recompute-layers", "With full recompute: how many layers of each pipeline chunk recompute "
     "(Megatron's --recompute-method block --recompute-num-layers); the others keep their activations. Empty: all."),
    ("recompute modules", "recompute-modules", "With selective recompute: which parts of each layer are recomputed "
     "instead of kept (Megatron's --recompute-modules: core_attn, layernorm, mla_up_proj, mlp, moe_act, moe, "
     "shared_experts). Empty: the attention core only."),
    ("sequence parallel", "sequence-parallel", "With tp > 1, the norms and dropout work on a 1/tp slice of the "
     "sequence, so their activations are split too."),
    ("offload", "offload", "Optimizer state or parameters kept in host RAM (CPU) or on NVMe instead of GPU memory: "
     "fits bigger models, costs PCIe traffic."),
    ("CP communication", "cp-comm-type", "How context parallelism moves keys and values between its ranks: p2p runs "
     "a ring, each step attending one received block while the next is sent (Transformer Engine's default; torchtitan "
     "always rings); all_gather gathers every rank's K/V up front and attends each query chunk to its whole prefix, "
     "with the transfers in the open (Megatron / Transformer Engine, as Meta trained Llama 3)."),
    ("MoE dispatcher", "moe-dispatcher", "How a mixture-of-experts layer sends tokens to the GPUs holding their "
     "experts: alltoall sends one copy per chosen expert; deepep and hybridep (Megatron-Core's flex dispatcher) send "
     "one copy per destination node over the network and fan out over NVLink there."),
    ("MoE all-to-all overlap", "moe-a2a-overlap", "Megatron-Core runs one micro-batch's token all-to-alls behind "
     "another micro-batch's compute (--overlap-moe-expert-parallel-comm); needs ep > 1, interleaving when pp > 1 "
     "and no full recompute."),
    ("MoE capacity factor", "moe-capacity-factor", "Token dropping: each expert takes at most this factor × its mean "
     "share of the routed tokens and drops the rest (Megatron's --moe-expert-capacity-factor, DeepSpeed-MoE's "
     "capacity_factor). Empty is dropless: the busiest expert-parallel rank then sets the pace, about 1–3 % above the "
     "mean under random routing, more with a trained router."),
    ("MoE pad to capacity", "moe-pad-to-capacity", "With a capacity factor, every expert's input is padded to the "
     "capacity (Megatron's --moe-pad-expert-input-to-capacity): dispatch and expert GEMMs always carry the factor × "
     "the mean, in exchange for fixed shapes (CUDA graphs)."),
    ("bf16 gradient reduce", "grad-reduce-bf16", "Megatron keeps fp32 gradients and reduces them in fp32 by default; "
     "with --grad-reduce-in-bf16 (NVIDIA's NeMo performance recipes) the gradient buffer and its reduce-scatter are "
     "bf16: half the bytes in memory and on the network."),
    ("fused SwiGLU", "fused-swiglu", "A PyTorch model's SwiGLU as one kernel (Liger-Kernel): it keeps only the gate "
     "and up projections' outputs for the backward and writes their gradients into them, so each layer holds one "
     "f-wide activation and two f-wide gradients fewer. Megatron's own SwiGLU is fused already."),
    ("z-loss", "z-loss", "The loss adds PaLM's z-loss, the squared log-sum-exp of the logits times a small multiplier "
     "(OLMo trains with it), to keep the softmax normaliser near 1. Free inside a fused or compiled loss; an eager "
     "PyTorch loss runs logsumexp and its gradient as extra passes over the fp32 logits, about as much again as the "
     "cross-entropy itself. Model code: the exported frameworks have no option for it."),
    ("FP8 recipe", "fp8-recipe", "How an FP8 plan scales its FP8 tensors, which sets what the casts from 16 bits "
     "cost: delayed (Transformer Engine's default: one scale per tensor from past steps, one read), tensorwise "
     "(current per-tensor scaling, NVIDIA's FP8-CS: an extra read for the amax), rowwise (torchao; torchtitan "
     "0.3.0's default: per-row and per-column casts; measured 26-34 % slower than tensorwise in torchtitan's own "
     "tables, more than capplan models), mxfp8 (FP8-MX, Blackwell: a scale per 32 values) and blockwise (DeepSeek-V3's "
     "1x128 / 128x128 blocks, Hopper and Blackwell). auto = the framework's default."),
    ("FP8 attention", "fp8-attention", "Megatron only, with FP8 or NVFP4 linears: the attention's two batched matmuls "
     "(QKᵀ and softmax·V) and their backward run in FP8 too (Transformer Engine's fp8_dot_product_attention, "
     "which NeMo / Megatron-Bridge recipes set; NVIDIA's MLPerf single-node Llama 3.1 8B runs use it — Megatron-LM's "
     "own command line has no flag for it, so its exports refuse the plan). capplan times it by cuDNN's "
     "own benchmark: 1.14× the BF16 kernel on B200/GB200, 1.30× on B300/GB300 (Blackwell Ultra's doubled exponent "
     "rate), no gain assumed elsewhere; the backward keeps the FP8 Q, K and V, 1 byte a value."),
    ("zero.Init", "zero-init", "DeepSpeed ZeRO-3 only. On: the model is created under deepspeed.zero.Init (Hugging Face "
     "Trainer / Accelerate with a ZeRO-3 config, Megatron-DeepSpeed), each parameter partitioned as it is made. Off: a "
     "model built whole (from_pretrained without the DeepSpeed integration) is moved to every GPU whole by "
     "deepspeed.initialize before ZeRO-3 partitions it, so each GPU holds the full 16-bit model at start-up."),
    ("precision", "precision", "The number format the GEMMs run in. bf16 / fp16: 16-bit. fp8: FP8 GEMMs (Transformer "
     "Engine or torchao; Hopper, Ada and later), the rest in bf16. nvfp4: block-scaled 4-bit GEMMs in every "
     "transformer layer's linears (Transformer Engine's NVFP4 recipe under Megatron-Core; Blackwell GPUs only), "
     "attention and the output head in bf16. fp32: TF32 GEMMs. A GPU without the tensor cores for it is refused."),
    ("MFU", "mfu", "Model FLOPs utilisation: the model's useful FLOPs per second (6 · active parameters per token plus "
     "attention) over the GPUs' dense BF16 peak, whatever the precision: FP8 and NVFP4 plans run their GEMMs against "
     "2× (FP8) and 4–6× (NVFP4) that peak and can exceed 100 %. Recomputation does not count."),
    ("HFU", "hfu", "Hardware FLOPs utilisation: like MFU but counting the FLOPs actually executed, recomputation "
     "included."),
    ("track record", "track-record", "How far off capplan has been, out of sample, on published training runs like "
     "the plan (same stack, same GPU, same context-parallel and sequence-length regime, MoE, FP8 or NVFP4 GEMMs, and "
     "the stack's runs "
     "of the last 12 months, today's software): each run predicted "
     "with its own source left out of the fit. The typical error is the largest of those groups' median errors; "
     "read the throughput, step time and days as ± that much."),
    ("goodput", "goodput", "The share of wall-clock time that trains: time lost to failures, restarts and "
     "checkpoints taken out."),
    ("calibrated", "calibrated", "Estimates that use figures measured by benchmark runs on this GPU instead of the "
     "catalog's defaults."),
    ("active parameters", "active", "For a mixture-of-experts model: the parameters one token passes through "
     "(all non-expert parameters plus its top-k experts and any shared experts)."),
)  # fmt: skip

TITLES = {term: text for term, _, text in GLOSSARY}
"""Hover titles by term."""


def title(term: str) -> str:
    return TITLES.get(term, "")


FIELD_TERMS = {
    "tp": "tp", "pp": "pp", "vpp": "vpp", "dp": "dp", "cp": "cp", "ep": "ep", "expert_tp": "expert tp",
    "mtp_layers": "MTP layers", "pipeline_layout": "pipeline layout", "micro_batch": "micro-batch",
    "global_batch": "global batch", "recompute": "recompute", "sequence_parallel": "sequence parallel",
    "offload": "offload", "calibrated": "calibrated", "sharding": "fsdp-full",
    "ddp": "ddp", "zero1": "zero1 / zero2 / zero3", "zero2": "zero1 / zero2 / zero3", "zero3": "zero1 / zero2 / zero3",
    "fsdp-full": "fsdp-full", "fsdp-grad-op": "fsdp-grad-op", "fsdp-hybrid": "fsdp-hybrid",
    "shard_group_size": "fsdp-hybrid", "megatron-distopt": "megatron-distopt",
    "cp_comm_type": "CP communication", "moe_dispatcher": "MoE dispatcher", "moe_a2a_overlap": "MoE all-to-all overlap",
    "moe_capacity_factor": "MoE capacity factor", "moe_pad_to_capacity": "MoE pad to capacity",
    "grad_reduce_bf16": "bf16 gradient reduce", "fused_swiglu": "fused SwiGLU", "z_loss": "z-loss",
    "fp8_attention": "FP8 attention", "fp8_recipe": "FP8 recipe", "nvfp4_rht": "NVFP4 Hadamard transform",
    "zero_init": "zero.Init", "precision": "precision",
    "recompute_layers": "recompute layers", "recompute_modules": "recompute modules",
}  # fmt: skip
"""Planner form fields and option values → the glossary term their hover title explains."""


def field_title(name: str) -> str:
    """The hover title of a form field or option value ('' when the glossary has nothing on it)."""
    if name == "sharding":
        return "How parameters, gradients and optimizer state are split over the data-parallel GPUs (see Glossary)."
    return TITLES.get(FIELD_TERMS.get(name, ""), "")
