"""The hardware catalog: real data/ figures against the reference, fat-tree sizing, malformed files."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from app.domain.catalog.hardware_files import load_hardware
from app.domain.catalog.toml_io import CatalogError, load_sources
from app.domain.estimator.hardware import (
    GIB,
    Accelerator,
    HardwareCatalog,
    dragonfly_plus_max_endpoints,
    fat_tree_max_endpoints,
    fat_tree_switch_counts,
)

DATA = Path(__file__).resolve().parents[2] / "data"

ACCELERATORS = [
    "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "h200-nvl",
    "b200", "gb200", "b300", "gb300", "l40s", "a10g", "l4",
]  # fmt: skip
SERVERS = ["dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72"]
INSTANCES = [
    "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
    "p6-b200.48xlarge", "g5.48xlarge", "g6e.48xlarge",
]  # fmt: skip
FABRICS = [
    "nvlink3", "nvlink4", "nvlink5", "pcie4", "pcie5", "infiniband-hdr", "infiniband-ndr",
    "infiniband-xdr", "efa-v1", "efa-v2", "efa-v3", "roce-400g",
]  # fmt: skip


@pytest.fixture(scope="module")
def hw() -> HardwareCatalog:
    return load_hardware(DATA, load_sources(DATA))


# ------------------------------------------------------------------------------------------ presence


def test_every_required_slug_is_present(hw: HardwareCatalog) -> None:
    assert set(ACCELERATORS) <= {a.slug for a in hw.accelerators}
    assert set(SERVERS + INSTANCES) <= {n.slug for n in hw.nodes}
    assert set(FABRICS) <= {f.slug for f in hw.fabrics}
    assert {"quantum-2", "quantum-x800"} <= {s.slug for s in hw.switches}
    assert {"fat-tree", "dragonfly-plus"} <= {t.slug for t in hw.topologies}


def test_every_numeric_figure_is_positive(hw: HardwareCatalog) -> None:
    entries = hw.accelerators + hw.nodes + hw.fabrics + hw.switches + hw.topologies
    for entry in entries:
        for field in entry.figure_names():
            value = getattr(entry, field)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            assert value > 0, f"{entry.slug}.{field} = {value}"


def test_every_entry_cites_known_sources_with_a_date(hw: HardwareCatalog) -> None:
    sources = load_sources(DATA)
    for entry in hw.accelerators + hw.nodes + hw.fabrics + hw.switches + hw.topologies:
        assert entry.source_keys() <= set(sources), entry.slug
        for field in entry.figure_names():
            assert entry.figure_provenance(field).as_of


def test_lookups_raise_keyerror_listing_known_slugs(hw: HardwareCatalog) -> None:
    with pytest.raises(KeyError) as err:
        hw.accelerator("h100")
    assert "h100-sxm" in str(err.value) and "'h100'" in str(err.value)
    with pytest.raises(KeyError, match="p5.48xlarge"):
        hw.node("p5")
    with pytest.raises(KeyError, match="nvlink4"):
        hw.fabric("nvlink")


# ------------------------------------------------------------------------------------------ accelerators


def test_h100_sxm_is_dense_not_sparse(hw: HardwareCatalog) -> None:
    h100 = hw.accelerator("h100-sxm")
    assert h100.bf16_dense_tflops == 989.4  # not 1,979 (2:4 sparsity)
    assert h100.peak_tflops("bf16") == 989.4
    assert h100.peak_tflops("fp16") == 989.4
    assert h100.peak_tflops("fp8") == 1978.9
    assert h100.peak_tflops("tf32") == 494.7
    assert h100.memory_marketed_gb == 80
    assert h100.usable_gib == pytest.approx(79.65, abs=0.01)  # DESIGN.md: 79.6 GiB usable
    assert h100.memory_bandwidth_gb_per_s == 3350
    assert (h100.nvlink_generation, h100.nvlink_bandwidth_gb_per_s) == (4, 900)
    assert h100.tdp_w == 700


def test_h200_and_blackwell_figures(hw: HardwareCatalog) -> None:
    h200 = hw.accelerator("h200-sxm")
    assert h200.memory_marketed_gb == 141
    assert 139 < h200.usable_gib <= 141
    assert h200.bf16_dense_tflops == 989.4 and h200.memory_bandwidth_gb_per_s == 4800
    b200 = hw.accelerator("b200")
    assert b200.bf16_dense_tflops == 2250  # 2,500 is the GB200 figure
    assert b200.fp8_dense_tflops == 4500
    assert b200.memory_marketed_gb == 180
    assert b200.usable_gib == pytest.approx(179.06, abs=0.01)  # 183,359 MiB
    assert b200.nvlink_bandwidth_gb_per_s == 1800 and b200.tdp_w == 1000
    gb200 = hw.accelerator("gb200")
    assert (gb200.bf16_dense_tflops, gb200.fp8_dense_tflops, gb200.tdp_w) == (2500, 5000, 1200)
    assert gb200.pcie_generation is None


def test_blackwell_ultra_figures(hw: HardwareCatalog) -> None:
    """GB300 (Verda's per-GPU dense table): GB200's dense peaks at 1,400 W, 279 GB marketed; its usable memory is
    derived as 288 GiB physical x GB200's visible/physical ratio (189,471 / 196,608 MiB) = 284,206 MiB."""
    gb300 = hw.accelerator("gb300")
    assert (gb300.bf16_dense_tflops, gb300.fp8_dense_tflops, gb300.tdp_w) == (2500, 5000, 1400)
    assert gb300.memory_usable_bytes == 284_206 * 2**20 and gb300.pcie_generation is None
    assert gb300.provenance["memory_usable_bytes"].confidence.value == "low"
    rack = hw.node("gb300-nvl72")
    assert (rack.accelerators_per_node, rack.nvlink_domain_size, rack.scale_out_gbit_per_s) == (
        72,
        72,
        57_600,
    )
    dgx = hw.node("dgx-b300")
    assert (dgx.accelerator, dgx.accelerators_per_node, dgx.max_power_kw) == ("b300", 8, 14.5)


def test_accelerators_without_a_node_are_the_known_pcie_cards(hw: HardwareCatalog) -> None:
    """An accelerator no node carries cannot be estimated, searched or priced (B300 had none until 2026-12-06).
    The PCIe cards below still have none (README, "Hardware catalog"); a new accelerator must come with its node."""
    carried = {n.accelerator for n in hw.nodes}
    assert {a.slug for a in hw.accelerators} - carried == {"h100-pcie", "h100-nvl", "h200-nvl", "l4"}


def test_pcie_cards_and_ampere(hw: HardwareCatalog) -> None:
    assert hw.accelerator("h100-pcie").bf16_dense_tflops == 756
    assert hw.accelerator("h100-nvl").memory_marketed_gb == 94
    assert hw.accelerator("h200-nvl").tdp_w == 600
    for slug in ("l40s", "a10g", "l4"):
        acc = hw.accelerator(slug)
        assert acc.nvlink_generation is None and acc.nvlink_bandwidth_gb_per_s is None, slug
    assert hw.accelerator("l40s").bf16_dense_tflops == 362.05
    assert hw.accelerator("l4").fp8_dense_tflops == 242.5
    for slug in ("a100-40gb", "a100-80gb", "a10g"):
        assert hw.accelerator(slug).fp8_dense_tflops is None, slug
    assert hw.accelerator("a100-80gb").memory_bandwidth_gb_per_s == 2039


def test_usable_memory_never_exceeds_marketed(hw: HardwareCatalog) -> None:
    for acc in hw.accelerators:
        assert acc.memory_usable_bytes <= acc.memory_marketed_gb * GIB, acc.slug
        assert acc.usable_gib > 0.9 * acc.memory_marketed_gb * 1e9 / GIB, acc.slug


def test_peak_tflops_rejects_unsupported_dtypes(hw: HardwareCatalog) -> None:
    with pytest.raises(ValueError, match=r"a100-80gb.*fp8|fp8.*a100-80gb"):
        hw.accelerator("a100-80gb").peak_tflops("fp8")
    with pytest.raises(ValueError, match=r"int4.*h100-sxm"):
        hw.accelerator("h100-sxm").peak_tflops("int4")
    assert hw.accelerator("h100-sxm").peak_tflops("BF16") == 989.4


def test_uncertain_figures_carry_low_confidence(hw: HardwareCatalog) -> None:
    a10g = hw.accelerator("a10g")
    assert a10g.figure_provenance("bf16_dense_tflops").confidence == "low"
    assert a10g.figure_provenance("tf32_dense_tflops").note
    b200 = hw.accelerator("b200")
    assert b200.figure_provenance("memory_usable_bytes").source == "SKY8"
    assert hw.accelerator("h100-sxm").figure_provenance("bf16_dense_tflops").source == "NV-H100"


# ------------------------------------------------------------------------------------------ nodes


def test_p5_is_eight_h100_with_3200_gbit_efa(hw: HardwareCatalog) -> None:
    p5 = hw.node("p5.48xlarge")
    assert (p5.kind, p5.provider) == ("cloud-instance", "aws")
    assert p5.accelerator == "h100-sxm" and p5.accelerators_per_node == 8
    assert p5.scale_out_fabric == "efa-v2" and p5.scale_out_nics == 32
    assert p5.scale_out_gbit_per_s == 3200
    assert p5.intra_node_fabric == "nvlink4"
    assert (p5.vcpus, p5.host_memory_gib) == (192, 2048)
    assert hw.node_accelerator(p5).slug == "h100-sxm"


@pytest.mark.parametrize(
    ("slug", "accelerator", "gbit"),
    [
        ("p4d.24xlarge", "a100-40gb", 400),
        ("p4de.24xlarge", "a100-80gb", 400),
        ("p5e.48xlarge", "h200-sxm", 3200),
        ("p5en.48xlarge", "h200-sxm", 3200),
        ("p6-b200.48xlarge", "b200", 3200),
        ("g5.48xlarge", "a10g", 100),
        ("g6e.48xlarge", "l40s", 400),
        ("dgx-h100", "h100-sxm", 3200),
        ("dgx-b200", "b200", 3200),
    ],
)
def test_instance_accelerator_and_scale_out(
    hw: HardwareCatalog, slug: str, accelerator: str, gbit: float
) -> None:
    node = hw.node(slug)
    assert node.accelerator == accelerator and node.accelerators_per_node == 8
    assert node.scale_out_gbit_per_s == gbit


def test_server_power_and_the_nvl72_rack(hw: HardwareCatalog) -> None:
    assert [hw.node(s).max_power_kw for s in ("dgx-a100", "dgx-h100", "dgx-b200")] == [6.5, 10.2, 14.3]
    rack = hw.node("gb200-nvl72")
    assert rack.accelerators_per_node == 72 and rack.nvlink_domain_size == 72 and rack.nvlink_domains == 1
    assert rack.scale_out_gbit_per_s == 28_800
    assert all(hw.node(s).max_power_kw is None for s in INSTANCES)


def test_nodes_reference_consistent_fabrics(hw: HardwareCatalog) -> None:
    for node in hw.nodes:
        acc = hw.node_accelerator(node)
        intra, out = hw.fabric(node.intra_node_fabric), hw.fabric(node.scale_out_fabric)
        assert intra.is_scale_up and not out.is_scale_up, node.slug
        if intra.kind == "nvlink":
            assert intra.gb_per_s_per_gpu_bidirectional == acc.nvlink_bandwidth_gb_per_s, node.slug
        else:
            assert node.nvlink_domain_size == 1, node.slug


# ------------------------------------------------------------------------------------------ fabrics


def test_link_bandwidths(hw: HardwareCatalog) -> None:
    assert hw.fabric("nvlink3").gb_per_s_per_gpu_bidirectional == 600
    assert hw.fabric("nvlink4").gb_per_s_per_gpu_bidirectional == 900
    assert hw.fabric("nvlink5").gb_per_s_per_gpu_bidirectional == 1800
    ports = {
        s: hw.fabric(s).gbit_per_s_per_port for s in ("infiniband-hdr", "infiniband-ndr", "infiniband-xdr")
    }
    assert ports == {"infiniband-hdr": 200, "infiniband-ndr": 400, "infiniband-xdr": 800}
    assert [hw.fabric(f"efa-v{i}").gbit_per_s_per_port for i in (1, 2, 3)] == [100, 100, 200]
    assert hw.fabric("roce-400g").gbit_per_s_per_port == 400
    assert all(f.latency_us is None for f in hw.fabrics)  # no sourced latency in the reference


def test_switches(hw: HardwareCatalog) -> None:
    q2, x800 = hw.switch("quantum-2"), hw.switch("quantum-x800")
    assert (q2.radix, q2.port_gbit_per_s, q2.fabric) == (64, 400, "infiniband-ndr")
    assert (x800.radix, x800.port_gbit_per_s, x800.fabric) == (144, 800, "infiniband-xdr")
    assert x800.max_endpoints(2) == 10_368


def test_topologies(hw: HardwareCatalog) -> None:
    fat_tree = hw.topology("fat-tree")
    assert fat_tree.tiers == (1, 2, 3) and fat_tree.default_oversubscription == 1.0
    assert fat_tree.max_endpoints(64, tiers=2) == 2048
    assert hw.topology("dragonfly-plus").max_endpoints(64) == 1_049_600


# ------------------------------------------------------------------------------------------ fat tree

# NVIDIA DGX SuperPOD component counts (reference superpod_reference_counts): rail-optimised,
# non-blocking, radix 64 (Quantum-2 NDR). (endpoints, leaf, spine, core, node-leaf, leaf-spine, spine-core)
SUPERPOD_COUNTS = [
    (512, 16, 8, 0, 512, 512, 0),  # B200 RA, 2 SU
    (1024, 32, 16, 0, 1024, 1024, 0),  # 4 SU, 1,024 GPUs
    (2048, 64, 32, 0, 2048, 2048, 0),  # 8 SU
    (4096, 128, 128, 64, 4096, 4096, 4096),  # 16 SU
    (8192, 256, 256, 128, 8192, 8192, 8192),  # 32 SU
    (16384, 512, 512, 256, 16384, 16384, 16384),  # 64 SU
    (252, 8, 4, 0, 252, 256, 0),  # H100 RA, 1 SU: 31 nodes x 8 + 4 UFM ports
    (1020, 32, 16, 0, 1020, 1024, 0),  # H100 RA, 4 SU: 127 nodes x 8 + 4 UFM ports
]


@pytest.mark.parametrize(("endpoints", "leaf", "spine", "core", "c1", "c2", "c3"), SUPERPOD_COUNTS)
def test_fat_tree_reproduces_superpod_counts(
    endpoints: int, leaf: int, spine: int, core: int, c1: int, c2: int, c3: int
) -> None:
    size = fat_tree_switch_counts(endpoints, radix=64)
    assert (size.leaf_switches, size.spine_switches, size.core_switches) == (leaf, spine, core)
    assert (size.cables_endpoint_leaf, size.cables_leaf_spine, size.cables_spine_core) == (c1, c2, c3)
    assert size.tiers == (3 if core else 2)


def test_fat_tree_1024_gpus_is_32_leaves_16_spines() -> None:
    size = fat_tree_switch_counts(1024, 64)
    assert (size.tiers, size.leaf_switches, size.spine_switches, size.switches) == (2, 32, 16, 48)
    assert size.cables == 2 * 1024 and size.switch_ports_used == 3 * 1024
    assert size.transceivers_switch_side == 3 * 1024 // 2 and size.transceivers_endpoint_side == 1024


def test_fat_tree_three_tiers_use_5e_switch_ports() -> None:
    size = fat_tree_switch_counts(4096, 64)
    assert size.cables == 3 * 4096 and size.switch_ports_used == 5 * 4096


@pytest.mark.parametrize(
    ("nodes", "tiers", "leaf", "spine", "core"),
    [(128, 2, 15, 8, 0), (1024, 2, 114, 57, 0), (2048, 3, 228, 228, 114)],
)
def test_fat_tree_at_xdr_radix_144(nodes: int, tiers: int, leaf: int, spine: int, core: int) -> None:
    size = fat_tree_switch_counts(nodes * 8, 144)
    assert (size.tiers, size.leaf_switches, size.spine_switches, size.core_switches) == (
        tiers,
        leaf,
        spine,
        core,
    )


def test_fat_tree_limits_and_one_tier() -> None:
    assert [fat_tree_max_endpoints(64, t) for t in (1, 2, 3)] == [64, 2048, 65_536]
    assert [fat_tree_max_endpoints(144, t) for t in (1, 2, 3)] == [144, 10_368, 746_496]
    assert fat_tree_switch_counts(2048, 64).tiers == 2 and fat_tree_switch_counts(2049, 64).tiers == 3
    one = fat_tree_switch_counts(40, 64)
    assert (one.tiers, one.switches, one.cables) == (1, 1, 40)
    with pytest.raises(ValueError, match="more than 3 tiers"):
        fat_tree_switch_counts(65_537, 64)


def test_fat_tree_oversubscription_saves_spines() -> None:
    blocking = fat_tree_switch_counts(1024, 64, oversubscription=3.0)
    assert (blocking.leaf_down_ports, blocking.leaf_up_ports) == (48, 16)
    assert blocking.realised_oversubscription == 3.0
    assert blocking.leaf_switches == 22 and blocking.spine_switches == 6
    assert blocking.switches < fat_tree_switch_counts(1024, 64).switches
    uneven = fat_tree_switch_counts(1024, 64, oversubscription=2.0)
    assert uneven.realised_oversubscription <= 2.0
    with pytest.raises(ValueError, match="oversubscription"):
        fat_tree_switch_counts(1024, 64, oversubscription=0.5)


def test_dragonfly_plus_endpoints() -> None:
    assert dragonfly_plus_max_endpoints(64) == 1_049_600
    assert math.isclose(dragonfly_plus_max_endpoints(64) / 1e6, 1.05, rel_tol=0.01)


# ------------------------------------------------------------------------------------------ malformed data


@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    for name in ("sources.toml", "sources_hardware.toml", "accelerators.toml", "nodes.toml", "fabrics.toml"):
        shutil.copy(DATA / name, tmp_path / name)
    return tmp_path


def _load(data_dir: Path) -> HardwareCatalog:
    return load_hardware(data_dir, load_sources(data_dir))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_wrong_type_names_file_and_key(data_copy: Path) -> None:
    _edit(data_copy / "accelerators.toml", "bf16_dense_tflops = 989.4 ", 'bf16_dense_tflops = "989.4" ')
    with pytest.raises(CatalogError) as err:
        _load(data_copy)
    assert "accelerators.toml" in str(err.value)
    assert "'h100-sxm'" in err.value.key and "bf16_dense_tflops" in err.value.key


def test_unknown_source_names_file_and_key(data_copy: Path) -> None:
    _edit(data_copy / "accelerators.toml", 'source = "NV-H200"', 'source = "NO-SUCH-SOURCE"')
    with pytest.raises(CatalogError, match=r"accelerators\.toml.*h200-sxm.*NO-SUCH-SOURCE"):
        _load(data_copy)


def test_unknown_node_accelerator_names_file_and_key(data_copy: Path) -> None:
    _edit(data_copy / "nodes.toml", 'accelerator = "h100-sxm"', 'accelerator = "h100-sxm5"')
    with pytest.raises(CatalogError) as err:
        _load(data_copy)
    assert "nodes.toml" in str(err.value) and err.value.key == "nodes ('dgx-h100').accelerator"
    assert "h100-sxm5" in err.value.reason and "h100-sxm" in err.value.reason


def test_unknown_fabric_and_mismatched_nvlink(data_copy: Path) -> None:
    _edit(data_copy / "nodes.toml", 'scale_out_fabric = "efa-v2"', 'scale_out_fabric = "efa-v9"')
    with pytest.raises(CatalogError, match=r"nodes\.toml.*scale_out_fabric.*efa-v9"):
        _load(data_copy)


def test_nvlink_generation_mismatch(data_copy: Path) -> None:
    _edit(data_copy / "nodes.toml", 'intra_node_fabric = "nvlink3"', 'intra_node_fabric = "nvlink4"')
    with pytest.raises(CatalogError, match=r"dgx-a100.*intra_node_fabric.*NVLink 4"):
        _load(data_copy)


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("fp8_dense_tflops = 1978.9", "fp8_dense_tflops = 900.0", "below bf16"),
        ("memory_usable_bytes = 85_520_809_984      # 81,559 MiB = 79.65 GiB", "memory_usable_bytes = 95_000_000_000", "exceeds memory_marketed_gb"),
        ("tdp_w = 700.0", "tdp_w = -700.0", "greater than 0"),
        ('as_of = "2022-03"', 'as_of = "March 2022"', "as_of"),
    ],
)  # fmt: skip
def test_inconsistent_accelerator_figures(data_copy: Path, old: str, new: str, reason: str) -> None:
    _edit(data_copy / "accelerators.toml", old, new)
    with pytest.raises(CatalogError, match=reason) as err:
        _load(data_copy)
    assert "accelerators.toml" in str(err.value) and "accelerators[" in err.value.key


def test_misspelt_table_is_rejected(data_copy: Path) -> None:
    _edit(data_copy / "fabrics.toml", '[[switches]]\nslug = "quantum-2"', '[[switch]]\nslug = "quantum-2"')
    with pytest.raises(CatalogError, match=r"fabrics\.toml: switch"):
        _load(data_copy)


def test_accelerator_model_is_frozen_and_validated() -> None:
    base = dict(slug="x", name="X", source="KNOWN", as_of="2024", arch="A", form_factor="F")
    figures = dict(bf16_dense_tflops=100.0, fp16_dense_tflops=100.0, tf32_dense_tflops=50.0, tdp_w=300.0)
    memory = dict(memory_marketed_gb=24.0, memory_usable_bytes=20 * GIB, memory_bandwidth_gb_per_s=600.0)
    acc = Accelerator(**base, **figures, **memory)
    with pytest.raises(ValueError, match="frozen"):
        acc.tdp_w = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="nvlink"):
        Accelerator(**base, **figures, **memory, nvlink_generation=4)
