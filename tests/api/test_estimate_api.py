"""POST /api/v1/estimate: the documented fields, and 422 with field + reason for every kind of bad input."""

from __future__ import annotations

from fastapi.testclient import TestClient

BASE = {
    "model": "llama3.1-70b", "gpu": "h100-sxm", "gpus": 64, "tp": 8, "pp": 1, "micro_batch": 1,
    "global_batch": 64, "seq_len": 8192, "sharding": "fsdp-full", "recompute": "full", "framework": "fsdp2",
}  # fmt: skip


def post(client: TestClient, **changes):
    body = {**BASE, **changes}
    for k in [k for k, v in changes.items() if v is None]:
        body.pop(k)
    return client.post("/api/v1/estimate", json=body)


def test_estimate_returns_the_documented_fields(client: TestClient) -> None:
    response = post(client, tokens=1e12)
    assert response.status_code == 200, response.text
    body = response.json()
    for key in ("fits", "peak_memory_bytes", "memory_by_stage", "step_time_s", "tokens_per_s",
                "tokens_per_s_per_gpu", "mfu", "hfu", "model_flops_per_token", "assumptions"):  # fmt: skip
        assert key in body, key
    stage = body["memory_by_stage"][0]
    for key in ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "total_bytes"):
        assert isinstance(stage[key], int)
    assert body["plan"]["dp"] == 8  # derived: 64 / (tp 8 · pp 1 · cp 1)
    assert 0 < body["mfu"] < 1 and body["time_to_train_days"] > 0
    assert any(a["source"] == "NV-H100" for a in body["assumptions"])


def test_estimate_counts_in_metrics(client: TestClient) -> None:
    post(client)
    assert 'capplan_estimates_total{surface="api"} 1.0' in client.get("/metrics").text


def test_unknown_model_is_422_naming_the_field(client: TestClient) -> None:
    response = post(client, model="llama9-1t")
    assert response.status_code == 422
    item = response.json()["detail"][0]
    assert item["loc"] == ["body", "model"] and "llama3.1-70b" in item["msg"]


def test_unknown_gpu_is_422(client: TestClient) -> None:
    item = post(client, gpu="h900").json()["detail"][0]
    assert item["loc"] == ["body", "gpu"] and "h100-sxm" in item["msg"]


def test_a_precision_without_its_tensor_cores_is_422_not_500(client: TestClient) -> None:
    """FP8 on an A100 (no FP8 tensor cores) answered HTTP 500 until the twenty-second session; NVFP4 needs
    Blackwell. The search and the sizing build their clusters the same way and refuse it the same way."""
    for gpu, precision, words in (("a100-80gb", "fp8", "no FP8 tensor cores"),
                                  ("h100-sxm", "nvfp4", "no FP4 (NVFP4) tensor cores")):  # fmt: skip
        response = post(client, gpu=gpu, precision=precision)
        assert response.status_code == 422, response.text
        (item,) = response.json()["detail"]
        assert item["loc"] == ["body", "precision"] and words in item["msg"]
    search = client.post("/api/v1/plans/search", json={"model": "llama3.1-8b", "gpu": "a100-80gb", "gpus": 8,
                                                  "global_batch": 8, "seq_len": 4096, "precision": "fp8"})  # fmt: skip
    assert search.status_code == 422 and search.json()["detail"][0]["loc"] == ["body", "precision"]
    ok = post(client, gpu="gb300", node="gb300-nvl72", precision="nvfp4", framework="megatron",
              sharding="megatron-distopt", recompute="none", tp=8)  # fmt: skip
    assert ok.status_code == 200 and ok.json()["plan"]["precision"] == "nvfp4"


def test_fp8_attention_is_422_without_fp8_linears_and_not_exported_as_megatron_lm_args(
    client: TestClient,
) -> None:
    """fp8_attention with bf16 linears is refused on its own field; with FP8 under Megatron it is estimated, the plan
    JSON carries it, and the Megatron-LM formats refuse it on plan.fp8_attention: Megatron-LM core_v0.16.1 has no
    command-line flag for it (make check-exports fed it one and Megatron rejected it as an unrecognized argument)."""
    megatron = dict(gpu="gb200", node="gb200-nvl72", framework="megatron", sharding="megatron-distopt",
                    recompute="none", fp8_attention=True)  # fmt: skip
    response = post(client, **megatron)
    assert response.status_code == 422, response.text
    (item,) = response.json()["detail"]
    assert item["loc"] == ["body", "fp8_attention"] and "fp8 or nvfp4" in item["msg"]
    ok = post(client, precision="fp8", **megatron)
    assert ok.status_code == 200, ok.text
    assert ok.json()["plan"]["fp8_attention"] is True
    body = {**BASE, "precision": "fp8", **megatron}
    plan_json = client.post("/api/v1/plans/export?format=json", json=body)
    assert plan_json.status_code == 200 and '"fp8_attention": true' in plan_json.text
    for fmt in ("megatron", "torchrun", "slurm"):
        refused = client.post(f"/api/v1/plans/export?format={fmt}", json=body)
        assert refused.status_code == 422, (fmt, refused.text)
        (item,) = refused.json()["detail"]
        assert item["loc"] == ["body", "plan", "fp8_attention"] and "no command-line flag" in item["msg"]


def test_fp8_recipe_is_422_where_it_cannot_run_and_reaches_the_estimate_and_exports(
    client: TestClient,
) -> None:
    """MXFP8 needs Blackwell: on H100 the estimate and the search answer 422 on fp8_recipe (not 500); a recipe with
    bf16 linears likewise. On GB200 it is estimated (the assumptions name it), the plan JSON carries it, Megatron-LM's
    arguments ask for it, and torchtitan's export refuses a tensorwise FSDP2 plan on plan.fp8_recipe."""
    megatron = dict(framework="megatron", sharding="megatron-distopt", recompute="none")
    response = post(client, precision="fp8", fp8_recipe="mxfp8", **megatron)
    assert response.status_code == 422, response.text
    (item,) = response.json()["detail"]
    assert item["loc"] == ["body", "fp8_recipe"] and "needs a Blackwell GPU" in item["msg"]
    search = client.post("/api/v1/plans/search", json={"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8,
                                                  "global_batch": 8, "seq_len": 4096, "precision": "fp8",
                                                  "framework": "megatron", "fp8_recipe": "mxfp8"})  # fmt: skip
    assert search.status_code == 422 and search.json()["detail"][0]["loc"] == ["body", "fp8_recipe"]
    # the search's masks are the same rules: Transformer Engine has no row-wise recipe, so no Megatron plan survives
    rowwise = client.post("/api/v1/plans/search", json={"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8,
                                                   "global_batch": 8, "seq_len": 4096, "precision": "fp8",
                                                   "framework": "megatron", "fp8_recipe": "rowwise"})  # fmt: skip
    assert rowwise.status_code == 200 and rowwise.json()["best"] is None
    assert any("no row-wise recipe" in reason for reason in rowwise.json()["rejected"])
    bf16 = post(client, fp8_recipe="tensorwise", **megatron)
    assert bf16.status_code == 422 and bf16.json()["detail"][0]["loc"] == ["body", "fp8_recipe"]
    blackwell = dict(gpu="gb200", node="gb200-nvl72", precision="fp8", fp8_recipe="mxfp8", **megatron)
    ok = post(client, **blackwell)
    assert ok.status_code == 200, ok.text
    assert ok.json()["plan"]["fp8_recipe"] == "mxfp8"
    assert any(a["name"] == "FP8 recipe" and a["value"] == "mxfp8" for a in ok.json()["assumptions"])
    body = {**BASE, **blackwell}
    args = client.post("/api/v1/plans/export?format=megatron", json=body)
    assert args.status_code == 200 and "--fp8-recipe mxfp8" in args.text and "--fp8-format e4m3" in args.text
    titan = {**BASE, "precision": "fp8", "fp8_recipe": "tensorwise"}
    refused = client.post("/api/v1/plans/export?format=torchtitan", json=titan)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "plan", "fp8_recipe"]


def test_nvfp4_rht_reaches_the_estimate_the_search_and_the_launch_environment(client: TestClient) -> None:
    """nvfp4_rht off (NVTE_NVFP4_DISABLE_RHT=1, as MLPerf's NVFP4 runs): one quantization pass fewer, so the same
    NVFP4 plan on GB300 is faster; the plan JSON carries it, the search takes it, and the torchrun script exports
    the variable. A value that is not a boolean is 422 on the field."""
    nvfp4 = dict(gpu="gb300", node="gb300-nvl72", precision="nvfp4", framework="megatron",
                 sharding="megatron-distopt", recompute="none")  # fmt: skip
    on, off = post(client, **nvfp4), post(client, nvfp4_rht=False, **nvfp4)
    assert on.status_code == off.status_code == 200, off.text
    assert off.json()["plan"]["nvfp4_rht"] is False and on.json()["plan"]["nvfp4_rht"] is True
    assert off.json()["tokens_per_s_per_gpu"] > on.json()["tokens_per_s_per_gpu"]
    script = client.post("/api/v1/plans/export?format=torchrun", json={**BASE, **nvfp4, "nvfp4_rht": False})
    assert script.status_code == 200 and "export NVTE_NVFP4_DISABLE_RHT=1" in script.text
    search = client.post("/api/v1/plans/search", json={"model": "llama3.1-8b", "gpu": "gb300", "gpus": 8,
                                                   "global_batch": 8, "seq_len": 4096, "precision": "nvfp4",
                                                   "framework": "megatron", "nvfp4_rht": False})  # fmt: skip
    assert search.status_code == 200 and search.json()["best"]["plan"]["nvfp4_rht"] is False
    bad = post(client, nvfp4_rht="sometimes", **nvfp4)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "nvfp4_rht"]


def test_invalid_plan_is_422_with_the_fix(client: TestClient) -> None:
    response = post(client, tp=3)
    assert response.status_code == 422
    items = response.json()["detail"]
    heads = next(i for i in items if i["type"] == "plan.heads-not-divisible")
    assert heads["loc"] == ["body", "tp"] and "fix:" in heads["msg"]


def test_tp_overlap_the_framework_cannot_run_is_422_naming_the_field(client: TestClient) -> None:
    response = post(client, tp=2, framework="deepspeed", sharding="zero1", tp_comm_overlap=True)
    assert response.status_code == 422
    item = next(i for i in response.json()["detail"] if i["loc"] == ["body", "tp_comm_overlap"])
    assert "DeepSpeed has no TP communication overlap" in item["msg"] and "fix:" in item["msg"]
    assert post(client, tp=2, framework="deepspeed", sharding="zero1").status_code == 200


def test_zero_init_off_reports_deepspeeds_start_up_copy(client: TestClient) -> None:
    """zero_init false (DeepSpeed ZeRO-3 on a model built whole): each stage's startup_bytes is the rank's whole
    16-bit model — Llama 3.1 70B at tp 1: over 140 GB, more than an H100 holds, so the plan that fits under
    zero.Init no longer does; true (the default): 0. Not a boolean: 422 naming the field."""
    ds = dict(tp=1, dp=64, framework="deepspeed", sharding="zero3")
    whole = post(client, **ds, zero_init=False).json()
    assert whole["plan"]["zero_init"] is False
    startup = whole["memory_by_stage"][0]["startup_bytes"]
    assert startup > 70e9 * 2 and whole["peak_memory_bytes"] >= startup and whole["fits"] is False
    sharded = post(client, **ds).json()
    assert sharded["memory_by_stage"][0]["startup_bytes"] == 0 and sharded["fits"] is True
    response = post(client, **ds, zero_init="sometimes")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "zero_init"]


def test_out_of_range_number_is_422(client: TestClient) -> None:
    response = post(client, gpus=0)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "gpus"]


def test_unknown_field_is_rejected(client: TestClient) -> None:
    assert post(client, tensor_parallel=8).status_code == 422


def test_hf_config_instead_of_a_preset(client: TestClient) -> None:
    config = {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
    }  # fmt: skip
    response = post(client, model=None, hf_config=config, gpus=8, tp=1, global_batch=8)
    assert response.status_code == 200, response.text
    assert response.json()["parameters_total"] == 8_030_261_248


def test_malformed_hf_config_is_422(client: TestClient) -> None:
    response = post(client, model=None, hf_config={"model_type": "rwkv"}, gpus=8, tp=1, global_batch=8)
    assert response.status_code == 422
    item = response.json()["detail"][0]
    assert item["loc"] == ["body", "hf_config", "model_type"] and "llama" in item["msg"]


def test_model_and_hf_config_together_is_422(client: TestClient) -> None:
    assert post(client, hf_config={"model_type": "llama"}).status_code == 422


def test_openapi_documents_estimate(client: TestClient) -> None:
    op = client.get("/api/v1/openapi.json").json()["paths"]["/api/v1/estimate"]["post"]
    assert "422" in op["responses"] and "200" in op["responses"]


def test_oversized_body_is_413(client: TestClient) -> None:
    huge = {**BASE, "hf_config": {"padding": "x" * 2_100_000}, "model": None}
    response = client.post("/api/v1/estimate", json=huge)
    assert response.status_code == 413
    assert "over 2,000,000 bytes" in response.json()["detail"][0]["msg"]


def test_streamed_body_over_the_limit_is_413() -> None:
    import asyncio

    from app.main import BodyLimit

    async def app(scope, receive, send):  # reads the whole body, then answers 200
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    chunks = [{"type": "http.request", "body": b"x" * 600, "more_body": True} for _ in range(3)]
    sent: list[dict] = []

    async def receive():
        return chunks.pop(0) if chunks else {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    asyncio.run(BodyLimit(app, max_bytes=1000)(scope, receive, send))
    assert sent[0]["status"] == 413


def test_figure_overrides_over_the_api(client: TestClient) -> None:
    body = post(client, figure_overrides={"efficiency.gemm_efficiency": 0.7}).json()
    assert any(a["source"] == "override" for a in body["assumptions"])
    bad = post(client, figure_overrides={"accelerator.colour": 1}).json()["detail"][0]
    assert bad["loc"] == ["body", "figure_overrides", "accelerator", "colour"] and "overridable" in bad["msg"]


def test_expert_tp_is_accepted_and_a_bad_one_is_422_naming_the_field(client: TestClient) -> None:
    """NVIDIA's Qwen3 235B-A22B plan on 256 H100 runs with the experts folded (expert_tp 1: ep 32 > dp 16); the
    estimate echoes it. expert_tp 3 does not divide tp 2, and on a dense model it is refused: 422 on expert_tp."""
    moe = dict(model="qwen3-235b-a22b", gpus=256, tp=2, pp=8, vpp=4, ep=32, global_batch=8192, seq_len=4096,
               sequence_parallel=True, framework="megatron", sharding="megatron-distopt", precision="fp8",
               recompute="none")  # fmt: skip
    folded = post(client, **moe, expert_tp=1)
    assert folded.status_code == 200, folded.text
    assert folded.json()["plan"]["expert_tp"] == 1
    unfolded = post(client, **moe)
    assert unfolded.status_code == 422
    assert any(i["loc"] == ["body", "ep"] and "expert_tp = 1" in i["msg"] for i in unfolded.json()["detail"])
    for bad in (dict(moe, expert_tp=3), dict(expert_tp=1)):
        response = post(client, **bad)
        assert response.status_code == 422, bad
        assert any(i["loc"] == ["body", "expert_tp"] for i in response.json()["detail"]), response.json()


def test_mtp_and_a_pipeline_layout_over_the_api(client: TestClient) -> None:
    """NVIDIA's DeepSeek-V3 plan on 256 B200 (pp 16, ep 8) with its MTP layer and layout: accepted and echoed; a
    layout with a layer too many, and MTP under FSDP2, are 422 on the field at fault."""
    plan = dict(model="deepseek-v3", gpu="b200", gpus=256, tp=1, pp=16, ep=8, global_batch=4096, seq_len=4096,
                framework="megatron", sharding="megatron-distopt", precision="fp8", recompute="selective")  # fmt: skip
    ok = post(client, **plan, mtp_layers=1, pipeline_layout="Et*4|(t*4|)*14tmL")
    assert ok.status_code == 200, ok.text
    assert (
        ok.json()["plan"]["pipeline_layout"] == "Et*4|(t*4|)*14tmL" and ok.json()["plan"]["mtp_layers"] == 1
    )
    for bad, field in (
        (dict(plan, mtp_layers=1, pipeline_layout="Et*4|(t*4|)*14t*2mL"), "pipeline_layout"),
        (dict(plan, framework="fsdp2", sharding="fsdp-full", pp=1, mtp_layers=1), "mtp_layers"),
    ):
        response = post(client, **bad)
        assert response.status_code == 422, bad
        assert any(i["loc"] == ["body", field] for i in response.json()["detail"]), response.json()


def test_estimate_carries_the_track_record_of_comparable_published_runs(client: TestClient) -> None:
    """The answer says how far off capplan has been, out of sample, on published runs like the plan: a
    torchtitan plan at 128K tokens with cp 4 gets the CP-at-32K+ group, whose median error is the typical one."""
    response = post(client, model="llama3.1-8b", gpus=8, tp=1, cp=4, seq_len=131072, global_batch=2)
    assert response.status_code == 200, response.text
    record = response.json()["track_record"]
    labels = [g["label"] for g in record["groups"]]
    assert labels == [
        "PyTorch FSDP / torchtitan",
        "on h100-sxm",
        "with context parallelism at 32K tokens or more",
    ]
    assert record["typical_abs_error"] == max(g["median_abs_error"] for g in record["groups"])
    assert record["groups"][2]["runs"] >= 3 and record["fit_date"]


def test_cp_comm_type_is_checked_and_reaches_the_estimate(client: TestClient) -> None:
    """An unknown exchange is 422 on the field; all_gather on torchtitan is 422 naming the nearest plan; on Megatron
    the estimate says which exchange it costed."""
    long = dict(gpus=64, tp=8, cp=4, seq_len=131072, global_batch=4, sequence_parallel=True)
    item = post(client, **long, cp_comm_type="ring").json()["detail"][0]
    assert item["loc"] == ["body", "cp_comm_type"] and "all_gather" in item["msg"]
    response = post(client, **long, cp_comm_type="all_gather")
    assert response.status_code == 422, response.text
    assert any("cp_comm_type" in str(d["loc"]) and "p2p" in d["msg"] for d in response.json()["detail"])
    megatron = dict(long, framework="megatron", sharding="megatron-distopt")
    body = post(client, **megatron, cp_comm_type="all_gather").json()
    assert body["plan"]["cp_comm_type"] == "all_gather"
    (cp,) = [a for a in body["assumptions"] if a["name"] == "context parallelism"]
    assert "all-gather" in cp["value"]
    ring = post(client, **megatron).json()
    assert "p2p ring" in [a for a in ring["assumptions"] if a["name"] == "context parallelism"][0]["value"]
