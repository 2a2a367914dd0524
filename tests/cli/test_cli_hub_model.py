"""`--model org/name`: the config.json from the local Hugging Face cache (no network); a file path still wins, and
a model that is in neither place is one line naming the paths looked at, exit code 2."""

from __future__ import annotations

import json

from test_cli_catalog import run_cli

ARGS = ["--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "16", "--seq-len", "4096"]


def test_estimate_and_plan_take_a_cached_id(monkeypatch, capsys, hub_cache) -> None:
    hub_cache.add("acme/tiny-llama")
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", "acme/tiny-llama", *ARGS, "--json")
    assert code == 0, err
    body = json.loads(out)
    assert body["parameters_total"] == 8_030_261_248 and body["model"] == "acme-tiny-llama"
    code, out, err = run_cli(monkeypatch, capsys, "plan", "--model", "acme/tiny-llama", *ARGS, "--micro-batches",
                             "1,2", "--top", "2", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["plans"]


def test_a_model_in_neither_place_names_the_paths(monkeypatch, capsys, hub_cache) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", "acme/absent", *ARGS)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        "error: --model: acme/absent is not in the local Hugging Face cache"
    )
    assert str(hub_cache.root / "models--acme--absent" / "refs" / "main") in err
    assert "no file acme/absent" in err
    code, _, err = run_cli(monkeypatch, capsys, "estimate", "--model", "./missing/config.json", *ARGS)
    assert code == 2 and "no such file ./missing/config.json" in err


def test_a_file_of_that_name_wins(monkeypatch, capsys, hub_cache, tmp_path) -> None:
    hub_cache.add("acme/tiny-llama")
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "tiny-llama").write_text(json.dumps({**hub_cache.llama, "num_hidden_layers": 16}))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", "acme/tiny-llama", *ARGS, "--json")
    assert code == 0, err
    assert json.loads(out)["parameters_total"] < 5e9  # the 16-layer file, not the cached 32 layers
