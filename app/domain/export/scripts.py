"""Shell launchers: a torchrun command to run on every host, and a Slurm batch script (srun + torchrun)."""

from __future__ import annotations

import math

from app.domain.estimator.plan import Framework
from app.domain.export.document import PlanDocument
from app.domain.export.launch import (
    CHECKPOINT_DIR,
    DEEPSPEED_FILE,
    MAX_RESTARTS,
    RDZV_PORT,
    TORCHTITAN_FILE,
    checkpoint_interval_steps,
    framework_env,
    header_lines,
    layout,
    torchrun_args,
    unique_name,
)
from app.domain.export.text import comment_block, shell_command

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
    _, interval_note = checkpoint_interval_steps(doc)
    if fw is Framework.fsdp2:
        return [
            f"needs {TORCHTITAN_FILE} in the working directory (on PYTHONPATH): capplan export --format torchtitan",
            f"checkpoints and resume: set in {TORCHTITAN_FILE} ({interval_note})",
        ]
    if fw is Framework.deepspeed:
        return [
            f"needs {DEEPSPEED_FILE} in the working directory: capplan export --format deepspeed",
            "PLACEHOLDER train.py is your DeepSpeed training script (deepspeed.initialize with that config); it "
            f"saves every --save-interval steps into --save-dir ({interval_note}) and loads the latest on start",
        ]
    return [
        "pretrain_gpt.py is Megatron-LM's; add your --data-path, tokenizer and learning-rate arguments",
        f"--save/--load {CHECKPOINT_DIR}: a restart resumes from the latest checkpoint ({interval_note})",
    ]


def env_lines(doc: PlanDocument) -> str:
    """``export`` lines for what the framework needs on every rank (torchtitan: its config module's folder
    on PYTHONPATH; Megatron: CUDA_DEVICE_MAX_CONNECTIONS per plan)."""
    out = "".join(f"export {var}={value}  # {comment}\n" for var, value, comment in framework_env(doc))
    if doc.plan.framework is Framework.fsdp2:
        out += 'export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"  # torchtitan imports the config module\n'
    return out


def torchrun_script(doc: PlanDocument) -> tuple[str, list[str]]:
    lay = layout(doc)
    lines = header_lines(doc, "torchrun launch")
    lines += [
        f"run the same command on each of the {lay.hosts} host(s); RDZV_HOST is one host every host can reach",
        f"c10d rendezvous, static size {lay.hosts} x {lay.procs_per_host}, up to {MAX_RESTARTS} restarts of the "
        "whole group",
        f"placeholders: RDZV_HOST, NCCL_SOCKET_IFNAME ({SOCKET_IFNAME_PLACEHOLDER})",
        *companion_lines(doc),
    ]
    body = (
        "set -euo pipefail\n"
        f'RDZV_HOST="${{RDZV_HOST:-localhost}}"\n'
        f'RDZV_PORT="${{RDZV_PORT:-{RDZV_PORT}}}"\n'
        f'RDZV_ID="${{RDZV_ID:-{unique_name(doc)}}}"\n'
        + env_lines(doc)
        + "\nexec torchrun \\\n  "
        + shell_command(torchrun_args(doc))
    )
    return "#!/usr/bin/env bash\n" + comment_block(lines) + body, []


SLURM_MAX_TIME_MIN = 30 * 24 * 60
DEFAULT_SLURM_TIME_MIN = 24 * 60
REQUEUE_SIGNAL_S = 600


def slurm_time(doc: PlanDocument) -> tuple[str, str]:
    """``--time`` (D-HH:MM:00): capplan's time to train + 10 %, or a marked 24 h placeholder."""
    days = doc.estimate.time_to_train_days
    if days is None:
        minutes, why = DEFAULT_SLURM_TIME_MIN, "PLACEHOLDER: no token count in the plan"
    else:
        minutes = min(SLURM_MAX_TIME_MIN, max(10, math.ceil(days * 1.1 * 24 * 60)))
        why = f"capplan's time to train ({days:.2f} days) + 10 %"
    d, rest = divmod(minutes, 24 * 60)
    h, m = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:00", why


def slurm_script(doc: PlanDocument) -> tuple[str, list[str]]:
    lay, hw = layout(doc), doc.hardware
    time_limit, time_why = slurm_time(doc)
    directives = [
        f"--job-name={unique_name(doc)}",
        f"--nodes={lay.hosts}",
        "--ntasks-per-node=1",
        f"--gpus-per-node={lay.procs_per_host}",
    ]
    if hw.vcpus_per_host:
        directives.append(f"--cpus-per-task={hw.vcpus_per_host}")
    directives += [
        f"--time={time_limit}",
        "--requeue",
        f"--signal=B:USR1@{REQUEUE_SIGNAL_S}",
        "--exclusive",
        "--open-mode=append",
        "--output=%x-%j.out",
    ]
    notes: list[str] = []
    if lay.partial:
        notes.append(f"{lay.procs_per_host} of {hw.gpus_per_host} GPUs per host are used")
    head = comment_block(
        [
            *header_lines(doc, "Slurm batch script"),
            "submit: sbatch this file; one srun task per host starts torchrun, which starts the GPU ranks",
            f"--time {time_limit}: {time_why}; lower it to your partition's MaxTime: {REQUEUE_SIGNAL_S} s before "
            "the limit the job requeues itself and resumes from the latest checkpoint (so does a node failure, "
            "--requeue)",
            "container (pyxis/enroot): CONTAINER_IMAGE=your/image sbatch this file (PLACEHOLDER image)",
            f"placeholders: NCCL_SOCKET_IFNAME ({SOCKET_IFNAME_PLACEHOLDER}); add your partition/account directives",
            *companion_lines(doc),
            *(f"note: {n}" for n in notes),
        ]
    )
    env = "".join(f"export {name}={value}  # {comment}\n" for name, value, comment in nccl_env(doc))
    launch = torchrun_args(doc, rdzv_endpoint="${RDZV_HOST}:${RDZV_PORT}", rdzv_id="${SLURM_JOB_ID}")
    srun_opts = ["--kill-on-bad-exit=1"]
    if hw.vcpus_per_host:
        srun_opts.append(f"--cpus-per-task={hw.vcpus_per_host}")  # srun does not inherit it (Slurm >= 22.05)
    body = (
        "set -euo pipefail\n\n"
        f"# NCCL on {hw.fabric} ({hw.fabric_kind})\n"
        + env
        + env_lines(doc)
        + "\n# rendezvous on the first host of the allocation (no pipe into head: no SIGPIPE under pipefail)\n"
        'HOSTS=$(scontrol show hostnames "$SLURM_JOB_NODELIST")\n'
        "RDZV_HOST=${HOSTS%%$'\\n'*}\n"
        f"RDZV_PORT={RDZV_PORT}\n\n"
        "# near the time limit: requeue; the job resumes from the latest checkpoint\n"
        'requeue() { echo "requeueing ${SLURM_JOB_ID}"; scontrol requeue "${SLURM_JOB_ID}"; }\n'
        "trap requeue USR1\n"
        "CONTAINER=()\n"
        'if [ -n "${CONTAINER_IMAGE:-}" ]; then CONTAINER=("--container-image=${CONTAINER_IMAGE}" '
        '"--container-mounts=${PWD}:${PWD}" "--container-workdir=${PWD}"); fi\n\n'
        f'srun {" ".join(srun_opts)} "${{CONTAINER[@]}}" torchrun \\\n  '
        + shell_command(launch).rstrip("\n")
        + " &\nwait $!\n"
    )
    sbatch = "".join(f"#SBATCH {d}\n" for d in directives)
    return "#!/bin/bash\n" + head + sbatch + "\n" + body, notes
