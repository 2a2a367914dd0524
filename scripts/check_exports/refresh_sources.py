"""Maintainer script: refresh the consumer data ``validate.py`` reads, from fetched upstream checkouts.

CI reaches PyPI but not GitHub, so three things the checks need are kept here as data, each with its source
(repository, tag, commit, path, date):

* ``megatron_flags.json`` — every command-line flag of Megatron-LM's ``pretrain_gpt.py`` (name, type,
  choices, nargs, action, default), read from the real parser (``add_megatron_arguments``) of the tag that
  matches the pinned megatron-core: Megatron-LM's ``megatron/training`` is not on PyPI;
* ``schemas/trainjob.json`` — the ``TrainJob`` CRD's OpenAPI schema (Kubeflow Trainer);
* ``schemas/pytorchjob.json`` — the ``PyTorchJob`` CRD's OpenAPI schema (Kubeflow training operator v1).

    .venv-exports/bin/pip install six regex      # megatron/training imports them
    .venv-exports/bin/python scripts/check_exports/refresh_sources.py \\
        --megatron GIT_DIR --trainer GIT_DIR --training-operator GIT_DIR

Each GIT_DIR is a clone (bare is fine) holding the tags named in ``TAGS``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TAGS = {
    "megatron": ("NVIDIA/Megatron-LM", "core_v0.16.1", "megatron/training/arguments.py"),
    "trainer": ("kubeflow/trainer", "v2.3.0", "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"),
    "training-operator": ("kubeflow/training-operator", "v1.9.0", "manifests/base/crds/kubeflow.org_pytorchjobs.yaml"),
}  # fmt: skip

DUMP_PARSER = r"""
import argparse, json, sys
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
def plain(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return repr(v)
out = []
for a in parser._actions:
    if not a.option_strings or a.dest == "help":
        continue
    out.append({
        "flags": a.option_strings, "dest": a.dest, "action": type(a).__name__,
        "type": getattr(a.type, "__name__", None) if a.type is not None else None,
        "nargs": a.nargs, "const": plain(a.const), "default": plain(a.default),
        "choices": [plain(c) for c in a.choices] if a.choices is not None else None,
    })
json.dump(out, sys.stdout)
"""


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True).stdout


def _source(key: str, git_dir: Path) -> dict[str, str]:
    repo, tag, path = TAGS[key]
    commit = _git(git_dir, "rev-list", "-n", "1", tag).decode().strip()
    return {
        "repository": repo,
        "tag": tag,
        "commit": commit,
        "path": path,
        "refreshed": dt.date.today().isoformat(),
    }


def crd_schema(key: str, git_dir: Path, out: Path) -> None:
    repo, tag, path = TAGS[key]
    crd = yaml.safe_load(_git(git_dir, "show", f"{tag}:{path}"))
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    body = {"_source": _source(key, git_dir) | {"version": version["name"], "kind": crd["spec"]["names"]["kind"]},
            "schema": version["schema"]["openAPIV3Schema"]}  # fmt: skip
    out.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def megatron_flags(git_dir: Path, out: Path) -> None:
    repo, tag, path = TAGS["megatron"]
    with tempfile.TemporaryDirectory() as tmp:
        archive = _git(git_dir, "archive", "--format=tar", tag, "megatron")
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        dumped = subprocess.run([sys.executable, "-c", DUMP_PARSER], cwd=tmp, check=True, capture_output=True,
                                text=True, env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"}).stdout  # fmt: skip
    flags = json.loads(dumped)
    out.write_text(json.dumps({"_source": _source("megatron", git_dir), "flags": flags}, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--megatron", type=Path)
    ap.add_argument("--trainer", type=Path)
    ap.add_argument("--training-operator", type=Path)
    args = ap.parse_args()
    (HERE / "schemas").mkdir(exist_ok=True)
    if args.megatron:
        megatron_flags(args.megatron, HERE / "megatron_flags.json")
    if args.trainer:
        crd_schema("trainer", args.trainer, HERE / "schemas" / "trainjob.json")
    if args.training_operator:
        crd_schema("training-operator", args.training_operator, HERE / "schemas" / "pytorchjob.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
