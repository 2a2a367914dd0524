"""Cost and reliability catalog: the real data loads, key figures match the reference, broken copies fail."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path

import pytest

from app.domain.catalog.cost_files import load_cost_catalog
from app.domain.catalog.toml_io import CatalogError, load_sources
from app.domain.cost.price_records import CostCatalog, OnDemandPrice
from app.domain.figures import Span, first_overlap, in_force

DATA = Path(__file__).resolve().parents[2] / "data"
INSTANCES = {
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "g5.48xlarge",
    "g6e.48xlarge",
}
SERVERS = {"dgx-a100", "dgx-a100-80gb", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72"}
# Blackwell Ultra reference servers: in the hardware catalog, no self-build price in the sources read
UNPRICED_SERVERS = {"dgx-b300", "gb300-nvl72"}
NODES = INSTANCES | SERVERS | UNPRICED_SERVERS
BEFORE_CUT = date(2025, 1, 15)
AFTER_CUT = date(2025, 9, 1)


@pytest.fixture(scope="module")
def cost_catalog(sources) -> CostCatalog:
    return load_cost_catalog(DATA, sources, NODES)


# -- instance prices ------------------------------------------------------------------------------


def test_one_entry_per_required_instance(cost_catalog):
    slugs = {p.slug for p in cost_catalog.instance_prices}
    assert slugs >= INSTANCES
    assert all(cost_catalog.instance_price(s).gpus_per_instance == 8 for s in INSTANCES)
    assert all(p.region == "us-east-1" for p in cost_catalog.instance_prices)


def test_p5_on_demand_selected_by_date(cost_catalog):
    p5 = cost_catalog.instance_price("p5.48xlarge")
    assert p5.on_demand_usd_per_hour(BEFORE_CUT) == 98.32
    assert p5.on_demand_usd_per_hour(AFTER_CUT) == 55.04
    assert p5.on_demand_usd_per_hour(date(2025, 6, 1)) == 55.04  # effective_from is inclusive
    assert p5.on_demand_usd_per_hour(date(2025, 5, 31)) == 98.32
    assert p5.on_demand_usd_per_hour() == 55.04
    assert p5.on_demand_usd_per_gpu_hour() == pytest.approx(6.88)


@pytest.mark.parametrize(
    ("slug", "before", "after"),
    [
        ("p4d.24xlarge", 32.7726, 21.957642),
        ("p4de.24xlarge", 40.96575, 27.44705),
        ("p5en.48xlarge", 84.80, 63.296),
    ],
)
def test_price_cut_pairs(cost_catalog, slug, before, after):
    price = cost_catalog.instance_price(slug)
    assert price.on_demand_usd_per_hour(BEFORE_CUT) == before
    assert price.on_demand_usd_per_hour(AFTER_CUT) == after


def test_original_wording_kept_in_notes(cost_catalog):
    p5 = cost_catalog.instance_price("p5.48xlarge")
    before, after = p5.on_demand_price(BEFORE_CUT), p5.on_demand_price()
    assert before is not None and "before 2025-06" in (before.note or "")
    assert after is not None and "after 2025-06" in (after.note or "")
    assert before.source == "SKY6" and after.source == "SKY8"


def test_instances_without_cut_history(cost_catalog):
    assert cost_catalog.instance_price("g5.48xlarge").on_demand_usd_per_hour() == 16.288
    assert cost_catalog.instance_price("g6e.48xlarge").on_demand_usd_per_hour(BEFORE_CUT) == 30.13128
    b200 = cost_catalog.instance_price("p6-b200.48xlarge")
    assert b200.on_demand_usd_per_hour() == 113.9328
    assert b200.on_demand_usd_per_gpu_hour() == pytest.approx(14.2416)
    assert b200.on_demand_usd_per_hour(date(2025, 1, 1)) is None  # before GA
    assert b200.figure_provenance("available_from").source == "AWS-P6"


def test_p5e_has_no_on_demand_but_a_capacity_block(cost_catalog):
    p5e = cost_catalog.instance_price("p5e.48xlarge")
    assert not p5e.on_demand_offered
    assert p5e.on_demand_usd_per_hour() is None
    assert p5e.on_demand_usd_per_gpu_hour() is None
    assert p5e.capacity_block_usd_per_hour() == 43.26
    assert p5e.figure_provenance("on_demand_offered").source == "SKY8"


def test_capacity_blocks(cost_catalog):
    p5 = cost_catalog.instance_price("p5.48xlarge")
    assert p5.capacity_block_usd_per_hour() == 39.33
    assert p5.capacity_block_usd_per_gpu_hour() == pytest.approx(4.916, abs=1e-3)
    assert p5.capacity_block is not None and p5.capacity_block.source == "AWS-CB"
    assert cost_catalog.instance_price("p4d.24xlarge").capacity_block_usd_per_gpu_hour() == pytest.approx(
        1.844, abs=1e-3
    )


def test_commitment_rates(cost_catalog):
    p4d = cost_catalog.instance_price("p4d.24xlarge")
    assert p4d.committed_usd_per_gpu_hour(1, BEFORE_CUT) == pytest.approx(2.40)
    assert p4d.committed_usd_per_hour(3, BEFORE_CUT) == pytest.approx(1.45 * 8)
    p5 = cost_catalog.instance_price("p5.48xlarge")
    assert p5.committed_usd_per_hour(1, BEFORE_CUT) == 57.63
    assert p5.committed_usd_per_hour(3, BEFORE_CUT) == 43.16
    # Post-cut commitment rates were not found: no instance rate, callers use the pricing-terms discount.
    assert p5.committed_rate(1) is None
    assert cost_catalog.pricing_terms.savings_plans.discount(1) == 0.41
    assert cost_catalog.pricing_terms.savings_plans.discount(3) == 0.64
    assert p5.committed_usd_per_hour(1, BEFORE_CUT) < p5.on_demand_usd_per_hour(BEFORE_CUT)


def test_spot_snapshots_by_date(cost_catalog):
    p5 = cost_catalog.instance_price("p5.48xlarge")
    pre, post = p5.spot_observation(BEFORE_CUT), p5.spot_observation()
    assert pre is not None and pre.source == "SKY6" and len(pre.usd_per_hour_by_az) == 6
    assert post is not None and post.min_usd_per_hour == 17.6289 and post.max_usd_per_hour == 25.7522
    assert p5.spot_median_usd_per_gpu_hour() == pytest.approx((19.2531 + 21.1543) / 2 / 8)
    p5e = cost_catalog.instance_price("p5e.48xlarge")
    assert p5e.spot_observation() is None
    assert p5e.spot_observation(region="us-east-2") is not None


def test_regional_prices(cost_catalog):
    p5 = cost_catalog.instance_price("p5.48xlarge")
    assert p5.regional_on_demand_usd_per_hour("eu-west-2") == 71.552
    assert p5.regional_on_demand_usd_per_hour("us-east-1", BEFORE_CUT) == 98.32
    assert p5.regional_on_demand_usd_per_hour("sa-east-1") is None


def test_unknown_instance_lists_known(cost_catalog):
    with pytest.raises(KeyError, match="p5.48xlarge"):
        cost_catalog.instance_price("p9.96xlarge")


# -- pricing terms --------------------------------------------------------------------------------


def test_pricing_terms(cost_catalog):
    terms = cost_catalog.pricing_terms
    assert terms.price_cut_2025.effective_from == date(2025, 6, 1)
    assert terms.spot.interruption_notice_s == 120
    assert terms.spot.figure_provenance("interruption_notice_s").source == "KNOWN"
    assert (
        terms.spot.observed_spot_to_on_demand_ratio.low,
        terms.spot.observed_spot_to_on_demand_ratio.high,
    ) == (
        0.11,
        0.47,
    )
    assert terms.savings_plans.figure_provenance("compute_sp_max_discount").source == "AWS-SP"
    assert (terms.capacity_blocks.min_duration_days, terms.capacity_blocks.max_duration_days) == (1, 14)
    assert terms.off_peak.discount_fraction == 0.30
    assert terms.off_peak.is_assumption and terms.off_peak.confidence == "low"
    assert [t.usd_per_gb for t in terms.storage.s3_standard_tiers] == [0.023, 0.022, 0.021]
    assert terms.storage.s3_express_one_zone_usd_per_gb_month == 0.11
    egress = terms.data_transfer.internet_egress_tiers
    assert egress[0].usd_per_gb == 0.0 and egress[1].usd_per_gb == 0.09 and egress[-1].up_to_tb is None
    assert terms.data_transfer.inter_az_usd_per_gb_each_way == 0.01
    assert terms.data_transfer.inter_region_usd_per_gb == 0.02


# -- self-build -----------------------------------------------------------------------------------


def test_self_build_defaults_cover_reference_servers(cost_catalog):
    sb = cost_catalog.self_build
    for node in SERVERS:
        assert sb.server_price_for(node).price_usd.mid > 0
        assert sb.system_power_for(node).max_kw.mid > 0
    assert sb.server_price_for("dgx-h100").price_usd.mid == 310000
    assert sb.server_price_for("hgx-h200").price_usd.mid == 350000  # midpoint of 300-400k
    assert sb.system_power_for("dgx-h100").max_kw.mid == 10.2
    assert sb.system_power_for("gb200-nvl72").max_kw.mid == 120


def test_self_build_options(cost_catalog):
    sb = cost_catalog.self_build
    assert sb.defaults.pue == "enterprise-colo"
    assert sb.pue_option().pue.mid == pytest.approx(1.55)
    assert sb.pue_option("hyperscale").pue.mid == 1.1
    assert sb.electricity().usd_per_kwh == 0.0806
    assert sb.electricity("us-ma-industrial-2024").usd_per_kwh == 0.1804
    assert sb.colocation().usd_per_kw_month.mid == 184.06
    assert sb.depreciation().years == 5
    assert sb.depreciation("coreweave-6y").years == 6
    assert sb.switch_price().price_usd.mid == 36000
    assert sb.component("ib-cables-optics-2tier").usd_per_node == 20480
    assert sb.component("transceivers-128-dgx-h100-nvidia-list").usd_per_node == pytest.approx(
        1_500_000 / 128
    )
    assert sb.factors.avg_power_fraction_during_training == 0.75
    assert sb.factors.interconnect_cost_fraction == 0.19
    assert sb.staff.engineer_base_salary_usd_per_year == 185000
    assert sb.staff.figure_provenance("facility_and_ops_lifetime_usd_per_node").source == "CHEAH"
    with pytest.raises(KeyError, match="enterprise-colo"):
        sb.pue_option("moon-base")


# -- reliability and checkpointing ----------------------------------------------------------------


def test_llama3_default_failure_rate(cost_catalog):
    rel = cost_catalog.reliability
    llama = rel.default_failure_record
    assert llama.slug == "llama3-405b" and rel.defaults.failure_rate_reason
    assert llama.failures_per_gpu_hour == pytest.approx(419 / (16384 * 54 * 24))
    assert llama.job_mtbf_hours() == pytest.approx(3.09, abs=0.01)
    assert llama.job_mtbf_hours(16384) == pytest.approx(3.0, abs=0.1)


def test_kokolis_rates_reproduce_published_projections(cost_catalog):
    rsc1 = cost_catalog.reliability.failure_record("meta-rsc1-kokolis")
    assert rsc1.job_mtbf_hours(16384) == pytest.approx(1.8, abs=0.05)
    assert rsc1.job_mtbf_hours(131072) == pytest.approx(0.23, abs=0.01)
    assert rsc1.job_mtbf_hours(1024) == pytest.approx(29, abs=1)  # the modelled value the reference cites
    assert cost_catalog.reliability.failure_record("meta-rsc2-kokolis").failures_per_1000_node_days == 2.34


def test_other_runs_are_recorded(cost_catalog):
    rel = cost_catalog.reliability
    assert rel.failure_record("opt-175b").gpus == 992
    assert rel.failure_record("opt-175b").job_mtti_is_upper_bound
    assert rel.failure_record("bloom-176b").failures_per_gpu_hour is None
    assert rel.failure_record("megascale").gpus == 12288
    assert rel.failure_record("gemini-tpuv4").job_mtti_hours == 7.5
    assert rel.restart_time().restart_s == 300


def test_checkpoint_figures(cost_catalog):
    ck = cost_catalog.checkpointing
    assert ck.size("training-state-mixed-adam").bytes_per_param.mid == 16
    assert ck.size().bytes_per_param.mid == 14
    assert ck.size("weights-only-bf16").bytes_per_param.mid == 2
    bloom = ck.measured[0]
    assert bloom.bytes_per_param == pytest.approx(13.1, abs=0.05)
    ibm = next(a for a in ck.async_saves if a.slug == "ibm-7b-dcp")
    assert ibm.async_speedup == pytest.approx(23.6, abs=0.1)
    crusoe = next(a for a in ck.async_saves if a.slug == "crusoe-llama3-70b-h200")
    assert crusoe.async_blocking_s is not None and crusoe.async_blocking_s.mid == 0.78
    assert {f.slug for f in ck.formulas} >= {"young-1974", "daly-2006"}
    assert ck.formula("young-1974").source == "YOUNG" and ck.formula("daly-2006").source == "DALY"
    tectonic = next(s for s in ck.storage_bandwidths if s.slug == "llama3-tectonic")
    assert tectonic.sustained_gbyte_per_s == 2000 and tectonic.peak_gbyte_per_s == 7000


# -- helpers --------------------------------------------------------------------------------------


def _price(value: float, start: date | None, end: date | None) -> OnDemandPrice:
    return OnDemandPrice(usd_per_hour=value, effective_from=start, effective_to=end, source="X", as_of="2025")


def test_in_force_and_overlap():
    cut = date(2025, 6, 1)
    old, new = _price(2.0, None, cut), _price(1.0, cut, None)
    assert in_force([old, new], None) is new
    assert in_force([old, new], date(2024, 1, 1)) is old
    assert first_overlap([old, new]) is None
    assert first_overlap([old, _price(1.5, date(2025, 5, 1), None)]) is not None


def test_span_parses_number_and_pair():
    assert Span.model_validate(3).mid == 3
    assert Span.model_validate([1, 2]).mid == 1.5
    with pytest.raises(ValueError):
        Span.model_validate([2, 1])


# -- broken copies --------------------------------------------------------------------------------


def _broken_copy(tmp_path: Path, file: str, old: str, new: str) -> Path:
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    path = data / file
    text = path.read_text()
    assert old in text, f"fixture text not found in {file}: {old!r}"
    path.write_text(text.replace(old, new, 1))
    return data


def _load(data: Path, sources, nodes=NODES) -> CostCatalog:
    return load_cost_catalog(data, sources, nodes)


def test_negative_price_names_file_and_key(tmp_path, sources):
    data = _broken_copy(tmp_path, "prices.toml", "usd_per_hour = 55.04\n", "usd_per_hour = -55.04\n")
    with pytest.raises(CatalogError) as err:
        _load(data, sources)
    assert err.value.path.endswith("prices.toml")
    assert "p5.48xlarge" in err.value.key and "usd_per_hour" in err.value.key


def test_negative_spot_price(tmp_path, sources):
    data = _broken_copy(tmp_path, "prices.toml", "[9.9734, 8.6505]", "[9.9734, -8.6505]")
    with pytest.raises(CatalogError, match="p4de.24xlarge"):
        _load(data, sources)


def test_unknown_source_key(tmp_path, sources):
    data = _broken_copy(tmp_path, "prices.toml", 'source = "SKY6"', 'source = "NOPE"')
    with pytest.raises(CatalogError) as err:
        _load(data, sources)
    assert err.value.path.endswith("prices.toml")
    assert "p5.48xlarge" in err.value.key and "NOPE" in err.value.reason


def test_unknown_source_key_in_reliability(tmp_path, sources):
    data = _broken_copy(tmp_path, "reliability.toml", 'source = "YOUNG"', 'source = "OLD"')
    with pytest.raises(CatalogError) as err:
        _load(data, sources)
    assert err.value.path.endswith("reliability.toml") and "young-1974" in err.value.key


def test_unknown_instance(tmp_path, sources):
    data = _broken_copy(tmp_path, "prices.toml", 'slug = "g5.48xlarge"', 'slug = "g9.48xlarge"')
    with pytest.raises(CatalogError) as err:
        _load(data, sources)
    assert err.value.path.endswith("prices.toml")
    assert "g9.48xlarge" in err.value.key and "unknown instance" in err.value.reason


def test_instance_missing_from_nodes(sources):
    with pytest.raises(CatalogError, match="p4d.24xlarge"):
        _load(DATA, sources, NODES - {"p4d.24xlarge"})


def test_committed_rate_above_on_demand(tmp_path, sources):
    data = _broken_copy(tmp_path, "prices.toml", "usd_per_hour = 57.63", "usd_per_hour = 99.0")
    with pytest.raises(CatalogError, match="above the on-demand") as err:
        _load(data, sources)
    assert "p5.48xlarge" in err.value.key


def test_stale_commitment_left_open_is_caught(tmp_path, sources):
    """A pre-cut rate left open-ended would sit above the post-cut on-demand price."""
    old = "usd_per_hour = 57.63\neffective_to = 2025-06-01\n"
    data = _broken_copy(tmp_path, "prices.toml", old, "usd_per_hour = 57.63\n")
    with pytest.raises(CatalogError, match="above the on-demand"):
        _load(data, sources)


def test_overlapping_effective_dates(tmp_path, sources):
    old = "usd_per_hour = 98.32\neffective_to = 2025-06-01\n"
    data = _broken_copy(tmp_path, "prices.toml", old, "usd_per_hour = 98.32\neffective_to = 2025-07-01\n")
    with pytest.raises(CatalogError, match="overlap") as err:
        _load(data, sources)
    assert "p5.48xlarge" in err.value.key


def test_self_build_negative_and_unknown_default(tmp_path, sources):
    data = _broken_copy(tmp_path, "selfbuild.toml", "price_usd = 36000", "price_usd = -36000")
    with pytest.raises(CatalogError) as err:
        _load(data, sources)
    assert err.value.path.endswith("selfbuild.toml") and "ib-ndr-64p-switch-fs" in err.value.key
    data2 = _broken_copy(tmp_path / "b", "selfbuild.toml", 'pue = "enterprise-colo"', 'pue = "moon-base"')
    with pytest.raises(CatalogError, match="moon-base") as err2:
        _load(data2, sources)
    assert err2.value.key == "self_build_defaults.pue"


def test_reliability_default_must_exist(tmp_path, sources):
    data = _broken_copy(tmp_path, "reliability.toml", 'failure_rate = "llama3-405b"', 'failure_rate = "nope"')
    with pytest.raises(CatalogError) as err:
        _load(data, sources)
    assert err.value.key == "reliability_defaults.failure_rate"


def test_provider_prices_and_storage_tiers_are_checked(tmp_path: Path) -> None:
    sources = load_sources(DATA)
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    prices = data / "prices.toml"
    prices.write_text(prices.read_text().replace('like_node = "dgx-h100"', 'like_node = "no-such-node"', 1))
    with pytest.raises(CatalogError, match="like_node"):
        _load(data, sources)
    shutil.copy(DATA / "prices.toml", prices)
    rel = data / "reliability.toml"
    rel.write_text(rel.read_text().replace("aggregate_write_gbyte_per_s = 2000\n", "", 1))
    with pytest.raises(CatalogError, match="aggregate_write"):
        _load(data, sources)
