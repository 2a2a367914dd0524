"""What confused a newcomer: the search offered from an invalid hand plan, plain-word messages, 16M / 15T."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.web.forms import DEFAULTS, parse_planner, read_number, to_query

SMALL = {**DEFAULTS, "model": "llama3.1-8b", "gpus": "8", "tp": "1", "global_batch": "16", "seq_len": "4096"}


def test_suffixes_read_like_exponents() -> None:
    assert read_number("16M", int) == 16_000_000 and read_number("15T", float) == 1.5e13
    assert (
        read_number("1.5k", int) == 1500
        and read_number("2B", float) == 2e9
        and read_number("1e12", float) == 1e12
    )
    form = parse_planner({**SMALL, "tokens": "15T"})
    assert form.ok and form.tokens == 1.5e13
    tokens = parse_planner({**SMALL, "batch_unit": "tokens", "global_batch": "32k", "seq_len": "2k"})
    assert tokens.ok and tokens.request.global_batch == 16
    uneven = parse_planner({**SMALL, "batch_unit": "tokens", "global_batch": "16M", "seq_len": "8192"})
    assert "15,998,976 (1,953 sequences)" in uneven.errors["global_batch"]


def test_an_invalid_hand_plan_still_offers_the_search(client: TestClient) -> None:
    bad = {**SMALL, "tp": "3"}  # 3 does not divide the 32 heads: the estimator refuses the layout
    page = client.get("/?" + to_query(bad))
    assert page.status_code == 422 and 'id="search-from-invalid"' in page.text
    assert "8.0 B parameters" in page.text  # the model's counts stay shown while the layout is wrong
    search = client.get("/search?" + to_query(bad))
    assert search.status_code == 200, search.text[:500]
    assert "Load this plan" in search.text
    typo = client.get("/search?" + to_query({**SMALL, "tp": "eight", "micro_batch": "x"}))
    assert typo.status_code == 200
    # a broken model is not a layout problem: no search offered
    broken = client.get("/?" + to_query({**SMALL, "model": "hf", "hf_config": "{}"}))
    assert 'id="search-from-invalid"' not in broken.text


def test_range_messages_are_words_not_regular_expressions(client: TestClient) -> None:
    page = client.get("/search?" + to_query(SMALL) + "&gpus_range=lots")
    assert page.status_code == 422
    assert "e.g. 512:4096" in page.text and "should match pattern" not in page.text and "\\d" not in page.text
    ok = client.get("/search?" + to_query(SMALL) + "&gpus_range=8:16")
    assert ok.status_code == 200
    suffixed = client.get("/search?" + to_query(SMALL) + "&gpus_range=0.008k:0.016k")
    assert suffixed.status_code == 200


def test_the_calibration_switch_is_visible_and_benchmarks_say_how(client: TestClient) -> None:
    page = client.get("/?" + to_query(SMALL)).text
    overrides = page[page.index('<details class="overrides"') :]
    assert 'name="calibrated"' not in overrides[: overrides.index("</details>")]
    assert '<fieldset class="calibration">' in page and 'href="/benchmarks#how-to-calibrate"' in page
    bench = client.get("/benchmarks").text
    assert 'id="how-to-calibrate"' in bench and "capplan bench run --preset" in bench
    assert "capplan bench submit" in bench


def test_glossary_page_and_hover_titles(client: TestClient) -> None:
    from app.web.glossary import GLOSSARY

    page = client.get("/glossary")
    assert page.status_code == 200
    for term in ("tp", "pp", "vpp", "cp", "ep", "MFU", "HFU", "fsdp-full"):
        assert f">{term}</dt>" in page.text
    assert len({anchor for _, anchor, _ in GLOSSARY}) == len(GLOSSARY)
    planner = client.get("/?" + to_query(SMALL)).text
    assert 'for="f-tp" title="Tensor parallel degree' in planner and 'href="/glossary"' in planner
    assert 'value="fsdp-full"' in planner and 'title="PyTorch FSDP FULL_SHARD' in planner
    assert 'for="f-precision" title="The number format the GEMMs run in.' in planner and "nvfp4" in planner
    # an NVFP4 plan's MFU (against the BF16 peak, NVIDIA's convention) says why it can exceed 100 %
    nvfp4 = {**SMALL, "gpu": "gb300", "node": "gb300-nvl72", "framework": "megatron", "sharding": "megatron-distopt",
             "precision": "nvfp4"}  # fmt: skip
    page = client.get("/?" + to_query(nvfp4)).text
    assert "run in NVFP4 against 4–6× that, so its MFU can exceed 100 %" in page
    assert "so its MFU can exceed 100 %" not in planner


def test_accessible_names_and_invalid_fields(client: TestClient) -> None:
    planner = client.get("/?" + to_query(SMALL)).text
    names = [s.split("</summary>")[0] for s in planner.split('<details class="note"><summary>')[1:]]
    assert len(names) >= 5 and len(set(names)) == len(names)  # each "how" toggle has its own name
    bad = client.get("/?" + to_query({**SMALL, "tp": "eight"})).text
    assert 'id="f-tp" name="tp" type="text" value="eight"' in bad
    field = bad[bad.index('id="f-tp"') :]
    assert 'aria-invalid="true"' in field[: field.index(">")]


def test_cost_table_exports_as_csv_and_json(client: TestClient) -> None:
    import csv
    import io

    query = to_query({**SMALL, "tokens": "1e10"})
    page = client.get("/?" + query).text
    assert f'href="/planner/cost?{query.replace("&", "&amp;")}&amp;format=csv"' in page
    csv_response = client.get(f"/planner/cost?{query}&format=csv")
    assert csv_response.status_code == 200 and csv_response.headers["content-type"].startswith("text/csv")
    assert 'filename="cost.csv"' in csv_response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(csv_response.text)))
    options = {r["option"] for r in rows if r["provider"] == "aws"}
    assert {"on-demand", "spot", "self-build"} <= options
    on_demand = next(r for r in rows if r["option"] == "on-demand" and r["provider"] == "aws")
    assert float(on_demand["cash_usd"]) > 0 and float(on_demand["days"]) > 0
    doc = client.get(f"/planner/cost?{query}&format=json").json()
    assert doc["tokens"] == 1e10 and len(doc["options"]) == len(rows)
    json_on_demand = next(o for o in doc["options"] if o["option"] == "on-demand" and o["provider"] == "aws")
    assert abs(json_on_demand["cash_usd"] - float(on_demand["cash_usd"])) < 0.01
    assert client.get(f"/planner/cost?{query}&format=xml").status_code == 422
    assert client.get("/planner/cost?" + to_query({**SMALL, "tp": "x"})).status_code == 422


def test_the_share_link_has_a_copy_button(client: TestClient) -> None:
    page = client.get("/?" + to_query(SMALL)).text
    assert 'data-copy="share-url"' in page and '<span id="share-url" hidden>http://testserver/?model=' in page


def test_chart_descriptions_read_numbers(client: TestClient) -> None:
    import html
    import re

    page = client.get("/?" + to_query({**SMALL, "tokens": "1e10"})).text
    labels = [html.unescape(m) for m in re.findall(r'<x-chart[^>]*aria-label="([^"]*)"', page)]
    assert len(labels) >= 4
    for label in labels:
        assert "NaN" not in label and "[" not in label and "None" not in label, label
    cost = next(x for x in labels if x.startswith("Cost of this run (amortised $)"))
    assert re.search(r"on-demand \$[\d,]+", cost) and "days" in cost
    memory = next(x for x in labels if x.startswith("Memory per GPU"))
    assert re.search(r"params [\d.]+ GiB", memory)
    accuracy = client.get("/accuracy").text
    assert re.search(r'aria-label="Predicted vs published throughput[^"]*points from', accuracy)


def test_search_fields_in_error_are_marked_invalid(client: TestClient) -> None:
    page = client.get("/search?" + to_query(SMALL) + "&gpus_range=lots").text
    field = page[page.index('<input id="s-gpus_range"') :]
    field = field[: field.index(">")]
    assert 'aria-invalid="true"' in field and 'aria-describedby="s-err-gpus_range"' in field
    message = page[page.index('id="s-err-gpus_range"') :]
    assert "e.g. 512:4096" in message[: message.index("</span>")]  # the message is where the field points
    top_k = page[page.index('<input id="s-top_k"') :]
    assert "aria-invalid" not in top_k[: top_k.index(">")]  # fields without an error are not marked
    # an htmx update swaps the messages in out of band (the page's script marks the fields from them)
    partial = client.get(
        "/search?" + to_query(SMALL) + "&gpus_range=lots",
        headers={"HX-Request": "true", "HX-Request-Type": "partial"},
    ).text
    assert '<span class="field-error" id="s-err-gpus_range" hx-swap-oob="true"' in partial
