"""Architectures: presets, exact parameter counts (checked against a torch meta-device build), HF import."""

from __future__ import annotations

import copy
import importlib.util
import shutil
from pathlib import Path

import pytest

from app.domain.catalog.load import load_architectures
from app.domain.catalog.toml_io import CatalogError, check_sources, load_sources
from app.domain.model.architecture import Architecture, architecture_by_slug
from app.domain.model.counts import (
    attention_parameters,
    expert_parameters,
    kv_cache_width,
    kv_dim,
    layer_parameter_counts,
    mlp_parameters,
    parameter_counts,
    q_dim,
    stage_parameter_count,
    v_dim,
)
from app.domain.model.hf_config import SUPPORTED_HF_MODEL_TYPES, ArchitectureImportError
from app.domain.model.hf_import import architecture_from_hf_config
from app.domain.provenance import Confidence

DATA = Path(__file__).resolve().parents[2] / "data"

PRESET_SLUGS = {
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3.1-8b",
    "llama3.1-70b",
    "llama3.1-405b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "qwen2.5-72b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
}

# Published / widely reproduced exact totals (checkpoint tensor counts).
KNOWN_TOTALS = {
    "llama3.1-8b": 8_030_261_248,
    "llama2-7b": 6_738_415_616,
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-72b": 72_706_203_648,
    "deepseek-v3": 671_026_419_200,  # without the multi-token-prediction module
    "qwen3-30b-a3b": 30_532_122_624,  # model card: 30.5B
    "qwen3-235b-a22b": 235_093_634_560,  # model card: 235B
}


@pytest.fixture(scope="module")
def presets(sources):
    return {a.slug: a for a in load_architectures(DATA, sources)}


def _torch_reference():
    pytest.importorskip("torch")
    path = Path(__file__).with_name("torch_reference.py")
    spec = importlib.util.spec_from_file_location("capplan_tests_torch_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMPONENTS = (
    "embedding",
    "position",
    "attention",
    "mlp_dense",
    "experts",
    "shared_experts",
    "router",
    "norms",
    "output_head",
)


def _assert_matches_torch(arch: Architecture) -> None:
    ref = _torch_reference().reference_counts(arch)
    counts = parameter_counts(arch)
    assert counts.total == ref["total"]
    assert {c: getattr(counts, c) for c in COMPONENTS if getattr(counts, c)} == ref["components"]
    kinds = arch.layer_kinds()
    for i, n in ref["per_layer"].items():
        assert counts.layer(kinds[i]).total == n, f"layer {i} ({kinds[i]})"


# -- presets -----------------------------------------------------------------------------------------------


def test_presets_have_exactly_the_agreed_slugs(presets):
    assert set(presets) == PRESET_SLUGS


def test_presets_cite_known_sources(presets, sources):
    for arch in presets.values():
        assert arch.source_keys() <= set(sources)


@pytest.mark.parametrize("slug,total", sorted(KNOWN_TOTALS.items()))
def test_known_exact_totals(presets, slug, total):
    assert parameter_counts(presets[slug]).total == total


def test_gpt3_175b(presets):
    counts = parameter_counts(presets["gpt3-175b"])
    assert counts.total == 174_604_259_328
    assert round(counts.total / 1e9, 1) == 174.6
    assert counts.output_head == 0  # tied
    assert counts.position == 2048 * 12288
    assert presets["gpt3-175b"].figure_provenance("vocab_size").confidence is Confidence.medium
    assert presets["gpt3-175b"].figure_provenance("n_layers").confidence is Confidence.high


@pytest.mark.parametrize("slug", sorted(PRESET_SLUGS))
def test_components_add_up(presets, slug):
    counts = parameter_counts(presets[slug])
    assert sum(getattr(counts, c) for c in COMPONENTS) == counts.total
    layers = sum(
        lc.total * n
        for lc, n in ((counts.dense_layer, counts.n_dense_layers), (counts.moe_layer, counts.n_moe_layers))
        if lc
    )
    assert counts.pre_layers + layers + counts.post_layers == counts.total
    assert counts.active <= counts.total
    assert counts.matmul_weights_active <= counts.active + counts.embedding
    if not presets[slug].is_moe:
        assert counts.active == counts.total
        assert counts.moe_layer is None


def test_moe_active_counts(presets):
    mixtral = parameter_counts(presets["mixtral-8x7b"])
    assert mixtral.active == 12_879_925_248  # the "12.9B active" of the Mixtral paper
    assert mixtral.n_dense_layers == 0 and mixtral.dense_layer is None
    assert mixtral.moe_layer.experts == 8 * mixtral.moe_layer.expert

    ds_arch = presets["deepseek-v3"]
    ds = parameter_counts(ds_arch)
    assert (ds.n_dense_layers, ds.n_moe_layers) == (3, 58)
    assert ds_arch.layer_kinds()[:4] == ("dense", "dense", "dense", "moe")
    assert ds.router == 58 * (256 * 7168 + 256)  # weight + e_score_correction_bias
    assert 37e9 < ds.active < 38e9  # "37B activated"
    assert ds.moe_layer.active == ds.moe_layer.total - (256 - 8) * ds.moe_layer.expert

    # Qwen3 MoE: every layer MoE, 128 experts top-8, no shared expert; model cards: 3.3B and 22B activated
    for slug, active, layers in (
        ("qwen3-30b-a3b", 3_353_032_704, 48),
        ("qwen3-235b-a22b", 22_190_763_520, 94),
    ):
        qwen = parameter_counts(presets[slug])
        assert (qwen.active, qwen.n_dense_layers, qwen.n_moe_layers, qwen.shared_experts) == (
            active,
            0,
            layers,
            0,
        )
        assert qwen.moe_layer.active == qwen.moe_layer.total - (128 - 8) * qwen.moe_layer.expert


def test_shape_helpers(presets):
    llama = presets["llama3.1-8b"]
    assert (q_dim(llama), kv_dim(llama), v_dim(llama), kv_cache_width(llama)) == (4096, 1024, 1024, 2048)
    assert attention_parameters(llama) == 4096 * 4096 * 2 + 2 * 4096 * 1024
    assert mlp_parameters(llama, llama.ffn_hidden_size) == 3 * 4096 * 14336
    assert expert_parameters(llama) == 0
    ds = presets["deepseek-v3"]
    assert kv_cache_width(ds) == 512 + 64
    assert kv_dim(ds) == 128 * 192 and v_dim(ds) == 128 * 128
    assert ds.value_head_dim == 128
    qwen = presets["qwen2.5-72b"]
    assert attention_parameters(qwen) == 2 * 8192 * 8192 + 2 * 8192 * 1024 + (8192 + 2 * 1024)


def test_stage_parameter_counts_cover_the_model(presets):
    for slug in ("llama3.1-70b", "deepseek-v3", "gpt3-175b"):
        arch = presets[slug]
        total = parameter_counts(arch).total
        pp, per = 4, -(-arch.n_layers // 4)
        stages = []
        for s in range(pp):
            first = s * per
            n = min(per, arch.n_layers - first)
            stages.append(
                stage_parameter_count(
                    arch, first, n, is_first=s == 0, is_last=s == pp - 1, tied_copy_on_last_stage=False
                )
            )
        assert sum(stages) == total
    gpt3 = presets["gpt3-175b"]
    emb = parameter_counts(gpt3).embedding
    with_copy = stage_parameter_count(gpt3, 72, 24, is_first=False, is_last=True)
    without = stage_parameter_count(gpt3, 72, 24, is_first=False, is_last=True, tied_copy_on_last_stage=False)
    assert with_copy - without == emb
    assert stage_parameter_count(gpt3, 0, 96, is_first=True, is_last=True) == parameter_counts(gpt3).total
    with pytest.raises(ValueError):
        stage_parameter_count(gpt3, 90, 10, is_first=False, is_last=True)


@pytest.mark.torch
@pytest.mark.parametrize("slug", sorted(PRESET_SLUGS))
def test_presets_match_torch_meta_reference(presets, slug):
    _assert_matches_torch(presets[slug])


def test_architecture_by_slug(presets):
    archs = tuple(presets.values())
    assert architecture_by_slug(archs, "llama2-70b").n_kv_heads == 8
    with pytest.raises(KeyError, match="unknown architecture 'nope'"):
        architecture_by_slug(archs, "nope")


# -- validation --------------------------------------------------------------------------------------------


def _llama_fields(**overrides):
    base = dict(
        slug="t",
        name="t",
        source="user-config",
        as_of="2025",
        n_layers=2,
        hidden_size=64,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        ffn_hidden_size=128,
        activation="swiglu",
        vocab_size=100,
        tied_embeddings=False,
        position="rotary",
        max_context=128,
        norm="rmsnorm",
    )
    return base | overrides


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"n_kv_heads": 3}, "n_heads (4) must be divisible by n_kv_heads (3)"),
        ({"position": "learned"}, "position 'learned' needs max_position_embeddings"),
        (
            {"position": "learned", "max_position_embeddings": 64},
            "max_context (128) exceeds the learned position table",
        ),
        ({"max_position_embeddings": 64}, "use max_context instead"),
        ({"norm_bias": True}, "norm_bias needs norm 'layernorm'"),
        ({"attention": "mla"}, "attention 'mla' needs"),
        ({"kv_lora_rank": 8}, "only apply to attention 'mla'"),
        (
            {"n_experts": 4, "experts_top_k": 5, "expert_ffn_hidden_size": 32},
            "experts_top_k (5) must be between 1 and n_experts (4)",
        ),
        ({"n_experts": 4, "experts_top_k": 2}, "needs expert_ffn_hidden_size"),
        ({"experts_top_k": 2}, "need n_experts > 0"),
        (
            {"n_experts": 4, "experts_top_k": 2, "expert_ffn_hidden_size": 32, "first_k_dense_layers": 2},
            "leaves no MoE layer",
        ),
        (
            {"n_experts": 4, "experts_top_k": 2, "expert_ffn_hidden_size": 32, "n_shared_experts": 1},
            "needs shared_expert_ffn_hidden_size",
        ),
        ({"activation": "relu"}, "activation"),
        ({"rotary_fraction": 0.5, "position": "alibi"}, "rotary_fraction only applies"),
    ],
)
def test_validation_messages(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Architecture(**_llama_fields(**overrides))


def test_architecture_is_frozen(presets):
    with pytest.raises(ValueError):
        presets["llama2-7b"].n_layers = 3


def test_mla_head_dim_must_be_nope_plus_rope():
    fields = _llama_fields(
        attention="mla", n_kv_heads=4, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8
    )
    with pytest.raises(ValueError, match="head_dim \\(16\\) must equal"):
        Architecture(**fields)
    arch = Architecture(**(fields | {"head_dim": 12}))
    assert parameter_counts(arch).total > 0


def test_moe_layer_pattern():
    arch = Architecture(
        **_llama_fields(
            n_layers=8,
            n_experts=4,
            experts_top_k=1,
            expert_ffn_hidden_size=32,
            first_k_dense_layers=1,
            moe_layer_freq=2,
        )
    )
    assert arch.layer_kinds() == ("dense", "moe", "dense", "moe", "dense", "moe", "dense", "moe")
    counts = parameter_counts(arch)
    assert (counts.n_dense_layers, counts.n_moe_layers) == (4, 4)
    assert layer_parameter_counts(arch, "moe").kind == "moe"
    with pytest.raises(IndexError):
        arch.is_moe_layer(8)


# -- catalog loading errors --------------------------------------------------------------------------------


def _copy_data(tmp_path: Path, text: str) -> Path:
    for f in DATA.glob("sources*.toml"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "architectures.toml").write_text(text)
    return tmp_path


def test_load_rejects_unknown_source(tmp_path, sources):
    text = (
        (DATA / "architectures.toml").read_text().replace('source = "MDL-HF-LLAMA2-7B"', 'source = "NOPE"', 1)
    )
    d = _copy_data(tmp_path, text)
    with pytest.raises(CatalogError, match="unknown source key 'NOPE'"):
        load_architectures(d, load_sources(d))


def test_load_rejects_malformed_entry(tmp_path):
    text = (DATA / "architectures.toml").read_text().replace("n_kv_heads = 8\n", "n_kv_heads = 7\n", 1)
    d = _copy_data(tmp_path, text)
    with pytest.raises(CatalogError, match=r"architectures.toml: architecture\[3\] \('llama2-70b'\)") as exc:
        load_architectures(d, load_sources(d))
    assert "divisible" in str(exc.value)


def test_load_rejects_duplicate_slug_and_bad_toml(tmp_path):
    blocks = (DATA / "architectures.toml").read_text().split("\n[[architecture]]\n")
    block = next(b for b in blocks if 'slug = "llama2-7b"' in b) + "\n"
    d = _copy_data(tmp_path, "[[architecture]]\n" + block + "[[architecture]]\n" + block)
    with pytest.raises(CatalogError, match="duplicate slug 'llama2-7b'"):
        load_architectures(d, load_sources(d))
    (tmp_path / "architectures.toml").write_text("[[architecture]\n")
    with pytest.raises(CatalogError, match="not valid TOML"):
        load_architectures(d, load_sources(d))


# -- Hugging Face import -------------------------------------------------------------------------------------

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
}

MISTRAL_7B = {
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
}

MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "rope_theta": 1e6,
    "router_aux_loss_coef": 0.02,
    "sliding_window": None,
    "tie_word_embeddings": False,
}

QWEN25_72B = {
    "model_type": "qwen2",
    "hidden_size": 8192,
    "intermediate_size": 29568,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
}

QWEN25_05B = QWEN25_72B | {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}

QWEN15_MOE_A27B = {
    "model_type": "qwen2_moe",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 151936,
    "max_position_embeddings": 8192,
    "decoder_sparse_step": 1,
    "norm_topk_prob": False,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

QWEN3_8B = {
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "attention_bias": False,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

QWEN3_30B_A3B = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "tie_word_embeddings": False,
}

# Qwen/Qwen3-235B-A22B config.json (the fields the importer reads)
QWEN3_235B_A22B = QWEN3_30B_A3B | {
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_hidden_layers": 94,
    "num_attention_heads": 64,
    "rope_theta": 1000000.0,
}

GPT2_SMALL = {
    "model_type": "gpt2",
    "activation_function": "gelu_new",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
    "layer_norm_epsilon": 1e-05,
}

PYTHIA_160M = {
    "model_type": "gpt_neox",
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "vocab_size": 50304,
    "max_position_embeddings": 2048,
    "rotary_pct": 0.25,
    "rotary_emb_base": 10000,
    "use_parallel_residual": True,
    "hidden_act": "gelu",
    "tie_word_embeddings": False,
}

GPT_NEOX_20B = PYTHIA_160M | {
    "hidden_size": 6144,
    "intermediate_size": 24576,
    "num_attention_heads": 64,
    "num_hidden_layers": 44,
    "vocab_size": 50432,
}

DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "n_group": 8,
    "topk_group": 4,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "norm_topk_prob": True,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "hidden_act": "silu",
    "max_position_embeddings": 163840,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
    "num_nextn_predict_layers": 1,
    "attention_bias": False,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
}

HF_CASES = {
    # name: (config, exact total, active or None)
    "llama3.1-8b": (LLAMA31_8B, 8_030_261_248, None),
    "llama2-7b": (LLAMA2_7B, 6_738_415_616, None),
    "mistral-7b": (MISTRAL_7B, 7_241_732_096, None),
    "mixtral-8x7b": (MIXTRAL_8X7B, 46_702_792_704, 12_879_925_248),
    "qwen2.5-72b": (QWEN25_72B, 72_706_203_648, None),
    "qwen2.5-0.5b": (QWEN25_05B, 494_032_768, None),
    "qwen1.5-moe-a2.7b": (QWEN15_MOE_A27B, 14_315_784_192, 2_689_173_504),
    "qwen3-8b": (QWEN3_8B, 8_190_735_360, None),
    "qwen3-30b-a3b": (QWEN3_30B_A3B, 30_532_122_624, 3_353_032_704),
    "gpt2": (GPT2_SMALL, 124_439_808, None),
    "pythia-160m": (PYTHIA_160M, 162_322_944, None),
    "gpt-neox-20b": (GPT_NEOX_20B, 20_554_567_680, None),
    "deepseek-v3": (DEEPSEEK_V3, 671_026_419_200, None),
}


def test_hf_cases_cover_every_supported_model_type():
    from tests.domain.test_hf_families import (
        PUBLISHED,
        _config,
    )  # the later families, against published counts

    covered = {cfg["model_type"] for cfg, _, _ in HF_CASES.values()} | {
        _config(n)["model_type"] for n in PUBLISHED
    }
    assert covered == set(SUPPORTED_HF_MODEL_TYPES)


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_import_exact_counts(case, sources):
    config, total, active = HF_CASES[case]
    arch = architecture_from_hf_config(copy.deepcopy(config), as_of="2025-01-01")
    counts = parameter_counts(arch)
    assert counts.total == total
    if active is not None:
        assert counts.active == active
    assert arch.source == "user-config" and arch.hf_model_type == config["model_type"]
    check_sources(Path("imported"), "architecture", (arch,), sources)


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_import_matches_torch_meta_reference(case):
    _assert_matches_torch(architecture_from_hf_config(HF_CASES[case][0], as_of="2025"))


def test_hf_import_equals_preset(presets):
    identity = {
        "slug",
        "name",
        "source",
        "as_of",
        "confidence",
        "notes",
        "provenance",
        "family",
        "hf_model_type",
    }
    for preset_slug, config in (
        ("llama3.1-8b", LLAMA31_8B),
        ("mixtral-8x7b", MIXTRAL_8X7B),
        ("qwen2.5-72b", QWEN25_72B),
        ("deepseek-v3", DEEPSEEK_V3),
        ("llama2-7b", LLAMA2_7B),
        ("qwen3-30b-a3b", QWEN3_30B_A3B | {"rope_theta": 1000000.0}),
        ("qwen3-235b-a22b", QWEN3_235B_A22B),
    ):
        imported = architecture_from_hf_config(config, slug=preset_slug, name="x", as_of="2025")
        preset = presets[preset_slug]
        assert imported.model_dump(exclude=identity) == preset.model_dump(exclude=identity), preset_slug


def test_hf_import_structural_choices():
    qwen = architecture_from_hf_config(QWEN25_72B)
    assert qwen.qkv_bias and not qwen.attn_out_bias
    gpt2 = architecture_from_hf_config(GPT2_SMALL, slug="gpt2", name="GPT-2")
    assert (gpt2.slug, gpt2.name) == ("gpt2", "GPT-2")
    assert gpt2.tied_embeddings and gpt2.position == "learned" and gpt2.max_position_embeddings == 1024
    assert gpt2.ffn_hidden_size == 4 * 768  # n_inner absent → 4·n_embd
    assert gpt2.qkv_bias and gpt2.mlp_bias and gpt2.norm_bias
    neox = architecture_from_hf_config(PYTHIA_160M)
    assert not neox.tied_embeddings and neox.parallel_residual and neox.rotary_fraction == 0.25
    assert parameter_counts(neox).output_head == 50304 * 768  # separate embed_out
    qwen3 = architecture_from_hf_config(QWEN3_8B)
    assert qwen3.qk_norm
    qwen3_no_head_dim = {k: v for k, v in QWEN3_8B.items() if k != "head_dim"}
    assert architecture_from_hf_config(qwen3_no_head_dim).head_dim == 128  # Qwen3Config default
    llama_mha = {k: v for k, v in LLAMA2_7B.items() if k != "num_key_value_heads"}
    assert architecture_from_hf_config(llama_mha).n_kv_heads == 32  # LlamaConfig: None → num_attention_heads
    ds = architecture_from_hf_config(DEEPSEEK_V3)
    assert ds.first_k_dense_layers == 3 and ds.attention == "mla" and ds.router_score_correction_bias
    assert "multi-token-prediction" in ds.notes


def test_hf_import_names_and_slugs():
    named = architecture_from_hf_config(LLAMA31_8B | {"_name_or_path": "meta-llama/Llama-3.1-8B"})
    assert named.slug == "meta-llama-llama-3.1-8b" and named.name == "meta-llama/Llama-3.1-8B"
    anonymous = architecture_from_hf_config(LLAMA31_8B, as_of="2025-02")
    # no _name_or_path: family, size and the architectures class (never "user-llama")
    assert anonymous.slug == "llama-8.0b" and anonymous.as_of == "2025-02"
    assert anonymous.name.startswith("Llama 8.0B")


def test_hf_import_qwen_moe_layer_patterns():
    sparse_every_other = architecture_from_hf_config(QWEN15_MOE_A27B | {"decoder_sparse_step": 2})
    hf_rule = tuple("moe" if (i + 1) % 2 == 0 else "dense" for i in range(24))
    assert sparse_every_other.layer_kinds() == hf_rule
    dense_prefix = architecture_from_hf_config(QWEN3_30B_A3B | {"mlp_only_layers": [0, 1]})
    assert dense_prefix.first_k_dense_layers == 2 and dense_prefix.n_moe_layers == 46
    with pytest.raises(ArchitectureImportError, match="not 'first k dense, then every n-th'"):
        architecture_from_hf_config(QWEN3_30B_A3B | {"mlp_only_layers": [0, 5]})
    no_dense = {k: v for k, v in QWEN3_30B_A3B.items() if k != "intermediate_size"}
    assert parameter_counts(architecture_from_hf_config(no_dense)).total == 30_532_122_624
    with pytest.raises(ArchitectureImportError, match="'intermediate_size'"):
        architecture_from_hf_config(
            {k: v for k, v in QWEN15_MOE_A27B.items() if k != "intermediate_size"}
            | {"decoder_sparse_step": 2}
        )


@pytest.mark.torch
@pytest.mark.parametrize(
    "config",
    [
        QWEN3_30B_A3B | {"mlp_only_layers": [0, 1]},
        QWEN15_MOE_A27B | {"decoder_sparse_step": 2},
        DEEPSEEK_V3 | {"q_lora_rank": None, "attention_bias": True, "n_shared_experts": 2},
        LLAMA31_8B | {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True},
    ],
    ids=["qwen3-moe-dense-prefix", "qwen2-moe-every-other", "mla-without-q-lora", "llama-all-biases-tied"],
)
def test_layouts_and_switches_match_torch_meta_reference(config):
    _assert_matches_torch(architecture_from_hf_config(config))


def test_hf_import_unsupported_model_type_lists_supported():
    with pytest.raises(ArchitectureImportError) as exc:
        architecture_from_hf_config({"model_type": "bert", "hidden_size": 768})
    message = str(exc.value)
    assert "'bert'" in message and "unsupported model_type" in message
    for supported in SUPPORTED_HF_MODEL_TYPES:
        assert supported in message
    assert isinstance(exc.value, ValueError)
    assert exc.value.model_type == "bert" and exc.value.field == "model_type"


@pytest.mark.parametrize(
    "config,field,reason",
    [
        (
            {k: v for k, v in LLAMA31_8B.items() if k != "hidden_size"},
            "hidden_size",
            "required field is missing",
        ),
        ({k: v for k, v in LLAMA31_8B.items() if k != "intermediate_size"}, "intermediate_size", "missing"),
        (
            {k: v for k, v in MISTRAL_7B.items() if k != "num_key_value_heads"},
            "num_key_value_heads",
            "missing",
        ),
        ({k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"}, "num_local_experts", "missing"),
        ({k: v for k, v in GPT2_SMALL.items() if k != "n_positions"}, "n_positions", "missing"),
        ({k: v for k, v in DEEPSEEK_V3.items() if k != "q_lora_rank"}, "q_lora_rank", "use null to disable"),
        (
            {k: v for k, v in QWEN15_MOE_A27B.items() if k != "shared_expert_intermediate_size"},
            "shared_expert_intermediate_size",
            "missing",
        ),
        (LLAMA31_8B | {"hidden_size": "4096"}, "hidden_size", "expected an integer"),
        (LLAMA31_8B | {"num_hidden_layers": 32.0}, "num_hidden_layers", "expected an integer"),
        (LLAMA31_8B | {"num_hidden_layers": True}, "num_hidden_layers", "expected an integer"),
        (LLAMA31_8B | {"vocab_size": 0}, "vocab_size", "positive"),
        (LLAMA31_8B | {"tie_word_embeddings": "no"}, "tie_word_embeddings", "expected true/false"),
        (LLAMA31_8B | {"hidden_act": "gelu"}, "hidden_act", "not modelled"),
        (GPT2_SMALL | {"activation_function": "relu"}, "activation_function", "not modelled"),
        (LLAMA31_8B | {"num_key_value_heads": 5}, None, "divisible by n_kv_heads"),
        ({"hidden_size": 4096}, "model_type", "missing"),
    ],
)
def test_hf_import_errors_name_the_field(config, field, reason):
    with pytest.raises(ArchitectureImportError, match=reason) as exc:
        architecture_from_hf_config(config)
    assert exc.value.field == field
    if field:
        assert repr(field) in str(exc.value)
    assert "supported model_type" in str(exc.value)


def test_hf_import_rejects_non_dict():
    with pytest.raises(ArchitectureImportError, match="expected a JSON object"):
        architecture_from_hf_config(["llama"])  # type: ignore[arg-type]


def test_hf_import_does_not_mutate_or_execute(presets):
    config = copy.deepcopy(LLAMA31_8B) | {"auto_map": {"AutoModel": "evil.Module"}, "trust_remote_code": True}
    before = copy.deepcopy(config)
    architecture_from_hf_config(config)
    assert config == before
