"""Every API body that takes a GPU range or count, tokens, a budget or a deadline answers a value no run can use —
JSON's NaN and Infinity, 1e400 (read as inf), negatives, a reversed or malformed range — with a 422 naming the
field and saying what is wrong in words (never the regular expression, never "must be ≤ 1e16" for a NaN)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

SIZE = {"model": "llama3.1-8b", "tokens": 1e12, "accelerators": ["h100-sxm"], "options": ["on-demand"],
        "gpus_range": "64:128"}  # fmt: skip
SEARCH = {"model": "llama3.1-8b", "gpu": "h100-sxm", "seq_len": 8192, "global_batch": 64, "gpus": 8}
ESTIMATE = {"model": "llama3.1-8b", "gpu": "h100-sxm", "seq_len": 8192, "global_batch": 64, "gpus": 8, "tp": 1,
            "pp": 1, "dp": 8}  # fmt: skip
COST = {**ESTIMATE, "tokens": 1e12}

RANGES = {
    "1e400": "must be a range 'A:B'",
    "nan": "must be a range 'A:B'",
    "-5": "must be a range 'A:B'",
    "abc": "must be a range 'A:B'",
    "8:4": "the start (8) is above the end (4)",
    "1:1e400": "at most 1,048,576 GPUs",
    "0:0": "at least 1 GPU",
}


def _post_raw(client: TestClient, path: str, body: dict, field: str, literal: str):
    """``body`` with ``field`` set to a JSON literal json.dumps cannot write (NaN, Infinity, 1e400)."""
    text = json.dumps({k: v for k, v in body.items() if k != field})
    return client.post(path, content=text[:-1] + f', "{field}": {literal}}}',
                       headers={"content-type": "application/json"})  # fmt: skip


def _names(response, field: str, words: str | None = None) -> None:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    item = next(d for d in detail if d["loc"][-1] == field)
    assert "pattern" not in item["msg"] and "less than or equal" not in item["msg"], item
    if words:
        assert words in item["msg"], item


def test_a_gpu_range_no_run_can_use_is_a_422_in_words(client: TestClient) -> None:
    for path, base in (("/api/v1/size", SIZE), ("/api/v1/plans/search", SEARCH)):
        for value, words in RANGES.items():
            body = {k: v for k, v in base.items() if k != "gpus"} | {"gpus_range": value}
            _names(client.post(path, json=body), "gpus_range", words)


CASES = [
    ("/api/v1/size", SIZE, "tokens"), ("/api/v1/size", SIZE, "budget_usd"), ("/api/v1/size", SIZE, "deadline_days"),
    ("/api/v1/plans/search", {**SEARCH, "tokens": 1e12}, "tokens"),
    ("/api/v1/plans/search", {**SEARCH, "tokens": 1e12}, "budget_usd"),
    ("/api/v1/plans/search", {**SEARCH, "tokens": 1e12}, "deadline_days"),
    ("/api/v1/estimate", ESTIMATE, "tokens"), ("/api/v1/cost", COST, "tokens"),
    ("/api/v1/plans/search", SEARCH, "gpus"), ("/api/v1/estimate", ESTIMATE, "gpus"), ("/api/v1/cost", COST, "gpus"),
]  # fmt: skip


def test_numbers_that_are_not_finite_are_a_422_naming_the_field(client: TestClient) -> None:
    for path, base, field in CASES:
        for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
            _names(_post_raw(client, path, base, field, literal), field)


def test_a_gpu_count_no_run_can_use_is_a_422_naming_gpus(client: TestClient) -> None:
    for path, base in (
        ("/api/v1/plans/search", SEARCH),
        ("/api/v1/estimate", ESTIMATE),
        ("/api/v1/cost", COST),
    ):
        for literal in ("-5", "0", "8.5", '"abc"', "1e30"):
            response = _post_raw(client, path, base, "gpus", literal)
            assert response.status_code == 422 and any(
                d["loc"][-1] == "gpus" for d in response.json()["detail"]
            )
