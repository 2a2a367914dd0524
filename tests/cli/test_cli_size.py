"""`capplan size`: the ranked table, progress on stderr (on a terminal, or with --progress; never on stdout), --json,
and the winner's plan document written with --output round-trips through `capplan export`."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli_catalog import run_cli

SMALL = ["--model", "llama3.1-8b", "--tokens", "1e12", "--accelerators", "h100-sxm", "--options",
         "on-demand,self-build", "--gpus-range", "64:128", "--no-calibration"]  # fmt: skip


def test_size_prints_the_ranking_and_progress_and_writes_a_plan_that_exports(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    code, out, err = run_cli(monkeypatch, capsys, "size", *SMALL, "--output", str(plan), "--progress")
    assert code == 0, err
    assert "sizing: bounding node 1/2" in err and "(node, size) pair 1/" in err and "evaluated" in err
    assert err.count("\n") >= 2 and "pairs settled" in err  # one line rewritten in place, then the summary
    assert "sizing:" not in out
    assert "ranked by amortised $" in out and "Pareto front" in out and "plans/s" in out
    code, out, err = run_cli(monkeypatch, capsys, "export", "--plan", str(plan), "--format", "torchrun")
    assert code == 0, err
    assert "torchrun" in out
    doc = json.loads(plan.read_text())
    assert doc["schema"] == "capplan.plan/v1"


def test_size_json_and_a_deadline_nothing_meets(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "size", *SMALL, "--json", "--progress")
    assert code == 0, err
    assert "sizing:" in err  # progress on stderr, stdout the JSON object alone
    body = json.loads(out)
    assert body["ranked"][0]["rank"] == 1 and body["plan_document"]
    code, out, err = run_cli(
        monkeypatch, capsys, "size", *SMALL, "--deadline-days", "0.5", "--tokens", "1e14"
    )
    assert code == 1
    assert "deadline of 0.5 days" in out
    assert "sizing:" not in err  # stderr is not a terminal here: no progress unless asked


def test_size_bad_input_names_the_flag(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "size", "--model", "llama3.1-8b", "--tokens", "-5")
    assert code == 2 and "--tokens" in err
    code, out, err = run_cli(monkeypatch, capsys, "size", *SMALL, "--options", "barter")
    assert code == 2 and "--options" in err


def test_size_on_cash_with_the_prices_of_a_region_and_a_day(monkeypatch, capsys) -> None:
    """--basis, --region, --prices-as-of, --runs / --use-after-run-years reach the sizing (the cost model's
    inputs, as `capplan cost` takes them)."""
    code, out, err = run_cli(monkeypatch, capsys, "size", *SMALL, "--json", "--basis", "cash", "--region",
                             "us-west-1", "--prices-as-of", "2025-01-01", "--runs", "3")  # fmt: skip
    assert code == 0, err
    body = json.loads(out)
    assert body["ranked_on"] == "cash" and body["basis"].startswith("cash $")
    cash = [r["usd_cash"] for r in body["ranked"]]
    assert cash == sorted(cash)
    code, out, err = run_cli(monkeypatch, capsys, "size", *SMALL, "--runs", "2", "--use-after-run-years", "1")
    assert code == 2 and "not both" in err
    code, out, err = run_cli(monkeypatch, capsys, "size", *SMALL, "--region", "mars-1")
    assert code == 2 and "unknown region 'mars-1'" in err


def test_the_pareto_front_prints_days_finely_enough_to_tell_its_points_apart(monkeypatch, capsys) -> None:
    """Two front points 2.1549 and 2.1588 days apart (self-build against a 3-yr commitment, llama3.1-8b on 64 H200s)
    both read "2.2 days" at one decimal, so the dearer one looked dominated; the front prints two decimals, as
    the --json figures say."""
    args = [
        "size",
        "--model",
        "llama3.1-8b",
        "--tokens",
        "1e11",
        "--accelerators",
        "h200-sxm",
        "--gpus-range",
        "8:64",
    ]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    printed = [
        line.split(" days")[0].strip()
        for line in out.split("Pareto front")[1].splitlines()[1:]
        if " days" in line
    ]
    code, body, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    assert printed == [f"{p['days']:,.2f}" for p in json.loads(body)["pareto"]]
    assert len(printed) >= 2
