"""POST /api/v1/plans/export: the file for every format, byte-identical to the CLI and to export_plan, with
its media type and filename; 422 naming the field for an unknown format or a malformed plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from app.cli import main
from app.domain.export import EXPORT_FORMATS, export_plan, parse_plan_document

BODY = {
    "model": "llama3.1-70b", "gpu": "h100-sxm", "gpus": 64, "tp": 8, "sharding": "fsdp-full",
    "global_batch": 64, "seq_len": 8192, "recompute": "full", "tokens": 1.5e13,
}  # fmt: skip
CLI_FLAGS = ["--model", "llama3.1-70b", "--gpu", "h100-sxm", "--gpus", "64", "--tp", "8", "--sharding", "fsdp-full",
             "--global-batch", "64", "--seq-len", "8192", "--recompute", "full", "--tokens", "1.5e13"]  # fmt: skip
MEDIA = {
    "json": "application/json", "torchtitan": "text/x-python", "torchrun": "text/x-shellscript",
    "megatron": "text/x-shellscript", "deepspeed": "application/json", "slurm": "text/x-shellscript",
    "k8s": "application/yaml", "k8s-v1": "application/yaml", "prometheus": "application/yaml", "grafana": "application/json",
}  # fmt: skip


def export(client: TestClient, body, fmt: str | None = "json"):
    url = "/api/v1/plans/export" + (f"?format={fmt}" if fmt is not None else "")
    return client.post(url, json=body)


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["capplan", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, _ = capsys.readouterr()
    return code, out


@pytest.fixture
def plan_json(client: TestClient) -> str:
    response = export(client, BODY, "json")
    assert response.status_code == 200, response.text
    return response.text


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_cli_api_and_function_are_byte_identical(
    client: TestClient, monkeypatch, capsys, tmp_path: Path, plan_json: str, fmt: str
) -> None:
    from_request = export(client, BODY, fmt)
    assert from_request.status_code == 200, from_request.text
    from_document = export(client, json.loads(plan_json), fmt)
    direct = export_plan(parse_plan_document(plan_json), fmt)
    code, cli_flags_out = run_cli(monkeypatch, capsys, "export", *CLI_FLAGS, "--format", fmt)
    assert code == 0
    path = tmp_path / "plan.json"
    path.write_text(plan_json)
    code, cli_plan_out = run_cli(monkeypatch, capsys, "export", "--plan", str(path), "--format", fmt)
    assert code == 0
    assert from_request.content == from_document.content == direct.content.encode("utf-8")
    assert cli_flags_out == cli_plan_out == direct.content
    assert from_request.headers["content-type"].split(";")[0] == MEDIA[fmt] == direct.media_type
    assert from_request.headers["content-disposition"] == f'attachment; filename="{direct.filename}"'


def test_default_format_is_the_plan_json(client: TestClient, plan_json: str) -> None:
    response = export(client, BODY, None)
    assert response.status_code == 200 and response.text == plan_json
    body = json.loads(plan_json)
    assert body["schema"] == "capplan.plan/v1" and body["estimate"]["fits"] is True


def test_exported_files_parse(client: TestClient) -> None:
    module = export(client, BODY, "torchtitan").text
    compile(module, "torchtitan_config.py", "exec")
    assert "config.parallelism.tensor_parallel_degree = 8" in module
    job, pvc = yaml.safe_load_all(export(client, BODY, "k8s").text)
    assert job["kind"] == "TrainJob" and job["spec"]["trainer"]["numNodes"] == 8
    assert pvc["kind"] == "PersistentVolumeClaim"
    v1 = next(yaml.safe_load_all(export(client, BODY, "k8s-v1").text))
    assert v1["kind"] == "PyTorchJob" and v1["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 8
    assert json.loads(export(client, BODY, "deepspeed").text)["train_batch_size"] == 64


def test_unknown_format_is_422_listing_the_formats(client: TestClient) -> None:
    response = export(client, BODY, "terraform")
    assert response.status_code == 422
    (item,) = response.json()["detail"]
    assert item["loc"] == ["query", "format"]
    assert all(f"'{fmt}'" in item["msg"] for fmt in EXPORT_FORMATS)


def test_invalid_plan_in_request_is_422_with_the_fix(client: TestClient) -> None:
    response = export(client, {**BODY, "tp": 3}, "slurm")
    assert response.status_code == 422
    items = response.json()["detail"]
    heads = next(i for i in items if i["type"] == "plan.heads-not-divisible")
    assert heads["loc"] == ["body", "tp"] and "fix:" in heads["msg"]


def test_plan_the_framework_refuses_is_422_with_the_nearest_plan(client: TestClient) -> None:
    body = {**BODY, "gpus": 64, "tp": 8, "pp": 2, "global_batch": 64}  # FSDP2 with pp 2
    assert export(client, body, "torchtitan").status_code == 200
    response = export(client, body, "megatron")
    assert response.status_code == 422
    (item,) = response.json()["detail"]
    assert item["loc"] == ["body", "plan", "sharding"] and item["type"] == "plan.framework-refusal"
    assert "not supported with pipeline parallelism" in item["msg"] and "nearest runnable plan" in item["msg"]


def test_bad_request_field_is_422(client: TestClient) -> None:
    response = export(client, {**BODY, "gpus": 0}, "json")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-1] == "gpus"


def test_malformed_plan_document_is_422_naming_the_field(client: TestClient, plan_json: str) -> None:
    doc = json.loads(plan_json)
    doc["plan"]["tp"] = "eight"
    response = export(client, doc, "torchtitan")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "plan_document", "plan", "tp"]

    doc = json.loads(plan_json)
    doc["plan"]["tp"] = 3
    response = export(client, doc, "torchtitan")
    assert response.status_code == 422
    locs = [i["loc"] for i in response.json()["detail"]]
    assert ["body", "plan", "tp"] in locs and ["body", "plan", "dp"] in locs

    doc = json.loads(plan_json)
    doc["figure_overrides"] = {"efficiency.gemm_efficiency": 0.6, "bogus.figure": 1.0}
    response = export(client, doc, "torchrun")
    assert response.status_code == 422
    item = response.json()["detail"][0]
    assert item["loc"] == ["body", "figure_overrides", "bogus", "figure"] and "cannot override" in item["msg"]

    doc = json.loads(plan_json)
    doc["schema"] = "capplan.plan/v0"
    response = export(client, doc, "json")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "plan_document", "schema"]


@pytest.mark.parametrize("body", [[1, 2], "plan", None, {}])
def test_not_an_object_is_422(client: TestClient, body) -> None:
    assert export(client, body, "json").status_code == 422


def test_openapi_documents_the_endpoint(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    op = spec["paths"]["/api/v1/plans/export"]["post"]
    assert {p["name"] for p in op["parameters"]} == {"format"}
    refs = {s["$ref"] for s in op["requestBody"]["content"]["application/json"]["schema"]["oneOf"]}
    assert refs == {"#/components/schemas/EstimateRequest", "#/components/schemas/PlanDocument"}
    assert set(op["responses"]["200"]["content"]) >= set(MEDIA.values())


def test_saved_scenario_exports_the_same_bytes(client: TestClient) -> None:
    headers = {"Authorization": "Bearer test-token"}
    created = client.post("/api/v1/scenarios", json={"name": "70B", "inputs": BODY}, headers=headers)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    for fmt in ("json", "slurm", "prometheus"):
        saved = client.get(f"/api/v1/plans/{sid}/export", params={"format": fmt})
        assert saved.status_code == 200, saved.text
        assert saved.content == export(client, BODY, fmt).content
    assert client.get("/api/v1/plans/999999/export").status_code == 404
    assert client.get(f"/api/v1/plans/{sid}/export", params={"format": "pdf"}).status_code == 422


def test_planner_marks_formats_the_framework_refuses() -> None:
    from app.domain.catalog import load_catalog
    from app.web.forms import parse_planner
    from app.web.planner import exports_for, planner_scenario

    catalog = load_catalog(Path(__file__).resolve().parents[2] / "data")
    form = parse_planner({"model": "llama3.1-70b", "gpu": "h100-sxm", "gpus": "64", "tp": "8", "pp": "2",
                          "global_batch": "64", "seq_len": "8192", "sharding": "fsdp-full", "recompute": "full"})  # fmt: skip
    exports = {e["format"]: e for e in exports_for(planner_scenario(catalog, form))}
    assert exports["megatron"]["filename"] == "" and "not exported" in exports["megatron"]["content"]
    assert exports["torchtitan"]["filename"] == "torchtitan_config.py"
    assert exports["megatron"]["why"] == "the framework cannot run this plan"
    # FP8 attention: Megatron runs it, but Megatron-LM's command line cannot ask for it; the plan JSON carries it
    fp8 = parse_planner({"model": "llama3.1-8b", "gpu": "gb200", "node": "gb200-nvl72", "gpus": "8", "tp": "1",
                         "global_batch": "16", "seq_len": "8192", "framework": "megatron", "precision": "fp8",
                         "sharding": "megatron-distopt", "recompute": "none", "fp8_attention": "on"})  # fmt: skip
    exports = {e["format"]: e for e in exports_for(planner_scenario(catalog, fp8))}
    assert exports["megatron"]["why"] == "Megatron-LM's command line has no flag for this plan"
    assert "no command-line flag for FP8 attention" in exports["megatron"]["content"]
    assert exports["json"]["filename"] and '"fp8_attention": true' in exports["json"]["content"]
