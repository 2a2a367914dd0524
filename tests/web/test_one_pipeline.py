"""One scenario, one set of numbers: the pipeline (app/services/scenario.py) behind every surface.

The search's rows, the planner's cost table, its CSV, the comparison, the scenario page and the API give the same
days (before and after failures) and dollars for the same plan, options and overrides."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from app.domain.catalog import Catalog, load_catalog
from app.domain.estimator.schedule import StageTimes, pipeline_schedule
from app.domain.estimator.schedule_sample import sampled_schedule
from app.schemas import CostRequest, PlanSearchRequest
from app.services import estimate as estimate_service
from app.services.errors import InputError
from app.services.scenario import run_scenario
from app.services.search import run_search, search_pick_request, winner_scenario
from app.web.forms import DEFAULTS, parse_planner, to_query
from app.web.templating import fmt_usd

FIGURES = {"efficiency.gemm_efficiency": 0.55}
PRICES = {"on_demand_usd_per_hour": 50.0, "reliability": {"failures_per_gpu_hour": 2e-5}}


@pytest.fixture(scope="module")
def catalog(data_without_shipped_calibration: Path) -> Catalog:
    return load_catalog(data_without_shipped_calibration)


def _search(gpu: str, node: str | None, **extra) -> PlanSearchRequest:
    body = dict(model="llama3.1-70b", gpu=gpu, node=node, gpus=256, global_batch=512, seq_len=4096, tokens=1e12,
                figure_overrides=FIGURES, overrides=PRICES, top_k=5)  # fmt: skip
    return PlanSearchRequest(**{**body, **extra})


@pytest.mark.parametrize(
    ("gpu", "node", "option"),
    [
        ("h100-sxm", None, "on-demand"),
        ("a100-80gb", "dgx-a100-80gb", "on-demand"),
        ("h100-sxm", None, "spot"),
    ],
)
def test_search_rows_equal_the_pipeline_plan_by_plan(catalog: Catalog, gpu, node, option) -> None:
    """Every row of the search (figure and price overrides given) states the days, days before failures and dollars
    the pipeline states for that plan, option and overrides."""
    request = _search(gpu, node, price_option=option)
    result = run_search(catalog, request)
    assert len(result.plans) >= 3
    for pick, row in enumerate(result.plans, 1):
        scenario = winner_scenario(catalog, request, result, pick)
        figures = scenario.figures(option)
        assert figures is not None and row.time_to_train_days is not None
        assert row.tokens_per_s == pytest.approx(scenario.modelled_estimate(option).tokens_per_s, rel=1e-9)
        assert row.time_to_train_days == pytest.approx(figures.days, rel=1e-9)
        assert row.time_to_train_days_before_failures == pytest.approx(figures.days_before_failures, rel=1e-9)
        assert row.cost_to_train_usd == pytest.approx(figures.usd, rel=1e-9)
        assert row.usd_per_million_tokens == pytest.approx(figures.usd_per_million_tokens, rel=1e-9)
        assert row.time_to_train_days > row.time_to_train_days_before_failures  # goodput < 1 counted
    assert result.best is not None and result.best.tokens_per_s == pytest.approx(result.plans[0].tokens_per_s)


def test_price_overrides_reach_the_search(catalog: Catalog) -> None:
    cheap = run_search(catalog, _search("h100-sxm", None, overrides={"on_demand_usd_per_hour": 10.0}))
    dear = run_search(catalog, _search("h100-sxm", None, overrides={"on_demand_usd_per_hour": 20.0}))
    assert dear.plans[0].cost_to_train_usd > 1.9 * cheap.plans[0].cost_to_train_usd


def test_a100_priced_on_p4de_models_the_instance_fabric(catalog: Catalog) -> None:
    """The search prices p4de.24xlarge for on-demand: it models that instance's EFA, as the cost table does, not the
    DGX's InfiniBand."""
    request = _search("a100-80gb", "dgx-a100-80gb")
    result = run_search(catalog, request)
    assert result.best is not None and result.best.node == "p4de.24xlarge"
    assert result.best.scale_out_fabric == catalog.hardware.node("p4de.24xlarge").scale_out_fabric
    scenario = winner_scenario(catalog, request, result)
    assert scenario.estimate.node == "dgx-a100-80gb"  # the user's node: the days before failures on it
    assert scenario.cloud_estimate is not None and scenario.cloud_estimate.node == "p4de.24xlarge"
    assert scenario.cloud_estimate.tokens_per_s != pytest.approx(scenario.estimate.tokens_per_s, rel=1e-6)
    assert result.plans[0].tokens_per_s == pytest.approx(scenario.cloud_estimate.tokens_per_s, rel=1e-9)


def test_deadline_counts_failures_and_names_itself(catalog: Catalog) -> None:
    """A deadline between the winner's days before and after failures rejects it; when only the deadline empties
    the result, the message names the deadline, not memory."""
    free = run_search(catalog, _search("h100-sxm", None, top_k=1))
    best = free.plans[0]
    assert best.time_to_train_days_before_failures < best.time_to_train_days
    between = (best.time_to_train_days_before_failures + best.time_to_train_days) / 2
    squeezed = run_search(catalog, _search("h100-sxm", None, deadline_days=between, top_k=1))
    assert not squeezed.plans or squeezed.plans[0].time_to_train_days <= between
    impossible = run_search(catalog, _search("h100-sxm", None, model="llama3.1-405b", deadline_days=1.0))
    assert impossible.plans == ()
    memory = sum(n for reason, n in impossible.rejected.items() if "does not fit" in reason)
    assert memory > impossible.rejected["misses the deadline"] > 0  # most plans failed memory, yet…
    assert impossible.message is not None and "deadline" in impossible.message
    assert "memory" not in impossible.message and "does not fit" not in impossible.message


def test_pareto_front_is_non_dominated(catalog: Catalog) -> None:
    result = run_search(catalog, _search("h100-sxm", None, gpus=None, gpus_range="128:512"))
    front = result.pareto
    assert front
    for a in front:
        for b in front:
            better_everywhere = (
                b.time_to_train_days <= a.time_to_train_days and b.cost_to_train_usd <= a.cost_to_train_usd
                and b.margin_bytes >= a.margin_bytes
            )  # fmt: skip
            assert (
                not better_everywhere
                or b is a
                or (
                    (b.time_to_train_days, b.cost_to_train_usd, b.margin_bytes)
                    == (a.time_to_train_days, a.cost_to_train_usd, a.margin_bytes)
                )
            )


def test_a_priced_node_that_cannot_run_the_plan_is_an_error(catalog: Catalog, monkeypatch) -> None:
    """No silent fallback to the base node's throughput: the cost names the node and the reason."""
    real = estimate_service.calibrated_estimate

    def refuse_on_instance(catalog, request, *, node=None, track=True):
        if node == "p5.48xlarge":
            raise InputError(
                [{"loc": ["body", "tp"], "msg": "tp 8 exceeds the NVLink domain", "type": "plan.x"}]
            )
        return real(catalog, request, node=node, track=track)

    monkeypatch.setattr("app.services.scenario.calibrated_estimate", refuse_on_instance)
    request = CostRequest(model="llama3.1-8b", gpu="h100-sxm", node="dgx-h100", gpus=8, seq_len=4096,
                          global_batch=8, tokens=1e10)  # fmt: skip
    scenario = run_scenario(catalog, request)
    assert scenario.cost is None
    with pytest.raises(InputError) as info:
        scenario.raise_cost_errors()
    assert "p5.48xlarge" in str(info.value) and "NVLink domain" in str(info.value)


def test_the_estimate_on_the_priced_node_carries_the_plans_track_record(catalog: Catalog) -> None:
    """The cloud option's estimate (p5.48xlarge for a DGX H100 plan) is the same plan on the same GPU: its track
    record is the base estimate's, not absent and not recomputed to something else."""
    request = CostRequest(model="llama3.1-8b", gpu="h100-sxm", node="dgx-h100", gpus=8, seq_len=4096,
                          global_batch=8, tokens=1e10)  # fmt: skip
    scenario = run_scenario(catalog, request)
    assert scenario.cloud_estimate is not None and scenario.cloud_estimate.node != scenario.estimate.node
    assert scenario.estimate.track_record is not None
    assert scenario.cloud_estimate.track_record == scenario.estimate.track_record


ONE_NODE = {"gpu": "l40s", "model": "llama3.1-8b", "tp": "1"}  # an instance, and no server to build
NO_INSTANCE = {"gpu": "gb200", "gpus": "72", "global_batch": "72"}  # no AWS instance to price: no cost table


@pytest.mark.parametrize(
    ("extra", "clusters"),
    [
        ({}, {"dgx-h100", "p5.48xlarge"}),  # the user's node is the self-build server; the cloud prices p5
        ({"node": "p5.48xlarge"}, {"p5.48xlarge", "dgx-h100"}),  # the user's node is the instance priced
        (ONE_NODE, {"g6e.48xlarge"}),
        (NO_INSTANCE, {"gb200-nvl72"}),
    ],
)
def test_one_planner_render_runs_the_estimate_once(client, monkeypatch, extra, clusters) -> None:
    """One render computes the plan's estimate once and every part of the page reuses it (results, charts, notes,
    cost table, reliability, plan document and launch files); a second estimate runs only for a node the cost
    prices that differs from the user's (its own fabric: the days of the cloud options are modelled on the
    instance they pay for). Counted on the estimator itself, keyed on the whole plan and cluster."""
    calls: Counter[tuple[str, str]] = Counter()
    nodes: Counter[str] = Counter()
    real = estimate_service.estimate

    def counting(arch, cluster, plan, **kwargs):
        calls[(plan.model_dump_json(), cluster.model_dump_json())] += 1
        nodes[cluster.node.slug] += 1
        return real(arch, cluster, plan, **kwargs)

    monkeypatch.setattr(estimate_service, "estimate", counting)
    page = client.get("/?" + to_query({**DEFAULTS, **extra}), headers={"HX-Request": "true"})
    assert page.status_code == 200, page.text[:2000]
    assert "chart-gantt" in page.text and ("cost-table" in page.text) == (extra is not NO_INSTANCE)
    assert set(calls.values()) == {1}, nodes  # no plan estimated twice on the same cluster
    assert set(nodes) == clusters and sum(calls.values()) == len(clusters), nodes


def _planner_params(**extra: str) -> dict[str, str]:
    return {**DEFAULTS, "tokens": "1e12", "o.figure.efficiency.gemm_efficiency": "0.55",
            "o.on_demand_usd_per_hour": "50", **extra}  # fmt: skip


def test_surfaces_agree_on_days_and_dollars(client) -> None:
    """Planner cost table, its CSV and JSON, the API's cost, the search row of the same plan and the comparison of
    two saved scenarios: the same on-demand days after failures and dollars."""
    params = _planner_params()
    query = to_query(params)
    page = client.get("/?" + query)
    assert page.status_code == 200, page.text[:2000]
    cost_json = client.get("/planner/cost?" + query + "&format=json").json()
    on_demand = next(r for r in cost_json["options"] if r["option"] == "on-demand")
    days, usd = on_demand["days"], on_demand["cash_usd"]
    assert on_demand["amortised_usd"] == usd  # on-demand owes nothing beyond the run: cash = amortised
    assert on_demand["usd_per_m_tokens_amortised"] == pytest.approx(usd / 1e6)  # 1e12 tokens: $ per million
    table = page.text[page.text.index('id="cost-table"') :]
    row = table[table.index(">on-demand<") : table.index("</tr>", table.index(">on-demand<"))]
    assert fmt_usd(usd) in row and f"{days:.1f}" in row

    form = parse_planner(params)
    assert form.request is not None
    body = form.request.model_dump(mode="json", exclude_none=True)
    api = client.post("/api/v1/cost", json={**body, "tokens": 1e12, "options": ["on-demand"],
                                            "overrides": {"on_demand_usd_per_hour": 50}})  # fmt: skip
    assert api.status_code == 200, api.text
    api_row = api.json()["options"][0]
    assert api_row["days"] == pytest.approx(days, rel=1e-9) and api_row["total_usd"] == pytest.approx(
        usd, rel=1e-9
    )

    est = client.post("/api/v1/estimate", json=body).json()
    p = est["plan"]
    layout = f"tp {p['tp']} · pp {p['pp']} · cp {p['cp']} · ep {p['ep']} · dp {p['dp']}"

    # the search's first row, loaded into the planner: the row's days and dollars are the cost table's
    search = client.get("/search?" + query + "&top_k=3")
    assert search.status_code == 200
    first = search.text[search.text.index('id="search-table"') :]
    first = first[first.index("<tbody>") : first.index("</tr>", first.index("<tbody>"))]
    load = re.search(r'class="button secondary load-plan" href="([^"]+)"', first)
    assert load is not None, first
    assert "o.on_demand_usd_per_hour=50" in load.group(1)  # the overrides travel with it
    url = load.group(1).replace("&amp;", "&")
    loaded = client.get(url.replace("/?", "/planner/cost?", 1) + "&format=json").json()
    loaded_row = next(r for r in loaded["options"] if r["option"] == "on-demand")
    assert f"{loaded_row['days']:.1f}" in first and f">{fmt_usd(loaded_row['cash_usd'])}<" in first

    ids = []
    for name in ("a", "b"):
        saved = client.post("/scenarios", data={"name": name, "query": query}, follow_redirects=False)
        assert saved.status_code == 303
        ids.append(int(saved.headers["location"].rsplit("/", 1)[1]))
    compare = client.get(f"/scenarios/compare?ids={ids[0]}&ids={ids[1]}")
    assert compare.status_code == 200
    assert compare.text.count(f"{days:.1f} days") >= 2 and compare.text.count(fmt_usd(usd)) >= 2
    assert layout in compare.text
    scenario_page = client.get(f"/scenarios/{ids[0]}")
    assert fmt_usd(usd) in scenario_page.text and layout in scenario_page.text


def test_search_rows_export_their_plan(client, catalog: Catalog) -> None:
    """ "Export this plan" on a search row gives the plan document `capplan plan --output --pick N` writes."""
    from app.services.documents import plan_document_from_request

    params = _planner_params()
    page = client.get("/search?" + to_query(params) + "&top_k=3")
    links = re.findall(r'href="(/planner/export\?[^"]+)"', page.text)
    assert len(links) == 3
    request = _search("h100-sxm", None, gpus=int(params["gpus"]), global_batch=int(params["global_batch"]),
                      seq_len=int(params["seq_len"]), tokens=1e12, top_k=3,
                      overrides={"on_demand_usd_per_hour": 50.0})  # fmt: skip
    result = run_search(catalog, request)
    for pick, link in enumerate(links, 1):
        exported = client.get(link.replace("&amp;", "&"))
        assert exported.status_code == 200
        doc = json.loads(exported.text)
        expected = plan_document_from_request(catalog, search_pick_request(request, result, pick))
        assert doc["plan"] == expected.model_dump(mode="json")["plan"]


@pytest.mark.parametrize(("pp", "vpp", "m"), [(8, 1, 256), (8, 4, 128), (32, 1, 256), (4, 2, 64)])
def test_schedule_figures_are_those_of_every_micro_batch(pp, vpp, m) -> None:
    """The drawn sample is small; its bubble is that of the whole step (256 micro-batches, not the 32 drawn)."""
    stages = [StageTimes(1.0 + 0.01 * r, 2.0 + 0.02 * r) for r in range(pp)]
    drawn, whole = sampled_schedule(pp, vpp, m, stages)
    full = pipeline_schedule(pp, vpp, m, stages)
    assert drawn.micro_batches < m and whole.micro_batches == m
    assert whole.makespan_s == pytest.approx(full.makespan_s, rel=1e-9)
    assert whole.bubble_fraction == pytest.approx(full.bubble_fraction, rel=1e-9)
    assert drawn.bubble_fraction > 1.5 * whole.bubble_fraction


def test_every_plan_prints_all_its_degrees(client) -> None:
    query = to_query({**DEFAULTS, "gpus": "64", "tp": "4", "pp": "2", "cp": "2", "dp": "4"})
    page = client.get("/?" + query)
    assert page.status_code == 200
    assert "tp 4 · pp 2 · cp 2 · ep 1 · dp 4" in page.text


def test_a_folded_search_row_loads_into_the_planner_folded(client) -> None:
    """A Megatron MoE search with no expert TP tries the experts at tp and at 1: a folded row prints
    "(expert tp 1)", and its "Load this plan" link carries expert_tp=1, so the planner estimates that very plan
    (its degrees are the row's)."""
    params = {**DEFAULTS, "model": "qwen3-30b-a3b", "gpu": "h100-sxm", "gpus": "16", "framework": "megatron",
              "sharding": "megatron-distopt", "seq_len": "4096", "global_batch": "64"}  # fmt: skip
    page = client.get("/search?" + to_query(params) + "&top_k=40")
    assert page.status_code == 200, page.text[:2000]
    assert "give expert_tp to keep one" in page.text
    body = page.text[page.text.index("<tbody>") :]
    rows = body[: body.index("</tbody>")].split("</tr>")
    folded = next(r for r in rows if "(expert tp 1)" in r)
    unfolded = next(r for r in rows if "ep " in r and "(expert tp" not in r)
    link = (
        re.search(r'class="button secondary load-plan" href="([^"]+)"', folded).group(1).replace("&amp;", "&")
    )
    assert "expert_tp=1" in link
    other = re.search(r'class="button secondary load-plan" href="([^"]+)"', unfolded).group(1)
    assert "expert_tp=1" not in other.replace("&amp;", "&")
    degrees = re.search(r"<td>(tp \d+ · pp [^<]*\(expert tp 1\)[^<]*)</td>", folded)
    assert degrees is not None, folded
    loaded = client.get(link)
    assert loaded.status_code == 200
    assert degrees.group(1) in loaded.text  # the planner's plan line: the same degrees, folded
