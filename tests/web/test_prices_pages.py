"""The Prices pages: $/h columns per pricing option, records as tables (no raw dumps), provenance per row."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from app.domain.cost.cloud import cloud_prices


def test_the_prices_list_shows_each_option_in_dollars_per_hour(client: TestClient) -> None:
    catalog = client.app.state.catalog
    page = client.get("/catalog/prices")
    assert page.status_code == 200
    html = page.text
    for column in ("On-demand", "1-yr commitment", "3-yr commitment", "Spot (median AZ)", "Capacity block"):
        assert f">{column}<" in html
    prices = cloud_prices(catalog.cost, "p5.48xlarge")
    row = html[html.index('href="/catalog/prices/p5.48xlarge"') :]
    row = row[: row.index("</tr>")]
    assert f"${prices.on_demand:,.2f}" in row and f"${prices.capacity_block:,.2f}" in row
    assert f"{prices.on_demand / 8:.2f}/GPU-h" in row
    assert "{'" not in html and "usd_per_hour" not in html  # no serialised records


def test_the_prices_filter_still_narrows_in_place(client: TestClient) -> None:
    page = client.get(
        "/catalog/prices", params={"q": "p5e"}, headers={"HX-Request": "true", "HX-Request-Type": "partial"}
    )
    assert page.status_code == 200 and "<html" not in page.text
    assert "p5e.48xlarge" in page.text and "p4d.24xlarge" not in page.text


def test_an_instance_page_shows_its_records_as_tables_with_their_own_confidence(client: TestClient) -> None:
    html = client.get("/catalog/prices/p5.48xlarge").text
    for table in ("on-demand", "committed", "spot", "capacity-block"):
        assert f'id="{table}"' in html
    assert "{'" not in html and "usd_per_hour" not in html and "effective_from" not in html
    committed = html[html.index('id="committed"') :]
    committed = committed[: committed.index("</table>")]
    # p5's reserved-instance records are confidence low in data/prices.toml: every committed row says so
    rows = re.findall(r"<tr.*?</tr>", committed, flags=re.S)[1:]
    assert rows and all('class="conf-low">low<' in r for r in rows)
    block = html[html.index('id="capacity-block"') :]
    assert "$39.33" in block[: block.index("</table>")]


def test_instance_pages_of_other_kinds_keep_the_generic_view(client: TestClient) -> None:
    assert client.get("/catalog/accelerators/h100-sxm").status_code == 200
