"""Shell launchers: a torchrun command to run on every host, and a Slurm batch script (srun + torchrun)."""

from __future__ import annotations

from app.domain.export.document import PlanDocument
from app.domain.export.launch import (
    DEEPSPEED_FILE,
    MAX_RESTARTS,
    RDZV_PORT,
    TORCHTITAN_FILE,
    header_lines,
    layout,
    torchrun_args,
)
from app.domain.export.text import comment_block, shell_command
from app.domain.plan import Framework

SOCKET_IFNAME_PLACEHOLDER = "eth0"


def nccl_env(doc: PlanDocument) -> list[tuple[str, str, str]]:
    """(variable, value, comment) for NCCL on the plan's scale-out fabric."""
    kind = doc.hardware.fabric_kind
    out: list[tuple[str, str, str]] = []
    if kind == "efa":
        out += [
            ("FI_PROVIDER", "efa", "NCCL over AWS EFA through the aws-ofi-nccl plugin (libfabric)"),
            ("FI_EFA_USE_DEVICE_RDMA", "1", "GPUDirect RDMA over EFA (p4d and later)"),
        ]
    elif kind in {"infiniband", "roce"}:
        out.append(
            ("NCCL_IB_HCA", "mlx5", "the compute-fabric HCAs (ibv_devinfo); list them if others exist")
        )
        if kind == "roce":
            out.append(("NCCL_IB_GID_INDEX", "3", "RoCE v2 GID (show_gids)"))
    out += [
        (
            "NCCL_SOCKET_IFNAME",
            SOCKET_IFNAME_PLACEHOLDER,
            "PLACEHOLDER: the interface the hosts reach each other on for bootstrap (ip -br addr)",
        ),
        ("NCCL_DEBUG", "WARN", "INFO shows the transport NCCL picked"),
    ]
    return out


def companion_lines(doc: PlanDocument) -> list[str]:
    fw = doc.plan.framework
    if fw is Framework.fsdp2:
        return [f"needs {TORCHTITAN_FILE} in the working directory: capplan export --format torchtitan"]
    if fw is Framework.deepspeed:
        return [
            f"needs {DEEPSPEED_FILE} in the working directory: capplan export --format deepspeed",
            "train.py is your DeepSpeed training script (deepspeed.initialize with that config)",
        ]
    return ["pretrain_gpt.py is Megatron-LM's; add your --data-path, tokenizer and learning-rate arguments"]


def torchrun_script(doc: PlanDocument) -> tuple[str, list[str]]:
    lay = layout(doc)
    lines = header_lines(doc, "torchrun launch")
    lines += [
        f"run the same command on each of the {lay.hosts} host(s); RDZV_HOST is one host every host can reach",
        f"c10d rendezvous, static size {lay.hosts} x {lay.procs_per_host}, up to {MAX_RESTARTS} restarts of the "
        "whole group",
        *companion_lines(doc),
    ]
    body = (
        "set -euo pipefail\n"
        f'RDZV_HOST="${{RDZV_HOST:-localhost}}"\n'
        f'RDZV_PORT="${{RDZV_PORT:-{RDZV_PORT}}}"\n'
        f'RDZV_ID="${{RDZV_ID:-{doc.name}}}"\n\n'
        "exec torchrun \\\n  " + shell_command(torchrun_args(doc))
    )
    return "#!/usr/bin/env bash\n" + comment_block(lines) + body, []


def slurm_script(doc: PlanDocument) -> tuple[str, list[str]]:
    lay, hw = layout(doc), doc.hardware
    directives = [
        f"--job-name={doc.name}",
        f"--nodes={lay.hosts}",
        "--ntasks-per-node=1",
        f"--gpus-per-node={lay.procs_per_host}",
    ]
    if hw.vcpus_per_host:
        directives.append(f"--cpus-per-task={hw.vcpus_per_host}")
    directives += ["--exclusive", "--output=%x-%j.out"]
    notes: list[str] = []
    if lay.partial:
        notes.append(f"{lay.procs_per_host} of {hw.gpus_per_host} GPUs per host are used")
    head = comment_block(
        [
            *header_lines(doc, "Slurm batch script"),
            "submit: sbatch this file; one srun task per host starts torchrun, which starts the GPU ranks",
            *companion_lines(doc),
            *(f"note: {n}" for n in notes),
        ]
    )
    env = "".join(f"export {name}={value}  # {comment}\n" for name, value, comment in nccl_env(doc))
    launch = torchrun_args(doc, rdzv_endpoint="${RDZV_HOST}:${RDZV_PORT}", rdzv_id="${SLURM_JOB_ID}")
    body = (
        "set -euo pipefail\n\n"
        f"# NCCL on {hw.fabric} ({hw.fabric_kind})\n"
        + env
        + "\n# rendezvous on the first host of the allocation\n"
        'RDZV_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        f"RDZV_PORT={RDZV_PORT}\n\n"
        "srun --kill-on-bad-exit=1 torchrun \\\n  " + shell_command(launch)
    )
    sbatch = "".join(f"#SBATCH {d}\n" for d in directives)
    return "#!/bin/bash\n" + head + sbatch + "\n" + body, notes
