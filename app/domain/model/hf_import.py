"""Hugging Face ``config.json`` → :class:`Architecture`: the family table, "import as" a known family for
Llama-shaped configs, the imported model's slug and name, and :func:`architecture_from_hf_config`.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from app.domain.catalog.clock import today
from app.domain.model.architecture import USER_CONFIG_SOURCE, Architecture
from app.domain.model.counts import parameter_counts
from app.domain.model.hf_config import (
    SUPPORTED_HF_MODEL_TYPES,
    ArchitectureImportError,
    _Cfg,
    check_hf_config_bounds,
)
from app.domain.model.hf_families import (
    _GEMMA3_TEXT_DEFAULTS,
    _from_deepseek_v3,
    _from_gpt2,
    _from_gpt_neox,
    _from_llama_like,
    _from_more,
)
from app.domain.provenance import Confidence

_FAMILY = {
    "llama": "llama",
    "mistral": "mistral",
    "mixtral": "mixtral",
    "qwen2": "qwen",
    "qwen2_moe": "qwen",
    "qwen3": "qwen",
    "qwen3_moe": "qwen",
    "gpt2": "gpt",
    "gpt_neox": "gpt-neox",
    "deepseek_v3": "deepseek",
    "deepseek_v2": "deepseek",
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3_text": "gemma",
    "phi3": "phi",
    "phimoe": "phi",
    "olmo": "olmo",
    "olmo2": "olmo",
    "granite": "granite",
    "cohere": "cohere",
    "cohere2": "cohere",
    "starcoder2": "starcoder",
    "falcon": "falcon",
    "internlm2": "internlm",
}

_FAMILY_TITLE = {
    "llama": "Llama", "mistral": "Mistral", "mixtral": "Mixtral", "qwen": "Qwen", "gpt": "GPT-2",
    "gpt-neox": "GPT-NeoX", "deepseek": "DeepSeek", "gemma": "Gemma", "phi": "Phi", "olmo": "OLMo",
    "granite": "Granite", "cohere": "Command (Cohere)", "starcoder": "StarCoder2", "falcon": "Falcon",
    "internlm": "InternLM2",
}  # fmt: skip

IMPORT_AS_KEY = "capplan_import_as"
"""A config.json key the user (or the planner's "import as llama-style" button) adds to read an unknown
``model_type`` whose fields are llama-shaped as a Llama: the value is ``"llama"``."""

LLAMA_STYLE_ASSUMPTIONS = (
    "gated SiLU MLP (SwiGLU: gate, up, down)",
    "RMSNorm before attention and before the MLP",
    "rotary positions",
    "no biases unless attention_bias / mlp_bias say so",
    "num_key_value_heads absent = num_attention_heads",
    "head_dim absent = hidden_size / num_attention_heads",
    "untied embeddings unless tie_word_embeddings is true",
)
"""What importing an unknown model_type as llama-style assumes (said wherever it is offered or used)."""

_LLAMA_SHAPE_KEYS = (
    "hidden_size",
    "num_attention_heads",
    "num_hidden_layers",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)


def llama_shaped(config: Any) -> bool:
    """Whether a config of an unknown model_type carries every size a llama-style import needs (as integers)."""
    return isinstance(config, dict) and all(
        isinstance(config.get(k), int) and not isinstance(config.get(k), bool) for k in _LLAMA_SHAPE_KEYS
    )


def _slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9.\-]+", "-", text.lower()).strip("-.")
    return slug[:64].rstrip("-.") or "imported"


def _rope_router_fields(config: dict[str, Any]) -> dict[str, Any]:
    """RoPE base and scaling, and the MoE router's scoring, from a config.json (keys absent = defaults).

    Only what launch files need (Megatron's --rotary-base, --use-rope-scaling / YaRN flags, router flags);
    none of it changes a parameter count. Values of the wrong type are left to pydantic to reject."""
    out: dict[str, Any] = {}
    if config.get("rope_theta") is not None:
        out["rope_theta"] = config["rope_theta"]
    scaling = config.get("rope_scaling")
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind in ("llama3", "yarn"):
            out["rope_scaling"] = kind
            out["rope_scaling_factor"] = scaling.get("factor")
            out["rope_original_context"] = scaling.get("original_max_position_embeddings")
    if config.get("scoring_func") in ("softmax", "sigmoid"):
        out["router_score_function"] = config["scoring_func"]
    for key, field in (("routed_scaling_factor", "router_topk_scaling_factor"), ("n_group", "router_num_groups"),
                       ("topk_group", "router_group_topk")):  # fmt: skip
        if config.get(key) is not None and config.get("n_routed_experts", config.get("num_local_experts")):
            out[field] = config[key]
    return out


def architecture_from_hf_config(
    config: dict,
    *,
    slug: str | None = None,
    name: str | None = None,
    as_of: str | None = None,
) -> Architecture:
    """Build an :class:`Architecture` from a Hugging Face ``config.json`` already parsed into a dict.

    The dict is read as data only. Raises :class:`ArchitectureImportError` for an unsupported ``model_type``,
    a missing or mistyped field, or a config that describes an inconsistent model.
    """
    if not isinstance(config, dict):
        raise ArchitectureImportError(None, None, f"expected a JSON object, got {type(config).__name__}")
    check_hf_config_bounds(config)
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise ArchitectureImportError(None, "model_type", "required field is missing or not a string")
    extra_notes: list[str] = []
    read_as = model_type
    if model_type not in SUPPORTED_HF_MODEL_TYPES:
        if config.get(IMPORT_AS_KEY) == "llama" and llama_shaped(config):
            read_as = "llama"
            extra_notes.append(
                f"model_type {model_type!r} is not one capplan knows: imported as llama-style, assuming "
                + "; ".join(LLAMA_STYLE_ASSUMPTIONS)
            )
        elif llama_shaped(config):
            raise ArchitectureImportError(
                model_type, "model_type",
                f"unsupported model_type, but its fields are llama-shaped: it can be imported as llama-style "
                f"(add \"{IMPORT_AS_KEY}\": \"llama\")",
            )  # fmt: skip
        else:
            raise ArchitectureImportError(model_type, "model_type", "unsupported model_type")
    source_config = config
    if model_type == "gemma3":
        text = config.get("text_config")
        if not isinstance(text, dict):
            raise ArchitectureImportError(
                model_type, "text_config", "required field is missing or not an object"
            )
        defaulted = [k for k in _GEMMA3_TEXT_DEFAULTS if text.get(k) is None]
        source_config = {**text, **{k: _GEMMA3_TEXT_DEFAULTS[k] for k in defaulted}}
        read_as = "gemma3_text"
        extra_notes.append("the language model only: the vision tower and projector are not counted")
        if defaulted:
            extra_notes.append("text_config omits " + ", ".join(f"{k} (Gemma3TextConfig default "
                               f"{_GEMMA3_TEXT_DEFAULTS[k]:,})" for k in defaulted))  # fmt: skip
    cfg = _Cfg(source_config, read_as)
    if read_as == "gpt2":
        fields = _from_gpt2(cfg)
    elif read_as == "gpt_neox":
        fields = _from_gpt_neox(cfg)
    elif read_as in ("deepseek_v3", "deepseek_v2"):
        fields = _from_deepseek_v3(cfg)
        if read_as == "deepseek_v2":
            fields["router_score_correction_bias"] = (
                False  # DeepSeek-V2's gate has no e_score_correction_bias
            )
    elif read_as in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        fields = _from_llama_like(cfg)
    else:
        fields, more = _from_more(cfg)
        extra_notes += more
    origin = config.get("_name_or_path") if isinstance(config.get("_name_or_path"), str) else None
    origin = origin.strip() or None if origin else None
    notes = f"Imported from a Hugging Face config.json (model_type {model_type})"
    if model_type in ("deepseek_v3", "deepseek_v2") and config.get("num_nextn_predict_layers"):
        notes += (
            f"; the {config['num_nextn_predict_layers']} multi-token-prediction module(s) are not counted"
        )
    if extra_notes:
        notes += "; " + "; ".join(extra_notes)
    family = _FAMILY.get(model_type, "llama-style")
    try:
        arch = Architecture(
            slug=slug or "imported",
            name=name or "imported",
            source=USER_CONFIG_SOURCE,
            as_of=as_of or today().isoformat(),
            confidence=Confidence.high,
            notes=notes + ".",
            family=family,
            hf_model_type=model_type,
            **fields,
            **_rope_router_fields(source_config),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or None
        raise ArchitectureImportError(model_type, loc, first["msg"]) from None
    if slug and name:
        return arch
    auto_name, auto_slug = _imported_name(config, arch, origin)
    return arch.model_copy(update={"slug": slug or auto_slug, "name": name or auto_name})


def _size_words(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 0.95e9 else f"{n / 1e6:.0f}M"


def _imported_name(config: dict[str, Any], arch: Architecture, origin: str | None) -> tuple[str, str]:
    """A name and slug for an imported config: its ``_name_or_path`` (the Hugging Face id) when present, else
    the family, size and ``architectures`` class (e.g. "Mistral 7.2B (MistralForCausalLM)")."""
    if origin:
        return origin[:200], _slugify(origin)
    counts = parameter_counts(arch)
    size = _size_words(counts.total)
    if arch.is_moe:
        size += f"-A{_size_words(counts.active)}"
    title = _FAMILY_TITLE.get(arch.family or "", "Llama-style")
    classes = config.get("architectures")
    cls = classes[0] if isinstance(classes, list) and classes and isinstance(classes[0], str) else None
    name = f"{title} {size}" + (f" ({cls[:80]})" if cls else "")
    return name, _slugify(f"{arch.family or 'imported'}-{size}")
