"""Reading a Hugging Face ``config.json`` safely: the supported ``model_type`` values,
:class:`ArchitectureImportError`, typed access to the config's fields, the shared field readers, and the size
bounds checked before anything reads the config (a config.json is user input).
"""

from __future__ import annotations

from typing import Any

from app.domain.model.architecture import Activation

SUPPORTED_HF_MODEL_TYPES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gpt2",
    "gpt_neox",
    "deepseek_v3",
    "deepseek_v2",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "phimoe",
    "olmo",
    "olmo2",
    "granite",
    "cohere",
    "cohere2",
    "starcoder2",
    "falcon",
    "internlm2",
)


class ArchitectureImportError(ValueError):
    """A config.json we cannot turn into an :class:`Architecture`; the message names the type and field."""

    def __init__(self, model_type: str | None, field: str | None, reason: str) -> None:
        self.model_type = model_type
        self.field = field
        self.reason = reason
        where = f"model_type {model_type!r}" if model_type is not None else "config"
        if field:
            where += f", field {field!r}"
        super().__init__(f"{where}: {reason} (supported model_type: {', '.join(SUPPORTED_HF_MODEL_TYPES)})")


class _Cfg:
    """Typed, read-only access to a config dict; every miss or wrong type names the field."""

    def __init__(self, config: dict[str, Any], model_type: str) -> None:
        self.config = config
        self.model_type = model_type

    def fail(self, field: str | None, reason: str) -> ArchitectureImportError:
        return ArchitectureImportError(self.model_type, field, reason)

    def integer(self, key: str, default: int | None = None, *, allow_zero: bool = False) -> int:
        value = self.config.get(key)
        if value is None:
            if default is None:
                raise self.fail(key, "required field is missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {value!r}")
        if value < 0 or (value == 0 and not allow_zero):
            raise self.fail(key, f"expected a positive integer, got {value}")
        return value

    def nullable_integer(self, key: str) -> int | None:
        """A key that must be present but may be null (e.g. DeepSeek ``q_lora_rank``)."""
        if key not in self.config:
            raise self.fail(key, "required field is missing (use null to disable it)")
        return None if self.config[key] is None else self.integer(key)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true/false, got {value!r}")
        return value

    def string(self, key: str, default: str) -> str:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.config.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"expected a number, got {value!r}")
        return float(value)

    def integer_list(self, key: str) -> list[int]:
        value = self.config.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.fail(key, f"expected a list of integers, got {value!r}")
        return value


def _gated_activation(cfg: _Cfg) -> Activation:
    # LlamaConfig/MistralConfig/MixtralConfig/Qwen*Config/DeepseekV3Config: hidden_act defaults to "silu";
    # their MLPs are always gated (gate_proj · act · up_proj), so silu means SwiGLU.
    act = cfg.string("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise cfg.fail(
            "hidden_act", f"gated MLP with activation {act!r} is not modelled (only silu → SwiGLU)"
        )
    return "swiglu"


def _plain_gelu(cfg: _Cfg, key: str, default: str) -> Activation:
    act = cfg.string(key, default)
    if not act.startswith("gelu"):
        raise cfg.fail(key, f"activation {act!r} is not modelled (only GELU variants)")
    return "gelu"


def _head_dim(cfg: _Cfg, hidden: int, heads: int, class_default: int | None = None) -> int:
    # Llama/Mistral/Mixtral/Qwen2/Qwen2-MoE/Qwen3-MoE: head_dim None → hidden_size // num_attention_heads.
    # Qwen3Config: head_dim defaults to 128 (class_default).
    if cfg.config.get("head_dim") is not None:
        return cfg.integer("head_dim")
    if class_default is not None:
        return class_default
    if hidden % heads:
        raise cfg.fail("head_dim", f"missing and hidden_size {hidden} is not divisible by {heads} heads")
    return hidden // heads


def _moe_layout(cfg: _Cfg, n_layers: int, moe_indices: set[int]) -> tuple[int, int]:
    """Express a set of MoE layer indices as (first_k_dense_layers, moe_layer_freq), or fail."""
    if not moe_indices:
        raise cfg.fail("mlp_only_layers", "no layer is an MoE layer; import it as a dense model instead")
    first = min(moe_indices)
    for freq in range(1, n_layers + 1):
        if {i for i in range(first, n_layers) if (i - first) % freq == 0} == moe_indices:
            return first, freq
    raise cfg.fail(
        "mlp_only_layers", f"MoE layer pattern {sorted(moe_indices)} is not 'first k dense, then every n-th'"
    )


def _rotary_fraction(cfg: _Cfg, key: str, default: float) -> float:
    rope = cfg.config.get("rope_parameters") or cfg.config.get("rope_scaling") or {}
    if isinstance(rope, dict) and rope.get("partial_rotary_factor") is not None and key not in cfg.config:
        return float(rope["partial_rotary_factor"])
    return cfg.number(key, default)


# -- size bounds, checked before anything reads the config: a config.json is user input, and the sizes in it
# drive work (the estimator loops per layer, the search per expert-parallel degree), so every one is capped
# well above any published model; nesting, integer digits, element count and string length are capped too.

HF_MAX_DEPTH = 20
HF_MAX_INT_DIGITS = 18
HF_MAX_ELEMENTS = 50_000
HF_MAX_STRING_CHARS = 100_000
HF_SIZE_LIMITS: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), 1024),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), 262_144),
    **dict.fromkeys(("num_attention_heads", "num_key_value_heads", "n_head"), 4096),
    **dict.fromkeys(
        ("head_dim", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
        65_536,
    ),
    **dict.fromkeys(
        ("intermediate_size", "n_inner", "moe_intermediate_size", "shared_expert_intermediate_size"),
        1_048_576,
    ),
    "vocab_size": 4_194_304,
    **dict.fromkeys(
        ("num_local_experts", "num_experts", "n_routed_experts", "n_shared_experts", "num_experts_per_tok"),
        4096,
    ),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "n_ctx"), 16_777_216),
    **dict.fromkeys(("first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step"), 1024),
}


def check_hf_config_bounds(config: Any) -> None:
    """Refuse a config.json whose size would make work: nesting over ``HF_MAX_DEPTH``, an integer of more than
    ``HF_MAX_INT_DIGITS`` digits, more than ``HF_MAX_ELEMENTS`` values, a string over ``HF_MAX_STRING_CHARS``
    or holding a NUL character, or a model size over ``HF_SIZE_LIMITS``. Iterative (no recursion), O(size)."""
    if not isinstance(config, dict):
        return
    stack: list[tuple[Any, int, str]] = [(config, 1, "")]
    seen = 0
    while stack:
        value, depth, where = stack.pop()
        seen += 1
        if seen > HF_MAX_ELEMENTS:
            raise ArchitectureImportError(None, None, f"more than {HF_MAX_ELEMENTS:,} values (limit)")
        if isinstance(value, dict | list):
            if depth > HF_MAX_DEPTH:
                raise ArchitectureImportError(
                    None, where or None, f"nested deeper than {HF_MAX_DEPTH} levels (limit)"
                )
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and (len(key) > HF_MAX_STRING_CHARS or "\x00" in key):
                    raise ArchitectureImportError(
                        None, where or None, "a key is too long or holds a NUL character"
                    )
                stack.append((item, depth + 1, f"{where}.{key}" if where else str(key)))
        elif isinstance(value, str):
            if len(value) > HF_MAX_STRING_CHARS:
                raise ArchitectureImportError(
                    None, where, f"string longer than {HF_MAX_STRING_CHARS:,} characters (limit)"
                )
            if "\x00" in value:
                raise ArchitectureImportError(None, where, "string holds a NUL character")
        elif isinstance(value, int) and abs(value) >= 10**HF_MAX_INT_DIGITS:
            raise ArchitectureImportError(None, where, f"integer over {HF_MAX_INT_DIGITS} digits (limit)")
    for key, limit in HF_SIZE_LIMITS.items():
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > limit:
            raise ArchitectureImportError(
                config.get("model_type") if isinstance(config.get("model_type"), str) else None,
                key,
                f"{value:,} is over the limit of {limit:,}",
            )
