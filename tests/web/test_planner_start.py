"""A model picked in the planner opens with the search's winner for the chosen cluster, not the previous model's
layout (issue 13: Qwen3-30B-A3B opened at 3 % MFU, DeepSeek-V3 at under 2 %, on the dense default's tp 8 plan)."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from app.domain.catalog import Catalog
from app.services.search import SearchBusy, run_search
from app.web import plan_start
from app.web.forms import DEFAULTS, LAYOUT_FIELDS, parse_planner, to_query
from app.web.plan_start import LAYOUT_EVENT, PLAN_FOR
from app.web.search import SEARCH_DEFAULTS, layout_values, search_request

PARTIAL = {"HX-Request": "true", "HX-Request-Type": "partial"}
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "hidden_act": "silu",
}  # fmt: skip


def _pick(model: str, **extra: str) -> str:
    """The planner query the form sends when the model select changes from the default model to ``model``."""
    return "/?" + to_query({**DEFAULTS, "model": model, **extra}) + f"&{PLAN_FOR}={DEFAULTS['model']}"


def _event(page) -> dict[str, str]:  # noqa: ANN001
    """The field values the answer sends to the page's form (HX-Trigger; static/js/app.js sets them)."""
    return json.loads(page.headers["HX-Trigger"])[LAYOUT_EVENT]["values"]


def _mfu(html: str) -> float:
    found = re.search(r"MFU ([0-9.]+)%", html)
    assert found is not None, html[:2000]
    return float(found.group(1)) / 100


def _winner(catalog: Catalog, model: str, **extra: str):
    """What "Find the best plan" ranks first for the default form with ``model``: the expected layout."""
    form = parse_planner({**DEFAULTS, "model": model, **extra})
    request, errors = search_request(form, {**SEARCH_DEFAULTS, "top_k": "1"})
    assert request is not None, errors
    result = run_search(catalog, request.model_copy(update={"tokens": None}))
    return result.plans[0]


@pytest.fixture
def catalog(client) -> Catalog:
    """The catalog the pages use: with the calibration the server fitted (the planner's default is calibrated)."""
    state = client.app.state
    return state.catalog.with_calibrations(state.calibrations.get())


@pytest.mark.parametrize("model", ["deepseek-v3", "mixtral-8x7b"])
def test_a_picked_moe_model_opens_with_the_search_winner(client, catalog: Catalog, model: str) -> None:
    """The partial answer sends the winner's layout to the form (set in place, no field swapped), the address
    holding it, the model the layout now belongs to, and the winner's estimate — far above the inherited layout's."""
    inherited = client.get(
        "/?" + to_query({**DEFAULTS, "model": model}) + f"&{PLAN_FOR}={model}", headers=PARTIAL
    )
    page = client.get(_pick(model), headers=PARTIAL)
    assert page.status_code == 200, page.text[:2000]
    best = _winner(catalog, model)
    layout = {k: v for k, v in layout_values(best).items() if k in LAYOUT_FIELDS}
    sent = _event(page)
    assert sent.pop(PLAN_FOR) == model and set(sent) == set(LAYOUT_FIELDS)
    # dp auto (the winner's is gpus / (tp·pp·cp)): a later change of GPUs keeps the layout valid
    assert sent == {**layout, "dp": ""}
    address = parse_qs(urlsplit(page.headers["HX-Replace-Url"]).query, keep_blank_values=True)
    # the address names what differs from the defaults (app/web/forms.py to_query)
    assert {k: address.get(k, [DEFAULTS[k]]) for k in LAYOUT_FIELDS} == {k: [v] for k, v in sent.items()}
    assert address["model"] == [model] and PLAN_FOR not in address
    assert "Layout set by the search" in page.text and "fastest plan that fits" in page.text
    assert _mfu(page.text) == pytest.approx(best.mfu, abs=0.0005)  # the page shows the winner's estimate
    assert _mfu(page.text) > 3 * _mfu(inherited.text)


def test_a_link_naming_only_a_model_opens_with_the_search_winner(client, catalog: Catalog) -> None:
    """``/?model=deepseek-v3`` (no layout in the link) answers with the address of the winner's layout; that address
    renders it, and asks for no new layout itself."""
    response = client.get("/?model=deepseek-v3", follow_redirects=False)
    assert response.status_code == 303
    address = parse_qs(urlsplit(response.headers["location"]).query, keep_blank_values=True)
    best = _winner(catalog, "deepseek-v3")
    assert address["ep"] == [str(best.plan.ep)] and address["tp"] == [str(best.plan.tp)]
    assert PLAN_FOR not in address
    page = client.get(response.headers["location"], follow_redirects=False)
    assert page.status_code == 200 and _mfu(page.text) == pytest.approx(best.mfu, abs=0.0005)


def test_an_uploaded_config_json_opens_with_the_search_winner(client) -> None:
    """Qwen3-30B-A3B from its config.json: 3 % MFU on the default layout, the search's layout after the upload."""
    inherited = client.get(
        "/?" + to_query({**DEFAULTS, "model": "hf", "hf_config": json.dumps(QWEN3_30B_A3B)})
    )
    upload = client.post(
        "/planner/hf-config", files={"file": ("config.json", json.dumps(QWEN3_30B_A3B).encode())},
        data={"current": to_query(DEFAULTS)}, follow_redirects=False,
    )  # fmt: skip
    assert upload.status_code == 303
    page = client.get(upload.headers["location"])  # → the address of the search's layout
    assert page.status_code == 200 and "model=hf" in str(page.url) and "ep=" in str(page.url)
    assert _mfu(page.text) > 3 * _mfu(inherited.text)


def test_other_changes_keep_the_layout_as_set(client, monkeypatch) -> None:
    """Only a new model asks for a layout: a change of GPUs, or a link with a layout (as shared or saved), keeps
    the one given, and no search runs."""

    def no_search(*args, **kwargs):
        raise AssertionError("the layout was searched although the model did not change")

    monkeypatch.setattr(plan_start, "run_search", no_search)
    same = {**DEFAULTS, "gpus": "128"}
    page = client.get("/?" + to_query(same) + f"&{PLAN_FOR}={DEFAULTS['model']}", headers=PARTIAL)
    assert page.status_code == 200 and page.headers["HX-Replace-Url"] == "/?" + to_query(same)  # short link
    assert "HX-Trigger" not in page.headers and "layout-note" not in page.text  # the layout left alone
    link = "/?" + to_query({**DEFAULTS, "model": "deepseek-v3"})
    assert "tp=8" in link  # the default layout stays named in a link for another model
    shared = client.get(link, follow_redirects=False)
    assert shared.status_code == 200 and "Layout set by the search" not in shared.text


def test_when_the_search_cannot_answer_the_layout_stays_and_the_page_says_why(client, monkeypatch) -> None:
    """Nothing fits, or the server's searches are busy: the layout as it was, a note, never a 500; the model is
    marked as handled (the next change does not search again)."""
    page = client.get(_pick("deepseek-v3", gpus="8", global_batch="8"), headers=PARTIAL)
    assert page.status_code in (200, 422) and "The layout is unchanged" in page.text, page.text[:2000]
    assert _event(page) == {PLAN_FOR: "deepseek-v3"}  # handled: the next change keeps the layout

    def busy(*args, **kwargs):
        raise SearchBusy("all 2 plan-search slots are busy", retry_after_s=1)

    monkeypatch.setattr(plan_start, "run_search", busy)
    page = client.get(_pick("mixtral-8x7b"), headers=PARTIAL)
    assert page.status_code in (200, 422) and "could not run (all 2 plan-search slots are busy)" in page.text
    assert _event(page) == {PLAN_FOR: "mixtral-8x7b"} and "tp 8" in page.text  # the default layout, as it was


def test_an_invalid_form_waits_for_a_valid_one(client) -> None:
    """A model picked while another field is wrong: the page asks for the fix first, and the layout is chosen on
    the first valid answer (the hidden field still names the model the layout belongs to)."""
    page = client.get(_pick("mixtral-8x7b", gpus="x"), headers=PARTIAL)
    assert page.status_code == 422 and "HX-Trigger" not in page.headers  # the form keeps the previous model
    full = client.get(_pick("mixtral-8x7b", gpus="x"))
    assert f'name="{PLAN_FOR}" value="{DEFAULTS["model"]}"' in full.text
    fixed = client.get(_pick("mixtral-8x7b"), headers=PARTIAL)
    assert fixed.status_code == 200 and "Layout set by the search" in fixed.text
