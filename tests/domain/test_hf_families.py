"""Hugging Face config.json import of today's popular open model families, checked against published counts.

The fixtures in hf_configs/ are written by hand from each model's published config.json (only the fields the
import reads, plus a few it must ignore); nothing is fetched. Published figures: model cards and Hugging Face's
safetensors parameter counts, and the papers' tables (Gemma: embedding / non-embedding; DeepSeek-V2: 236B total,
21B active). Where the HF module has a norm Architecture does not describe (Gemma 2/3 post-norms, OLMo's
weightless LayerNorm, Cohere's single norm), the count differs by those few vectors: tolerance 1e-4.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.domain.model.counts import parameter_counts
from app.domain.model.hf_config import SUPPORTED_HF_MODEL_TYPES, ArchitectureImportError
from app.domain.model.hf_import import IMPORT_AS_KEY, architecture_from_hf_config, llama_shaped

CONFIGS = Path(__file__).parent / "hf_configs"

B = 1_000_000_000
M = 1_000_000

# fixture: (what is published, value, the published figure's last digit (rounding unit), active or None)
PUBLISHED: dict[str, tuple[str, float, float, tuple[float, float] | None]] = {
    "gemma-2b": ("total", 2.51 * B, 0.01 * B, None),
    "gemma-7b": ("total", 8.54 * B, 0.01 * B, None),
    "gemma-2-2b": ("total", 2_614_341_888, 1, None),
    "gemma-2-9b": ("total", 9_241_705_984, 1, None),
    "gemma-3-1b": ("total", 999_885_952, 1, None),
    "gemma-3-4b": ("non_embedding", 3_209 * M, 1 * M, None),  # Gemma 3 report, table 1
    "gemma-3-27b": ("non_embedding", 25_600 * M, 1 * M, None),
    "phi-3-mini-4k": ("total", 3_821_079_552, 1, None),
    "phi-3.5-mini": ("total", 3.82 * B, 0.01 * B, None),
    "phi-4": ("total", 14_659_507_200, 1, None),
    "phi-3.5-moe": ("total", 41.9 * B, 0.1 * B, (6.6 * B, 0.1 * B)),
    "olmo-7b": ("total", 6.89 * B, 0.01 * B, None),
    "olmo-2-7b": ("total", 7.30 * B, 0.01 * B, None),
    "olmo-2-13b": ("total", 13.7 * B, 0.1 * B, None),
    "granite-3.0-8b": ("total", 8.17 * B, 0.01 * B, None),
    "command-r-v01": ("total", 34_980_831_232, 1, None),
    "command-r7b": ("total", 8.03 * B, 0.01 * B, None),
    "starcoder2-3b": ("total", 3.03 * B, 0.01 * B, None),
    "starcoder2-15b": ("total", 15_957_889_024, 1, None),
    # Falcon's model cards count the stored lm_head copy of the tied embedding: total + embedding
    "falcon-7b": ("total_with_stored_head", 7.22 * B, 0.01 * B, None),
    "falcon-40b": ("total_with_stored_head", 41.8 * B, 0.1 * B, None),
    "internlm2-7b": ("total", 7.74 * B, 0.01 * B, None),
    "deepseek-v2": ("total", 236 * B, 1 * B, (21 * B, 1 * B)),
    "deepseek-v2-lite": ("total", 15.7 * B, 0.1 * B, None),
}


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _close(ours: float, published: float, unit: float) -> bool:
    return abs(ours - published) <= max(unit / 2, 1e-4 * published)


def test_every_fixture_has_a_published_figure() -> None:
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_counts_match_the_published_figure(name: str) -> None:
    config = _config(name)
    arch = architecture_from_hf_config(config, as_of="2025")
    counts = parameter_counts(arch)
    what, value, unit, active = PUBLISHED[name]
    ours = {
        "total": counts.total,
        "non_embedding": counts.non_embedding,
        "total_with_stored_head": counts.total + counts.embedding,
    }[what]
    assert _close(ours, value, unit), f"{name}: {what} {ours:,} vs published {value:,.0f}"
    if active is not None:
        assert _close(counts.active, *active), f"{name}: active {counts.active:,} vs {active[0]:,.0f}"
    assert arch.hf_model_type == config["model_type"] and arch.source == "user-config"


def test_every_new_family_has_a_fixture() -> None:
    covered = {_config(n)["model_type"] for n in PUBLISHED}
    first_ten = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gpt2", "gpt_neox",
                 "deepseek_v3"}  # fmt: skip  # exact counts in test_architecture.py
    assert set(SUPPORTED_HF_MODEL_TYPES) - first_ten <= covered


def test_structural_choices_per_family() -> None:
    gemma = architecture_from_hf_config(_config("gemma-2-9b"))
    assert gemma.tied_embeddings and gemma.activation == "swiglu" and "GeGLU" in gemma.notes
    assert "post-attention" in gemma.notes
    g3 = architecture_from_hf_config(_config("gemma-3-4b"))
    assert g3.qk_norm and g3.n_heads == 8 and g3.n_kv_heads == 4 and g3.head_dim == 256
    assert "vision tower" in g3.notes and "Gemma3TextConfig default" in g3.notes
    starcoder = architecture_from_hf_config(_config("starcoder2-15b"))
    assert (
        starcoder.activation == "gelu" and starcoder.norm_bias and starcoder.mlp_bias and starcoder.qkv_bias
    )
    falcon = architecture_from_hf_config(_config("falcon-7b"))
    assert falcon.n_kv_heads == 1 and falcon.parallel_residual and falcon.max_context == 2048
    assert "2,048" in falcon.notes
    assert architecture_from_hf_config(_config("falcon-40b")).n_kv_heads == 8
    assert architecture_from_hf_config(_config("falcon-7b") | {"alibi": True}).position == "alibi"
    cohere = architecture_from_hf_config(_config("command-r-v01"))
    assert (
        cohere.norm == "layernorm"
        and not cohere.norm_bias
        and cohere.parallel_residual
        and cohere.tied_embeddings
    )
    v2 = architecture_from_hf_config(_config("deepseek-v2"))
    assert v2.attention == "mla" and not v2.router_score_correction_bias and v2.first_k_dense_layers == 1
    assert architecture_from_hf_config(_config("deepseek-v2-lite")).q_lora_rank is None


def test_imported_models_are_named_from_the_config() -> None:
    named = architecture_from_hf_config(_config("gemma-7b"))
    assert (named.name, named.slug) == ("google/gemma-7b", "google-gemma-7b")
    anonymous = architecture_from_hf_config(_config("phi-4"))
    assert anonymous.name == "Phi 14.7B (Phi3ForCausalLM)" and anonymous.slug == "phi-14.7b"
    moe = architecture_from_hf_config(_config("phi-3.5-moe"))
    assert moe.name.startswith("Phi 41.9B-A6.6B")
    assert "user-" not in anonymous.slug


LLAMA_SHAPED = {
    "model_type": "exaone_like", "architectures": ["NewModelForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 16,
    "vocab_size": 32000, "max_position_embeddings": 4096,
}  # fmt: skip


def test_an_unknown_llama_shaped_type_is_offered_as_llama_style() -> None:
    assert llama_shaped(LLAMA_SHAPED) and not llama_shaped({"model_type": "bert", "hidden_size": 768})
    with pytest.raises(ArchitectureImportError) as refused:
        architecture_from_hf_config(LLAMA_SHAPED)
    assert "llama-shaped" in str(refused.value) and IMPORT_AS_KEY in str(refused.value)
    arch = architecture_from_hf_config(LLAMA_SHAPED | {IMPORT_AS_KEY: "llama"})
    assert arch.family == "llama-style" and arch.hf_model_type == "exaone_like"
    assert "imported as llama-style" in arch.notes and "RMSNorm" in arch.notes
    assert arch.activation == "swiglu" and arch.n_kv_heads == 4 and not arch.tied_embeddings
    assert arch.name.startswith("Llama-style ") and arch.name.endswith("(NewModelForCausalLM)")
    with pytest.raises(ArchitectureImportError, match="unsupported model_type"):
        architecture_from_hf_config({"model_type": "bert", "hidden_size": 768, IMPORT_AS_KEY: "llama"})
