"""Kubernetes: a Kubeflow Trainer v2 ``TrainJob`` (``k8s``) and the older ``kubeflow.org/v1`` PyTorchJob
(``k8s-v1``, for clusters still on the training operator v1, whose API was removed upstream in 2025).

``TrainJob`` (``trainer.kubeflow.org/v1alpha1``, Trainer 2.3): ``runtimeRef`` the ``torch-distributed``
ClusterTrainingRuntime the Trainer installs; ``trainer.numNodes`` pods with ``numProcPerNode`` GPUs each;
the torch plugin sets ``PET_NNODES``/``PET_NPROC_PER_NODE``/``PET_NODE_RANK``/``PET_MASTER_ADDR`` for
torchrun. Volumes go in through ``runtimePatches`` (the only place a TrainJob may add them): the checkpoint
``PersistentVolumeClaim`` (a second YAML document in the same file), ``/dev/shm`` and the config map.

PyTorchJob: one Worker pod per host, each running torchrun with that host's GPUs; the operator injects the
rendezvous endpoint (``PET_RDZV_ENDPOINT``). ``minReplicas = maxReplicas``: the plan's degrees fix the world
size, so elasticity here means restarting the whole group (``maxRestarts`` times), not resizing it.

Both mount the checkpoint claim at ``/workspace/checkpoints``: a restarted pod resumes from the latest one.
"""

from __future__ import annotations

import math
import re

from app.domain.estimator.plan import Framework
from app.domain.export.document import PlanDocument
from app.domain.export.launch import (
    CHECKPOINT_DIR,
    DEEPSPEED_FILE,
    MAX_RESTARTS,
    TORCHTITAN_FILE,
    framework_env,
    header_lines,
    layout,
    plan_hash,
    torchrun_args,
    training_command,
)
from app.domain.export.scripts import nccl_env
from app.domain.export.text import comment_block, shell_word, yaml_scalar
from app.domain.reliability.formulas import plan_checkpoint_bytes_per_param

IMAGE_PLACEHOLDER = "your-registry/llm-trainer:latest"
STORAGE_CLASS_PLACEHOLDER = "your-rwx-storage-class"
CONFIG_DIR = "/etc/capplan/"
WORKDIR = "/workspace"
TRAINER_RUNTIME = "torch-distributed"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
KEEP_CHECKPOINTS = 3
MAX_NAME = 40  # leaves room for "-node-0-N" / "-worker-N" pod suffixes under the 63-character limit
GB = 10**9


def k8s_name(name: str, suffix: str = "") -> str:
    """A DNS-1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, with ``suffix``
    (the plan hash) kept whole so two plans never share a name."""
    room = MAX_NAME - (len(suffix) + 1 if suffix else 0)
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:room].rstrip("-") or "capplan-job"
    return f"{label}-{suffix}" if suffix else label


def job_k8s_name(doc: PlanDocument) -> str:
    return k8s_name(doc.name, plan_hash(doc))


def checkpoint_claim_gb(doc: PlanDocument) -> int:
    """Room for ``KEEP_CHECKPOINTS`` resumable checkpoints (weights + master + optimizer state)."""
    size = doc.estimate.parameters_total * plan_checkpoint_bytes_per_param(doc.plan)
    return max(1, math.ceil(size * KEEP_CHECKPOINTS / GB))


def pvc_yaml(doc: PlanDocument) -> str:
    name = job_k8s_name(doc) + "-ckpt"
    return (
        "---\n"
        "apiVersion: v1\n"
        "kind: PersistentVolumeClaim\n"
        "metadata:\n"
        f"  name: {yaml_scalar(name)}\n"
        "  labels:\n"
        '    app.kubernetes.io/managed-by: "capplan"\n'
        "spec:\n"
        "  accessModes:\n"
        '    - "ReadWriteMany"\n'
        f"  storageClassName: {yaml_scalar(STORAGE_CLASS_PLACEHOLDER)}  # PLACEHOLDER: a shared (RWX) class\n"
        "  resources:\n"
        "    requests:\n"
        f'      storage: "{checkpoint_claim_gb(doc)}G"  # {KEEP_CHECKPOINTS} checkpoints of this plan\n'
    )


def _list(items: list[str], indent: int) -> str:
    pad = " " * indent
    return "".join(f"{pad}- {yaml_scalar(item)}\n" for item in items)


def _env(doc: PlanDocument) -> list[tuple[str, str, str]]:
    env = [*nccl_env(doc), *framework_env(doc)]
    if doc.plan.framework is Framework.fsdp2:
        env.append(
            (
                "PYTHONPATH",
                CONFIG_DIR.rstrip("/"),
                f"torchtitan imports {TORCHTITAN_FILE} from the config map",
            )
        )
    return env


def _config_file(doc: PlanDocument) -> str | None:
    fw = doc.plan.framework
    if fw is Framework.megatron:
        return None
    return TORCHTITAN_FILE if fw is Framework.fsdp2 else DEEPSPEED_FILE


def _common_lines(doc: PlanDocument, what: str, name: str) -> list[str]:
    lines = [
        *header_lines(doc, what),
        f"image: {IMAGE_PLACEHOLDER} is a PLACEHOLDER for your training image (torch, NCCL, the framework)",
        f"checkpoints: the claim {name}-ckpt at {WORKDIR}/{CHECKPOINT_DIR}; a restarted pod resumes from the latest "
        f"(PLACEHOLDER storage class {STORAGE_CLASS_PLACEHOLDER})",
    ]
    config_file = _config_file(doc)
    if config_file:
        lines.append(
            f"create the config map first: kubectl create configmap {name}-config --from-file={config_file}"
        )
    return lines


def trainjob_yaml(doc: PlanDocument) -> tuple[str, list[str]]:
    """Kubeflow Trainer v2 TrainJob with the checkpoint claim."""
    lay, hw = layout(doc), doc.hardware
    name = job_k8s_name(doc)
    config_dir = CONFIG_DIR if _config_file(doc) else ""
    torchrun = ["torchrun", f"--nnodes={lay.hosts}", f"--nproc-per-node={lay.procs_per_host}",
                f"--max-restarts={MAX_RESTARTS}", *training_command(doc, config_dir)]  # fmt: skip
    shell = f"cd {WORKDIR} && exec " + " ".join(shell_word(w) for w in torchrun)
    lines = [
        *_common_lines(doc, "Kubeflow Trainer v2 TrainJob", name),
        f"{lay.hosts} node(s) x {lay.procs_per_host} GPUs from the ClusterTrainingRuntime {TRAINER_RUNTIME!r}, which "
        "sets torchrun's PET_* rendezvous variables; apply with kubectl apply -f (the claim comes with it)",
    ]
    limits = [("nvidia.com/gpu", lay.procs_per_host)]
    if hw.fabric_kind == "efa":
        limits.append(("vpc.amazonaws.com/efa", hw.nics_per_host))
    resources = "".join(f"          {key}: {value}\n" for key, value in limits)
    out = [comment_block(lines)]
    out.append(
        f"apiVersion: {TRAINER_API}\n"
        "kind: TrainJob\n"
        "metadata:\n"
        f"  name: {yaml_scalar(name)}\n"
        "  labels:\n"
        '    app.kubernetes.io/managed-by: "capplan"\n'
        "spec:\n"
        "  runtimeRef:\n"
        f"    name: {yaml_scalar(TRAINER_RUNTIME)}\n"
        "  trainer:\n"
        f"    image: {yaml_scalar(IMAGE_PLACEHOLDER)}\n"
        "    command:\n" + _list(["bash", "-c", shell], 6) + f"    numNodes: {lay.hosts}\n"
        f"    numProcPerNode: {lay.procs_per_host}\n"
        "    resourcesPerNode:\n"
        "      limits:\n"
        + resources.replace("          ", "        ")
        + "      requests:\n"
        + resources.replace("          ", "        ")
        + "    env:\n"
    )
    for var, value, comment in _env(doc):
        out.append(f"      - name: {yaml_scalar(var)}  # {comment}\n        value: {yaml_scalar(value)}\n")
    mounts = [("checkpoints", f"{WORKDIR}/{CHECKPOINT_DIR}"), ("dshm", "/dev/shm")]
    if config_dir:
        mounts.append(("config", CONFIG_DIR.rstrip("/")))
    pad = " " * 18
    out.append(
        "  runtimePatches:\n"
        '    - manager: "capplan"\n'
        "      trainingRuntimeSpec:\n"
        "        template:\n"
        "          spec:\n"
        "            replicatedJobs:\n"
        '              - name: "node"\n'
        "                template:\n"
        "                  spec:\n"
        "                    template:\n"
        "                      spec:\n"
        "                        containers:\n"
        '                          - name: "node"\n'
        "                            volumeMounts:\n"
        + "".join(
            f"                              - name: {yaml_scalar(v)}\n"
            f"                                mountPath: {yaml_scalar(path)}\n"
            for v, path in mounts
        )
        + "                        volumes:\n"
        + _volumes(doc, name, pad + "      ")
    )
    return "".join(out) + pvc_yaml(doc), []


def _volumes(doc: PlanDocument, name: str, pad: str) -> str:
    out = (
        f'{pad}- name: "checkpoints"\n{pad}  persistentVolumeClaim:\n{pad}    claimName: {yaml_scalar(name + "-ckpt")}\n'
        f'{pad}- name: "dshm"\n{pad}  emptyDir:\n{pad}    medium: "Memory"\n'
    )
    if _config_file(doc):
        out += f'{pad}- name: "config"\n{pad}  configMap:\n{pad}    name: {yaml_scalar(name + "-config")}\n'
    return out


def pytorchjob_yaml(doc: PlanDocument) -> tuple[str, list[str]]:
    lay, hw = layout(doc), doc.hardware
    name = job_k8s_name(doc)
    command = ["torchrun", *torchrun_args(doc, rdzv_endpoint=None, rdzv_id=None, config_dir=CONFIG_DIR)]
    lines = [
        *_common_lines(doc, "Kubeflow PyTorchJob (kubeflow.org/v1, training operator v1)", name),
        f"{lay.hosts} worker pod(s) x {lay.procs_per_host} GPUs; the training operator injects the c10d "
        "rendezvous endpoint (PET_RDZV_ENDPOINT)",
        f"minReplicas = maxReplicas: the plan's parallel degrees fix the world size; up to {MAX_RESTARTS} "
        "group restarts",
    ]
    limits = [("nvidia.com/gpu", lay.procs_per_host)]
    if hw.fabric_kind == "efa":
        limits.append(("vpc.amazonaws.com/efa", hw.nics_per_host))
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
        f"              workingDir: {yaml_scalar(WORKDIR)}\n"
        "              command:\n" + _list(command, 16) + "              env:\n"
    )
    for var, value, comment in _env(doc):
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
        '                - name: "checkpoints"\n'
        f"                  mountPath: {yaml_scalar(WORKDIR + '/' + CHECKPOINT_DIR)}\n"
        '                - name: "dshm"\n'
        '                  mountPath: "/dev/shm"\n'
    )
    if _config_file(doc):
        out.append(
            f'                - name: "config"\n                  mountPath: {yaml_scalar(CONFIG_DIR.rstrip("/"))}\n'
        )
    out.append("          volumes:\n" + _volumes(doc, name, " " * 12))
    return "".join(out) + pvc_yaml(doc), []
