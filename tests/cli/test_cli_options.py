"""The plan options are generated from the request models: every field is an option (or says why not), with the
model's type and default; a field added to a model becomes an option without touching the commands."""

from __future__ import annotations

import typer
import typer.main
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from app.cli import COMMANDS, UsageError, app
from app.cli.options import NOT_OPTIONS, Flag, request_options, request_values, with_options
from app.domain.estimator.plan import Sharding
from app.schemas import CostRequest, EstimateRequest, PlanSearchRequest


def _params(command: str) -> dict:
    group = typer.main.get_command(app)
    cmd = group.get_command(None, command)  # type: ignore[arg-type]
    return {p.name: p for p in cmd.params}


def test_every_estimate_field_is_an_option_of_estimate_export_and_cost() -> None:
    for command in ("estimate", "export", "cost"):
        params = _params(command)
        model = CostRequest if command == "cost" else EstimateRequest
        for name, field in EstimateRequest.model_fields.items():
            if name in NOT_OPTIONS:
                continue
            assert name in params, f"{command}: --{name.replace('_', '-')} missing"
            if not model.model_fields[name].is_required():
                assert params[name].default == field.default, (
                    f"{command} --{name}: default differs from the model"
                )
            else:  # a --plan file can give it instead: optional here, checked by the command
                assert params[name].default is None and not params[name].required


def test_every_search_field_is_a_plan_option_or_says_why_not() -> None:
    from app.cli.plan import NOT_SEARCH_OPTIONS, SEARCH_FLAGS

    params = _params("plan")
    for name, field in PlanSearchRequest.model_fields.items():
        if name in NOT_OPTIONS or name in NOT_SEARCH_OPTIONS:
            continue
        param = (SEARCH_FLAGS.get(name) or Flag()).param or name
        assert param in params, f"plan: --{param.replace('_', '-')} missing"
        if not field.is_required() and name != "model":
            default = getattr(field.default, "value", field.default)
            assert params[param].default == default, f"plan --{param}: default differs from the model"
    assert params["model"].required and params["gpu"].required and params["seq_len"].required


def test_flags_that_do_not_follow_the_default_rule() -> None:
    params = _params("estimate")
    assert params["fused_kernels"].opts == ["--fused-kernels"] and params["fused_kernels"].secondary_opts == [
        "--eager"
    ]
    assert params["allow_tp_across_nodes"].opts == ["--allow-tp-across-nodes"]
    assert not params["allow_tp_across_nodes"].secondary_opts
    assert params["sequence_parallel"].secondary_opts == ["--no-sequence-parallel"]
    assert "tensor parallel" in params["tp"].help and "HSDP" in params["shard_group_size"].help
    plan = _params("plan")
    assert plan["top"].opts == ["--top"] and "ddp" in plan["shardings"].help


class Toy(BaseModel):
    """A request model the commands have never seen."""

    gpu: str = Field(max_length=64, description="accelerator slug")
    widgets: int = Field(default=3, ge=1, description="how many widgets")
    shardings: list[Sharding] | None = None
    eager: bool = False


def test_a_field_added_to_a_model_becomes_an_option() -> None:
    seen: dict = {}
    toy = typer.Typer(add_completion=False)

    @toy.command()
    @with_options(request_options(Toy, Toy.model_fields))
    def run(**fields: object) -> None:
        seen.update(request_values(Toy, Toy.model_fields, None, fields))
        Toy(**seen)

    runner = CliRunner()
    res = runner.invoke(toy, ["--gpu", "h100-sxm", "--widgets", "5", "--shardings", "ddp,zero1", "--eager"])
    assert res.exit_code == 0, res.output
    assert seen == {
        "gpu": "h100-sxm",
        "widgets": 5,
        "shardings": [Sharding.ddp, Sharding.zero1],
        "eager": True,
    }
    assert runner.invoke(toy, ["--widgets", "5"]).exit_code == 2  # --gpu is required, as in the model
    res = runner.invoke(toy, ["--gpu", "x", "--shardings", "ddp,bogus"])
    assert isinstance(res.exception, UsageError) and "--shardings: choose from ddp" in str(res.exception)
    help_text = runner.invoke(toy, ["--help"], env={"COLUMNS": "200"}).output
    assert "how many widgets" in help_text and "--no-eager" in help_text


def test_a_field_cannot_be_declared_twice_or_be_an_excluded_one() -> None:
    def command(gpu: str = "", **fields: object) -> None:
        """Declares --gpu itself."""

    try:
        with_options(request_options(Toy, ["gpu"]))(command)
    except ValueError as exc:
        assert "declared twice" in str(exc)
    else:
        raise AssertionError("a field declared twice was accepted")
    try:
        request_options(EstimateRequest, ["hf_config"])
    except ValueError as exc:
        assert "--model takes" in str(exc)
    else:
        raise AssertionError("an excluded field became an option")


def test_every_command_is_listed_in_its_module() -> None:
    group = typer.main.get_command(app)
    assert group.list_commands(None) == list(COMMANDS)  # type: ignore[arg-type]
    for name in COMMANDS:
        assert group.get_command(None, name) is not None, name  # type: ignore[arg-type]
