"""What every launcher shares: hosts × processes per host, the training program per framework, the torchrun
argument list, and the header comment that says which plan and estimate a file came from."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from app.domain.estimator.plan import Framework, Precision
from app.domain.export.document import PlanDocument

RDZV_PORT = 29500
MAX_RESTARTS = 3
TORCHTITAN_FILE = "torchtitan_config.py"
TORCHTITAN_MODULE = "torchtitan_config"
TORCHTITAN_CONFIG_FUNCTION = "capplan_plan"
DEEPSPEED_FILE = "ds_config.json"
MEGATRON_SCRIPT = "pretrain_gpt.py"
DEEPSPEED_SCRIPT = "train.py"
GIB = 2**30
CHECKPOINT_DIR = "checkpoints"
"""Where every format saves and resumes checkpoints (relative to the working directory; a persistent volume
under Kubernetes)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """``hosts`` machines running ``procs_per_host`` ranks each (the same on every host, as torchrun needs)."""

    hosts: int
    procs_per_host: int
    partial: bool  # fewer ranks than GPUs on some host

    @property
    def world_size(self) -> int:
        return self.hosts * self.procs_per_host


def layout(doc: PlanDocument) -> Layout:
    """Fill whole hosts; a GPU count that is no multiple of the host size uses the largest even split."""
    gpus, per_host = doc.hardware.gpus, doc.hardware.gpus_per_host
    if gpus <= per_host:
        return Layout(hosts=1, procs_per_host=gpus, partial=gpus < per_host)
    procs = max(d for d in range(1, per_host + 1) if gpus % d == 0)
    return Layout(hosts=gpus // procs, procs_per_host=procs, partial=procs < per_host)


def plan_hash(doc: PlanDocument) -> str:
    """8 hex digits that tell plans apart: model, hardware, plan and tokens (not the estimate, which a
    catalog update may move). Goes into job names, Kubernetes names and Grafana uids."""
    key = {
        "model": doc.model.preset or doc.model.hf_config,
        "hardware": doc.hardware.model_dump(mode="json"),
        "plan": doc.plan.model_dump(mode="json"),
        "tokens": doc.tokens,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]


def unique_name(doc: PlanDocument) -> str:
    """The document's job name with the plan hash: two plans of one model on one cluster differ."""
    return f"{doc.name}-{plan_hash(doc)}"


DEFAULT_CHECKPOINT_INTERVAL_STEPS = 500


def checkpoint_interval_steps(doc: PlanDocument) -> tuple[int, str]:
    """The reliability model's checkpoint interval in optimizer steps, and where it comes from.

    ``round(interval_s / step_time_s)``, at least 1 and at most the run's steps. A document without the
    interval (written before capplan recorded it) gets a marked placeholder."""
    est = doc.estimate
    steps = doc.steps
    if est.checkpoint_interval_s is None or est.step_time_s <= 0:
        value = (
            DEFAULT_CHECKPOINT_INTERVAL_STEPS
            if steps is None
            else min(DEFAULT_CHECKPOINT_INTERVAL_STEPS, steps)
        )
        return value, "placeholder: the plan file has no checkpoint interval (re-export it from capplan)"
    value = max(1, round(est.checkpoint_interval_s / est.step_time_s))
    if steps is not None:
        value = min(value, steps)
    return value, (
        f"capplan's reliability model: checkpoint every {est.checkpoint_interval_s:,.0f} s "
        f"= {value} steps of {est.step_time_s:.3f} s"
    )


def framework_env(doc: PlanDocument) -> list[tuple[str, str, str]]:
    """(variable, value, comment) each framework needs on every rank, chosen per plan.

    Megatron-LM's validate_args requires ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with TP or CP > 1 (before
    Blackwell) so the TP/CP communication kernels are queued ahead of the GEMMs they overlap, and refuses it
    with torch FSDP2 (which needs it unset or > 1). An NVFP4 plan without the Hadamard transform sets
    ``NVTE_NVFP4_DISABLE_RHT=1``, which Transformer Engine reads when it makes the recipe."""
    p = doc.plan
    env = []
    if p.framework is Framework.megatron and not p.sharding.shards_params and p.tp * p.cp > 1:
        env.append(
            (
                "CUDA_DEVICE_MAX_CONNECTIONS",
                "1",
                "Megatron with TP/CP > 1: one hardware queue orders comm before compute",
            )
        )
    if p.precision is Precision.nvfp4 and not p.nvfp4_rht:
        # read by Transformer Engine's NVFP4BlockScaling when the recipe is made (its default keeps the transform)
        env.append(
            ("NVTE_NVFP4_DISABLE_RHT", "1", "NVFP4 without the random Hadamard transform, as estimated")
        )
    return env


def training_command(doc: PlanDocument, config_dir: str = "") -> list[str]:
    """The program torchrun starts on every rank, with its arguments, for the plan's framework."""
    from app.domain.export.megatron import megatron_args

    fw = doc.plan.framework
    if fw is Framework.fsdp2:
        return [
            "-m",
            "torchtitan.train",
            "--module",
            TORCHTITAN_MODULE,
            "--config",
            TORCHTITAN_CONFIG_FUNCTION,
        ]
    if fw is Framework.megatron:
        return [MEGATRON_SCRIPT, *megatron_args(doc)]
    interval, _ = checkpoint_interval_steps(doc)
    return [
        DEEPSPEED_SCRIPT, "--deepspeed", "--deepspeed_config", config_dir + DEEPSPEED_FILE,
        "--save-dir", CHECKPOINT_DIR, "--save-interval", str(interval),
    ]  # fmt: skip


def torchrun_options(doc: PlanDocument, *, rdzv_endpoint: str | None, rdzv_id: str | None) -> list[str]:
    """torchrun's own options (torch.distributed.run): static world size, c10d rendezvous, restarts."""
    lay = layout(doc)
    opts = [f"--nnodes={lay.hosts}", f"--nproc-per-node={lay.procs_per_host}", "--rdzv-backend=c10d"]
    if rdzv_endpoint is not None:
        opts.append(f"--rdzv-endpoint={rdzv_endpoint}")
    if rdzv_id is not None:
        opts.append(f"--rdzv-id={rdzv_id}")
    opts.append(f"--max-restarts={MAX_RESTARTS}")
    return opts


def torchrun_args(
    doc: PlanDocument,
    *,
    rdzv_endpoint: str | None = "${RDZV_HOST}:${RDZV_PORT}",
    rdzv_id: str | None = "${RDZV_ID}",
    config_dir: str = "",
) -> list[str]:
    """Everything after ``torchrun`` on the command line (what ``get_args_parser().parse_args`` takes)."""
    return [
        *torchrun_options(doc, rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id),
        *training_command(doc, config_dir),
    ]


def plan_line(doc: PlanDocument) -> str:
    p = doc.plan
    parts = [f"tp={p.tp}", f"pp={p.pp}"]
    if p.vpp > 1:
        parts.append(f"vpp={p.vpp}")
    parts.append(f"dp={p.dp}")
    if p.cp > 1:
        parts.append(f"cp={p.cp}")
    if p.ep > 1:
        parts.append(f"ep={p.ep}")
    if doc.arch.is_moe and p.etp != p.tp:
        parts.append(f"etp={p.etp}")
    parts.append(p.sharding.value + (f"(group {p.shard_group_size})" if p.shard_group_size else ""))
    if p.offload.value != "none":
        parts.append(f"offload={p.offload.value}")
    parts += [
        f"micro-batch={p.micro_batch}",
        f"global-batch={p.global_batch}",
        f"seq={p.seq_len}",
        f"recompute={p.recompute.value}",
        p.precision.value + (f"({p.fp8_recipe_used.value})" if p.precision.value == "fp8" else ""),
        p.framework.value,
    ]
    return " ".join(parts)


def header_lines(doc: PlanDocument, what: str) -> list[str]:
    """Provenance comment lines: what the file is, the model, cluster, plan and the estimate at export."""
    hw, est, lay = doc.hardware, doc.estimate, layout(doc)
    model = doc.model.preset or f"{doc.arch.slug} (imported config.json)"
    verdict = "fits" if est.fits else "DOES NOT FIT"
    lines = [
        f"{what} generated by capplan from plan {doc.name!r} (schema {doc.schema_id})",
        f"model {model} on {hw.gpus} x {hw.gpu}: {lay.hosts} x {lay.procs_per_host} GPUs ({hw.node}, {hw.fabric})",
        f"plan: {plan_line(doc)}",
        f"estimate: {verdict}, peak {est.peak_memory_bytes / GIB:.1f} of {est.usable_memory_bytes / GIB:.1f} GiB per GPU; "
        f"step {est.step_time_s:.3f} s, {est.tokens_per_s:,.0f} tokens/s, MFU {est.mfu:.1%}",
    ]
    if not est.fits:
        lines.append("WARNING: the estimate says this plan does not fit in GPU memory")
    return lines


def steps_or_default(doc: PlanDocument, default: int = 1000) -> tuple[int, str]:
    steps = doc.steps
    if steps is None:
        return default, "placeholder: the plan has no token count (give --tokens to derive the steps)"
    return steps, f"{doc.tokens:.4g} tokens / {doc.plan.tokens_per_step:,} tokens per step"
