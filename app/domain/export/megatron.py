"""Megatron-LM arguments for ``pretrain_gpt.py``: parallel sizes, schedule, recompute, batch, precision and
the model shape, as a bash array ``MEGATRON_ARGS`` (one flag, with its value, per line).

Data, tokenizer and learning-rate arguments are the user's: the file says where they go. The data-parallel
size is not an argument — Megatron derives it as world size / (tp · pp · cp).
"""

from __future__ import annotations

from app.domain.estimator.pipeline import chunk_layer_counts, mtp_relief
from app.domain.estimator.plan import Fp8Recipe, Framework, Offload, Optimizer, Precision, Recompute, Sharding
from app.domain.export.document import PlanDocument
from app.domain.export.launch import (
    CHECKPOINT_DIR,
    checkpoint_interval_steps,
    framework_env,
    header_lines,
    steps_or_default,
)
from app.domain.export.text import comment_block, shell_word

Arg = tuple[str, str | tuple[str, ...] | None]  # (flag, value); None for a switch, a tuple for nargs='+'


def pipeline_layout(counts: tuple[int, ...], mtp: int = 0) -> str:
    """Megatron's ``--pipeline-model-parallel-layout`` for capplan's split (``counts`` layers per virtual stage): one
    ``|``-separated entry per virtual stage in layer order, ``E`` the embedding (first), ``t*N`` N transformer
    layers, ``m`` the multi-token prediction layers and ``L`` the loss/output layer (last); e.g. 126 layers on 16
    stages → ``Et*7|t*8|…|t*8|t*7L``."""
    stages = []
    for c, count in enumerate(counts):
        last = c == len(counts) - 1
        stage = ("E" if c == 0 else "") + (f"t*{count}" if count else "") + ("m" * mtp + "L" if last else "")
        stages.append(stage)
    return "|".join(stages)


def _pipeline_args(doc: PlanDocument, notes: list[str]) -> list[Arg]:
    p, arch = doc.plan, doc.arch
    chunks = p.pp * p.vpp
    if p.pipeline_layout:  # the plan's own layout, as the estimate read it
        return [("--pipeline-model-parallel-layout", p.pipeline_layout)]
    if p.pp == 1:
        return []
    counts = chunk_layer_counts(arch.n_layers, chunks, mtp_relief(arch, p.mtp_layers))
    if len(set(counts)) == 1:
        if p.vpp > 1:
            return [("--num-layers-per-virtual-pipeline-stage", str(counts[0]))]
        return []
    # uneven (a remainder, or a last stage lightened for MTP): the explicit per-stage layout (Megatron reads
    # --decoder-first/last-pipeline-num-layers per rank, not per virtual chunk, and builds no model for splits it
    # cannot express)
    return [("--pipeline-model-parallel-layout", pipeline_layout(counts, p.mtp_layers))]


def _sharding_args(doc: PlanDocument, notes: list[str]) -> list[Arg]:
    p = doc.plan
    sh = p.sharding
    out: list[Arg] = []
    if sh.shards_params:
        # validate_args: torch FSDP2 refuses gradient-accumulation fusion and needs a distributed checkpoint
        out += [
            ("--use-torch-fsdp2", None),
            ("--no-gradient-accumulation-fusion", None),
            ("--ckpt-format", "torch_dist"),
        ]
        if sh is not Sharding.fsdp_full:
            notes.append(f"{sh.value} maps to Megatron's torch FSDP2 (fully sharded)")
    elif sh.shards_optimizer:
        out.append(("--use-distributed-optimizer", None))
        if sh is not Sharding.megatron_distopt:
            notes.append(
                f"{sh.value} maps to Megatron's distributed optimizer (optimizer state sharded over dp)"
            )
    if p.dp > 1 and not sh.shards_params:
        out.append(("--overlap-grad-reduce", None))
        if sh.shards_optimizer:
            out.append(("--overlap-param-gather", None))
    if p.offload is Offload.optimizer_cpu:
        # validate_args: CPU offload runs through the precision-aware optimizer (HybridDeviceOptimizer)
        out += [
            ("--optimizer-cpu-offload", None),
            ("--use-precision-aware-optimizer", None),
            ("--overlap-cpu-optimizer-d2h-h2d", None),
        ]
    elif p.offload is not Offload.none:
        notes.append(f"Megatron offloads only the optimizer to CPU; {p.offload.value} is not expressible")
    return out


def moe_layer_pattern(kinds: tuple[str, ...] | list[str]) -> str:
    """Megatron's ``--moe-layer-freq`` pattern, run-length encoded: 3 dense then 58 MoE → ``([0]*3+[1]*58)``."""
    runs: list[list[int]] = []
    for kind in kinds:
        bit = 1 if kind == "moe" else 0
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([bit, 1])
    return "(" + "+".join(f"[{bit}]*{n}" for bit, n in runs) + ")"


def _model_args(doc: PlanDocument, notes: list[str]) -> list[Arg]:
    arch, p = doc.arch, doc.plan
    out: list[Arg] = [
        ("--num-layers", str(arch.n_layers)),
        ("--hidden-size", str(arch.hidden_size)),
        ("--num-attention-heads", str(arch.n_heads)),
        ("--ffn-hidden-size", str(arch.ffn_hidden_size)),
    ]
    if arch.attention == "mla":
        out.append(("--multi-latent-attention", None))
        if arch.q_lora_rank is not None:
            out.append(("--q-lora-rank", str(arch.q_lora_rank)))
        out += [
            ("--kv-lora-rank", str(arch.kv_lora_rank)),
            ("--qk-head-dim", str(arch.qk_nope_head_dim)),
            ("--qk-pos-emb-head-dim", str(arch.qk_rope_head_dim)),
            ("--v-head-dim", str(arch.v_head_dim)),
        ]
    else:
        if arch.n_kv_heads != arch.n_heads:
            out += [("--group-query-attention", None), ("--num-query-groups", str(arch.n_kv_heads))]
        if arch.head_dim * arch.n_heads != arch.hidden_size:
            out.append(("--kv-channels", str(arch.head_dim)))
    if arch.qk_norm:
        out.append(("--qk-layernorm", None))
    if arch.activation == "swiglu":
        out.append(("--swiglu", None))
    out.append(("--normalization", "RMSNorm" if arch.norm == "rmsnorm" else "LayerNorm"))
    if arch.position == "rotary":
        out.append(("--position-embedding-type", "rope"))
        out.append(("--rotary-base", str(round(arch.rope_theta))))
        if arch.rotary_fraction != 1.0:
            out.append(("--rotary-percent", repr(arch.rotary_fraction)))
        if arch.rope_scaling == "llama3":
            out += [("--use-rope-scaling", None), ("--rope-scaling-factor", repr(arch.rope_scaling_factor))]
        elif arch.rope_scaling == "yarn":
            out += [("--rope-type", "yarn"), ("--rotary-scaling-factor", repr(arch.rope_scaling_factor))]
            if arch.attention != "mla":
                notes.append(
                    "Megatron applies YaRN through --rope-type yarn with multi-latent attention only"
                )
        out.append(("--max-position-embeddings", str(max(arch.max_context, p.seq_len))))
    elif arch.position == "learned":
        out.append(("--position-embedding-type", "learned_absolute"))
        out.append(("--max-position-embeddings", str(arch.max_position_embeddings)))
    else:
        notes.append("Megatron GPT has no ALiBi position embedding")
    if not (arch.mlp_bias or arch.attn_out_bias):
        out.append(("--disable-bias-linear", None))
        if arch.qkv_bias:
            out.append(("--add-qkv-bias", None))
    if not arch.tied_embeddings:
        out.append(("--untie-embeddings-and-output-weights", None))
    if arch.parallel_residual:
        notes.append("Megatron GPT has no parallel-residual block (GPT-NeoX): use the GPT-NeoX recipe")
    if arch.n_experts:
        out += [
            ("--num-experts", str(arch.n_experts)),
            ("--moe-router-topk", str(arch.experts_top_k)),
            ("--moe-ffn-hidden-size", str(arch.expert_ffn_hidden_size)),
        ]
        if arch.n_shared_experts:
            width = arch.n_shared_experts * (arch.shared_expert_ffn_hidden_size or 0)
            out.append(("--moe-shared-expert-intermediate-size", str(width)))
        if arch.first_k_dense_layers or arch.moe_layer_freq > 1:
            out.append(("--moe-layer-freq", moe_layer_pattern(arch.layer_kinds())))
        out += _router_args(doc)
        out.append(("--moe-grouped-gemm", None))
        if doc.plan.moe_dispatcher.dedups_per_node:
            # Megatron-Core's flex dispatcher (MoE README at core_v0.16.1: DeepEP removes redundant tokens across
            # nodes; HybridEP is NVIDIA's TMA/IBGDA version); needs the DeepEP (or its hybrid-ep branch) package
            out += [("--moe-token-dispatcher-type", "flex"),
                    ("--moe-flex-dispatcher-backend", doc.plan.moe_dispatcher.value)]  # fmt: skip
        else:
            out.append(("--moe-token-dispatcher-type", "alltoall"))
        if doc.plan.moe_a2a_overlap:
            out += [("--overlap-moe-expert-parallel-comm", None), ("--delay-wgrad-compute", None)]
        if doc.plan.moe_capacity_factor:  # token dropping (TransformerConfig.moe_expert_capacity_factor)
            out.append(("--moe-expert-capacity-factor", f"{doc.plan.moe_capacity_factor:g}"))
            if doc.plan.moe_pad_to_capacity:
                out.append(("--moe-pad-expert-input-to-capacity", None))
    return out


def _router_args(doc: PlanDocument) -> list[Arg]:
    """The router as the architecture record has it (DeepSeek-V3: sigmoid scores, per-expert bias
    updated by the load-balancing rule instead of an auxiliary loss, group-limited routing, scaled top-k)."""
    arch = doc.arch
    out: list[Arg] = []
    if arch.router_score_function != "softmax":
        out.append(("--moe-router-score-function", arch.router_score_function))
    if arch.router_score_correction_bias:
        out += [("--moe-router-enable-expert-bias", None), ("--moe-router-load-balancing-type", "seq_aux_loss"),
                ("--moe-aux-loss-coeff", "0.0001")]  # fmt: skip
    else:
        out += [("--moe-router-load-balancing-type", "aux_loss"), ("--moe-aux-loss-coeff", "0.01")]
    if arch.router_topk_scaling_factor is not None:
        out.append(("--moe-router-topk-scaling-factor", repr(arch.router_topk_scaling_factor)))
    if arch.router_num_groups is not None and arch.router_group_topk is not None:
        out += [("--moe-router-num-groups", str(arch.router_num_groups)),
                ("--moe-router-group-topk", str(arch.router_group_topk))]  # fmt: skip
    out.append(("--moe-router-dtype", "fp32"))
    return out


def megatron_arg_pairs(doc: PlanDocument) -> tuple[list[Arg], list[str]]:
    """(flag, value) pairs in a stable order, and notes on what the plan asked that Megatron cannot express."""
    p = doc.plan
    notes: list[str] = []
    steps, _ = steps_or_default(doc)
    args: list[Arg] = [
        ("--tensor-model-parallel-size", str(p.tp)),
        ("--pipeline-model-parallel-size", str(p.pp)),
        ("--context-parallel-size", str(p.cp)),
        # Transformer Engine's K/V all-gather CP (TransformerConfig.cp_comm_type, passed to TE's attention as is)
        *((("--cp-comm-type", "all_gather"),) if p.cp_gathers_kv else ()),
        ("--expert-model-parallel-size", str(p.ep)),
        *((("--expert-tensor-parallel-size", str(p.etp)),) if doc.arch.is_moe and p.etp != p.tp else ()),
        *_pipeline_args(doc, notes),
        *((("--mtp-num-layers", str(p.mtp_layers)),) if p.mtp_layers else ()),
    ]
    if p.sequence_parallel:
        args.append(("--sequence-parallel", None))
    if p.tp > 1 and p.uses_tp_comm_overlap:
        # Transformer Engine's userbuffers overlap (as the estimate assumed); Megatron asserts sequence parallelism
        if p.sequence_parallel:
            args.append(("--tp-comm-overlap", None))
        else:
            notes.append(
                "TP communication overlap needs --sequence-parallel: not written (nor assumed by the estimate)"
            )
    if p.recompute is Recompute.selective:
        args.append(("--recompute-granularity", "selective"))
        if p.recompute_modules is not None:
            args.append(("--recompute-modules", tuple(m.value for m in p.recompute_modules)))
    elif p.recompute is Recompute.full and p.recompute_layers is not None:
        # block: the first N layers of each pipeline chunk recompute, the rest keep their activations
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "block"),
            ("--recompute-num-layers", str(p.recompute_layers)),
        ]
    elif p.recompute is Recompute.full:
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", "1"),
        ]
    args += [
        ("--micro-batch-size", str(p.micro_batch)),
        ("--global-batch-size", str(p.global_batch)),
        ("--seq-length", str(p.seq_len)),
        ("--train-iters", str(steps)),
        *_sharding_args(doc, notes),
    ]
    if p.precision is Precision.bf16:
        args.append(("--bf16", None))
    elif p.precision is Precision.fp16:
        args.append(("--fp16", None))
    elif p.precision is Precision.fp8:
        # the recipe the estimate's casts assumed (casts.FP8_CAST; Megatron-LM's default is delayed), in its format:
        # E4M3 forward / E5M2 backward for per-tensor scales, E4M3 throughout for the block-scaled recipes (their
        # Transformer Engine default: finer scales need no E5M2 range)
        recipe = p.fp8_recipe_on(Framework.megatron)
        block_scaled = recipe in (Fp8Recipe.mxfp8, Fp8Recipe.blockwise)
        args += [("--bf16", None), ("--fp8-format", "e4m3" if block_scaled else "hybrid"),
                 ("--fp8-recipe", recipe.value), ("--transformer-impl", "transformer_engine")]  # fmt: skip
    elif p.precision is Precision.nvfp4:
        # Transformer Engine's NVFP4BlockScaling (TE >= 2.7) on every transformer layer's linears, as estimated
        args += [("--bf16", None), ("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4"),
                 ("--transformer-impl", "transformer_engine")]  # fmt: skip
    if p.sharding is Sharding.megatron_distopt and p.precision.quantized_gemms:
        # the quantized weights are the primary ones, all-gathered as such, as NVIDIA's recipes run them and the
        # estimate counts them (memory.te_quantized_weight_bytes); Megatron allows it with the distributed optimizer
        args.append(("--fp8-param-gather" if p.precision is Precision.fp8 else "--fp4-param-gather", None))
    if p.uses_fused_loss:
        # the fused loss the estimate assumed: Transformer Engine's Triton cross-entropy (16-bit logits, gradient
        # in place); Megatron's default is the unfused vocab-parallel loss in fp32 (source MEGATRON-CROSS-ENTROPY)
        args += [("--cross-entropy-loss-fusion", None), ("--cross-entropy-fusion-impl", "te")]
    if p.grad_reduce_bf16 and p.precision is not Precision.fp32:
        args.append(("--grad-reduce-in-bf16", None))
    interval, _ = checkpoint_interval_steps(doc)
    args += [("--save", CHECKPOINT_DIR), ("--load", CHECKPOINT_DIR), ("--save-interval", str(interval))]
    if p.optimizer is Optimizer.sgd:
        args.append(("--optimizer", "sgd"))
    else:
        args.append(("--optimizer", "adam"))
        if p.optimizer is Optimizer.adamw_8bit:
            notes.append("Megatron has no 8-bit AdamW: written as --optimizer adam")
    args += _model_args(doc, notes)
    return args, notes


def megatron_args(doc: PlanDocument) -> list[str]:
    """The flat argument list (what ``pretrain_gpt.py`` receives)."""
    pairs, _ = megatron_arg_pairs(doc)
    return [w for flag, value in pairs for w in (flag, *_words(value))]


def _words(value: str | tuple[str, ...] | None) -> tuple[str, ...]:
    return () if value is None else (value,) if isinstance(value, str) else value


def megatron_script(doc: PlanDocument) -> tuple[str, list[str]]:
    pairs, notes = megatron_arg_pairs(doc)
    arch = doc.arch
    _, interval_note = checkpoint_interval_steps(doc)
    head = comment_block(
        [
            *header_lines(doc, "Megatron-LM arguments (bash array for pretrain_gpt.py)"),
            f"vocabulary: {arch.vocab_size} tokens; Megatron takes it from the tokenizer",
            f"--save-interval: {interval_note}; --load resumes from the latest checkpoint on restart",
            "placeholders: --data-path, the tokenizer and the learning rate (yours, below)",
            *(f"note: {n}" for n in notes),
            "usage: source this file, then",
            '  torchrun ... pretrain_gpt.py "${MEGATRON_ARGS[@]}" \\',
            "    --data-path ... --tokenizer-type ... --tokenizer-model ... --lr ... --lr-decay-style cosine",
        ]
    )
    lines = [f"  {flag}" + "".join(f" {shell_word(w)}" for w in _words(value)) for flag, value in pairs]
    env = "".join(f"export {var}={value}  # {comment}\n" for var, value, comment in framework_env(doc))
    if doc.plan.sharding.shards_params:
        env += "unset CUDA_DEVICE_MAX_CONNECTIONS  # torch FSDP2 refuses CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    sourced = "# shellcheck disable=SC2034  # MEGATRON_ARGS is read by the script that sources this file\n"
    return "#!/usr/bin/env bash\n" + head + env + sourced + "MEGATRON_ARGS=(\n" + "\n".join(
        lines
    ) + "\n)\n", notes
