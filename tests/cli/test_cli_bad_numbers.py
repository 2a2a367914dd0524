"""Every command that takes a GPU range or count, tokens, a budget or a deadline answers a value no run can use
(1e400, nan, inf, -5, a reversed or malformed range) with one line naming the flag and the problem, exit code 2,
never a traceback and never the bound a NaN happens to fail ("must be ≤ 1e16")."""

from __future__ import annotations

import pytest
from test_cli_catalog import run_cli

PLAN = ["plan", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--seq-len", "8192", "--global-batch", "64"]
SIZE = ["size", "--model", "llama3.1-8b", "--accelerators", "h100-sxm", "--options", "on-demand"]
EST = ["--model", "llama3.1-8b", "--gpu", "h100-sxm", "--seq-len", "8192", "--global-batch", "64", "--tp", "1",
       "--dp", "8"]  # fmt: skip

RANGES = {
    "1e400": "must be a range 'A:B'",
    "nan": "must be a range 'A:B'",
    "-5": "must be a range 'A:B'",
    "abc": "must be a range 'A:B'",
    "8:4": "the start (8) is above the end (4): write 4:8",
    "1:1e400": "at most 1,048,576 GPUs",
    "1:nan": "must be a range 'A:B'",
    "0:0": "at least 1 GPU",
}


def _refused(code: int, out: str, err: str, flag: str, words: str) -> None:
    assert code == 2, (flag, out, err)
    line = next((x for x in err.splitlines() if x.startswith(f"error: {flag}:")), None)
    assert line is not None, err
    assert words in line and "Value error" not in line and "Traceback" not in err
    assert "pattern" not in line  # the regular expression is never the message


@pytest.mark.parametrize("value", RANGES)
@pytest.mark.parametrize("command", ["plan", "size"])
def test_a_gpu_range_no_run_can_use_is_named(monkeypatch, capsys, command, value) -> None:
    base = PLAN if command == "plan" else [*SIZE, "--tokens", "1e12"]
    code, out, err = run_cli(monkeypatch, capsys, *base, "--gpus-range", value)
    _refused(code, out, err, "--gpus-range", RANGES[value])


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-inf"])
@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("plan", "--tokens"), ("plan", "--budget-usd"), ("plan", "--deadline-days"),
        ("size", "--tokens"), ("size", "--budget-usd"), ("size", "--deadline-days"),
        ("estimate", "--tokens"), ("cost", "--tokens"),
    ],
)  # fmt: skip
def test_tokens_budget_and_deadline_must_be_finite(monkeypatch, capsys, command, flag, value) -> None:
    base = {
        "plan": [*PLAN, "--gpus", "8", "--tokens", "1e12"],
        "size": [*SIZE, "--gpus-range", "8:64", "--tokens", "1e12"],
        "estimate": ["estimate", *EST, "--gpus", "8"],
        "cost": ["cost", *EST, "--gpus", "8", "--tokens", "1e12"],
    }[command]
    code, out, err = run_cli(monkeypatch, capsys, *base, flag, value)
    assert code == 2, (command, flag, value, out, err)
    assert flag in err and "Traceback" not in err
    assert "less than or equal" not in err  # NaN is not "over the limit"
    assert "finite" in err or "must be a number" in err, err


@pytest.mark.parametrize("value", ["1e400", "nan", "-5", "abc", "0", "8.5", "99999999999"])
@pytest.mark.parametrize("command", ["plan", "estimate", "cost"])
def test_a_gpu_count_no_run_can_use_is_named(monkeypatch, capsys, command, value) -> None:
    base = {"plan": PLAN, "estimate": ["estimate", *EST], "cost": ["cost", *EST, "--tokens", "1e12"]}[command]
    code, out, err = run_cli(monkeypatch, capsys, *base, "--gpus", value)
    assert code == 2, (command, value, out, err)
    assert "--gpus" in err and "Traceback" not in err
