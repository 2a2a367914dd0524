"""`capplan plan --output plan.json` (issue 17): the plan document carries the run's cost per pricing option — cash
and amortised $, $ per million tokens, days after failures — with the prices' day and region, and those figures are
the ones `capplan cost --plan plan.json` prints for the same plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_catalog import run_cli

from app.domain.catalog.clock import today


def test_plan_output_carries_the_cost_that_capplan_cost_prints(monkeypatch, capsys, tmp_path: Path) -> None:
    out_file = tmp_path / "plan.json"
    args = ["plan", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "16", "--global-batch", "64",
            "--seq-len", "4096", "--tokens", "2e11", "--top", "2", "--output", str(out_file)]  # fmt: skip
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    doc = json.loads(out_file.read_text())
    cost = doc["cost"]
    assert cost is not None and cost["tokens"] == 2e11
    assert cost["region"] == "us-east-1" and cost["prices_as_of"] == today().isoformat()
    assert any(a["name"].endswith("on-demand") and a["as_of"] for a in cost["assumptions"])
    code, out, err = run_cli(
        monkeypatch, capsys, "cost", "--plan", str(out_file), "--tokens", "2e11", "--json"
    )
    assert code == 0, err
    printed = json.loads(out)
    by_option = {o["option"]: o for o in printed["options"] if o["available"]}
    aws = [o for o in cost["options"] if o["provider"] == "aws" and o["available"]]
    assert {o["label"] for o in aws} == set(by_option)
    for o in aws:
        same = by_option[o["label"]]
        assert o["cash_usd"] == pytest.approx(same["cash_usd"], rel=1e-9)
        assert o["amortised_usd"] == pytest.approx(same["amortised_usd"], rel=1e-9)
        assert o["days"] == pytest.approx(same["days"], rel=1e-9)
        assert o["usd_per_m_tokens_amortised"] == pytest.approx(same["amortised_usd"] / 2e5, rel=1e-9)
    winners = {r["basis"]: r["winner"] for r in printed["rankings"]}
    assert cost["cheapest_cash"]["winner"] == winners["cash"]
    assert cost["cheapest_amortised"]["winner"] == winners["amortised"]
    assert (
        cost["fastest"]["winner"] == printed["fastest"] and cost["fastest"]["tied"] == printed["fastest_tied"]
    )
