"""Kubernetes PyTorchJob (Kubeflow training operator, ``kubeflow.org/v1``) with a TorchElastic policy.

One Worker pod per host, each running torchrun with that host's GPUs. The operator injects the rendezvous
endpoint (``PET_RDZV_ENDPOINT``, the first worker's service) that torchrun reads from the environment.
``minReplicas = maxReplicas``: the plan's degrees fix the world size, so elasticity here means restarting
the whole group (``maxRestarts`` times) after a failure, not resizing it.
"""

from __future__ import annotations

import re

from app.domain.export.document import PlanDocument
from app.domain.export.launch import (
    DEEPSPEED_FILE,
    MAX_RESTARTS,
    TORCHTITAN_FILE,
    header_lines,
    layout,
    torchrun_args,
)
from app.domain.export.scripts import nccl_env
from app.domain.export.text import comment_block, yaml_scalar
from app.domain.plan import Framework

IMAGE_PLACEHOLDER = "your-registry/llm-trainer:latest"
CONFIG_DIR = "/etc/capplan/"
MAX_NAME = 50  # leaves room for the operator's "-worker-N" pod suffixes under the 63-character limit


def k8s_name(name: str) -> str:
    """A DNS-1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:MAX_NAME].rstrip("-")
    return label or "capplan-job"


def _list(items: list[str], indent: int) -> str:
    pad = " " * indent
    return "".join(f"{pad}- {yaml_scalar(item)}\n" for item in items)


def pytorchjob_yaml(doc: PlanDocument) -> tuple[str, list[str]]:
    lay, hw = layout(doc), doc.hardware
    name = k8s_name(doc.name)
    command = ["torchrun", *torchrun_args(doc, rdzv_endpoint=None, rdzv_id=None, config_dir=CONFIG_DIR)]
    uses_config = doc.plan.framework is not Framework.megatron
    config_file = TORCHTITAN_FILE if doc.plan.framework is Framework.fsdp2 else DEEPSPEED_FILE
    lines = [
        *header_lines(doc, "Kubeflow PyTorchJob"),
        f"{lay.hosts} worker pod(s) x {lay.procs_per_host} GPUs; the training operator injects the c10d "
        "rendezvous endpoint (PET_RDZV_ENDPOINT)",
        f"minReplicas = maxReplicas: the plan's parallel degrees fix the world size; up to {MAX_RESTARTS} "
        "group restarts",
        f"image: {IMAGE_PLACEHOLDER} is a PLACEHOLDER for your training image (torch, NCCL, the framework)",
    ]
    if uses_config:
        lines.append(
            f"create the config map first: kubectl create configmap {name}-config --from-file={config_file}"
        )
    limits = [("nvidia.com/gpu", lay.procs_per_host)]
    if hw.fabric_kind == "efa":
        limits.append(("vpc.amazonaws.com/efa", hw.nics_per_host))
    env = nccl_env(doc)
    out = [comment_block(lines)]
    out.append(
        "apiVersion: kubeflow.org/v1\n"
        "kind: PyTorchJob\n"
        "metadata:\n"
        f"  name: {yaml_scalar(name)}\n"
        "  labels:\n"
        '    app.kubernetes.io/managed-by: "capplan"\n'
        "spec:\n"
        f"  nprocPerNode: {yaml_scalar(str(lay.procs_per_host))}\n"
        "  elasticPolicy:\n"
        '    rdzvBackend: "c10d"\n'
        f"    minReplicas: {lay.hosts}\n"
        f"    maxReplicas: {lay.hosts}\n"
        f"    maxRestarts: {MAX_RESTARTS}\n"
        "  pytorchReplicaSpecs:\n"
        "    Worker:\n"
        f"      replicas: {lay.hosts}\n"
        "      restartPolicy: OnFailure\n"
        "      template:\n"
        "        spec:\n"
        "          containers:\n"
        '            - name: "pytorch"\n'
        f"              image: {yaml_scalar(IMAGE_PLACEHOLDER)}\n"
        '              workingDir: "/workspace"\n'
        "              command:\n" + _list(command, 16) + "              env:\n"
    )
    for var, value, comment in env:
        out.append(f"                - name: {yaml_scalar(var)}  # {comment}\n")
        out.append(f"                  value: {yaml_scalar(value)}\n")
    resources = "".join(f"                  {key}: {value}\n" for key, value in limits)
    out.append(
        "              resources:\n"
        "                limits:\n"
        + resources
        + "                requests:\n"
        + resources
        + "              volumeMounts:\n"
        '                - name: "dshm"\n'
        '                  mountPath: "/dev/shm"\n'
    )
    if uses_config:
        out.append(
            f'                - name: "config"\n                  mountPath: {yaml_scalar(CONFIG_DIR.rstrip("/"))}\n'
        )
    out.append(
        '          volumes:\n            - name: "dshm"\n              emptyDir:\n                medium: "Memory"\n'
    )
    if uses_config:
        out.append(
            '            - name: "config"\n              configMap:\n'
            f"                name: {yaml_scalar(name + '-config')}\n"
        )
    return "".join(out), []
