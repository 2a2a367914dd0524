"""A Hugging Face id (org/name) read from the local Hugging Face cache (issue 17, item 1): the cache folder the
hub's own environment variables choose, refs and snapshots, no network ever, a message naming every path looked
at; the JSON API takes the id as ``model`` wherever it takes a preset."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.services.hub_cache import HubConfigError, hub_cache_dir, parse_hub_id, read_hub_config

AUTH = {"Authorization": "Bearer test-token"}
BODY = {"gpu": "h100-sxm", "gpus": 8, "global_batch": 16, "seq_len": 4096, "tokens": 1e10}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args, **_kwargs):
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_cache_folder_follows_the_hub_variables() -> None:
    home = str(Path("~").expanduser())
    assert hub_cache_dir({"HF_HUB_CACHE": "/a", "HF_HOME": "/b"}) == (Path("/a"), "$HF_HUB_CACHE")
    assert hub_cache_dir({"HUGGINGFACE_HUB_CACHE": "/c", "HF_HOME": "/b"})[0] == Path("/c")
    assert hub_cache_dir({"HF_HOME": "/b", "XDG_CACHE_HOME": "/x"}) == (Path("/b/hub"), "$HF_HOME/hub")
    assert hub_cache_dir({"XDG_CACHE_HOME": "/x"})[0] == Path("/x/huggingface/hub")
    assert hub_cache_dir({}) == (Path(home) / ".cache" / "huggingface" / "hub", "the default")


def test_refs_main_names_the_snapshot_and_the_id_names_the_model(hub_cache, no_network) -> None:
    hub_cache.add("acme/tiny-llama")
    config = read_hub_config("acme/tiny-llama")
    assert config["num_hidden_layers"] == 32 and config["_name_or_path"] == "acme/tiny-llama"
    hub_cache.add(
        "acme/tiny-llama", {**hub_cache.llama, "num_hidden_layers": 16}, commit="aaaa1111", ref="v2"
    )
    assert read_hub_config("acme/tiny-llama@v2")["num_hidden_layers"] == 16  # a tag or branch
    assert read_hub_config("acme/tiny-llama@aaaa1111")["num_hidden_layers"] == 16  # a commit
    assert read_hub_config("acme/tiny-llama")["num_hidden_layers"] == 32  # main is unchanged


def test_without_refs_main_the_only_snapshot_is_used(hub_cache) -> None:
    hub_cache.add("acme/pinned", ref=None)
    assert read_hub_config("acme/pinned")["hidden_size"] == 4096
    hub_cache.add("acme/pinned", commit="bbbb2222", ref=None)
    with pytest.raises(HubConfigError, match="2 snapshots with a config.json"):
        read_hub_config("acme/pinned")


def test_a_missing_model_names_every_path_looked_at(hub_cache, no_network) -> None:
    with pytest.raises(HubConfigError) as missing:
        read_hub_config("acme/absent")
    msg = str(missing.value)
    assert str(hub_cache.root) in msg and "$HF_HUB_CACHE" in msg
    assert str(hub_cache.root / "models--acme--absent") + "/refs/main" in msg
    assert "never downloads" in msg and "huggingface-cli download acme/absent config.json" in msg
    (hub_cache.root / "models--acme--empty" / "refs").mkdir(parents=True)
    (hub_cache.root / "models--acme--empty" / "refs" / "main").write_text("cccc3333")
    with pytest.raises(HubConfigError) as dangling:
        read_hub_config("acme/empty")
    assert str(hub_cache.root / "models--acme--empty" / "snapshots" / "cccc3333" / "config.json") in str(
        dangling.value
    )


@pytest.mark.parametrize(
    "bad",
    [
        "../etc/passwd",
        "acme/../../x",
        "acme/a--b",
        "/abs/path",
        "acme/tiny@../../x",
        "a/b/c",
        "-x/y",
        "acme/",
    ],
)
def test_ids_are_checked_before_any_path_is_built(bad: str) -> None:
    with pytest.raises(HubConfigError, match="not a Hugging Face model id"):
        parse_hub_id(bad)


def test_the_api_estimates_a_cached_id_like_its_config(client: TestClient, hub_cache, no_network) -> None:
    hub_cache.add("acme/tiny-llama")
    by_id = client.post("/api/v1/estimate", json={**BODY, "model": "acme/tiny-llama"})
    assert by_id.status_code == 200, by_id.text
    by_config = client.post("/api/v1/estimate", json={**BODY, "hf_config": hub_cache.llama}).json()
    body = by_id.json()
    assert body["parameters_total"] == by_config["parameters_total"] == 8_030_261_248
    assert body["step_time_s"] == by_config["step_time_s"] and body["model"] == "acme-tiny-llama"


def test_the_api_answers_422_naming_model_and_the_paths(client: TestClient, hub_cache) -> None:
    response = client.post("/api/v1/estimate", json={**BODY, "model": "acme/absent"})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "model"] and "models--acme--absent" in error["msg"]
    malformed = client.post("/api/v1/estimate", json={**BODY, "model": "acme/../../etc"})
    assert malformed.status_code == 422 and "not a Hugging Face model id" in malformed.text


def test_search_export_and_scenarios_take_the_id(client: TestClient, hub_cache) -> None:
    hub_cache.add("acme/tiny-llama")
    search = client.post(
        "/api/v1/plans/search", json={**BODY, "model": "acme/tiny-llama", "top_k": 3, "micro_batches": [1, 2]}
    )
    assert search.status_code == 200, search.text
    assert search.json()["plans"]
    doc = client.post("/api/v1/plans/export?format=json", json={**BODY, "model": "acme/tiny-llama"})
    assert doc.status_code == 200, doc.text
    model = doc.json()["model"]  # the document carries the config itself: it exports anywhere
    assert model["preset"] is None and model["hf_config"]["_name_or_path"] == "acme/tiny-llama"
    created = client.post(
        "/api/v1/scenarios", json={"name": "8B from the cache", "inputs": {**BODY, "model": "acme/tiny-llama"}},
        headers=AUTH,
    )  # fmt: skip
    assert created.status_code == 201, created.text
    assert created.json()["inputs"]["model"] == "acme/tiny-llama"
