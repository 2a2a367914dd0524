"""One reader per Hugging Face model family (``model_type``): the config's fields → the fields of an
:class:`Architecture`, with a note where the family's structure differs from what Architecture describes.

Policy: sizes (hidden, layers, heads, FFN widths, vocab, expert counts, latent ranks, context) are REQUIRED
even where the HF config class has a default, because those class defaults describe one particular model
size and taking them for a config that omits the key would be a silent guess. Switches (biases, tying,
activation, layer-pattern knobs) and derived widths take the default the HF class itself defines; each is
commented with the class it comes from.
"""

from __future__ import annotations

from typing import Any

from app.domain.model.architecture import Activation
from app.domain.model.hf_config import (
    _Cfg,
    _gated_activation,
    _head_dim,
    _moe_layout,
    _plain_gelu,
    _rotary_fraction,
)


def _from_llama_like(cfg: _Cfg) -> dict[str, Any]:
    mt = cfg.model_type
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    if mt == "llama":
        # LlamaConfig: num_key_value_heads None → num_attention_heads (plain MHA).
        kv_heads = cfg.integer("num_key_value_heads", heads)
    else:
        kv_heads = cfg.integer("num_key_value_heads")
    fields: dict[str, Any] = {
        "n_layers": cfg.integer("num_hidden_layers"),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "head_dim": _head_dim(cfg, hidden, heads, 128 if mt == "qwen3" else None),
        "activation": _gated_activation(cfg),
        "vocab_size": cfg.integer("vocab_size"),
        # every supported HF config class here defaults tie_word_embeddings to False
        "tied_embeddings": cfg.boolean("tie_word_embeddings", False),
        "position": "rotary",
        "max_context": cfg.integer("max_position_embeddings"),
        "rotary_fraction": _rotary_fraction(cfg, "partial_rotary_factor", 1.0),
        "norm": "rmsnorm",
    }
    if mt == "llama":
        # LlamaConfig: attention_bias=False (q, k, v and o), mlp_bias=False.
        bias = cfg.boolean("attention_bias", False)
        fields |= {"qkv_bias": bias, "attn_out_bias": bias, "mlp_bias": cfg.boolean("mlp_bias", False)}
    elif mt in ("qwen2", "qwen2_moe"):
        # Qwen2Attention hard-codes bias=True on q/k/v and False on o_proj; Qwen2MoeConfig.qkv_bias defaults True.
        fields |= {
            "qkv_bias": True if mt == "qwen2" else cfg.boolean("qkv_bias", True),
            "attn_out_bias": False,
        }
    elif mt in ("qwen3", "qwen3_moe"):
        # Qwen3Config/Qwen3MoeConfig: attention_bias=False (q, k, v, o); q_norm/k_norm RMSNorm(head_dim) always.
        bias = cfg.boolean("attention_bias", False)
        fields |= {"qkv_bias": bias, "attn_out_bias": bias, "qk_norm": True}
    # mistral / mixtral: MistralAttention and MixtralAttention have no bias anywhere.

    if mt in ("llama", "mistral", "qwen2", "qwen3"):
        fields["ffn_hidden_size"] = cfg.integer("intermediate_size")
        return fields

    if mt == "mixtral":
        expert_ffn = cfg.integer("intermediate_size")
        return fields | {
            "ffn_hidden_size": expert_ffn,
            "n_experts": cfg.integer("num_local_experts"),
            "experts_top_k": cfg.integer("num_experts_per_tok"),
            "expert_ffn_hidden_size": expert_ffn,
        }

    # qwen2_moe / qwen3_moe: layer i is sparse iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
    # (Qwen2MoeDecoderLayer); decoder_sparse_step defaults to 1 and mlp_only_layers to [] in both config classes.
    n_layers = fields["n_layers"]
    step = cfg.integer("decoder_sparse_step", 1)
    dense_only = set(cfg.integer_list("mlp_only_layers"))
    n_experts = cfg.integer("num_experts")
    moe_indices = {i for i in range(n_layers) if i not in dense_only and (i + 1) % step == 0}
    first_k, freq = _moe_layout(cfg, n_layers, moe_indices)
    fields |= {
        "n_experts": n_experts,
        "experts_top_k": cfg.integer("num_experts_per_tok"),
        "expert_ffn_hidden_size": cfg.integer("moe_intermediate_size"),
        "first_k_dense_layers": first_k,
        "moe_layer_freq": freq,
    }
    has_dense = len(moe_indices) < n_layers
    # intermediate_size only shapes dense layers; a config without dense layers may omit it and then we use the
    # class default (Qwen2MoeConfig 5632, Qwen3MoeConfig 6144) purely to fill the field: it counts nothing.
    fields["ffn_hidden_size"] = cfg.integer(
        "intermediate_size", None if has_dense else (5632 if mt == "qwen2_moe" else 6144)
    )
    if mt == "qwen2_moe":
        # Qwen2MoeSparseMoeBlock always has one shared expert and a shared_expert_gate Linear(hidden, 1, bias=False).
        fields |= {
            "n_shared_experts": 1,
            "shared_expert_ffn_hidden_size": cfg.integer("shared_expert_intermediate_size"),
            "shared_expert_gate": True,
        }
    return fields


def _from_deepseek_v3(cfg: _Cfg) -> dict[str, Any]:
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    n_layers = cfg.integer("num_hidden_layers")
    nope = cfg.integer("qk_nope_head_dim")
    rope = cfg.integer("qk_rope_head_dim")
    first_k = cfg.integer("first_k_dense_replace", allow_zero=True)
    # moe_layer_freq is not a DeepseekV3Config field (HF ignores it); DeepSeek's own modeling code defaults it to 1
    # and makes layer i sparse iff i >= first_k_dense_replace and i % moe_layer_freq == 0.
    freq = cfg.integer("moe_layer_freq", 1)
    moe_indices = {i for i in range(n_layers) if i >= first_k and i % freq == 0}
    first, freq = _moe_layout(cfg, n_layers, moe_indices)
    bias = cfg.boolean("attention_bias", False)  # DeepseekV3Config: attention_bias=False
    n_shared = cfg.integer("n_shared_experts", allow_zero=True)
    expert_ffn = cfg.integer("moe_intermediate_size")
    return {
        "n_layers": n_layers,
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": heads,
        "head_dim": nope + rope,
        "ffn_hidden_size": cfg.integer("intermediate_size"),
        "activation": _gated_activation(cfg),
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean("tie_word_embeddings", False),  # DeepseekV3Config default False
        "position": "rotary",
        "max_context": cfg.integer("max_position_embeddings"),
        "norm": "rmsnorm",
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "attention": "mla",
        "q_lora_rank": cfg.nullable_integer("q_lora_rank"),
        "kv_lora_rank": cfg.integer("kv_lora_rank"),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": cfg.integer("v_head_dim"),
        "n_experts": cfg.integer("n_routed_experts"),
        "experts_top_k": cfg.integer("num_experts_per_tok"),
        "expert_ffn_hidden_size": expert_ffn,
        # DeepseekV3MoE builds ONE shared MLP of width moe_intermediate_size · n_shared_experts; with no biases that
        # holds exactly as many parameters as n_shared_experts experts of width moe_intermediate_size.
        "n_shared_experts": n_shared,
        "shared_expert_ffn_hidden_size": expert_ffn if n_shared else None,
        "first_k_dense_layers": first,
        "moe_layer_freq": freq,
        # DeepseekV3TopkRouter: weight (n_routed_experts, hidden) and an e_score_correction_bias per expert.
        "router_score_correction_bias": True,
    }


def _from_gpt2(cfg: _Cfg) -> dict[str, Any]:
    hidden = cfg.integer("n_embd")
    heads = cfg.integer("n_head")
    positions = cfg.integer("n_positions")
    if hidden % heads:
        raise cfg.fail("n_head", f"n_embd {hidden} is not divisible by n_head {heads}")
    return {
        "n_layers": cfg.integer("n_layer"),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": heads,
        "head_dim": hidden // heads,
        "ffn_hidden_size": cfg.integer("n_inner", 4 * hidden),  # GPT2Config: n_inner None → 4 · n_embd
        "activation": _plain_gelu(cfg, "activation_function", "gelu_new"),  # GPT2Config default "gelu_new"
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean(
            "tie_word_embeddings", True
        ),  # PretrainedConfig default True; GPT-2 ties
        "position": "learned",
        "max_position_embeddings": positions,
        "max_context": positions,
        "norm": "layernorm",
        "norm_bias": True,
        # GPT2Attention c_attn/c_proj and GPT2MLP c_fc/c_proj are Conv1D layers, always with bias.
        "qkv_bias": True,
        "attn_out_bias": True,
        "mlp_bias": True,
    }


def _from_gpt_neox(cfg: _Cfg) -> dict[str, Any]:
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    if hidden % heads:
        raise cfg.fail("num_attention_heads", f"hidden_size {hidden} is not divisible by {heads} heads")
    bias = cfg.boolean(
        "attention_bias", True
    )  # GPTNeoXConfig: attention_bias=True (query_key_value and dense)
    return {
        "n_layers": cfg.integer("num_hidden_layers"),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": heads,
        "head_dim": hidden // heads,
        "ffn_hidden_size": cfg.integer("intermediate_size"),
        "activation": _plain_gelu(cfg, "hidden_act", "gelu"),  # GPTNeoXConfig default "gelu"
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean(
            "tie_word_embeddings", False
        ),  # GPTNeoXConfig default False (embed_out)
        "position": "rotary",
        "max_context": cfg.integer("max_position_embeddings"),
        "rotary_fraction": _rotary_fraction(cfg, "rotary_pct", 0.25),  # GPTNeoXConfig: rotary_pct=0.25
        "norm": "layernorm",
        "norm_bias": True,
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "mlp_bias": True,  # GPTNeoXMLP dense_h_to_4h / dense_4h_to_h always have bias
        "parallel_residual": cfg.boolean("use_parallel_residual", True),  # GPTNeoXConfig default True
    }


# -- more families. Where the HF module has a structure Architecture does not describe, the nearest exact-shape
# choice is taken and the note says what differs (a few norm vectors: under 0.01 % of any published count).

_GEMMA3_TEXT_DEFAULTS = {
    # Gemma3TextConfig class defaults; the multimodal gemma-3 configs' text_config lists only what differs
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262_208,
    "max_position_embeddings": 131_072,
}  # fmt: skip


def _gated_any(cfg: _Cfg, keys: tuple[str, ...], default: str) -> tuple[Activation, str | None]:
    """A gated MLP: SiLU → SwiGLU; GELU variants (GeGLU) have the same three matrices, counted as SwiGLU."""
    key = next((k for k in keys if cfg.config.get(k) is not None), keys[0])
    act = cfg.string(key, default)
    if act in ("silu", "swish"):
        return "swiglu", None
    if act.startswith("gelu"):
        return (
            "swiglu",
            f"GeGLU ({act}) is modelled as a gated MLP with SwiGLU's shapes (same three matrices)",
        )
    raise cfg.fail(key, f"gated MLP with activation {act!r} is not modelled (only SiLU and GELU)")


def _dense_core(cfg: _Cfg, *, kv_default: int | None, tie_default: bool, head_dim_required: bool = False,
                head_dim_default: int | None = None) -> dict[str, Any]:  # fmt: skip
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer("num_attention_heads")
    kv_heads = cfg.integer("num_key_value_heads", heads if kv_default is None else kv_default)
    if head_dim_required and cfg.config.get("head_dim") is None and head_dim_default is None:
        raise cfg.fail("head_dim", "required field is missing")
    return {
        "n_layers": cfg.integer("num_hidden_layers"),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "head_dim": _head_dim(cfg, hidden, heads, head_dim_default),
        "ffn_hidden_size": cfg.integer("intermediate_size"),
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean("tie_word_embeddings", tie_default),
        "position": "rotary",
        "max_context": cfg.integer("max_position_embeddings"),
        "rotary_fraction": _rotary_fraction(cfg, "partial_rotary_factor", 1.0),
        "norm": "rmsnorm",
    }


def _from_more(cfg: _Cfg) -> tuple[dict[str, Any], list[str]]:
    """Families beyond the first ten; returns the fields and what the import approximated or assumed."""
    mt = cfg.model_type
    notes: list[str] = []
    if mt in ("gemma", "gemma2", "gemma3_text"):
        # GemmaConfig/Gemma2Config/Gemma3TextConfig: tie_word_embeddings=True, attention_bias=False, GeGLU MLP.
        fields = _dense_core(cfg, kv_default=None, tie_default=True, head_dim_required=True)
        act, note = _gated_any(cfg, ("hidden_activation", "hidden_act"), "gelu_pytorch_tanh")
        bias = cfg.boolean("attention_bias", False)
        fields |= {"activation": act, "qkv_bias": bias, "attn_out_bias": bias}
        notes += [note] if note else []
        if mt == "gemma3_text":
            fields["qk_norm"] = True  # Gemma3Attention: q_norm/k_norm RMSNorm(head_dim)
        if mt != "gemma":
            notes.append("the extra post-attention and post-MLP norms (2 × hidden per layer) are not counted")
        return fields, notes
    if mt in ("phi3", "granite", "internlm2", "olmo", "olmo2"):
        # Phi3Config/GraniteConfig/InternLM2Config/OlmoConfig/Olmo2Config: num_key_value_heads None → heads,
        # tie_word_embeddings=False; fused qkv / gate_up projections (Phi-3, InternLM2) hold the same weights.
        fields = _dense_core(cfg, kv_default=None, tie_default=False)
        fields["activation"] = _gated_activation(cfg)
        if mt == "internlm2":
            bias = cfg.boolean("bias", False)  # InternLM2: wqkv and wo take config.bias
            fields |= {"qkv_bias": bias, "attn_out_bias": bias}
        elif mt != "phi3":
            bias = cfg.boolean("attention_bias", False)
            fields |= {"qkv_bias": bias, "attn_out_bias": bias}
            if mt == "granite":
                fields["mlp_bias"] = cfg.boolean("mlp_bias", False)
                notes.append("embedding/residual/attention/logit multipliers change no parameter count")
        if mt == "olmo":
            notes.append("OLMo's LayerNorm has no weights; counted as RMSNorm weights (2 × hidden per layer)")
        if mt == "olmo2":
            # Olmo2Attention: q_norm/k_norm RMSNorm over all heads; the norms sit after attention and MLP.
            fields["qk_norm"] = True
            notes.append("q/k norms over the full projection width are counted per head (head_dim)")
        return fields, notes
    if mt in ("cohere", "cohere2"):
        # CohereConfig/Cohere2Config: tie_word_embeddings=True, attention_bias=False; one LayerNorm (no bias) feeds
        # attention and MLP in parallel.
        fields = _dense_core(cfg, kv_default=None, tie_default=True)
        bias = cfg.boolean("attention_bias", False)
        fields |= {"activation": _gated_activation(cfg), "norm": "layernorm", "norm_bias": False,
                   "parallel_residual": True, "qkv_bias": bias, "attn_out_bias": bias}  # fmt: skip
        if cfg.boolean("use_qk_norm", False):
            fields["qk_norm"] = True
            notes.append("Command R+'s per-head q/k LayerNorms are counted as one head_dim vector each")
        notes.append("its single norm per layer is counted as two (hidden extra parameters per layer)")
        return fields, notes
    if mt == "starcoder2":
        # Starcoder2Config: use_bias=True (q, k, v, o, c_fc, c_proj), norm_type "layer_norm" (with bias), plain GELU MLP.
        fields = _dense_core(cfg, kv_default=None, tie_default=True)
        bias = cfg.boolean("use_bias", True)
        fields |= {"activation": _plain_gelu(cfg, "hidden_act", "gelu_pytorch_tanh"), "norm": "layernorm",
                   "norm_bias": True, "qkv_bias": bias, "attn_out_bias": bias, "mlp_bias": bias}  # fmt: skip
        return fields, notes
    if mt == "falcon":
        return _from_falcon(cfg)
    if mt == "phimoe":
        # PhiMoEConfig: LayerNorm with bias, attention_bias=False, lm_head_bias=False, Mixtral-style experts.
        fields = _dense_core(cfg, kv_default=None, tie_default=False)
        bias = cfg.boolean("attention_bias", False)
        expert_ffn = fields["ffn_hidden_size"]
        fields |= {"activation": _gated_activation(cfg), "norm": "layernorm", "norm_bias": True, "qkv_bias": bias,
                   "attn_out_bias": bias, "n_experts": cfg.integer("num_local_experts"),
                   "experts_top_k": cfg.integer("num_experts_per_tok"), "expert_ffn_hidden_size": expert_ffn}  # fmt: skip
        if cfg.boolean("lm_head_bias", False):
            notes.append(f"the output head's bias ({fields['vocab_size']:,} parameters) is not counted")
        return fields, notes
    raise cfg.fail("model_type", "unsupported model_type")  # pragma: no cover - guarded by the caller


def _from_falcon(cfg: _Cfg) -> tuple[dict[str, Any], list[str]]:
    # FalconConfig: attribute_map n_layer/n_head; multi_query=True, new_decoder_architecture=False, parallel_attn=True,
    # bias=False, alibi=False, activation "gelu", ffn_hidden_size None → 4·hidden, max_position_embeddings 2048,
    # tie_word_embeddings True (PretrainedConfig default; FalconForCausalLM ties lm_head to word_embeddings).
    notes: list[str] = []
    c = cfg.config
    layers_key = "num_hidden_layers" if "num_hidden_layers" in c else "n_layer"
    heads_key = "num_attention_heads" if "num_attention_heads" in c else "n_head"
    hidden = cfg.integer("hidden_size")
    heads = cfg.integer(heads_key)
    if hidden % heads:
        raise cfg.fail(heads_key, f"hidden_size {hidden} is not divisible by {heads} heads")
    if cfg.boolean("new_decoder_architecture", False):
        kv_heads = cfg.integer("num_kv_heads", heads)
    elif cfg.boolean("multi_query", True):
        kv_heads = 1
    else:
        kv_heads = heads
    alibi = cfg.boolean("alibi", False)
    if "max_position_embeddings" not in c:
        notes.append("max_position_embeddings absent: FalconConfig's default 2,048 tokens assumed")
    bias = cfg.boolean("bias", False)
    parallel = cfg.boolean("parallel_attn", True) or cfg.boolean("new_decoder_architecture", False)
    if parallel and not cfg.boolean("new_decoder_architecture", False):
        notes.append("its single input LayerNorm per layer is counted as two (2 × hidden extra per layer)")
    fields = {
        "n_layers": cfg.integer(layers_key),
        "hidden_size": hidden,
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "head_dim": hidden // heads,
        "ffn_hidden_size": cfg.integer("ffn_hidden_size", 4 * hidden),
        "activation": _plain_gelu(cfg, "activation", "gelu"),
        "vocab_size": cfg.integer("vocab_size"),
        "tied_embeddings": cfg.boolean("tie_word_embeddings", True),
        "position": "alibi" if alibi else "rotary",
        "max_context": cfg.integer("max_position_embeddings", 2048),
        "norm": "layernorm",
        "norm_bias": True,
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "mlp_bias": bias,
        "parallel_residual": parallel,
    }
    return fields, notes
