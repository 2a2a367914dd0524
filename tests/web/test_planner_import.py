"""Importing today's model families on the planner: each config.json fixture loads, named from the config, with
its parameter count; an unknown llama-shaped model_type is offered as llama-style, with what is assumed."""

from __future__ import annotations

import html
import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from app.domain.model.counts import parameter_counts
from app.domain.model.hf_import import architecture_from_hf_config
from app.web.forms import DEFAULTS, to_query

CONFIGS = Path(__file__).parents[1] / "domain" / "hf_configs"
SMALL_RUN = {"gpus": "8", "tp": "1", "global_batch": "16", "seq_len": "2048", "tokens": "1e9"}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_each_family_uploads_and_shows_its_count(client: TestClient, path: Path) -> None:
    upload = client.post(
        "/planner/hf-config",
        files={"file": ("config.json", path.read_bytes(), "application/json")},
        data={"current": to_query({**DEFAULTS, **SMALL_RUN})},
        follow_redirects=False,
    )
    assert upload.status_code == 303, upload.text[:300]
    page = client.get(upload.headers["location"])
    arch = architecture_from_hf_config(json.loads(path.read_text()))
    total = parameter_counts(arch).total
    summary = page.text[page.text.index('id="model-summary"') :][:2000]
    assert html.escape(arch.name) in summary and f"{total / 1e9:.1f} B parameters" in summary
    assert "user-" not in summary


UNKNOWN = {
    "model_type": "newlm", "architectures": ["NewLMForCausalLM"], "hidden_size": 2048, "intermediate_size": 5632,
    "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 16, "vocab_size": 32000,
    "max_position_embeddings": 4096,
}  # fmt: skip


def test_an_unknown_llama_shaped_config_offers_llama_style(client: TestClient) -> None:
    params = {**DEFAULTS, **SMALL_RUN, "model": "hf", "hf_config": json.dumps(UNKNOWN)}
    refused = client.get("/?" + to_query(params))
    assert refused.status_code == 422
    assert "Import as llama-style" in refused.text and "RMSNorm" in refused.text
    start = refused.text.index('id="import-llama-style" href="') + len('id="import-llama-style" href="')
    href = html.unescape(refused.text[start : refused.text.index('"', start)])
    query = parse_qs(urlsplit(href).query)
    assert json.loads(query["hf_config"][0])["capplan_import_as"] == "llama" and query["gpus"] == ["8"]
    accepted = client.get(href)
    assert accepted.status_code == 200
    assert "Llama-style" in accepted.text and "NewLMForCausalLM" in accepted.text


def test_an_unknown_config_that_is_not_llama_shaped_is_not_offered(client: TestClient) -> None:
    params = {**DEFAULTS, "model": "hf", "hf_config": json.dumps({"model_type": "bert", "hidden_size": 768})}
    page = client.get("/?" + to_query(params))
    assert page.status_code == 422 and "Import as llama-style" not in page.text
