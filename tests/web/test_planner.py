"""The planner page: full page vs htmx partial, Vary, GET-able inputs, 422 re-renders keeping input, config.json
upload, export download, and the estimate partial's speed."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

from fastapi.testclient import TestClient

from app.web.forms import DEFAULTS, parse_planner, to_query, values_from_inputs

PARTIAL = {"HX-Request": "true", "HX-Request-Type": "partial"}
LLAMA_CONFIG = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu", "rope_theta": 500000.0,
}  # fmt: skip


def test_home_is_the_planner_with_every_input_and_the_results(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    html = response.text
    assert "<html" in html and 'id="planner"' in html and 'id="results"' in html
    for name in ("model", "gpu", "node", "fabric", "gpus", "seq_len", "global_batch", "tokens", "precision",
                 "optimizer", "framework", "tp", "pp", "vpp", "dp", "cp", "ep", "sharding", "micro_batch",
                 "recompute", "sequence_parallel"):  # fmt: skip
        assert f'name="{name}"' in html, name
    assert "Fits" in html and "Memory per GPU" in html and "Pipeline schedule" in html
    assert "Reliability" in html and "Cost" in html and "Export: launch files" in html
    assert 'hx-trigger="input changed delay:400ms, submit"' in html
    assert "HX-Request-Type" in response.headers["vary"]


def test_partial_is_only_the_results_with_out_of_band_field_messages(client: TestClient) -> None:
    response = client.get("/?" + to_query({**DEFAULTS, "tp": "4"}), headers=PARTIAL)
    html = response.text
    assert response.status_code == 200
    assert "<html" not in html and 'id="planner"' not in html
    assert html.lstrip().startswith('<section id="results"')
    assert 'id="err-tp" hx-swap-oob="true"' in html and 'id="model-summary"' in html
    assert "tp 4" in html
    assert "HX-Request-Type" in response.headers["vary"]


def test_history_restore_or_boost_gets_the_full_page(client: TestClient) -> None:
    html = client.get("/?tp=4", headers={"HX-Request": "true", "HX-Request-Type": "full"}).text
    assert "<html" in html and 'id="planner"' in html


def test_the_url_is_the_scenario(client: TestClient) -> None:
    query = to_query({**DEFAULTS, "model": "llama3.1-8b", "gpus": "16", "tp": "2", "global_batch": "32"})
    html = client.get("/?" + query).text
    assert 'value="16"' in html and "llama3.1-8b on 16" in html
    assert '<option value="llama3.1-8b" selected>' in html


def test_invalid_number_is_a_422_that_keeps_what_was_typed(client: TestClient) -> None:
    response = client.get("/?" + to_query({**DEFAULTS, "tp": "eight", "gpus": "64"}))
    assert response.status_code == 422
    html = response.text
    assert 'value="eight"' in html and "a whole number" in html
    assert 'aria-invalid="true"' in html and "What to fix" in html
    partial = client.get("/?" + to_query({**DEFAULTS, "tp": "eight"}), headers=PARTIAL)
    assert partial.status_code == 422 and "What to fix" in partial.text and "a whole number" in partial.text


def test_expert_tp_is_a_planner_field_whose_errors_land_on_it(client: TestClient) -> None:
    """The planner takes the experts' own TP ("Expert TP"): NVIDIA's folded Qwen3 235B plan on 256 H100 estimates
    and says so in its layout; expert_tp 3 (not a divisor of tp 2) is refused on that field, keeping what was
    typed."""
    moe = {**DEFAULTS, "model": "qwen3-235b-a22b", "gpus": "256", "tp": "2", "pp": "8", "vpp": "4", "ep": "32",
           "global_batch": "8192", "seq_len": "4096", "sequence_parallel": "on", "framework": "megatron",
           "sharding": "megatron-distopt", "precision": "fp8", "recompute": "none"}  # fmt: skip
    assert 'name="expert_tp"' in client.get("/").text
    folded = client.get("/?" + to_query({**moe, "expert_tp": "1"}))
    assert folded.status_code == 200 and "ep 32 (expert tp 1)" in folded.text
    bad = client.get("/?" + to_query({**moe, "expert_tp": "3"}))
    assert bad.status_code == 422 and 'id="err-expert_tp"' in bad.text and 'value="3"' in bad.text


def test_plan_violation_from_the_domain_lands_on_its_field(client: TestClient) -> None:
    response = client.get("/?" + to_query({**DEFAULTS, "tp": "3"}))
    assert response.status_code == 422
    assert 'value="3"' in response.text
    form = parse_planner({**DEFAULTS, "tp": "3"})
    assert form.ok  # well-formed: the estimator refuses it, and says why
    assert 'id="err-tp"' in response.text and "fix" in response.text


def test_overrides_are_applied_and_marked(client: TestClient) -> None:
    html = client.get("/?" + to_query({**DEFAULTS, "o.on_demand_usd_per_hour": "10"})).text
    assert "override" in html and "(1 set)" in html
    assert "$1.25" in html  # 10 $/h over 8 GPUs
    bad = client.get("/?" + to_query({**DEFAULTS, "o.self_build.pue": "0.5"}))
    assert bad.status_code == 422 and "greater than or equal to 1" in bad.text


def test_config_json_upload_redirects_to_a_planner_url_naming_it(client: TestClient) -> None:
    upload = client.post(
        "/planner/hf-config",
        files={"file": ("config.json", json.dumps(LLAMA_CONFIG), "application/json")},
        data={"current": to_query({**DEFAULTS, "gpus": "8", "tp": "1"})},
        follow_redirects=False,
    )
    assert upload.status_code == 303
    params = parse_qs(urlsplit(upload.headers["location"]).query)
    assert params["model"] == ["hf"] and "hf_config" not in params and len(params["config"][0]) == 20
    assert params["gpus"] == ["8"] and len(upload.headers["location"]) < 100  # stored, named by id
    html = client.get(upload.headers["location"]).text
    assert "8.0 B parameters" in html and "B active" in html and "Fits" in html


def test_unreadable_config_is_a_422_with_a_message(client: TestClient) -> None:
    response = client.post(
        "/planner/hf-config", files={"file": ("config.json", b"{nope", "application/json")}
    )
    assert response.status_code == 422
    assert "Not a readable config.json" in response.text


def test_a_too_large_config_keeps_the_inputs_and_says_the_limit(client: TestClient) -> None:
    """A valid 1.5 MB config.json: 'too large' and the limit, not a JSON error from a cut-short read."""
    from app.web.planner import MAX_HF_UPLOAD_BYTES

    cfg = {**LLAMA_CONFIG, "id2label": {str(i): "x" * 40 for i in range(30_000)}}
    body = json.dumps(cfg, indent=2).encode()
    assert MAX_HF_UPLOAD_BYTES < len(body) < 2_000_000
    current = to_query({**DEFAULTS, "gpus": "16", "tp": "2"})
    response = client.post(
        "/planner/hf-config", files={"file": ("config.json", body)}, data={"current": current}
    )
    assert response.status_code == 413 and response.headers["content-type"].startswith("text/html")
    assert "too large" in response.text and f"{MAX_HF_UPLOAD_BYTES:,} bytes" in response.text
    assert "Unterminated" not in response.text and "not a readable" not in response.text.lower()
    assert 'id="f-gpus" name="gpus"' in response.text and 'value="16"' in response.text
    assert 'aria-invalid="true"' in response.text


def test_an_upload_over_the_body_limit_returns_to_the_planner(client: TestClient) -> None:
    """Over the 2 MB request limit the body is never read: back to the page's URL with a message, no raw JSON."""
    referer = "http://testserver/?" + to_query({**DEFAULTS, "gpus": "32"})
    response = client.post(
        "/planner/hf-config",
        files={"file": ("config.json", b" " * 5_000_000)},
        headers={"referer": referer},
        follow_redirects=False,
    )
    assert response.status_code == 303
    location = response.headers["location"]
    assert parse_qs(urlsplit(location).query)["gpus"] == ["32"]
    page = client.get(location)
    assert page.status_code == 413 and "too large" in page.text and "5.0 MB" in page.text
    assert 'value="32"' in page.text and '"detail"' not in page.text
    # the JSON API keeps its JSON 413
    api = client.post(
        "/api/v1/estimate", content=b" " * 3_000_000, headers={"content-type": "application/json"}
    )
    assert api.status_code == 413 and api.json()["detail"][0]["type"] == "too_large"


def test_export_download_matches_the_api(client: TestClient) -> None:
    query = to_query(DEFAULTS)
    page = client.get(f"/planner/export?{query}&format=slurm")
    assert page.status_code == 200
    assert page.headers["content-disposition"] == 'attachment; filename="train.sbatch"'
    form = parse_planner(DEFAULTS)
    assert form.request is not None
    api = client.post(
        "/api/v1/plans/export?format=slurm", json=form.request.model_dump(mode="json", exclude_none=True)
    )
    assert api.content == page.content


def test_values_round_trip_through_stored_inputs() -> None:
    form = parse_planner({**DEFAULTS, "o.self_build.pue": "1.3", "dp": "8"})
    assert form.request is not None
    inputs = form.request.model_dump(mode="json", exclude_none=True) | {"tokens": form.tokens}
    overrides = form.overrides.model_dump(mode="json", exclude_defaults=True)
    again = parse_planner(values_from_inputs(inputs, overrides))
    assert again.request == form.request and again.overrides == form.overrides


def test_catalog_index_moved_to_catalog(client: TestClient) -> None:
    html = client.get("/catalog").text
    assert "/catalog/accelerators" in html and "entries" in html


def test_hardware_figure_override_in_the_planner(client) -> None:
    """A GEMM-efficiency override changes the result, is marked, survives in the URL; a bad one is inline."""
    from urllib.parse import urlencode

    base = client.get("/").text
    html = client.get("/?" + urlencode({"o.figure.efficiency.gemm_efficiency": "0.9"})).text
    assert html != base and "override" in html
    assert "o.figure.efficiency.gemm_efficiency=0.9" in html  # the shareable link keeps it
    bad = client.get("/?" + urlencode({"o.figure.efficiency.gemm_efficiency": "1.7"}))
    assert bad.status_code == 422 and "less than or equal to 1" in bad.text


def test_global_batch_in_tokens(client) -> None:
    """4,194,304 tokens of 8,192-token sequences = 512 sequences; a batch that is no whole number of sequences
    is an inline error."""
    from urllib.parse import urlencode

    in_tokens = client.get("/?" + urlencode({"global_batch": "4194304", "batch_unit": "tokens", "seq_len": "8192",
                                             "gpus": "64", "tp": "8"}))  # fmt: skip
    in_sequences = client.get(
        "/?" + urlencode({"global_batch": "512", "seq_len": "8192", "gpus": "64", "tp": "8"})
    )
    assert in_tokens.status_code == in_sequences.status_code == 200
    pick = lambda html: html[html.index('id="results"') :]  # noqa: E731
    assert pick(in_tokens.text).count("512") >= 1
    bad = client.get("/?" + urlencode({"global_batch": "1000", "batch_unit": "tokens", "seq_len": "8192"}))
    assert bad.status_code == 422 and "not a whole number of 8,192-token sequences" in bad.text


def test_moe_dispatch_fields_reach_the_estimate_and_their_refusals_land_on_the_field(
    client: TestClient,
) -> None:
    """DeepSeek-V3 on 256 H100 (32 nodes), EP 32 across four nodes: DeepEP with the all-to-all overlap trains
    faster than the plain all-to-all; asking torchtitan (fsdp2) for DeepEP is refused on the dispatcher field with
    the form kept as typed."""
    base = {**DEFAULTS, "model": "deepseek-v3", "gpus": "256", "tp": "1", "pp": "8", "vpp": "2", "ep": "32",
            "framework": "megatron", "sharding": "megatron-distopt", "recompute": "selective",
            "precision": "fp8", "global_batch": "4096", "seq_len": "4096"}  # fmt: skip
    html = client.get("/").text
    assert 'name="moe_dispatcher"' in html and 'name="moe_a2a_overlap"' in html
    plain = parse_planner(base)
    fast = parse_planner({**base, "moe_dispatcher": "deepep", "moe_a2a_overlap": "on"})
    assert plain.ok and fast.ok
    assert (fast.request.moe_dispatcher.value, fast.request.moe_a2a_overlap) == ("deepep", True)
    ok = client.get("/?" + to_query({**base, "moe_dispatcher": "deepep", "moe_a2a_overlap": "on"}))
    assert ok.status_code == 200
    assert '<option value="deepep" selected' in ok.text
    refused = client.get("/?" + to_query({**base, "framework": "fsdp2", "sharding": "fsdp-full",
                                          "moe_dispatcher": "deepep"}))  # fmt: skip
    assert refused.status_code == 422
    assert "torchtitan 0.3.0 has no DeepEP/HybridEP token dispatcher" in refused.text
    assert 'name="moe_dispatcher" aria-invalid="true"' in refused.text
    assert '<option value="deepep" selected' in refused.text


def test_recompute_modules_and_layers_reach_the_estimate_and_bad_ones_land_on_their_fields(
    client: TestClient,
) -> None:
    """Megatron's --recompute-modules as a comma-separated field: DeepSeek-V3 with selective recompute of the
    attention core, MoE activation and MLA up-projection keeps less than the attention core alone, and the
    estimate page states the modules; a module Megatron does not have, or moe_act on a dense model, is refused on
    that field with the form kept as typed. Full recompute of 2 layers per chunk reaches the request."""
    base = {**DEFAULTS, "model": "deepseek-v3", "gpus": "256", "tp": "1", "pp": "8", "vpp": "2", "ep": "32",
            "framework": "megatron", "sharding": "megatron-distopt", "recompute": "selective",
            "precision": "fp8", "global_batch": "4096", "seq_len": "4096"}  # fmt: skip
    html = client.get("/").text
    assert 'name="recompute_modules"' in html and 'name="recompute_layers"' in html
    form = parse_planner({**base, "recompute_modules": "core_attn, moe_act,mla_up_proj"})
    assert form.ok, form.errors
    assert [m.value for m in form.request.recompute_modules] == ["core_attn", "moe_act", "mla_up_proj"]
    assert parse_planner(base).request.recompute_modules is None  # empty: the attention core only
    ok = client.get("/?" + to_query({**base, "recompute_modules": "core_attn,moe_act,mla_up_proj"}))
    assert ok.status_code == 200
    assert 'value="core_attn,moe_act,mla_up_proj"' in ok.text
    typo = client.get("/?" + to_query({**base, "recompute_modules": "core_attn,attn_core"}))
    assert typo.status_code == 422
    assert 'name="recompute_modules"' in typo.text and 'value="core_attn,attn_core"' in typo.text
    assert (
        'id="f-recompute_modules" name="recompute_modules" type="text" value="core_attn,attn_core"'
        in typo.text
    )
    assert 'aria-invalid="true" aria-describedby="err-recompute_modules"' in typo.text
    dense = {**DEFAULTS, "framework": "megatron", "sharding": "megatron-distopt", "recompute": "selective",
             "recompute_modules": "moe_act"}  # fmt: skip
    refused = client.get("/?" + to_query(dense))
    assert refused.status_code == 422
    assert 'aria-invalid="true" aria-describedby="err-recompute_modules"' in refused.text
    layers = parse_planner({**DEFAULTS, "recompute": "full", "recompute_layers": "2"})
    assert layers.ok and layers.request.recompute_layers == 2
    assert (
        parse_planner({**DEFAULTS, "recompute_layers": "two"})
        .errors["recompute_layers"]
        .startswith("a whole")
    )


def _tokens_per_s_without_and_with(client: TestClient, base: dict, *options: str) -> tuple[float, float]:
    """The estimate API's tokens/s for the planner form ``base`` without and with the checkbox ``options`` on: both
    forms parse, the options reach the request only when ticked."""
    off, on = parse_planner(base), parse_planner({**base, **dict.fromkeys(options, "on")})
    assert off.ok and on.ok
    assert all(getattr(on.request, o) for o in options) and not any(getattr(off.request, o) for o in options)
    return tuple(
        client.post("/api/v1/estimate", json=form.request.model_dump(mode="json")).json()["tokens_per_s"]
        for form in (off, on)
    )  # type: ignore[return-value]


def test_bf16_gradient_reduce_and_fused_swiglu_reach_the_estimate_and_the_search(client: TestClient) -> None:
    """The planner's two stack options: Llama 3.1 70B on 128 H100 under Megatron (tp 8 · pp 4, the distributed
    optimizer) trains faster with bf16 gradient reduce (half the reduce-scatter); the search page keeps both
    options as it ranks plans, and its rows link back to the planner with them."""
    base = {**DEFAULTS, "gpus": "128", "tp": "8", "pp": "4", "framework": "megatron",
            "sharding": "megatron-distopt", "sequence_parallel": "on", "global_batch": "64"}  # fmt: skip
    html = client.get("/").text
    assert 'name="grad_reduce_bf16"' in html and 'name="fused_swiglu"' in html
    slow, fast = _tokens_per_s_without_and_with(client, base, "grad_reduce_bf16", "fused_swiglu")
    assert fast > slow
    page = client.get("/?" + to_query({**base, "grad_reduce_bf16": "on"}))
    assert page.status_code == 200
    search = client.get("/search?" + to_query({**base, "grad_reduce_bf16": "on", "fused_swiglu": "on"}))
    assert search.status_code == 200
    assert '<input type="hidden" name="grad_reduce_bf16" value="on">' in search.text
    assert '<input type="hidden" name="fused_swiglu" value="on">' in search.text
    assert "grad_reduce_bf16=on" in search.text  # the rows' planner links keep it


def test_z_loss_reaches_the_estimate_and_the_search(client: TestClient) -> None:
    """An eager (uncompiled) PyTorch loss with the z-loss makes extra passes over the fp32 logits: the planner's
    z-loss option slows the estimate of an eager FSDP2 plan and the search page keeps it as it ranks plans."""
    base = {**DEFAULTS, "gpus": "8", "global_batch": "16"}
    assert 'name="z_loss"' in client.get("/").text
    fast, slow = _tokens_per_s_without_and_with(client, base, "z_loss")
    assert slow < fast
    search = client.get("/search?" + to_query({**base, "z_loss": "on"}))
    assert search.status_code == 200
    assert '<input type="hidden" name="z_loss" value="on">' in search.text


def test_fp8_attention_reaches_the_estimate_and_the_search(client: TestClient) -> None:
    """The planner's FP8 attention option: a Megatron FP8 plan on GB200 runs faster with it (cuDNN's FP8 attention,
    1.14× the BF16 kernel there); with bf16 linears the field is marked and every input kept; the search keeps it."""
    base = {**DEFAULTS, "gpu": "gb200", "node": "gb200-nvl72", "gpus": "8", "global_batch": "16", "tp": "1",
            "framework": "megatron", "sharding": "megatron-distopt", "recompute": "none", "precision": "fp8"}  # fmt: skip
    assert 'name="fp8_attention"' in client.get("/").text
    slow, fast = _tokens_per_s_without_and_with(client, base, "fp8_attention")
    assert fast > slow
    page = client.get("/?" + to_query({**base, "precision": "bf16", "fp8_attention": "on"}))
    assert page.status_code == 422 and "fp8 or nvfp4" in page.text and 'value="megatron-distopt"' in page.text
    search = client.get("/search?" + to_query({**base, "fp8_attention": "on"}))
    assert search.status_code == 200
    assert '<input type="hidden" name="fp8_attention" value="on">' in search.text


def test_nvfp4_hadamard_transform_is_a_planner_option_that_reaches_the_estimate_and_the_search(
    client: TestClient,
) -> None:
    """The planner's NVFP4 Hadamard transform option, on by default (Transformer Engine's recipe): off, the same NVFP4
    plan on GB300 is faster by the second quantization pass it skips; the search page keeps it."""
    base = {**DEFAULTS, "gpu": "gb300", "node": "gb300-nvl72", "gpus": "8", "global_batch": "16", "tp": "1",
            "framework": "megatron", "sharding": "megatron-distopt", "recompute": "none", "precision": "nvfp4",
            "nvfp4_rht": "off"}  # fmt: skip
    assert DEFAULTS["nvfp4_rht"] == "on" and 'name="nvfp4_rht"' in client.get("/").text
    without, with_transform = _tokens_per_s_without_and_with(client, base, "nvfp4_rht")
    assert without > with_transform
    search = client.get("/search?" + to_query(base))
    assert search.status_code == 200
    assert '<input type="hidden" name="nvfp4_rht" value="off">' in search.text


def test_zero_init_off_shows_deepspeeds_start_up_copy(client: TestClient) -> None:
    """The planner's zero.Init option (DeepSpeed ZeRO-3): off, Llama 3.1 8B on 8 H200 holds the whole 16-bit model
    on each GPU at start-up (14.96 GiB), which the memory chart draws beside the training stack; the search page
    keeps the option as it ranks plans."""
    base = {**DEFAULTS, "model": "llama3.1-8b", "gpu": "h200-sxm", "gpus": "8", "tp": "1", "pp": "1",
            "framework": "deepspeed", "sharding": "zero3", "global_batch": "8", "seq_len": "8192"}  # fmt: skip
    assert 'name="zero_init"' in client.get("/").text
    whole = parse_planner({**base, "zero_init": "off"})
    assert whole.ok and whole.request.zero_init is False and parse_planner(base).request.zero_init is True
    page = client.get("/?" + to_query({**base, "zero_init": "off"}))
    assert page.status_code == 200 and "start-up copy" in page.text
    assert "start-up copy" not in client.get("/?" + to_query(base)).text
    search = client.get("/search?" + to_query({**base, "zero_init": "off"}))
    assert search.status_code == 200 and '<input type="hidden" name="zero_init" value="off">' in search.text


def test_reliability_is_shown_for_a_gpu_no_offer_prices(client: TestClient) -> None:
    """GB200 has no AWS offer, so the run is not priced; failures and checkpoints need no price, so the
    Reliability panel still carries the plan's MTBF, checkpoint interval and goodput (from its own report, the
    same one the exports take their checkpoint cadence from), and says why days and dollars are missing."""
    query = to_query({**DEFAULTS, "model": "llama3.1-70b", "gpu": "gb200", "gpus": "72", "tp": "1",
                      "global_batch": "72", "tokens": "1e12", "sharding": "fsdp-full"})  # fmt: skip
    html = client.get("/?" + query, headers=PARTIAL).text
    rel = html[html.index('id="h-rel"') : html.index('id="h-cost"')]
    assert "Job MTBF" in rel and "Checkpoint interval" in rel and "Goodput" in rel
    assert "not priced" in rel and "gb200" in rel
    assert "Cost not available" in html


def test_the_results_show_the_track_record_of_comparable_published_runs(client: TestClient) -> None:
    """Next to the throughput: how far off capplan has been out of sample on published runs like this plan."""
    html = client.get("/", headers=PARTIAL).text
    assert "Track record" in html and "typical" in html and "Out of sample on published runs" in html


def test_fp8_recipe_is_a_planner_field_whose_errors_land_on_it(client: TestClient) -> None:
    """The FP8 recipe select reaches the estimate (its assumption row names it); MXFP8 on an H100 is refused on the
    recipe's own field with the form kept as typed, and on a GB200 it is estimated."""
    base = {**DEFAULTS, "model": "llama3.1-8b", "gpus": "8", "tp": "1", "framework": "megatron",
            "sharding": "megatron-distopt", "recompute": "none", "precision": "fp8", "global_batch": "8",
            "seq_len": "8192"}  # fmt: skip
    html = client.get("/").text
    assert 'name="fp8_recipe"' in html and '<option value="auto" selected' in html
    assert parse_planner({**base, "fp8_recipe": "tensorwise"}).request.fp8_recipe.value == "tensorwise"
    refused = client.get("/?" + to_query({**base, "gpu": "h100-sxm", "fp8_recipe": "mxfp8"}))
    assert refused.status_code == 422
    assert "cannot run the mxfp8 FP8 recipe" in refused.text
    assert 'name="fp8_recipe" aria-invalid="true"' in refused.text
    assert '<option value="mxfp8" selected' in refused.text
    ok = client.get("/?" + to_query({**base, "gpu": "gb200", "node": "gb200-nvl72", "fp8_recipe": "mxfp8"}))
    assert ok.status_code == 200, ok.text
    assert '<option value="mxfp8" selected' in ok.text and "FP8 recipe" in ok.text
