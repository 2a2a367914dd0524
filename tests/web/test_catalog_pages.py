"""Catalog pages: full page vs htmx fragment, Vary, filtering without JS, errors, security headers."""

from __future__ import annotations

import math

from fastapi.testclient import TestClient

PARTIAL = {"HX-Request": "true", "HX-Request-Type": "partial"}


def test_home_lists_catalog_kinds(client: TestClient) -> None:
    html = client.get("/").text
    assert "<nav" in html and "/catalog/accelerators" in html


def test_full_page_has_layout_and_vendored_scripts(client: TestClient) -> None:
    response = client.get("/catalog/accelerators")
    assert response.status_code == 200
    html = response.text
    assert "<html" in html and 'id="catalog-results"' in html
    assert "/static/vendor/htmx.org@4.0.1/htmx.min.js" in html
    assert "/static/vendor/echarts@6.1.0/echarts.min.js" in html
    assert "h100-sxm" in html
    assert "HX-Request-Type" in response.headers["vary"]


def test_partial_is_only_the_results_block(client: TestClient) -> None:
    response = client.get("/catalog/accelerators", params={"q": "h200"}, headers=PARTIAL)
    html = response.text
    assert "<html" not in html and "<nav" not in html
    assert html.lstrip().startswith('<section id="catalog-results"')
    assert "h200-sxm" in html and "h100-sxm" not in html
    assert "HX-Request-Type" in response.headers["vary"]


def test_boosted_or_history_request_gets_the_full_page(client: TestClient) -> None:
    html = client.get("/catalog/nodes", headers={"HX-Request": "true", "HX-Request-Type": "full"}).text
    assert "<html" in html


def test_filter_works_as_plain_form_get(client: TestClient) -> None:
    html = client.get("/catalog/nodes?q=p5&confidence=any").text
    assert "p5.48xlarge" in html and "dgx-a100" not in html
    assert 'value="p5"' in html  # the typed filter is kept


def test_figure_cells_carry_provenance_tooltips(client: TestClient) -> None:
    html = client.get("/catalog/accelerators").text
    assert 'title="source: ' in html and "as of" in html


def test_entry_page_shows_every_source(client: TestClient) -> None:
    html = client.get("/catalog/accelerators/h100-sxm").text
    assert "bf16 dense tflops" in html and "confidence" in html


def test_unknown_entry_is_a_404_page_listing_known(client: TestClient) -> None:
    response = client.get("/catalog/accelerators/h900")
    assert response.status_code == 404
    assert "h100-sxm" in response.text and "<html" in response.text


def test_unknown_kind_is_404(client: TestClient) -> None:
    response = client.get("/catalog/gizmos")
    assert response.status_code == 404
    assert "accelerators" in response.text


def test_security_headers(client: TestClient) -> None:
    headers = client.get("/catalog/accelerators").headers
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"


def test_pages_have_no_inline_scripts(client: TestClient) -> None:
    import re

    for url in ["/", "/catalog/accelerators", "/catalog/prices", "/api"]:
        html = client.get(url).text
        for tag in re.findall(r"<script[^>]*>", html):
            assert "src=" in tag or 'type="application/json"' in tag, (url, tag)


def test_filter_input_is_escaped(client: TestClient) -> None:
    html = client.get("/catalog/accelerators", params={"q": "<script>alert(1)</script>"}).text
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html


def test_static_assets_are_served_gzipped(client: TestClient) -> None:
    response = client.get("/static/vendor/htmx.org@4.0.1/htmx.min.js", headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers.get("content-encoding") == "gzip"


def test_api_page_lists_operations(client: TestClient) -> None:
    html = client.get("/api").text
    assert "/api/v1/catalog/{kind}" in html


def test_accuracy_page_leads_with_out_of_sample_accuracy(client: TestClient) -> None:
    html = client.get("/accuracy").text
    assert "narayanan2021-t1-1008b" in html and "mpt-h100-7b-128gpu" in html
    assert "leave-one-source-family-out" in html and 'data-chart="accuracy"' in html
    assert "Fit error (in sample" in html and "stack: megatron" in html and "GPU: h100-sxm" in html
    assert "global batch and micro-batch were not published" in html  # the excluded run says why
    assert "source: RUN-TORCHTITAN2024" in html and "beyond ±20 %" in html
    assert "precision: nvfp4" in html and "precision: fp8" in html
    # the median with each configuration counted once, as the last fit recorded it
    assert "distinct configurations" in html and "counted once at its median" in html
    assert "%.Fit error" not in html  # the sentences stay apart
    # the published peak-memory figures, scored as `capplan validate` scores them
    assert 'id="memory"' in html and "torchtitan-llama3.1-405b-512gpu-4d-cp8-seq256k" in html
    assert "nvidia-smi (allocator + CUDA context + NCCL)" in html  # BLOOM's topology rows read the device


def test_accuracy_table_groups_families_and_scores_memory_as_validate_does() -> None:
    """The family medians are the medians of their runs' errors; the memory rows are validate's, one per run that
    publishes a peak, with its counts (within ±10 %) and median computed from them."""
    import statistics
    from pathlib import Path

    from app.domain.catalog import load_catalog
    from app.domain.estimator.validation import accuracy_table, validate

    catalog = load_catalog(Path(__file__).resolve().parents[2] / "data")
    table = accuracy_table(catalog)
    scored = [r for r in table.rows if r.cv_error is not None]
    family = {g.group: g for g in table.by_family}
    assert sum(g.runs for g in table.by_family) == len(scored)
    titan = [abs(r.cv_error) for r in scored if r.family == "RUN-TORCHTITAN2024"]
    assert family["RUN-TORCHTITAN2024"].cv_median_abs_error == statistics.median(titan)
    precision = {g.group: g for g in table.by_precision}
    assert sum(g.runs for g in table.by_precision) == len(scored) and set(precision) >= {
        "bf16",
        "fp8",
        "nvfp4",
    }
    nvfp4 = [abs(r.cv_error) for r in scored if r.precision == "nvfp4"]
    assert precision["nvfp4"].runs == len(nvfp4) >= 8
    assert precision["nvfp4"].cv_median_abs_error == statistics.median(nvfp4)
    assert table.cv_within_10 == sum(1 for r in scored if abs(r.cv_error) <= 0.10)
    assert table.cv_beyond_20 == sum(1 for r in scored if abs(r.cv_error) > 0.20)
    report = validate(catalog)
    published = {r.run: r for r in report.rows if r.memory_error is not None}
    assert {m.run for m in table.memory_rows} == set(published) and len(published) == report.memory_compared
    assert all(m.error == published[m.run].memory_error for m in table.memory_rows)
    assert table.memory_median_abs_error == report.memory_median_abs_error
    assert table.memory_within_10 == sum(1 for m in table.memory_rows if abs(m.error) <= 0.10)
    bloom = [m for m in table.memory_rows if m.run.startswith("bloom-prequel")]
    assert bloom and all(m.includes_runtime for m in bloom)


def test_accuracy_table_carries_the_recorded_cv_error_of_each_run() -> None:
    from pathlib import Path

    from app.domain.catalog import load_catalog
    from app.domain.estimator.validation import accuracy_table
    from app.web.charts import accuracy_option

    catalog = load_catalog(Path(__file__).resolve().parents[2] / "data")
    table = accuracy_table(catalog)
    scored = [r for r in table.rows if r.fit_error is not None]
    assert all(r.cv_error == catalog.fit.cv_errors[r.run] for r in scored)
    assert table.cv_median_abs_error == catalog.fit.cv_median_abs_error
    option = accuracy_option(table.rows)
    out_of_sample, fit = option["series"]
    assert len(out_of_sample["data"]) == len(fit["data"]) == len(scored)
    assert {line["yAxis"] for line in fit["markLine"]["data"]} == {10, -10, 25, -25, 0}
    # every point on the chart: the axis spans ±80 % or reaches past the worst run
    worst = max(abs(y) for series in (out_of_sample, fit) for _, y in series["data"])
    assert option["yAxis"]["max"] == -option["yAxis"]["min"] == max(80, 20 * math.ceil(worst / 20)) >= worst
    from types import SimpleNamespace

    far = accuracy_option([SimpleNamespace(run="far", fit_error=0.5, cv_error=1.01)])
    assert far["yAxis"]["max"] == -far["yAxis"]["min"] == 120  # +101 % drawn inside a ±120 % axis
