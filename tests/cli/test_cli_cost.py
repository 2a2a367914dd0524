"""`capplan cost`: train N tokens (table and JSON), the monthly table of a cluster, exit code 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_catalog import run_cli

ARGS = ["cost", "--tokens", "1e12", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "64",
        "--global-batch", "256", "--seq-len", "8192", "--recompute", "selective"]  # fmt: skip


def test_cost_json_has_the_documented_fields(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--json")
    assert code == 0, err
    body = json.loads(out)
    assert body["job_mtbf_hours"] > 0 and body["checkpoint_interval_s"] > 0 and 0 < body["goodput"] <= 1
    for row in body["options"]:
        assert row["days"] > 0 and row["total_usd"] > 0, row["option"]
    assert len(body["options"]) == 8


def test_cost_table_and_options(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--option", "on-demand", "--option", "self-build")
    assert code == 0, err
    assert "job MTBF" in out and "goodput" in out and "every 30 min" in out
    lines = [line.split()[0] for line in out.splitlines() if line.split()]
    assert "on-demand" in lines and "self-build" in lines and "spot" not in lines
    assert "cheapest:" in out and "serving" in out


def test_cost_overrides_with_set_and_file(monkeypatch, capsys, tmp_path: Path) -> None:
    overrides = tmp_path / "overrides.json"
    overrides.write_text(
        json.dumps({"reliability": {"checkpoint_mode": "sync"}, "on_demand_usd_per_hour": 70})
    )
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--overrides", str(overrides), "--set",
                             "self_build.pue=1.2", "--set", "reliability.elastic=true", "--json")  # fmt: skip
    assert code == 0, err
    body = json.loads(out)
    assert (
        body["reliability"]["checkpoint_mode"] == "sync" and body["reliability"]["restart"]["elastic"] is True
    )
    assert body["prices"]["on_demand"] == 70
    assert body["self_build"]["facility_kw_average"] == pytest.approx(
        body["self_build"]["it_kw_average"] * 1.2
    )


def test_monthly_json(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "cost", "--instance", "p5.48xlarge", "--nodes", "1", "--monthly",
                             "--json")  # fmt: skip
    assert code == 0, err
    body = json.loads(out)
    assert body["on_demand_usd_per_month"] == pytest.approx(55.04 * 730)
    assert body["spot_usd_per_month"] < body["commit_1yr_usd_per_month"] < body["on_demand_usd_per_month"]
    assert body["self_build_capex_usd"] > 300_000


def test_monthly_table_by_node(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "cost", "--node", "dgx-h100", "--nodes", "128", "--monthly")
    assert code == 0, err
    assert "1024 GPUs" in out and "on-demand" in out and "break-even" in out
    assert "48 switches" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "on_demand_usd_per_hour=-1"], "on_demand_usd_per_hour"),
        (["--set", "reliability.storage_write_gbyte_per_s_per_node=0"], "storage_write_gbyte_per_s_per_node"),
        (["--set", "self_build.depreciation_years=-2"], "depreciation_years"),
        (["--set", "pue"], "KEY=VALUE"),
        (["--set", "instance=p9.huge"], "p9.huge"),
        (["--set", "reliability.failure_record=nope"], "llama3-405b"),
        (["--option", "layaway"], "layaway"),
        (["--gpus", "0"], "gpus"),
        (["--tokens", "-5"], "tokens"),
        (["--overrides", "/no/such/file.json"], "no such file"),
    ],
)
def test_bad_input_exits_2(monkeypatch, capsys, args: list[str], needle: str) -> None:
    argv = list(ARGS)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    code, _, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 2, err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["cost", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--gpus", "8"],
        ["cost", "--tokens", "1e12", "--model", "llama3.1-8b"],
        ["cost", "--monthly", "--instance", "p5.48xlarge"],
        ["cost", "--monthly", "--nodes", "2"],
        ["cost", "--monthly", "--node", "dgx-h900", "--nodes", "2"],
    ],
)
def test_missing_or_unknown_arguments_exit_2(monkeypatch, capsys, argv: list[str]) -> None:
    code, _, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 2
    assert "error" in err.lower()
    assert "Traceback" not in err


def test_cost_from_a_plan_file(monkeypatch, capsys, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    code, _, err = run_cli(monkeypatch, capsys, "export", *ARGS[3:], "-o", str(plan))
    assert code == 0, err
    code, out, err = run_cli(monkeypatch, capsys, "cost", "--plan", str(plan), "--tokens", "1e12", "--json")
    assert code == 0, err
    assert json.loads(out)["gpus"] == 64
    code, _, err = run_cli(
        monkeypatch, capsys, "cost", "--plan", str(plan), "--tokens", "1e12", "--gpus", "8"
    )
    assert code == 2 and "--gpus" in err


def test_cost_nan_tokens_is_a_clear_error(monkeypatch, capsys) -> None:
    args = [a if a != "1e12" else "nan" for a in ARGS]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and "--tokens" in err and "must be a number" in err and "1e16" not in err


def test_cost_notes_partial_instances_and_no_rule_line_at_30_min(monkeypatch, capsys) -> None:
    args = [a if a != "64" else "12" for a in ARGS]
    args = [a if a != "256" else "12" for a in args]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--option", "on-demand",
                             "--set", "reliability.checkpoint_interval_s=1800")  # fmt: skip
    assert code == 0, err
    assert "12 GPUs are not a whole number of p5.48xlarge" in out
    assert "min instead" not in out


def test_cost_zero_price_exits_2(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--set", "on_demand_usd_per_hour=0")
    assert code == 2 and "on_demand_usd_per_hour" in err and "greater than 0" in err


def test_cost_region(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "cost", "--instance", "p5.48xlarge", "--nodes", "1", "--monthly",
                             "--region", "eu-west-2", "--option", "on-demand", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["on_demand_usd_per_month"] == pytest.approx(71.552 * 730)
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--region", "mars-1")
    assert code == 2 and "unknown region 'mars-1'" in err


def test_cost_shows_the_intervals_sensitivity_and_the_async_saves_cost(monkeypatch, capsys) -> None:
    """Issue 16's checkpoint audit, as `capplan cost` prints it: goodput at ½×, 1× and 2× the interval, and the
    async save's snapshot plus its background-write slowdown."""
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--option", "on-demand")
    assert code == 0, err
    line = next(x for x in out.splitlines() if "interval sensitivity:" in x)
    assert "0.5×" in line and "1×" in line and "2×" in line and line.count("goodput") == 3
    assert "async save:" in out and "slower for the" in out and "lost per save" in out
    code, out, err = run_cli(monkeypatch, capsys, *ARGS, "--option", "on-demand", "--set",
                             "reliability.checkpoint_mode=sync")  # fmt: skip
    assert code == 0 and "async save:" not in out and "interval sensitivity:" in out
