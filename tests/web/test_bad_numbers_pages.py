"""The forms that take a GPU range or count, tokens, a budget or a deadline — "Size a cluster" (the page's GET and
the background run's POST), "Find the best plan" and the planner — answer a value no run can use with a 422 whose
message sits by the field, in words, and keep what the user typed."""

from __future__ import annotations

import html
import re
from urllib.parse import urlencode

from fastapi.testclient import TestClient

SIZE = {"model": "llama3.1-8b", "tokens": "1e12", "accelerators": "h100-sxm", "options": "on-demand",
        "gpus_range": "64:128"}  # fmt: skip
PLANNER = "model=llama3.1-8b&gpu=h100-sxm&gpus=8&seq_len=8192&global_batch=64&tp=1&pp=1&dp=8"
PARTIAL = {"HX-Request": "true", "HX-Request-Type": "partial"}

RANGES = {
    "1e400": "must be a range 'A:B'",
    "nan": "must be a range 'A:B'",
    "-5": "must be a range 'A:B'",
    "abc": "must be a range 'A:B'",
    "8:4": "the start (8) is above the end (4): write 4:8",
    "1:1e400": "at most 1,048,576 GPUs",
}
NOT_FINITE = ["nan", "inf", "1e400"]


def _message(page: str, error_id: str) -> str:
    found = re.search(rf'id="{error_id}"[^>]*>([^<]*)<', page)
    assert found, error_id
    return html.unescape(found.group(1)).strip()


def _kept(page: str, value: str) -> bool:
    return f'value="{html.escape(value)}"' in page


def _plain(message: str) -> None:
    assert message and "Value error" not in message and "pattern" not in message
    assert "less than or equal" not in message  # NaN is not "over the limit"


def test_size_page_refuses_each_value_by_its_field_and_keeps_it(client: TestClient) -> None:
    cases = [("gpus_range", v, w) for v, w in RANGES.items()]
    cases += [(f, v, "finite") for f in ("tokens", "budget_usd", "deadline_days") for v in NOT_FINITE]
    for field, value, words in cases:
        page = client.get("/size?" + urlencode({**SIZE, field: value}))
        assert page.status_code == 422, (field, value)
        message = _message(page.text, f"z-err-{field}")
        _plain(message)
        assert words in message and _kept(page.text, value), (field, value, message)
        answer = client.post("/size/jobs", data={**SIZE, field: value}, headers=PARTIAL)
        assert answer.status_code == 422 and "every 1s" not in answer.text, (field, value)
        assert words in _message(answer.text, f"z-err-{field}")


def test_search_page_refuses_each_value_by_its_field_and_keeps_it(client: TestClient) -> None:
    cases = [("gpus_range", v, w) for v, w in RANGES.items()]
    cases += [(f, v, "finite") for f in ("budget_usd", "deadline_days") for v in NOT_FINITE]
    for field, value, words in cases:
        page = client.get(f"/search?{PLANNER}&tokens=1e12&" + urlencode({field: value}))
        assert page.status_code == 422, (field, value)
        message = _message(page.text, f"s-err-{field}")
        _plain(message)
        assert words in message and _kept(page.text, value), (field, value, message)
    for value in NOT_FINITE:  # tokens come from the planner: named in the page's list of what to fix
        page = client.get(f"/search?{PLANNER}&tokens={value}")
        assert page.status_code == 422 and "What to fix" in page.text and "tokens" in page.text


def test_planner_refuses_a_gpu_count_or_tokens_no_run_can_use(client: TestClient) -> None:
    for field, value in [("gpus", "1e400"), ("gpus", "nan"), ("gpus", "-5"), ("gpus", "abc"), ("tokens", "nan"),
                         ("tokens", "inf"), ("tokens", "1e400")]:  # fmt: skip
        query = PLANNER.replace("gpus=8", f"gpus={value}") if field == "gpus" else f"{PLANNER}&tokens={value}"
        page = client.get("/?" + query)
        assert page.status_code == 422, (field, value)
        _plain(_message(page.text, f"err-{field}"))
        assert _kept(page.text, value)
