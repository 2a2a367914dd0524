"""Shipped calibration (data/calibration/**.json): runner results committed with capplan calibrate every
estimate, cost and plan search out of the box, name themselves in the estimate's provenance, are listed and
readable over the API and the pages, give way to newer posted runs, and stop the app when they are invalid."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench_fixtures import synthetic_h100_result
from fastapi.testclient import TestClient

from app.calibration_store import CalibrationFileError, load_shipped_runs
from app.main import create_app
from app.settings import REPO_ROOT, Settings

KEY = "2026-11-h100/llama3_8b_fsdp8_h100"
AUTH = {"Authorization": "Bearer test-token"}
ESTIMATE = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 8, "micro_batch": 1,
            "seq_len": 8192}  # fmt: skip
SEARCH = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 64, "seq_len": 8192,
          "top_k": 3, "micro_batches": [1, 2], "recomputes": ["none", "full"]}  # fmt: skip


def result_json(slowdown: float, when: datetime) -> str:
    return (
        synthetic_h100_result(slowdown)
        .model_copy(update={"measured_at": when})
        .model_dump_json(by_alias=True)
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A copy of data/ with one shipped run: the 8B on 8 × H100 whose steps took 1.25 × the prediction."""
    target = tmp_path / "data"
    shutil.copytree(REPO_ROOT / "data", target, ignore=shutil.ignore_patterns("calibration"))
    path = target / "calibration" / f"{KEY}.json"
    path.parent.mkdir(parents=True)
    path.write_text(result_json(1.25, datetime(2026, 11, 20, tzinfo=UTC)))
    return target


@pytest.fixture
def shipped_client(data_dir: Path, sqlite_url: str):
    from app.db.migrate import upgrade

    upgrade(sqlite_url)
    settings = Settings(
        database_url=sqlite_url, data_dir=data_dir, api_token="test-token", log_level="WARNING"
    )
    with TestClient(create_app(settings)) as c:
        yield c


def calibration(estimate: dict) -> dict:
    return next(a for a in estimate["assumptions"] if a["name"] == "calibration")


def test_a_shipped_run_calibrates_estimates_and_says_so(shipped_client: TestClient) -> None:
    est = shipped_client.post("/api/v1/estimate", json=ESTIMATE).json()
    off = shipped_client.post("/api/v1/estimate", json={**ESTIMATE, "calibrated": False}).json()
    assert calibration(est)["value"] == f"calibrated by shipped {KEY}"
    assert calibration(est)["source"] == f"calibrated (shipped {KEY}, 2026-11-20)"
    gemm = next(a for a in est["assumptions"] if a["name"] == "GEMM efficiency (large GEMMs)")
    assert gemm["source"] == f"calibrated (shipped {KEY}, 2026-11-20)"
    # 25 % slower steps than predicted: GEMM and attention efficiency × 0.8, so clearly fewer tokens/s
    assert est["tokens_per_s"] < 0.9 * off["tokens_per_s"]
    assert calibration(off)["value"].startswith("off")
    other = shipped_client.post("/api/v1/estimate", json={**ESTIMATE, "gpu": "a100-80gb"}).json()
    assert calibration(other)["value"].startswith("not calibrated")


def test_cost_and_search_use_the_same_calibration(shipped_client: TestClient) -> None:
    est = shipped_client.post("/api/v1/estimate", json=ESTIMATE).json()
    cost = shipped_client.post("/api/v1/cost", json={**ESTIMATE, "node": "p5.48xlarge", "tokens": 1e10})
    assert cost.status_code == 200, cost.text
    assert cost.json()["tokens_per_s"] == pytest.approx(
        shipped_client.post("/api/v1/estimate", json={**ESTIMATE, "node": "p5.48xlarge"}).json()[
            "tokens_per_s"
        ]
    )
    cost_off = shipped_client.post(
        "/api/v1/cost", json={**ESTIMATE, "node": "p5.48xlarge", "tokens": 1e10, "calibrated": False}
    ).json()
    assert cost.json()["tokens_per_s"] < 0.9 * cost_off["tokens_per_s"]

    found = shipped_client.post("/api/v1/plans/search", json=SEARCH).json()
    found_off = shipped_client.post("/api/v1/plans/search", json={**SEARCH, "calibrated": False}).json()
    assert any(n.startswith(f"calibration: calibrated by shipped {KEY}") for n in found["notes"])
    assert any(n == "calibration: off (catalog defaults)" for n in found_off["notes"])
    assert found["plans"][0]["tokens_per_s"] < 0.9 * found_off["plans"][0]["tokens_per_s"]
    assert est["tokens_per_s"] > 0


def test_shipped_runs_are_listed_and_readable(shipped_client: TestClient) -> None:
    runs = shipped_client.get("/api/v1/benchmarks/shipped").json()
    assert [r["key"] for r in runs] == [KEY]
    assert runs[0]["url"] == f"/benchmarks/shipped/{KEY}" and runs[0]["software"]["torch"] == "2.13.0"
    assert runs[0]["median_abs_error"] > 0
    one = shipped_client.get(f"/api/v1/benchmarks/shipped/{KEY}")
    assert one.status_code == 200 and one.json()["schema"] == "capplan.bench/v1"
    assert one.json()["accelerator"] == "h100-sxm"
    assert shipped_client.get("/api/v1/benchmarks/shipped/nope").status_code == 404
    assert shipped_client.get("/api/v1/benchmarks/shipped/..%2F..%2Faccelerators").status_code == 404
    in_use = shipped_client.get("/api/v1/calibration").json()
    fields = {c["field"] for c in in_use}
    assert {"gemm_efficiency", "attention_efficiency", "fragmentation_fraction"} <= fields
    assert {c["run"] for c in in_use} == {f"shipped {KEY}"} and {c["accelerator"] for c in in_use} == {
        "h100-sxm"
    }
    gemm = next(c for c in in_use if c["field"] == "gemm_efficiency")
    assert gemm["value"] == pytest.approx(gemm["default"] * 0.8)

    page = shipped_client.get("/benchmarks")
    assert page.status_code == 200 and f'href="/benchmarks/shipped/{KEY}"' in page.text
    detail = shipped_client.get(f"/benchmarks/shipped/{KEY}")
    assert detail.status_code == 200
    assert "Shipped run" in detail.text and "step_time_s" in detail.text and "+25.00 %" in detail.text
    assert "The estimator uses this run" in detail.text
    assert shipped_client.get(f"/benchmarks/shipped/{KEY}?rank=3").status_code == 200
    assert shipped_client.get("/benchmarks/shipped/nope").status_code == 404


def test_a_newer_posted_run_replaces_the_shipped_figures(shipped_client: TestClient) -> None:
    body = json.loads(result_json(1.0, datetime(2026, 12, 1, tzinfo=UTC)))
    r = shipped_client.post("/api/v1/benchmarks", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    est = shipped_client.post("/api/v1/estimate", json=ESTIMATE).json()
    gemm = next(a for a in est["assumptions"] if a["name"] == "GEMM efficiency (large GEMMs)")
    assert gemm["source"] == f"calibrated (run {run_id}, 2026-12-01)"
    off = shipped_client.post("/api/v1/estimate", json={**ESTIMATE, "calibrated": False}).json()
    assert est["tokens_per_s"] == pytest.approx(off["tokens_per_s"], rel=0.02)  # measured = predicted now
    shipped_page = shipped_client.get(f"/benchmarks/shipped/{KEY}").text
    assert "A newer run on h100-sxm supersedes these figures" in shipped_page


def test_an_invalid_shipped_file_stops_the_app(data_dir: Path, sqlite_url: str) -> None:
    bad = data_dir / "calibration" / "broken.json"
    bad.write_text('{"schema": "capplan.bench/v1", "preset": "x"}')
    with pytest.raises(CalibrationFileError, match="broken.json: not a capplan.bench/v1 result"):
        create_app(Settings(database_url=sqlite_url, data_dir=data_dir))
    bad.write_text(result_json(1.0, datetime(2026, 11, 1, tzinfo=UTC)).replace('"h100-sxm"', '"h900"'))
    with pytest.raises(CalibrationFileError, match="unknown accelerator 'h900'"):
        load_shipped_runs(data_dir, accelerators=["h100-sxm"])


def test_the_repository_data_has_valid_shipped_calibration() -> None:
    """Whatever data/calibration holds (nothing until the first GPU run is committed) loads and names known
    accelerators, and every shipped run records its GPU, driver and torch version."""
    from app.domain.catalog import load_catalog

    catalog = load_catalog(REPO_ROOT / "data")
    for run in load_shipped_runs(
        REPO_ROOT / "data", accelerators=[a.slug for a in catalog.hardware.accelerators]
    ):
        assert run.result.accelerator, run.key
        assert all(run.result.software.get(k) for k in ("torch", "cuda", "driver")), run.key


PLANNER = ("/?model=llama3.1-8b&gpu=h100-sxm&node=p5.48xlarge&gpus=8&tp=1&global_batch=64&seq_len=8192"
           "&recompute=none&tokens=1e10")  # fmt: skip


def test_planner_shows_and_toggles_calibration_and_its_cost_agrees(shipped_client: TestClient) -> None:
    on = shipped_client.get(PLANNER)
    assert on.status_code == 200
    assert f'Calibration: <a href="/benchmarks">calibrated by shipped {KEY}</a>' in on.text
    off = shipped_client.get(PLANNER + "&calibrated=off")
    assert 'Calibration: <a href="/benchmarks">off (catalog defaults)</a>' in off.text
    # the switch is shown in its own fieldset, not hidden in the overrides panel
    calibration = off.text[off.text.index('<fieldset class="calibration">') :]
    calibration = calibration[: calibration.index("</fieldset>")]
    assert 'name="calibrated"' in calibration and "How to calibrate" in calibration

    from app.web.forms import parse_planner
    from app.web.planner import compute_results

    state = shipped_client.app.state  # type: ignore[attr-defined]
    catalog = state.catalog.with_calibrations(state.calibrations.get())
    params = dict(x.split("=") for x in PLANNER[2:].split("&"))
    results = compute_results(catalog, parse_planner(params))
    assert results is not None and results["cost"] is not None
    assert results["cost"].tokens_per_s == pytest.approx(
        results["est"].tokens_per_s
    )  # one calibration for both
    off_results = compute_results(catalog, parse_planner({**params, "calibrated": "off"}))
    assert off_results is not None and off_results["cost"].tokens_per_s == pytest.approx(
        off_results["est"].tokens_per_s
    )
    assert results["est"].tokens_per_s < 0.9 * off_results["est"].tokens_per_s


def test_cache_keeps_the_shipped_calibration_through_a_database_outage(data_dir: Path) -> None:
    """The stored runs cannot be read: estimates keep the shipped calibration, and the database is tried again
    once per TTL, not on every request."""
    from sqlalchemy.exc import OperationalError

    from app.calibration_store import CalibrationCache

    tries = []

    class Down:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def scalars(self, *args, **kwargs):
            tries.append(1)
            raise OperationalError("select", {}, Exception("connection refused"))

    shipped = load_shipped_runs(data_dir)
    cache = CalibrationCache(Down, shipped, ttl_s=3600)
    first = cache.get()
    assert first.for_accelerator("h100-sxm") is not None  # the shipped run still calibrates
    assert cache.get() is first and cache.peek() is first and len(tries) == 1
    cache.invalidate()
    cache.get()
    assert len(tries) == 2


def test_odd_posted_runs_never_take_pages_down(shipped_client: TestClient) -> None:
    """A posted run with an unreadable config (a string where a count belongs) and one on an accelerator the
    catalog has no node for (h100-pcie) are stored; every page and estimate keeps working."""
    odd = json.loads(result_json(1.0, datetime(2026, 12, 1, tzinfo=UTC)))
    odd["config"]["communicators"] = "two"
    odd["config"]["prediction_basis"] = {"gemm_efficiency": "fast"}
    assert shipped_client.post("/api/v1/benchmarks", json=odd, headers=AUTH).status_code == 201
    pcie = json.loads(result_json(1.0, datetime(2026, 12, 1, tzinfo=UTC)))
    pcie["accelerator"] = "h100-pcie"
    assert shipped_client.post("/api/v1/benchmarks", json=pcie, headers=AUTH).status_code == 201
    for path in ("/api/v1/catalog/accelerators", "/", "/benchmarks", "/benchmarks/1", "/benchmarks/2",
                 "/api/v1/calibration"):  # fmt: skip
        assert shipped_client.get(path).status_code == 200, path
    est = shipped_client.post("/api/v1/estimate", json=ESTIMATE).json()
    # the odd run still calibrates what it can read (its NCCL figure needs the communicator count: shipped's stays)
    assert calibration(est)["value"] == f"calibrated by shipped {KEY}, run 1"
    gemm = next(a for a in est["assumptions"] if a["key"] == "efficiency.gemm_efficiency")
    assert gemm["source"] == "calibrated (run 1, 2026-12-01)"


def test_runs_of_the_same_day_are_ordered_by_time(data_dir: Path, sqlite_url: str) -> None:
    """Two shipped runs measured the same day: the later one (by time, not by file name) wins."""
    from app.calibration_store import fit_all

    folder = data_dir / "calibration" / "2026-11-h100"
    (folder / "a_later.json").write_text(result_json(2.0, datetime(2026, 11, 20, 18, tzinfo=UTC)))
    (folder / "z_earlier.json").write_text(result_json(1.0, datetime(2026, 11, 20, 6, tzinfo=UTC)))
    fit = fit_all(load_shipped_runs(data_dir)).for_accelerator("h100-sxm")
    assert fit is not None and fit.step_ratio is not None
    assert (
        fit.step_ratio.run_label == "shipped 2026-11-h100/a_later"
        and fit.step_ratio.ratio == pytest.approx(0.5)
    )


def test_an_override_is_not_reported_as_calibrated(shipped_client: TestClient) -> None:
    est = shipped_client.post(
        "/api/v1/estimate", json={**ESTIMATE, "figure_overrides": {"efficiency.gemm_efficiency": 0.7}}
    ).json()
    assert (
        "gemm_efficiency" not in calibration(est)["note"]
        and "attention_efficiency" in calibration(est)["note"]
    )
    gemm = next(a for a in est["assumptions"] if a["key"] == "efficiency.gemm_efficiency")
    assert gemm["value"] == 0.7 and gemm["source"] == "override"
    # the shipped run measured 1.25 × the predicted step: calibrated to 0.8 × the catalog figure
    assert gemm["note"].startswith("set for this plan; calibrated ")
    calibrated = float(gemm["note"].rsplit(" ", 1)[1])
    catalog_gemm = shipped_client.app.state.catalog.efficiency.for_accelerator("h100-sxm").gemm_efficiency
    assert calibrated == pytest.approx(0.8 * catalog_gemm, rel=1e-3)


def test_search_best_and_cost_state_their_calibration(shipped_client: TestClient) -> None:
    found = shipped_client.post("/api/v1/plans/search", json=SEARCH).json()
    assert calibration(found["best"])["value"] == f"calibrated by shipped {KEY}"
    cost = shipped_client.post("/api/v1/cost", json={**ESTIMATE, "tokens": 1e10}).json()
    assert calibration(cost)["value"] == f"calibrated by shipped {KEY}"


def test_web_search_follows_the_calibration_switch_and_says_so(shipped_client: TestClient) -> None:
    query = ("/search?model=llama3.1-8b&gpu=h100-sxm&gpus=8&global_batch=64&seq_len=8192&tokens=1e10"
             "&objective=max-tokens-per-s")  # fmt: skip
    on = shipped_client.get(query)
    off = shipped_client.get(query + "&calibrated=off")
    assert on.status_code == off.status_code == 200
    assert f"calibration: calibrated by shipped {KEY}" in on.text
    assert "calibration: off (catalog defaults)" in off.text
    assert "calibrated=off" in off.text  # the links to the planner keep the switch


def test_shipped_list_url_goes_to_the_runs_page(shipped_client: TestClient) -> None:
    r = shipped_client.get("/benchmarks/shipped", follow_redirects=False)
    assert r.status_code == 302 and r.headers["location"] == "/benchmarks#shipped"
