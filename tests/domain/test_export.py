"""Plan export: every format parsed back by its own parser (torch's torchrun parser, the torchtitan config
module executed against stand-ins of torchtitan's config classes, an argparse mirror of Megatron-LM's flags,
json, bash, yaml) and checked for consistency with the plan. ``make check-exports`` feeds the same files to
the real consumers."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest
import yaml

from app.domain.catalog import load_catalog
from app.domain.estimator.estimate import build_cluster, estimate
from app.domain.estimator.pipeline import chunk_layer_counts
from app.domain.estimator.plan import Framework, Plan, Precision, Recompute
from app.domain.export import (
    EXPORT_FORMATS,
    PLAN_SCHEMA,
    ExportFormat,
    FrameworkRefusal,
    PlanDocument,
    PlanDocumentError,
    build_plan_document,
    export_plan,
    framework_problems,
    layout,
    megatron_args,
    parse_plan_document,
    plan_document_json,
    request_fields,
    torchrun_args,
)
from app.domain.export.deepspeed import deepspeed_config
from app.domain.export.kubernetes import k8s_name
from app.domain.export.launch import checkpoint_interval_steps, plan_hash, unique_name
from app.domain.export.megatron import megatron_arg_pairs, moe_layer_pattern, pipeline_layout
from app.domain.export.text import shell_word, toml_value
from app.domain.export.torchtitan import batches, stage_modules

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "data")
BASH = shutil.which("bash")


def make_doc(
    model: str = "llama3.1-70b",
    gpu: str = "h100-sxm",
    gpus: int = 64,
    node: str | None = None,
    tokens: float | None = None,
    **plan: object,
) -> PlanDocument:
    arch = CATALOG.architecture(model)
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator=gpu, gpus=gpus, node=node)
    fields = {
        "tp": 8,
        "dp": 8,
        "global_batch": 64,
        "seq_len": 8192,
        "sharding": "fsdp-full",
        "recompute": "full",
    }
    est = estimate(arch, cluster, Plan(**(fields | plan)), tokens_to_train=tokens)
    return build_plan_document(
        arch=arch, node=cluster.node, fabric=cluster.scale_out_fabric, estimate=est, preset=model,
        hf_config=None, tokens=tokens,
    )  # fmt: skip


# A spread of plans: FSDP2 + TP (the README example), interleaved PP with uneven layers on EFA, MoE with EP on
# HSDP, DeepSpeed ZeRO-3 with NVMe offload in fp16, Megatron DDP with learned positions, GB200 rack-scale hosts.
PLANS = {
    "llama70b-fsdp-tp8": {},
    "llama405b-pp16-vpp-fp8-p5": dict(
        model="llama3.1-405b", gpus=1024, node="p5.48xlarge", tp=8, pp=8, vpp=2, dp=16, global_batch=256,
        framework="megatron", sharding="megatron-distopt", sequence_parallel=True, precision="fp8", tokens=1.5e13,
    ),
    "llama405b-pp16-uneven": dict(
        model="llama3.1-405b", gpus=1024, tp=8, pp=16, dp=8, global_batch=256, framework="megatron",
        sharding="megatron-distopt", sequence_parallel=True,
    ),
    "mixtral-ep8-hsdp-efa": dict(
        model="mixtral-8x7b", gpu="a100-80gb", node="p4de.24xlarge", gpus=64, tp=2, dp=32, ep=8,
        global_batch=256, sharding="fsdp-hybrid", shard_group_size=8, recompute="selective", fused_kernels=True,
    ),
    "deepseek-v3-megatron": dict(
        model="deepseek-v3", gpus=2048, tp=8, pp=16, dp=16, ep=8, global_batch=4096, framework="megatron",
        sharding="megatron-distopt", recompute="selective", sequence_parallel=True, seq_len=4096,
    ),
    "llama8b-zero3-nvme-fp16": dict(
        model="llama3.1-8b", gpus=16, tp=1, dp=16, global_batch=64, micro_batch=2, framework="deepspeed",
        sharding="zero3", offload="nvme", precision="fp16", recompute="none",
    ),
    "gpt3-megatron-ddp": dict(
        model="gpt3-175b", gpu="a100-80gb", gpus=768, tp=8, pp=8, dp=12, global_batch=1536, seq_len=2048,
        sharding="ddp", framework="megatron", flash_attention=False,
    ),
    "gb200-rack": dict(model="llama3.1-405b", gpu="gb200", gpus=144, tp=8, pp=2, dp=9, global_batch=144),
    "llama70b-nvfp4-gb300": dict(
        model="llama3.1-70b", gpu="gb300", node="gb300-nvl72", gpus=64, tp=1, pp=4, vpp=5, dp=16, global_batch=256,
        framework="megatron", sharding="megatron-distopt", precision="nvfp4", recompute="none",
    ),
    "llama70b-mxfp8-gb200": dict(
        model="llama3.1-70b", gpu="gb200", node="gb200-nvl72", gpus=64, tp=1, pp=4, vpp=5, dp=16, global_batch=256,
        framework="megatron", sharding="megatron-distopt", precision="fp8", fp8_recipe="mxfp8", recompute="none",
    ),
    "llama70b-megatron-cp4-all-gather": dict(
        model="llama3.1-70b", gpus=64, tp=8, cp=4, dp=2, global_batch=4, seq_len=131072, framework="megatron",
        sharding="megatron-distopt", sequence_parallel=True, cp_comm_type="all_gather",
    ),
    "llama8b-fsdp2-fp8": dict(model="llama3.1-8b", gpus=16, tp=2, dp=8, global_batch=32, precision="fp8"),
    "llama8b-ddp-partial-hosts": dict(model="llama3.1-8b", gpus=12, tp=1, dp=12, global_batch=24, sharding="ddp"),
}  # fmt: skip

DOCS = {name: make_doc(**kw) for name, kw in PLANS.items()}


@pytest.fixture(params=list(DOCS), ids=list(DOCS))
def doc(request: pytest.FixtureRequest) -> PlanDocument:
    return DOCS[request.param]


def exported(doc: PlanDocument, fmt: str) -> str:
    """The file, or skip: the format's framework refuses this plan (tested in test_framework_refusals)."""
    if framework_problems(doc, ExportFormat(fmt)):
        pytest.skip(f"{fmt} refuses this plan")
    return export_plan(doc, fmt).content


# -- the plan document -------------------------------------------------------------------------------------


def test_json_round_trip_is_exact(doc: PlanDocument) -> None:
    text = export_plan(doc, "json").content
    body = json.loads(text)
    assert body["schema"] == PLAN_SCHEMA
    again = parse_plan_document(text)
    assert again == doc
    for fmt in EXPORT_FORMATS:  # every format is a function of the document alone
        if framework_problems(doc, ExportFormat(fmt)):
            with pytest.raises(FrameworkRefusal):
                export_plan(doc, fmt)
            continue
        assert export_plan(again, fmt).content == export_plan(doc, fmt).content


def test_document_holds_the_estimate_summary() -> None:
    doc = make_doc(tokens=1.5e13)
    est = estimate(
        CATALOG.architecture("llama3.1-70b"),
        build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=64),
        doc.plan,
        tokens_to_train=1.5e13,
    )
    s = doc.estimate
    assert (s.fits, s.peak_memory_bytes, s.step_time_s, s.tokens_per_s, s.mfu) == (
        est.fits, est.peak_memory_bytes, est.step_time_s, est.tokens_per_s, est.mfu,
    )  # fmt: skip
    assert s.time_to_train_days == est.time_to_train_days
    assert doc.model.preset == "llama3.1-70b" and doc.model.architecture.n_layers == 80
    assert doc.hardware.node == "dgx-h100" and doc.hardware.fabric_kind == "infiniband"
    assert doc.steps == -(-15_000_000_000_000 // (64 * 8192))


def test_request_fields_reproduce_the_plan() -> None:
    doc = DOCS["mixtral-ep8-hsdp-efa"]
    fields = request_fields(doc)
    assert fields["model"] == "mixtral-8x7b" and "hf_config" not in fields
    assert fields["node"] == "p4de.24xlarge" and fields["gpus"] == 64
    assert Plan(**{k: fields[k] for k in Plan.model_fields}) == doc.plan


def _mutated(change) -> str:
    body = json.loads(plan_document_json(DOCS["llama70b-fsdp-tp8"]))
    change(body)
    return json.dumps(body)


@pytest.mark.parametrize(
    ("change", "field", "needle"),
    [
        (lambda b: b.pop("schema"), "schema", "capplan.plan/v1"),
        (lambda b: b.update(schema="capplan.plan/v9"), "schema", "capplan.plan/v9"),
        (lambda b: b["plan"].update(tp=0), "plan.tp", "greater than or equal to 1"),
        (lambda b: b["plan"].update(tp="eight"), "plan.tp", "integer"),
        (lambda b: b["plan"].update(sharding="zero4"), "plan.sharding", "fsdp-full"),
        (lambda b: b["hardware"].pop("gpus"), "hardware.gpus", "required"),
        (lambda b: b["hardware"].update(gpuz=8), "hardware.gpuz", "not permitted"),
        (lambda b: b["plan"].update(tp=4), "plan.dp", "64 GPUs"),
        (lambda b: b["plan"].update(global_batch=60), "plan.global_batch", "multiple of 8"),
        (lambda b: b["model"].update(preset="llama3.1-8b"), "model.architecture.slug", "llama3.1-8b"),
        (lambda b: b["model"].update(hf_config={"model_type": "llama"}), "model", "exactly one"),
        (lambda b: b["model"]["architecture"].update(n_kv_heads=7), "model.architecture", "n_kv_heads"),
        # names and slugs end up in shell scripts, #SBATCH lines and YAML: nothing that could escape them
        (lambda b: b.update(name='x"; rm -rf ~; "'), "name", "pattern"),
        (lambda b: b["hardware"].update(node="dgx\nrm -rf ~"), "hardware.node", "pattern"),
    ],
)
def test_malformed_document_names_the_field(change, field: str, needle: str) -> None:
    with pytest.raises(PlanDocumentError) as info:
        parse_plan_document(_mutated(change))
    assert info.value.field == field
    assert needle in str(info.value)


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '"plan"', "null"])
def test_not_a_plan_document(text: str) -> None:
    with pytest.raises(PlanDocumentError):
        parse_plan_document(text)


def test_unknown_format_lists_the_formats() -> None:
    with pytest.raises(ValueError, match="torchtitan, torchrun, megatron, deepspeed, slurm, k8s, k8s-v1"):
        export_plan(DOCS["llama70b-fsdp-tp8"], "terraform")


def test_export_refuses_an_inconsistent_document() -> None:
    bad = DOCS["llama70b-fsdp-tp8"].model_copy(update={"plan": Plan(tp=8, dp=4, global_batch=64)})
    with pytest.raises(PlanDocumentError, match="plan.dp"):
        export_plan(bad, "slurm")


def test_files_and_media_types() -> None:
    doc = DOCS["llama70b-fsdp-tp8"]
    got = {fmt: (f.filename, f.media_type) for fmt in ExportFormat if (f := export_plan(doc, fmt))}
    assert got == {
        ExportFormat.json: ("plan.json", "application/json"),
        ExportFormat.torchtitan: ("torchtitan_config.py", "text/x-python"),
        ExportFormat.torchrun: ("launch.sh", "text/x-shellscript"),
        ExportFormat.megatron: ("megatron_args.sh", "text/x-shellscript"),
        ExportFormat.deepspeed: ("ds_config.json", "application/json"),
        ExportFormat.slurm: ("train.sbatch", "text/x-shellscript"),
        ExportFormat.k8s: ("trainjob.yaml", "application/yaml"),
        ExportFormat.k8s_v1: ("pytorchjob.yaml", "application/yaml"),
        ExportFormat.prometheus: ("training-alerts.rules.yml", "application/yaml"),
        ExportFormat.grafana: ("training-dashboard.json", "application/json"),
    }


# -- torchtitan config module ----------------------------------------------------------------------------------


def _ns(**kw: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(**kw)


def run_torchtitan_module(doc: PlanDocument, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """Execute the exported module against stand-ins of the torchtitan classes it imports (the real ones run in
    ``make check-exports``) and return what ``capplan_plan()`` built. Attribute writes to fields torchtitan's
    config does not have would pass here; the real ConfigManager catches those."""

    def registry(flavor, **kw):
        return _ns(flavor=flavor, **kw)

    def base_config():
        return _ns(
            model_spec=None, dump_folder="", hf_assets_path="", dataloader=_ns(dataset=""),
            training=_ns(local_batch_size=8, global_batch_size=-1, seq_len=2048, steps=10,
                         mixed_precision_param="bfloat16", enable_cpu_offload=False),
            parallelism=_ns(), activation_checkpoint=None, compile=None, checkpoint=None, optimizer=None,
        )  # fmt: skip

    modules = {
        "torchtitan": _ns(),
        "torchtitan.components": _ns(),
        "torchtitan.components.checkpoint": _ns(CheckpointManager=_ns(Config=lambda **kw: _ns(**kw))),
        "torchtitan.components.optimizer": _ns(default_adamw=lambda lr: _ns(lr=lr)),
        "torchtitan.components.quantization": _ns(
            Float8LinearConverter=_ns(Config=lambda **kw: _ns(fp8=kw)),
            MXFP8LinearConverter=_ns(Config=lambda **kw: _ns(fp8=kw, mx=True)),
        ),
        "torchtitan.config": _ns(CompileConfig=lambda **kw: _ns(**kw)),
        "torchtitan.distributed": _ns(),
        "torchtitan.distributed.activation_checkpoint": _ns(
            FullAC=_ns(Config=lambda: "full"), SelectiveAC=_ns(Config=lambda: "selective")
        ),
    }
    for package in ("llama3", "deepseek_v3"):
        fns = {f: base_config for f in ("llama3_8b", "llama3_70b", "llama3_405b", "deepseek_v3_671b")}
        modules[f"torchtitan.models.{package}"] = _ns(model_registry=registry)
        modules[f"torchtitan.models.{package}.config_registry"] = _ns(**fns)
    modules["torchtitan.models"] = _ns()
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    namespace: dict[str, object] = {}
    exec(compile(export_plan(doc, "torchtitan").content, "torchtitan_config.py", "exec"), namespace)
    return namespace["capplan_plan"]()


TITAN_DOCS = [name for name, d in DOCS.items() if not framework_problems(d, ExportFormat.torchtitan)]


@pytest.mark.parametrize("name", TITAN_DOCS)
def test_torchtitan_module_is_consistent(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = DOCS[name]
    cfg = run_torchtitan_module(doc, monkeypatch)
    p, arch = doc.plan, doc.arch
    par, tr = cfg.parallelism, cfg.training
    dp = par.data_parallel_replicate_degree * par.data_parallel_shard_degree
    assert dp == p.dp
    degrees = dp * par.tensor_parallel_degree * par.pipeline_parallel_degree * par.context_parallel_degree
    assert degrees == doc.hardware.gpus
    accum = tr.global_batch_size // (tr.local_batch_size * dp)
    assert tr.local_batch_size * dp * accum == tr.global_batch_size == p.global_batch
    assert tr.seq_len == p.seq_len and tr.steps >= 1
    assert (
        cfg.activation_checkpoint
        == {"none": None, "full": "full", "selective": "selective", "selective-op": "selective"}[
            p.recompute.value
        ]
    )
    compile_model = p.uses_fused_kernels or p.precision.value == "fp8"
    compile_loss = compile_model if p.fused_loss is None else p.fused_loss
    assert cfg.compile.enable is (compile_model or compile_loss)
    assert ("model" in cfg.compile.components) is compile_model
    assert ("loss" in cfg.compile.components) is (compile_loss or not compile_model)
    assert ("fp8" in repr(cfg.model_spec.converters)) is (p.precision.value == "fp8")
    if (
        p.precision.value == "fp8"
    ):  # the recipe the estimate's casts assumed: rowwise (torchtitan's default) or MXFP8
        (converter,) = cfg.model_spec.converters
        if p.fp8_recipe_on(Framework.fsdp2).value == "mxfp8":
            assert converter.mx and converter.fp8["fqns"] == [
                "layers."
            ]  # the transformer layers; the head in 16 bits
        else:
            assert converter.fp8["recipe_name"] == p.fp8_recipe_on(Framework.fsdp2).value == "rowwise"
    # async TP exactly where the estimate hid TP communication (which torchtitan runs only compiled)
    async_tp = getattr(cfg.compile, "enable_async_tensor_parallel", False)
    assert async_tp is (p.tp > 1 and p.uses_tp_comm_overlap) and (
        not async_tp or "model" in cfg.compile.components
    )
    assert tr.mixed_precision_param == ("float32" if p.precision.value == "fp32" else "bfloat16")
    assert par.expert_parallel_degree == p.ep
    # checkpointing is on (torchtitan's default is off) at the reliability model's interval
    assert cfg.checkpoint.enable is True and cfg.checkpoint.interval == checkpoint_interval_steps(doc)[0]
    if p.pp > 1:
        assert par.pipeline_parallel_schedule == ("Interleaved1F1B" if p.vpp > 1 else "1F1B")
        assert par.pipeline_parallel_microbatch_size == p.micro_batch
        assert accum == 1 and tr.local_batch_size % p.micro_batch == 0
        parts = par.module_fqns_per_model_part
        assert (
            len(parts) == p.pp * p.vpp
            and parts[0][0] == "tok_embeddings"
            and parts[-1][-2:] == ["norm", "lm_head"]
        )
        layers = [m for part in parts for m in part if m.startswith("layers.")]
        assert layers == [f"layers.{i}" for i in range(arch.n_layers)]
    else:
        assert tr.local_batch_size == p.micro_batch


@pytest.mark.parametrize(("fused_kernels", "fused_loss", "enable", "components"), [
    (True, None, True, ["model", "loss"]),
    (True, False, True, ["model"]),
    (False, True, True, ["loss"]),
    (False, None, False, ["loss"]),
])  # fmt: skip
def test_torchtitan_compiles_the_loss_the_plan_estimated(
    fused_kernels, fused_loss, enable, components, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compile.components names the loss exactly when the estimate ran a fused (compiled) loss."""
    doc = DOCS[TITAN_DOCS[0]]
    plan = doc.plan.model_copy(
        update={"fused_kernels": fused_kernels, "fused_loss": fused_loss, "precision": Precision.bf16}
    )
    cfg = run_torchtitan_module(doc.model_copy(update={"plan": plan}), monkeypatch)
    assert cfg.compile.enable is enable and cfg.compile.components == components


@pytest.mark.parametrize(("framework", "fused_kernels", "asked", "async_tp"), [
    ("fsdp2", True, True, True), ("fsdp2", True, None, False), ("fsdp2", True, False, False),
    ("megatron", True, None, True), ("megatron", False, None, False),
])  # fmt: skip
def test_torchtitan_async_tp_follows_the_plans_tp_overlap(
    framework, fused_kernels, asked, async_tp, monkeypatch
) -> None:
    """compile.enable_async_tensor_parallel is written when the plan overlaps TP communication and compiles the model
    (torchtitan's CompileConfig refuses async TP otherwise): a Megatron plan (overlap on by default) exported
    uncompiled gets a note instead; an FSDP2 plan asking for it uncompiled is refused before export."""
    doc = next(DOCS[n] for n in TITAN_DOCS if DOCS[n].plan.tp > 1)
    plan = doc.plan.model_copy(update={"fused_kernels": fused_kernels, "tp_comm_overlap": asked,
                                       "precision": Precision.bf16, "framework": Framework(framework)})  # fmt: skip
    cfg = run_torchtitan_module(doc.model_copy(update={"plan": plan}), monkeypatch)
    assert getattr(cfg.compile, "enable_async_tensor_parallel", False) is async_tp
    notes = export_plan(doc.model_copy(update={"plan": plan}), "torchtitan").content
    assert ("async TP needs torch.compile" in notes) is (framework == "megatron" and not fused_kernels)
    uncompiled = doc.plan.model_copy(update={"fused_kernels": False, "tp_comm_overlap": True})
    assert framework_problems(doc.model_copy(update={"plan": uncompiled}), ExportFormat.torchtitan)


def test_torchtitan_stage_split_counts_only_transformer_layers() -> None:
    parts = stage_modules(126, 16)  # Llama 3 405B's own split: 7 on the first and last stage, 8 between
    assert [sum(m.startswith("layers.") for m in part) for part in parts] == [7] + [8] * 14 + [7]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-1] == "lm_head"


@pytest.mark.parametrize(
    ("sharding", "group", "replicate", "shard", "reshard"),
    [
        ("fsdp-full", None, 1, 8, "always"),
        ("fsdp-grad-op", None, 1, 8, "never"),
        ("ddp", None, 8, 1, "default"),
        ("fsdp-hybrid", 4, 2, 4, "always"),
    ],
)
def test_torchtitan_data_parallel_degrees(sharding, group, replicate, shard, reshard, monkeypatch) -> None:
    doc = make_doc(sharding=sharding, shard_group_size=group)
    par = run_torchtitan_module(doc, monkeypatch).parallelism
    assert (par.data_parallel_replicate_degree, par.data_parallel_shard_degree) == (replicate, shard)
    assert par.fsdp_reshard_after_forward == reshard


def test_torchtitan_model_flavor_and_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    text = export_plan(DOCS["llama70b-fsdp-tp8"], "torchtitan").content
    assert "from torchtitan.models.llama3.config_registry import llama3_8b as base_config" in text
    assert "config.hf_assets_path = './assets/hf/Llama-3.1-70B'" in text
    assert run_torchtitan_module(DOCS["llama70b-fsdp-tp8"], monkeypatch).model_spec.flavor == "70B"
    assert batches(DOCS["llama70b-fsdp-tp8"]).gradient_accumulation_steps == 8  # 64 / (1 · 8)
    with pytest.raises(FrameworkRefusal, match="torchtitan 0.3.0 ships no model for gpt3-175b"):
        export_plan(DOCS["gpt3-megatron-ddp"], "torchtitan")


# -- torchrun ------------------------------------------------------------------------------------------------


def _torch_parser():
    run = pytest.importorskip("torch.distributed.run")
    return run.get_args_parser()


def _check_torchrun(ns, doc: PlanDocument) -> None:
    lay = layout(doc)
    assert int(ns.nnodes) * int(ns.nproc_per_node) == doc.hardware.gpus == lay.world_size
    assert int(ns.nproc_per_node) <= doc.hardware.gpus_per_host
    assert ns.rdzv_backend == "c10d" and ns.max_restarts == 3
    fw = doc.plan.framework.value
    if fw == "fsdp2":
        assert ns.module and ns.training_script == "torchtitan.train"
        assert ns.training_script_args == ["--module", "torchtitan_config", "--config", "capplan_plan"]
    elif fw == "megatron":
        assert ns.training_script == "pretrain_gpt.py" and ns.training_script_args == megatron_args(doc)
    else:
        args = ns.training_script_args
        assert args[args.index("--deepspeed_config") + 1].endswith("ds_config.json")
        assert args[args.index("--save-interval") + 1] == str(checkpoint_interval_steps(doc)[0])


def test_torchrun_args_parse_with_torchs_parser(doc: PlanDocument) -> None:
    parser = _torch_parser()
    ns = parser.parse_args(torchrun_args(doc))
    _check_torchrun(ns, doc)
    assert ns.rdzv_endpoint == "${RDZV_HOST}:${RDZV_PORT}" and ns.rdzv_id == "${RDZV_ID}"


def _continued_command(text: str, start: str) -> list[str]:
    """The words of the command that starts with ``start``, following backslash continuations."""
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(start))
    joined = []
    for line in lines[i:]:
        joined.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(joined))


def test_torchrun_script_runs_the_same_arguments(doc: PlanDocument) -> None:
    script = export_plan(doc, "torchrun").content
    words = _continued_command(script, "exec torchrun")
    assert words[:2] == ["exec", "torchrun"] and words[2:] == torchrun_args(doc)
    _check_torchrun(_torch_parser().parse_args(words[2:]), doc)


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("fmt", ["torchrun", "megatron", "slurm"])
def test_shell_scripts_pass_bash_syntax_check(doc: PlanDocument, fmt: str, tmp_path: Path) -> None:
    path = tmp_path / "script.sh"
    path.write_text(exported(doc, fmt))
    result = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# -- Megatron-LM ---------------------------------------------------------------------------------------------

MEGATRON_INT = (
    "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
    "expert-model-parallel-size", "expert-tensor-parallel-size", "num-layers-per-virtual-pipeline-stage", "num-virtual-stages-per-pipeline-rank",
    "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers", "recompute-num-layers",
    "micro-batch-size", "global-batch-size", "seq-length", "train-iters", "num-layers", "hidden-size",
    "num-attention-heads", "num-query-groups", "ffn-hidden-size", "kv-channels", "max-position-embeddings",
    "num-experts", "moe-router-topk", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size", "q-lora-rank",
    "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim", "rotary-base", "save-interval",
    "moe-router-num-groups", "moe-router-group-topk",
)  # fmt: skip
MEGATRON_FLOAT = ("rotary-percent", "rope-scaling-factor", "rotary-scaling-factor", "moe-router-topk-scaling-factor",
                  "moe-aux-loss-coeff")  # fmt: skip
MEGATRON_STR = (
    "cp-comm-type",
    "moe-layer-freq",
    "pipeline-model-parallel-layout",
    "save",
    "load",
    "moe-router-load-balancing-type",
)
MEGATRON_SWITCHES = (
    "sequence-parallel", "use-distributed-optimizer", "use-torch-fsdp2", "overlap-grad-reduce",
    "overlap-param-gather", "optimizer-cpu-offload", "overlap-cpu-optimizer-d2h-h2d", "bf16", "fp16",
    "group-query-attention", "multi-latent-attention", "qk-layernorm", "swiglu",
    "disable-bias-linear", "add-qkv-bias", "untie-embeddings-and-output-weights", "moe-grouped-gemm",
    "use-rope-scaling", "use-precision-aware-optimizer", "no-gradient-accumulation-fusion",
    "moe-router-enable-expert-bias", "grad-reduce-in-bf16", "tp-comm-overlap", "cross-entropy-loss-fusion",
    "fp8-param-gather", "fp4-param-gather",
)  # fmt: skip
MEGATRON_CHOICES = {
    "recompute-granularity": ("full", "selective"),
    "recompute-method": ("uniform", "block"),
    "fp8-format": ("e4m3", "hybrid"),
    "fp8-recipe": ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
    "fp4-format": ("e2m1",),
    "fp4-recipe": ("nvfp4", "custom"),
    "transformer-impl": ("local", "transformer_engine"),
    "normalization": ("LayerNorm", "RMSNorm"),
    "position-embedding-type": ("learned_absolute", "rope", "none"),
    "optimizer": ("adam", "sgd"),
    "moe-token-dispatcher-type": ("allgather", "alltoall", "flex"),
    "rope-type": ("rope", "yarn"),
    "ckpt-format": ("torch", "torch_dist", "torch_dcp", "fsdp_dtensor"),
    "moe-router-score-function": ("softmax", "sigmoid"),
    "moe-router-dtype": ("fp32", "fp64"),
    "cross-entropy-fusion-impl": ("native", "te"),
}


def megatron_parser() -> argparse.ArgumentParser:
    """The flags capplan writes, with Megatron-LM's names, types and choices (megatron/training/arguments.py)."""
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name in MEGATRON_INT:
        p.add_argument(f"--{name}", type=int)
    for name in MEGATRON_SWITCHES:
        p.add_argument(f"--{name}", action="store_true")
    for name, choices in MEGATRON_CHOICES.items():
        p.add_argument(f"--{name}", choices=choices)
    for name in MEGATRON_FLOAT:
        p.add_argument(f"--{name}", type=float)
    for name in MEGATRON_STR:
        p.add_argument(f"--{name}", type=str)
    return p


def test_megatron_flags_parse_and_round_trip(doc: PlanDocument) -> None:
    exported(doc, "megatron")
    pairs, _ = megatron_arg_pairs(doc)
    ns = megatron_parser().parse_args(megatron_args(doc))
    flags = [flag for flag, _ in pairs]
    assert len(flags) == len(set(flags)), "no flag twice"
    for flag, value in pairs:
        got = getattr(ns, flag.removeprefix("--").replace("-", "_"))
        assert got == (True if value is None else type(got)(value)), flag
    p, arch = doc.plan, doc.arch
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size) == (p.tp, p.pp)
    assert (ns.context_parallel_size, ns.expert_model_parallel_size) == (p.cp, p.ep)
    assert (ns.micro_batch_size, ns.global_batch_size, ns.seq_length) == (
        p.micro_batch,
        p.global_batch,
        p.seq_len,
    )
    assert (ns.num_layers, ns.hidden_size, ns.num_attention_heads) == (
        arch.n_layers,
        arch.hidden_size,
        arch.n_heads,
    )
    assert ns.sequence_parallel is p.sequence_parallel
    assert ns.tp_comm_overlap is (p.tp > 1 and p.sequence_parallel and p.uses_tp_comm_overlap)
    assert ns.recompute_granularity == (None if p.recompute.value == "none" else p.recompute.value)
    if p.recompute.value == "full":
        assert (ns.recompute_method, ns.recompute_num_layers) == ("uniform", 1)
    assert ns.use_distributed_optimizer is (p.sharding.value == "megatron-distopt")
    assert ns.use_torch_fsdp2 is p.sharding.shards_params
    assert ns.save_interval == checkpoint_interval_steps(doc)[0] and ns.save == ns.load == "checkpoints"
    if p.offload.value == "optimizer-cpu":
        assert ns.optimizer_cpu_offload and ns.use_precision_aware_optimizer and ns.use_distributed_optimizer
    assert ns.bf16 is (p.precision.value in {"bf16", "fp8", "nvfp4"}) and ns.fp16 is (
        p.precision.value == "fp16"
    )
    recipe = p.fp8_recipe_on(Framework.megatron).value
    block_scaled = recipe in ("mxfp8", "blockwise")
    assert ns.fp8_format == (("e4m3" if block_scaled else "hybrid") if p.precision.value == "fp8" else None)
    assert ns.fp8_recipe == (recipe if p.precision.value == "fp8" else None)
    assert (ns.fp4_format, ns.fp4_recipe) == (
        ("e2m1", "nvfp4") if p.precision.value == "nvfp4" else (None, None)
    )
    distopt = p.sharding.value == "megatron-distopt"
    assert ns.fp8_param_gather is (distopt and p.precision.value == "fp8")
    assert ns.fp4_param_gather is (distopt and p.precision.value == "nvfp4")
    if arch.position == "rotary":
        assert ns.rotary_base == round(arch.rope_theta)
    if arch.attention == "gqa" and arch.n_kv_heads != arch.n_heads:
        assert ns.group_query_attention and ns.num_query_groups == arch.n_kv_heads
    assert ns.swiglu is (arch.activation == "swiglu")
    assert ns.untie_embeddings_and_output_weights is (not arch.tied_embeddings)
    if arch.n_experts:
        assert (ns.num_experts, ns.moe_router_topk) == (arch.n_experts, arch.experts_top_k)
    if p.vpp > 1 and arch.n_layers % (p.pp * p.vpp) == 0:
        assert ns.num_layers_per_virtual_pipeline_stage * p.pp * p.vpp == arch.n_layers


def test_megatron_uneven_pipeline_and_moe_pattern() -> None:
    ns = megatron_parser().parse_args(megatron_args(DOCS["llama405b-pp16-uneven"]))
    # Llama 3 405B's own split as an explicit layout; the first/last flags are per rank, not per chunk
    assert ns.pipeline_model_parallel_layout == "Et*7|" + "t*8|" * 14 + "t*7L"
    assert ns.decoder_first_pipeline_num_layers is None and ns.num_layers_per_virtual_pipeline_stage is None
    assert (
        pipeline_layout(chunk_layer_counts(80, 32)).count("|") == 31
    )  # 80 layers on 32 chunks: a model Megatron can build
    ds = megatron_parser().parse_args(megatron_args(DOCS["deepseek-v3-megatron"]))
    assert ds.multi_latent_attention and ds.moe_layer_freq == "([0]*3+[1]*58)"
    assert eval(ds.moe_layer_freq) == [0] * 3 + [1] * 58  # Megatron evaluates the pattern the same way
    assert moe_layer_pattern(["moe", "dense", "moe"]) == "([1]*1+[0]*1+[1]*1)"
    # 61 layers on pp 16: uneven, so the layout is written
    assert ds.pipeline_model_parallel_layout.startswith(
        "Et*3|t*4|"
    ) and ds.pipeline_model_parallel_layout.endswith("L")
    # the router and RoPE from the architecture record (DeepSeek-V3 config.json)
    assert (ds.moe_router_score_function, ds.moe_router_enable_expert_bias) == ("sigmoid", True)
    assert (ds.moe_router_topk_scaling_factor, ds.moe_router_num_groups, ds.moe_router_group_topk) == (
        2.5,
        8,
        4,
    )
    assert (ds.rope_type, ds.rotary_scaling_factor) == ("yarn", 40.0)
    llama = megatron_parser().parse_args(megatron_args(DOCS["llama405b-pp16-uneven"]))
    assert (llama.rotary_base, llama.use_rope_scaling, llama.rope_scaling_factor) == (500000, True, 8.0)


def test_megatron_environment_per_plan() -> None:
    tp = export_plan(DOCS["llama405b-pp16-uneven"], "megatron").content
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in tp  # validate_args: TP/CP > 1 needs it
    fsdp = make_doc(model="llama3.1-8b", gpus=16, tp=2, dp=8, global_batch=64, framework="megatron")
    text = export_plan(fsdp, "megatron").content
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text and "export CUDA_DEVICE_MAX_CONNECTIONS" not in text
    ns = megatron_parser().parse_args(megatron_args(fsdp))
    assert ns.use_torch_fsdp2 and ns.no_gradient_accumulation_fusion and ns.ckpt_format == "torch_dist"
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in export_plan(DOCS["llama405b-pp16-uneven"], "slurm").content
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in export_plan(DOCS["llama70b-fsdp-tp8"], "slurm").content


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_megatron_file_is_a_bash_array_of_the_same_arguments(doc: PlanDocument, tmp_path: Path) -> None:
    path = tmp_path / "megatron_args.sh"
    path.write_text(exported(doc, "megatron"))
    out = subprocess.run(
        [BASH, "-c", 'source "$1"; printf "%s\\n" "${MEGATRON_ARGS[@]}"', "_", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.splitlines() == megatron_args(doc)


# -- DeepSpeed -----------------------------------------------------------------------------------------------


def test_deepspeed_batch_invariant(doc: PlanDocument) -> None:
    cfg = json.loads(exported(doc, "deepspeed"))
    p = doc.plan
    assert cfg["train_batch_size"] == (
        cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * p.dp
    )  # fmt: skip
    assert (
        cfg["train_batch_size"] == p.global_batch and cfg["train_micro_batch_size_per_gpu"] == p.micro_batch
    )
    assert cfg["bf16"]["enabled"] is (p.precision.value in {"bf16", "fp8"})
    assert cfg["fp16"]["enabled"] is (p.precision.value == "fp16")
    assert 0 <= cfg["zero_optimization"]["stage"] <= 3
    assert ("activation_checkpointing" in cfg) is (p.recompute.value != "none")
    if p.pp > 1:  # DeepSpeed's pipeline engine: ZeRO stage 0 or 1 only
        assert cfg["zero_optimization"]["stage"] <= 1


@pytest.mark.parametrize(
    ("sharding", "offload", "stage", "optimizer_device", "param_device"),
    [
        ("ddp", "none", 0, None, None),
        ("zero1", "optimizer-cpu", 1, "cpu", None),
        ("zero2", "none", 2, None, None),
        ("zero3", "params-cpu", 3, "cpu", "cpu"),
        ("zero3", "nvme", 3, "nvme", "nvme"),
    ],
)
def test_deepspeed_zero_stage_and_offload(sharding, offload, stage, optimizer_device, param_device) -> None:
    doc = make_doc(model="llama3.1-8b", gpus=16, tp=1, dp=16, framework="deepspeed", sharding=sharding,
                   offload=offload)  # fmt: skip
    zero = json.loads(export_plan(doc, "deepspeed").content)["zero_optimization"]
    assert zero["stage"] == stage
    assert zero.get("offload_optimizer", {}).get("device") == optimizer_device
    assert zero.get("offload_param", {}).get("device") == param_device
    if param_device == "nvme":
        assert zero["offload_param"]["nvme_path"]


@pytest.mark.parametrize("grad_accum_fp32", [False, True])
def test_deepspeed_accumulates_gradients_in_the_dtype_the_estimate_assumed(grad_accum_fp32: bool) -> None:
    """grad_accum_fp32 (with ZeRO-1: BF16_Optimizer and its fp32 gradient buffer) is written as
    data_types.grad_accum_dtype = fp32; without it DeepSpeed's current default (the model dtype) stands."""
    doc = make_doc(model="llama3.1-8b", gpus=16, tp=1, dp=16, framework="deepspeed", sharding="zero1",
                   grad_accum_fp32=grad_accum_fp32)  # fmt: skip
    cfg = json.loads(export_plan(doc, "deepspeed").content)
    assert cfg.get("data_types") == ({"grad_accum_dtype": "fp32"} if grad_accum_fp32 else None)


@pytest.mark.parametrize("zero_init", [True, False])
def test_deepspeed_zero3_says_how_the_model_must_be_built(zero_init: bool) -> None:
    """ZeRO-3's start-up memory depends on code the config cannot carry: under deepspeed.zero.Init (the estimate's
    default) the export says to build the model there; with zero_init off it says the estimate counts the whole
    model on every GPU at start-up. ZeRO-2 says neither."""
    doc = make_doc(model="llama3.1-8b", gpus=16, tp=1, dp=16, framework="deepspeed", sharding="zero3",
                   zero_init=zero_init)  # fmt: skip
    _, notes = deepspeed_config(doc)
    said = [n for n in notes if "zero.Init" in n]
    assert (
        len(said) == 1
        and ("HfDeepSpeedConfig" in said[0]) == zero_init
        and ("start-up" in said[0]) != zero_init
    )
    zero2 = make_doc(model="llama3.1-8b", gpus=16, tp=1, dp=16, framework="deepspeed", sharding="zero2")
    assert not [n for n in deepspeed_config(zero2)[1] if "zero.Init" in n]


def test_deepspeed_notes_what_it_cannot_hold() -> None:
    _, notes = deepspeed_config(DOCS["llama70b-fsdp-tp8"])
    assert any("ZeRO stage 3" in n for n in notes) and any("tp=8" in n for n in notes)


# -- what each framework refuses (app.domain.capabilities) ----------------------------------------------------


def test_framework_refusals_name_the_limit_and_the_nearest_plan() -> None:
    # the plan the search used to find for DeepSpeed: ZeRO-2 + PP 8 x vpp 4 + CP 8
    plan = Plan(tp=2, pp=8, vpp=4, cp=8, dp=8, global_batch=256, seq_len=8192, sharding="zero2",
                framework="deepspeed", recompute="full")  # fmt: skip
    from app.domain.estimator.capabilities import capability_violations, nearest_runnable

    codes = {v.code for v in capability_violations(plan)}
    assert codes == {"deepspeed-pp-zero", "deepspeed-interleaving", "deepspeed-context-parallel"}
    near = nearest_runnable(plan)
    assert (near.sharding.value, near.vpp, near.cp, near.dp) == ("zero1", 1, 1, 64)
    fix = capability_violations(plan)[0].fix
    assert "nearest runnable plan:" in fix and "sharding zero2 → zero1" in fix and "vpp 4 → 1" in fix
    # export refuses a plan the format's framework cannot run, naming the limit and the nearest plan
    gb = DOCS["gb200-rack"]  # FSDP2 with pp 2
    with pytest.raises(FrameworkRefusal, match="ZeRO-2 and ZeRO-3 are incompatible with pipeline"):
        export_plan(gb, "deepspeed")
    with pytest.raises(
        FrameworkRefusal, match="nearest runnable plan: sharding fsdp-full → megatron-distopt"
    ):
        export_plan(gb, "megatron")
    assert export_plan(gb, "torchtitan").content  # its own framework runs it


def test_plan_validation_uses_the_capability_table() -> None:
    from app.domain.estimator.plan import plan_violations

    plan = Plan(tp=1, pp=2, dp=8, global_batch=64, sharding="fsdp-full", framework="megatron", seq_len=4096)
    arch = CATALOG.architecture("llama3.1-8b")
    found = plan_violations(plan, n_layers=arch.n_layers, n_heads=arch.n_heads, n_kv_heads=arch.n_kv_heads,
                            n_experts=0, gpus=16, gpus_per_node=8, nvlink_domain_size=8)  # fmt: skip
    assert [v.code for v in found] == ["megatron-fsdp2-pp"]
    assert "--use-torch-fsdp2 is not supported with pipeline parallelism" in found[0].message


# -- Slurm ---------------------------------------------------------------------------------------------------


def _sbatch(script: str) -> dict[str, str]:
    out = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line.removeprefix("#SBATCH ").partition("=")
            out[key] = value
    return out


def test_slurm_numbers_match_the_plan(doc: PlanDocument) -> None:
    script = export_plan(doc, "slurm").content
    sb = _sbatch(script)
    lay = layout(doc)
    assert int(sb["--nodes"]) * int(sb["--gpus-per-node"]) == doc.hardware.gpus
    assert int(sb["--nodes"]) == lay.hosts and sb["--ntasks-per-node"] == "1" and "--exclusive" in sb
    if doc.hardware.vcpus_per_host:
        assert int(sb["--cpus-per-task"]) == doc.hardware.vcpus_per_host
    # directives come before the first command, where sbatch stops reading them
    first_command = next(
        i for i, line in enumerate(script.splitlines()[1:], 1) if line and not line.startswith("#")
    )
    assert all(i < first_command for i, line in enumerate(script.splitlines()) if line.startswith("#SBATCH"))
    assert "| head" not in script  # no SIGPIPE (exit 141) under pipefail on long node lists
    assert (
        sb["--job-name"] == unique_name(doc)
        and "--requeue" in sb
        and re.fullmatch(r"\d+-\d\d:\d\d:00", sb["--time"])
    )
    words = _continued_command(script, "srun ")
    assert words[-1] == "&" and words[1] == "--kill-on-bad-exit=1"
    torchrun = words.index("torchrun")
    if doc.hardware.vcpus_per_host:  # srun does not inherit --cpus-per-task (Slurm >= 22.05)
        assert f"--cpus-per-task={doc.hardware.vcpus_per_host}" in words[:torchrun]
    ns = _torch_parser().parse_args(words[torchrun + 1 : -1])
    _check_torchrun(ns, doc)
    assert ns.rdzv_endpoint == "${RDZV_HOST}:${RDZV_PORT}" and ns.rdzv_id == "${SLURM_JOB_ID}"


def test_slurm_nccl_environment_by_fabric() -> None:
    efa = export_plan(DOCS["mixtral-ep8-hsdp-efa"], "slurm").content
    assert "export FI_PROVIDER=efa" in efa and "export FI_EFA_USE_DEVICE_RDMA=1" in efa
    assert "NCCL_IB_HCA" not in efa
    ib = export_plan(DOCS["llama70b-fsdp-tp8"], "slurm").content
    assert "export NCCL_IB_HCA=mlx5" in ib and "FI_PROVIDER" not in ib
    for script in (efa, ib):
        assert re.search(r"export NCCL_SOCKET_IFNAME=\S+ +# PLACEHOLDER", script)


def test_rack_scale_and_partial_hosts() -> None:
    gb = layout(DOCS["gb200-rack"])
    assert (gb.hosts, gb.procs_per_host) == (36, 4)  # NVL72 compute trays of 4 GPUs
    part = layout(DOCS["llama8b-ddp-partial-hosts"])
    assert (part.hosts, part.procs_per_host, part.partial) == (2, 6, True)
    assert any("6 of 8" in n for n in export_plan(DOCS["llama8b-ddp-partial-hosts"], "slurm").notes)


# -- Kubernetes ----------------------------------------------------------------------------------------------


def test_trainjob_fields(doc: PlanDocument) -> None:
    job, pvc = yaml.safe_load_all(export_plan(doc, "k8s").content)
    lay = layout(doc)
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    name = job["metadata"]["name"]
    assert (
        re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", name)
        and len(name) <= 40
        and name.endswith(plan_hash(doc))
    )
    assert job["spec"]["runtimeRef"] == {"name": "torch-distributed"}
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (lay.hosts, lay.procs_per_host)
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] * lay.hosts == doc.hardware.gpus
    bash, dash_c, line = trainer["command"]
    assert (bash, dash_c) == ("bash", "-c") and line.startswith("cd /workspace && exec torchrun ")
    words = shlex.split(line)[4:]
    ns = _torch_parser().parse_args(words[1:])
    assert int(ns.nnodes) * int(ns.nproc_per_node) == doc.hardware.gpus and ns.max_restarts == 3
    (patch,) = job["spec"]["runtimePatches"]
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert (
        volumes["checkpoints"]["persistentVolumeClaim"]["claimName"]
        == pvc["metadata"]["name"]
        == f"{name}-ckpt"
    )
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["checkpoints"] == "/workspace/checkpoints"
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_pytorchjob_fields(doc: PlanDocument) -> None:
    job, pvc = yaml.safe_load_all(export_plan(doc, "k8s-v1").content)
    lay = layout(doc)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    name = job["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", name) and len(name) <= 50
    elastic = job["spec"]["elasticPolicy"]
    assert elastic == {
        "rdzvBackend": "c10d",
        "minReplicas": lay.hosts,
        "maxReplicas": lay.hosts,
        "maxRestarts": 3,
    }
    assert job["spec"]["nprocPerNode"] == str(lay.procs_per_host)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == lay.hosts and worker["restartPolicy"] == "OnFailure"
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "pytorch"
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] * worker["replicas"] == doc.hardware.gpus
    assert ("vpc.amazonaws.com/efa" in limits) is (doc.hardware.fabric_kind == "efa")
    assert container["command"][0] == "torchrun"
    ns = _torch_parser().parse_args(container["command"][1:])
    _check_torchrun(ns, doc)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert "NCCL_SOCKET_IFNAME" in env
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["dshm"] == "/dev/shm" and mounts["checkpoints"] == "/workspace/checkpoints"
    volumes = {v["name"]: v for v in worker["template"]["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    if doc.plan.framework.value == "deepspeed":
        assert volumes["config"]["configMap"]["name"] == f"{name}-config"
        args = container["command"]
        assert args[args.index("--deepspeed_config") + 1].startswith(mounts["config"] + "/")
    if doc.plan.framework.value == "fsdp2":
        assert env["PYTHONPATH"] == mounts["config"]


def test_pytorchjob_efa_interfaces() -> None:
    job = next(yaml.safe_load_all(export_plan(DOCS["llama405b-pp16-vpp-fp8-p5"], "k8s-v1").content))
    limits = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"][
        "limits"
    ]
    assert limits == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}  # p5.48xlarge: 32 EFA interfaces


def test_k8s_name_is_a_dns_label() -> None:
    assert k8s_name("llama3.1-70b-64xh100-sxm") == "llama3-1-70b-64xh100-sxm"
    assert k8s_name("Qwen/Qwen2.5 0.5B_x" * 10).startswith("qwen-qwen2-5-0-5b-x")
    assert len(k8s_name("a" * 200)) == 40 and k8s_name("...") == "capplan-job"
    assert (
        k8s_name("a" * 200, "0123abcd").endswith("-0123abcd") and len(k8s_name("a" * 200, "0123abcd")) == 40
    )


def test_names_and_uids_are_unique_per_plan_and_valid() -> None:
    """Four plans of one model on one cluster used to share a job name, k8s name and Grafana uid."""
    variants = [
        make_doc(),
        make_doc(recompute="selective"),
        make_doc(micro_batch=2),
        make_doc(sharding="ddp"),
    ]
    uids, names, jobs = set(), set(), set()
    for d in variants:
        uid = json.loads(export_plan(d, "grafana").content)["uid"]
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid), uid  # Grafana refuses '.' and longer uids
        uids.add(uid)
        names.add(next(yaml.safe_load_all(export_plan(d, "k8s").content))["metadata"]["name"])
        jobs.add(_sbatch(export_plan(d, "slurm").content)["--job-name"])
    assert len(uids) == len(names) == len(jobs) == 4


def test_checkpoint_interval_is_the_reliability_models_in_every_format() -> None:
    doc = DOCS["llama405b-pp16-uneven"].model_copy(
        update={
            "estimate": DOCS["llama405b-pp16-uneven"].estimate.model_copy(
                update={"checkpoint_interval_s": 106.0}
            )
        }
    )
    steps = round(106.0 / doc.estimate.step_time_s) or 1
    assert checkpoint_interval_steps(doc)[0] == max(1, steps)
    ns = megatron_parser().parse_args(megatron_args(doc))
    assert ns.save_interval == max(1, steps)
    assert f"--save-interval {max(1, steps)}" in export_plan(doc, "torchrun").content.replace("\\\n  ", " ")
    missing = DOCS["llama70b-fsdp-tp8"]  # estimated without the reliability model: marked placeholder
    assert missing.estimate.checkpoint_interval_s is None
    assert "placeholder" in checkpoint_interval_steps(missing)[1]


# -- writers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ['a "quoted" \\ path', "naïve — ünïcode", "tab\there", "", "line\nbreak"])
def test_toml_strings_round_trip(value: str) -> None:
    assert tomllib.loads(f"k = {toml_value(value)}")["k"] == value
    assert yaml.safe_load(f"k: {json.dumps(value, ensure_ascii=False)}")["k"] == value


def test_shell_words() -> None:
    assert (
        shell_word("--rdzv-endpoint=${RDZV_HOST}:${RDZV_PORT}")
        == '"--rdzv-endpoint=${RDZV_HOST}:${RDZV_PORT}"'
    )
    assert shell_word("([0]*3+[1]*58)") == "'([0]*3+[1]*58)'"
    assert shlex.split(shell_word("it's")) == ["it's"]
    with pytest.raises(ValueError):
        shell_word("$(rm -rf /)")


# -- the search proposes only plans the framework runs ---------------------------------------------------------


@pytest.mark.parametrize("framework", ["deepspeed", "megatron", "fsdp2"])
def test_search_never_returns_a_plan_its_framework_refuses(framework: str) -> None:
    from app.domain.estimator.capabilities import capability_violations
    from app.domain.estimator.compute import model_flops_per_token
    from app.domain.model.counts import parameter_counts
    from app.domain.search.engine import search
    from app.domain.search.spec import SearchSpec

    arch = CATALOG.architecture("llama3.1-8b")
    cluster = build_cluster(CATALOG.hardware, CATALOG.efficiency, accelerator="h100-sxm", gpus=32)
    spec = SearchSpec(gpus=(32,), global_batches=(64,), seq_len=4096, framework=framework, vpps=(1, 2),
                      cps=(1, 2), micro_batches=(1, 4), recomputes=("full",), max_pp=4, top_k=100)  # fmt: skip
    flops = model_flops_per_token(arch, 4096, parameter_counts(arch).matmul_weights_active).total
    result = search(arch, {32: cluster}, spec, flops)
    assert result.plans
    for cand in result.plans:
        assert capability_violations(cand.plan, tied_embeddings=arch.tied_embeddings) == [], cand.plan
    refused = {k: v for k, v in result.rejected.items() if k.startswith(f"{framework}: ")}
    assert refused, result.rejected  # the table's masks did remove plans the framework cannot run


def test_export_targets_are_pinned_consistently() -> None:
    """data/export_targets.toml, the code's constants, the check environment's pins and the sourced data agree."""
    from app.domain.export.torchtitan import TORCHTITAN_VERSION

    root = Path(__file__).resolve().parents[2]
    targets = {
        t["format"]: t for t in tomllib.loads((root / "data/export_targets.toml").read_text())["target"]
    }
    assert set(targets) == set(EXPORT_FORMATS) - {"json", "torchrun"}
    pins = dict(
        line.split("==", 1)
        for line in (root / "scripts/check_exports/requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert targets["torchtitan"]["version"] == TORCHTITAN_VERSION == pins["torchtitan"]
    assert targets["deepspeed"]["version"] == pins["deepspeed"]
    assert targets["megatron"]["version"] == "core_v" + pins["megatron-core"]
    flags = json.loads((root / "scripts/check_exports/megatron_flags.json").read_text())["_source"]
    assert flags["tag"] == targets["megatron"]["version"]
    for fmt, schema in (("k8s", "trainjob.json"), ("k8s-v1", "pytorchjob.json")):
        source = json.loads((root / "scripts/check_exports/schemas" / schema).read_text())["_source"]
        assert source["tag"] == targets[fmt]["version"]


def test_torchtitan_writes_per_op_selective_ac_for_selective_op(monkeypatch: pytest.MonkeyPatch) -> None:
    name = TITAN_DOCS[0]
    doc = DOCS[name]
    op = doc.model_copy(update={"plan": doc.plan.model_copy(update={"recompute": Recompute.selective_op})})
    assert run_torchtitan_module(op, monkeypatch).activation_checkpoint == "selective"
    assert "capplan's 'selective-op' models it" not in export_plan(op, "torchtitan").content


def test_megatron_runs_the_fused_cross_entropy_the_estimate_assumed() -> None:
    """The estimate counts a Megatron plan's loss as fused (6 B a logit, Transformer Engine's Triton kernel on the
    16-bit logits) unless the plan says eager; Megatron-LM's default is its unfused vocab-parallel loss in fp32
    (source MEGATRON-CROSS-ENTROPY), so the export asks for the fused TE kernel: --cross-entropy-loss-fusion with
    --cross-entropy-fusion-impl te, which Megatron's parser (core_v0.16.1, megatron_flags.json) reads into
    cross_entropy_loss_fusion / cross_entropy_fusion_impl. A plan with an eager loss keeps Megatron's default."""
    fields = dict(model="llama3.1-8b", gpus=16, tp=2, dp=8, global_batch=64, framework="megatron",
                  sharding="megatron-distopt")  # fmt: skip
    args = megatron_parser().parse_args(megatron_args(make_doc(**fields)))
    assert args.cross_entropy_loss_fusion and args.cross_entropy_fusion_impl == "te"
    eager = megatron_parser().parse_args(megatron_args(make_doc(**fields, fused_loss=False)))
    assert (
        not eager.cross_entropy_loss_fusion and eager.cross_entropy_fusion_impl is None
    )  # Megatron's default


def test_megatron_bf16_gradient_reduce_flag() -> None:
    """A plan that reduces gradients in bf16 (NeMo's performance recipes) exports Megatron-LM's own flag, which
    its parser (core_v0.16.1, megatron_flags.json) reads as grad_reduce_in_bf16; a plan that does not, keeps
    Megatron's default fp32 main gradients (no flag)."""
    fields = dict(model="llama3.1-8b", gpus=16, tp=2, dp=8, global_batch=64, framework="megatron",
                  sharding="megatron-distopt")  # fmt: skip
    bf16 = megatron_parser().parse_args(megatron_args(make_doc(**fields, grad_reduce_bf16=True)))
    assert bf16.grad_reduce_in_bf16
    assert "--grad-reduce-in-bf16" not in megatron_args(make_doc(**fields))


def test_readmes_export_example_names_the_plan_hash_the_commands_compute() -> None:
    """README's "Export and launch" example (Llama 3.1 70B on 64 H100, tp 8, FSDP over the rest, 64 × 8K tokens, full
    recompute, 1e11 tokens) shows the Slurm job name and the Kubernetes config map that `capplan export` writes for
    it; both carry the plan hash, which moves whenever a plan field is added, so the example is checked here."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    doc = make_doc(tokens=1e11)
    assert f"#SBATCH --job-name={unique_name(doc)}" in readme
    assert f"kubectl create configmap {k8s_name(doc.name, plan_hash(doc))}-config" in readme


def test_megatron_writes_the_all_gather_cp_only_when_the_plan_runs_it() -> None:
    """TransformerConfig.cp_comm_type passes to Transformer Engine as is: 'all_gather'; the p2p ring is the
    default and is not written."""
    gathered = dict(PLANS["llama70b-megatron-cp4-all-gather"])
    args = megatron_args(make_doc(**gathered))
    assert args[args.index("--cp-comm-type") + 1] == "all_gather"
    assert "--cp-comm-type" not in megatron_args(make_doc(**(gathered | {"cp_comm_type": "p2p"})))
