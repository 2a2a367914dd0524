"""Owning the cluster: servers + fabric (switches, cables, optics, NICs sized from the topology) +
storage + installation = capex; power, colocation, staff and maintenance = opex; capital per month (the
annuity over the depreciation years), break-even against the cloud and the utilisation above which owning
is cheaper.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from app.domain.cost.inputs import (
    CABLES_OPTICS,
    CABLES_OPTICS_NICS,
    DEFAULT_COST_OF_CAPITAL,
    DEFAULT_FRONTEND_PORTS,
    DEFAULT_INSTALLATION_FRACTION,
    DEFAULT_LEAD_TIME_MONTHS,
    DEFAULT_LOADED_COST_MULTIPLIER,
    DEFAULT_MAINTENANCE_FRACTION_PER_YEAR,
    DEFAULT_RESIDUAL_FRACTION,
    DEFAULT_SPARES_FRACTION,
    DEFAULT_STAFF_FTE_PER_1000_GPUS,
    DEFAULT_STORAGE_USD_PER_TB,
    NIC_LINE,
    CostInputError,
    SelfBuildOverrides,
    _choose,
    _default,
    _entry,
    _override,
)
from app.domain.cost.price_records import CostCatalog
from app.domain.cost.selfbuild_records import SelfBuild
from app.domain.estimator.estimate import Assumption
from app.domain.estimator.hardware import FatTreeSize, HardwareCatalog, Node, fat_tree_switch_counts
from app.domain.provenance import Frozen
from app.domain.reliability.formulas import HOURS_PER_MONTH


def self_build_node_for(hardware: HardwareCatalog, cost_catalog: CostCatalog, accelerator: str) -> str | None:
    """The reference server for ``accelerator`` that has a default server price, if any."""
    priced = cost_catalog.self_build.defaults.server_price
    for node in sorted(hardware.nodes, key=lambda n: n.slug):
        if node.kind == "server" and node.accelerator == accelerator and node.slug in priced:
            return node.slug
    return None


class SelfBuildInputs(Frozen):
    """Every self-build figure, resolved (USD, kW, fractions per year)."""

    server_usd: float = Field(ge=0)
    switch_usd: float = Field(ge=0)
    switch_radix: int = Field(ge=2)
    oversubscription: float = Field(default=1.0, ge=1)
    cables_optics_usd_per_port: tuple[float, float, float] = Field(
        description="per NIC port, 1/2/3-tier fabric"
    )
    nic_usd: float = Field(ge=0)
    storage_tb: float = Field(ge=0)
    storage_usd_per_tb: float = Field(ge=0)
    installation_fraction: float = Field(ge=0, le=1)
    max_kw_per_node: float = Field(gt=0)
    avg_power_fraction: float = Field(gt=0, le=1)
    pue: float = Field(ge=1)
    electricity_usd_per_kwh: float = Field(ge=0)
    colocation_usd_per_kw_month: float = Field(ge=0)
    staff_fte_per_1000_gpus: float = Field(ge=0)
    staff_usd_per_fte_year: float = Field(ge=0)
    maintenance_fraction_per_year: float = Field(ge=0, le=1)
    depreciation_years: float = Field(gt=0)
    residual_fraction: float = Field(ge=0, le=1)
    cost_of_capital_per_year: float = Field(ge=0, le=1)
    frontend_usd_per_node: float = Field(default=0.0, ge=0)
    spares_fraction: float = Field(default=0.0, ge=0, le=1)
    lead_time_months: float = Field(default=0.0, ge=0)


class FabricCost(Frozen):
    size: FatTreeSize | None = Field(description="None for a single node: no scale-out fabric")
    switches: int
    cables: int
    transceivers: int
    nics: int
    switches_usd: float
    cables_optics_usd: float
    nics_usd: float

    @property
    def total_usd(self) -> float:
        return self.switches_usd + self.cables_optics_usd + self.nics_usd


class SelfBuildTco(Frozen):
    node: str
    nodes: int
    gpus: int
    fabric: FabricCost
    servers_usd: float
    fabric_usd: float
    storage_usd: float
    frontend_usd: float = 0.0
    spares_usd: float = 0.0
    installation_usd: float
    capex_usd: float
    lead_time_months: float = 0.0
    it_kw_max: float
    it_kw_average: float
    facility_kw_average: float
    power_usd_per_month: float
    colocation_usd_per_month: float
    staff_usd_per_month: float
    maintenance_usd_per_month: float
    opex_usd_per_month: float
    depreciation_years: float
    residual_usd: float
    cost_of_capital_per_year: float
    capital_usd_per_month: float
    monthly_equivalent_usd: float
    usd_per_gpu_hour: float
    assumptions: tuple[Assumption, ...] = ()


def capital_usd_per_month(capex_usd: float, residual_usd: float, years: float, rate_per_year: float) -> float:
    """Monthly payment that repays ``capex`` less the present value of the residual over ``years`` at
    ``rate_per_year`` (an annuity); straight-line (capex − residual) / months when the rate is 0.

    >>> capital_usd_per_month(300_000, 0, 5, 0.0)
    5000.0
    >>> round(capital_usd_per_month(300_000, 0, 5, 0.08), 2)  # the usual 8 %, 60-month loan payment
    6082.92
    """
    months = years * 12.0
    i = rate_per_year / 12.0
    if i == 0:
        return (capex_usd - residual_usd) / months
    discount = (1.0 + i) ** -months
    return (capex_usd - residual_usd * discount) * i / (1.0 - discount)


def fabric_cost(inputs: SelfBuildInputs, nodes: int, nics_per_node: int) -> FabricCost:
    """The scale-out fabric of ``nodes`` servers: one NIC port per endpoint, a non-blocking (or
    ``inputs.oversubscription``) fat tree sized by :func:`app.domain.estimator.hardware.fat_tree_switch_counts`,
    switches at ``switch_usd``, cables and optics per NIC port by tier count, NICs at ``nic_usd``. A single
    node needs no fabric.

    128 DGX H100 (1,024 GPUs, 8 × 400G NICs each) on 64-port NDR switches: 2 tiers, 32 leaves and 16 spines,
    as in NVIDIA's DGX SuperPOD reference (4 scalable units); 1,024 node-leaf + 1,024 leaf-spine cables.

    >>> inputs = SelfBuildInputs(server_usd=0, switch_usd=36_000, switch_radix=64,
    ...     cables_optics_usd_per_port=(1_320, 2_560, 3_800), nic_usd=0, storage_tb=0, storage_usd_per_tb=0,
    ...     installation_fraction=0, max_kw_per_node=10.2, avg_power_fraction=0.75, pue=1.55,
    ...     electricity_usd_per_kwh=0.08, colocation_usd_per_kw_month=184, staff_fte_per_1000_gpus=0,
    ...     staff_usd_per_fte_year=0, maintenance_fraction_per_year=0, depreciation_years=5,
    ...     residual_fraction=0, cost_of_capital_per_year=0)
    >>> fabric = fabric_cost(inputs, nodes=128, nics_per_node=8)
    >>> fabric.size.tiers, fabric.size.leaf_switches, fabric.size.spine_switches, fabric.cables
    (2, 32, 16, 2048)
    >>> fabric.switches_usd, fabric.cables_optics_usd  # 48 × $36k; 1,024 ports × $2,560
    (1728000.0, 2621440.0)
    """
    nics = nodes * nics_per_node
    nics_usd = nics * inputs.nic_usd
    if nodes <= 1:
        return FabricCost(size=None, switches=0, cables=0, transceivers=0, nics=nics, switches_usd=0.0,
                          cables_optics_usd=0.0, nics_usd=nics_usd)  # fmt: skip
    size = fat_tree_switch_counts(nics, inputs.switch_radix, inputs.oversubscription)
    per_port = inputs.cables_optics_usd_per_port[size.tiers - 1]
    return FabricCost(
        size=size, switches=size.switches, cables=size.cables, transceivers=size.transceivers, nics=nics,
        switches_usd=size.switches * inputs.switch_usd, cables_optics_usd=nics * per_port, nics_usd=nics_usd,
    )  # fmt: skip


def self_build_tco(
    inputs: SelfBuildInputs, *, node: str, nodes: int, gpus_per_node: int, nics_per_node: int,
    assumptions: Sequence[Assumption] = (),
) -> SelfBuildTco:  # fmt: skip
    """Capex, opex per month and monthly equivalent of ``nodes`` servers.

    A 12-month TCO by hand — one $300,000 server (no fabric for a single node), 10 kW, 75 % average draw,
    PUE 1.5, $0.10/kWh, colocation $200/kW-month, no staff, storage, installation or maintenance,
    5 years straight line to zero:

    - power: 10 × 0.75 × 1.5 × 0.10 × 730 = $821.25/month; colocation: 10 × 200 = $2,000/month
    - capital: 300,000 / 60 = $5,000/month; monthly equivalent $7,821.25
    - 12 months: cash 300,000 + 12 × 2,821.25 = $333,855; amortised 12 × 7,821.25 = $93,855

    >>> inputs = SelfBuildInputs(server_usd=300_000, switch_usd=0, switch_radix=64,
    ...     cables_optics_usd_per_port=(0, 0, 0), nic_usd=0, storage_tb=0, storage_usd_per_tb=0,
    ...     installation_fraction=0, max_kw_per_node=10, avg_power_fraction=0.75, pue=1.5,
    ...     electricity_usd_per_kwh=0.10, colocation_usd_per_kw_month=200, staff_fte_per_1000_gpus=0,
    ...     staff_usd_per_fte_year=0, maintenance_fraction_per_year=0, depreciation_years=5,
    ...     residual_fraction=0, cost_of_capital_per_year=0)
    >>> tco = self_build_tco(inputs, node="dgx-h100", nodes=1, gpus_per_node=8, nics_per_node=8)
    >>> round(tco.power_usd_per_month, 2), tco.colocation_usd_per_month, tco.monthly_equivalent_usd
    (821.25, 2000.0, 7821.25)
    >>> cumulative_usd(tco.capex_usd, tco.opex_usd_per_month, 12)[-1], round(12 * tco.monthly_equivalent_usd, 2)
    (333855.0, 93855.0)
    """
    if nodes < 1:
        raise CostInputError("nodes", "a cluster has at least one node")
    i = inputs
    fabric = fabric_cost(i, nodes, nics_per_node)
    servers = nodes * i.server_usd
    storage = i.storage_tb * i.storage_usd_per_tb
    frontend = nodes * i.frontend_usd_per_node if nodes > 1 else 0.0  # one node joins the existing LAN
    spares = servers * i.spares_fraction
    hardware_usd = servers + fabric.total_usd + storage + frontend + spares
    installation = hardware_usd * i.installation_fraction
    capex = hardware_usd + installation
    it_max = nodes * i.max_kw_per_node
    it_avg = it_max * i.avg_power_fraction
    facility = it_avg * i.pue
    power = facility * i.electricity_usd_per_kwh * HOURS_PER_MONTH
    colocation = it_max * i.colocation_usd_per_kw_month
    gpus = nodes * gpus_per_node
    staff = gpus / 1000.0 * i.staff_fte_per_1000_gpus * i.staff_usd_per_fte_year / 12.0
    maintenance = hardware_usd * i.maintenance_fraction_per_year / 12.0
    opex = power + colocation + staff + maintenance
    residual = capex * i.residual_fraction
    capital = capital_usd_per_month(capex, residual, i.depreciation_years, i.cost_of_capital_per_year)
    monthly = capital + opex
    return SelfBuildTco(
        node=node, nodes=nodes, gpus=gpus, fabric=fabric, servers_usd=servers, fabric_usd=fabric.total_usd,
        storage_usd=storage, frontend_usd=frontend, spares_usd=spares, installation_usd=installation,
        capex_usd=capex, lead_time_months=i.lead_time_months, it_kw_max=it_max,
        it_kw_average=it_avg, facility_kw_average=facility, power_usd_per_month=power,
        colocation_usd_per_month=colocation, staff_usd_per_month=staff, maintenance_usd_per_month=maintenance,
        opex_usd_per_month=opex, depreciation_years=i.depreciation_years, residual_usd=residual,
        cost_of_capital_per_year=i.cost_of_capital_per_year, capital_usd_per_month=capital,
        monthly_equivalent_usd=monthly, usd_per_gpu_hour=monthly / (gpus * HOURS_PER_MONTH),
        assumptions=tuple(assumptions),
    )  # fmt: skip


def _server_price(
    cost_catalog: CostCatalog, node: str, o: SelfBuildOverrides
) -> tuple[float, Assumption, bool]:
    sb = cost_catalog.self_build
    if o.server_usd is not None:
        return o.server_usd, _override(f"{node} server price", o.server_usd, "USD/node"), False
    try:
        entry = (
            next(p for p in sb.server_prices if p.slug == o.server_price)
            if o.server_price
            else sb.server_price_for(node)
        )
    except StopIteration:
        known = ", ".join(p.slug for p in sb.server_prices)
        raise CostInputError(
            "overrides.self_build.server_price", f"unknown server price {o.server_price!r}; known: {known}"
        ) from None
    except KeyError as exc:
        raise CostInputError(
            "overrides.self_build.server_usd", f"{exc.args[0]}; give overrides.self_build.server_usd"
        ) from None
    includes_nics = "nic" in entry.includes.lower() or entry.system.upper().startswith("DGX")
    note = f"{entry.name}" + (
        f"; {sb.defaults.reasons.get('server_price', '')}" if not o.server_price else ""
    )
    return (
        entry.price_usd.mid,
        _entry(entry, "price_usd", f"{node} server price", entry.price_usd.mid, "USD/node", note),
        includes_nics,
    )


def _max_kw_per_node(sb: SelfBuild, node: Node, override: float | None) -> tuple[float, Assumption]:
    """Maximum power per node: the override when given (read before looking for a catalog figure), else the
    system power entry of the node, else the node's own figure; CostInputError asking for the override."""
    if override is not None:
        return override, _override("max power per node", override, "kW")
    try:
        power_entry = sb.system_power_for(node.slug)
    except KeyError:
        if node.max_power_kw is None:
            raise CostInputError(
                "overrides.self_build.max_kw_per_node",
                f"no power figure for {node.slug}; give overrides.self_build.max_kw_per_node",
            ) from None
        return node.max_power_kw, _entry(node, "max_power_kw", "max power per node", node.max_power_kw, "kW")
    kw = power_entry.max_kw.mid / power_entry.servers
    return kw, _entry(power_entry, "max_kw", "max power per node", kw, "kW")


def self_build_inputs(
    cost_catalog: CostCatalog, hardware: HardwareCatalog, node: Node, overrides: SelfBuildOverrides | None = None,
    *, storage_tb: float = 0.0,
) -> tuple[SelfBuildInputs, tuple[Assumption, ...]]:  # fmt: skip
    """Resolve self-build figures for ``node`` from the catalog and the overrides, with their provenance."""
    o = overrides or SelfBuildOverrides()
    sb = cost_catalog.self_build
    out: list[Assumption] = []

    server_usd, a, includes_nics = _server_price(cost_catalog, node.slug, o)
    out.append(a)
    switch = sb.switch_price()
    switch_usd, a = _choose(o.switch_usd, "switch price", "USD/switch",
                            (switch.price_usd.mid, _entry(switch, "price_usd", "switch price", switch.price_usd.mid,
                                                          "USD/switch", f"{switch.name}; {sb.defaults.reasons.get('switch_price', '')}")))  # fmt: skip
    out.append(a)
    radix_default = next((s.radix for s in hardware.switches if s.fabric == node.scale_out_fabric), 64)
    radix = o.switch_radix or radix_default
    out.append(_override("switch radix", radix, "ports") if o.switch_radix else
               Assumption(name="switch radix", value=radix, unit="ports", source="formula",
                          note=f"the catalog switch for {node.scale_out_fabric}"))  # fmt: skip
    oversub = o.oversubscription or 1.0

    per_port: list[float] = []
    for tiers in (1, 2, 3):
        comp = sb.component(CABLES_OPTICS[tiers])
        per_port.append(comp.price_usd.mid / CABLES_OPTICS_NICS)
    if o.cables_optics_usd_per_port is not None:
        per_port = [o.cables_optics_usd_per_port] * 3
        out.append(_override("cables + transceivers per NIC port", o.cables_optics_usd_per_port, "USD/port"))
    else:
        comp = sb.component(CABLES_OPTICS[2])
        out.append(_entry(comp, "price_usd", "cables + transceivers per NIC port (1/2/3 tiers)",
                          [round(p, 2) for p in per_port], "USD/port", "Cheah's per-node figures ÷ 8 NIC ports"))  # fmt: skip

    if o.nic_usd is not None:
        nic_usd = o.nic_usd
        out.append(_override("NIC price", nic_usd, "USD/NIC"))
    elif includes_nics:
        nic_usd = 0.0
        out.append(Assumption(name="NIC price", value=0.0, unit="USD/NIC", source="formula",
                              note="the server price includes its NICs"))  # fmt: skip
    else:
        line = sb.component(NIC_LINE)
        nic_usd = line.price_usd.mid / 8
        out.append(
            _entry(line, "price_usd", "NIC price", nic_usd, "USD/NIC", "SemiAnalysis BoM NIC line ÷ 8")
        )

    st_tb = o.storage_tb if o.storage_tb is not None else storage_tb
    st_usd, a = _choose(o.storage_usd_per_tb, "storage capex per TB", "USD/TB",
                        (DEFAULT_STORAGE_USD_PER_TB, _default("storage capex per TB", DEFAULT_STORAGE_USD_PER_TB, "USD/TB",
                                                              "no authoritative on-prem $/TB (reference §7): an input")))  # fmt: skip
    out.append(a)
    inst, a = _choose(o.installation_fraction, "installation", "fraction of hardware capex",
                      (DEFAULT_INSTALLATION_FRACTION, _default("installation", DEFAULT_INSTALLATION_FRACTION,
                                                               "fraction of hardware capex", "unsourced")))  # fmt: skip
    out.append(a)
    kw, a = _max_kw_per_node(sb, node, o.max_kw_per_node)
    out.append(a)
    f = sb.factors
    avg, a = _choose(o.avg_power_fraction, "average draw while training", "fraction of max",
                     (f.avg_power_fraction_during_training, _entry(f, "avg_power_fraction_during_training",
                      "average draw while training", f.avg_power_fraction_during_training, "fraction of max")))  # fmt: skip
    out.append(a)
    pue_entry = sb.pue_option()
    pue, a = _choose(o.pue, "PUE", "", (pue_entry.pue.mid, _entry(pue_entry, "pue", "PUE", pue_entry.pue.mid, "",
                                                                  sb.defaults.reasons.get("pue"))))  # fmt: skip
    out.append(a)
    el = sb.electricity()
    kwh, a = _choose(o.electricity_usd_per_kwh, "electricity", "USD/kWh",
                     (el.usd_per_kwh, _entry(el, "usd_per_kwh", "electricity", el.usd_per_kwh, "USD/kWh",
                                             f"{el.name}; {sb.defaults.reasons.get('electricity', '')}")))  # fmt: skip
    out.append(a)
    colo = sb.colocation()
    colo_usd, a = _choose(o.colocation_usd_per_kw_month, "colocation", "USD/kW-month",
                          (colo.usd_per_kw_month.mid, _entry(colo, "usd_per_kw_month", "colocation",
                           colo.usd_per_kw_month.mid, "USD/kW-month",
                           f"{colo.name}; charged on provisioned (max) IT kW")))  # fmt: skip
    out.append(a)
    staff = sb.staff
    fte_default = staff.fte_per_1000_gpus
    fte, a = _choose(o.staff_fte_per_1000_gpus, "staff FTE per 1,000 GPUs", "FTE",
                     (fte_default, _entry(staff, "fte_per_1000_gpus", "staff FTE per 1,000 GPUs", fte_default, "FTE"))
                     if fte_default is not None else
                     (DEFAULT_STAFF_FTE_PER_1000_GPUS, _default("staff FTE per 1,000 GPUs", DEFAULT_STAFF_FTE_PER_1000_GPUS,
                                                                "FTE", "no public staffing ratio (reference §4.3): an input")))  # fmt: skip
    out.append(a)
    mult = staff.loaded_cost_multiplier or DEFAULT_LOADED_COST_MULTIPLIER
    loaded = staff.engineer_base_salary_usd_per_year * mult
    fte_usd, a = _choose(o.staff_usd_per_fte_year, "staff cost per FTE (fully loaded)", "USD/year",
                         (loaded, _entry(staff, "engineer_base_salary_usd_per_year", "staff cost per FTE (fully loaded)",
                                         loaded, "USD/year",
                                         f"base ${staff.engineer_base_salary_usd_per_year:,.0f} × {mult:g} loaded-cost multiplier (default)")))  # fmt: skip
    out.append(a)
    maint, a = _choose(o.maintenance_fraction_per_year, "maintenance and support", "fraction of hardware capex per year",
                       (DEFAULT_MAINTENANCE_FRACTION_PER_YEAR, _default("maintenance and support",
                        DEFAULT_MAINTENANCE_FRACTION_PER_YEAR, "fraction of hardware capex per year",
                        f"unsourced; cross-check: Cheah assumes ${staff.facility_and_ops_lifetime_usd_per_node:,.0f} "
                        "per node over its life for facility and operations")))  # fmt: skip
    out.append(a)
    dep = sb.depreciation()
    years, a = _choose(o.depreciation_years, "depreciation", "years",
                       (dep.years, _entry(dep, "years", "depreciation", dep.years, "years",
                                          sb.defaults.reasons.get("depreciation"))))  # fmt: skip
    out.append(a)
    residual, a = _choose(o.residual_fraction, "residual value", "fraction of capex",
                          (DEFAULT_RESIDUAL_FRACTION, _default("residual value", DEFAULT_RESIDUAL_FRACTION,
                           "fraction of capex", "no sourced resale figure: straight line to zero")))  # fmt: skip
    out.append(a)
    rate, a = _choose(o.cost_of_capital_per_year, "cost of capital", "per year",
                      (DEFAULT_COST_OF_CAPITAL, _default("cost of capital", DEFAULT_COST_OF_CAPITAL, "per year",
                                                         "unsourced; 0 gives straight-line depreciation")))  # fmt: skip
    out.append(a)
    ports = o.frontend_ports_per_node if o.frontend_ports_per_node is not None else DEFAULT_FRONTEND_PORTS
    if o.frontend_usd_per_node is not None:
        frontend = o.frontend_usd_per_node
        out.append(_override("frontend network per node", frontend, "USD/node"))
    else:
        frontend = ports * (per_port[0] + switch_usd / radix)
        out.append(_default("frontend network per node", round(frontend, 2), "USD/node",
                            f"derived, low confidence: {ports} Ethernet ports per node (frontend and storage; a DGX "
                            f"H100 has two BlueField-3 DPUs) × (1-tier cables and optics per port ${per_port[0]:,.0f} "
                            f"+ a switch port ${switch_usd / radix:,.0f}), InfiniBand figures (CHEAH) standing in for "
                            "Ethernet; none for a single node"))  # fmt: skip
    spares, a = _choose(o.spares_fraction, "spare servers", "fraction of servers",
                        (DEFAULT_SPARES_FRACTION, _default("spare servers", DEFAULT_SPARES_FRACTION, "fraction of servers",
                         "no sourced figure: give the share of spare or hot-standby servers you buy")))  # fmt: skip
    out.append(a)
    lead, a = _choose(o.lead_time_months, "build lead time", "months",
                      (DEFAULT_LEAD_TIME_MONTHS, _default("build lead time", DEFAULT_LEAD_TIME_MONTHS, "months",
                       "no sourced figure: months from order to the first training step; results come that much later")))  # fmt: skip
    out.append(a)
    inputs = SelfBuildInputs(
        frontend_usd_per_node=frontend, spares_fraction=spares, lead_time_months=lead,
        server_usd=server_usd, switch_usd=switch_usd, switch_radix=radix, oversubscription=oversub,
        cables_optics_usd_per_port=tuple(per_port), nic_usd=nic_usd, storage_tb=st_tb, storage_usd_per_tb=st_usd,
        installation_fraction=inst, max_kw_per_node=kw, avg_power_fraction=avg, pue=pue,
        electricity_usd_per_kwh=kwh, colocation_usd_per_kw_month=colo_usd, staff_fte_per_1000_gpus=fte,
        staff_usd_per_fte_year=fte_usd, maintenance_fraction_per_year=maint, depreciation_years=years,
        residual_fraction=residual, cost_of_capital_per_year=rate,
    )  # fmt: skip
    return inputs, tuple(out)


def break_even_month(capex_usd: float, opex_usd_per_month: float, cloud_usd_per_month: float) -> float | None:
    """Month at which cumulative self-build cash (capex + opex·m) falls below the cloud bill (cloud·m);
    None when the cloud option costs no more per month than self-build's opex (never).

    >>> break_even_month(300_000, 2_821.25, 40_179.2) is not None
    True
    >>> round(break_even_month(300_000, 2_821.25, 40_179.2), 2)
    8.03
    """
    margin = cloud_usd_per_month - opex_usd_per_month
    return capex_usd / margin if margin > 0 else None


def self_build_wins_at_utilisation(
    monthly_equivalent_usd: float, cloud_full_month_usd: float
) -> float | None:
    """Utilisation above which owning beats paying per hour: self-build costs its monthly equivalent
    whether used or not, a pay-per-hour option costs utilisation × its full-month price. > 1: never."""
    return monthly_equivalent_usd / cloud_full_month_usd if cloud_full_month_usd > 0 else None


def cumulative_usd(upfront_usd: float, usd_per_month: float, months: int) -> tuple[float, ...]:
    """Cumulative cost at months 0, 1, …, ``months``."""
    return tuple(upfront_usd + usd_per_month * m for m in range(months + 1))
