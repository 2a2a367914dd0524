"""A Hugging Face model id (``org/name``) read from the local Hugging Face hub cache: no network, ever.

The cache is the one ``huggingface_hub`` itself uses (its documented environment variables, same order):
``$HF_HUB_CACHE``, else ``$HUGGINGFACE_HUB_CACHE`` (its older name), else ``$HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``. Its layout::

    models--{org}--{name}/refs/main                      the commit hash ``main`` points at
    models--{org}--{name}/snapshots/{commit}/config.json  (a link into blobs/)

``org/name@rev`` reads ``refs/{rev}`` (a branch or tag) or ``snapshots/{rev}`` (a commit). Without ``refs/main``
(a cache filled with ``--revision``) the only snapshot holding a config.json is used; several are an error that
lists them. Ids are checked against Hugging Face's own rules before any path is built from them, so a typed id
never leaves the cache folder. Importing this module loads no third-party package (the CLI imports it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from app.services.errors import InputError, field_error

HUB_ID_PATTERN = re.compile(
    r"(?P<org>[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?)/(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?)"
    r"(?:@(?P<rev>[A-Za-z0-9][A-Za-z0-9._-]{0,99}))?"
)
"""``org/name`` or ``org/name@revision``: letters, digits, ``.``, ``_``, ``-``; each part ≤ 96 characters, not
starting or ending with ``.`` or ``-`` (Hugging Face's repo-id rule); ``--`` and ``..`` are refused below."""

MAX_HUB_CONFIG_BYTES = 1_000_000
"""A config.json in the cache larger than this is not read (real ones are 1–10 KB)."""


class HubConfigError(ValueError):
    """The id is malformed, or its config.json is not in the cache (the message names every path looked at)."""


def looks_like_hub_id(text: str | None) -> bool:
    """Whether a model value is meant as a Hugging Face id: it has a ``/`` and is not a file name."""
    return bool(text) and "/" in str(text) and not str(text).endswith(".json")


def hub_cache_dir(environ: dict[str, str] | None = None) -> tuple[Path, str]:
    """The hub cache folder and how it was chosen (the variable that set it, or "the default")."""
    env = os.environ if environ is None else environ
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return Path(env[var]).expanduser(), f"${var}"
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub", "$HF_HOME/hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(
            env["XDG_CACHE_HOME"]
        ).expanduser() / "huggingface" / "hub", "$XDG_CACHE_HOME/huggingface/hub"
    return Path("~/.cache/huggingface/hub").expanduser(), "the default"


def parse_hub_id(model_id: str) -> tuple[str, str, str | None]:
    """(org, name, revision or None) of ``org/name[@rev]``; HubConfigError saying what a valid id looks like."""
    m = HUB_ID_PATTERN.fullmatch(model_id.strip())
    if m is None or "--" in m["org"] + "/" + m["name"] or ".." in model_id:
        raise HubConfigError(
            f"{model_id!r} is not a Hugging Face model id: use org/name (letters, digits, '.', '_', '-'; "
            "e.g. meta-llama/Llama-3.1-8B), optionally @revision, or a preset slug"
        )
    return m["org"], m["name"], m["rev"]


def _snapshot(repo: Path, rev: str | None, looked: list[str]) -> Path | None:
    """The snapshot folder of ``rev`` (default main) in one cached repo, recording each path looked at."""
    ref = repo / "refs" / (rev or "main")
    looked.append(str(ref))
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8", errors="replace").strip()
        if re.fullmatch(r"[0-9a-fA-F]{7,64}", commit):
            return repo / "snapshots" / commit
    if rev is not None:
        looked.append(str(repo / "snapshots" / rev))
        return repo / "snapshots" / rev
    snapshots = repo / "snapshots"
    looked.append(str(snapshots / "*" / "config.json"))
    found = sorted(p.parent for p in snapshots.glob("*/config.json")) if snapshots.is_dir() else []
    if len(found) > 1:
        names = ", ".join(p.name[:12] for p in found)
        raise HubConfigError(
            f"{repo} has no refs/main and {len(found)} snapshots with a config.json ({names}): "
            "name one as org/name@<commit>"
        )
    return found[0] if found else None


def read_hub_config(model_id: str, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The cached config.json of ``model_id`` as a dict, with ``_name_or_path`` set to the id when the file has
    none (so the imported model is named after it). HubConfigError naming the cache and the paths looked at."""
    from app.schemas import load_json_text

    org, name, rev = parse_hub_id(model_id)
    cache, chosen = hub_cache_dir(environ)
    repo = cache / f"models--{org}--{name}"
    looked: list[str] = []
    snapshot = _snapshot(repo, rev, looked) if repo.is_dir() else None
    path = snapshot / "config.json" if snapshot is not None else None
    if path is not None:
        looked.append(str(path))
    if path is None or not path.is_file():
        where = (
            ", ".join(looked)
            if looked
            else f"{repo}/refs/{rev or 'main'} and {repo}/snapshots/<commit>/config.json (there is no {repo.name})"
        )
        raise HubConfigError(
            f"{org}/{name} is not in the local Hugging Face cache {cache} ({chosen}); looked for {where}. "
            f"capplan never downloads: fetch it with `huggingface-cli download {org}/{name} config.json`, "
            "set HF_HUB_CACHE or HF_HOME to the cache that holds it, or give the config.json itself"
        )
    if path.stat().st_size > MAX_HUB_CONFIG_BYTES:
        raise HubConfigError(f"{path} is larger than {MAX_HUB_CONFIG_BYTES:,} bytes; not a config.json")
    try:
        config = load_json_text(path.read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError:
        raise HubConfigError(f"{path} is not UTF-8 text; not a config.json") from None
    except ValueError as exc:
        raise HubConfigError(str(exc)) from None
    if not isinstance(config, dict):
        raise HubConfigError(f"{path} must hold a JSON object")
    config.setdefault("_name_or_path", f"{org}/{name}")
    return config


def hub_config_for(model: str | None, field: str = "model") -> dict[str, Any] | None:
    """The cached config.json when ``model`` is a Hugging Face id, None for a preset slug; an InputError naming
    ``field`` when the id is malformed or not cached."""
    if not looks_like_hub_id(model):
        return None
    try:
        return read_hub_config(str(model))
    except HubConfigError as exc:
        raise InputError([field_error(field, str(exc), "value_error.hub_cache")]) from None
