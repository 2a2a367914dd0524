"""Feed every exported file to its real consumer and print plan × format → accepted / rejected.

Runs in ``.venv-exports`` (CPU only, pinned in ``requirements.txt``) on the folder ``matrix.py`` wrote:

* torchtitan (0.3.0 from PyPI): ``ConfigManager().parse_args(["--module", …, "--config", …])`` imports the
  config module and validates it (tyro, ``Trainer.Config.__post_init__``); ``ParallelDims.from_config`` and
  ``build_mesh()`` over a fake process group of the plan's world size; the pipeline split against the
  schedule class torch resolves (stages per rank, micro-batches ≥ stages) and the model's layer count. The
  fp8 converter's GPU check is answered as the plan's GPU (H100/A100-class, SM ≥ 8.9 for fp8 plans);
* Megatron-LM (``megatron/training`` is not on PyPI): the flags are parsed by an ``argparse`` rebuilt from
  ``megatron_flags.json`` (Megatron-LM core_v0.16.1's own parser, dumped by ``refresh_sources.py``), then
  the ``validate_args`` rules capplan's files touch (recorded below with their line in that file), then
  ``core_transformer_config_from_args``' translation into megatron-core 0.16.1's real ``TransformerConfig``
  / ``MLATransformerConfig`` (PyPI), and the layers each (pipeline rank, virtual stage) builds;
* DeepSpeed (0.19.8 from PyPI): ``DeepSpeedConfig(config, mpu=…)`` with the plan's data/model-parallel
  sizes; for pipeline plans the ``PipelineEngine`` rule (ZeRO stage < gradients, DeepSpeed's own enum);
* the launchers: ``bash -n`` and ``shellcheck -S warning``; torch's own torchrun parser on the command; the
  ``#SBATCH`` directives against Slurm's option table;
* Kubernetes: the TrainJob / PyTorchJob CRD OpenAPI schemas (``schemas/``, from the Kubeflow tags) with
  ``jsonschema``, strict: unknown fields are errors (``kubectl apply --validate=strict``); the PVC's fields;
* Prometheus: ``promtool check rules`` and ``promtool test rules`` (a healthy run alerts nothing, a slow one
  raises TrainingThroughputLow); Grafana: the uid rule (``^[a-zA-Z0-9_-]{1,40}$``), unique uids, panel
  ids, schema fields.

    .venv-exports/bin/python scripts/check_exports/validate.py OUT_DIR   # exit 1 if any cell is rejected
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
Check = Callable[[Path, dict], str]  # returns a short "accepted" detail; raises on rejection


class Rejected(Exception):
    pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    text = re.sub(r"\s+", " ", re.sub(r"[│╭╰─╮╯]", " ", text))
    return f"{type(exc).__name__}: {text}"[:300]


# -- torchtitan ----------------------------------------------------------------------------------------------


def _fake_world(world: int) -> None:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())


def check_torchtitan(path: Path, entry: dict) -> str:
    import torchtitan.components.quantization.float8 as float8
    import torchtitan.components.quantization.mx as mx
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    # the plan's GPU: an H100 (SM 9.0), or a B200 (SM 10.0) for MXFP8, which capplan estimates only on Blackwell
    sm = (10, 0) if entry["plan"].get("fp8_recipe") == "mxfp8" else (9, 0)
    float8.has_cuda_capability = mx.has_cuda_capability = lambda major, minor: (major, minor) <= sm
    sys.modules.pop(path.stem, None)
    sys.path.insert(0, str(path.parent))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                cfg = ConfigManager().parse_args(["--module", path.stem, "--config", "capplan_plan"])
            except SystemExit as exc:  # tyro prints the error and exits
                raise Rejected(f"ConfigManager.parse_args exited {exc.code}") from None
    finally:
        sys.path.remove(str(path.parent))
    par, tr = cfg.parallelism, cfg.training
    world = entry["gpus"]
    _fake_world(world)
    dims = ParallelDims.from_config(par, world)
    dims.build_mesh()
    n_layers = len(cfg.model_spec.model.layers)
    if n_layers != entry["n_layers"]:
        raise Rejected(f"model has {n_layers} layers, the plan {entry['n_layers']}")
    # trainer.py: seq_len divisible by tp (sequence parallel) × 2·cp
    divisor = (dims.tp if par.enable_sequence_parallel else 1) * (2 * dims.cp if dims.cp > 1 else 1)
    if tr.seq_len % divisor:
        raise Rejected(f"training.seq_len {tr.seq_len} not divisible by {divisor} (torchtitan trainer)")
    detail = f"mesh {world} = dp {dims.dp_replicate}x{dims.dp_shard} tp {dims.tp} pp {dims.pp} cp {dims.cp} ep {dims.ep}"
    if dims.pp > 1:
        schedule = get_schedule_class(par.pipeline_parallel_schedule)
        parts = par.module_fqns_per_model_part
        if len(parts) % dims.pp:
            raise Rejected(f"{len(parts)} model parts not divisible by pp {dims.pp}")
        per_rank = len(parts) // dims.pp
        single = issubclass(schedule, PipelineScheduleSingle)
        if single and per_rank != 1 or not single and per_rank < 2:
            raise Rejected(f"{par.pipeline_parallel_schedule} with {per_rank} stages per rank")
        microbatches = tr.local_batch_size // par.pipeline_parallel_microbatch_size
        if microbatches < dims.pp:  # torch.distributed.pipelining.schedules
            raise Rejected(
                f"Number of microbatches ({microbatches}) must be >= the number of stages ({dims.pp})"
            )
        expected = [f"layers.{i}" for i in range(n_layers)]
        layers = [m for part in parts for m in part if m.startswith("layers.")]
        if layers != expected or parts[0][0] != "tok_embeddings" or parts[-1][-1] != "lm_head":
            raise Rejected("module_fqns_per_model_part does not cover the model's modules in order")
        detail += f"; {schedule.__name__} {len(parts)} stages, {microbatches} micro-batches"
    if not cfg.checkpoint.enable or cfg.checkpoint.interval < 1:
        raise Rejected("checkpointing is off")
    return detail + f"; checkpoint every {cfg.checkpoint.interval} steps"


# -- Megatron-LM ---------------------------------------------------------------------------------------------

_TYPES = {"int": int, "float": float, "str": str}


def megatron_parser() -> argparse.ArgumentParser:
    table = json.loads((HERE / "megatron_flags.json").read_text())
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for f in table["flags"]:
        kw: dict = {"dest": f["dest"], "default": f["default"]}
        action = f["action"]
        if action == "_StoreTrueAction":
            kw["action"] = "store_true"
        elif action == "_StoreFalseAction":
            kw["action"] = "store_false"
        elif action == "BooleanOptionalAction":
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = _TYPES.get(f["type"] or "str", str)
            if f["nargs"] is not None:
                kw["nargs"] = f["nargs"]
            if f["choices"] is not None:
                kw["choices"] = f["choices"]
        flags = [s for s in f["flags"] if not (action == "BooleanOptionalAction" and s.startswith("--no-"))]
        with contextlib.suppress(argparse.ArgumentError):
            parser.add_argument(*flags, **kw)
    return parser


MEGATRON_PARSER = None


def megatron_validate_args(args: argparse.Namespace, env: dict[str, str], world: int) -> None:
    """The validate_args rules (Megatron-LM core_v0.16.1 megatron/training/arguments.py, line) a capplan file
    can break, and the derived values core_transformer_config_from_args reads."""
    tp, pp, cp = (
        args.tensor_model_parallel_size,
        args.pipeline_model_parallel_size,
        args.context_parallel_size,
    )
    if world % (tp * pp * cp):  # l.~420 world size divisible by model-parallel size
        raise Rejected(f"world size {world} not divisible by tp*pp*cp")
    args.data_parallel_size = world // (tp * pp * cp)
    if args.global_batch_size % (args.micro_batch_size * args.data_parallel_size):
        raise Rejected("global batch size not divisible by micro batch size times data parallel size")
    vpp_flags = [args.num_layers_per_virtual_pipeline_stage, args.num_virtual_stages_per_pipeline_rank,
                 args.pipeline_model_parallel_layout]  # fmt: skip
    if sum(v is not None for v in vpp_flags) > 1:  # l.503
        raise Rejected("No more than one of the following arguments can be set at the same time (vpp flags)")
    args.virtual_pipeline_model_parallel_size = None
    if args.pipeline_model_parallel_layout is not None:  # l.515
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

        stages = PipelineParallelLayerLayout.get_num_stages_from_str(args.pipeline_model_parallel_layout)
        if stages % pp:
            raise Rejected("The length of pipeline_model_parallel_layout must be divisible by pp")
        args.virtual_pipeline_model_parallel_size = stages // pp if stages // pp > 1 else None
    elif args.num_layers_per_virtual_pipeline_stage is not None:  # l.528
        if args.num_layers % pp:
            raise Rejected("number of layers of the model must be divisible pipeline model parallel size")
        per_stage = args.num_layers // pp
        if per_stage % args.num_layers_per_virtual_pipeline_stage:
            raise Rejected(
                "number of layers per pipeline stage must be divisible number of layers per virtual stage"
            )
        args.virtual_pipeline_model_parallel_size = per_stage // args.num_layers_per_virtual_pipeline_stage
    elif pp > 1 and args.decoder_first_pipeline_num_layers is None and args.num_layers % pp:  # l.558
        raise Rejected("Number of layers should be divisible by the pipeline-model-parallel size")
    if (
        args.virtual_pipeline_model_parallel_size is not None and not args.overlap_p2p_comm and pp <= 2
    ):  # l.579
        raise Rejected("interleaved schedule: pipeline-model-parallel size should be greater than 2")
    if args.overlap_param_gather and not args.overlap_grad_reduce:  # l.596
        raise Rejected("Must use --overlap-param-gather with --overlap-grad-reduce")
    if args.overlap_param_gather and not args.use_distributed_optimizer:
        raise Rejected("--overlap-param-gather only supported with distributed optimizer")
    if args.use_torch_fsdp2:  # l.606
        for ok, msg in ((pp == 1, "--use-torch-fsdp2 is not supported with pipeline parallelism"),
                        (args.expert_model_parallel_size == 1, "--use-torch-fsdp2 is not supported with expert parallelism"),
                        (not args.use_distributed_optimizer, "--use-torch-fsdp2 is not supported with MCore's distributed optimizer"),
                        (not args.gradient_accumulation_fusion, "--use-torch-fsdp2 is not supported with gradient accumulation fusion"),
                        (args.ckpt_format in ("torch_dist", "torch_dcp"), "--use-torch-fsdp2 requires --ckpt-format torch_dist or torch_dcp"),
                        (args.untie_embeddings_and_output_weights, "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"),
                        (not args.fp16, "--use-torch-fsdp2 not supported with fp16 yet"),
                        (env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1", "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one")):  # fmt: skip
            if not ok:
                raise Rejected(msg)
    elif (tp > 1 or cp > 1) and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":  # l.951 (before Blackwell)
        raise Rejected("Using tensor model parallelism or context parallelism require setting the environment "
                       "variable CUDA_DEVICE_MAX_CONNECTIONS to 1")  # fmt: skip
    if args.optimizer_cpu_offload and not args.use_precision_aware_optimizer:  # l.1191
        raise Rejected(
            "The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`"
        )
    if args.fp16 and args.bf16:
        raise Rejected("cannot use both --fp16 and --bf16")
    if args.expert_model_parallel_size > 1 and args.num_experts is None:
        raise Rejected("num_experts must be non None to use expert-parallel")
    if args.save_interval is None or args.save is None:
        raise Rejected("no --save/--save-interval: the run would not checkpoint")
    import torch

    args.params_dtype = torch.bfloat16 if args.bf16 else torch.half if args.fp16 else torch.float
    if args.fp8 is not None and not (args.bf16 or args.fp16):  # --fp8-format stores into args.fp8
        raise Rejected("fp8 needs --bf16 or --fp16")
    if args.fp8_param_gather and not (args.use_distributed_optimizer or args.use_torch_fsdp2):  # l.655
        raise Rejected("--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron fsdp, "
                       "or inference mode")  # fmt: skip
    if args.optimizer_cpu_offload and args.fp8_param_gather and args.fp8_recipe != "delayed":  # l.1195
        raise Rejected("When `--fp8-param-gather` is enabled, the optimizer cpu offload must be used in "
                       "conjunction with `--fp8-recipe delayed`.")  # fmt: skip
    if args.fp4 and args.fp8:  # l.660
        raise Rejected("--fp4-format and --fp8-format cannot be used simultaneously. Please choose one.")
    if args.fp4_param and not args.fp4:  # l.664
        raise Rejected("--fp4-param-gather must be used together with --fp4-format.")


def megatron_transformer_config(args: argparse.Namespace):
    """core_transformer_config_from_args (core_v0.16.1 l.1306) into megatron-core's real config classes."""
    import dataclasses

    import megatron.core.transformer.transformer_config as tc
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    from packaging.version import Version

    # TransformerEngine is GPU-only: its version checks are answered as the training image's TE (2.8)
    tc.is_te_min_version = lambda version, check_equality=True: Version("2.8") >= Version(str(version))
    tc.get_te_version = lambda: Version("2.8")
    import megatron.core.models.common.embeddings.rope_utils as rope_utils

    if rope_utils.fused_apply_rotary_pos_emb is None:  # TE's fused RoPE kernel, present in the training image
        rope_utils.fused_apply_rotary_pos_emb = lambda *a, **k: None

    config_class = MLATransformerConfig if args.multi_latent_attention else TransformerConfig
    kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_class) if hasattr(args, f.name)}
    kw.update(
        persist_layer_norm=not args.no_persist_layer_norm, deallocate_pipeline_outputs=True,
        pipeline_dtype=args.params_dtype, batch_p2p_comm=not args.overlap_p2p_comm, num_moe_experts=args.num_experts,
        rotary_interleaved=args.rotary_interleaved, num_layers_in_first_pipeline_stage=args.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=args.decoder_last_pipeline_num_layers, fp8_param=args.fp8_param_gather,
        num_query_groups=args.num_query_groups if args.group_query_attention else None,
    )  # fmt: skip
    if args.swiglu:
        kw.update(
            activation_func=F.silu, gated_linear_unit=True, bias_activation_fusion=args.bias_swiglu_fusion
        )
    else:
        kw["bias_activation_fusion"] = args.bias_gelu_fusion
    if args.rope_type is None:
        kw.pop("rope_type", None)
    elif not (args.multi_latent_attention or args.rope_type == "rope"):
        raise Rejected(f'Common attention only support rope_type="rope", but got {args.rope_type}.')
    if isinstance(getattr(args, "cp_comm_type", None), list) and len(args.cp_comm_type) == 1:
        kw["cp_comm_type"] = args.cp_comm_type[0]
    fields = {f.name for f in dataclasses.fields(config_class)}
    return config_class(**{k: v for k, v in kw.items() if k in fields})


def megatron_layers_per_rank(config) -> list[list[int]]:
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    pp, vpp = config.pipeline_model_parallel_size, config.virtual_pipeline_model_parallel_size or 1
    out = []
    names = ("get_pipeline_model_parallel_rank", "get_pipeline_model_parallel_world_size",
             "get_virtual_pipeline_model_parallel_world_size")  # fmt: skip
    saved = {n: getattr(parallel_state, n) for n in names}
    try:  # what parallel_state answers on each rank of a pp × vpp job
        parallel_state.get_pipeline_model_parallel_world_size = lambda *a, **k: pp
        parallel_state.get_virtual_pipeline_model_parallel_world_size = lambda *a, **k: (
            vpp if vpp > 1 else None
        )
        for rank in range(pp):
            parallel_state.get_pipeline_model_parallel_rank = lambda *a, _r=rank, **k: _r
            out.append(
                [
                    get_num_layers_to_build(config, vp_stage=v if vpp > 1 else None, pp_rank=rank)
                    for v in range(vpp)
                ]
            )
    finally:
        for n, f in saved.items():
            setattr(parallel_state, n, f)
    return out


def _sourced_args(path: Path) -> tuple[list[str], dict[str, str]]:
    script = f'set -e; source "{path}"; env -0 | grep -z "^CUDA_DEVICE_MAX_CONNECTIONS=" || true; printf "\\n--ARGS--\\n"; printf "%s\\n" "${{MEGATRON_ARGS[@]}}"'
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]}
    ).stdout
    env_part, _, args = out.partition("\n--ARGS--\n")
    env = dict(item.split("=", 1) for item in env_part.split("\0") if "=" in item)
    return args.splitlines(), env


def check_megatron_args(argv: list[str], env: dict[str, str], entry: dict) -> str:
    global MEGATRON_PARSER
    MEGATRON_PARSER = MEGATRON_PARSER or megatron_parser()
    try:
        args, unknown = MEGATRON_PARSER.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        raise Rejected(f"pretrain_gpt.py argument parser: {exc}") from None
    if unknown:
        raise Rejected(f"pretrain_gpt.py: unrecognized arguments: {' '.join(unknown)}")
    megatron_validate_args(args, env, entry["gpus"])
    import megatron.core.optimizer.optimizer_config as oc
    from megatron.core.optimizer import OptimizerConfig
    from packaging.version import Version

    oc.is_te_min_version = lambda version, check_equality=True: (
        Version("2.8") >= Version(str(version))
    )  # TE 2.8
    # megatron-core's own optimizer rules (precision-aware optimizer: adam and the distributed optimizer only)
    OptimizerConfig(**{k: getattr(args, k) for k in ("optimizer", "use_distributed_optimizer", "fp16", "bf16",
                                                      "use_precision_aware_optimizer", "optimizer_cpu_offload")})  # fmt: skip
    config = megatron_transformer_config(args)
    layers = megatron_layers_per_rank(config)
    flat = [n for rank in layers for n in rank]
    if sum(flat) != args.num_layers or min(flat) < 0:
        raise Rejected(
            f"layers built per (rank, virtual stage) {layers} do not cover {args.num_layers} layers"
        )
    # a virtual stage without decoder layers must hold something else: with a layout, the embedding, the loss or
    # an MTP layer (Megatron's account-for-embedding/loss splits and NVIDIA's DeepSeek-V3 layouts); else none
    empty = [(r, v) for r, rank in enumerate(layers) for v, n in enumerate(rank) if n == 0]
    if empty:
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

        text = args.pipeline_model_parallel_layout
        stages = PipelineParallelLayerLayout.parse_str_to_list(text) if text else None
        pp = len(layers)
        for r, v in empty:
            stage = stages[v * pp + r] if stages else []
            if not any(getattr(x, "name", str(x)) in ("embedding", "loss", "mtp") for x in stage):
                raise Rejected(f"virtual stage {v} of pipeline rank {r} builds no layer and holds nothing else")
    return (f"{type(config).__name__}; layers per rank {'/'.join(str(sum(r)) for r in layers)}; "
            f"save every {args.save_interval} steps")  # fmt: skip


def check_megatron(path: Path, entry: dict) -> str:
    argv, env = _sourced_args(path)
    shell(path, entry)
    return check_megatron_args(argv, env, entry)


# -- DeepSpeed -----------------------------------------------------------------------------------------------


class _MPU:
    def __init__(self, dp: int, mp: int) -> None:
        self.dp, self.mp = dp, mp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_model_parallel_world_size(self) -> int:
        return self.mp

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_model_parallel_rank(self) -> int:
        return 0

    def get_data_parallel_group(self):
        return None

    def get_model_parallel_group(self):
        return None


def check_deepspeed(path: Path, entry: dict) -> str:
    import deepspeed.comm as dcomm
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero.config import ZeroStageEnum

    p = entry["plan"]
    config = json.loads(path.read_text())
    _fake_world(entry["gpus"])  # DeepSpeedConfig reads the rank from deepspeed.comm
    with contextlib.redirect_stdout(io.StringIO()):
        dcomm.init_distributed(dist_backend="fake", auto_mpi_discovery=False, verbose=False)
        ds = DeepSpeedConfig(copy.deepcopy(config), mpu=_MPU(dp=p["dp"], mp=p["tp"] * p["pp"] * p["cp"]))
    if ds.train_batch_size != p["global_batch"]:
        raise Rejected(f"train_batch_size {ds.train_batch_size} != plan {p['global_batch']}")
    if p["pp"] > 1 and not ds.zero_optimization_stage < ZeroStageEnum.gradients:  # PipelineEngine.__init__
        raise Rejected("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")
    if p["recompute"] != "none" and "activation_checkpointing" not in config:
        raise Rejected("no activation_checkpointing section with recompute")
    return f"ZeRO stage {ds.zero_optimization_stage}, batch {ds.train_batch_size} = {ds.train_micro_batch_size_per_gpu} x {ds.gradient_accumulation_steps} x dp {p['dp']}"


# -- launchers -----------------------------------------------------------------------------------------------


def shell(path: Path, entry: dict) -> str:
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    if res.returncode:
        raise Rejected(f"bash -n: {res.stderr.strip()}")
    if shutil.which("shellcheck") is None:
        raise Rejected("shellcheck not installed (apt-get install shellcheck)")
    res = subprocess.run(
        ["shellcheck", "-S", "warning", "-f", "gcc", str(path)], capture_output=True, text=True
    )
    if res.returncode:
        raise Rejected(f"shellcheck: {res.stdout.strip().splitlines()[0]}")
    return "bash -n, shellcheck"


def _command(text: str, start: str) -> list[str]:
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(start))
    joined = []
    for line in lines[i:]:
        joined.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(joined))


def _exported_env(text: str) -> dict[str, str]:
    return dict(re.findall(r"^export ([A-Z_]+)=(\S+)", text, flags=re.M))


def _torchrun(words: list[str], entry: dict, text: str) -> str:
    from torch.distributed.run import get_args_parser

    ns = get_args_parser().parse_args(words)
    nnodes, nproc = int(str(ns.nnodes).split(":")[-1]), int(ns.nproc_per_node)
    if nnodes * nproc != entry["gpus"]:
        raise Rejected(f"torchrun starts {nnodes} x {nproc} ranks for {entry['gpus']} GPUs")
    fw = entry["plan"]["framework"]
    if fw == "megatron":
        check_megatron_args(ns.training_script_args, _exported_env(text), entry)
    return f"torchrun {nnodes} x {nproc}"


def check_torchrun(path: Path, entry: dict) -> str:
    text = path.read_text()
    detail = shell(path, entry)
    return f"{detail}; {_torchrun(_command(text, 'exec torchrun')[2:], entry, text)}"


SBATCH_OPTIONS = {"job-name", "nodes", "ntasks-per-node", "gpus-per-node", "cpus-per-task", "time", "requeue",
                  "signal", "exclusive", "open-mode", "output"}  # fmt: skip
SBATCH_VALUE = {
    "nodes": r"\d+", "ntasks-per-node": r"\d+", "gpus-per-node": r"\d+", "cpus-per-task": r"\d+",
    "time": r"(\d+-)?\d{1,2}:\d{2}:\d{2}", "signal": r"(B:)?[A-Z0-9]+(@\d+)?", "open-mode": r"append|truncate",
    "job-name": r"[^\s]+", "output": r"[^\s]+",
}  # fmt: skip


def check_slurm(path: Path, entry: dict) -> str:
    text = path.read_text()
    detail = shell(path, entry)
    seen_command = False
    for line in text.splitlines()[1:]:
        if line.startswith("#SBATCH "):
            if seen_command:
                raise Rejected(f"{line!r} after the first command: sbatch ignores it")
            key, _, value = line.removeprefix("#SBATCH --").partition("=")
            if key not in SBATCH_OPTIONS:
                raise Rejected(f"unknown sbatch option --{key}")
            if key in SBATCH_VALUE and not re.fullmatch(SBATCH_VALUE[key], value):
                raise Rejected(f"sbatch --{key}={value}: invalid value")
        elif line.strip() and not line.startswith("#"):
            seen_command = True
    words = _command(text, "srun ")
    if words[-1] == "&":
        words = words[:-1]
    return f"{detail}; #SBATCH ok; {_torchrun(words[words.index('torchrun') + 1 :], entry, text)}"


# -- Kubernetes ----------------------------------------------------------------------------------------------


def _strict(schema: dict) -> dict:
    """Unknown fields become errors, as with kubectl apply --validate=strict."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        out.pop("x-kubernetes-validations", None)
        if out.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _crd_check(doc: dict, schema_file: str) -> str:
    import jsonschema

    crd = json.loads((HERE / "schemas" / schema_file).read_text())
    src = crd["_source"]
    if doc.get("kind") != src["kind"] or not str(doc.get("apiVersion", "")).endswith("/" + src["version"]):
        raise Rejected(f"{doc.get('apiVersion')}/{doc.get('kind')} is not {src['kind']} {src['version']}")
    schema = _strict(crd["schema"])
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema["properties"]["kind"] = {"type": "string"}
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        raise Rejected(f"{'.'.join(map(str, e.path))}: {e.message}"[:300])
    name = doc["metadata"]["name"]
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
        raise Rejected(f"metadata.name {name!r} is not a DNS-1123 label")
    return f"{src['kind']} schema ({src['repository']} {src['tag']})"


def _pvc_check(doc: dict) -> None:
    allowed = {"apiVersion", "kind", "metadata", "spec"}
    if set(doc) - allowed or doc.get("apiVersion") != "v1" or doc.get("kind") != "PersistentVolumeClaim":
        raise Rejected("bad PersistentVolumeClaim")
    spec = doc["spec"]
    if set(spec) - {"accessModes", "storageClassName", "resources", "volumeMode", "selector", "volumeName"}:
        raise Rejected(f"unknown PVC spec fields {set(spec)}")
    if not set(spec["accessModes"]) <= {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}:
        raise Rejected("bad accessModes")
    if not re.fullmatch(r"\d+(\.\d+)?([EPTGMk]i?)?", str(spec["resources"]["requests"]["storage"])):
        raise Rejected("bad storage quantity")


def check_k8s(path: Path, entry: dict, schema_file: str) -> str:
    import yaml

    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    job, rest = docs[0], docs[1:]
    detail = _crd_check(job, schema_file)
    claims = {d["metadata"]["name"] for d in rest if _pvc_check(d) is None}
    text = json.dumps(job)
    if not any(f'"claimName": "{c}"' in text for c in claims):
        raise Rejected("no persistent volume for the checkpoints")
    return detail + "; PVC"


# -- monitoring ----------------------------------------------------------------------------------------------


def _promtool_tests(path: Path) -> str:
    """A promtool unit test of the file's own rules: a healthy run at the predicted figures raises no alert; a
    run at 10 tokens/s raises TrainingThroughputLow with its annotations."""
    import yaml

    rules = [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]
    by_name = {r["alert"]: r for r in rules}
    tps_floor = float(re.search(r"<\s*([\d.e+]+)", by_name["TrainingThroughputLow"]["expr"]).group(1))
    healthy = [
        {"series": 'train_tokens_per_second{instance="n0"}', "values": f"{2 * tps_floor:.0f}+0x60"},
        {"series": 'train_loss{instance="n0"}', "values": "2+0x60"},
        {"series": 'DCGM_FI_DEV_FB_USED{gpu="0"}', "values": "1000+0x60"},
        {"series": 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}', "values": "95+0x60"},
        {"series": 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0"}', "values": "0.5+0x60"},
    ]
    net = by_name.get("ScaleOutBandwidthLow")
    if net:
        metric = re.search(r"rate\((\w+)\[", net["expr"]).group(1)
        floor = float(re.search(r"<\s*([\d.e+]+)", net["expr"]).group(1))
        healthy.append({"series": f'{metric}{{instance="n0"}}', "values": f"0+{4 * floor * 60:.0f}x60"})
    slow = [dict(h) for h in healthy]
    slow[0]["values"] = "10+0x60"
    low = by_name["TrainingThroughputLow"]
    annotations = {k: v.replace("{{ $value | humanize }}", "10") for k, v in low["annotations"].items()}
    test = {
        "rule_files": [path.name],  # relative to the test file
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": healthy,
             "alert_rule_test": [{"eval_time": "40m", "alertname": r["alert"], "exp_alerts": []} for r in rules]},
            {"interval": "1m", "input_series": slow,
             "alert_rule_test": [{"eval_time": "40m", "alertname": "TrainingThroughputLow",
                                  "exp_alerts": [{"exp_labels": low["labels"], "exp_annotations": annotations}]}]},
        ],
    }  # fmt: skip
    test_file = path.with_name("training-alerts.test.yml")
    test_file.write_text(yaml.safe_dump(test, allow_unicode=True))
    res = subprocess.run(["promtool", "test", "rules", str(test_file)], capture_output=True, text=True)
    if res.returncode:
        raise Rejected(f"promtool test rules: {(res.stdout + res.stderr).strip()[-300:]}")
    return "promtool test rules"


def check_prometheus(path: Path, entry: dict) -> str:
    if shutil.which("promtool") is None:
        raise Rejected("promtool not installed (apt-get install prometheus)")
    res = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    if res.returncode:
        raise Rejected(f"promtool: {(res.stderr or res.stdout).strip().splitlines()[-1]}")
    return f"promtool check rules ({res.stdout.strip().splitlines()[-1].strip()}); {_promtool_tests(path)}"


GRAFANA_UIDS: dict[str, str] = {}


def check_grafana(path: Path, entry: dict) -> str:
    board = json.loads(path.read_text())
    uid = board.get("uid", "")
    if not re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", uid):  # Grafana util.IsValidShortUID
        raise Rejected(f"uid {uid!r}: Grafana allows [a-zA-Z0-9-_], at most 40")
    if uid in GRAFANA_UIDS and GRAFANA_UIDS[uid] != str(path.parent):
        raise Rejected(f"uid {uid} also used by {Path(GRAFANA_UIDS[uid]).name}")
    GRAFANA_UIDS[uid] = str(path.parent)
    ids = [p["id"] for p in board["panels"]]
    if len(ids) != len(set(ids)) or not board.get("title") or not isinstance(board.get("schemaVersion"), int):
        raise Rejected("panel ids, title or schemaVersion")
    return f"uid {uid}"


def check_json(path: Path, entry: dict) -> str:
    json.loads(path.read_text())
    return "read back by capplan (matrix.py)"


CHECKS: dict[str, Check] = {
    "json": check_json,
    "torchtitan": check_torchtitan,
    "torchrun": check_torchrun,
    "megatron": check_megatron,
    "deepspeed": check_deepspeed,
    "slurm": check_slurm,
    "k8s": lambda p, e: check_k8s(p, e, "trainjob.json"),
    "k8s-v1": lambda p, e: check_k8s(p, e, "pytorchjob.json"),
    "prometheus": check_prometheus,
    "grafana": check_grafana,
}


def main(out: Path, verbose: bool) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    manifest = json.loads((out / "manifest.json").read_text())
    formats = list(CHECKS)
    rows, rejected, accepted, not_exported = [], 0, 0, 0
    for name, entry in manifest.items():
        cells = []
        for fmt in formats:
            if fmt in entry["refused"]:
                not_exported += 1
                cells.append(("not exported", entry["refused"][fmt]))
                continue
            path = out / name / entry["files"][fmt]
            try:
                detail = CHECKS[fmt](path, entry)
                accepted += 1
                cells.append(("accepted", detail))
            except Exception as exc:  # the consumer's own error, whatever its type
                rejected += 1
                cells.append(("REJECTED", _first_line(exc)))
                if verbose:
                    traceback.print_exc()
        rows.append((name, cells))
    width = max(len(n) for n in manifest)
    print(f"{'plan':<{width}}  " + " ".join(f"{f:<10}" for f in formats))
    marks = {"accepted": "ok", "REJECTED": "REJECTED", "not exported": "-"}
    for name, cells in rows:
        print(f"{name:<{width}}  " + " ".join(f"{marks[s]:<10}" for s, _ in cells))
    print()
    for name, cells in rows:
        for fmt, (state, detail) in zip(formats, cells, strict=True):
            if state != "accepted" or verbose:
                print(f"{name} × {fmt}: {state}: {detail}")
    print(f"\n{accepted} accepted, {rejected} rejected, {not_exported} not exported (capplan refuses: the framework "
          "cannot run the plan)")  # fmt: skip
    return 1 if rejected else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    sys.exit(main(a.out, a.verbose))
